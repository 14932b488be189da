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

int mms_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const uint8_t c = s[i];
        size_t follow;
        uint8_t lo = 0x80, hi = 0xBF;           /* range of the first continuation byte (Unicode Table 3-7) */
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) follow = 1;
        else if (c == 0xE0) { follow = 2; lo = 0xA0; }
        else if (c == 0xED) { follow = 2; hi = 0x9F; }   /* no surrogates */
        else if (c >= 0xE1 && c <= 0xEF) follow = 2;
        else if (c == 0xF0) { follow = 3; lo = 0x90; }
        else if (c == 0xF4) { follow = 3; hi = 0x8F; }   /* nothing above U+10FFFF */
        else if (c >= 0xF1 && c <= 0xF3) follow = 3;
        else return 0;
        if (n - i - 1 < follow) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k <= follow; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += 1 + follow;
    }
    return 1;
}

/* Payload of p into b, which has room for MMS_MAX_PAYLOAD_BYTES; every size is checked before a byte is
 * written. Returns the payload length or a negative error. */
static int pack_payload(const mms_packet *p, uint8_t *b) {
    size_t o = 0;
    switch (p->type) {
    case MMS_HELLO: case MMS_ESTOP_RESET: case MMS_GET_LINK_STATS:
        return 0;
    case MMS_DEVICE_INFO: {
        const uint8_t len = p->m.device_info.name_len;
        if (len > MMS_MAX_NAME_BYTES) return MMS_ERR_LENGTH;
        if (!mms_utf8_valid((const uint8_t *)p->m.device_info.name, len)) return MMS_ERR_VALUE;
        b[0] = p->m.device_info.protocol_version;
        memcpy(b + 1, p->m.device_info.fw, 3);
        b[4] = p->m.device_info.n_servo; b[5] = p->m.device_info.n_strain; b[6] = p->m.device_info.n_load;
        b[7] = len;
        memcpy(b + 8, p->m.device_info.name, len);
        return 8 + len;
    }
    case MMS_SETPOINTS: {
        const size_t n = p->m.setpoints.n;
        if (n == 0) return MMS_ERR_LENGTH;
        if (1 + 4 * n > MMS_MAX_PAYLOAD_BYTES) return MMS_ERR_OVERSIZE;
        b[o++] = (uint8_t)n;
        for (size_t k = 0; k < n; k++, o += 4) put_f32(b + o, p->m.setpoints.raw[k]);
        return (int)o;
    }
    case MMS_TELEMETRY: {
        const size_t words = p->m.telemetry.n_samples * mms_telemetry_sample_words(p);
        if (words > MMS_MAX_TELEMETRY_WORDS) return MMS_ERR_OVERSIZE;
        b[o++] = p->m.telemetry.flags; b[o++] = p->m.telemetry.n_servo; b[o++] = p->m.telemetry.n_strain;
        b[o++] = p->m.telemetry.n_load; b[o++] = p->m.telemetry.n_samples;
        for (size_t k = 0; k < words; k++, o += 4) put_u32(b + o, p->m.telemetry.words[k].u);
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
    uint8_t buffer[MMS_MAX_FRAME_BYTES];
    buffer[0] = p->version; buffer[1] = p->type; put_u16(buffer + 2, p->seq); put_u32(buffer + 4, p->t_us);
    const int n = pack_payload(p, buffer + MMS_HEADER_BYTES);
    if (n < 0) return n;
    const size_t body = MMS_HEADER_BYTES + (size_t)n;
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
        if (len < 8 || len != 8u + b[7] || b[7] > MMS_MAX_NAME_BYTES) return MMS_ERR_LENGTH;
        if (!mms_utf8_valid(b + 8, b[7])) return MMS_ERR_VALUE;
        p->m.device_info.protocol_version = b[0];
        memcpy(p->m.device_info.fw, b + 1, 3);
        p->m.device_info.n_servo = b[4]; p->m.device_info.n_strain = b[5]; p->m.device_info.n_load = b[6];
        p->m.device_info.name_len = b[7];
        memcpy(p->m.device_info.name, b + 8, b[7]);
        p->m.device_info.name[b[7]] = 0;
        return MMS_OK;
    case MMS_SETPOINTS:
        /* len <= MMS_MAX_PAYLOAD_BYTES, so a matching count is at most MMS_MAX_SETPOINTS */
        if (len < 1 || b[0] == 0 || len != 1u + 4u * b[0]) return MMS_ERR_LENGTH;
        p->m.setpoints.n = b[0];
        for (int k = 0; k < b[0]; k++) p->m.setpoints.raw[k] = get_f32(b + 1 + 4 * k);
        return MMS_OK;
    case MMS_TELEMETRY: {
        if (len < MMS_TELEMETRY_HEAD_BYTES) return MMS_ERR_LENGTH;
        p->m.telemetry.flags = b[0]; p->m.telemetry.n_servo = b[1]; p->m.telemetry.n_strain = b[2];
        p->m.telemetry.n_load = b[3]; p->m.telemetry.n_samples = b[4];
        /* len <= MMS_MAX_PAYLOAD_BYTES, so a matching word count is at most MMS_MAX_TELEMETRY_WORDS */
        const size_t words = b[4] * mms_telemetry_sample_words(p);
        if (len != MMS_TELEMETRY_HEAD_BYTES + 4 * words) return MMS_ERR_LENGTH;
        for (size_t k = 0; k < words; k++) p->m.telemetry.words[k].u = get_u32(b + MMS_TELEMETRY_HEAD_BYTES + 4 * k);
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

int mms_decode(const uint8_t *encoded, size_t n, mms_packet *p) {
    /* room for one byte more than a frame may have, so that an oversize frame is told from a framing error
     * exactly as the Python decoder tells them */
    uint8_t frame[MMS_MAX_ENCODED_BYTES];
    if (n > MMS_MAX_ENCODED_BYTES) return MMS_ERR_OVERSIZE;
    const int len = mms_cobs_decode(encoded, n, frame, sizeof frame);
    if (len < 0) return len;
    return mms_unpack_frame(frame, (size_t)len, p);
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
