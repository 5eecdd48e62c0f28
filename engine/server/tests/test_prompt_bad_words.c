/*
 * prompt_bad_words (prompt.c): a request's bad_words into the token sequences vLLM's
 * SamplingParams.update_from_tokenizer makes, over a small SentencePiece vocabulary without the
 * space prefix, so that a word and its " word" form tokenize differently: the blank form is kept
 * only when it starts with another token and has as many; leading blanks are stripped; and
 * vLLM's 400s (a word of no tokens, too many sequences, too many tokens) name bad_words.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/server/prompt.h"
#include "engine/server/tests/tiny_vocab.h"

/* ▁ a b ▁a ab: "a" is [4], " a" is [6] (kept), "ab" is [7], " ab" is [3, 7] (not kept) */
static tokenizer *load(void)
{
    model_gguf_vocab v = tiny_vocab(0);
    tokenizer *tok = NULL;
    char err[256] = "";
    assert_int_equal(tokenizer_load_gguf(&v, &tok, err, sizeof err), 0);
    return tok;
}

/* A completion request whose bad_words are words[0..n). */
static void request(struct openai_request *o, const char *const *words, size_t n)
{
    memset(o, 0, sizeof *o);
    o->kind = OPENAI_COMPLETION;
    sampling_params_init(&o->sampling);
    o->bad_words = calloc(n ? n : 1, sizeof *o->bad_words);
    o->bad_word_lens = calloc(n ? n : 1, sizeof *o->bad_word_lens);
    assert_non_null(o->bad_words);
    assert_non_null(o->bad_word_lens);
    for (size_t i = 0; i < n; i++) {
        o->bad_words[i] = words[i];
        o->bad_word_lens[i] = strlen(words[i]);
    }
    o->n_bad_words = n;
}

static int run(tokenizer *tok, const char *const *words, size_t n, struct openai_request *o,
               struct openai_error *err)
{
    struct prompt_ctx pc = {.tok = tok};
    request(o, words, n);
    memset(err, 0, sizeof *err);
    return prompt_bad_words(&pc, o, err);
}

static void test_sequences(void **state)
{
    (void)state;
    tokenizer *tok = load();
    struct openai_request o;
    struct openai_error err;
    static const char *const words[] = {" \t a", "ab",
                                        "\xe3\x80\x80"
                                        "b"}; /* U+3000 blank */
    assert_int_equal(run(tok, words, 3, &o, &err), 0);
    /* "a" [4] and " a" [6]; "ab" [7] (" ab" is two tokens); "b" [5] (" b" is two) */
    assert_int_equal(o.sampling.n_bad_words, 4);
    const int32_t want_ids[] = {4, 6, 7, 5};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(o.sampling.bad_words_lens[i], 1);
        assert_int_equal(o.sampling.bad_words[i], want_ids[i]);
    }
    assert_ptr_equal(o.sampling.bad_words, o.bad_word_ids);
    assert_ptr_equal(o.sampling.bad_words_lens, o.bad_word_seq_lens);
    openai_request_deinit(&o);
    /* none: nothing to do */
    assert_int_equal(run(tok, words, 0, &o, &err), 0);
    assert_int_equal(o.sampling.n_bad_words, 0);
    assert_null(o.bad_word_ids);
    openai_request_deinit(&o);
    tokenizer_free(tok);
}

static void test_errors(void **state)
{
    (void)state;
    tokenizer *tok = load();
    struct openai_request o;
    struct openai_error err;
    static const char *const blank[] = {"a", " \n "};
    assert_int_equal(run(tok, blank, 2, &o, &err), -EINVAL);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.param, "bad_words");
    assert_string_equal(err.message, "bad_words entries must tokenize to at least one token.");
    openai_request_deinit(&o);
    /* k blanks and "a": [4] and [6] each, the sequences are not deduplicated (vLLM's aren't
     * either); 128 pass, and vLLM stops at the 129th */
    static char many[65][80];
    const char *many_p[65];
    for (int k = 0; k < 65; k++) {
        memset(many[k], ' ', (size_t)k);
        many[k][k] = 'a';
        many[k][k + 1] = '\0';
        many_p[k] = many[k];
    }
    assert_int_equal(run(tok, many_p, 64, &o, &err), 0);
    assert_int_equal(o.sampling.n_bad_words, 128);
    assert_int_equal(o.sampling.bad_words[126], 4);
    assert_int_equal(o.sampling.bad_words[127], 6);
    openai_request_deinit(&o);
    assert_int_equal(run(tok, many_p, 65, &o, &err), -EINVAL);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.param, "bad_words");
    assert_string_equal(err.message,
                        "Too many bad words after tokenization: 129. The max number is 128.");
    openai_request_deinit(&o);
    /* "a" * k + "b" (k >= 2): [a..., ab] and its blank form [▁a, a..., ab], kept */
    static const char *const aab[] = {"aab"};
    assert_int_equal(run(tok, aab, 1, &o, &err), 0);
    assert_int_equal(o.sampling.n_bad_words, 2);
    assert_int_equal(o.sampling.bad_words_lens[0], 2);
    assert_int_equal(o.sampling.bad_words_lens[1], 2);
    assert_int_equal(o.sampling.bad_words[0], 4);
    assert_int_equal(o.sampling.bad_words[1], 7);
    assert_int_equal(o.sampling.bad_words[2], 6);
    assert_int_equal(o.sampling.bad_words[3], 7);
    openai_request_deinit(&o);
    /* over 1024 tokens in all */
    static char longw[3][800];
    const char *long_p[3];
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 799; k++) {
            longw[i][k] = k % 3 == i ? 'b' : 'a';
        }
        longw[i][799] = '\0';
        long_p[i] = longw[i];
    }
    assert_int_equal(run(tok, long_p, 3, &o, &err), -EINVAL);
    assert_string_equal(err.param, "bad_words");
    assert_non_null(strstr(err.message, "Too many total bad word tokens: "));
    assert_non_null(strstr(err.message, ". The max is 1024."));
    openai_request_deinit(&o);
    tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequences),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
