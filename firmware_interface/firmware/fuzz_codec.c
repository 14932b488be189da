/* Fuzz harness of the reference codec, built with -fsanitize=address,undefined by
 * tests/firmware_interface/test_fi_c_fuzz.py.
 *
 *   fuzz_codec SEED ITERATIONS
 *
 * Each iteration, from a xorshift64* generator seeded with SEED, one of:
 *   - random bytes (zeros included) decoded as an encoded frame and as a raw frame;
 *   - a random packet (every count and length over its whole u8 range, unknown types too) encoded into an
 *     output buffer of random capacity;
 *   - a valid frame mutated (bits flipped, bytes inserted, dropped or cut) with its CRC made right again (but one
 *     time in eight), so the payload checks are reached, then COBS-encoded and decoded.
 * Every input and output buffer is a heap block of exactly the size passed, so AddressSanitizer sees a single
 * byte read or written past it. Checked on every packet the decoder accepts: it re-encodes, and to the same
 * bytes. Any failure aborts (with the sanitizers' report for memory errors and undefined behaviour).
 * Prints one JSON line: {"iterations", "accepted", "rejected": {"<error code>": count}, "encoded", "refused"}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mms_proto.h"

#define ERROR_CODES 10          /* MMS_OK and the nine negative codes */
#define MAX_RANDOM_BYTES 700    /* longer than the longest valid encoded frame, to reach the oversize checks */

static uint64_t state;

static uint64_t next(void) {    /* xorshift64* (Vigna 2016) */
    state ^= state >> 12; state ^= state << 25; state ^= state >> 27;
    return state * 0x2545F4914F6CDD1DULL;
}

static uint32_t below(uint32_t n) { return (uint32_t)(next() % n); }

static long rejected[ERROR_CODES], accepted, encoded, refused;

static void fail(const char *what) {
    fprintf(stderr, "fuzz_codec: %s\n", what);
    abort();
}

static uint8_t *copy_exact(const uint8_t *data, size_t n) {
    uint8_t *block = malloc(n ? n : 1);
    if (!block) fail("out of memory");
    if (n) memcpy(block, data, n);
    return block;
}

/* A packet the decoder accepted must re-encode, to the frame it came from. */
static void check_round_trip(const mms_packet *p, const uint8_t *frame, size_t n) {
    uint8_t again[MMS_MAX_FRAME_BYTES];
    const int m = mms_pack_frame(p, again, sizeof again);
    if (m < 0) fail("an accepted packet does not re-encode");
    if ((size_t)m != n || memcmp(again, frame, n) != 0) fail("an accepted packet re-encodes to other bytes");
}

static void count(int rc) {
    if (rc == MMS_OK) accepted++;
    else if (rc < 0 && -rc < ERROR_CODES) rejected[-rc]++;
    else fail("an error code outside enum mms_error");
}

static void decode_bytes(const uint8_t *data, size_t n) {
    mms_packet p;
    uint8_t *input = copy_exact(data, n);
    count(mms_decode(input, n, &p));
    const int rc = mms_unpack_frame(input, n, &p);
    if (rc == MMS_OK) check_round_trip(&p, input, n);
    const size_t capacity = below(MMS_MAX_ENCODED_BYTES + 1);
    uint8_t *out = malloc(capacity ? capacity : 1);
    if (!out) fail("out of memory");
    const int d = mms_cobs_decode(input, n, out, capacity);
    if (d > (int)capacity) fail("COBS decoded past its capacity");
    free(out);
    free(input);
}

static void random_packet(mms_packet *p) {
    static const uint8_t types[] = {MMS_HELLO, MMS_DEVICE_INFO, MMS_SETPOINTS, MMS_TELEMETRY, MMS_HEARTBEAT,
                                    MMS_ESTOP, MMS_ESTOP_RESET, MMS_CONFIGURE, MMS_ACK, MMS_NACK,
                                    MMS_GET_LINK_STATS, MMS_LINK_STATS, 0x00, 0x7F, 0xFF};
    memset(p, 0, sizeof *p);
    p->version = below(8) ? MMS_PROTOCOL_VERSION : (uint8_t)next();
    p->type = types[below(sizeof types)];
    p->seq = (uint16_t)next(); p->t_us = (uint32_t)next();
    uint8_t *fields = (uint8_t *)&p->m;
    for (size_t k = 0; k < sizeof p->m; k++) fields[k] = (uint8_t)next();   /* every field random... */
    switch (p->type) {                                                    /* ...counts mostly plausible */
    case MMS_DEVICE_INFO:
        p->m.device_info.name_len = (uint8_t)(below(4) ? below(MMS_MAX_NAME_BYTES + 1) : next());
        if (below(2)) for (int k = 0; k < MMS_MAX_NAME_BYTES; k++) p->m.device_info.name[k] = (char)('a' + below(26));
        break;
    case MMS_SETPOINTS:
        p->m.setpoints.n = (uint8_t)(below(4) ? below(MMS_MAX_SETPOINTS + 1) : next());
        break;
    case MMS_TELEMETRY:
        if (below(4)) {
            p->m.telemetry.n_servo = (uint8_t)below(8); p->m.telemetry.n_strain = (uint8_t)below(8);
            p->m.telemetry.n_load = (uint8_t)below(8); p->m.telemetry.n_samples = (uint8_t)below(20);
        }
        break;
    default:
        break;
    }
}

/* Encode a random packet into a buffer of random capacity; returns the frame length (0 if refused). */
static size_t encode_random(uint8_t *frame) {
    mms_packet p;
    random_packet(&p);
    const size_t capacity = below(4) ? MMS_MAX_WIRE_BYTES : below(MMS_MAX_WIRE_BYTES + 1);
    uint8_t *wire = malloc(capacity ? capacity : 1);
    if (!wire) fail("out of memory");
    const int w = mms_encode(&p, wire, capacity);
    if (w > (int)capacity) fail("encoded past its capacity");
    if (w >= 0) {
        encoded++;
        mms_packet back;
        if (w < 2 || wire[0] != 0 || wire[w - 1] != 0) fail("an encoded frame without its delimiters");
        const int rc = mms_decode(wire + 1, (size_t)w - 2, &back);
        if (rc != MMS_OK && p.version == MMS_PROTOCOL_VERSION) fail("the decoder refuses what the encoder made");
    } else {
        refused++;
    }
    free(wire);
    const int n = mms_pack_frame(&p, frame, MMS_MAX_FRAME_BYTES);
    return n > 0 ? (size_t)n : 0;
}

static void mutate_and_decode(uint8_t *frame, size_t n) {
    uint8_t buf[MMS_MAX_FRAME_BYTES + 64];
    if (n < MMS_HEADER_BYTES + MMS_CRC_BYTES) return;
    size_t m = n - MMS_CRC_BYTES;                                 /* header + payload */
    memcpy(buf, frame, m);
    const int edits = 1 + (int)below(4);
    for (int e = 0; e < edits; e++) {
        const uint32_t op = below(4), at = m ? below((uint32_t)m) : 0;
        if (op == 0 && m) buf[at] ^= (uint8_t)(1u << below(8));
        else if (op == 1 && m < sizeof buf - MMS_CRC_BYTES) { memmove(buf + at + 1, buf + at, m - at); buf[at] = (uint8_t)next(); m++; }
        else if (op == 2 && m > 1) { memmove(buf + at, buf + at + 1, m - at - 1); m--; }
        else if (op == 3) m = at;
    }
    const uint16_t crc = mms_crc16_ccitt_false(buf, m);
    buf[m] = (uint8_t)(crc >> 8); buf[m + 1] = (uint8_t)crc;
    if (below(8) == 0) buf[m + below(2)] ^= (uint8_t)(1u << below(8));   /* now and then a CRC left wrong */
    m += MMS_CRC_BYTES;
    uint8_t cobs[sizeof buf + sizeof buf / 254 + 1];
    const size_t c = mms_cobs_encode(buf, m, cobs);
    decode_bytes(cobs, c);
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: fuzz_codec SEED ITERATIONS\n"); return 2; }
    state = strtoull(argv[1], NULL, 10) | 1u;
    const long iterations = strtol(argv[2], NULL, 10);
    uint8_t data[MAX_RANDOM_BYTES], frame[MMS_MAX_FRAME_BYTES];
    for (long i = 0; i < iterations; i++) {
        switch (below(3)) {
        case 0: {
            const size_t n = below(MAX_RANDOM_BYTES + 1);
            for (size_t k = 0; k < n; k++) data[k] = (uint8_t)(below(8) ? next() : 0);
            decode_bytes(data, n);
            break;
        }
        case 1:
            encode_random(frame);
            break;
        default: {
            const size_t n = encode_random(frame);
            if (n) mutate_and_decode(frame, n);
        }
        }
    }
    printf("{\"iterations\": %ld, \"accepted\": %ld, \"rejected\": {", iterations, accepted);
    for (int k = 1; k < ERROR_CODES; k++) printf("%s\"%d\": %ld", k > 1 ? ", " : "", -k, rejected[k]);
    printf("}, \"encoded\": %ld, \"refused\": %ld}\n", encoded, refused);
    return 0;
}
