/* The board port of the rig firmware: the HAL (rig_fw.h) on board support (bsp.h) and the main loop.
 *
 * The transmit ring is a fixed 16 KiB buffer drained by the UART (bsp_uart_kick); frames that do not fit
 * whole are dropped (the core counts tx_dropped). The rig's table comes from a generated rig_table.c
 * (python -m firmware_interface.c_firmware RIG.toml -o rig_table.c). Define RIG_BOARD_STEPS to run a bounded
 * number of loop passes (a test on the host); a board loops forever.
 */
#include "bsp.h"
#include "rig_fw.h"

extern const rig_config rig_table;
extern const uint32_t rig_baud;           /* bit/s, the rig file's */

/* The transmit ring: the core writes at head, the UART reads from tail (bsp_uart_kick). */
volatile uint8_t tx_ring[TX_RING_BYTES];
volatile uint32_t tx_head, tx_tail;

static uint32_t hal_micros(void *ctx) { (void)ctx; return bsp_micros(); }

static size_t hal_uart_read(void *ctx, uint8_t *buf, size_t cap) {
    (void)ctx;
    size_t n = 0;
    int c;
    while (n < cap && (c = bsp_uart_getc()) >= 0) buf[n++] = (uint8_t)c;
    return n;
}

static int hal_uart_write(void *ctx, const uint8_t *frame, size_t n) {
    (void)ctx;
    const uint32_t used = tx_head - tx_tail;
    if (n > TX_RING_BYTES - used) return 0;
    for (size_t k = 0; k < n; k++) tx_ring[(tx_head + k) % TX_RING_BYTES] = frame[k];
    tx_head += (uint32_t)n;
    bsp_uart_kick();
    return 1;
}

static void hal_servo_write(void *ctx, const float *raw, uint8_t n) {
    (void)ctx;
    for (uint8_t k = 0; k < n; k++) bsp_pwm_write_us(k, raw[k]);
}

static void hal_sample(void *ctx, uint32_t t_us, uint32_t dt_us, float *servo_raw, int32_t *counts) {
    (void)ctx; (void)t_us; (void)dt_us;
    for (uint8_t k = 0; k < rig_table.n_servo; k++) servo_raw[k] = bsp_servo_feedback(k);
    for (uint8_t k = 0; k < rig_table.n_strain + rig_table.n_load; k++) counts[k] = bsp_adc_read(k);
}

static int hal_estop_input(void *ctx) { (void)ctx; return bsp_estop_pressed(); }

int main(void) {
    static rig_fw fw;
    static const rig_hal hal = {0, hal_micros, hal_uart_read, hal_uart_write, hal_servo_write, hal_sample,
                                hal_estop_input, 0};
    /* a table the firmware or the board cannot hold: never starts */
    if (rig_table.n_servo > bsp_pwm_channels || rig_table.n_strain + rig_table.n_load > bsp_adc_channels) return 1;
    bsp_init(rig_baud);
    if (rig_init(&fw, &rig_table, &hal) != 0) return 1;
#ifdef RIG_BOARD_STEPS
    for (unsigned long pass = 0; pass < RIG_BOARD_STEPS; pass++) {
#else
    for (;;) {
#endif
        rig_step(&fw);
        bsp_idle(rig_wait_us(&fw));
    }
    return 0;
}
