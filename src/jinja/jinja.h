/* A Jinja template interpreter for chat templates (tokenizer.chat_template).
 *
 * It renders the way Hugging Face transformers' apply_chat_template does:
 * Jinja2 with trim_blocks and lstrip_blocks, the loopcontrols extension
 * (break/continue), the default Undefined (prints as "", is falsy, fails on
 * arithmetic and attribute access), an immutable sandbox (list.append and
 * friends are refused), tojson as json.dumps(ensure_ascii=False), and the
 * globals raise_exception, strftime_now, namespace, dict and range.
 *
 * Errors are one line naming the template line ("line 3: ..."). Rendering
 * is bounded (output size, loop iterations, call depth, memory), so hostile
 * templates end with an error instead of hanging or exhausting memory. */
#ifndef DP_JINJA_H
#define DP_JINJA_H

#include <stddef.h>
#include <time.h>

#include <cjson/cJSON.h>

typedef struct jinja_template jinja_template;

typedef struct {
    size_t max_output;      /* bytes of rendered text (0 = 16 MiB) */
    long max_steps;         /* loop iterations + calls (0 = 4 million) */
    size_t max_memory;      /* bytes of live values (0 = 256 MiB) */
    const struct tm *now;   /* strftime_now's clock; NULL = local time */
} jinja_options;

/* Parses template text; NULL with a message in err on a syntax error. */
jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errcap);
void jinja_free(jinja_template *t);

/* Renders with the members of the JSON object vars as variables (JSON
 * integers become ints, other numbers floats, null none). Returns malloc'ed
 * text (its length in *out_len when given) or NULL with a message in err. */
char *jinja_render(const jinja_template *t, const cJSON *vars, const jinja_options *opt, size_t *out_len,
                   char *err, size_t errcap);

#endif
