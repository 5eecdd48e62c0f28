/*
 * Fuzz target for engine/grammar/json_schema.h: the input is a JSON schema. A refused schema
 * must come with -EINVAL or -E2BIG and a message; an accepted one must give a grammar that
 * grammar.h compiles (only -E2BIG, a size limit, may refuse it) and whose accepted documents
 * are JSON: the input itself and a few probes are matched, and whatever matches must parse. Any
 * crash, leak or failed check aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_json_schema: check failed: %s (line %d)\n", #cond, __LINE__);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char *const probes[] = {
    "{}", "[]", "null", "0", "-1", "1.5", "true", "\"\"", "\"a\"", "{\"a\":1}", "[1,\"x\",null]",
};

static void check_doc(const grammar *g, const char *doc, size_t n)
{
    int m = grammar_match(g, doc, n);
    CHECK(m == 0 || m == 1 || m == -E2BIG);
    if (m == 1) {
        char err[128];
        struct json_object *o = NULL;
        if (json_parse_one(doc, n, &o, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_json_schema: accepted a document that is not JSON: %.*s (%s)\n",
                    (int)n, doc, err);
            abort();
        }
        json_object_put(o);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf gbnf;
    char err[256] = "";
    buf_init(&gbnf, (size_t)1 << 22);
    int rc = json_schema_to_gbnf((const char *)data, size, &gbnf, err, sizeof(err));
    if (rc != 0) {
        CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
        CHECK(err[0] != '\0');
        buf_free(&gbnf);
        return 0;
    }
    CHECK(err[0] == '\0');
    CHECK(buf_error(&gbnf) == 0);
    for (size_t i = 0; i < gbnf.len; i++) { /* plain ASCII */
        CHECK((unsigned char)gbnf.data[i] < 0x80);
    }
    grammar *g = NULL;
    rc = grammar_compile(gbnf.data, gbnf.len, NULL, &g, err, sizeof(err));
    if (rc != 0) {
        if (rc != -E2BIG) {
            fprintf(stderr, "fuzz_json_schema: %.*s\ngave a grammar that does not compile: %s\n%s",
                    (int)size, (const char *)data, err, gbnf.data);
            abort();
        }
        buf_free(&gbnf);
        return 0;
    }
    check_doc(g, (const char *)data, size);
    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
        check_doc(g, probes[i], strlen(probes[i]));
    }
    grammar_free(g);
    buf_free(&gbnf);
    return 0;
}
