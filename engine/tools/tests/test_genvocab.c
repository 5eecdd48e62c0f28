/* Unit tests for engine/tools/genvocab: the synthetic BPE vocabulary and the conversion of HF
 * tokenizer.json documents (SentencePiece-style, byte-level, Unigram, WordPiece), including
 * malformed input. */
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

#include "engine/tools/genvocab.h"

static int64_t find(const genvocab *v, const char *s)
{
    for (size_t i = 0; i < v->n_tokens; i++) {
        if (v->lens[i] == strlen(s) && memcmp(v->tokens[i], s, v->lens[i]) == 0) {
            return (int64_t)i;
        }
    }
    return -1;
}

static void test_synthetic(void **state)
{
    (void)state;
    genvocab v, w;
    char err[256];
    assert_int_equal(genvocab_synthetic(&v, 512, 2048, err, sizeof(err)), 0);
    assert_int_equal(v.n_tokens, 512);
    assert_string_equal(v.model, "gpt2");
    assert_string_equal(v.pre, "llama-bpe");
    assert_int_equal(v.bos, 508);
    assert_int_equal(v.eos, 511);
    assert_int_equal(v.pad, 509);
    assert_string_equal(v.tokens[508], "<|begin_of_text|>");
    assert_string_equal(v.tokens[511], "<|im_end|>");
    assert_int_equal(v.types[510], 3);
    assert_string_equal(v.tokens['A'], "A");
    assert_string_equal(v.tokens[' '], "\xc4\xa0"); /* GPT-2's byte-to-unicode for space */
    assert_string_equal(v.tokens['\n'], "\xc4\x8a");
    assert_true(v.n_merges > 100);
    assert_null(v.scores);
    assert_true(v.add_bos);
    assert_non_null(strstr(v.chat_template, "<|im_start|>"));
    /* every merge joins two existing tokens into an existing token */
    for (size_t i = 0; i < v.n_merges; i++) {
        const char *m = v.merges[i];
        const char *sp = strchr(m, ' ');
        assert_non_null(sp);
        char a[128], b[128], ab[256];
        snprintf(a, sizeof(a), "%.*s", (int)(sp - m), m);
        snprintf(b, sizeof(b), "%s", sp + 1);
        snprintf(ab, sizeof(ab), "%s%s", a, b);
        assert_true(find(&v, a) >= 0);
        assert_true(find(&v, b) >= 0);
        assert_true(find(&v, ab) >= 0);
    }
    assert_true(find(&v, "\xc4\xa0the") >= 0); /* " the" is learned from the text */
    assert_non_null(strstr(v.tokenizer_json, "\"ignore_merges\": true"));
    assert_non_null(strstr(v.tokenizer_config_json, "\"model_max_length\": 2048"));
    /* deterministic */
    assert_int_equal(genvocab_synthetic(&w, 512, 2048, err, sizeof(err)), 0);
    assert_int_equal(v.tokenizer_json_len, w.tokenizer_json_len);
    assert_memory_equal(v.tokenizer_json, w.tokenizer_json, v.tokenizer_json_len);
    genvocab_free(&w);
    genvocab_free(&v);
    genvocab_free(&v); /* zeroed: a no-op */

    assert_int_equal(genvocab_synthetic(&v, 260, 64, err, sizeof(err)), 0);
    assert_int_equal(v.n_merges, 0);
    genvocab_free(&v);
    assert_int_equal(genvocab_synthetic(&v, 3000, 64, err, sizeof(err)), 0);
    assert_string_equal(v.tokens[2900], "[PAD2900]"); /* the text has fewer merges than that */
    assert_int_equal(v.types[2900], 5);
    genvocab_free(&v);
    assert_int_equal(genvocab_synthetic(&v, 259, 64, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--vocab"));
}

static const char spm_tok[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\","
    "\"special\":true},{\"id\":11,\"content\":\"\xe2\x96\x81hi\xe2\x96\x81\",\"special\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
    "\"prepend\":\"\xe2\x96\x81\"}]},\"post_processor\":null,"
    "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"<unk>\","
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x41>\":3,\"\xe2\x96\x81\":4,\"a\":5,"
    "\"b\":6,\"ab\":7,\"\xe2\x96\x81"
    "ab\":8,\"zz\":9},"
    "\"merges\":[\"a b\",\"\xe2\x96\x81 ab\"]}}";
static const char spm_cfg[] =
    "{\"bos_token\":{\"content\":\"<s>\"},\"eos_token\":\"</s>\",\"add_bos_token\":true,"
    "\"chat_template\":\"{{ messages }}\"}";

static void test_hf_spm(void **state)
{
    (void)state;
    genvocab v;
    char err[256] = "";
    int rc = genvocab_from_hf_json(&v, spm_tok, strlen(spm_tok), spm_cfg, strlen(spm_cfg), NULL, 14,
                                   err, sizeof(err));
    if (rc != 0) {
        fail_msg("%s", err);
    }
    assert_string_equal(v.model, "llama");
    assert_string_equal(v.pre, "default");
    assert_int_equal(v.n_tokens, 14); /* min_vocab pads past the tokenizer's 12 */
    assert_true(v.add_space_prefix);
    assert_true(v.add_bos);
    assert_false(v.add_eos);
    assert_int_equal(v.bos, 1);
    assert_int_equal(v.eos, 2);
    assert_int_equal(v.unk, 0);
    assert_int_equal(v.types[0], 2);
    assert_int_equal(v.types[1], 3);
    assert_int_equal(v.types[3], 6);
    assert_int_equal(v.types[5], 1);
    assert_int_equal(v.types[10], 5);
    assert_string_equal(v.tokens[10], "[PAD10]");
    assert_int_equal(v.types[11], 4);
    assert_string_equal(v.tokens[11], " hi "); /* user-defined: U+2581 pre-normalized */
    assert_true(v.scores[7] == -1.0f);
    assert_true(v.scores[8] == -2.0f);
    assert_true(v.scores[5] == 0.0f);
    assert_true(v.scores[4] == 0.0f);
    assert_true(v.scores[9] == -1e9f);
    assert_string_equal(v.chat_template, "{{ messages }}");
    assert_memory_equal(v.tokenizer_json, spm_tok, strlen(spm_tok));
    genvocab_free(&v);
}

static const char bpe_tok[] =
    "{\"added_tokens\":[{\"id\":5,\"content\":\"<|end|>\",\"special\":true},"
    "{\"id\":6,\"content\":\"<tool>\",\"special\":false},"
    "{\"id\":7,\"content\":\"<|fim_pad|>\",\"special\":false}],"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
    "\"pattern\":{\"Regex\":\"\\\\p{L}+|\\\\p{N}| ?[^\\\\s]+\"}}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
    "{\"id\":\"<|end|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"c\":3},"
    "\"merges\":[[\"a\",\"b\"],[\"ab\",\"c\"]]}}";

static void test_hf_bpe(void **state)
{
    (void)state;
    genvocab v;
    char err[256] = "";
    static const char cfg[] = "{\"eos_token\":\"<|end|>\",\"chat_template\":[{\"name\":\"tool\","
                              "\"template\":\"T\"},{\"name\":\"default\",\"template\":\"D\"}]}";
    int rc = genvocab_from_hf_json(&v, bpe_tok, strlen(bpe_tok), cfg, strlen(cfg), NULL, 0, err,
                                   sizeof(err));
    if (rc != 0) {
        fail_msg("%s", err);
    }
    assert_string_equal(v.model, "gpt2");
    assert_string_equal(v.pre, "qwen2");
    assert_int_equal(v.n_tokens, 8);
    assert_int_equal(v.types[7], 3); /* looks special: control, as convert_hf_to_gguf.py */
    assert_string_equal(v.tokens[4], "[PAD4]");
    assert_int_equal(v.types[4], 5);
    assert_int_equal(v.types[5], 3);
    assert_int_equal(v.types[6], 4);
    assert_int_equal(v.n_merges, 2);
    assert_string_equal(v.merges[0], "a b");
    assert_string_equal(v.merges[1], "ab c");
    assert_null(v.scores);
    assert_int_equal(v.eos, 5);
    assert_int_equal(v.bos, 5); /* no bos_token: the post-processor's leading special token */
    assert_true(v.add_bos);
    assert_string_equal(v.chat_template, "D");
    genvocab_free(&v);

    rc = genvocab_from_hf_json(&v, bpe_tok, strlen(bpe_tok), NULL, 0, "llama-bpe", 0, err,
                               sizeof(err));
    assert_int_equal(rc, 0);
    assert_string_equal(v.pre, "llama-bpe");
    assert_int_equal(v.eos, -1);
    assert_int_equal(v.bos, 5);
    assert_null(v.tokenizer_config_json);
    genvocab_free(&v);

    static const char cfg2[] = "{\"pad_token\":\"c\",\"eos_token\":\"b\"}";
    static const char plain[] =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2},\"merges\":[]}}";
    rc = genvocab_from_hf_json(&v, plain, strlen(plain), cfg2, strlen(cfg2), NULL, 0, err,
                               sizeof(err));
    assert_int_equal(rc, 0);
    assert_int_equal(v.bos, 2); /* no bos anywhere: the pad token, as Qwen GGUFs carry */
    assert_false(v.add_bos);
    assert_string_equal(v.pre, "default");
    genvocab_free(&v);
}

static void expect_bad(const char *tok, const char *cfg, const char *want)
{
    genvocab v;
    char err[256] = "";
    int rc = genvocab_from_hf_json(&v, tok, strlen(tok), cfg, cfg != NULL ? strlen(cfg) : 0, NULL,
                                   0, err, sizeof(err));
    if (rc != -EINVAL) {
        fail_msg("%s: expected -EINVAL, got %d", tok, rc);
    }
    if (strstr(err, want) == NULL) {
        fail_msg("%s: error \"%s\" lacks \"%s\"", tok, err, want);
    }
    assert_null(v.tokens); /* cleaned up */
}

static void test_hf_malformed(void **state)
{
    (void)state;
    expect_bad("{\"model\":", NULL, "tokenizer.json: line 1");
    expect_bad("[1,2]", NULL, "expected a JSON object");
    expect_bad("{}", NULL, "model.type");
    expect_bad("{\"model\":{\"type\":\"Rainbow\"}}", NULL, "model.type");
    expect_bad("{\"model\":{\"type\":\"WordPiece\"}}", NULL, "model.vocab");
    expect_bad("{\"model\":{\"type\":\"Unigram\",\"vocab\":{}}}", NULL, "model.vocab");
    expect_bad("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\"]]}}", NULL, "model.vocab[0]");
    expect_bad("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",\"x\"]]}}", NULL,
               "model.vocab[0]");
    expect_bad("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",-1]]},\"normalizer\":{"
               "\"type\":\"Precompiled\",\"precompiled_charsmap\":\"!!\"}}",
               NULL, "precompiled_charsmap");
    expect_bad("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"##\":0}}}", NULL, "\"##\"");
    expect_bad("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":\"0\"}}}", NULL,
               "model.vocab[\"a\"]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":[]}}", NULL, "model.vocab");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}", NULL,
               "model.vocab[\"a\"]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-4},\"merges\":[]}}", NULL,
               "model.vocab[\"a\"]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999},\"merges\":[]}}", NULL,
               "model.vocab[\"a\"]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", NULL, "model.merges");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", NULL,
               "model.vocab: no tokens");
    /* a sparse vocabulary: 4 tokens, one at id 1944444 (found by the fuzz campaign: 12 s and
     * 240 MB of id-indexed tables for a 145-byte file) */
    expect_bad("{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"a\","
               "\"vocab\":{\"a\":2,\"b\":2,\"ab\":1944444,\"<0x41>\":4},\"merges\":[\"a b\"]}}",
               NULL, "sparse vocabulary");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}", NULL,
               "model.merges[0]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}", NULL,
               "model.merges[0]");
    expect_bad("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}", NULL,
               "model.merges[0]");
    expect_bad("{\"added_tokens\":{},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}",
               NULL, "added_tokens");
    expect_bad("{\"added_tokens\":[{\"content\":\"x\"}],\"model\":{\"type\":\"BPE\","
               "\"vocab\":{},\"merges\":[]}}",
               NULL, "added_tokens[0]");
    expect_bad("{\"added_tokens\":[{\"id\":1,\"content\":5}],\"model\":{\"type\":\"BPE\","
               "\"vocab\":{},\"merges\":[]}}",
               NULL, "added_tokens[0]");
    static const char ok[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}";
    expect_bad(ok, "{\"chat_template\":5}", "chat_template");
    expect_bad(ok, "[]", "tokenizer_config.json: expected a JSON object");
    expect_bad(ok, "{", "tokenizer_config.json: line 1");
}

static void test_hf_unigram(void **state)
{
    (void)state;
    static const char tok[] =
        "{\"added_tokens\":[{\"id\":0,\"content\":\"<pad>\",\"special\":true},"
        "{\"id\":1,\"content\":\"</s>\",\"special\":true},{\"id\":2,\"content\":\"<unk>\","
        "\"special\":true},{\"id\":5,\"content\":\"<extra_id_0>\",\"special\":false}],"
        "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Precompiled\","
        "\"precompiled_charsmap\":\"AQID\"},{\"type\":\"Replace\",\"pattern\":{\"Regex\":"
        "\" {2,}\"},\"content\":\" \"}]},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
        "\"WhitespaceSplit\"},{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
        "\"prepend_scheme\":\"always\"}]},"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":"
        "\"A\"}},{\"SpecialToken\":{\"id\":\"</s>\"}}]},"
        "\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"byte_fallback\":true,\"vocab\":["
        "[\"<pad>\",0],[\"</s>\",0],[\"<unk>\",0],[\"\\u2581a\",-1.5],[\"<0x41>\",0],"
        "[\"<extra_id_0>\",0]]}}";
    static const char cfg[] = "{\"eos_token\":\"</s>\",\"pad_token\":\"<pad>\"}";
    genvocab v;
    char err[256] = "";
    if (genvocab_from_hf_json(&v, tok, strlen(tok), cfg, strlen(cfg), NULL, 0, err, sizeof(err)) !=
        0) {
        fail_msg("%s", err);
    }
    assert_string_equal(v.model, "t5");
    assert_int_equal(v.n_tokens, 6);
    assert_true(v.scores[3] == -1.5f);
    const int32_t types[] = {3, 3, 2, 1, 6, 4};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(v.types[i], types[i]);
    }
    assert_int_equal(v.unk, 2);
    assert_int_equal(v.eos, 1);
    assert_true(v.add_eos);
    assert_false(v.add_bos);
    assert_true(v.add_space_prefix);
    assert_true(v.remove_extra_ws);
    assert_int_equal(v.charsmap_len, 3);
    assert_memory_equal(v.charsmap, "\x01\x02\x03", 3);
    assert_int_equal(v.sep, -1);
    genvocab_free(&v);
}

static void test_hf_wordpiece(void **state)
{
    (void)state;
    static const char tok[] =
        "{\"added_tokens\":[{\"id\":0,\"content\":\"[PAD]\",\"special\":true},"
        "{\"id\":1,\"content\":\"[UNK]\",\"special\":true},{\"id\":2,\"content\":\"[CLS]\","
        "\"special\":true},{\"id\":3,\"content\":\"[SEP]\",\"special\":true}],"
        "\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true,\"strip_accents\":null},"
        "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{"
        "\"id\":\"[CLS]\"}},{\"Sequence\":{\"id\":\"A\"}},{\"SpecialToken\":{\"id\":\"[SEP]\"}}]},"
        "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"vocab\":{\"[PAD]\":0,"
        "\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,\"hello\":4,\"##ing\":5}}}";
    genvocab v;
    char err[256] = "";
    if (genvocab_from_hf_json(&v, tok, strlen(tok), NULL, 0, NULL, 0, err, sizeof(err)) != 0) {
        fail_msg("%s", err);
    }
    assert_string_equal(v.model, "bert");
    assert_null(v.scores);
    assert_string_equal(v.tokens[2], "[CLS]");
    assert_int_equal(v.types[2], 3);
    assert_string_equal(v.tokens[4], "\xE2\x96\x81hello");
    assert_int_equal(v.lens[4], 8);
    assert_string_equal(v.tokens[5], "ing");
    assert_int_equal(v.lens[5], 3);
    assert_int_equal(v.bos, 2);
    assert_true(v.add_bos);
    assert_int_equal(v.sep, 3);
    assert_true(v.add_sep);
    assert_false(v.add_eos);
    assert_int_equal(v.unk, 1);
    assert_int_equal(v.lowercase, 1);
    assert_int_equal(v.strip_accents, -1);
    genvocab_free(&v);
}

static void test_hf_files(void **state)
{
    (void)state;
    genvocab v;
    char err[512] = "";
    assert_int_equal(genvocab_from_hf(&v, "/nonexistent-dir", NULL, 0, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent-dir/tokenizer.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic),    cmocka_unit_test(test_hf_spm),
        cmocka_unit_test(test_hf_bpe),       cmocka_unit_test(test_hf_malformed),
        cmocka_unit_test(test_hf_files),     cmocka_unit_test(test_hf_unigram),
        cmocka_unit_test(test_hf_wordpiece),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
