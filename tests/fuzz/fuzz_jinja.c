/* libFuzzer target: arbitrary bytes as a chat template, parsed and rendered
 * with a small message set. Every input must end in a rendering or a
 * one-line error: no crash, leak, hang or runaway memory (the interpreter's
 * limits bound output, loop iterations and calls, memory and nesting).
 *
 * Built with the library (clang, -fsanitize=fuzzer-no-link,address,undefined)
 * and linked with -fsanitize=fuzzer; run as
 *   fuzz_jinja -dict=tests/fuzz/jinja.dict tests/fuzz/corpus/jinja */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "jinja/jinja.h"

static const char VARS[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"Hi \\u00e9\\u65e5 \\ud83d\\ude00\\n  padded  \"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nhmm\\n</think>\\n\\nHello\", \"tool_calls\": "
    "[{\"id\": \"abc123xyz\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5}}}]},"
    "{\"role\": \"user\", \"content\": \"\"}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    "\"documents\": null, \"n\": 3, \"f\": -2.5, \"flag\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cJSON *vars;
    static struct tm now = {.tm_year = 125, .tm_mon = 2, .tm_mday = 14, .tm_hour = 15, .tm_min = 9, .tm_wday = 5};
    if (!vars) vars = cJSON_Parse(VARS);
    if (size > 1 << 16) return 0;
    char err[256];
    jinja_template *t = jinja_parse((const char *)data, size, err, sizeof err);
    if (!t) {
        if (strncmp(err, "line ", 5) || strchr(err, '\n')) abort(); /* errors are one line naming the line */
        return 0;
    }
    jinja_options o = {1 << 20, 200000, 64 << 20, &now};
    size_t n;
    char *r = jinja_render(t, vars, &o, &n, err, sizeof err);
    if (!r && (strncmp(err, "line ", 5) || strchr(err, '\n'))) abort();
    if (r && n > o.max_output) abort();
    free(r);
    jinja_free(t);
    return 0;
}
