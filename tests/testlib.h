/* Minimal test support: checks that count failures, fixture paths, random
 * numbers, running the doppler binary. */
#ifndef DP_TESTLIB_H
#define DP_TESTLIB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern int t_failures, t_checks;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        t_checks++;                                                                   \
        if (!(cond)) {                                                                \
            t_failures++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                             \
    } while (0)

#define CHECKF(cond, ...)                                                             \
    do {                                                                              \
        t_checks++;                                                                   \
        if (!(cond)) {                                                                \
            t_failures++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
        }                                                                             \
    } while (0)

/* Prints the summary and returns the process exit code. */
int t_done(const char *name);
/* Exits with ctest's skip code after printing why. */
void t_skip(const char *why, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Path under the source tree (tests/fixtures/...), via DOPPLER_SOURCE_DIR. */
const char *t_src_path(const char *rel);
/* Path of a real model in the cache, or NULL when it is absent. */
const char *t_model_path(const char *file);
/* The cached real model loaded, or NULL: absent (a line says it is skipped)
 * or failing to load (a failed check). */
struct dp_model *t_load_cached_model(const char *file);
/* Path of a file in the shared fixtures (../shared/fixtures), or NULL. */
const char *t_shared_fixture(const char *file);
/* A fresh temporary file path (unique per call; the string stays valid for
 * the next 255 calls). */
const char *t_tmp_path(const char *suffix);
/* dir + "/" + name (the string stays valid for the next 63 calls). */
const char *t_join(const char *dir, const char *name);
/* Reads a whole file; NULL when unreadable. */
char *t_read_file(const char *path, size_t *len);
int t_write_file(const char *path, const void *data, size_t len);

/* Seeded from DOPPLER_TEST_SEED or the clock; the seed is printed so a
 * failure can be replayed. */
uint64_t t_seed(void);
uint64_t t_rand_u64(void);
double t_rand_unit(void);        /* [0, 1) */
int t_rand_int(int lo, int hi);   /* lo..hi */
float t_rand_normal(void);

/* s in single quotes for a shell command line, into dst (cap bytes; a
 * longer text is cut). */
void t_shell_quote(char *dst, size_t cap, const char *s);

/* Runs the doppler binary with args (a shell-quoted string); captures stdout
 * and stderr into malloc'ed strings (may be NULL) and returns the exit code
 * (-1 when it died from a signal). */
int t_run_doppler(const char *args, char **out, char **err);


#endif
