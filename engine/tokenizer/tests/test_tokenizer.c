/*
 * Unit tests of engine/tokenizer with small hand-made vocabularies: byte-level BPE (GGUF "gpt2"),
 * SentencePiece (GGUF "llama"), Unigram (GGUF "t5", tokenizer.json "Unigram"), WordPiece (GGUF
 * "bert", tokenizer.json "WordPiece") and tokenizer.json documents, including malformed ones.
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
    for (size_t i = 0; i < n && i < n_want; i++) {
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
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":{},\"merges\":[]}}", "vocab");
    expect_load_error("{\"model\":{\"type\":\"Rainbow\",\"vocab\":{},\"merges\":[]}}",
                      "model.type");
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
                      "\"normalizer\":{\"type\":\"ByteLevel\"}}",
                      "unsupported normalizer type");
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
    fix_finish(f, "rwkv", NULL);
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

/* ---------------------------------------------------------------- Unigram / WordPiece */

/* A SentencePiece precompiled charsmap for n (from, to) rules, built the way darts-clone lays
 * out a XOR-compressed double array: each node's children sit at BASE ^ byte (each node its own
 * BASE), a value unit (bit 31) at BASE ^ 0. *len receives the size; the caller frees. */
#define CM_NODES 64
#define CM_UNITS 1024
typedef struct cm_build {
    int kid[CM_NODES][256];
    int val[CM_NODES];
    int n;
    uint32_t units[CM_UNITS];
    bool used[CM_UNITS];
    bool base_used[CM_UNITS]; /* each node its own base: a walk checks labels only */
} cm_build;

static int cm_place(cm_build *b, int node)
{
    for (int base = 1;; base++) {
        bool ok = !b->base_used[base] && !(b->val[node] >= 0 && b->used[base]);
        for (int c = 1; c < 256 && ok; c++) {
            ok = !(b->kid[node][c] && b->used[base ^ c]);
        }
        if (ok) {
            b->base_used[base] = true;
            b->used[base] = b->val[node] >= 0 || b->used[base];
            for (int c = 1; c < 256; c++) {
                if (b->kid[node][c]) {
                    b->used[base ^ c] = true;
                }
            }
            return base;
        }
    }
}

static void cm_fill(cm_build *b, int node, int base)
{
    if (b->val[node] >= 0) {
        b->units[base] = 0x80000000u | (uint32_t)b->val[node];
    }
    for (int c = 1; c < 256; c++) {
        int k = b->kid[node][c];
        if (!k) {
            continue;
        }
        int idx = base ^ c;
        int kb = cm_place(b, k);
        b->units[idx] =
            ((uint32_t)(idx ^ kb) << 10) | ((b->val[k] >= 0 ? 1u : 0u) << 8) | (uint32_t)c;
        cm_fill(b, k, kb);
    }
}

static uint8_t *make_charsmap(const char *const (*rules)[2], size_t n, size_t *len)
{
    cm_build *b = calloc(1, sizeof(*b));
    char strings[256];
    size_t sl = 0;
    b->n = 1;
    for (int i = 0; i < CM_NODES; i++) {
        b->val[i] = -1;
    }
    b->used[0] = true;
    for (size_t r = 0; r < n; r++) {
        int node = 0;
        for (const unsigned char *p = (const unsigned char *)rules[r][0]; *p; p++) {
            if (!b->kid[node][*p]) {
                b->kid[node][*p] = b->n++;
            }
            node = b->kid[node][*p];
        }
        b->val[node] = (int)sl;
        memcpy(strings + sl, rules[r][1], strlen(rules[r][1]) + 1);
        sl += strlen(rules[r][1]) + 1;
    }
    int root = cm_place(b, 0);
    b->units[0] = (uint32_t)root << 10;
    cm_fill(b, 0, root);
    uint32_t trie = CM_UNITS * 4;
    uint8_t *out = malloc(4 + trie + sl);
    memcpy(out, &trie, 4);
    memcpy(out + 4, b->units, trie);
    memcpy(out + 4 + trie, strings, sl);
    *len = 4 + trie + sl;
    free(b);
    return out;
}

static char *base64(const uint8_t *p, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 8);
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        o[k++] = a[v >> 18];
        o[k++] = a[(v >> 12) & 63];
        o[k++] = i + 1 < n ? a[(v >> 6) & 63] : '=';
        o[k++] = i + 2 < n ? a[v & 63] : '=';
    }
    o[k] = '\0';
    return o;
}

#define SP "\xE2\x96\x81" /* U+2581 */

/* T5-like vocabulary: <pad> </s> <unk>, a few scored pieces, a user-defined "<x>". */
static void make_ugm_vocab(vocab_fix *f)
{
    memset(f, 0, sizeof(*f));
    fix_add(f, "<pad>", 3, 0);        /* 0 */
    fix_add(f, "</s>", 3, 0);         /* 1 */
    fix_add(f, "<unk>", 2, 0);        /* 2 */
    fix_add(f, SP, 1, -2.0f);         /* 3 */
    fix_add(f, SP "a", 1, -1.0f);     /* 4 */
    fix_add(f, "b", 1, -2.5f);        /* 5 */
    fix_add(f, SP "ab", 1, -1.5f);    /* 6 */
    fix_add(f, "a", 1, -3.0f);        /* 7 */
    fix_add(f, "<x>", 4, -100.0f);    /* 8: user-defined, scored 0 */
    fix_add(f, "c", 1, -4.0f);        /* 9 */
    fix_add(f, "\xC3\xA9", 1, -1.0f); /* 10 "é" */
    fix_finish(f, "t5", NULL);
    f->v.add_space_prefix = 1;
}

static tokenizer *load_ext(vocab_fix *f, const tokenizer_gguf_extra *x)
{
    tokenizer *t = NULL;
    char err[256] = "";
    int rc = tokenizer_load_gguf_ext(&f->v, x, &t, err, sizeof(err));
    if (rc) {
        fail_msg("load: %s", err);
    }
    return t;
}

static void test_ugm_gguf_known(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    make_ugm_vocab(f);
    tokenizer_gguf_extra x;
    tokenizer_gguf_extra_init(&x);
    x.remove_extra_whitespaces = 1;
    tokenizer *t = load_ext(f, &x);
    assert_int_equal(tokenizer_get_kind(t), TOKENIZER_UNIGRAM);
    assert_int_equal(tokenizer_eos(t), 1); /* llama.cpp's t5 default */
    assert_true(tokenizer_adds_eos(t));
    assert_false(tokenizer_adds_bos(t));
    /* "▁ab" (-1.5) beats "▁a"+"b" (-3.5) and "▁"+"a"+"b" (-7.5) */
    const int32_t ab[] = {6, 1};
    expect_ids(t, "ab", 2, true, true, ab, 2);
    const int32_t a_b[] = {4, 3, 5};
    expect_ids(t, "a b", 3, false, true, a_b, 3);
    expect_ids(t, "  a   b  ", 9, false, true, a_b, 3); /* remove_extra_whitespaces */
    /* two unknown code points fuse into one <unk> */
    const int32_t zz[] = {3, 2};
    expect_ids(t, "zz", 2, false, true, zz, 2);
    /* user-defined text is split out; each fragment gets its prefix space */
    const int32_t user[] = {4, 8, 3, 5};
    expect_ids(t, "a<x>b", 5, false, false, user, 4);
    char *s = decode_all(t, a_b, 3, false);
    assert_string_equal(s, "a b");
    free(s);
    check_stream(t, a_b, 3, false);
    tokenizer_free(t);
    /* without remove_extra_whitespaces every space is a U+2581 and no leading one is added */
    f->v.add_space_prefix = 0;
    tokenizer_gguf_extra_init(&x);
    t = load_ext(f, &x);
    const int32_t spaced[] = {4, 3, 3, 5}; /* "▁a▁▁b" */
    expect_ids(t, " a  b", 5, false, true, spaced, 4);
    const int32_t nopfx[] = {7, 5};
    expect_ids(t, "ab", 2, false, true, nopfx, 2);
    tokenizer_free(t);
    free(f);
}

static void test_ugm_gguf_charsmap(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    make_ugm_vocab(f);
    static const char *const rules[][2] = {
        {"\xEF\xBC\xA1", "a"},     /* full-width A → a */
        {"e\xCC\x81", "\xC3\xA9"}, /* e + U+0301 → é (a two-code-point key) */
        {"\xE3\x80\x80", " "},     /* ideographic space → space */
        {"\xE2\x80\x8B", ""},      /* zero width space → nothing */
    };
    size_t len = 0;
    uint8_t *cm = make_charsmap(rules, 4, &len);
    tokenizer_gguf_extra x;
    tokenizer_gguf_extra_init(&x);
    x.remove_extra_whitespaces = 1;
    x.precompiled_charsmap = cm;
    x.charsmap_len = len;
    tokenizer *t = load_ext(f, &x);
    const int32_t ab[] = {6};
    expect_ids(t,
               "\xEF\xBC\xA1"
               "b",
               4, false, true, ab, 1);
    expect_ids(t,
               "a\xE2\x80\x8B"
               "b",
               5, false, true, ab, 1);
    const int32_t a_b[] = {4, 3, 5};
    expect_ids(t,
               "\xEF\xBC\xA1\xE3\x80\x80"
               "b",
               7, false, true, a_b, 3);
    const int32_t e_acute[] = {3, 10};
    expect_ids(t, "e\xCC\x81", 3, false, true, e_acute, 2);
    /* a lone "e" has no rule: unknown */
    const int32_t e_unk[] = {3, 2};
    expect_ids(t, "e", 1, false, true, e_unk, 2);
    /* user-defined text passes the charsmap untouched (llama.cpp) */
    const int32_t user[] = {8};
    expect_ids(t, "<x>", 3, false, false, user, 1);
    /* invalid UTF-8 becomes U+FFFD, an unknown token, and never crashes */
    const int32_t bad[] = {3, 2};
    expect_ids(t, "\xFF\xFE", 2, false, true, bad, 2);
    tokenizer_free(t);
    /* a charsmap whose double array points outside itself: encode fails, load does not */
    uint8_t broken[9] = {4, 0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t unit = 1000u << 10;
    memcpy(broken + 4, &unit, 4);
    x.precompiled_charsmap = broken;
    x.charsmap_len = sizeof(broken);
    t = load_ext(f, &x);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tokenizer_encode(t, "ab", 2, false, true, &ids, &n), -EINVAL);
    tokenizer_free(t);
    free(cm);
    free(f);
}

static void expect_gguf_error(vocab_fix *f, const tokenizer_gguf_extra *x, const char *needle)
{
    tokenizer *t = NULL;
    char err[256] = "";
    assert_true(tokenizer_load_gguf_ext(&f->v, x, &t, err, sizeof(err)) < 0);
    assert_null(t);
    if (!strstr(err, needle)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, needle);
    }
}

static void test_ugm_gguf_malformed(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    make_ugm_vocab(f);
    tokenizer_gguf_extra x;
    tokenizer_gguf_extra_init(&x);
    const uint8_t tiny[3] = {1, 2, 3};
    x.precompiled_charsmap = tiny;
    x.charsmap_len = sizeof(tiny);
    expect_gguf_error(f, &x, "tokenizer.ggml.precompiled_charsmap: 3 bytes");
    const uint8_t big[12] = {0xE8, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    x.precompiled_charsmap = big;
    x.charsmap_len = sizeof(big);
    expect_gguf_error(f, &x, "trie size 1000");
    const uint8_t nonul[10] = {4, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'};
    x.precompiled_charsmap = nonul;
    x.charsmap_len = sizeof(nonul);
    expect_gguf_error(f, &x, "do not end with a NUL");
    const uint8_t badutf[10] = {4, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0};
    x.precompiled_charsmap = badutf;
    x.charsmap_len = sizeof(badutf);
    expect_gguf_error(f, &x, "not valid UTF-8");
    /* no unknown token: the default (2) is out of range for a two-token vocabulary */
    memset(f, 0, sizeof(*f));
    fix_add(f, SP, 1, -1);
    fix_add(f, "a", 1, -1);
    fix_finish(f, "t5", NULL);
    expect_gguf_error(f, NULL, "tokenizer.ggml.unknown_token_id");
    /* bert adds [SEP] by default: the default id 102 does not exist here */
    fix_finish(f, "bert", NULL);
    f->v.unk_id = 0;
    expect_gguf_error(f, NULL, "seperator");
    free(f);
}

static void test_wpm_gguf_known(void **state)
{
    (void)state;
    vocab_fix *f = malloc(sizeof(*f));
    memset(f, 0, sizeof(*f));
    const char *toks[] = {"[PAD]",   "[UNK]", "[CLS]", "[SEP]", SP "hello",        SP "world",
                          SP "play", "ing",   SP ",",  SP "!",  SP "\xE4\xB8\xAD", "s"};
    for (size_t i = 0; i < ARRAY_SIZE(toks); i++) {
        fix_add(f, toks[i], i < 4 ? 3 : 1, 0);
    }
    fix_finish(f, "bert", NULL);
    f->v.bos_id = 2;
    f->v.unk_id = 1;
    f->v.pad_id = 0;
    tokenizer_gguf_extra x;
    tokenizer_gguf_extra_init(&x);
    x.sep_id = 3;
    tokenizer *t = load_ext(f, &x);
    assert_int_equal(tokenizer_get_kind(t), TOKENIZER_WORDPIECE);
    const char *text = "H\xC3\xA9llo, PLAYING world!";
    const int32_t plain[] = {4, 8, 6, 7, 5, 9};
    expect_ids(t, text, strlen(text), false, true, plain, 6);
    const int32_t special[] = {2, 4, 8, 6, 7, 5, 9, 3};
    expect_ids(t, text, strlen(text), true, true, special, 8);
    const int32_t cjk[] = {10, 1};
    expect_ids(t, "\xE4\xB8\xADx", 4, false, true, cjk, 2);
    const int32_t plays[] = {6, 11};
    expect_ids(t, "plays", 5, false, true, plays, 2);
    const int32_t unk[] = {1, 5};
    expect_ids(t, "playz world", 11, false, true, unk, 2);
    char *s = decode_all(t, plain, 4, false);
    assert_string_equal(s, "hello , playing");
    free(s);
    check_stream(t, special, 8, true);
    tokenizer_free(t);
    /* lowercase off (tokenizer.ggml.normalizer.lowercase false): "Hello" is unknown */
    x.lowercase = 0;
    t = load_ext(f, &x);
    const int32_t upper[] = {1};
    expect_ids(t, "Hello", 5, false, true, upper, 1);
    tokenizer_free(t);
    free(f);
}

static void test_hf_unigram(void **state)
{
    (void)state;
    static const char json[] =
        "{\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"vocab\":[[\"<pad>\",0],[\"</s>\",0],"
        "[\"<unk>\",0],[\"\\u2581\",-2],[\"\\u2581a\",-1],[\"b\",-2.5],[\"\\u2581ab\",-1.5],"
        "[\"a\",-3],[\"c\",-4]]},"
        "\"added_tokens\":[{\"id\":1,\"content\":\"</s>\",\"special\":true}],"
        "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}]},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
        "\"WhitespaceSplit\"},{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
        "\"prepend_scheme\":\"always\",\"split\":true}]},"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":"
        "\"A\"}},{\"SpecialToken\":{\"id\":\"</s>\"}}]},"
        "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":"
        "\"always\"}}";
    tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(load_json(json, &t, err, sizeof(err)), 0);
    assert_int_equal(tokenizer_get_kind(t), TOKENIZER_UNIGRAM);
    const int32_t want[] = {6, 4, 3, 5, 3, 2, 1};
    expect_ids(t, "ab a  b zz", 10, true, true, want, 7);
    const int32_t fullwidth[] = {6}; /* NFKC: U+FF41 → a */
    expect_ids(t,
               "\xEF\xBD\x81"
               "b",
               4, false, true, fullwidth, 1);
    char *s = decode_all(t, want, 4, false);
    assert_string_equal(s, "ab a b");
    free(s);
    check_stream(t, want, 7, true);
    tokenizer_free(t);
    /* byte_fallback: unknown text becomes its <0xXX> bytes when all exist */
    static const char bf[] =
        "{\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"byte_fallback\":true,\"vocab\":["
        "[\"<pad>\",0],[\"</s>\",0],[\"<unk>\",0],[\"\\u2581\",-2],[\"<0x7A>\",0]]},"
        "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\"},"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},"
        "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\"}]}}";
    assert_int_equal(load_json(bf, &t, err, sizeof(err)), 0);
    const int32_t bytes[] = {3, 4, 4};
    expect_ids(t, "zz", 2, false, true, bytes, 3);
    const int32_t y_unk[] = {3, 2};
    expect_ids(t, "yz", 2, false, true, y_unk, 2); /* no <0x79>: the whole span is <unk> */
    s = decode_all(t, bytes, 3, false);
    assert_string_equal(s, "zz");
    free(s);
    tokenizer_free(t);
}

static void test_hf_unigram_malformed(void **state)
{
    (void)state;
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]}}",
                      "model.unk_id: missing");
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"unk_id\":9,\"vocab\":[[\"a\",-1]]}}",
                      "model.unk_id");
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"a\"]]}}",
                      "model.vocab[0]");
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"a\",-1],"
                      "[\"b\",\"x\"]]}}",
                      "model.vocab[1]");
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[]}}",
                      "model.vocab");
    expect_load_error("{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"a\",-1]]},"
                      "\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"!!\"}}",
                      "normalizer.precompiled_charsmap: not valid base64");
    expect_load_error(
        "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"a\",-1]]},"
        "\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"AAA=\"}}",
        "normalizer.precompiled_charsmap: 2 bytes");
}

#define WP_VOCAB                                                                                   \
    "\"vocab\":{\"[PAD]\":0,\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,\"hello\":4,\"world\":5,"          \
    "\"play\":6,\"##ing\":7,\",\":8,\"!\":9,\"\\u4e2d\":10,\"##s\":11,\"'\":12,\"t\":13,"          \
    "\"don\":14}"

static void test_hf_wordpiece(void **state)
{
    (void)state;
    static const char json[] =
        "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":"
        "\"##\",\"max_input_chars_per_word\":10," WP_VOCAB "},"
        "\"added_tokens\":[{\"id\":0,\"content\":\"[PAD]\",\"special\":true},{\"id\":1,"
        "\"content\":\"[UNK]\",\"special\":true},{\"id\":2,\"content\":\"[CLS]\",\"special\":"
        "true},{\"id\":3,\"content\":\"[SEP]\",\"special\":true}],"
        "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":"
        "true,\"strip_accents\":null,\"lowercase\":true},"
        "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
        "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",3],\"cls\":["
        "\"[CLS]\",2]},"
        "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}}";
    tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(load_json(json, &t, err, sizeof(err)), 0);
    assert_int_equal(tokenizer_get_kind(t), TOKENIZER_WORDPIECE);
    const char *text = "H\xC3\xA9llo,\tPLAYING\x01 world!";
    const int32_t want[] = {2, 4, 8, 6, 7, 5, 9, 3};
    expect_ids(t, text, strlen(text), true, true, want, 8);
    const int32_t cjk[] = {10, 1};
    expect_ids(t, "\xE4\xB8\xADx", 4, false, true, cjk, 2);
    const int32_t plays[] = {6, 11};
    expect_ids(t, "plays", 5, false, true, plays, 2);
    const int32_t unk[] = {1};
    expect_ids(t, "playz", 5, false, true, unk, 1);
    const int32_t sss[] = {6, 7, 11, 11, 11};
    expect_ids(t, "playingsss", 10, false, true, sss, 5);
    expect_ids(t, "playingssss", 11, false, true, unk, 1); /* 11 > max_input_chars_per_word */
    const int32_t dont[] = {14, 12, 13};
    expect_ids(t, "don't", 5, false, true, dont, 3);
    char *s = decode_all(t, want, 8, false);
    assert_string_equal(s, "[CLS] hello, playing world! [SEP]");
    free(s);
    s = decode_all(t, want, 8, true);
    assert_string_equal(s, "hello, playing world!");
    free(s);
    const int32_t cont_first[] = {7, 4};
    s = decode_all(t, cont_first, 2, false);
    assert_string_equal(s, "##ing hello"); /* HF: the first token is left as it is */
    free(s);
    s = decode_all(t, dont, 3, false);
    assert_string_equal(s, "don ' t");
    free(s);
    check_stream(t, want, 8, false);
    check_stream(t, want, 8, true);
    check_stream(t, cont_first, 2, false);
    tokenizer_free(t);
}

static void test_hf_wordpiece_malformed(void **state)
{
    (void)state;
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[NOPE]\"," WP_VOCAB "}}",
                      "model.unk_token: not in the vocabulary");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
                      "model.unk_token");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":\"0\"}}}",
                      "model.vocab[\"a\"]");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"max_input_chars_per_word\":0,"
                      "\"unk_token\":\"[UNK]\"," WP_VOCAB "}}",
                      "max_input_chars_per_word");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\"," WP_VOCAB "},"
                      "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",99],"
                      "\"cls\":[\"[CLS]\",2]}}",
                      "post_processor.sep");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\"," WP_VOCAB "},"
                      "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"@@\"}}",
                      "decoder");
}

static void test_hf_unicode_normalizers(void **state)
{
    (void)state;
    static const char *const rules[][2] = {
        {"\xEF\xBC\xA1", "a"}, {"xy", "ab"}, {"\xEF\xBC\xA2", "b"}};
    size_t len = 0;
    uint8_t *cm = make_charsmap(rules, 3, &len);
    char *b64 = base64(cm, len);
    size_t cap = strlen(b64) + 2048;
    char *json = malloc(cap);
    snprintf(json, cap,
             "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"vocab\":{\"[UNK]\":0,"
             "\"ecole\":1,\"ab\":2,\"istanbul\":3}},"
             "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Precompiled\","
             "\"precompiled_charsmap\":\"%s\"},{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},"
             "{\"type\":\"Lowercase\"},{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":"
             "true}]},"
             "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"}}",
             b64);
    tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(load_json(json, &t, err, sizeof(err)), 0);
    const int32_t ecole[] = {1};
    expect_ids(t,
               " \xC3\x89"
               "COLE ",
               8, false, true, ecole, 1); /* NFD + StripAccents */
    const int32_t ab_unk[] = {2, 0};
    /* HF's Precompiled goes grapheme by grapheme: the key "xy" spans two and never applies */
    expect_ids(t,
               "\xEF\xBC\xA1"
               "b xy",
               7, false, true, ab_unk, 2);
    const int32_t ist[] = {3};
    expect_ids(t, "\xC4\xB0stanbul", 9, false, true, ist, 1); /* İ → i + U+0307, stripped */
    tokenizer_free(t);
    /* a cluster shorter than 6 bytes is replaced whole by its first key's rule: "Ｂ" + U+0308
     * becomes "b" (the mark goes); GGUF (llama.cpp) would keep the mark */
    snprintf(json, cap,
             "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"vocab\":{\"[UNK]\":0,"
             "\"b\":1,\"ab\":2,\"xy\":3}},"
             "\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"%s\"},"
             "\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"}}",
             b64);
    assert_int_equal(load_json(json, &t, err, sizeof(err)), 0);
    const int32_t b_mark[] = {1, 3, 2};
    expect_ids(t,
               "\xEF\xBC\xA2\xCC\x88 xy \xEF\xBC\xA1"
               "b",
               13, false, true, b_mark, 3);
    tokenizer_free(t);
    free(json);
    free(b64);
    free(cm);
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
        cmocka_unit_test(test_ugm_gguf_known),
        cmocka_unit_test(test_ugm_gguf_charsmap),
        cmocka_unit_test(test_ugm_gguf_malformed),
        cmocka_unit_test(test_wpm_gguf_known),
        cmocka_unit_test(test_hf_unigram),
        cmocka_unit_test(test_hf_unigram_malformed),
        cmocka_unit_test(test_hf_wordpiece),
        cmocka_unit_test(test_hf_wordpiece_malformed),
        cmocka_unit_test(test_hf_unicode_normalizers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
