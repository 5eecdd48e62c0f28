/*
 * A Jinja2 subset interpreter for chat templates (tokenizer_config.json `chat_template`, GGUF
 * `tokenizer.chat_template`). It follows Python Jinja2 as Hugging Face transformers configures it
 * (ImmutableSandboxedEnvironment, trim_blocks=True, lstrip_blocks=True, the loopcontrols
 * extension, default Undefined, no autoescape, the template's single trailing newline dropped),
 * so that a prompt renders byte-identically to what the model was trained on.
 *
 * Values come from json-c: the render context is a json object whose members are the template's
 * variables; strings are UTF-8 (lengths, indexing and slicing count code points, as Python does).
 *
 * Supported: {{ }}, {% %}, {# #}, whitespace control (-, +, trim_blocks, lstrip_blocks), raw,
 * if/elif/else, for (else, `if` filter, tuple unpacking, loop.index/index0/revindex/revindex0/
 * first/last/length/previtem/nextitem/depth/depth0/cycle(), break/continue), set (names, tuples,
 * namespace attributes, set blocks), with, macro (defaults that may name earlier parameters,
 * keyword arguments, varargs/kwargs/caller bound as Jinja2 binds them, recursion, closures over
 * the defining scope, name/arguments/catch_* attributes), call blocks (`{% call(x) m() %}`,
 * caller(...) with arguments), filter blocks (`{% filter a(x)|b %}`), standalone blocks (rendered
 * in place), generation blocks; operators and/or/not, == != < > <= >= (chained), in / not in,
 * is / is not, + - * / // % **, str % args (printf-style) and str.format, ~, `a if c else b`;
 * literals; attribute, subscript and slice access (negative indices, [::-1]); Markup strings
 * (safe/escape; Markup + str escapes the str, as in Jinja2); the filters and tests of the tables in
 * jinja_filters.c, the string/dict/list methods and globals of those in jinja_methods.c:
 * raise_exception(msg), strftime_now(fmt), range(), namespace(), dict(), cycler(), joiner().
 *
 * Not supported: template inheritance and loading (extends, include, import), loop.changed and
 * recursive loops, nested str.format fields ({:{w}}), dict keys other than strings and integers,
 * and the filters attr, filesizeformat, pprint, random, urlencode, urlize, wordwrap and xmlattr.
 *
 * Known differences from Python: case mapping (upper/lower/title/capitalize/swapcase/casefold)
 * covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic one-to-one (no ß → SS, other scripts
 * unchanged); str.isalpha and friends know those letters, CJK, kana and Hangul, and ASCII digits;
 * integers are 64-bit (overflow is an error); Markup-ness is kept by safe, escape and + only.
 *
 * Errors (syntax, type, undefined attribute, limits) are returned with a message
 * "line L column C: ..." naming the position in the template. Bad templates and bad context
 * never crash: every size and depth is bounded (see struct jinja_limits).
 *
 * Thread safety: a compiled template is immutable; any number of threads may render it at once.
 */
#ifndef TANDEM_ENGINE_TEMPLATE_JINJA_H
#define TANDEM_ENGINE_TEMPLATE_JINJA_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "lib/err.h"

/* Largest template source jinja_compile accepts, in bytes. */
#define JINJA_MAX_SOURCE (1u << 20)
/* Deepest nesting of blocks and expressions jinja_compile accepts. */
#define JINJA_MAX_NESTING 128
/* Deepest nesting of evaluation in a render: expressions (long chains such as a + b + c ... or
 * x|f|g ... count one level per link), blocks and macro calls together; beyond it a render fails
 * (-E2BIG). Keeps the C stack a render uses bounded (well under 1 MiB). */
#define JINJA_MAX_EVAL_DEPTH 512

/*
 * Name of the context variable that, when it holds an integer, pins the clock strftime_now()
 * reads (seconds since the epoch, rendered in UTC). Without it strftime_now uses the local time.
 * Tests use it to render date-dependent templates (Llama 3.1/3.2) deterministically.
 */
#define JINJA_NOW_VAR "tandem_now_epoch"

/* jinja_render returns JINJA_ERAISED (lib/err.h) when the template called raise_exception(msg);
 * err holds msg. */

/* Bounds of one render; exceeding one is an error (-E2BIG) naming the limit. */
struct jinja_limits {
    size_t max_output;       /* bytes of output, and of any one string built while rendering */
    uint64_t max_iterations; /* loop iterations (for bodies, range() items, filters) in total */
    int max_depth;           /* nesting of macro calls and of evaluation */
};

/* Defaults used by jinja_render: 8 MiB output, 1,000,000 iterations, depth 64. */
extern const struct jinja_limits jinja_default_limits;

typedef struct jinja_template jinja_template;

/*
 * Compiles len bytes of template source (need not be NUL-terminated). Returns a template to
 * release with jinja_free, or NULL with "line L column C: ..." in err (errlen may be 0) for a
 * syntax error, a template over JINJA_MAX_SOURCE or nested deeper than JINJA_MAX_NESTING, or
 * "out of memory".
 */
jinja_template *jinja_compile(const char *src, size_t len, char *err, size_t errlen);

/*
 * Renders t with the variables of ctx (a json object, borrowed and never modified; NULL means no
 * variables). On success returns 0 and *out is a NUL-terminated malloc'd string (the caller
 * free()s it) of *out_len bytes (out_len may be NULL). On failure *out is NULL and it returns
 *   -EINVAL        for a render error (type error, undefined attribute, bad argument...), with
 *                  the message in err;
 *   JINJA_ERAISED  when the template called raise_exception(msg): err holds msg verbatim;
 *   -E2BIG         when a limit of jinja_default_limits was exceeded;
 *   -ENOMEM        when out of memory.
 */
int jinja_render(const jinja_template *t, struct json_object *ctx, char **out, size_t *out_len,
                 char *err, size_t errlen);

/* jinja_render with explicit limits (NULL → jinja_default_limits). */
int jinja_render_ex(const jinja_template *t, struct json_object *ctx,
                    const struct jinja_limits *limits, char **out, size_t *out_len, char *err,
                    size_t errlen);

/* Frees a compiled template. NULL is allowed. */
void jinja_free(jinja_template *t);

#endif /* TANDEM_ENGINE_TEMPLATE_JINJA_H */
