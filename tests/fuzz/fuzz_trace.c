/* libFuzzer target: the trace file reader of `doppler trace compare`
 * (tools/trace_io.c, compiled in). An accepted file's entries must lie
 * inside it: every float of every entry is read. */
#include <string.h>

#include "fuzzlib.h"
#include "trace_io.c"

static volatile float g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the reader's own layout: the bytes and a NUL, exactly, on the heap */
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    trace_set t;
    char err[512];
    if (trace_set_parse(&t, buf, size, "fuzz", err, sizeof err) == 0) {
        float acc = 0;
        for (int i = 0; i < t.n; i++)
            for (uint64_t k = 0; k < (uint64_t)t.e[i].n_pos * (uint64_t)t.e[i].dim; k++) acc += t.e[i].data[k];
        g_sink = acc;
    } else if (!err[0]) {
        abort(); /* a refusal says why */
    }
    trace_set_free(&t);
    return 0;
}
