/* The host port of the rig firmware: the same core (rig_fw.c) as a program that `mms emulate --firmware` runs.
 *
 * Its HAL crosses one pipe pair of binary records (stdin: from the Python shell, stdout: to it), documented in
 * docs/firmware.md ("The host port"). The shell owns the pseudo-terminal and its UART pacing, the servos' own
 * dynamics and the plant; this program is the firmware and nothing else. Every record is
 *   u8 tag, 3 zero bytes, u32 payload length, payload        (little-endian, as the host)
 * Lockstep: the shell sends a TICK (clock, e-stop input, received bytes, room in the UART buffer); the core
 * runs; every sampling instant asks the shell for its sensor inputs (SAMPLE, answered by SENSORS); the frames
 * to send, the setpoints seen and finally DONE (counters, time to the next instant) go back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rig_fw.h"

#define REC_INIT 'I'
#define REC_TICK 'T'
#define REC_SENSORS 'S'
#define REC_SAMPLE 'Q'
#define REC_FRAME 'F'
#define REC_SEEN 'A'
#define REC_DONE 'D'
#define RECORD_HEAD_BYTES 8
#define TICK_HEAD_BYTES 12
#define MAX_RECORD_BYTES 70000u       /* a tick carries what the wire delivered: at most 64 KiB a read */

typedef struct {
    uint32_t now_us;
    const uint8_t *rx;
    size_t rx_len;
    int button;
    uint32_t tx_room;                  /* bytes the shell's UART buffer can still take */
    uint8_t n_servo, n_sensor;
    float servo_out[RIG_MAX_SERVOS];
} host;

static uint8_t record[MAX_RECORD_BYTES];

static void die(const char *why) {
    fprintf(stderr, "rig_host: %s\n", why);
    exit(2);
}

static void put(uint8_t tag, const void *a, size_t na, const void *b, size_t nb) {
    uint8_t head[RECORD_HEAD_BYTES] = {tag, 0, 0, 0};
    const uint32_t len = (uint32_t)(na + nb);
    memcpy(head + 4, &len, 4);
    if (fwrite(head, 1, sizeof head, stdout) != sizeof head || fwrite(a, 1, na, stdout) != na
        || (nb && fwrite(b, 1, nb, stdout) != nb))
        die("cannot write to the shell");
}

/* The next record into `record`; its tag, or 0 at the end of input. Its payload length in *n. */
static int get(size_t *n) {
    uint8_t head[RECORD_HEAD_BYTES];
    if (fread(head, 1, sizeof head, stdin) != sizeof head) return 0;
    uint32_t len;
    memcpy(&len, head + 4, 4);
    *n = len;
    if (*n > sizeof record) die("record too long");
    if (fread(record, 1, *n, stdin) != *n) return 0;
    return head[0];
}

static uint32_t h_micros(void *ctx) { return ((host *)ctx)->now_us; }

static size_t h_uart_read(void *ctx, uint8_t *buf, size_t cap) {
    host *h = ctx;
    const size_t n = h->rx_len < cap ? h->rx_len : cap;
    memcpy(buf, h->rx, n);
    h->rx += n;
    h->rx_len -= n;
    return n;
}

static int h_uart_write(void *ctx, const uint8_t *frame, size_t n) {
    host *h = ctx;
    if (n > h->tx_room) return 0;
    h->tx_room -= (uint32_t)n;
    put(REC_FRAME, frame, n, NULL, 0);
    return 1;
}

static void h_servo_write(void *ctx, const float *raw, uint8_t n) {
    memcpy(((host *)ctx)->servo_out, raw, n * sizeof *raw);
}

static void h_sample(void *ctx, uint32_t t_us, uint32_t dt_us, float *servo_raw, int32_t *counts) {
    host *h = ctx;
    uint32_t times[2] = {t_us, dt_us};
    put(REC_SAMPLE, times, sizeof times, h->servo_out, h->n_servo * sizeof(float));
    fflush(stdout);
    size_t n;
    const size_t want = h->n_servo * sizeof(float) + h->n_sensor * sizeof(int32_t);
    if (get(&n) != REC_SENSORS || n != want) die("expected the sensor inputs");
    memcpy(servo_raw, record, h->n_servo * sizeof(float));
    memcpy(counts, record + h->n_servo * sizeof(float), h->n_sensor * sizeof(int32_t));
}

static int h_estop_input(void *ctx) { return ((host *)ctx)->button; }

static void h_setpoints_seen(void *ctx, uint16_t seq, uint32_t t_us, const float *raw, uint8_t n, uint8_t nack) {
    (void)ctx;
    uint8_t head[8] = {(uint8_t)seq, (uint8_t)(seq >> 8), nack, n};
    memcpy(head + 4, &t_us, 4);
    put(REC_SEEN, head, sizeof head, raw, n * sizeof *raw);
}

/* INIT: u8 n_servo, n_strain, n_load, name_len; u16 sample_rate_hz; u8 samples_per_frame, interpolate (0 or 1);
 * u32 watchdog_us, heartbeat_period_us; char name[32]; f32 min_raw[n], max_raw[n], neutral_raw[n],
 * max_rate_raw_per_s[n] */
static int read_config(const uint8_t *b, size_t n, rig_config *c) {
    memset(c, 0, sizeof *c);
    if (n < 48) return -1;
    c->n_servo = b[0]; c->n_strain = b[1]; c->n_load = b[2]; c->name_len = b[3];
    memcpy(&c->sample_rate_hz, b + 4, 2);
    c->samples_per_frame = b[6];
    if (b[7] > 1) return -1;
    c->interpolate = b[7];
    memcpy(&c->watchdog_us, b + 8, 4);
    memcpy(&c->heartbeat_period_us, b + 12, 4);
    if (c->n_servo > RIG_MAX_SERVOS || c->name_len > MMS_MAX_NAME_BYTES || n != 48u + 16u * c->n_servo) return -1;
    memcpy(c->name, b + 16, c->name_len);
    const size_t row = c->n_servo * sizeof(float);
    memcpy(c->min_raw, b + 48, row);
    memcpy(c->max_raw, b + 48 + row, row);
    memcpy(c->neutral_raw, b + 48 + 2 * row, row);
    memcpy(c->max_rate_raw_per_s, b + 48 + 3 * row, row);
    return 0;
}

int main(void) {
    static rig_fw fw;
    static rig_config cfg;
    static host h;
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) die("the host port's records are little-endian: a big-endian host");
    size_t n;
    if (get(&n) != REC_INIT || read_config(record, n, &cfg) != 0) die("expected a valid INIT record first");
    h.n_servo = cfg.n_servo;
    h.n_sensor = (uint8_t)(cfg.n_strain + cfg.n_load);
    const rig_hal hal = {&h, h_micros, h_uart_read, h_uart_write, h_servo_write, h_sample, h_estop_input,
                         h_setpoints_seen};
    if (rig_init(&fw, &cfg, &hal) != 0) die("the rig table is outside what the firmware holds");
    int tag;
    while ((tag = get(&n)) != 0) {
        if (tag != REC_TICK || n < TICK_HEAD_BYTES) die("expected a TICK");
        memcpy(&h.now_us, record, 4);
        h.button = record[4];
        memcpy(&h.tx_room, record + 8, 4);
        h.rx = record + TICK_HEAD_BYTES;
        h.rx_len = n - TICK_HEAD_BYTES;
        rig_step(&fw);
        /* DONE: u32 wait_us, frames_tx, tx_dropped, watchdog_trips, overruns, the receiver's nine counters
         * (rig_rx_counters order), u32 flags */
        uint32_t done[15] = {rig_wait_us(&fw), fw.frames_tx, fw.tx_dropped, fw.watchdog_trips, fw.overruns,
                             fw.rx.frames, fw.rx.crc_errors, fw.rx.framing_errors, fw.rx.oversize, fw.rx.malformed,
                             fw.rx.bad_version, fw.rx.unknown_type, fw.rx.seq_gaps, fw.rx.seq_repeats,
                             rig_flags(&fw)};
        put(REC_DONE, done, sizeof done, NULL, 0);
        fflush(stdout);
    }
    return 0;
}
