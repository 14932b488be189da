/* Reference C codec of the MMS serial protocol, version 1: see mms_proto.h and docs/protocol.md. */
#include "mms_proto.h"

#include <string.h>

uint16_t mms_crc16_ccitt_false(const uint8_t *data, size_t n) {
    uint16_t crc = 0xFFFF;                      /* poly 0x1021, init 0xFFFF, no reflection, xorout 0 */
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(data[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

size_t mms_cobs_encode(const uint8_t *in, size_t n, uint8_t *out) {
    size_t code_at = 0, o = 1;
    uint8_t code = 1;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == 0) {
            out[code_at] = code; code_at = o++; code = 1;
        } else {
            out[o++] = in[i];
            if (++code == 0xFF) { out[code_at] = code; code_at = o++; code = 1; }
        }
    }
    out[code_at] = code;
    return o;
}

int mms_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t capacity) {
    size_t i = 0, o = 0;
    while (i < n) {
        uint8_t code = in[i++];
        if (code == 0) return MMS_ERR_FRAMING;
        for (uint8_t k = 1; k < code; k++) {
            if (i >= n || in[i] == 0) return MMS_ERR_FRAMING;
            if (o >= capacity) return MMS_ERR_OVERSIZE;
            out[o++] = in[i++];
        }
        if (code < 0xFF && i < n) {
            if (o >= capacity) return MMS_ERR_OVERSIZE;
            out[o++] = 0;
        }
    }
    return (int)o;
}

static void put_u16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *b, uint32_t v) { for (int k = 0; k < 4; k++) b[k] = (uint8_t)(v >> (8 * k)); }
static uint16_t get_u16(const uint8_t *b) { return (uint16_t)(b[0] | (b[1] << 8)); }
static uint32_t get_u32(const uint8_t *b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
static void put_f32(uint8_t *b, float f) { uint32_t v; memcpy(&v, &f, 4); put_u32(b, v); }
static float get_f32(const uint8_t *b) { uint32_t v = get_u32(b); float f; memcpy(&f, &v, 4); return f; }

/* Payload of p into b (room for MMS_MAX_FRAME_BYTES); returns its length or a negative error. */
static int pack_payload(const mms_packet *p, uint8_t *b) {
    size_t o = 0;
    switch (p->type) {
    case MMS_HELLO: case MMS_ESTOP_RESET: case MMS_GET_LINK_STATS:
        return 0;
    case MMS_DEVICE_INFO: {
        const uint8_t len = p->m.device_info.name_len;
        if (len > MMS_MAX_NAME_BYTES) return MMS_ERR_LENGTH;
        b[0] = p->m.device_info.protocol_version;
        memcpy(b + 1, p->m.device_info.fw, 3);
        b[4] = p->m.device_info.n_servo; b[5] = p->m.device_info.n_strain; b[6] = p->m.device_info.n_load;
        b[7] = len;
        memcpy(b + 8, p->m.device_info.name, len);
        return 8 + len;
    }
    case MMS_SETPOINTS:
        b[o++] = p->m.setpoints.n;
        for (int k = 0; k < p->m.setpoints.n; k++, o += 4) put_f32(b + o, p->m.setpoints.raw[k]);
        return (int)o;
    case MMS_TELEMETRY: {
        const uint8_t ns = p->m.telemetry.n_servo, ng = p->m.telemetry.n_strain, nl = p->m.telemetry.n_load;
        const size_t sample_bytes = 4u + 4u * (ns + ng + nl);
        if (5 + p->m.telemetry.n_samples * sample_bytes + MMS_HEADER_BYTES + MMS_CRC_BYTES > MMS_MAX_FRAME_BYTES)
            return MMS_ERR_CAPACITY;
        b[o++] = p->m.telemetry.flags; b[o++] = ns; b[o++] = ng; b[o++] = nl; b[o++] = p->m.telemetry.n_samples;
        for (int s = 0; s < p->m.telemetry.n_samples; s++) {
            const mms_sample *x = &p->m.telemetry.samples[s];
            put_u32(b + o, x->t_us); o += 4;
            for (int k = 0; k < ns; k++, o += 4) put_f32(b + o, x->servo[k]);
            for (int k = 0; k < ng; k++, o += 4) put_u32(b + o, (uint32_t)x->strain[k]);
            for (int k = 0; k < nl; k++, o += 4) put_u32(b + o, (uint32_t)x->load[k]);
        }
        return (int)o;
    }
    case MMS_HEARTBEAT:
        b[0] = p->m.heartbeat.flags; put_u32(b + 1, p->m.heartbeat.uptime_ms);
        return 5;
    case MMS_ESTOP:
        b[0] = p->m.estop.reason;
        return 1;
    case MMS_CONFIGURE:
        put_u16(b, p->m.configure.sample_rate_hz); b[2] = p->m.configure.samples_per_frame;
        put_u16(b + 3, p->m.configure.watchdog_ms);
        return 5;
    case MMS_ACK: case MMS_NACK:
        b[0] = p->m.ack.msg_type; put_u16(b + 1, p->m.ack.seq);
        if (p->type == MMS_NACK) { b[3] = p->m.ack.reason; return 4; }
        return 3;
    case MMS_LINK_STATS:
        for (int k = 0; k < 9; k++) put_u32(b + 4 * k, p->m.link_stats.counters[k]);
        return 36;
    default:
        return MMS_ERR_TYPE;
    }
}

int mms_pack_frame(const mms_packet *p, uint8_t *frame, size_t capacity) {
    uint8_t buffer[MMS_MAX_FRAME_BYTES + 64];
    buffer[0] = p->version; buffer[1] = p->type; put_u16(buffer + 2, p->seq); put_u32(buffer + 4, p->t_us);
    const int n = pack_payload(p, buffer + MMS_HEADER_BYTES);
    if (n < 0) return n;
    const size_t body = MMS_HEADER_BYTES + (size_t)n;
    if (body + MMS_CRC_BYTES > MMS_MAX_FRAME_BYTES) return MMS_ERR_OVERSIZE;
    if (body + MMS_CRC_BYTES > capacity) return MMS_ERR_CAPACITY;
    const uint16_t crc = mms_crc16_ccitt_false(buffer, body);
    buffer[body] = (uint8_t)(crc >> 8); buffer[body + 1] = (uint8_t)crc;
    memcpy(frame, buffer, body + MMS_CRC_BYTES);
    return (int)(body + MMS_CRC_BYTES);
}

static int expect(size_t got, size_t want) { return got == want ? MMS_OK : MMS_ERR_LENGTH; }

int mms_unpack_frame(const uint8_t *f, size_t n, mms_packet *p) {
    if (n > MMS_MAX_FRAME_BYTES) return MMS_ERR_OVERSIZE;
    if (n < MMS_HEADER_BYTES + MMS_CRC_BYTES) return MMS_ERR_SHORT;
    if (mms_crc16_ccitt_false(f, n) != 0) return MMS_ERR_CRC;
    p->version = f[0]; p->type = f[1]; p->seq = get_u16(f + 2); p->t_us = get_u32(f + 4);
    if (p->version != MMS_PROTOCOL_VERSION) return MMS_ERR_VERSION;
    const uint8_t *b = f + MMS_HEADER_BYTES;
    const size_t len = n - MMS_HEADER_BYTES - MMS_CRC_BYTES;
    switch (p->type) {
    case MMS_HELLO: case MMS_ESTOP_RESET: case MMS_GET_LINK_STATS:
        return expect(len, 0);
    case MMS_DEVICE_INFO:
        if (len < 8 || b[7] > MMS_MAX_NAME_BYTES || len != 8u + b[7]) return MMS_ERR_LENGTH;
        p->m.device_info.protocol_version = b[0];
        memcpy(p->m.device_info.fw, b + 1, 3);
        p->m.device_info.n_servo = b[4]; p->m.device_info.n_strain = b[5]; p->m.device_info.n_load = b[6];
        p->m.device_info.name_len = b[7];
        memcpy(p->m.device_info.name, b + 8, b[7]);
        p->m.device_info.name[b[7]] = 0;
        return MMS_OK;
    case MMS_SETPOINTS:
        if (len < 1 || b[0] == 0 || len != 1u + 4u * b[0]) return MMS_ERR_LENGTH;
        p->m.setpoints.n = b[0];
        for (int k = 0; k < b[0]; k++) p->m.setpoints.raw[k] = get_f32(b + 1 + 4 * k);
        return MMS_OK;
    case MMS_TELEMETRY: {
        if (len < 5) return MMS_ERR_LENGTH;
        const uint8_t ns = b[1], ng = b[2], nl = b[3], count = b[4];
        if (ns > MMS_MAX_CHANNELS || ng > MMS_MAX_CHANNELS || nl > MMS_MAX_CHANNELS || count > MMS_MAX_SAMPLES)
            return MMS_ERR_CAPACITY;
        const size_t sample_bytes = 4u + 4u * (ns + ng + nl);
        if (len != 5 + count * sample_bytes) return MMS_ERR_LENGTH;
        p->m.telemetry.flags = b[0]; p->m.telemetry.n_servo = ns; p->m.telemetry.n_strain = ng;
        p->m.telemetry.n_load = nl; p->m.telemetry.n_samples = count;
        const uint8_t *x = b + 5;
        for (int s = 0; s < count; s++) {
            mms_sample *out = &p->m.telemetry.samples[s];
            out->t_us = get_u32(x); x += 4;
            for (int k = 0; k < ns; k++, x += 4) out->servo[k] = get_f32(x);
            for (int k = 0; k < ng; k++, x += 4) out->strain[k] = (int32_t)get_u32(x);
            for (int k = 0; k < nl; k++, x += 4) out->load[k] = (int32_t)get_u32(x);
        }
        return MMS_OK;
    }
    case MMS_HEARTBEAT:
        if (expect(len, 5)) return MMS_ERR_LENGTH;
        p->m.heartbeat.flags = b[0]; p->m.heartbeat.uptime_ms = get_u32(b + 1);
        return MMS_OK;
    case MMS_ESTOP:
        if (expect(len, 1)) return MMS_ERR_LENGTH;
        p->m.estop.reason = b[0];
        return MMS_OK;
    case MMS_CONFIGURE:
        if (expect(len, 5)) return MMS_ERR_LENGTH;
        p->m.configure.sample_rate_hz = get_u16(b); p->m.configure.samples_per_frame = b[2];
        p->m.configure.watchdog_ms = get_u16(b + 3);
        return MMS_OK;
    case MMS_ACK: case MMS_NACK:
        if (expect(len, p->type == MMS_ACK ? 3 : 4)) return MMS_ERR_LENGTH;
        p->m.ack.msg_type = b[0]; p->m.ack.seq = get_u16(b + 1);
        p->m.ack.reason = p->type == MMS_NACK ? b[3] : 0;
        return MMS_OK;
    case MMS_LINK_STATS:
        if (expect(len, 36)) return MMS_ERR_LENGTH;
        for (int k = 0; k < 9; k++) p->m.link_stats.counters[k] = get_u32(b + 4 * k);
        return MMS_OK;
    default:
        return MMS_ERR_TYPE;
    }
}

int mms_encode(const mms_packet *p, uint8_t *wire, size_t capacity) {
    uint8_t frame[MMS_MAX_FRAME_BYTES];
    const int n = mms_pack_frame(p, frame, sizeof frame);
    if (n < 0) return n;
    if ((size_t)n + (size_t)n / 254 + 3 > capacity) return MMS_ERR_CAPACITY;
    wire[0] = 0;
    const size_t e = mms_cobs_encode(frame, (size_t)n, wire + 1);
    wire[1 + e] = 0;
    return (int)(e + 2);
}
