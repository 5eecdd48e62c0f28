/*
 * GET /tokenizer_info's body (tokenizer_info.c): the GGUF vocabulary survives the trip through
 * the GGUF writer and reader key for key, the HF files travel byte for byte with a hash that
 * covers them, the fields a router needs are all there, the ETag is stable and changes with the
 * content, and an unreadable tokenizer file is an error naming it. The whole route against a
 * live engine is tested from the client side in operator/epp/keys/tests/test_keys.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "engine/model/gguf.h"
#include "engine/server/tokenizer_info.h"
#include "engine/server/tests/tiny_vocab.h"

static model_gguf_vocab vocab(void)
{
    return tiny_vocab(-1);
}

static void test_gguf_vocab_round_trip(void **state)
{
    (void)state;
    model_gguf_vocab v = vocab();
    uint8_t *data = NULL;
    size_t len = 0;
    char err[256] = "";
    assert_int_equal(tokenizer_info_gguf_bytes(&v, &data, &len, err, sizeof err), 0);
    gguf_ctx *g = gguf_open_buffer(data, len, "test", err, sizeof err);
    assert_non_null(g);
    model_str s;
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.model", &s, err, sizeof err), 0);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.s, "llama", 5);
    const gguf_kv *kv;
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, err, 256), 0);
    assert_int_equal(kv->n, 8);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(kv->strs[i].len, g_tokens[i].len);
        assert_memory_equal(kv->strs[i].s, g_tokens[i].s, g_tokens[i].len);
    }
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &kv, err, 256), 0);
    assert_memory_equal(kv->data, g_scores, sizeof g_scores);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &kv, err, 256),
                     0);
    assert_memory_equal(kv->data, g_types, sizeof g_types);
    uint32_t id;
    bool flag;
    assert_int_equal(gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &id, err, 256), 0);
    assert_int_equal(id, 1);
    assert_int_equal(gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &id, err, 256), 0);
    assert_int_equal(id, 0);
    assert_int_equal(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &flag, err, 256), 0);
    assert_true(flag);
    /* absent stays absent: the loader's defaults then apply on both sides */
    assert_int_equal(gguf_get_u32(g, "tokenizer.ggml.eot_token_id", &id, err, 256), -ENOENT);
    assert_int_equal(gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &flag, err, 256), -ENOENT);
    assert_null(gguf_find_kv(g, "tokenizer.ggml.merges"));
    assert_int_equal(g->n_tensors, 0);
    gguf_close(g);
    free(data);
}

static struct json_object *build(const struct tokenizer_info_params *p, char *etag)
{
    struct buf out;
    buf_init(&out, (size_t)1 << 24);
    char err[256] = "";
    if (tokenizer_info_build(p, &out, etag, 72, err, sizeof err) != 0) {
        fail_msg("tokenizer_info_build: %s", err);
    }
    struct json_object *o = json_tokener_parse(out.data);
    assert_non_null(o);
    buf_free(&out);
    return o;
}

static const char *get_str(struct json_object *o, const char *k)
{
    struct json_object *v;
    assert_true(json_object_object_get_ex(o, k, &v));
    return json_object_get_string(v);
}

static int64_t get_int(struct json_object *o, const char *k)
{
    struct json_object *v;
    assert_true(json_object_object_get_ex(o, k, &v));
    return json_object_get_int64(v);
}

static void test_gguf_answer(void **state)
{
    (void)state;
    model m = {
        .format = MODEL_FORMAT_GGUF, .vocab = vocab(), .bos_token = "<s>", .eos_token = "</s>"};
    tokenizer *tok = NULL;
    char err[256] = "";
    assert_int_equal(tokenizer_load_gguf(&m.vocab, &tok, err, sizeof err), 0);
    struct tokenizer_info_params p = {
        .m = &m,
        .tok = tok,
        .served_model_name = "tiny",
        .chat_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
        .max_model_len = 128,
        .block_size = 16,
        .hash_seed = UINT64_MAX,
        .prefix_caching = true,
    };
    char etag[72], etag2[72], etag3[72];
    struct json_object *o = build(&p, etag);
    assert_string_equal(get_str(o, "scheme"), TOKENIZER_INFO_SCHEME);
    assert_int_equal(get_int(o, "scheme_version"), TOKENIZER_INFO_SCHEME_VERSION);
    assert_string_equal(get_str(o, "model"), "tiny");
    assert_int_equal(get_int(o, "max_model_len"), 128);
    assert_int_equal(get_int(o, "block_size"), 16);
    assert_string_equal(get_str(o, "hash_seed"), "18446744073709551615");
    assert_string_equal(get_str(o, "tokenizer_format"), "gguf");
    assert_string_equal(get_str(o, "chat_template"), p.chat_template);
    assert_string_equal(get_str(o, "bos_token"), "<s>");
    assert_string_equal(get_str(o, "eos_token"), "</s>");
    assert_int_equal(get_int(o, "bos_token_id"), 1);
    assert_int_equal(get_int(o, "eos_token_id"), 2);
    assert_int_equal(strlen(get_str(o, "tokenizer_sha256")), 64);
    struct json_object *v;
    assert_true(json_object_object_get_ex(o, "tokenizer_config", &v));
    assert_null(v);
    assert_true(json_object_object_get_ex(o, "add_bos_token", &v));
    assert_true(json_object_get_boolean(v));
    /* the tokenizer is base64 of exactly the GGUF bytes its hash covers */
    const char *b64 = get_str(o, "tokenizer");
    uint8_t *gg = NULL;
    size_t gl = 0;
    assert_int_equal(tokenizer_info_gguf_bytes(&m.vocab, &gg, &gl, err, sizeof err), 0);
    unsigned char *dec = malloc(strlen(b64));
    assert_non_null(dec);
    int n = EVP_DecodeBlock(dec, (const unsigned char *)b64, (int)strlen(b64));
    assert_true(n >= (int)gl && n <= (int)gl + 2);
    assert_memory_equal(dec, gg, gl);
    free(dec);
    free(gg);
    assert_int_equal(strlen(etag), 66);
    assert_true(etag[0] == '"' && etag[65] == '"');
    json_object_put(o);
    o = build(&p, etag2);
    assert_string_equal(etag, etag2);
    json_object_put(o);
    p.block_size = 32;
    o = build(&p, etag3);
    assert_string_not_equal(etag, etag3);
    json_object_put(o);
    tokenizer_free(tok);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void test_hf_answer(void **state)
{
    (void)state;
    char dir[] = "/tmp/tokinfo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char tj[128], tc[128];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    const char *tj_text = "{\"model\":{\"type\":\"BPE\"},\"note\":\"\\u00e9 \\\" \\n\"}";
    const char *tc_text = "{\"bos_token\":\"<s>\"}";
    write_file(tj, tj_text);
    write_file(tc, tc_text);
    model_gguf_vocab v = vocab();
    tokenizer *tok = NULL;
    char err[256] = "";
    assert_int_equal(tokenizer_load_gguf(&v, &tok, err, sizeof err), 0);
    model m = {.format = MODEL_FORMAT_HF, .hf_tokenizer_json = tj, .hf_tokenizer_config = tc};
    struct tokenizer_info_params p = {.m = &m,
                                      .tok = tok,
                                      .served_model_name = "hf",
                                      .chat_template = "x",
                                      .max_model_len = 8,
                                      .block_size = 4};
    char etag[72];
    struct json_object *o = build(&p, etag);
    assert_string_equal(get_str(o, "tokenizer_format"), "hf");
    assert_string_equal(get_str(o, "tokenizer"), tj_text);
    assert_string_equal(get_str(o, "tokenizer_config"), tc_text);
    assert_string_equal(get_str(o, "hash_seed"), "0");
    struct json_object *bos;
    assert_true(json_object_object_get_ex(o, "bos_token", &bos));
    assert_null(bos);
    /* the hash covers tokenizer.json then tokenizer_config.json */
    unsigned char md[32];
    char hex[65];
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, tj_text, strlen(tj_text));
    EVP_DigestUpdate(c, tc_text, strlen(tc_text));
    EVP_DigestFinal_ex(c, md, NULL);
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 32; i++) {
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    }
    assert_string_equal(get_str(o, "tokenizer_sha256"), hex);
    json_object_put(o);
    /* an unreadable tokenizer file is an error naming it */
    unlink(tj);
    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(tokenizer_info_build(&p, &out, etag, sizeof etag, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, tj));
    buf_free(&out);
    unlink(tc);
    rmdir(dir);
    tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_vocab_round_trip),
        cmocka_unit_test(test_gguf_answer),
        cmocka_unit_test(test_hf_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
