/* The rig's firmware core: docs/protocol.md's device side, behind a small hardware abstraction (docs/firmware.md).
 *
 * Portable C99. No allocation, no I/O of its own, no double: every buffer is a fixed-size member of
 * struct rig_fw, the hardware is reached only through struct rig_hal. Float32 is used for the servo values
 * (they are float32 on the wire): targets with a single-precision FPU (Cortex-M4F/M7: Teensy 3.6/4.x,
 * STM32F4/F7) run it in hardware; on one without (AVR, Cortex-M0) it compiles with the compiler's soft-float.
 * Time is a 32-bit microsecond clock that wraps (every comparison is a wrap-safe signed difference).
 *
 * One source for the board (a port supplies the HAL from its UART, timer, PWM, ADC and a GPIO) and for the host
 * (rig_host.c: `mms emulate --firmware`, the HAL crossing a pipe to the Python plant).
 */
#ifndef RIG_FW_H
#define RIG_FW_H

#include <stddef.h>
#include <stdint.h>

#include "mms_proto.h"

#define RIG_FW_VERSION_MAJOR 1
#define RIG_FW_VERSION_MINOR 0
#define RIG_FW_VERSION_PATCH 0
#define RIG_MAX_SERVOS 8
#define RIG_MAX_SENSORS 24            /* strain gauges + load cells */
#define RIG_MAX_SAMPLE_RATE_HZ 20000u  /* the CONFIGURE limit (firmware_interface/rigs/schema.py) */
/* While the e-stop is latched, setpoints are NACKed at most this often, µs (a 500 Hz host would flood the link). */
#define RIG_ESTOP_NACK_INTERVAL_US 100000u
/* Further behind its sampling clock than this, µs, the loop skips ahead (and counts an overrun). */
#define RIG_MAX_CATCH_UP_US 500000u
/* Interpolated setpoints: each new arrival interval moves the measured setpoint interval by 1/this of the
 * difference (INTERVAL_AVERAGE in firmware_interface/emulator.py). */
#define RIG_INTERVAL_AVERAGE 8.0f

/* The rig's table: generated from its rig file (firmware_interface/c_firmware.py: a C file for a board, an
 * init record for the host port). Arrays are per servo channel, in frame order, in the channel's raw unit. */
typedef struct {
    char name[MMS_MAX_NAME_BYTES + 1];
    uint8_t name_len;
    uint8_t n_servo, n_strain, n_load;
    uint16_t sample_rate_hz;           /* power-up telemetry rate (CONFIGURE changes it) */
    uint8_t samples_per_frame;
    uint8_t interpolate;               /* 1: the servo target ramps between setpoint frames ([rates] setpoints) */
    uint32_t watchdog_us;              /* power-up watchdog timeout */
    uint32_t heartbeat_period_us;
    float min_raw[RIG_MAX_SERVOS];     /* setpoints outside [min_raw, max_raw] are refused */
    float max_raw[RIG_MAX_SERVOS];
    float neutral_raw[RIG_MAX_SERVOS]; /* where the servos go on the watchdog and the e-stop */
    float max_rate_raw_per_s[RIG_MAX_SERVOS];  /* the output slews no faster */
} rig_config;

/* What the core needs from the hardware. ctx is passed back to every call. */
typedef struct {
    void *ctx;
    uint32_t (*micros)(void *ctx);                              /* free-running µs clock, wraps at 2^32 */
    size_t (*uart_read)(void *ctx, uint8_t *buf, size_t cap);  /* received bytes (non-blocking) */
    /* Queue one whole frame for the UART: 1 if it fitted in the transmit buffer, 0 if not (then dropped). */
    int (*uart_write)(void *ctx, const uint8_t *frame, size_t n);
    void (*servo_write)(void *ctx, const float *raw, uint8_t n);   /* the outputs, raw unit, within limits */
    /* Sensor inputs at sampling instant t_us (dt_us since the previous one): the measured servo positions
     * (raw unit, n_servo) and the strain then load ADC counts (n_strain + n_load). */
    void (*sample)(void *ctx, uint32_t t_us, uint32_t dt_us, float *servo_raw, int32_t *counts);
    int (*estop_input)(void *ctx);                              /* 1 while the e-stop button is held */
    /* Optional (may be NULL): told of every SETPOINTS frame handled; nack 0 = applied, else the NACK reason. */
    void (*setpoints_seen)(void *ctx, uint16_t seq, uint32_t t_us, const float *raw, uint8_t n, uint8_t nack);
} rig_hal;

/* The receiver's counters (docs/protocol.md, LINK_STATS). */
typedef struct {
    uint32_t frames, crc_errors, framing_errors, oversize, malformed, bad_version, unknown_type, seq_gaps,
        seq_repeats;
} rig_rx_counters;

typedef struct {
    const rig_config *cfg;
    const rig_hal *hal;
    /* receiver: the bytes since the last delimiter */
    uint8_t rx_run[MMS_MAX_ENCODED_BYTES];
    size_t rx_len;
    int rx_discarding;
    int have_rx_seq;
    uint16_t rx_seq;
    rig_rx_counters rx;
    /* transmitter */
    uint16_t tx_seq;
    uint32_t frames_tx, tx_dropped, watchdog_trips, overruns;
    /* state (docs/protocol.md, status flags) */
    int estop, button_held, configured, streaming, watchdog_tripped;
    int have_setpoint, have_estop_nack;
    uint32_t last_setpoint_us, last_estop_nack_us, watchdog_us;
    uint32_t now_us;                   /* the clock at the last rig_step */
    uint32_t uptime_ms, uptime_rem_us; /* uptime kept apart: the µs clock wraps every 71.6 min */
    uint32_t next_heartbeat_us;
    /* sampling */
    uint16_t rate_hz;
    uint8_t samples_per_frame, n_pending;
    uint32_t period_us, next_sample_us;
    float command[RIG_MAX_SERVOS];     /* the last applied setpoints */
    /* interpolation: the target ramps from ramp_from (the target when the last setpoints arrived, at
     * last_setpoint_us) to command over interval_us, the measured setpoint interval (0: none, a step) */
    float ramp_from[RIG_MAX_SERVOS];
    float interval_us;
    float output[RIG_MAX_SERVOS];      /* what the servos are driven with (rate limited toward the target) */
    mms_word pending[MMS_MAX_TELEMETRY_WORDS];  /* samples not yet sent, in telemetry word order */
    mms_packet in, out;                /* scratch: the packet being handled, the one being sent */
    uint8_t wire[MMS_MAX_WIRE_BYTES];
} rig_fw;

/* Power-up: 0, or -1 for a table the core cannot hold (too many channels, rate, samples per frame). */
int rig_init(rig_fw *fw, const rig_config *cfg, const rig_hal *hal);
/* One pass of the main loop: the e-stop input, received bytes, sampling instants, heartbeat. */
void rig_step(rig_fw *fw);
/* The parts of rig_step, for ports that read their inputs themselves. */
void rig_button(rig_fw *fw, int held);
void rig_receive(rig_fw *fw, const uint8_t *data, size_t n);
void rig_tick(rig_fw *fw);
/* Sets the clock (rig_step reads it from the HAL). */
void rig_set_time(rig_fw *fw, uint32_t now_us);
/* Status flags (MMS_FLAG_*), and µs until the next sampling instant (0 if due). */
uint8_t rig_flags(const rig_fw *fw);
uint32_t rig_wait_us(const rig_fw *fw);
/* LINK_STATS's nine counters. */
void rig_link_stats(const rig_fw *fw, uint32_t counters[9]);
/* The point a fraction (clamped to [0, 1]) of the way from `from` to `to`, never outside [min, max] of the two
 * (rounding included): between two values within the servo's limits, within them. */
float rig_interpolate(float from, float to, float fraction);

#define RIG_FLAG_ESTOP 0x01
#define RIG_FLAG_WATCHDOG 0x02
#define RIG_FLAG_CONFIGURED 0x04
#define RIG_FLAG_BUTTON 0x08

enum rig_nack {
    RIG_NACK_UNKNOWN_TYPE = 1, RIG_NACK_BAD_LENGTH = 2, RIG_NACK_ESTOP_LATCHED = 3, RIG_NACK_CHANNEL_COUNT = 4,
    RIG_NACK_OUT_OF_RANGE = 5, RIG_NACK_BAD_VERSION = 6, RIG_NACK_BAD_CONFIG = 7, RIG_NACK_NOT_A_REQUEST = 8
};
enum rig_estop_reason { RIG_ESTOP_HOST = 1, RIG_ESTOP_BUTTON = 2, RIG_ESTOP_FAULT = 3 };

#endif
