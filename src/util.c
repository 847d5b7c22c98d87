#define _GNU_SOURCE
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static _Thread_local char g_err[512];
static _Thread_local int g_status;

const char *dp_last_error(void) { return g_err[0] ? g_err : "no error"; }
int dp_last_status(void) { return g_status; }

int dp_set_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    /* keep it one line */
    for (char *p = g_err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    g_status = code;
    return code;
}

void *dp_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) dp_set_error(DP_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void *dp_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) dp_set_error(DP_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *dp_malloc_aligned(size_t n) {
    void *p = NULL;
    size_t sz = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, sz ? sz : 64) != 0) {
        dp_set_error(DP_ERR_NOMEM, "out of memory allocating %zu bytes", n);
        return NULL;
    }
    return p;
}

void dp_free_aligned(void *p) { free(p); }

char *dp_strndup(const char *s, size_t n) {
    char *r = dp_malloc(n + 1);
    if (!r) return NULL;
    memcpy(r, s, n);
    r[n] = 0;
    return r;
}

uint64_t dp_peak_rss_bytes(void) {
    /* VmHWM from /proc is exact; getrusage is the fallback. */
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) break;
        fclose(f);
        if (kb) return (uint64_t)kb * 1024;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

double dp_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double dp_rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
