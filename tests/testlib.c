#define _GNU_SOURCE
#include "testlib.h"

#include "doppler.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int t_failures, t_checks;

int t_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

void t_skip(const char *why, ...) {
    va_list ap;
    va_start(ap, why);
    printf("SKIP: ");
    vprintf(why, ap);
    printf("\n");
    va_end(ap);
    exit(77);
}

const char *t_src_path(const char *rel) {
    static char buf[8][4096];
    static int k;
    const char *root = getenv("DOPPLER_SOURCE_DIR");
    char *b = buf[k++ % 8];
    snprintf(b, 4096, "%s/%s", root ? root : ".", rel);
    return b;
}

const char *t_model_path(const char *file) {
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4];
    const char *dir = getenv("DOPPLER_MODELS");
    if (dir && *dir) snprintf(b, 4096, "%s/%s", dir, file);
    else snprintf(b, 4096, "%s/.cache/doppler/models/%s", getenv("HOME") ? getenv("HOME") : ".", file);
    return access(b, R_OK) == 0 ? b : NULL;
}

struct dp_model *t_load_cached_model(const char *file) {
    const char *path = t_model_path(file);
    if (!path) {
        printf("%s not cached: skipped\n", file);
        return NULL;
    }
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "%s: %s", file, dp_last_error());
    return m;
}

const char *t_shared_fixture(const char *file) {
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4];
    const char *dir = getenv("DOPPLER_SHARED_FIXTURES");
    if (dir && *dir) snprintf(b, 4096, "%s/%s", dir, file);
    else snprintf(b, 4096, "%s/../shared/fixtures/%s", getenv("DOPPLER_SOURCE_DIR") ? getenv("DOPPLER_SOURCE_DIR") : ".", file);
    return access(b, R_OK) == 0 ? b : NULL;
}

const char *t_tmp_path(const char *suffix) {
    static char buf[256][512];
    static int k;
    char *b = buf[k % 256];
    const char *dir = getenv("TMPDIR");
    snprintf(b, 512, "%s/doppler-test-%d-%d%s", dir && *dir ? dir : "/tmp", (int)getpid(), k, suffix ? suffix : "");
    k++;
    return b;
}

const char *t_join(const char *dir, const char *name) {
    static char buf[64][1024];
    static int k;
    char *b = buf[k++ % 64];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

char *t_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

int t_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t k = fwrite(data, 1, len, f);
    return fclose(f) == 0 && k == len ? 0 : -1;
}

static uint64_t g_rng[2];
static int g_seeded;

uint64_t t_seed(void) {
    if (!g_seeded) {
        const char *s = getenv("DOPPLER_TEST_SEED");
        uint64_t seed = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
        printf("test seed: %llu (set DOPPLER_TEST_SEED to replay)\n", (unsigned long long)seed);
        g_rng[0] = seed * 0x9e3779b97f4a7c15ull + 1;
        g_rng[1] = (seed ^ 0xdeadbeefcafef00dull) * 0xbf58476d1ce4e5b9ull + 3;
        g_seeded = 1;
        g_rng[0] ^= seed;
        (void)g_seeded;
        return seed;
    }
    return 0;
}

uint64_t t_rand_u64(void) {
    if (!g_seeded) t_seed();
    /* xorshift128+ */
    uint64_t s1 = g_rng[0], s0 = g_rng[1];
    g_rng[0] = s0;
    s1 ^= s1 << 23;
    g_rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return g_rng[1] + s0;
}

double t_rand_unit(void) { return (double)(t_rand_u64() >> 11) * (1.0 / 9007199254740992.0); }

int t_rand_int(int lo, int hi) { return lo + (int)(t_rand_u64() % (uint64_t)(hi - lo + 1)); }

float t_rand_normal(void) {
    double u1 = t_rand_unit(), u2 = t_rand_unit();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static char *slurp_fd(FILE *f) {
    size_t cap = 4096, n = 0, k;
    char *b = malloc(cap);
    while ((k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 >= cap) b = realloc(b, cap *= 2);
    }
    b[n] = 0;
    return b;
}

void t_shell_quote(char *dst, size_t cap, const char *s) {
    size_t n = 0;
    dst[n++] = '\'';
    for (; *s && n + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(dst + n, "'\\''", 4);
            n += 4;
        } else {
            dst[n++] = *s;
        }
    }
    dst[n++] = '\'';
    dst[n] = 0;
}

int t_run_doppler(const char *args, char **out, char **err) {
    const char *bin = getenv("DOPPLER_BIN");
    if (!bin) bin = "doppler";
    static int n_runs;
    char errpath[512];
    const char *dir = getenv("TMPDIR");
    snprintf(errpath, sizeof errpath, "%s/doppler-test-%d-run%d.stderr", dir && *dir ? dir : "/tmp", (int)getpid(),
             n_runs++);
    size_t cl = strlen(bin) + strlen(args) + strlen(errpath) + 64;
    char *cmd = malloc(cl);
    snprintf(cmd, cl, "'%s' %s 2>'%s'", bin, args, errpath);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return -2;
    char *o = slurp_fd(p);
    int st = pclose(p);
    if (out) *out = o;
    else free(o);
    char *e = t_read_file(errpath, NULL);
    unlink(errpath);
    if (err) *err = e ? e : strdup("");
    else free(e);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return -1;
}

