/* DOPPLER_CPU_ACT through the CLI on a tiny Q5_0 model (CPU backend):
 * int16, f32 and auto run without messages; an unknown value prints one
 * error line naming it and runs on the default path (the same output as
 * int16); f32 and int16 both generate. */
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

/* runs with DOPPLER_CPU_ACT=value (NULL: unset); returns stdout, stderr in *err */
static char *run_with(const char *value, const char *args, char **err) {
    if (value) setenv("DOPPLER_CPU_ACT", value, 1);
    else unsetenv("DOPPLER_CPU_ACT");
    char *out = NULL;
    int rc = t_run_doppler(args, &out, err);
    CHECKF(rc == 0, "DOPPLER_CPU_ACT=%s: exit %d: %s", value ? value : "(unset)", rc, *err ? *err : "");
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
    char *def = run_with(NULL, a, &err);
    CHECKF(!strstr(err, "DOPPLER_CPU_ACT"), "default run mentions DOPPLER_CPU_ACT: %s", err);
    free(err);
    const char *ok[] = {"int16", "f32", "auto", "F32"};
    for (int i = 0; i < 4; i++) {
        char *o = run_with(ok[i], a, &err);
        CHECKF(!strstr(err, "DOPPLER_CPU_ACT"), "DOPPLER_CPU_ACT=%s printed: %s", ok[i], err);
        CHECKF(o && def && strlen(o) > 0, "DOPPLER_CPU_ACT=%s: no output", ok[i]);
        if (strcmp(ok[i], "int16") == 0 || strcmp(ok[i], "auto") == 0)
            CHECKF(o && def && !strcmp(o, def), "DOPPLER_CPU_ACT=%s differs from the default", ok[i]);
        free(o);
        free(err);
    }
    char *o = run_with("int8", a, &err);
    CHECKF(count_lines_with(err, "DOPPLER_CPU_ACT='int8'") == 1 && strstr(err, "error"),
           "unknown value: want one error line naming it, got: %s", err);
    CHECKF(o && def && !strcmp(o, def), "unknown value: output differs from the default path");
    free(o);
    free(err);
    free(def);
    remove(tiny);
    return t_done("test_cpu_act_env");
}
