/* DOPPLER_CPU_ACT through the CLI on a tiny Q5_0 model (CPU backend):
 * int16, f32 and auto run without messages; an unknown value is bad input
 * (the settings table, src/settings.c): one error line naming it, exit 2,
 * no output; f32 and int16 both generate. */
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "testlib.h"
#include "testmodel.h"

static int count_lines_with(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* runs with DOPPLER_CPU_ACT=value (NULL: unset); returns stdout, stderr in *err and the exit status in *rc */
static char *run_with(const char *value, const char *args, char **err, int *rc) {
    if (value) setenv("DOPPLER_CPU_ACT", value, 1);
    else unsetenv("DOPPLER_CPU_ACT");
    char *out = NULL;
    *rc = t_run_doppler(args, &out, err);
    unsetenv("DOPPLER_CPU_ACT");
    return out;
}

int main(void) {
    t_seed();
    const char *tiny = t_tmp_path(".gguf");
    CHECK(tm_write(tiny, &(tm_opts){.arch = "llama", .n_layer = 2, .weight_type = DP_TYPE_Q5_0,
                                    .seed = (unsigned)t_rand_u64()}) == 0);
    char a[1024];
    snprintf(a, sizeof a, "run -m %s --backend cpu -t 2 -p \"the sky is\" -n 6 --temp 0", tiny);
    char *err = NULL;
    int rc;
    char *def = run_with(NULL, a, &err, &rc);
    CHECKF(rc == 0, "default run: exit %d: %s", rc, err);
    CHECKF(!strstr(err, "DOPPLER_CPU_ACT"), "default run mentions DOPPLER_CPU_ACT: %s", err);
    free(err);
    const char *ok[] = {"int16", "f32", "auto", "F32"};
    for (int i = 0; i < 4; i++) {
        char *o = run_with(ok[i], a, &err, &rc);
        CHECKF(rc == 0, "DOPPLER_CPU_ACT=%s: exit %d: %s", ok[i], rc, err);
        CHECKF(!strstr(err, "DOPPLER_CPU_ACT"), "DOPPLER_CPU_ACT=%s printed: %s", ok[i], err);
        CHECKF(o && def && strlen(o) > 0, "DOPPLER_CPU_ACT=%s: no output", ok[i]);
        if (strcmp(ok[i], "int16") == 0 || strcmp(ok[i], "auto") == 0)
            CHECKF(o && def && !strcmp(o, def), "DOPPLER_CPU_ACT=%s differs from the default", ok[i]);
        free(o);
        free(err);
    }
    char *o = run_with("int8", a, &err, &rc);
    CHECKF(rc == 2 && count_lines_with(err, "DOPPLER_CPU_ACT='int8'") == 1 && strstr(err, "error"),
           "unknown value: want exit 2 and one error line naming it, got %d: %s", rc, err);
    CHECKF(o && !*o, "unknown value: output %s", o ? o : "(none)");
    free(o);
    free(err);
    free(def);
    remove(tiny);
    return t_done("test_cpu_act_env");
}
