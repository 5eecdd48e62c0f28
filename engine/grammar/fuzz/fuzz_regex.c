/*
 * Fuzz target for engine/grammar/regex.h. The first byte picks json_string mode (bit 0); the
 * rest up to the first NUL is the regex and what follows it a subject. A refused regex must come
 * with -EINVAL or -E2BIG and a "regex: ..." message; an accepted one must compile with grammar.h
 * (only -E2BIG, a size limit, may refuse it), and in json_string mode a subject it accepts must
 * be the inside of a valid JSON string. Any crash, leak or failed check aborts.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/regex.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_regex: check failed: %s (line %d)\n", #cond, __LINE__);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* subject[0..n) between quotes must be one JSON string. */
static void check_json_string(const char *subject, size_t n)
{
    struct buf doc;
    char err[128];
    buf_init(&doc, n + 3);
    buf_appends(&doc, "\"");
    buf_append(&doc, subject, n);
    buf_appends(&doc, "\"");
    CHECK(buf_error(&doc) == 0);
    struct json_object *o = json_parse(doc.data, doc.len, err, sizeof(err));
    if (!o || !json_object_is_type(o, json_type_string)) {
        fprintf(stderr, "fuzz_regex: accepted subject is not JSON string content: %s (%s)\n",
                doc.data, err);
        abort();
    }
    json_object_put(o);
    buf_free(&doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    bool json = data[0] & 1;
    const char *re = (const char *)data + 1;
    size_t len = size - 1;
    const char *nul = memchr(re, '\0', len);
    const char *subject = nul ? nul + 1 : "";
    size_t subject_len = nul ? len - (size_t)(nul + 1 - re) : 0;
    len = nul ? (size_t)(nul - re) : len;

    struct buf gbnf;
    char err[256] = "";
    buf_init(&gbnf, (size_t)1 << 22);
    buf_appends(&gbnf, "root ::= ");
    int rc = regex_to_gbnf(re, len, json, &gbnf, err, sizeof(err));
    if (rc != 0) {
        CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
        CHECK(strncmp(err, "regex: ", 7) == 0);
        buf_free(&gbnf);
        return 0;
    }
    CHECK(err[0] == '\0');
    buf_appends(&gbnf, "\n");
    CHECK(buf_error(&gbnf) == 0);
    for (size_t i = 0; i < gbnf.len; i++) { /* plain ASCII */
        CHECK((unsigned char)gbnf.data[i] < 0x80);
    }
    grammar *g = NULL;
    rc = grammar_compile(gbnf.data, gbnf.len, NULL, &g, err, sizeof(err));
    if (rc != 0) {
        if (rc != -E2BIG) {
            fprintf(stderr, "fuzz_regex: /%.*s/ gave a grammar that does not compile: %s\n%s",
                    (int)len, re, err, gbnf.data);
            abort();
        }
        buf_free(&gbnf);
        return 0;
    }
    int m = grammar_match(g, subject, subject_len);
    CHECK(m == 0 || m == 1 || m == -E2BIG);
    if (m == 1 && json) {
        check_json_string(subject, subject_len);
    }
    grammar_free(g);
    buf_free(&gbnf);
    return 0;
}
