/*
 * Fuzz target for the Jinja interpreter: the input is template text, compiled and rendered
 * against a fixed chat-like context under small limits. Any outcome is fine except a crash, a
 * leak, a sanitizer report, or an inconsistent result (success without output, failure with
 * output, an empty error message, a successful output over the limit).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/jinja.h"
#include "e2e/fuzz/fuzz_heap.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The parse's heap bound, stated in docs/fuzzing.md. */
#define JINJA_HEAP_FACTOR 128
#define JINJA_HEAP_SLACK  (1 << 20)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_jinja: check failed: %s (line %d)\n", #cond, __LINE__);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char CONTEXT[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9 \\u4f60\\u597d\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, true]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
    " \"n\": 3, \"f\": -1.5, \"tandem_now_epoch\": 1721952000}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct json_object *ctx;
    if (!ctx) {
        ctx = json_parse(CONTEXT, strlen(CONTEXT), NULL, 0);
        CHECK(ctx != NULL);
    }
    char err[256];
    err[0] = 'x';
    jinja_template *t = NULL;
    FUZZ_HEAP_BOUND("jinja_compile", size, JINJA_HEAP_FACTOR, JINJA_HEAP_SLACK,
                    t = jinja_compile((const char *)data, size, err, sizeof(err)));
    if (!t) {
        CHECK(err[0] != '\0');
        return 0;
    }
    const struct jinja_limits lim = {
        .max_output = 1 << 16, .max_iterations = 20000, .max_depth = 16};
    char *out = NULL;
    size_t len = 0;
    err[0] = '\0';
    int rc = jinja_render_ex(t, ctx, &lim, &out, &len, err, sizeof(err));
    if (rc == 0) {
        CHECK(out != NULL);
        CHECK(len == strlen(out) || memchr(out, '\0', len) != NULL);
        CHECK(len <= lim.max_output);
    } else {
        CHECK(out == NULL);
        CHECK(rc == JINJA_ERAISED || err[0] != '\0');
    }
    free(out);
    jinja_free(t);
    return 0;
}
