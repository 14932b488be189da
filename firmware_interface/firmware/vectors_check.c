/* Test harness of the reference codec: one wire frame in hex per stdin line; for each prints one line of JSON
 * {"type_id", "seq", "t_us", "fields": {...}, "wire_hex"}: the fields as decoded by the C codec (names as in
 * firmware_interface/vectors.json) and the bytes the C encoder makes from them. Malformed input: {"error": code}.
 */
#include <stdio.h>
#include <string.h>

#include "mms_proto.h"

static void print_floats(const float *v, int n) {
    printf("[");
    for (int k = 0; k < n; k++) printf("%s%.17g", k ? ", " : "", (double)v[k]);
    printf("]");
}

static void print_ints(const int32_t *v, int n) {
    printf("[");
    for (int k = 0; k < n; k++) printf("%s%ld", k ? ", " : "", (long)v[k]);
    printf("]");
}

static void print_fields(const mms_packet *p) {
    switch (p->type) {
    case MMS_DEVICE_INFO:
        printf("{\"protocol_version\": %u, \"firmware_version\": [%u, %u, %u], \"rig_name\": \"%s\", "
               "\"n_servo\": %u, \"n_strain\": %u, \"n_load\": %u}", p->m.device_info.protocol_version,
               p->m.device_info.fw[0], p->m.device_info.fw[1], p->m.device_info.fw[2], p->m.device_info.name,
               p->m.device_info.n_servo, p->m.device_info.n_strain, p->m.device_info.n_load);
        break;
    case MMS_SETPOINTS:
        printf("{\"raw\": "); print_floats(p->m.setpoints.raw, p->m.setpoints.n); printf("}");
        break;
    case MMS_TELEMETRY:
        printf("{\"flags\": %u, \"n_servo\": %u, \"n_strain\": %u, \"n_load\": %u, \"samples\": [",
               p->m.telemetry.flags, p->m.telemetry.n_servo, p->m.telemetry.n_strain, p->m.telemetry.n_load);
        for (int s = 0; s < p->m.telemetry.n_samples; s++) {
            const mms_sample *x = &p->m.telemetry.samples[s];
            printf("%s{\"t_us\": %lu, \"servo\": ", s ? ", " : "", (unsigned long)x->t_us);
            print_floats(x->servo, p->m.telemetry.n_servo);
            printf(", \"strain\": "); print_ints(x->strain, p->m.telemetry.n_strain);
            printf(", \"load\": "); print_ints(x->load, p->m.telemetry.n_load);
            printf("}");
        }
        printf("]}");
        break;
    case MMS_HEARTBEAT:
        printf("{\"flags\": %u, \"uptime_ms\": %lu}", p->m.heartbeat.flags, (unsigned long)p->m.heartbeat.uptime_ms);
        break;
    case MMS_ESTOP:
        printf("{\"reason\": %u}", p->m.estop.reason);
        break;
    case MMS_CONFIGURE:
        printf("{\"sample_rate_hz\": %u, \"samples_per_frame\": %u, \"watchdog_ms\": %u}",
               p->m.configure.sample_rate_hz, p->m.configure.samples_per_frame, p->m.configure.watchdog_ms);
        break;
    case MMS_ACK:
        printf("{\"msg_type\": %u, \"seq\": %u}", p->m.ack.msg_type, p->m.ack.seq);
        break;
    case MMS_NACK:
        printf("{\"msg_type\": %u, \"seq\": %u, \"reason\": %u}", p->m.ack.msg_type, p->m.ack.seq, p->m.ack.reason);
        break;
    case MMS_LINK_STATS: {
        static const char *names[9] = {"frames_rx", "frames_tx", "crc_errors", "framing_errors", "oversize",
                                       "malformed", "seq_gaps", "tx_dropped", "watchdog_trips"};
        printf("{");
        for (int k = 0; k < 9; k++)
            printf("%s\"%s\": %lu", k ? ", " : "", names[k], (unsigned long)p->m.link_stats.counters[k]);
        printf("}");
        break;
    }
    default:
        printf("{}");
    }
}

int main(void) {
    static char line[8192];
    static uint8_t wire[4096], frame[MMS_MAX_ENCODED_BYTES], out[4096];
    static mms_packet packet;
    while (fgets(line, sizeof line, stdin)) {
        size_t n = 0;
        for (char *c = line; c[0] && c[1] && c[0] != '\n'; c += 2) {
            unsigned v;
            if (sscanf(c, "%2x", &v) != 1) break;
            wire[n++] = (uint8_t)v;
        }
        /* strip the delimiters */
        size_t start = 0, end = n;
        while (start < end && wire[start] == 0) start++;
        while (end > start && wire[end - 1] == 0) end--;
        int rc = mms_cobs_decode(wire + start, end - start, frame, sizeof frame);
        if (rc >= 0) rc = mms_unpack_frame(frame, (size_t)rc, &packet);
        if (rc < 0) { printf("{\"error\": %d}\n", rc); continue; }
        const int w = mms_encode(&packet, out, sizeof out);
        if (w < 0) { printf("{\"error\": %d}\n", w); continue; }
        printf("{\"type_id\": %u, \"seq\": %u, \"t_us\": %lu, \"fields\": ", packet.type, packet.seq,
               (unsigned long)packet.t_us);
        print_fields(&packet);
        printf(", \"wire_hex\": \"");
        for (int k = 0; k < w; k++) printf("%02x", out[k]);
        printf("\"}\n");
    }
    return 0;
}
