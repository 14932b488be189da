/* The rig's firmware core: see rig_fw.h, docs/firmware.md and docs/protocol.md (the device side). */
#include "rig_fw.h"

#include <math.h>
#include <string.h>

#define US_PER_S 1000000u
#define US_PER_MS 1000u

/* Wrap-safe: how far the 32-bit clock value a lies after b (negative: before). */
static int32_t after(uint32_t a, uint32_t b) { return (int32_t)(a - b); }

static size_t max_samples_per_frame(const rig_config *c) {
    const size_t sample_bytes = 4u * (1u + c->n_servo + c->n_strain + c->n_load);
    const size_t fit = (MMS_MAX_PAYLOAD_BYTES - MMS_TELEMETRY_HEAD_BYTES) / sample_bytes;
    return fit < 255u ? fit : 255u;
}

static void set_rate(rig_fw *fw, uint16_t rate_hz, uint8_t per_frame) {
    fw->rate_hz = rate_hz;
    fw->samples_per_frame = per_frame;
    fw->period_us = (US_PER_S + rate_hz / 2u) / rate_hz;    /* round(1e6 / rate): no jitter between samples */
    fw->next_sample_us = fw->now_us;                         /* sampling restarts on the device clock */
    fw->n_pending = 0;
}

void rig_set_time(rig_fw *fw, uint32_t now_us) {
    fw->uptime_rem_us += now_us - fw->now_us;
    fw->uptime_ms += fw->uptime_rem_us / US_PER_MS;
    fw->uptime_rem_us %= US_PER_MS;
    fw->now_us = now_us;
}

int rig_init(rig_fw *fw, const rig_config *cfg, const rig_hal *hal) {
    memset(fw, 0, sizeof *fw);
    if (cfg->n_servo == 0 || cfg->n_servo > RIG_MAX_SERVOS || cfg->n_strain + cfg->n_load > RIG_MAX_SENSORS
        || cfg->name_len > MMS_MAX_NAME_BYTES || cfg->sample_rate_hz == 0
        || cfg->sample_rate_hz > RIG_MAX_SAMPLE_RATE_HZ || cfg->samples_per_frame == 0
        || cfg->samples_per_frame > max_samples_per_frame(cfg) || cfg->watchdog_us == 0
        || cfg->heartbeat_period_us == 0 || cfg->interpolate > 1)
        return -1;
    for (uint8_t k = 0; k < cfg->n_servo; k++)
        if (!(cfg->min_raw[k] <= cfg->neutral_raw[k] && cfg->neutral_raw[k] <= cfg->max_raw[k])
            || !(cfg->max_rate_raw_per_s[k] > 0.0f))
            return -1;
    fw->cfg = cfg;
    fw->hal = hal;
    fw->now_us = hal->micros(hal->ctx);
    fw->watchdog_tripped = 1;              /* no setpoints since power-up: neutral until the first ones */
    fw->watchdog_us = cfg->watchdog_us;
    fw->next_heartbeat_us = fw->now_us;
    memcpy(fw->command, cfg->neutral_raw, sizeof fw->command);
    memcpy(fw->output, cfg->neutral_raw, sizeof fw->output);
    set_rate(fw, cfg->sample_rate_hz, cfg->samples_per_frame);
    return 0;
}

uint8_t rig_flags(const rig_fw *fw) {
    return (uint8_t)((fw->estop ? RIG_FLAG_ESTOP : 0) | (fw->watchdog_tripped ? RIG_FLAG_WATCHDOG : 0)
                     | (fw->configured ? RIG_FLAG_CONFIGURED : 0) | (fw->button_held ? RIG_FLAG_BUTTON : 0));
}

uint32_t rig_wait_us(const rig_fw *fw) {
    const int32_t wait = after(fw->next_sample_us, fw->now_us);
    return wait > 0 ? (uint32_t)wait : 0u;
}

void rig_link_stats(const rig_fw *fw, uint32_t c[9]) {
    c[0] = fw->rx.frames; c[1] = fw->frames_tx; c[2] = fw->rx.crc_errors; c[3] = fw->rx.framing_errors;
    c[4] = fw->rx.oversize; c[5] = fw->rx.malformed + fw->rx.bad_version + fw->rx.unknown_type;
    c[6] = fw->rx.seq_gaps; c[7] = fw->tx_dropped; c[8] = fw->watchdog_trips;
}

/* -- transmit ------------------------------------------------------------------------------------------------- */
/* fw->out (type and payload filled in) as the next frame, stamped t_us. Every frame counts in frames_tx; one the
 * UART's buffer has no room for is dropped and counted in tx_dropped. */
static void send(rig_fw *fw, uint8_t type, uint32_t t_us) {
    fw->out.version = MMS_PROTOCOL_VERSION;
    fw->out.type = type;
    fw->out.seq = fw->tx_seq++;
    fw->out.t_us = t_us;
    const int n = mms_encode(&fw->out, fw->wire, sizeof fw->wire);
    fw->frames_tx++;
    if (n < 0 || !fw->hal->uart_write(fw->hal->ctx, fw->wire, (size_t)n)) fw->tx_dropped++;
}

static void send_ack(rig_fw *fw, uint8_t type, uint16_t seq) {
    fw->out.m.ack.msg_type = type; fw->out.m.ack.seq = seq; fw->out.m.ack.reason = 0;
    send(fw, MMS_ACK, fw->now_us);
}

static void send_nack(rig_fw *fw, uint8_t type, uint16_t seq, uint8_t reason) {
    fw->out.m.ack.msg_type = type; fw->out.m.ack.seq = seq; fw->out.m.ack.reason = reason;
    send(fw, MMS_NACK, fw->now_us);
}

static void send_heartbeat(rig_fw *fw, uint32_t t_us) {
    fw->out.m.heartbeat.flags = rig_flags(fw);
    fw->out.m.heartbeat.uptime_ms = fw->uptime_ms;
    send(fw, MMS_HEARTBEAT, t_us);
}

/* -- requests ------------------------------------------------------------------------------------------------- */
static void device_info(rig_fw *fw) {
    const rig_config *c = fw->cfg;
    fw->out.m.device_info.protocol_version = MMS_PROTOCOL_VERSION;
    fw->out.m.device_info.fw[0] = RIG_FW_VERSION_MAJOR;
    fw->out.m.device_info.fw[1] = RIG_FW_VERSION_MINOR;
    fw->out.m.device_info.fw[2] = RIG_FW_VERSION_PATCH;
    fw->out.m.device_info.n_servo = c->n_servo;
    fw->out.m.device_info.n_strain = c->n_strain;
    fw->out.m.device_info.n_load = c->n_load;
    fw->out.m.device_info.name_len = c->name_len;
    memcpy(fw->out.m.device_info.name, c->name, c->name_len);
    send(fw, MMS_DEVICE_INFO, fw->now_us);
}

float rig_interpolate(float from, float to, float fraction) {
    if (!(fraction > 0.0f)) return from;   /* NaN included */
    if (fraction >= 1.0f) return to;
    const float v = from + (to - from) * fraction;
    const float lo = from < to ? from : to, hi = from < to ? to : from;
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Channel k's setpoint target at device time t_us: the last setpoints, or the ramp toward them
 * (docs/firmware.md, "Interpolated setpoints"). */
static float target(const rig_fw *fw, uint8_t k, uint32_t t_us) {
    if (!(fw->interval_us > 0.0f)) return fw->command[k];
    return rig_interpolate(fw->ramp_from[k], fw->command[k], (float)after(t_us, fw->last_setpoint_us) / fw->interval_us);
}

static void seen(rig_fw *fw, uint8_t nack) {
    if (fw->hal->setpoints_seen)
        fw->hal->setpoints_seen(fw->hal->ctx, fw->in.seq, fw->now_us, fw->in.m.setpoints.raw,
                                fw->in.m.setpoints.n, nack);
}

static void setpoints(rig_fw *fw) {
    const rig_config *c = fw->cfg;
    const uint8_t n = fw->in.m.setpoints.n;
    const float *raw = fw->in.m.setpoints.raw;
    if (fw->estop) {
        seen(fw, RIG_NACK_ESTOP_LATCHED);
        if (!fw->have_estop_nack || after(fw->now_us, fw->last_estop_nack_us) >= (int32_t)RIG_ESTOP_NACK_INTERVAL_US) {
            fw->have_estop_nack = 1;
            fw->last_estop_nack_us = fw->now_us;
            send_nack(fw, MMS_SETPOINTS, fw->in.seq, RIG_NACK_ESTOP_LATCHED);
        }
        return;
    }
    if (n != c->n_servo) {
        seen(fw, RIG_NACK_CHANNEL_COUNT);
        send_nack(fw, MMS_SETPOINTS, fw->in.seq, RIG_NACK_CHANNEL_COUNT);
        return;
    }
    for (uint8_t k = 0; k < n; k++) {
        if (!isfinite(raw[k]) || raw[k] < c->min_raw[k] || raw[k] > c->max_raw[k]) {
            seen(fw, RIG_NACK_OUT_OF_RANGE);
            send_nack(fw, MMS_SETPOINTS, fw->in.seq, RIG_NACK_OUT_OF_RANGE);
            return;
        }
    }
    const int32_t interval = after(fw->now_us, fw->last_setpoint_us);
    if (c->interpolate && fw->have_setpoint && !fw->watchdog_tripped && interval <= (int32_t)fw->watchdog_us) {
        /* the new ramp starts where the target is now, over the running mean of the arrival intervals */
        for (uint8_t k = 0; k < n; k++) fw->ramp_from[k] = target(fw, k, fw->now_us);
        fw->interval_us = fw->interval_us > 0.0f
            ? fw->interval_us + ((float)interval - fw->interval_us) / RIG_INTERVAL_AVERAGE : (float)interval;
    } else {                               /* the first setpoints in force, or a step by configuration */
        memcpy(fw->ramp_from, raw, n * sizeof *raw);
        fw->interval_us = 0.0f;
    }
    memcpy(fw->command, raw, n * sizeof *raw);
    fw->have_setpoint = 1;                 /* only applied setpoints feed the watchdog */
    fw->last_setpoint_us = fw->now_us;
    fw->watchdog_tripped = 0;
    seen(fw, 0);
}

static void configure(rig_fw *fw) {
    const uint16_t rate = fw->in.m.configure.sample_rate_hz;
    const uint8_t per_frame = fw->in.m.configure.samples_per_frame;
    const uint16_t watchdog_ms = fw->in.m.configure.watchdog_ms;
    if (rate < 1 || rate > RIG_MAX_SAMPLE_RATE_HZ || per_frame < 1 || per_frame > max_samples_per_frame(fw->cfg)
        || watchdog_ms < 1) {
        send_nack(fw, MMS_CONFIGURE, fw->in.seq, RIG_NACK_BAD_CONFIG);
        return;
    }
    set_rate(fw, rate, per_frame);
    fw->watchdog_us = (uint32_t)watchdog_ms * US_PER_MS;
    fw->configured = 1;
    send_ack(fw, MMS_CONFIGURE, fw->in.seq);
}

static void handle(rig_fw *fw) {
    const uint8_t type = fw->in.type;
    const uint16_t seq = fw->in.seq;
    switch (type) {
    case MMS_HELLO:
        fw->streaming = 1;                 /* telemetry and heartbeats flow once a host has said HELLO */
        device_info(fw);
        return;
    case MMS_SETPOINTS:
        setpoints(fw);
        return;
    case MMS_HEARTBEAT:
        send_heartbeat(fw, fw->now_us);
        return;
    case MMS_ESTOP:
        fw->estop = 1;
        send_ack(fw, type, seq);
        return;
    case MMS_ESTOP_RESET:
        if (fw->button_held) {             /* only a release at the rig ends a pressed button */
            send_nack(fw, type, seq, RIG_NACK_ESTOP_LATCHED);
            return;
        }
        fw->estop = 0;
        /* the servos stay at neutral until new setpoints arrive: the watchdog restarts from "no setpoints" */
        memcpy(fw->command, fw->cfg->neutral_raw, sizeof fw->command);
        fw->have_setpoint = 0;
        fw->watchdog_tripped = 1;
        send_ack(fw, type, seq);
        return;
    case MMS_CONFIGURE:
        configure(fw);
        return;
    case MMS_GET_LINK_STATS:
        rig_link_stats(fw, fw->out.m.link_stats.counters);
        send(fw, MMS_LINK_STATS, fw->now_us);
        return;
    default:                               /* a known type that is not a request */
        send_nack(fw, type, seq, RIG_NACK_NOT_A_REQUEST);
        return;
    }
}

/* -- receive -------------------------------------------------------------------------------------------------- */
/* One run of bytes between delimiters: counted by what it is; a good frame is handled, a CRC-good one that
 * cannot be decoded is NACKed with its type and seq. */
static void decode_run(rig_fw *fw) {
    const int r = mms_decode(fw->rx_run, fw->rx_len, &fw->in);
    switch (r) {
    case MMS_OK: break;
    case MMS_ERR_FRAMING: fw->rx.framing_errors++; return;
    case MMS_ERR_OVERSIZE: fw->rx.oversize++; return;
    case MMS_ERR_CRC: fw->rx.crc_errors++; return;
    case MMS_ERR_VERSION:
        fw->rx.bad_version++;
        send_nack(fw, fw->in.type, fw->in.seq, RIG_NACK_BAD_VERSION);
        return;
    case MMS_ERR_TYPE:
        fw->rx.unknown_type++;
        send_nack(fw, fw->in.type, fw->in.seq, RIG_NACK_UNKNOWN_TYPE);
        return;
    case MMS_ERR_SHORT: fw->rx.malformed++; return;   /* no header to answer */
    default:                                           /* a payload wrong for its type */
        fw->rx.malformed++;
        send_nack(fw, fw->in.type, fw->in.seq, RIG_NACK_BAD_LENGTH);
        return;
    }
    fw->rx.frames++;
    if (fw->have_rx_seq) {
        const uint16_t step = (uint16_t)(fw->in.seq - fw->rx_seq);
        if (step == 0 || step >= 0x8000u) fw->rx.seq_repeats++;
        else fw->rx.seq_gaps += step - 1u;
    }
    fw->have_rx_seq = 1;
    fw->rx_seq = fw->in.seq;
    handle(fw);
}

void rig_receive(rig_fw *fw, const uint8_t *data, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t b = data[i];
        if (b == 0) {
            if (!fw->rx_discarding && fw->rx_len) decode_run(fw);
            fw->rx_len = 0;
            fw->rx_discarding = 0;
        } else if (!fw->rx_discarding) {
            if (fw->rx_len == sizeof fw->rx_run) {     /* longer than any frame: discard to the next delimiter */
                fw->rx.oversize++;
                fw->rx_len = 0;
                fw->rx_discarding = 1;
            } else {
                fw->rx_run[fw->rx_len++] = b;
            }
        }
    }
}

/* -- periodic ------------------------------------------------------------------------------------------------- */
void rig_button(rig_fw *fw, int held) {
    if (held && !fw->button_held) {
        fw->estop = 1;
        fw->button_held = 1;
        fw->out.m.estop.reason = RIG_ESTOP_BUTTON;
        send(fw, MMS_ESTOP, fw->now_us);
    } else if (!held && fw->button_held) {
        /* released: the e-stop stays latched until ESTOP_RESET; a heartbeat tells the host at once */
        fw->button_held = 0;
        if (fw->streaming) send_heartbeat(fw, fw->now_us);
    }
}

/* The servo outputs one sampling period on, at the sampling instant t_us: toward the target (neutral while the
 * e-stop or the watchdog holds; the last setpoints, or the ramp toward them with interpolation)
 * no faster than the rate limit, and within the raw limits as the last step before the hardware. */
static void drive_servos(rig_fw *fw, uint32_t t_us) {
    const rig_config *c = fw->cfg;
    const int hold = fw->estop || fw->watchdog_tripped;
    const float period_s = (float)fw->period_us * 1e-6f;
    for (uint8_t k = 0; k < c->n_servo; k++) {
        const float limit = c->max_rate_raw_per_s[k] * period_s;
        float step = (hold ? c->neutral_raw[k] : target(fw, k, t_us)) - fw->output[k];
        if (step > limit) step = limit;
        if (step < -limit) step = -limit;
        float v = fw->output[k] + step;
        if (v < c->min_raw[k]) v = c->min_raw[k];
        if (v > c->max_raw[k]) v = c->max_raw[k];
        fw->output[k] = v;
    }
    fw->hal->servo_write(fw->hal->ctx, fw->output, c->n_servo);
}

static void send_telemetry(rig_fw *fw, uint32_t t_us) {
    const rig_config *c = fw->cfg;
    fw->out.m.telemetry.flags = rig_flags(fw);
    fw->out.m.telemetry.n_servo = c->n_servo;
    fw->out.m.telemetry.n_strain = c->n_strain;
    fw->out.m.telemetry.n_load = c->n_load;
    fw->out.m.telemetry.n_samples = fw->n_pending;
    memcpy(fw->out.m.telemetry.words, fw->pending,
           (size_t)fw->n_pending * (1u + c->n_servo + c->n_strain + c->n_load) * sizeof(mms_word));
    send(fw, MMS_TELEMETRY, t_us);
    fw->n_pending = 0;
}

static void take_sample(rig_fw *fw, uint32_t t_us) {
    const rig_config *c = fw->cfg;
    float servo[RIG_MAX_SERVOS];
    int32_t counts[RIG_MAX_SENSORS];
    const uint8_t n_sensor = (uint8_t)(c->n_strain + c->n_load);
    fw->hal->sample(fw->hal->ctx, t_us, fw->period_us, servo, counts);
    mms_word *w = fw->pending + (size_t)fw->n_pending * (1u + c->n_servo + n_sensor);
    (w++)->u = t_us;
    for (uint8_t k = 0; k < c->n_servo; k++) (w++)->f = servo[k];
    for (uint8_t k = 0; k < n_sensor; k++) (w++)->i = counts[k];
    fw->n_pending++;
}

void rig_tick(rig_fw *fw) {
    const uint32_t now = fw->now_us;
    if (after(now, fw->next_sample_us) > (int32_t)RIG_MAX_CATCH_UP_US) {
        fw->overruns++;
        fw->next_sample_us = now;
        fw->n_pending = 0;
    }
    while (after(now, fw->next_sample_us) >= 0) {
        const uint32_t t = fw->next_sample_us;
        if (!fw->watchdog_tripped && !fw->estop && after(t, fw->last_setpoint_us) > (int32_t)fw->watchdog_us) {
            fw->watchdog_tripped = 1;
            fw->watchdog_trips++;
            if (fw->streaming) send_heartbeat(fw, t);
        }
        drive_servos(fw, t);
        take_sample(fw, t);
        if (!fw->streaming) fw->n_pending = 0;
        else if (fw->n_pending >= fw->samples_per_frame) send_telemetry(fw, t);
        fw->next_sample_us = t + fw->period_us;
    }
    if (fw->streaming && after(now, fw->next_heartbeat_us) >= 0) {
        fw->next_heartbeat_us = now + fw->cfg->heartbeat_period_us;
        send_heartbeat(fw, now);
    }
}

void rig_step(rig_fw *fw) {
    uint8_t buf[64];
    size_t n;
    rig_set_time(fw, fw->hal->micros(fw->hal->ctx));
    rig_button(fw, fw->hal->estop_input(fw->hal->ctx));
    while ((n = fw->hal->uart_read(fw->hal->ctx, buf, sizeof buf)) > 0) rig_receive(fw, buf, n);
    rig_tick(fw);
}
