/* Reference C codec of the MMS serial protocol, version 1 (docs/protocol.md).
 *
 * Portable C99, no allocation, no I/O: what a rig's firmware links in. Checked against
 * firmware_interface/vectors.json by tests/firmware_interface/test_fi_c_codec.py (vectors_check.c).
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
#define MMS_MAX_ENCODED_BYTES (MMS_MAX_FRAME_BYTES + (MMS_MAX_FRAME_BYTES + 253) / 254)
#define MMS_MAX_NAME_BYTES 32
#define MMS_MAX_CHANNELS 32                         /* per kind, for this reference build */
#define MMS_MAX_SAMPLES 64

enum mms_type {
    MMS_HELLO = 0x01, MMS_DEVICE_INFO = 0x02, MMS_SETPOINTS = 0x10, MMS_TELEMETRY = 0x11,
    MMS_HEARTBEAT = 0x20, MMS_ESTOP = 0x30, MMS_ESTOP_RESET = 0x31, MMS_CONFIGURE = 0x40,
    MMS_ACK = 0x50, MMS_NACK = 0x51, MMS_GET_LINK_STATS = 0x60, MMS_LINK_STATS = 0x61
};

enum mms_error {
    MMS_OK = 0, MMS_ERR_FRAMING = -1, MMS_ERR_OVERSIZE = -2, MMS_ERR_SHORT = -3, MMS_ERR_CRC = -4,
    MMS_ERR_VERSION = -5, MMS_ERR_TYPE = -6, MMS_ERR_LENGTH = -7, MMS_ERR_CAPACITY = -8
};

typedef struct {
    uint32_t t_us;
    float servo[MMS_MAX_CHANNELS];
    int32_t strain[MMS_MAX_CHANNELS];
    int32_t load[MMS_MAX_CHANNELS];
} mms_sample;

typedef struct {
    uint8_t version, type;
    uint16_t seq;
    uint32_t t_us;
    union {
        struct { uint8_t protocol_version, fw[3], n_servo, n_strain, n_load, name_len; char name[MMS_MAX_NAME_BYTES + 1]; } device_info;
        struct { uint8_t n; float raw[255]; } setpoints;
        struct { uint8_t flags, n_servo, n_strain, n_load, n_samples; mms_sample samples[MMS_MAX_SAMPLES]; } telemetry;
        struct { uint8_t flags; uint32_t uptime_ms; } heartbeat;
        struct { uint8_t reason; } estop;
        struct { uint16_t sample_rate_hz; uint8_t samples_per_frame; uint16_t watchdog_ms; } configure;
        struct { uint8_t msg_type; uint16_t seq; uint8_t reason; } ack;   /* reason: NACK only */
        struct { uint32_t counters[9]; } link_stats;
    } m;
} mms_packet;

uint16_t mms_crc16_ccitt_false(const uint8_t *data, size_t n);
size_t mms_cobs_encode(const uint8_t *in, size_t n, uint8_t *out);
/* Returns the decoded length, or MMS_ERR_FRAMING / MMS_ERR_OVERSIZE. */
int mms_cobs_decode(const uint8_t *in, size_t n, uint8_t *out, size_t capacity);
/* Frame (header + payload + crc, not COBS) <-> packet. Return length / MMS_OK, or a negative mms_error. */
int mms_pack_frame(const mms_packet *p, uint8_t *frame, size_t capacity);
int mms_unpack_frame(const uint8_t *frame, size_t n, mms_packet *p);
/* Wire form: 0x00 COBS(frame) 0x00. Returns the length written or a negative mms_error. */
int mms_encode(const mms_packet *p, uint8_t *wire, size_t capacity);

#endif
