/*
 * Unit tests for engine/server/scoring.h: vLLM's score forms (text_1/text_2, queries/documents,
 * queries/items, data_1/data_2) paired 1:1, 1:N and N:N into an embedding request's prompts,
 * rerank and pooling requests, vLLM's validation messages (status 400, the field in param), the
 * model-dependent checks and max_tokens_per_query / max_tokens_per_doc cuts over a small
 * SentencePiece vocabulary, and the answers: cosine scores, rerank order and top_n, usage with
 * the pad token, pooling vectors as floats and base64.
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

#include "engine/server/scoring.h"
#include "engine/server/tests/tiny_vocab.h"
#include "lib/common.h"
#include "lib/json.h"

#define ARCH "qwen3"

static void parse_ok(enum scoring_kind kind, const char *body, struct openai_request *req,
                     struct scoring_request *sc)
{
    struct openai_error err;
    memset(&err, 0, sizeof(err));
    if (scoring_parse(kind, body, strlen(body), ARCH, req, sc, &err) != 0) {
        fail_msg("parse of %s failed: %s (param %s)", body, err.message, err.param);
    }
}

/* A 400 whose param is param ("" for null) and whose message contains msg. */
static void parse_bad(enum scoring_kind kind, const char *body, const char *param, const char *msg)
{
    struct openai_request req;
    struct scoring_request sc;
    struct openai_error err;
    memset(&err, 0, sizeof(err));
    int rc = scoring_parse(kind, body, strlen(body), ARCH, &req, &sc, &err);
    if (rc != -EINVAL) {
        fail_msg("parse of %s: rc %d, want -EINVAL", body, rc);
    }
    assert_int_equal(err.status, 400);
    assert_string_equal(err.type, "BadRequestError");
    if (strcmp(err.param, param) != 0 || !strstr(err.message, msg)) {
        fail_msg("parse of %s: param '%s' message '%s', want '%s' / '%s'", body, err.param,
                 err.message, param, msg);
    }
}

static void free_both(struct openai_request *req, struct scoring_request *sc)
{
    openai_request_deinit(req);
    scoring_request_deinit(sc);
}

static void assert_prompt(const struct openai_request *req, size_t i, const char *text)
{
    assert_true(i < req->n_prompts);
    assert_null(req->prompts[i].tokens);
    assert_int_equal(req->prompts[i].text_len, strlen(text));
    assert_memory_equal(req->prompts[i].text, text, strlen(text));
}

static void test_score_forms(void **state)
{
    (void)state;
    struct openai_request r;
    struct scoring_request sc;
    /* 1:1, strings: an embedding request of both texts, vLLM's tokenization defaults */
    parse_ok(SCORING_SCORE, "{\"text_1\":\"a query\",\"text_2\":\"a document\"}", &r, &sc);
    assert_int_equal(r.kind, OPENAI_EMBEDDING);
    assert_int_equal(sc.kind, SCORING_SCORE);
    assert_int_equal(sc.n_queries, 1);
    assert_int_equal(sc.n_docs, 1);
    assert_int_equal(r.n_prompts, 2);
    assert_prompt(&r, 0, "a query");
    assert_prompt(&r, 1, "a document");
    assert_string_equal(r.prompt_text, "a query");
    assert_true(r.add_special_tokens);
    assert_int_equal(r.embed_normalize, -1);
    assert_true(r.max_tokens_set);
    assert_int_equal(r.max_tokens, 1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.logprobs, -1);
    assert_false(r.stream);
    assert_null(r.model);
    assert_int_equal(r.truncate_prompt_tokens, 0);
    assert_int_equal(r.priority, 0);
    assert_int_equal(sc.max_tokens_per_query, 0);
    assert_int_equal(sc.max_tokens_per_doc, 0);
    free_both(&r, &sc);
    assert_int_equal(sc.kind, SCORING_NONE);

    /* N:N, queries/documents: queries first, then documents */
    parse_ok(SCORING_SCORE, "{\"queries\":[\"q0\",\"q1\"],\"documents\":[\"d0\",\"d1\"]}", &r, &sc);
    assert_int_equal(sc.n_queries, 2);
    assert_int_equal(sc.n_docs, 2);
    assert_prompt(&r, 0, "q0");
    assert_prompt(&r, 1, "q1");
    assert_prompt(&r, 2, "d0");
    assert_prompt(&r, 3, "d1");
    free_both(&r, &sc);

    /* 1:N, queries/items; a one-element list is 1 too */
    parse_ok(SCORING_SCORE, "{\"queries\":\"q\",\"items\":[\"i0\",\"i1\",\"i2\"]}", &r, &sc);
    assert_int_equal(sc.n_queries, 1);
    assert_int_equal(sc.n_docs, 3);
    assert_prompt(&r, 3, "i2");
    free_both(&r, &sc);
    parse_ok(SCORING_SCORE, "{\"data_1\":[\"q\"],\"data_2\":[\"x\",\"y\"]}", &r, &sc);
    assert_int_equal(sc.n_queries, 1);
    assert_int_equal(sc.n_docs, 2);
    free_both(&r, &sc);

    /* vLLM's union order: queries/documents before the others; extra fields are ignored */
    parse_ok(SCORING_SCORE,
             "{\"text_1\":\"t1\",\"text_2\":\"t2\",\"queries\":\"q\",\"documents\":\"d\","
             "\"return_documents\":true}",
             &r, &sc);
    assert_prompt(&r, 0, "q");
    assert_prompt(&r, 1, "d");
    free_both(&r, &sc);
    /* a null field does not make a form */
    parse_ok(SCORING_SCORE,
             "{\"queries\":null,\"documents\":\"d\",\"data_1\":\"a\",\"data_2\":\"b\"}", &r, &sc);
    assert_prompt(&r, 0, "a");
    free_both(&r, &sc);

    /* common fields */
    parse_ok(SCORING_SCORE,
             "{\"model\":\"m\",\"user\":\"u\",\"text_1\":\"a\",\"text_2\":[\"b\"],"
             "\"truncate_prompt_tokens\":5,\"truncation_side\":\"right\",\"priority\":-3,"
             "\"use_activation\":false,\"max_tokens_per_query\":4,\"max_tokens_per_doc\":6.0,"
             "\"cache_salt\":\"salt\",\"padding\":\"do_not_pad\",\"add_special_tokens\":false}",
             &r, &sc);
    assert_string_equal(r.model, "m");
    assert_string_equal(r.user, "u");
    assert_string_equal(r.cache_salt, "salt");
    assert_int_equal(r.truncate_prompt_tokens, 5);
    assert_true(r.truncate_right);
    assert_int_equal(r.priority, -3);
    assert_int_equal(r.embed_normalize, 0);
    assert_int_equal(sc.max_tokens_per_query, 4);
    assert_int_equal(sc.max_tokens_per_doc, 6);
    assert_true(r.add_special_tokens); /* not a scoring field: vLLM always adds them */
    free_both(&r, &sc);
    parse_ok(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"truncate_prompt_tokens\":-1}", &r,
             &sc);
    assert_int_equal(r.truncate_prompt_tokens, -1);
    assert_false(r.truncate_right);
    free_both(&r, &sc);
    /* texts keep their bytes (an embedded NUL included) */
    parse_ok(SCORING_SCORE, "{\"text_1\":\"a\\u0000b\",\"text_2\":\"\"}", &r, &sc);
    assert_int_equal(r.prompts[0].text_len, 3);
    assert_int_equal(r.prompts[1].text_len, 0);
    free_both(&r, &sc);
}

static void test_score_errors(void **state)
{
    (void)state;
    parse_bad(SCORING_SCORE, "{\"text_1\":[\"a\",\"b\"],\"text_2\":[\"c\",\"d\",\"e\"]}", "text_2",
              "Input lengths must be either 1:1, 1:N or N:N");
    parse_bad(SCORING_SCORE, "{\"queries\":[],\"documents\":[\"d\"]}", "queries",
              "At least one text element must be given");
    parse_bad(SCORING_SCORE, "{\"queries\":\"q\",\"items\":[]}", "items",
              "At least one text_pair element must be given");
    /* vLLM checks the lengths first: 2:0 is a length error */
    parse_bad(SCORING_SCORE, "{\"data_1\":[\"a\",\"b\"],\"data_2\":[]}", "data_2",
              "Input lengths must be either 1:1, 1:N or N:N");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\"}", "text_2", "'text_2' is required");
    parse_bad(SCORING_SCORE, "{\"documents\":\"a\"}", "queries", "'queries' is required");
    parse_bad(SCORING_SCORE, "{\"model\":\"m\"}", "queries", "are required");
    parse_bad(SCORING_SCORE, "{\"text_1\":5,\"text_2\":\"b\"}", "text_1",
              "'text_1': input should be a valid string");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":[\"b\",null]}", "text_2",
              "'text_2[1]': input should be a valid string");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":[[\"b\"]]}", "text_2", "'text_2[0]'");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":{\"text\":\"b\"}}", "text_2",
              "an object with 'content'");
    /* a multi-modal input on a text model: vLLM's message, after every type check */
    parse_bad(SCORING_SCORE,
              "{\"text_1\":\"a\",\"text_2\":[{\"content\":[{\"type\":\"text\",\"text\":\"b\"}]}]}",
              "", "MultiModalParam is not supported for Qwen3ForCausalLM");
    parse_bad(SCORING_SCORE,
              "{\"text_1\":{\"content\":[]},\"text_2\":\"b\",\"truncate_prompt_tokens\":\"x\"}",
              "truncate_prompt_tokens", "valid integer");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"truncate_prompt_tokens\":-2}",
              "truncate_prompt_tokens", "greater than or equal to -1");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"max_tokens_per_query\":-1}",
              "max_tokens_per_query", "max_tokens_per_query must be a non-negative integer");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"max_tokens_per_doc\":1.5}",
              "max_tokens_per_doc", "valid integer");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"use_activation\":1}",
              "use_activation", "valid boolean");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"truncation_side\":\"mid\"}",
              "truncation_side", "'left' or 'right'");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"padding\":true}", "padding",
              "valid string");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"model\":3}", "model",
              "valid string");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"priority\":1e12}", "priority",
              "out of range");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"cache_salt\":\"\"}",
              "cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",\"text_2\":\"b\",\"cache_salt\":\"a/b\"}",
              "cache_salt", "must not contain");
    parse_bad(SCORING_SCORE, "{\"text_1\":\"a\",", "", "invalid JSON body");
    parse_bad(SCORING_SCORE, "[1]", "", "must be a JSON object");
    parse_bad(SCORING_SCORE, "null", "", "must be a JSON object");
    /* more texts than a request may hold */
    size_t cap = 32 + (SCORING_MAX_TEXTS + 1) * 4;
    char *body = malloc(cap);
    assert_non_null(body);
    size_t n = (size_t)snprintf(body, cap, "{\"text_1\":\"q\",\"text_2\":[");
    for (int i = 0; i <= SCORING_MAX_TEXTS; i++) {
        n += (size_t)snprintf(body + n, cap - n, "%s\"d\"", i ? "," : "");
    }
    snprintf(body + n, cap - n, "]}");
    parse_bad(SCORING_SCORE, body, "text_2", "exceeds the maximum allowed count");
    free(body);
}

static void test_rerank_parse(void **state)
{
    (void)state;
    struct openai_request r;
    struct scoring_request sc;
    parse_ok(SCORING_RERANK, "{\"query\":\"q\",\"documents\":[\"a\",\"b\",\"c\"],\"top_n\":2}", &r,
             &sc);
    assert_int_equal(sc.kind, SCORING_RERANK);
    assert_int_equal(sc.n_queries, 1);
    assert_int_equal(sc.n_docs, 3);
    assert_int_equal(sc.top_n, 2);
    assert_prompt(&r, 0, "q");
    assert_prompt(&r, 3, "c");
    free_both(&r, &sc);
    parse_ok(SCORING_RERANK, "{\"query\":\"q\",\"documents\":\"only\"}", &r, &sc);
    assert_int_equal(sc.n_docs, 1);
    assert_int_equal(sc.top_n, 0);
    free_both(&r, &sc);
    parse_bad(SCORING_RERANK, "{\"documents\":[\"a\"]}", "query", "'query' is required");
    parse_bad(SCORING_RERANK, "{\"query\":\"q\"}", "documents", "'documents' is required");
    parse_bad(SCORING_RERANK, "{\"query\":[\"q\"],\"documents\":[\"a\"]}", "query",
              "'query': input should be a valid string or an object with 'content'");
    parse_bad(SCORING_RERANK, "{\"query\":\"q\",\"documents\":[]}", "documents",
              "At least one text_pair element must be given");
    parse_bad(SCORING_RERANK, "{\"query\":\"q\",\"documents\":[\"a\"],\"top_n\":\"2\"}", "top_n",
              "valid integer");
    parse_bad(SCORING_RERANK, "{\"query\":\"q\",\"documents\":[{\"text\":\"a\"}]}", "documents",
              "'documents[0]'");
}

static void test_pooling_parse(void **state)
{
    (void)state;
    struct openai_request r;
    struct scoring_request sc;
    parse_ok(SCORING_POOLING, "{\"input\":[\"a\",\"b\"],\"task\":\"embed\"}", &r, &sc);
    assert_int_equal(sc.kind, SCORING_POOLING);
    assert_int_equal(r.kind, OPENAI_EMBEDDING);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.embed_normalize, -1);
    assert_false(r.embed_base64);
    free_both(&r, &sc);
    parse_ok(SCORING_POOLING,
             "{\"input\":[1,2,3],\"use_activation\":false,\"encoding_format\":\"base64\"}", &r,
             &sc);
    assert_int_equal(r.n_prompts, 1);
    assert_int_equal(r.prompts[0].n_tokens, 3);
    assert_int_equal(r.embed_normalize, 0);
    assert_true(r.embed_base64);
    free_both(&r, &sc);
    parse_bad(SCORING_POOLING, "{\"input\":\"a\",\"dimensions\":8}", "dimensions",
              "dimensions is currently not supported");
    parse_bad(SCORING_POOLING, "{\"input\":\"a\",\"task\":\"classify\"}", "task",
              "Unsupported task: 'classify' Supported tasks: ('generate', 'embed')");
    parse_bad(SCORING_POOLING, "{\"input\":\"a\",\"task\":\"bogus\"}", "task",
              "'task': input should be 'embed'");
    /* vLLM's reject_removed_pooling_parameters (the embeddings parser's) */
    parse_bad(SCORING_POOLING, "{\"input\":\"a\",\"task\":\"score\"}", "task",
              "`score` task was removed; use `classify` instead.");
    parse_bad(SCORING_POOLING, "{\"input\":\"a\",\"normalize\":true}", "normalize",
              "Parameter `normalize` was removed; use `use_activation` instead.");
    parse_bad(SCORING_POOLING, "{\"input\":\"a\",\"use_activation\":\"no\"}", "use_activation",
              "valid boolean");
    parse_bad(SCORING_POOLING, "{\"task\":\"embed\"}", "input", "'input' is required");
}

/* ▁ a b ▁a ab, no space prefix: "abab" is [7, 7], "aba" [7, 4] (scores favour "ab") */
static tokenizer *load(void)
{
    model_gguf_vocab v = tiny_vocab(0);
    tokenizer *tok = NULL;
    char err[256] = "";
    assert_int_equal(tokenizer_load_gguf(&v, &tok, err, sizeof err), 0);
    return tok;
}

static int prepare(tokenizer *tok, const char *body, int32_t max_len, struct openai_request *r,
                   struct scoring_request *sc, struct openai_error *err)
{
    enum scoring_kind kind = strstr(body, "\"input\"")   ? SCORING_POOLING
                             : strstr(body, "\"query\"") ? SCORING_RERANK
                                                         : SCORING_SCORE;
    parse_ok(kind, body, r, sc);
    memset(err, 0, sizeof(*err));
    return scoring_prepare(sc, r, tok, max_len, err);
}

static void test_prepare(void **state)
{
    (void)state;
    tokenizer *tok = load();
    struct openai_request r;
    struct scoring_request sc;
    struct openai_error err;
    /* nothing to cut: the prompts stay the body's texts */
    assert_int_equal(prepare(tok, "{\"text_1\":\"abab\",\"text_2\":\"aba\"}", 16, &r, &sc, &err),
                     0);
    assert_null(sc.owned);
    assert_prompt(&r, 0, "abab");
    free_both(&r, &sc);
    /* each query to 1 token, each document to 1: their texts are cut, the originals kept */
    assert_int_equal(prepare(tok,
                             "{\"query\":\"abab\",\"documents\":[\"aba\",\"a\",\"\"],"
                             "\"max_tokens_per_query\":1,\"max_tokens_per_doc\":1}",
                             16, &r, &sc, &err),
                     0);
    assert_prompt(&r, 0, "ab");
    assert_prompt(&r, 1, "ab");
    assert_prompt(&r, 2, "a");
    assert_prompt(&r, 3, "");
    assert_string_equal(r.prompt_text, "ab");
    assert_memory_equal(sc.texts[0], "abab", 4);
    assert_int_equal(sc.text_lens[1], 3);
    free_both(&r, &sc);
    /* only the documents */
    assert_int_equal(prepare(tok,
                             "{\"queries\":[\"abab\",\"abab\"],\"documents\":[\"abab\",\"ab\"],"
                             "\"max_tokens_per_doc\":1}",
                             16, &r, &sc, &err),
                     0);
    assert_prompt(&r, 0, "abab");
    assert_prompt(&r, 1, "abab");
    assert_prompt(&r, 2, "ab");
    assert_prompt(&r, 3, "ab");
    free_both(&r, &sc);
    /* vLLM's limits against max_model_len */
    assert_int_equal(prepare(tok, "{\"text_1\":\"a\",\"text_2\":\"b\",\"max_tokens_per_query\":16}",
                             16, &r, &sc, &err),
                     -EINVAL);
    assert_string_equal(err.param, "max_tokens_per_query");
    assert_string_equal(err.message,
                        "max_tokens_per_query (16) must be less than max_model_len (16).");
    free_both(&r, &sc);
    assert_int_equal(prepare(tok, "{\"text_1\":\"a\",\"text_2\":\"b\",\"max_tokens_per_doc\":99}",
                             16, &r, &sc, &err),
                     -EINVAL);
    assert_string_equal(err.param, "max_tokens_per_doc");
    free_both(&r, &sc);
    assert_int_equal(prepare(tok,
                             "{\"text_1\":\"a\",\"text_2\":\"b\",\"truncate_prompt_tokens\":17}",
                             16, &r, &sc, &err),
                     -EINVAL);
    assert_string_equal(err.param, "truncate_prompt_tokens");
    assert_string_equal(err.message, "truncate_prompt_tokens value is greater than max_model_len. "
                                     "Please request a smaller truncation size.");
    free_both(&r, &sc);
    assert_int_equal(
        prepare(tok, "{\"input\":\"a\",\"truncate_prompt_tokens\":17}", 16, &r, &sc, &err),
        -EINVAL);
    free_both(&r, &sc);
    assert_int_equal(
        prepare(tok, "{\"input\":\"a\",\"truncate_prompt_tokens\":16}", 16, &r, &sc, &err), 0);
    free_both(&r, &sc);
    tokenizer_free(tok);
}

static void test_cosine(void **state)
{
    (void)state;
    const float a[] = {1, 0, 0}, b[] = {1, 1, 0}, c[] = {-2, 0, 0}, z[] = {0, 0, 0};
    assert_float_equal(scoring_cosine(a, b, 3), 0.70710678, 1e-7);
    assert_float_equal(scoring_cosine(a, c, 3), -1.0, 0);
    assert_float_equal(scoring_cosine(a, a, 3), 1.0, 0);
    assert_float_equal(scoring_cosine(a, z, 3), 0.0, 0); /* torch: each norm clamped to 1e-8 */
    assert_float_equal(scoring_cosine(z, z, 3), 0.0, 0);
    /* not normalised first: the scale does not matter */
    const float big[] = {1e20f, 1e20f, 0};
    assert_float_equal(scoring_cosine(a, big, 3), 0.70710678, 1e-7);
}

/* Builds sc's answer over vecs and returns the parsed JSON. */
static struct json_object *build(const struct scoring_request *sc, const float *const *vecs,
                                 const int32_t *toks, size_t n, size_t dims, int pad,
                                 const struct openai_embed_format *fmt, struct buf *out)
{
    const struct scoring_output o = {.id = "score-1",
                                     .model = "tiny",
                                     .created = 1700000000,
                                     .vecs = vecs,
                                     .n_tokens = toks,
                                     .n = n,
                                     .dims = dims,
                                     .pad_token = pad,
                                     .fmt = fmt};
    buf_init(out, 1 << 20);
    assert_int_equal(scoring_build(sc, &o, out), 0);
    char err[256];
    struct json_object *j = json_parse(out->data, out->len, err, sizeof(err));
    if (!j) {
        fail_msg("invalid JSON (%s): %s", err, out->data);
    }
    return j;
}

static double num(struct json_object *j, const char *path)
{
    struct json_object *v = json_get(j, path);
    assert_non_null(v);
    return json_object_get_double(v);
}

static const char *str(struct json_object *j, const char *path)
{
    struct json_object *v = json_get(j, path);
    assert_non_null(v);
    return json_object_get_string(v);
}

static void test_build_score(void **state)
{
    (void)state;
    struct openai_request r;
    struct scoring_request sc;
    struct buf out;
    /* 1:N: the query against each document */
    parse_ok(SCORING_SCORE, "{\"text_1\":\"q\",\"text_2\":[\"x\",\"y\",\"z\"]}", &r, &sc);
    const float q[] = {1, 0}, x[] = {1, 1}, y[] = {0, 1}, zz[] = {-1, 0};
    const float *vecs[] = {q, x, y, zz};
    const int32_t toks[] = {3, 4, 5, 6};
    struct json_object *j = build(&sc, vecs, toks, 4, 2, 1, NULL, &out);
    assert_non_null(strstr(out.data, "\"score\":0.7071067690849304}")); /* Python's repr */
    assert_non_null(strstr(out.data, "\"score\":-1.0}"));
    assert_string_equal(str(j, "id"), "score-1");
    assert_string_equal(str(j, "object"), "list");
    assert_string_equal(str(j, "model"), "tiny");
    assert_int_equal((int64_t)num(j, "created"), 1700000000);
    struct json_object *data = json_get(j, "data");
    assert_int_equal(json_object_array_length(data), 3);
    const double want[] = {0.70710678, 0.0, -1.0};
    for (size_t i = 0; i < 3; i++) {
        struct json_object *e = json_object_array_get_idx(data, i);
        assert_int_equal((int64_t)num(e, "index"), (int64_t)i);
        assert_string_equal(str(e, "object"), "score");
        assert_float_equal(num(e, "score"), want[i], 1e-7);
    }
    /* each pair: query + pad + document, the query counted per pair */
    assert_int_equal((int64_t)num(j, "usage.prompt_tokens"), 3 * 4 + 4 + 5 + 6);
    assert_int_equal((int64_t)num(j, "usage.total_tokens"), 3 * 4 + 4 + 5 + 6);
    assert_int_equal((int64_t)num(j, "usage.completion_tokens"), 0);
    assert_true(json_object_object_get_ex(json_get(j, "usage"), "prompt_tokens_details", NULL));
    json_object_put(j);
    buf_free(&out);
    free_both(&r, &sc);

    /* N:N pairs query i with document i; no pad token: no extra token */
    parse_ok(SCORING_SCORE, "{\"queries\":[\"a\",\"b\"],\"documents\":[\"c\",\"d\"]}", &r, &sc);
    const float *v2[] = {q, y, x, y};
    j = build(&sc, v2, toks, 4, 2, 0, NULL, &out);
    assert_float_equal(num(json_object_array_get_idx(json_get(j, "data"), 0), "score"), 0.70710678,
                       1e-7);
    assert_float_equal(num(json_object_array_get_idx(json_get(j, "data"), 1), "score"), 1.0, 0);
    assert_int_equal((int64_t)num(j, "usage.prompt_tokens"), 3 + 4 + 5 + 6);
    json_object_put(j);
    buf_free(&out);
    /* vectors that do not fit the request */
    const struct scoring_output bad = {.vecs = v2, .n_tokens = toks, .n = 3, .dims = 2};
    buf_init(&out, 1 << 10);
    assert_int_equal(scoring_build(&sc, &bad, &out), -EINVAL);
    buf_free(&out);
    free_both(&r, &sc);
}

/* The rerank results' indexes in order, and their count. */
static size_t rerank_order(struct json_object *j, size_t *idx, size_t cap)
{
    struct json_object *res = json_get(j, "results");
    assert_non_null(res);
    size_t n = json_object_array_length(res);
    assert_true(n <= cap);
    for (size_t i = 0; i < n; i++) {
        idx[i] = (size_t)num(json_object_array_get_idx(res, i), "index");
    }
    return n;
}

static void test_build_rerank(void **state)
{
    (void)state;
    const float q[] = {1, 0}, d0[] = {0, 1}, d1[] = {1, 0.2f}, d2[] = {-1, 0}, d3[] = {1, 1},
                d4[] = {2, 2};
    const float *vecs[] = {q, d0, d1, d2, d3, d4};
    const int32_t toks[] = {2, 1, 1, 1, 1, 1};
    static const struct {
        const char *top_n;
        size_t n;
    } cases[] = {{"0", 5}, {"-1", 5}, {"2", 2}, {"5", 5}, {"9", 5}, {"1", 1}};
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"query\":\"q\",\"documents\":[\"zero\",\"one\",\"two\",\"three\",\"fo\\\"ur\"],"
                 "\"top_n\":%s}",
                 cases[c].top_n);
        struct openai_request r;
        struct scoring_request sc;
        struct buf out;
        parse_ok(SCORING_RERANK, body, &r, &sc);
        struct json_object *j = build(&sc, vecs, toks, 6, 2, 1, NULL, &out);
        /* best first: 1 (0.98), then 3 and 4 tie (0.707) in document order, 0, 2 */
        const size_t want[] = {1, 3, 4, 0, 2};
        size_t got[8] = {0};
        assert_int_equal(rerank_order(j, got, 8), cases[c].n);
        for (size_t i = 0; i < cases[c].n; i++) {
            assert_int_equal(got[i], want[i]);
        }
        struct json_object *first = json_object_array_get_idx(json_get(j, "results"), 0);
        assert_string_equal(str(first, "document.text"), "one");
        assert_true(json_object_object_get_ex(json_get(first, "document"), "multi_modal", NULL));
        assert_null(json_get(first, "document.multi_modal"));
        assert_float_equal(num(first, "relevance_score"), 1 / sqrt(1.04), 1e-6);
        if (cases[c].n >= 3) {
            struct json_object *third = json_object_array_get_idx(json_get(j, "results"), 2);
            assert_string_equal(str(third, "document.text"), "fo\"ur");
        }
        /* vLLM's RerankResponse: id, model, usage {prompt_tokens, total_tokens}, results */
        assert_string_equal(str(j, "id"), "score-1");
        assert_string_equal(str(j, "model"), "tiny");
        assert_null(json_get(j, "object"));
        assert_int_equal((int64_t)num(j, "usage.prompt_tokens"), 5 * (2 + 1 + 1));
        assert_int_equal((int64_t)num(j, "usage.total_tokens"), 5 * (2 + 1 + 1));
        assert_null(json_get(j, "usage.completion_tokens"));
        json_object_put(j);
        buf_free(&out);
        free_both(&r, &sc);
    }
}

static void test_build_pooling(void **state)
{
    (void)state;
    struct openai_request r;
    struct scoring_request sc;
    struct buf out;
    parse_ok(SCORING_POOLING, "{\"input\":[\"a\",\"b\"]}", &r, &sc);
    const float a[] = {1.0f, -0.5f, 0.25f}, b[] = {0.1f, 3.0f, 1e-7f};
    const float *vecs[] = {a, b};
    const int32_t toks[] = {4, 7};
    const struct scoring_output o = {.id = "pooling-7",
                                     .model = "tiny",
                                     .created = 5,
                                     .vecs = vecs,
                                     .n_tokens = toks,
                                     .n = 2,
                                     .dims = 3};
    buf_init(&out, 1 << 16);
    assert_int_equal(scoring_build(&sc, &o, &out), 0);
    assert_string_equal(
        out.data, "{\"id\":\"pooling-7\",\"object\":\"list\",\"created\":5,\"model\":\"tiny\","
                  "\"data\":[{\"index\":0,\"object\":\"pooling\",\"data\":[1.0,-0.5,0.25]},"
                  "{\"index\":1,\"object\":\"pooling\",\"data\":[0.1,3.0,1e-07]}],"
                  "\"usage\":{\"prompt_tokens\":11,\"total_tokens\":11,"
                  "\"completion_tokens\":0,\"prompt_tokens_details\":null}}");
    buf_free(&out);
    free_both(&r, &sc);
    /* base64 of the float32 bytes, little endian (the openai client's default) */
    parse_ok(SCORING_POOLING,
             "{\"input\":\"a\",\"encoding_format\":\"base64\",\"endianness\":\"little\"}", &r, &sc);
    struct json_object *j = build(&sc, vecs, toks, 1, 3, 0, &r.embed_fmt, &out);
    assert_string_equal(str(json_object_array_get_idx(json_get(j, "data"), 0), "data"),
                        "AACAPwAAAL8AAIA+");
    assert_int_equal((int64_t)num(j, "usage.prompt_tokens"), 4);
    json_object_put(j);
    buf_free(&out);
    free_both(&r, &sc);
    /* embed_dtype and endianness as /v1/embeddings: bfloat16 big endian is 3f80 bf00 3e80 */
    parse_ok(SCORING_POOLING,
             "{\"input\":\"a\",\"encoding_format\":\"base64\",\"embed_dtype\":\"bfloat16\","
             "\"endianness\":\"big\"}",
             &r, &sc);
    j = build(&sc, vecs, toks, 1, 3, 0, &r.embed_fmt, &out);
    assert_string_equal(str(json_object_array_get_idx(json_get(j, "data"), 0), "data"), "P4C/AD6A");
    json_object_put(j);
    buf_free(&out);
    free_both(&r, &sc);
    /* embed_dtype does not change floats */
    parse_ok(SCORING_POOLING, "{\"input\":\"a\",\"embed_dtype\":\"float16\"}", &r, &sc);
    j = build(&sc, vecs + 1, toks, 1, 3, 0, &r.embed_fmt, &out);
    assert_non_null(strstr(out.data, "\"data\":[0.1,3.0,1e-07]"));
    json_object_put(j);
    buf_free(&out);
    free_both(&r, &sc);
    assert_string_equal(scoring_id_prefix(SCORING_POOLING), "pooling-");
    assert_string_equal(scoring_id_prefix(SCORING_SCORE), "score-");
    assert_string_equal(scoring_id_prefix(SCORING_RERANK), "score-");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_score_forms),   cmocka_unit_test(test_score_errors),
        cmocka_unit_test(test_rerank_parse),  cmocka_unit_test(test_pooling_parse),
        cmocka_unit_test(test_prepare),       cmocka_unit_test(test_cosine),
        cmocka_unit_test(test_build_score),   cmocka_unit_test(test_build_rerank),
        cmocka_unit_test(test_build_pooling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
