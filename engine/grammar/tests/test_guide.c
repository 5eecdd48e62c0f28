/*
 * Tests for token masks (guide.h): every mask equals the brute-force answer (feed each token's
 * piece to a copy of the matcher), states repeat through the cache, end-of-generation ids follow
 * the grammar's end, and the registry shares compiled grammars.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/grammar/guide.h"
#include "engine/tokenizer/tok_internal.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/common.h"

#define MAXTOK 400

static char texts[MAXTOK][24];
static model_str strs[MAXTOK];
static float scores[MAXTOK];
static int32_t types[MAXTOK];
static size_t n_tok;

static int32_t add_tok_n(const char *bytes, size_t n, int32_t type)
{
    /* byte-level symbols: each byte as its GPT-2 code point (control tokens as they are) */
    char *o = texts[n_tok];
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        o += tandem_utf8_put(o, type == 3 && n > 1 ? c : tok__byte_to_cp(c));
    }
    *o = '\0';
    strs[n_tok] = (model_str){texts[n_tok], (uint32_t)strlen(texts[n_tok])};
    types[n_tok] = type;
    scores[n_tok] = 0;
    return (int32_t)n_tok++;
}

static int32_t add_tok(const char *bytes, int32_t type)
{
    return add_tok_n(bytes, strlen(bytes), type);
}

static const char *multi[] = {
    "{\"",    "\":", "\": ",   "\",",   "\"}",  "true", "false", "null", "tr",  "ue",
    "12",     "3.",  "\u00e9", "\xC3",  "\xA9", "ab",   "abc",   ", \"", "}\n", "[1",
    "\u20ac", " [",  "\"a\"",  "\":\"", "]}",   "00",   "-1",    "e+",   "\\n", "\\\"",
};

static int32_t eos_id;

static tokenizer *make_vocab(void)
{
    n_tok = 0;
    /* byte 0's token is a control token: no grammar can use it (test_dead_end) */
    static const char zero[1] = {0};
    add_tok_n(zero, 1, 3);
    for (int b = 1; b < 256; b++) {
        const char s[1] = {(char)b};
        add_tok_n(s, 1, 1);
    }
    for (size_t i = 0; i < sizeof multi / sizeof multi[0]; i++) {
        add_tok(multi[i], 1);
    }
    eos_id = add_tok("<|end|>", 3);
    add_tok("<|ctl|>", 3);
    model_gguf_vocab v = {.model = "gpt2",
                          .pre = "gpt2",
                          .n_tokens = n_tok,
                          .tokens = strs,
                          .scores = scores,
                          .token_types = types,
                          .bos_id = -1,
                          .eos_id = eos_id,
                          .unk_id = -1,
                          .pad_id = -1,
                          .eot_id = -1,
                          .add_bos = -1,
                          .add_eos = -1,
                          .add_space_prefix = -1};
    tokenizer *t = NULL;
    char err[256];
    if (tokenizer_load_gguf(&v, &t, err, sizeof err) != 0) {
        fail_msg("vocab: %s", err);
    }
    return t;
}

static const char json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" "
    "[0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

struct fixture {
    tokenizer *t;
    guide_vocab *v;
    int32_t n_vocab;
};

static struct fixture fix;

static int setup(void **state)
{
    (void)state;
    fix.t = make_vocab();
    fix.n_vocab = (int32_t)n_tok + 6; /* padded logits: ids past the tokenizer */
    int32_t eog[1] = {eos_id};
    assert_int_equal(guide_vocab_new(fix.t, fix.n_vocab, eog, 1, &fix.v), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    guide_vocab_free(fix.v);
    tokenizer_free(fix.t);
    return 0;
}

static guide_grammar *make_grammar(const char *gbnf)
{
    grammar *g;
    char err[256];
    if (grammar_compile(gbnf, strlen(gbnf), NULL, &g, err, sizeof err) != 0) {
        fail_msg("%s", err);
    }
    guide_grammar *gg;
    assert_int_equal(guide_grammar_new(g, fix.v, &gg), 0);
    return gg;
}

/* The allowed set by brute force: every token whose piece the matcher accepts from the bytes
 * generated so far, plus the end ids when the grammar may end (or nothing else is allowed). */
static void check_mask(guide *gd, const grammar *g, const char *so_far, size_t len)
{
    const uint64_t *bits;
    int n = guide_allowed(gd, &bits);
    assert_true(n > 0);
    grammar_matcher *m;
    assert_int_equal(grammar_matcher_new(g, &m), 0);
    assert_int_equal(grammar_matcher_feed(m, so_far, len), 0);
    bool can_end = grammar_matcher_can_end(m);
    int want_n = 0;
    for (int32_t id = 0; id < fix.n_vocab; id++) {
        bool want = false;
        size_t plen = 0;
        const char *p = id < (int32_t)n_tok ? tokenizer_piece(fix.t, id, &plen) : NULL;
        if (id < (int32_t)n_tok && !tokenizer_is_special(fix.t, id) && p && plen > 0) {
            grammar_matcher *c;
            assert_int_equal(grammar_matcher_new(g, &c), 0);
            assert_int_equal(grammar_matcher_feed(c, so_far, len), 0);
            want = grammar_matcher_feed(c, p, plen) == 0;
            grammar_matcher_free(c);
        }
        want_n += want;
        bool got = (bits[id / 64] >> (id % 64)) & 1;
        if (id == eos_id) {
            continue;
        }
        if (got != want) {
            fail_msg("after '%.*s': token %d ('%.*s') allowed %d, want %d", (int)len, so_far, id,
                     (int)plen, p ? p : "", got, want);
        }
    }
    bool eos = (bits[eos_id / 64] >> (eos_id % 64)) & 1;
    assert_int_equal(eos, can_end || want_n == 0);
    grammar_matcher_free(m);
}

/* Walks random paths through the JSON grammar, checking every mask on the way. */
static void test_masks_match_brute_force(void **state)
{
    (void)state;
    guide_grammar *gg = make_grammar(json_gbnf);
    const grammar *g = guide_grammar_get(gg);
    uint64_t rng = 12345;
    for (int run = 0; run < 12; run++) {
        guide *gd;
        assert_int_equal(guide_new(gg, &gd), 0);
        char text[512];
        size_t len = 0;
        for (int step = 0; step < 40; step++) {
            check_mask(gd, g, text, len);
            const uint64_t *bits;
            int n = guide_allowed(gd, &bits);
            /* pick the k-th allowed id */
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int k = (int)((rng >> 33) % (uint64_t)n);
            int32_t pick = -1;
            for (int32_t id = 0; id < fix.n_vocab && pick < 0; id++) {
                if ((bits[id / 64] >> (id % 64)) & 1 && k-- == 0) {
                    pick = id;
                }
            }
            assert_true(pick >= 0);
            if (pick == eos_id) {
                assert_true(guide_can_end(gd) || n == 1);
                break;
            }
            size_t plen;
            const char *p = tokenizer_piece(fix.t, pick, &plen);
            if (len + plen >= sizeof text) {
                break;
            }
            assert_int_equal(guide_accept(gd, pick), 0);
            memcpy(text + len, p, plen);
            len += plen;
        }
        guide_free(gd);
    }
    uint64_t hits, misses;
    guide_grammar_stats(gg, &hits, &misses);
    assert_true(hits > 0); /* states repeat: inside strings, between items */
    guide_grammar_unref(gg);
}

static void test_mask_logits_and_end(void **state)
{
    (void)state;
    guide_grammar *gg = make_grammar("root ::= \"ab\" \"c\"?");
    guide *gd;
    assert_int_equal(guide_new(gg, &gd), 0);
    float *logits = malloc((size_t)fix.n_vocab * sizeof *logits);
    for (int32_t i = 0; i < fix.n_vocab; i++) {
        logits[i] = 1.0f;
    }
    int n = guide_mask(gd, logits, fix.n_vocab);
    assert_int_equal(n, 3); /* "a", "ab", "abc" */
    int finite = 0;
    for (int32_t i = 0; i < fix.n_vocab; i++) {
        finite += isfinite(logits[i]);
    }
    assert_int_equal(finite, 3);
    /* a token the grammar refuses leaves the guide as it was */
    assert_int_equal(guide_accept(gd, (int32_t)'x'), -EINVAL);
    assert_int_equal(guide_accept(gd, eos_id + 1), -EINVAL); /* a control token */
    assert_int_equal(guide_accept(gd, fix.n_vocab - 1), -EINVAL);
    assert_int_equal(guide_accept(gd, (int32_t)'a'), 0);
    assert_int_equal(guide_accept(gd, (int32_t)'b'), 0);
    assert_true(guide_can_end(gd));
    assert_false(guide_must_end(gd));
    const uint64_t *bits;
    assert_int_equal(guide_allowed(gd, &bits), 2); /* "c" and the end */
    assert_true((bits[eos_id / 64] >> (eos_id % 64)) & 1);
    assert_int_equal(guide_accept(gd, (int32_t)'c'), 0);
    assert_true(guide_must_end(gd));
    for (int32_t i = 0; i < fix.n_vocab; i++) {
        logits[i] = 1.0f;
    }
    assert_int_equal(guide_mask(gd, logits, fix.n_vocab), 1);
    for (int32_t i = 0; i < fix.n_vocab; i++) {
        assert_int_equal(isfinite(logits[i]), i == eos_id);
    }
    free(logits);
    guide_free(gd);
    guide_grammar_unref(gg);
}

/* A grammar that needs a byte no piece has: the end ids are the way out. */
static void test_dead_end(void **state)
{
    (void)state;
    guide_grammar *gg = make_grammar("root ::= \"a\" [\\x00]");
    guide *gd;
    assert_int_equal(guide_new(gg, &gd), 0);
    assert_int_equal(guide_accept(gd, (int32_t)'a'), 0);
    const uint64_t *bits;
    assert_int_equal(guide_allowed(gd, &bits), 1);
    assert_true((bits[eos_id / 64] >> (eos_id % 64)) & 1);
    guide_free(gd);
    guide_grammar_unref(gg);
}

static void test_registry(void **state)
{
    (void)state;
    guide_registry *r = guide_registry_new();
    assert_non_null(r);
    const char *a = "root ::= \"x\"";
    guide_grammar *g1, *g2, *g3;
    char err[256];
    assert_int_equal(guide_registry_get(r, fix.v, a, strlen(a), &g1, err, sizeof err), 0);
    assert_int_equal(guide_registry_get(r, fix.v, a, strlen(a), &g2, err, sizeof err), 0);
    assert_ptr_equal(g1, g2);
    assert_int_equal(guide_registry_get(r, fix.v, "root ::= y", 10, &g3, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "undefined rule 'y'"));
    /* more grammars than slots: the oldest goes, references stay valid */
    for (int i = 0; i < GUIDE_REGISTRY_SLOTS + 4; i++) {
        char text[64];
        snprintf(text, sizeof text, "root ::= \"%d\"", i);
        assert_int_equal(guide_registry_get(r, fix.v, text, strlen(text), &g3, err, sizeof err), 0);
        guide_grammar_unref(g3);
    }
    guide *gd;
    assert_int_equal(guide_new(g1, &gd), 0);
    assert_int_equal(guide_accept(gd, (int32_t)'x'), 0);
    assert_true(guide_must_end(gd));
    guide_free(gd);
    guide_grammar_unref(g1);
    guide_grammar_unref(g2);
    guide_registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_match_brute_force),
        cmocka_unit_test(test_mask_logits_and_end),
        cmocka_unit_test(test_dead_end),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
