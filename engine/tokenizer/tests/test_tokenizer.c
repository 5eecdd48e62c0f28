/*
 * Unit tests of engine/tokenizer with small hand-made vocabularies: byte-level BPE (GGUF "gpt2"),
 * SentencePiece (GGUF "llama") and tokenizer.json documents, including malformed ones.
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

#include "engine/tokenizer/tok_internal.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/common.h"

/* ---------------------------------------------------------------- fixtures */

#define MAXTOK 400

typedef struct vocab_fix {
    char text[MAXTOK][16];
    model_str tokens[MAXTOK];
    float scores[MAXTOK];
    int32_t types[MAXTOK];
    model_str merges[16];
    char merge_text[16][24];
    size_t n, n_merges;
    model_gguf_vocab v;
} vocab_fix;

static int32_t fix_add(vocab_fix *f, const char *s, int32_t type, float score)
{
    int32_t id = (int32_t)f->n++;
    snprintf(f->text[id], sizeof(f->text[id]), "%s", s);
    f->tokens[id] = (model_str){f->text[id], (uint32_t)strlen(f->text[id])};
    f->types[id] = type;
    f->scores[id] = score;
    return id;
}

static void fix_merge(vocab_fix *f, const char *m)
{
    snprintf(f->merge_text[f->n_merges], sizeof(f->merge_text[0]), "%s", m);
    f->merges[f->n_merges] = (model_str){f->merge_text[f->n_merges], (uint32_t)strlen(m)};
    f->n_merges++;
}

static void fix_finish(vocab_fix *f, const char *mname, const char *pre)
{
    f->v = (model_gguf_vocab){.model = mname,
                              .pre = pre,
                              .n_tokens = f->n,
                              .tokens = f->tokens,
                              .scores = f->scores,
                              .token_types = f->types,
                              .n_merges = f->n_merges,
                              .merges = f->n_merges ? f->merges : NULL,
                              .bos_id = -1,
                              .eos_id = -1,
                              .unk_id = -1,
                              .pad_id = -1,
                              .eot_id = -1,
                              .add_bos = -1,
                              .add_eos = -1,
                              .add_space_prefix = -1};
}

/* GPT-2 style: ids 0..255 are the byte symbols of bytes 0..255. */
static tokenizer *make_bpe(vocab_fix *f)
{
    memset(f, 0, sizeof(*f));
    for (int b = 0; b < 256; b++) {
        char sym[8] = {0};
        tandem_utf8_put(sym, tok__byte_to_cp((unsigned char)b));
        fix_add(f, sym, 1, 0);
    }
    fix_add(f, "he", 1, 0);        /* 256 */
    fix_add(f, "ll", 1, 0);        /* 257 */
    fix_add(f, "hell", 1, 0);      /* 258 */
    fix_add(f, "hello", 1, 0);     /* 259 */
    fix_add(f, "\xC4\xA0w", 1, 0); /* 260 "Ġw" */
    fix_add(f, "<|end|>", 3, 0);   /* 261 control */
    fix_add(f, "<|user|>", 4, 0);  /* 262 user-defined */
    fix_merge(f, "h e");
    fix_merge(f, "l l");
    fix_merge(f, "he ll");
    fix_merge(f, "hell o");
    fix_merge(f, "\xC4\xA0 w");
    fix_finish(f, "gpt2", "gpt2");
    f->v.eos_id = 261;
    tokenizer *t = NULL;
    char err[256];
    int rc = tokenizer_load_gguf(&f->v, &t, err, sizeof(err));
    if (rc) {
        fail_msg("load: %s", err);
    }
    return t;
}

static int32_t spm_ids[32];

static tokenizer *make_spm(vocab_fix *f)
{
    memset(f, 0, sizeof(*f));
    fix_add(f, "<unk>", 2, 0);
    fix_add(f, "<s>", 3, 0);
    fix_add(f, "</s>", 3, 0);
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof(hex), "<0x%02X>", b);
        fix_add(f, hex, 6, 0);
    }
    const char *pieces[] = {"\xE2\x96\x81",
                            "h",
                            "e",
                            "l",
                            "o",
                            "w",
                            "r",
                            "d",
                            "\xE2\x96\x81h",
                            "ll",
                            "\xE2\x96\x81he",
                            "\xE2\x96\x81hell",
                            "\xE2\x96\x81hello",
                            "\xE2\x96\x81w",
                            "or",
                            "\xE2\x96\x81wor",
                            "\xE2\x96\x81world",
                            "\xE2\x96\x81worl"};
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        spm_ids[i] = fix_add(f, pieces[i], 1, -(float)i);
    }
    fix_finish(f, "llama", NULL);
    f->v.bos_id = 1;
    f->v.eos_id = 2;
    f->v.unk_id = 0;
    tokenizer *t = NULL;
    char err[256];
    int rc = tokenizer_load_gguf(&f->v, &t, err, sizeof(err));
    if (rc) {
        fail_msg("load: %s", err);
    }
    return t;
}

static void expect_ids(const tokenizer *t, const char *text, size_t len, bool add, bool parse,
                       const int32_t *want, size_t n_want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tokenizer_encode(t, text, len, add, parse, &ids, &n), 0);
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ids[i], want[i]);
    }
    free(ids);
}

static char *decode_all(const tokenizer *t, const int32_t *ids, size_t n, bool skip)
{
    char *s = NULL;
    size_t l = 0;
    assert_int_equal(tokenizer_decode(t, ids, n, skip, &s, &l), 0);
    assert_int_equal(strlen(s), l);
    return s;
}

/* Concatenated detok deltas must equal the full decode. */
static void check_stream(const tokenizer *t, const int32_t *ids, size_t n, bool skip)
{
    char *full = decode_all(t, ids, n, skip);
    detok d;
    detok_init(&d, t, skip);
    char acc[1024] = "";
    for (size_t i = 0; i < n; i++) {
        char *delta = NULL;
        size_t l = 0;
        assert_int_equal(detok_push(&d, ids[i], &delta, &l), 0);
        assert_true(strlen(acc) + l < sizeof(acc));
        strcat(acc, delta);
        free(delta);
    }
    char *delta = NULL;
    assert_int_equal(detok_flush(&d, &delta, NULL), 0);
    strcat(acc, delta);
    free(delta);
    detok_free(&d);
    assert_string_equal(acc, full);
    free(full);
}

/* ---------------------------------------------------------------- BPE */

static void test_bpe_known(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    tokenizer *t = make_bpe(f);
    const int32_t want[] = {259, 260, 'o', 'r', 'l', 'd'};
    expect_ids(t, "hello world", 11, true, true, want, 6);
    char *s = decode_all(t, want, 6, false);
    assert_string_equal(s, "hello world");
    free(s);
    assert_int_equal(tokenizer_n_vocab(t), 263);
    assert_true(tokenizer_is_eog(t, 261));
    assert_false(tokenizer_is_eog(t, 259));
    assert_int_equal(tokenizer_token_id(t, "hello", 5), 259);
    assert_int_equal(tokenizer_token_id(t, "nope", 4), -1);
    assert_false(tokenizer_adds_bos(t));
    size_t pl = 0;
    const char *p = tokenizer_piece(t, 260, &pl);
    assert_int_equal(pl, 2);
    assert_memory_equal(p, " w", 2);
    assert_null(tokenizer_piece(t, 999, NULL));
    tokenizer_free(t);
    free(f);
}

static void test_bpe_special_split(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    tokenizer *t = make_bpe(f);
    const int32_t with[] = {'a', 261, 'b'};
    expect_ids(t, "a<|end|>b", 9, false, true, with, 3);
    /* without parse_special the control token's text is ordinary text */
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tokenizer_encode(t, "a<|end|>b", 9, false, false, &ids, &n), 0);
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++) {
        assert_int_not_equal(ids[i], 261);
    }
    free(ids);
    /* user-defined tokens are split out either way */
    const int32_t user[] = {'x', 262, 'y'};
    expect_ids(t, "x<|user|>y", 10, false, false, user, 3);
    assert_true(tokenizer_is_special(t, 261));
    assert_false(tokenizer_is_special(t, 262));
    char *s = decode_all(t, with, 3, true);
    assert_string_equal(s, "ab");
    free(s);
    tokenizer_free(t);
    free(f);
}

static void test_bpe_invalid_utf8(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    tokenizer *t = make_bpe(f);
    const char bad[] = "a\xff\xfe\xc3";
    const int32_t want[] = {'a', 0xff, 0xfe, 0xc3};
    expect_ids(t, bad, 4, false, false, want, 4);
    char *s = decode_all(t, want, 4, false);
    assert_string_equal(s, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    free(s);
    check_stream(t, want, 4, false);
    tokenizer_free(t);
    free(f);
}

static void test_bpe_stream_multibyte(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    tokenizer *t = make_bpe(f);
    const char *text = "h\xF0\x9F\x98\x80 \xC3\xA9t\xC3\xA9 \xE4\xBD\xA0";
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tokenizer_encode(t, text, strlen(text), false, false, &ids, &n), 0);
    char *s = decode_all(t, ids, n, false);
    assert_string_equal(s, text);
    free(s);
    check_stream(t, ids, n, false);
    /* the emoji's first byte alone yields nothing yet */
    detok d;
    detok_init(&d, t, false);
    char *delta = NULL;
    size_t l = 9;
    assert_int_equal(detok_push(&d, 0xF0, &delta, &l), 0);
    assert_int_equal(l, 0);
    free(delta);
    assert_int_equal(detok_flush(&d, &delta, &l), 0);
    assert_string_equal(delta, "\xEF\xBF\xBD");
    free(delta);
    assert_int_equal(detok_push(&d, 100000, &delta, &l), -EINVAL);
    free(ids);
    tokenizer_free(t);
    free(f);
}

static void test_limits(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    tokenizer *t = make_bpe(f);
    int32_t *ids = NULL;
    size_t n = 0;
    char small[4] = "abc";
    assert_int_equal(
        tokenizer_encode(t, small, TOKENIZER_MAX_TEXT_BYTES + 1, false, false, &ids, &n), -E2BIG);
    assert_int_equal(tokenizer_encode(t, "", 0, false, false, &ids, &n), 0);
    assert_int_equal(n, 0);
    free(ids);
    const int32_t oob[] = {5, -1};
    char *s = NULL;
    assert_int_equal(tokenizer_decode(t, oob, 2, false, &s, NULL), -EINVAL);
    tokenizer_free(t);
    free(f);
}

/* ---------------------------------------------------------------- SPM */

static void test_spm_known(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    tokenizer *t = make_spm(f);
    const int32_t want[] = {1, spm_ids[12], spm_ids[16]};
    expect_ids(t, "hello world", 11, true, true, want, 3);
    assert_true(tokenizer_adds_bos(t));
    assert_string_equal(tokenizer_bos_text(t), "<s>");
    assert_string_equal(tokenizer_eos_text(t), "</s>");
    /* llama.cpp rule: first token's leading space dropped; a skipped BOS keeps it */
    char *s = decode_all(t, want + 1, 2, false);
    assert_string_equal(s, "hello world");
    free(s);
    s = decode_all(t, want, 3, true);
    assert_string_equal(s, " hello world");
    free(s);
    s = decode_all(t, want, 3, false);
    assert_string_equal(s, "<s> hello world");
    free(s);
    check_stream(t, want, 3, true);
    check_stream(t, want + 1, 2, false);
    /* continuation keeps the space */
    detok d;
    detok_init_continuation(&d, t, true);
    char *delta = NULL;
    assert_int_equal(detok_push(&d, spm_ids[16], &delta, NULL), 0);
    assert_string_equal(delta, " world");
    free(delta);
    tokenizer_free(t);
    free(f);
}

static void test_spm_byte_fallback(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    tokenizer *t = make_spm(f);
    /* "é" is not in the vocabulary: <0xC3> <0xA9> */
    const int32_t want[] = {spm_ids[0], 3 + 0xC3, 3 + 0xA9};
    expect_ids(t, "\xC3\xA9", 2, false, false, want, 3);
    char *s = decode_all(t, want, 3, false);
    assert_string_equal(s, "\xC3\xA9");
    free(s);
    check_stream(t, want, 3, false);
    /* special text splits, and the fragment after it gets the space prefix */
    const int32_t sp[] = {spm_ids[12], 2, spm_ids[16]};
    expect_ids(t, "hello</s>world", 14, false, true, sp, 3);
    /* invalid UTF-8 becomes byte tokens */
    const int32_t inv[] = {spm_ids[0], 3 + 0xFF};
    expect_ids(t, "\xff", 1, false, false, inv, 2);
    tokenizer_free(t);
    free(f);
}

/* ---------------------------------------------------------------- tokenizer.json */

static int load_json(const char *json, tokenizer **t, char *err, size_t errlen)
{
    return tokenizer_load_hf_mem(json, strlen(json), NULL, 0, "test.json", t, err, errlen);
}

static void test_hf_minimal(void **state)
{
    (void)state;
    const char *json =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<unk>\":3,"
        "\"\\u2581\":4,\"<0x63>\":5},"
        "\"merges\":[\"a b\"],\"unk_token\":\"<unk>\",\"byte_fallback\":true},"
        "\"added_tokens\":[{\"id\":6,\"content\":\"<eos>\",\"special\":true}],"
        "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":"
        "\"\\u2581\"},"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":"
        "\"A\"}},{\"SpecialToken\":{\"id\":\"<eos>\"}}]},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{"
        "\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":"
        "\"Fuse\"}]}}";
    tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(load_json(json, &t, err, sizeof(err)), 0);
    const int32_t want[] = {2, 4, 0, 5, 3, 6};
    expect_ids(t, "ab acz", 6, true, true, want, 6);
    assert_int_equal(tokenizer_eos(t), 6);
    assert_true(tokenizer_is_eog(t, 6));
    char *s = decode_all(t, want, 5, false);
    assert_string_equal(s, "ab ac<unk>");
    free(s);
    tokenizer_free(t);
}

static void expect_load_error(const char *json, const char *needle)
{
    tokenizer *t = NULL;
    char err[256] = "";
    int rc = load_json(json, &t, err, sizeof(err));
    assert_true(rc < 0);
    assert_null(t);
    if (!strstr(err, needle)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, needle);
    }
}

static void test_hf_malformed(void **state)
{
    (void)state;
    expect_load_error("not json", "test.json");
    expect_load_error("[]", "expected a JSON object");
    expect_load_error("{}", "model");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", "model.vocab");
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":{},\"merges\":[]}}", "Unigram");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}",
                      "model.vocab");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a\"]}}",
                      "model.merges[0]");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a c\"]}}",
                      "model.merges[0]");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}",
                      "model.merges[0]");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                      "\"behavior\":\"Isolated\"}}",
                      "pre_tokenizer.pattern.Regex");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                      "\"behavior\":\"Sideways\"}}",
                      "Sideways");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"normalizer\":{\"type\":\"Lowercase\"}}",
                      "normalizer");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"added_tokens\":[{\"id\":\"1\",\"content\":\"x\"}]}",
                      "added_tokens[0].id");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}",
                      "byte 0x");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{"
                      "\"SpecialToken\":{\"id\":\"<s>\"}}]}}",
                      "post_processor.single[0]");
}

/* Issue 16: an empty Metaspace replacement made the piece builder match "" at every position
 * without advancing (41 s, 4 GB, then "out of memory"). Each of these must fail at once, naming
 * the field; Hugging Face tokenizers refuses the same files (replacement is a Rust char). */
static void test_hf_degenerate_parameters(void **state)
{
    (void)state;
#define BPE_AB                                                                                     \
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<unk>\":3},\"merges\":["   \
    "\"a b\"],"                                                                                    \
    "\"unk_token\":\"<unk>\"}"
    expect_load_error(BPE_AB ",\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\","
                             "\"prepend_scheme\":\"always\"}}",
                      "decoder.replacement: must be exactly one character");
    expect_load_error(BPE_AB ",\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"ab\"}}",
                      "decoder.replacement: must be exactly one character");
    expect_load_error(BPE_AB ",\"decoder\":{\"type\":\"Metaspace\",\"replacement\":"
                             "\"\\u2581\\u2581\"}}",
                      "decoder.replacement: must be exactly one character");
    expect_load_error(BPE_AB ",\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\"}}",
                      "pre_tokenizer.replacement: must be exactly one character");
    expect_load_error(BPE_AB ",\"decoder\":{\"type\":\"Replace\",\"pattern\":{\"String\":\"\"},"
                             "\"content\":\" \"}}",
                      "decoder.pattern.String: an empty pattern is not supported");
    expect_load_error(BPE_AB ",\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\"\"},"
                             "\"content\":\"x\"}}",
                      "normalizer.pattern.String: an empty pattern is not supported");
    expect_load_error(BPE_AB ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"\"},"
                             "\"behavior\":\"Isolated\"}}",
                      "pre_tokenizer.pattern.String: an empty pattern is not supported");
    /* a Replace decoder whose content dwarfs its pattern: each "a" would become 64 bytes */
    expect_load_error(
        BPE_AB ",\"decoder\":{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\"},"
               "\"content\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}",
        "decodes to more than 4 times its");
    /* a sparse vocabulary: four tokens, one with id 377777 (14 MB of tables for 134 bytes) */
    expect_load_error(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<unk>\":377777},"
        "\"merges\":[\"a b\"]}}",
        "model.vocab: ids reach 377777 for 4 tokens: more than 65540 unused ids");
    /* the real forms still load: a one-character replacement, "▁" → " " */
    tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(load_json(BPE_AB ",\"decoder\":{\"type\":\"Metaspace\",\"replacement\":"
                                      "\"\xe2\x96\x81\"}}",
                               &t, err, sizeof(err)),
                     0);
    tokenizer_free(t);
#undef BPE_AB
}

static void test_gguf_malformed(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    memset(f, 0, sizeof(*f));
    fix_add(f, "a", 1, 0);
    fix_finish(f, "bert", NULL);
    tokenizer *t = NULL;
    char err[256];
    assert_int_equal(tokenizer_load_gguf(&f->v, &t, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "tokenizer.ggml.model"));
    fix_finish(f, "gpt2", "nonsense");
    assert_int_equal(tokenizer_load_gguf(&f->v, &t, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "tokenizer.ggml.pre"));
    fix_finish(f, "llama", NULL);
    f->v.bos_id = 7;
    assert_int_equal(tokenizer_load_gguf(&f->v, &t, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "out of range"));
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_known),
        cmocka_unit_test(test_bpe_special_split),
        cmocka_unit_test(test_bpe_invalid_utf8),
        cmocka_unit_test(test_bpe_stream_multibyte),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_spm_known),
        cmocka_unit_test(test_spm_byte_fallback),
        cmocka_unit_test(test_hf_minimal),
        cmocka_unit_test(test_hf_malformed),
        cmocka_unit_test(test_hf_degenerate_parameters),
        cmocka_unit_test(test_gguf_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
