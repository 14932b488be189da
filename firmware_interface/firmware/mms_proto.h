/* Reference C codec of the MMS serial protocol, version 1 (docs/protocol.md).
 *
 * Portable C99, no allocation, no I/O: what a rig's firmware links in. Checked against
 * firmware_interface/vectors.json and against the Python codec (firmware_interface/protocol.py) by
 * tests/firmware_interface/test_fi_c_codec.py (vectors_check.c), and fuzzed under AddressSanitizer and
 * UndefinedBehaviorSanitizer (fuzz_codec.c).
 *
 * Acceptance rules are the Python codec's, for every message, both ways: a frame the Python decoder accepts is
 * decoded here with the same fields, one it refuses is refused here (the error codes map to the Python error
 * kinds as listed at enum mms_error); the encoder refuses what the Python encoder refuses, and checks every
 * size before it writes a byte.
 * Byte order: little-endian fields, CRC-16/CCITT-FALSE sent most significant byte first.
 */
#ifndef MMS_PROTO_H
#define MMS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define MMS_PROTOCOL_VERSION 1
#define MMS_HEADER_BYTES 8
#define MMS_CRC_BYTES 2
#define MMS_MAX_FRAME_BYTES 512                     /* header + payload + crc, before COBS */
#define MMS_MAX_PAYLOAD_BYTES (MMS_MAX_FRAME_BYTES - MMS_HEADER_BYTES - MMS_CRC_BYTES)
#define MMS_MAX_ENCODED_BYTES (MMS_MAX_FRAME_BYTES + (MMS_MAX_FRAME_BYTES + 253) / 254)
/* 0x00, COBS form, 0x00: what mms_encode writes at most */
#define MMS_MAX_WIRE_BYTES (MMS_MAX_ENCODED_BYTES + 2)
#define MMS_MAX_NAME_BYTES 32
/* the most setpoints a frame holds: u8 count + float32 each in the payload */
#define MMS_MAX_SETPOINTS ((MMS_MAX_PAYLOAD_BYTES - 1) / 4)
#define MMS_TELEMETRY_HEAD_BYTES 5
/* the most 32-bit words (sample times and channel values) a telemetry frame holds */
#define MMS_MAX_TELEMETRY_WORDS ((MMS_MAX_PAYLOAD_BYTES - MMS_TELEMETRY_HEAD_BYTES) / 4)

enum mms_type {
    MMS_HELLO = 0x01, MMS_DEVICE_INFO = 0x02, MMS_SETPOINTS = 0x10, MMS_TELEMETRY = 0x11,
    MMS_HEARTBEAT = 0x20, MMS_ESTOP = 0x30, MMS_ESTOP_RESET = 0x31, MMS_CONFIGURE = 0x40,
    MMS_ACK = 0x50, MMS_NACK = 0x51, MMS_GET_LINK_STATS = 0x60, MMS_LINK_STATS = 0x61
};

/* In brackets the Python codec's ProtocolError kind (the link counter) of the same refusal. */
enum mms_error {
    MMS_OK = 0,
    MMS_ERR_FRAMING = -1,   /* not valid COBS [framing_errors] */
    MMS_ERR_OVERSIZE = -2,  /* frame longer than MMS_MAX_FRAME_BYTES, or its COBS form than MMS_MAX_ENCODED_BYTES [oversize] */
    MMS_ERR_SHORT = -3,     /* shorter than header + CRC [malformed] */
    MMS_ERR_CRC = -4,       /* [crc_errors] */
    MMS_ERR_VERSION = -5,   /* [bad_version] */
    MMS_ERR_TYPE = -6,      /* [unknown_type] */
    MMS_ERR_LENGTH = -7,    /* payload length wrong for its type, or a count out of range [malformed] */
    MMS_ERR_CAPACITY = -8,  /* the caller's output buffer is too small */
    MMS_ERR_VALUE = -9      /* a field value the protocol refuses: a rig name that is not UTF-8 [malformed] */
};

/* One 32-bit telemetry value: a sample time (u), a servo position (f), a strain or load count (i). */
typedef union { uint32_t u; float f; int32_t i; } mms_word;

typedef struct {
    uint8_t version, type;
    uint16_t seq;
    uint32_t t_us;
    union {
        struct { uint8_t protocol_version, fw[3], n_servo, n_strain, n_load, name_len; char name[MMS_MAX_NAME_BYTES + 1]; } device_info;
        struct { uint8_t n; float raw[MMS_MAX_SETPOINTS]; } setpoints;
        /* words: n_samples samples of mms_telemetry_sample_words() words each, in wire order:
         * t_us, then n_servo servo positions, n_strain strain counts, n_load load counts */
        struct { uint8_t flags, n_servo, n_strain, n_load, n_samples; mms_word words[MMS_MAX_TELEMETRY_WORDS]; } telemetry;
        struct { uint8_t flags; uint32_t uptime_ms; } heartbeat;
        struct { uint8_t reason; } estop;
        struct { uint16_t sample_rate_hz; uint8_t samples_per_frame; uint16_t watchdog_ms; } configure;
        struct { uint8_t msg_type; uint16_t seq; uint8_t reason; } ack;   /* reason: NACK only */
        struct { uint32_t counters[9]; } link_stats;
    } m;
} mms_packet;

/* Words per telemetry sample: its time and one value per channel. */
static inline size_t mms_telemetry_sample_words(const mms_packet *p) {
    return 1u + (size_t)p->m.telemetry.n_servo + p->m.telemetry.n_strain + p->m.telemetry.n_load;
}

uint16_t mms_crc16_ccitt_false(const uint8_t *data, size_t n);
/* 1 if s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF). */
int mms_utf8_valid(const uint8_t *s, size_t n);
/* Writes n + n / 254 + 1 bytes at most. */
size_t mms_cobs_encode(const uint8_t *in, size_t n, uint8_t *out);
/* Returns the decoded length, or MMS_ERR_FRAMING / MMS_ERR_OVERSIZE (more than capacity). */
int mms_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t capacity);
/* Frame (header + payload + crc, not COBS) <-> packet. Return length / MMS_OK, or a negative mms_error. */
int mms_pack_frame(const mms_packet *p, uint8_t *frame, size_t capacity);
int mms_unpack_frame(const uint8_t *frame, size_t n, mms_packet *p);
/* One COBS-encoded frame (between delimiters, without them) -> packet: MMS_OK or a negative mms_error. */
int mms_decode(const uint8_t *encoded, size_t n, mms_packet *p);
/* Wire form: 0x00 COBS(frame) 0x00. Returns the length written or a negative mms_error. */
int mms_encode(const mms_packet *p, uint8_t *wire, size_t capacity);

#endif
