/*
 * Fuzz target for GBNF compilation and the matcher (grammar.h). The input is a grammar, then a
 * NUL byte, then bytes to feed. A grammar either compiles or fails with a message; a compiled
 * one is fed the bytes one at a time and all at once, and the two must agree (accepted prefix,
 * can_end, must_end). Any crash, leak, hang or failed check aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_gbnf: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *input = nul ? nul + 1 : data + size;
    size_t ilen = size - glen - (nul ? 1 : 0);
    if (ilen > 256) {
        ilen = 256; /* bound the work per input */
    }
    grammar *g = NULL;
    char err[256] = "";
    int rc = grammar_compile((const char *)data, glen, NULL, &g, err, sizeof err);
    if (rc != 0) {
        CHECK(g == NULL && err[0] != '\0');
        CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
        return 0;
    }
    grammar_matcher *one, *all;
    if (grammar_matcher_new(g, &one) != 0) {
        grammar_free(g);
        return 0;
    }
    if (grammar_matcher_new(g, &all) != 0) {
        grammar_matcher_free(one);
        grammar_free(g);
        return 0;
    }
    size_t accepted = 0;
    for (; accepted < ilen; accepted++) {
        rc = grammar_matcher_feed(one, input + accepted, 1);
        if (rc != 0) {
            CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
            break;
        }
    }
    /* the accepted prefix at once lands in the same state */
    rc = grammar_matcher_feed(all, input, accepted);
    if (rc == 0) {
        CHECK(grammar_matcher_can_end(one) == grammar_matcher_can_end(all));
        CHECK(grammar_matcher_must_end(one) == grammar_matcher_must_end(all));
        CHECK(!grammar_matcher_must_end(one) || grammar_matcher_can_end(one));
        if (accepted < ilen) {
            /* a refused byte changed nothing */
            CHECK(grammar_matcher_feed(all, input + accepted, 1) != 0);
        }
        int m = grammar_match(g, input, accepted);
        CHECK(m < 0 || m == (grammar_matcher_can_end(one) ? 1 : 0));
    }
    grammar_matcher_free(one);
    grammar_matcher_free(all);
    grammar_free(g);
    return 0;
}
