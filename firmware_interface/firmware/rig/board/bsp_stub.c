/* A board with nothing attached: the board port compiles, links and runs its loop (no bytes, no servos). */
#include "bsp.h"

static uint32_t fake_us;
const uint8_t bsp_pwm_channels = 8, bsp_adc_channels = 24;

void bsp_init(uint32_t baud) { (void)baud; }
uint32_t bsp_micros(void) { return fake_us; }
int bsp_uart_getc(void) { return -1; }
void bsp_uart_kick(void) {}
void bsp_pwm_write_us(uint8_t channel, float pulse_us) { (void)channel; (void)pulse_us; }
float bsp_servo_feedback(uint8_t channel) { (void)channel; return 1500.0f; }
int32_t bsp_adc_read(uint8_t channel) { return (int32_t)channel; }
int bsp_estop_pressed(void) { return 0; }
void bsp_idle(uint32_t max_us) { fake_us += max_us ? max_us : 1u; }
