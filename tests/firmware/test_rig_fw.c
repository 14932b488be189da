/* Unit tests of the rig firmware core (firmware_interface/firmware/rig/rig_fw.c) against a fake HAL: a fake
 * clock set by the test, the UART's frames captured and decoded, fixed sensor inputs, an e-stop input.
 * Built and run by tests/firmware/test_c_firmware.py under -fsanitize=address,undefined.
 *
 *   test_rig_fw units            every unit test; prints {"checks": N, "failed": F}
 *   test_rig_fw vectors          one "wire_hex" per stdin line: a fresh firmware receives it; prints one JSON line
 *                                per vector: {"frames": .., "errors": .., "replies": [[type, msg_type, seq, reason]]}
 *   test_rig_fw fuzz SEED N      N random / mutated inputs; prints {"iterations": N, "frames": .., "sent": ..}
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rig_fw.h"

#define MAX_CAPTURED 4096
#define TX_ROOM 16384u

static int checks, failed;
#define CHECK(cond) do { checks++; if (!(cond)) { failed++; fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); } } while (0)

/* -- the fake HAL ----------------------------------------------------------------------------------------------- */
typedef struct {
    uint32_t now_us;
    int button;
    uint32_t room;                      /* what the UART buffer takes from now on */
    mms_packet sent[MAX_CAPTURED];
    size_t n_sent;
    float servo[RIG_MAX_SERVOS];        /* last servo_write */
    uint32_t servo_writes;
    uint32_t last_t_us, samples;
    uint32_t seen, seen_nack[9];
    int bad_frame;                      /* a frame the firmware sent that does not decode */
} fake;

static uint32_t f_micros(void *c) { return ((fake *)c)->now_us; }
static size_t f_read(void *c, uint8_t *b, size_t n) { (void)c; (void)b; (void)n; return 0; }
static int f_write(void *c, const uint8_t *frame, size_t n) {
    fake *f = c;
    if (n > f->room) return 0;
    f->room -= (uint32_t)n;
    if (n < 3 || frame[0] != 0 || frame[n - 1] != 0 || memchr(frame + 1, 0, n - 2)) { f->bad_frame = 1; return 1; }
    mms_packet p;
    if (mms_decode(frame + 1, n - 2, &p) != MMS_OK) f->bad_frame = 1;
    else if (f->n_sent < MAX_CAPTURED) f->sent[f->n_sent++] = p;
    return 1;
}
static void f_servo(void *c, const float *raw, uint8_t n) {
    fake *f = c;
    memcpy(f->servo, raw, n * sizeof *raw);
    f->servo_writes++;
}
static void f_sample(void *c, uint32_t t_us, uint32_t dt_us, float *servo, int32_t *counts) {
    fake *f = c;
    (void)dt_us;
    f->last_t_us = t_us;
    f->samples++;
    for (int k = 0; k < RIG_MAX_SERVOS; k++) servo[k] = f->servo[k];   /* an ideal servo follows its output */
    for (int k = 0; k < RIG_MAX_SENSORS; k++) counts[k] = -k;
}
static int f_estop(void *c) { return ((fake *)c)->button; }
static void f_seen(void *c, uint16_t seq, uint32_t t_us, const float *raw, uint8_t n, uint8_t nack) {
    fake *f = c;
    (void)seq; (void)t_us; (void)raw; (void)n;
    f->seen++;
    if (nack < 9) f->seen_nack[nack]++;
}

/* The setpoint handling of test_config's rig: 0 each frame held, 1 interpolated ([rates] setpoints). */
static uint8_t interpolate_setpoints;

/* A rig like the RayBot rig: 1 servo, 2 strain, 1 load, 500 Hz, 10 per frame, 100 ms watchdog, 10 Hz heartbeat. */
static rig_config test_config(void) {
    rig_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.name, "test-rig");
    c.name_len = 8;
    c.n_servo = 2; c.n_strain = 2; c.n_load = 1;
    c.sample_rate_hz = 500; c.samples_per_frame = 10;
    c.watchdog_us = 100000; c.heartbeat_period_us = 100000;
    c.interpolate = interpolate_setpoints;
    for (int k = 0; k < 2; k++) {
        c.min_raw[k] = 800.0f; c.max_raw[k] = 2200.0f; c.neutral_raw[k] = 1500.0f;
        c.max_rate_raw_per_s[k] = 15000.0f;    /* 30 raw per 2 ms sample */
    }
    c.max_raw[1] = 2000.0f;
    return c;
}

static fake hw;
static rig_fw fw;
static rig_config cfg;
static rig_hal hal = {&hw, f_micros, f_read, f_write, f_servo, f_sample, f_estop, f_seen};
static uint16_t host_seq;

static void power_up(uint32_t t0) {
    memset(&hw, 0, sizeof hw);
    hw.now_us = t0;
    hw.room = TX_ROOM;
    cfg = test_config();
    host_seq = 0;
    CHECK(rig_init(&fw, &cfg, &hal) == 0);
}

/* Advance the fake clock to t (in steps of at most 1 ms, as a main loop would) running the loop. */
static void run_to(uint32_t t) {
    while ((int32_t)(t - hw.now_us) > 0) {
        const uint32_t step = (int32_t)(t - hw.now_us) > 1000 ? 1000u : t - hw.now_us;
        hw.now_us += step;
        rig_step(&fw);
    }
}

static void host_send(mms_packet *p, uint8_t type) {
    uint8_t wire[MMS_MAX_WIRE_BYTES];
    p->version = MMS_PROTOCOL_VERSION; p->type = type; p->seq = host_seq++; p->t_us = 0;
    const int n = mms_encode(p, wire, sizeof wire);
    CHECK(n > 0);
    rig_set_time(&fw, hw.now_us);
    rig_receive(&fw, wire, (size_t)n);
}

static void send_empty(uint8_t type) { mms_packet p; memset(&p, 0, sizeof p); host_send(&p, type); }

static void send_setpoints(int n, float a, float b) {
    mms_packet p;
    memset(&p, 0, sizeof p);
    p.m.setpoints.n = (uint8_t)n; p.m.setpoints.raw[0] = a; p.m.setpoints.raw[1] = b;
    host_send(&p, MMS_SETPOINTS);
}

/* The last frame of a type sent since index `from` (NULL if none), and how many there were. */
static const mms_packet *last_of(uint8_t type, size_t from, int *count) {
    const mms_packet *found = NULL;
    int k = 0;
    for (size_t i = from; i < hw.n_sent; i++)
        if (hw.sent[i].type == type) { found = &hw.sent[i]; k++; }
    if (count) *count = k;
    return found;
}

static uint64_t rng_state;
static uint32_t rnd(void);

/* -- unit tests ------------------------------------------------------------------------------------------------- */
static void test_hello_and_telemetry_framing(void) {
    power_up(0);
    run_to(50000);
    CHECK(hw.n_sent == 0);                          /* quiet until HELLO */
    CHECK(hw.samples == 26);                        /* sampled anyway: t = 0, 2, ..., 50 ms */
    send_empty(MMS_HELLO);
    const mms_packet *info = last_of(MMS_DEVICE_INFO, 0, NULL);
    CHECK(info && info->m.device_info.n_servo == 2 && info->m.device_info.n_strain == 2
          && info->m.device_info.n_load == 1 && info->m.device_info.name_len == 8
          && memcmp(info->m.device_info.name, "test-rig", 8) == 0);
    const size_t from = hw.n_sent;
    run_to(250000);
    int frames;
    const mms_packet *t = last_of(MMS_TELEMETRY, from, &frames);
    CHECK(frames == 10);                            /* 200 ms at 500 Hz, 10 per frame */
    CHECK(t && t->m.telemetry.n_samples == 10 && t->m.telemetry.flags == RIG_FLAG_WATCHDOG);
    /* samples exactly one period apart, servos at neutral, the sensor counts in channel order */
    const size_t words = 1 + 2 + 3;
    uint32_t prev = 0;
    int spaced = 1;
    for (size_t i = from; i < hw.n_sent; i++) {
        if (hw.sent[i].type != MMS_TELEMETRY) continue;
        for (size_t s = 0; s < hw.sent[i].m.telemetry.n_samples; s++) {
            const mms_word *w = hw.sent[i].m.telemetry.words + s * words;
            if (prev && w[0].u - prev != 2000u) spaced = 0;
            prev = w[0].u;
            if (w[1].f != 1500.0f || w[2].f != 1500.0f || w[3].i != 0 || w[4].i != -1 || w[5].i != -2) spaced = 0;
        }
    }
    CHECK(spaced);
    int heartbeats;
    last_of(MMS_HEARTBEAT, from, &heartbeats);
    CHECK(heartbeats == 2);                         /* 10 Hz over 200 ms */
    /* CONFIGURE: 1 kHz, 4 per frame; refused values NACK 7 */
    mms_packet c;
    memset(&c, 0, sizeof c);
    c.m.configure.sample_rate_hz = 1000; c.m.configure.samples_per_frame = 4; c.m.configure.watchdog_ms = 50;
    host_send(&c, MMS_CONFIGURE);
    CHECK(hw.sent[hw.n_sent - 1].type == MMS_ACK && hw.sent[hw.n_sent - 1].m.ack.msg_type == MMS_CONFIGURE);
    const size_t reconfigured = hw.n_sent;
    run_to(262000);
    const mms_packet *fast = last_of(MMS_TELEMETRY, reconfigured, &frames);
    CHECK(frames == 3 && fast->m.telemetry.n_samples == 4 && (fast->m.telemetry.flags & RIG_FLAG_CONFIGURED));
    CHECK(fast && fast->m.telemetry.words[words].u - fast->m.telemetry.words[0].u == 1000u);
    c.m.configure.samples_per_frame = 30;           /* (502 - 5) / 24 = 20 fit */
    host_send(&c, MMS_CONFIGURE);
    CHECK(hw.sent[hw.n_sent - 1].type == MMS_NACK && hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_BAD_CONFIG);
    c.m.configure.samples_per_frame = 4; c.m.configure.sample_rate_hz = 20001;
    host_send(&c, MMS_CONFIGURE);
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_BAD_CONFIG);
    c.m.configure.sample_rate_hz = 100; c.m.configure.watchdog_ms = 0;
    host_send(&c, MMS_CONFIGURE);
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_BAD_CONFIG);
}

static void test_watchdog_timing(uint32_t t0) {
    power_up(t0);
    send_empty(MMS_HELLO);
    run_to(t0 + 10000);
    send_setpoints(2, 1600.0f, 1400.0f);            /* at t0 + 10 ms */
    CHECK(!(rig_flags(&fw) & RIG_FLAG_WATCHDOG) && hw.seen_nack[0] == 1);
    /* the last sample with setpoints in force is t0 + 110 ms (exactly the timeout); the next one trips */
    run_to(t0 + 110999);
    CHECK(!(rig_flags(&fw) & RIG_FLAG_WATCHDOG) && fw.watchdog_trips == 0);
    CHECK(hw.servo[0] == 1600.0f && hw.servo[1] == 1400.0f);
    const size_t from = hw.n_sent;
    run_to(t0 + 112000);
    CHECK((rig_flags(&fw) & RIG_FLAG_WATCHDOG) && fw.watchdog_trips == 1);
    const mms_packet *hb = last_of(MMS_HEARTBEAT, from, NULL);
    CHECK(hb && (hb->m.heartbeat.flags & RIG_FLAG_WATCHDOG) && hb->t_us == t0 + 112000u);
    /* back toward neutral no faster than the rate limit: 30 raw per 2 ms sample, 100 raw in 4 samples */
    CHECK(fabsf(hw.servo[0] - 1570.0f) < 1e-3f && fabsf(hw.servo[1] - 1430.0f) < 1e-3f);
    run_to(t0 + 118000);
    CHECK(hw.servo[0] == 1500.0f && hw.servo[1] == 1500.0f);
    /* one trip per loss; setpoints clear it */
    run_to(t0 + 400000);
    CHECK(fw.watchdog_trips == 1);
    send_setpoints(2, 1500.0f, 1500.0f);
    CHECK(!(rig_flags(&fw) & RIG_FLAG_WATCHDOG));
    uint32_t c[9];
    rig_link_stats(&fw, c);
    CHECK(c[8] == 1 && c[0] == 3);
}

static void test_estop_latch_and_button(void) {
    power_up(0);
    send_empty(MMS_HELLO);
    send_setpoints(2, 1700.0f, 1700.0f);
    run_to(20000);
    CHECK(hw.servo[0] == 1700.0f);
    send_empty(MMS_ESTOP);
    CHECK(hw.sent[hw.n_sent - 1].type == MMS_ACK && (rig_flags(&fw) & RIG_FLAG_ESTOP));
    /* setpoints refused while latched, NACKed at most every 100 ms, never applied */
    size_t from = hw.n_sent;
    for (uint32_t t = 20000; t < 320000; t += 2000) {
        run_to(t);
        send_setpoints(2, 1700.0f, 1700.0f);
    }
    int nacks;
    const mms_packet *nack = last_of(MMS_NACK, from, &nacks);
    CHECK(nacks == 3 && nack->m.ack.reason == RIG_NACK_ESTOP_LATCHED && nack->m.ack.msg_type == MMS_SETPOINTS);
    CHECK(hw.seen_nack[RIG_NACK_ESTOP_LATCHED] == 150);
    CHECK(hw.servo[0] == 1500.0f && fw.watchdog_trips == 0);    /* neutral; the e-stop is not a watchdog trip */
    send_empty(MMS_ESTOP_RESET);
    CHECK(hw.sent[hw.n_sent - 1].type == MMS_ACK);
    CHECK(rig_flags(&fw) == RIG_FLAG_WATCHDOG);     /* neutral until new setpoints */
    run_to(340000);
    CHECK(hw.servo[0] == 1500.0f);
    /* the button: latches, reports (reason 2), refuses the reset while held */
    hw.button = 1;
    from = hw.n_sent;
    run_to(341000);
    const mms_packet *report = last_of(MMS_ESTOP, from, NULL);
    CHECK(report && report->m.estop.reason == RIG_ESTOP_BUTTON);
    CHECK(rig_flags(&fw) == (RIG_FLAG_ESTOP | RIG_FLAG_WATCHDOG | RIG_FLAG_BUTTON));
    send_empty(MMS_ESTOP_RESET);
    CHECK(hw.sent[hw.n_sent - 1].type == MMS_NACK && hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_ESTOP_LATCHED);
    hw.button = 0;
    from = hw.n_sent;
    run_to(342000);
    const mms_packet *hb = last_of(MMS_HEARTBEAT, from, NULL);
    CHECK(hb && hb->m.heartbeat.flags == (RIG_FLAG_ESTOP | RIG_FLAG_WATCHDOG));   /* released, still latched */
    send_empty(MMS_ESTOP_RESET);
    CHECK(hw.sent[hw.n_sent - 1].type == MMS_ACK && !(rig_flags(&fw) & RIG_FLAG_ESTOP));
}

static void test_limits_and_rate_limits(void) {
    power_up(0);
    send_empty(MMS_HELLO);
    send_setpoints(1, 1500.0f, 0.0f);
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_CHANNEL_COUNT);
    send_setpoints(2, 1500.0f, 2000.5f);            /* channel 1's max_raw is 2000 */
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_OUT_OF_RANGE);
    send_setpoints(2, 799.9f, 1500.0f);
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_OUT_OF_RANGE);
    send_setpoints(2, NAN, 1500.0f);
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_OUT_OF_RANGE);
    send_setpoints(2, 1500.0f, INFINITY);
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_OUT_OF_RANGE);
    CHECK(hw.seen_nack[RIG_NACK_OUT_OF_RANGE] == 4 && hw.seen_nack[RIG_NACK_CHANNEL_COUNT] == 1 && hw.seen_nack[0] == 0);
    CHECK(rig_flags(&fw) & RIG_FLAG_WATCHDOG);      /* refused setpoints do not feed the watchdog */
    /* the edges are inside the limits; the output slews 30 raw per 2 ms sample toward them */
    const size_t sent = hw.n_sent;
    send_setpoints(2, 800.0f, 2000.0f);
    CHECK(hw.n_sent == sent && hw.seen_nack[0] == 1);      /* applied: no reply */
    int slew_ok = 1;
    for (uint32_t t = 2000; t <= 60000; t += 2000) {
        run_to(t);
        /* samples at 0, 2, ..., t ms: each moved the output 30 raw (the rate limit) until it got there */
        const float moved = 30.0f * (float)(t / 2000u + 1u);
        const float want0 = 1500.0f - moved < 800.0f ? 800.0f : 1500.0f - moved;
        const float want1 = 1500.0f + moved > 2000.0f ? 2000.0f : 1500.0f + moved;
        if (fabsf(hw.servo[0] - want0) > 1e-3f || fabsf(hw.servo[1] - want1) > 1e-3f) slew_ok = 0;
        send_setpoints(2, 800.0f, 2000.0f);
    }
    CHECK(slew_ok);
    CHECK(hw.servo[0] == 800.0f && hw.servo[1] == 2000.0f);  /* 700 raw in 24 samples: reached, not passed */
    /* a table the firmware cannot honour is refused at power-up */
    rig_config bad = test_config();
    bad.neutral_raw[0] = 2300.0f;
    CHECK(rig_init(&fw, &bad, &hal) == -1);
    bad = test_config();
    bad.samples_per_frame = 21;
    CHECK(rig_init(&fw, &bad, &hal) == -1);
}

static void receive_bytes(const uint8_t *b, size_t n) { rig_set_time(&fw, hw.now_us); rig_receive(&fw, b, n); }

/* A hand-built frame (header + payload), CRC appended, COBS-encoded between delimiters. */
static size_t raw_frame(uint8_t version, uint8_t type, uint16_t seq, const uint8_t *payload, size_t n, uint8_t *wire) {
    uint8_t frame[MMS_MAX_FRAME_BYTES];
    frame[0] = version; frame[1] = type; frame[2] = (uint8_t)seq; frame[3] = (uint8_t)(seq >> 8);
    memset(frame + 4, 0, 4);
    memcpy(frame + 8, payload, n);
    const uint16_t crc = mms_crc16_ccitt_false(frame, 8 + n);
    frame[8 + n] = (uint8_t)(crc >> 8); frame[9 + n] = (uint8_t)crc;
    wire[0] = 0;
    const size_t e = mms_cobs_encode(frame, 10 + n, wire + 1);
    wire[1 + e] = 0;
    return e + 2;
}

static void test_frame_corruption(void) {
    power_up(0);
    uint8_t wire[MMS_MAX_WIRE_BYTES + 600];
    mms_packet hello;
    memset(&hello, 0, sizeof hello);
    hello.version = 1; hello.type = MMS_HELLO; hello.seq = 0;
    int n = mms_encode(&hello, wire, sizeof wire);
    wire[n - 2] ^= 0x10;                            /* one bit of the CRC flipped: the CRC catches it */
    receive_bytes(wire, (size_t)n);
    CHECK(fw.rx.crc_errors == 1 && hw.n_sent == 0);
    const uint8_t noise[] = {0x00, 0x13, 0x37, 0x42, 0x00};  /* the code byte points past the run */
    receive_bytes(noise, sizeof noise);
    CHECK(fw.rx.framing_errors == 1);
    memset(wire, 0x55, 600);                        /* 600 bytes without a delimiter, then one */
    wire[600] = 0;
    receive_bytes(wire, 601);
    CHECK(fw.rx.oversize == 1);
    const uint8_t empty[] = {0x00, 0x00, 0x00};
    receive_bytes(empty, sizeof empty);             /* empty runs between delimiters are ignored */
    CHECK(fw.rx.oversize == 1 && fw.rx.framing_errors == 1 && fw.rx.malformed == 0);
    const uint8_t none[1] = {0};
    size_t len = raw_frame(1, 0x7E, 0x1234, none, 0, wire);
    receive_bytes(wire, len);
    CHECK(fw.rx.unknown_type == 1 && hw.sent[hw.n_sent - 1].type == MMS_NACK
          && hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_UNKNOWN_TYPE && hw.sent[hw.n_sent - 1].m.ack.seq == 0x1234
          && hw.sent[hw.n_sent - 1].m.ack.msg_type == 0x7E);
    len = raw_frame(2, MMS_HELLO, 0x1235, none, 0, wire);
    receive_bytes(wire, len);
    CHECK(fw.rx.bad_version == 1 && hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_BAD_VERSION);
    const uint8_t three[3] = {1, 2, 3};
    len = raw_frame(1, MMS_HELLO, 0x1236, three, 3, wire);
    receive_bytes(wire, len);
    CHECK(fw.rx.malformed == 1 && hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_BAD_LENGTH);
    len = raw_frame(1, MMS_ACK, 0x1237, three, 3, wire);
    receive_bytes(wire, len);
    CHECK(hw.sent[hw.n_sent - 1].m.ack.reason == RIG_NACK_NOT_A_REQUEST && fw.rx.frames == 1);
    /* sequence: a jump of 3 is two frames missing; a repeat is not a gap */
    len = raw_frame(1, MMS_GET_LINK_STATS, 0x123A, none, 0, wire);
    receive_bytes(wire, len);
    receive_bytes(wire, len);
    CHECK(fw.rx.seq_gaps == 2 && fw.rx.seq_repeats == 1);
    const mms_packet *stats = last_of(MMS_LINK_STATS, 0, NULL);
    CHECK(stats && stats->m.link_stats.counters[2] == 1 && stats->m.link_stats.counters[3] == 1
          && stats->m.link_stats.counters[4] == 1 && stats->m.link_stats.counters[5] == 3
          && stats->m.link_stats.counters[6] == 2);
    /* a full transmit buffer drops whole frames and counts them */
    hw.room = 5;
    send_empty(MMS_HELLO);
    CHECK(fw.tx_dropped == 1 && fw.frames_tx == 7);        /* 4 NACKs, 2 LINK_STATS, the dropped DEVICE_INFO */
    CHECK(!hw.bad_frame);
}

/* Interpolated setpoints: the first frame after none is stepped to; each next one starts a ramp from where the
 * target is to its values over the measured setpoint interval (the first interval, then a running mean moving by
 * 1/8 of each difference), read at the sampling instants; the e-stop and the watchdog still hold the outputs at
 * neutral, and the first frame after them is stepped to again. A rate limit that never binds here (2000 raw per
 * 2 ms sample) leaves the outputs equal to the target. */
static void test_interpolated_setpoints(void) {
    interpolate_setpoints = 1;
    power_up(0);
    interpolate_setpoints = 0;
    for (int k = 0; k < 2; k++) cfg.max_rate_raw_per_s[k] = 1.0e6f;
    send_empty(MMS_HELLO);
    run_to(9000);                                   /* samples every 2 ms: 0, ..., 8 ms */
    send_setpoints(2, 1600.0f, 1400.0f);            /* at 9 ms: stepped to */
    CHECK(fw.interval_us == 0.0f);
    run_to(10000);
    CHECK(hw.servo[0] == 1600.0f && hw.servo[1] == 1400.0f);
    run_to(13000);
    send_setpoints(2, 1700.0f, 1300.0f);            /* at 13 ms: a ramp over 4 ms from (1600, 1400) */
    CHECK(fw.interval_us == 4000.0f);
    run_to(14000);                                  /* the 14 ms sample: a quarter of the way */
    CHECK(fabsf(hw.servo[0] - 1625.0f) < 1e-3f && fabsf(hw.servo[1] - 1375.0f) < 1e-3f);
    run_to(16000);                                  /* 16 ms: three quarters */
    CHECK(fabsf(hw.servo[0] - 1675.0f) < 1e-3f && fabsf(hw.servo[1] - 1325.0f) < 1e-3f);
    run_to(18000);                                  /* 18 ms: reached, held there */
    CHECK(hw.servo[0] == 1700.0f && hw.servo[1] == 1300.0f);
    run_to(19000);
    send_setpoints(2, 1800.0f, 1300.0f);            /* 6 ms later: the interval 4000 + (6000 - 4000) / 8 */
    CHECK(fabsf(fw.interval_us - 4250.0f) < 1e-3f);
    run_to(21000);                                  /* 20 ms: 1 ms of 4.25 */
    CHECK(fabsf(hw.servo[0] - (1700.0f + 100.0f / 4.25f)) < 1e-3f && hw.servo[1] == 1300.0f);
    send_setpoints(2, 1600.0f, 1300.0f);            /* at 21 ms, mid-ramp: the next ramp starts where it got to */
    const float from = 1700.0f + 100.0f * 2000.0f / 4250.0f;
    const float interval = 4250.0f + (2000.0f - 4250.0f) / 8.0f;
    CHECK(fabsf(fw.ramp_from[0] - from) < 1e-3f && fabsf(fw.interval_us - interval) < 1e-3f);
    run_to(22000);
    CHECK(fabsf(hw.servo[0] - (from + (1600.0f - from) * 1000.0f / interval)) < 1e-3f);
    /* the e-stop mid-ramp: neutral at the next sample */
    send_setpoints(2, 1900.0f, 1100.0f);
    send_empty(MMS_ESTOP);
    run_to(24000);
    CHECK(hw.servo[0] == 1500.0f && hw.servo[1] == 1500.0f);
    send_empty(MMS_ESTOP_RESET);
    run_to(26000);
    send_setpoints(2, 1650.0f, 1350.0f);            /* the first frame after the reset: stepped to */
    CHECK(fw.interval_us == 0.0f);
    run_to(28000);
    CHECK(hw.servo[0] == 1650.0f && hw.servo[1] == 1350.0f);
    run_to(30000);
    send_setpoints(2, 1750.0f, 1250.0f);            /* a ramp again, then silence: the watchdog trips mid-way */
    run_to(32000);
    CHECK(hw.servo[0] > 1650.0f && hw.servo[0] < 1750.0f);
    run_to(132000);                                 /* the first sample more than 100 ms after 30 ms */
    CHECK((rig_flags(&fw) & RIG_FLAG_WATCHDOG) && hw.servo[0] == 1500.0f && hw.servo[1] == 1500.0f);
    send_setpoints(2, 1550.0f, 1450.0f);            /* after the trip: stepped to */
    CHECK(fw.interval_us == 0.0f);
    run_to(134000);
    CHECK(hw.servo[0] == 1550.0f && hw.servo[1] == 1450.0f);
    /* a frame later than the watchdog timeout after the previous one, before the trip is seen: stepped to */
    hw.now_us = 234500;
    send_setpoints(2, 1560.0f, 1440.0f);
    CHECK(fw.interval_us == 0.0f);
}

/* Between two values within the limits, the interpolation stays within them: at every fraction, those out of
 * [0, 1] and NaN included, and for ends a rounding apart, the result lies between the two ends. */
static void test_interpolation_stays_between_its_ends(void) {
    rng_state = 20261128u;
    int between = 1, ends = 1;
    for (int i = 0; i < 200000; i++) {
        const float a = 800.0f + (float)(rnd() % 1400001u) * 1e-3f, b = (rnd() % 4) ? 800.0f + (float)(rnd() % 1400001u) * 1e-3f
                                                                                     : nextafterf(a, (rnd() % 2) ? 3000.0f : 0.0f);
        const float fractions[] = {(float)rnd() / 4294967296.0f, nextafterf(1.0f, 0.0f), nextafterf(0.0f, 1.0f),
                                   -0.5f, 1.5f, NAN, INFINITY, -INFINITY};
        for (size_t j = 0; j < sizeof fractions / sizeof *fractions; j++) {
            const float v = rig_interpolate(a, b, fractions[j]);
            if (!(v >= fminf(a, b) && v <= fmaxf(a, b))) between = 0;
        }
        if (rig_interpolate(a, b, 0.0f) != a || rig_interpolate(a, b, 1.0f) != b) ends = 0;
    }
    CHECK(between);
    CHECK(ends);
}

static void test_clock_wrap(void) {
    /* power-up 30 ms before the 32-bit µs clock wraps: sampling and the watchdog run on across it */
    test_watchdog_timing(0xFFFFFFFFu - 30000u);
    CHECK(!hw.bad_frame);
}

static int units(void) {
    test_hello_and_telemetry_framing();
    test_watchdog_timing(0);
    test_estop_latch_and_button();
    test_limits_and_rate_limits();
    test_frame_corruption();
    test_clock_wrap();
    test_interpolated_setpoints();
    test_interpolation_stays_between_its_ends();
    printf("{\"checks\": %d, \"failed\": %d}\n", checks, failed);
    return failed != 0;
}

/* -- vectors: each wire frame of firmware_interface/vectors.json received by a fresh firmware ------------------ */
static int vectors(void) {
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        uint8_t wire[2048];
        size_t n = 0;
        for (char *s = line; s[0] && s[1] && s[0] != '\n' && n < sizeof wire; s += 2) {
            unsigned v;
            if (sscanf(s, "%2x", &v) != 1) return 2;
            wire[n++] = (uint8_t)v;
        }
        power_up(0);
        receive_bytes(wire, n);
        const uint32_t errors = fw.rx.crc_errors + fw.rx.framing_errors + fw.rx.oversize + fw.rx.malformed
                                + fw.rx.bad_version + fw.rx.unknown_type;
        printf("{\"frames\": %lu, \"errors\": %lu, \"replies\": [", (unsigned long)fw.rx.frames, (unsigned long)errors);
        for (size_t i = 0; i < hw.n_sent; i++) {
            const mms_packet *p = &hw.sent[i];
            const int ack = p->type == MMS_ACK || p->type == MMS_NACK;
            printf("%s[%d, %d, %d, %d]", i ? ", " : "", p->type, ack ? p->m.ack.msg_type : 0, ack ? p->m.ack.seq : 0,
                   ack ? p->m.ack.reason : 0);
        }
        printf("]}\n");
    }
    return failed != 0;
}

/* -- fuzz: random bytes, random chunking, mutated good frames, random clock steps and button ------------------ */
static uint32_t rnd(void) {                         /* xorshift64*: seeded, the same sequence on every machine */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

static int fuzz(unsigned long seed, unsigned long iterations) {
    rng_state = seed * 2654435761u + 1;
    interpolate_setpoints = 1;                      /* the ramps between setpoints too stay within the limits */
    power_up(rnd());
    uint8_t buf[1200];
    unsigned long sent = 0;
    for (unsigned long it = 0; it < iterations; it++) {
        size_t n = 0;
        const uint32_t kind = rnd() % 4;
        if (kind == 0) {                            /* line noise, delimiters likely */
            n = rnd() % 64;
            for (size_t k = 0; k < n; k++) buf[k] = (rnd() % 5 == 0) ? 0 : (uint8_t)rnd();
        } else {                                    /* a request, often with a payload of a wrong size or a bit flipped */
            static const uint8_t types[] = {MMS_HELLO, MMS_SETPOINTS, MMS_HEARTBEAT, MMS_ESTOP, MMS_ESTOP_RESET,
                                            MMS_CONFIGURE, MMS_GET_LINK_STATS, MMS_ACK, MMS_TELEMETRY, 0x7E};
            uint8_t payload[600];
            size_t len = rnd() % 16;
            const uint8_t type = types[rnd() % sizeof types];
            if (type == MMS_SETPOINTS && rnd() % 2) {
                len = 1 + 4 * 2; payload[0] = 2;
                for (int k = 0; k < 2; k++) {
                    float v = 700.0f + (float)(rnd() % 1700);
                    memcpy(payload + 1 + 4 * k, &v, 4);
                }
            } else if (type == MMS_CONFIGURE && rnd() % 2) {
                len = 5;
                for (size_t k = 0; k < len; k++) payload[k] = (uint8_t)rnd();
            } else {
                if (rnd() % 50 == 0) len = 495 + rnd() % 100;    /* near or past the frame size */
                for (size_t k = 0; k < len; k++) payload[k] = (uint8_t)rnd();
            }
            if (len > MMS_MAX_PAYLOAD_BYTES) len = MMS_MAX_PAYLOAD_BYTES;
            n = raw_frame((rnd() % 20) ? 1 : 2, type, (uint16_t)rnd(), payload, len, buf);
            if (kind == 3) buf[1 + rnd() % (n - 2)] ^= (uint8_t)(1u << (rnd() % 8));
        }
        /* delivered in random chunks, with clock steps and button changes between them */
        size_t at = 0;
        while (at < n) {
            const size_t chunk = 1 + rnd() % (n - at);
            receive_bytes(buf + at, chunk);
            at += chunk;
            if (rnd() % 8 == 0) { hw.now_us += rnd() % 3000; rig_step(&fw); }
        }
        if (rnd() % 200 == 0) hw.button = !hw.button;
        if (rnd() % 1000 == 0) hw.now_us += rnd() % 1000000;   /* a stalled loop: the catch-up path */
        if (hw.n_sent > MAX_CAPTURED / 2) { sent += hw.n_sent; hw.n_sent = 0; }
        hw.room = TX_ROOM;
        for (int k = 0; k < cfg.n_servo; k++)
            if (!(hw.servo[k] >= cfg.min_raw[k] && hw.servo[k] <= cfg.max_raw[k]) && hw.servo_writes) {
                fprintf(stderr, "servo %d out of its limits: %f\n", k, (double)hw.servo[k]);
                return 1;
            }
    }
    sent += hw.n_sent;
    if (hw.bad_frame) { fprintf(stderr, "the firmware sent a frame that does not decode\n"); return 1; }
    printf("{\"iterations\": %lu, \"frames\": %lu, \"errors\": %lu, \"sent\": %lu, \"overruns\": %lu}\n",
           iterations, (unsigned long)fw.rx.frames,
           (unsigned long)(fw.rx.crc_errors + fw.rx.framing_errors + fw.rx.oversize + fw.rx.malformed
                           + fw.rx.bad_version + fw.rx.unknown_type),
           sent, (unsigned long)fw.overruns);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "units") == 0) return units();
    if (argc >= 2 && strcmp(argv[1], "vectors") == 0) return vectors();
    if (argc >= 4 && strcmp(argv[1], "fuzz") == 0) return fuzz(strtoul(argv[2], NULL, 10), strtoul(argv[3], NULL, 10));
    fprintf(stderr, "usage: %s units | vectors | fuzz SEED N\n", argv[0]);
    return 2;
}
