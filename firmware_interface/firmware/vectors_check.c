/* Test harness of the reference codec: one wire frame in hex per stdin line; for each prints one line of JSON
 * {"type_id", "seq", "t_us", "fields": {...}, "wire_hex"}: the fields as decoded by the C codec (names as in
 * firmware_interface/vectors.json; non-finite floats as NaN / Infinity / -Infinity, as Python's json reads them)
 * and the bytes the C encoder makes from them. Malformed input: {"error": code}.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mms_proto.h"

static void print_float(float f) {
    if (isnan(f)) printf("NaN");
    else if (isinf(f)) printf(f > 0 ? "Infinity" : "-Infinity");
    else printf("%.17g", (double)f);
}

static void print_floats(const float *v, int n) {
    printf("[");
    for (int k = 0; k < n; k++) { printf("%s", k ? ", " : ""); print_float(v[k]); }
    printf("]");
}

/* n words of a telemetry sample as floats (servo) or ints (strain, load) */
static void print_words(const mms_word *w, int n, int as_float) {
    printf("[");
    for (int k = 0; k < n; k++) {
        printf("%s", k ? ", " : "");
        if (as_float) print_float(w[k].f); else printf("%ld", (long)w[k].i);
    }
    printf("]");
}

/* a JSON string: quotes, backslashes and control characters escaped, UTF-8 passed through */
static void print_json_string(const char *s, size_t n) {
    printf("\"");
    for (size_t k = 0; k < n; k++) {
        const unsigned char c = (unsigned char)s[k];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    printf("\"");
}

static void print_fields(const mms_packet *p) {
    switch (p->type) {
    case MMS_DEVICE_INFO:
        printf("{\"protocol_version\": %u, \"firmware_version\": [%u, %u, %u], \"rig_name\": ",
               p->m.device_info.protocol_version, p->m.device_info.fw[0], p->m.device_info.fw[1],
               p->m.device_info.fw[2]);
        print_json_string(p->m.device_info.name, p->m.device_info.name_len);
        printf(", \"n_servo\": %u, \"n_strain\": %u, \"n_load\": %u}", p->m.device_info.n_servo,
               p->m.device_info.n_strain, p->m.device_info.n_load);
        break;
    case MMS_SETPOINTS:
        printf("{\"raw\": "); print_floats(p->m.setpoints.raw, p->m.setpoints.n); printf("}");
        break;
    case MMS_TELEMETRY:
        printf("{\"flags\": %u, \"n_servo\": %u, \"n_strain\": %u, \"n_load\": %u, \"samples\": [",
               p->m.telemetry.flags, p->m.telemetry.n_servo, p->m.telemetry.n_strain, p->m.telemetry.n_load);
        for (int s = 0; s < p->m.telemetry.n_samples; s++) {
            const mms_word *x = p->m.telemetry.words + s * mms_telemetry_sample_words(p);
            const int ns = p->m.telemetry.n_servo, ng = p->m.telemetry.n_strain, nl = p->m.telemetry.n_load;
            printf("%s{\"t_us\": %lu, \"servo\": ", s ? ", " : "", (unsigned long)x[0].u);
            print_words(x + 1, ns, 1);
            printf(", \"strain\": "); print_words(x + 1 + ns, ng, 0);
            printf(", \"load\": "); print_words(x + 1 + ns + ng, nl, 0);
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
    static uint8_t wire[4096], out[MMS_MAX_WIRE_BYTES];
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
        const int rc = mms_decode(wire + start, end - start, &packet);
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
