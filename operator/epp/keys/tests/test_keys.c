/*
 * Block keys against a real engine: for a generated GGUF model and its HF twin, an engine and its
 * OpenAI server run in-process on a loopback port; the keys are built from the server's own
 * GET /tokenizer_info answer, and for completions and chat requests of several lengths around
 * block boundaries (with and without cache_salt) the tokens and block hashes the engine stores
 * (its KV-event sink) must equal what epp_keys_for_request computes. Malformed answers fail with
 * errors naming the field.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <uv.h>

#include "engine/cache/kvcache.h"
#include "engine/core/engine.h"
#include "engine/server/server.h"
#include "engine/template/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/http_client.h"
#include "lib/http_server.h"
#include "operator/epp/keys/keys.h"

#define SEED       0xfedcba9876543210ull /* above INT64_MAX: the seed travels as a string */
#define BLOCK_SIZE 4
#define MAX_HASHES 4096

struct captured {
    pthread_mutex_t mu;
    uint64_t hashes[MAX_HASHES];
    int32_t tokens[MAX_HASHES * BLOCK_SIZE];
    int n;
    int overflow;
};

struct fx {
    uv_loop_t loop;
    model *m;
    tokenizer *tok;
    engine *e;
    struct http_server *srv;
    struct engine_server *es;
    struct http_client *cli;
    char base[64];
    struct captured cap;
    /* the last response */
    int done;
    struct http_response resp;
};

static void on_stored(void *user, const kvc_stored_event *ev)
{
    struct captured *c = user;
    pthread_mutex_lock(&c->mu);
    for (int32_t i = 0; i < ev->n_blocks; i++) {
        if (c->n >= MAX_HASHES) {
            c->overflow = 1;
            break;
        }
        c->hashes[c->n] = ev->block_hashes[i];
        memcpy(&c->tokens[c->n * BLOCK_SIZE], ev->token_ids + (size_t)i * BLOCK_SIZE,
               BLOCK_SIZE * sizeof(int32_t));
        c->n++;
    }
    pthread_mutex_unlock(&c->mu);
}

static void on_cleared(void *user)
{
    struct captured *c = user;
    pthread_mutex_lock(&c->mu);
    c->n = 0;
    pthread_mutex_unlock(&c->mu);
}

static void on_guard(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

static int run_until(uv_loop_t *loop, const int *flag, uint64_t ms)
{
    uv_timer_t guard;
    int expired = 0;
    uv_timer_init(loop, &guard);
    guard.data = &expired;
    uv_timer_start(&guard, on_guard, ms, 0);
    while (!*flag && !expired) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return *flag;
}

static void fx_start(struct fx *f, const char *env)
{
    memset(f, 0, sizeof *f);
    const char *path = getenv(env);
    if (!path) {
        fail_msg("%s is not set (the ctest fixture writes the model)", env);
    }
    char err[512] = "";
    f->m = model_load(path, err, sizeof err);
    if (!f->m) {
        fail_msg("model_load: %s", err);
    }
    assert_int_equal(tokenizer_from_model(f->m, &f->tok, err, sizeof err), 0);
    pthread_mutex_init(&f->cap.mu, NULL);
    engine_config cfg = {
        .max_model_len = 512,
        .max_num_seqs = 4,
        .block_size = BLOCK_SIZE,
        .n_threads = 1,
        .prefix_hash_seed = SEED,
        .max_num_batched_tokens = 8, /* chunked prefill: blocks are stored over several steps */
        .kv_events = {.user = &f->cap, .stored = on_stored, .all_cleared = on_cleared},
    };
    f->e = engine_new(f->m, f->tok, &cfg, err, sizeof err);
    if (!f->e) {
        fail_msg("engine_new: %s", err);
    }
    assert_int_equal(uv_loop_init(&f->loop), 0);
    struct http_server_config hc;
    http_server_config_init(&hc);
    hc.host = "127.0.0.1";
    hc.port = 0;
    f->srv = http_server_new(&f->loop, &hc, err, sizeof err);
    assert_non_null(f->srv);
    struct engine_server_config sc = {.served_model_name = "keys-model", .prefix_hash_seed = SEED};
    f->es = engine_server_new(&f->loop, f->srv, f->e, &sc, err, sizeof err);
    if (!f->es) {
        fail_msg("engine_server_new: %s", err);
    }
    assert_int_equal(engine_start(f->e), 0);
    assert_int_equal(http_server_start(f->srv, err, sizeof err), 0);
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%d", http_server_port(f->srv));
    f->cli = http_client_new(&f->loop, err, sizeof err);
    assert_non_null(f->cli);
}

static void on_drained(struct http_server *srv, void *ud)
{
    (void)srv;
    *(int *)ud = 1;
}

static void fx_stop(struct fx *f)
{
    http_response_free(&f->resp);
    http_client_free(f->cli);
    int drained = 0;
    http_server_drain(f->srv, 0, on_drained, &drained);
    run_until(&f->loop, &drained, 5000);
    engine_stop(f->e);
    engine_free(f->e);
    engine_server_free(f->es);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    http_server_free(f->srv);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    tokenizer_free(f->tok);
    model_free(f->m);
    pthread_mutex_destroy(&f->cap.mu);
}

static void on_done(void *ud, struct http_response *resp)
{
    struct fx *f = ud;
    http_response_free(&f->resp);
    http_response_move(&f->resp, resp);
    f->done = 1;
}

/* One request; the answer lands in f->resp. */
static void fx_request(struct fx *f, const char *method, const char *path, const char *body,
                       const char *const *headers)
{
    char url[256], err[256] = "";
    snprintf(url, sizeof url, "%s%s", f->base, path);
    struct http_client_opts o = {
        .method = method,
        .url = url,
        .headers = headers,
        .body = body,
        .body_len = body ? strlen(body) : 0,
        .timeout_ms = 60000,
        .max_response = (size_t)64 << 20,
        .on_done = on_done,
        .ud = f,
    };
    f->done = 0;
    if (!http_client_start(f->cli, &o, err, sizeof err)) {
        fail_msg("http_client_start: %s", err);
    }
    assert_true(run_until(&f->loop, &f->done, 60000));
    if (f->resp.error) {
        fail_msg("%s %s: %s", method, path, f->resp.error);
    }
}

static struct epp_keys *fx_keys(struct fx *f)
{
    fx_request(f, "GET", "/tokenizer_info", NULL, NULL);
    assert_int_equal(f->resp.status, 200);
    char err[512] = "";
    struct epp_keys *k = epp_keys_new(f->resp.body.data, f->resp.body.len, err, sizeof err);
    if (!k) {
        fail_msg("epp_keys_new: %s", err);
    }
    return k;
}

/* Empties the prefix cache so that the next request's blocks are all stored anew. */
static void fx_reset(struct fx *f)
{
    for (int i = 0; i < 500; i++) {
        if (engine_reset_prefix_cache(f->e) == 0) {
            return;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    fail_msg("the prefix cache stayed busy");
}

static int64_t usage_prompt_tokens(const struct fx *f)
{
    struct json_object *o = json_tokener_parse(f->resp.body.data);
    struct json_object *u, *p;
    int64_t n = -1;
    if (o && json_object_object_get_ex(o, "usage", &u) &&
        json_object_object_get_ex(u, "prompt_tokens", &p)) {
        n = json_object_get_int64(p);
    }
    json_object_put(o);
    return n;
}

/* Sends body to path on the engine and checks that the keys reproduce what it stored. */
static void check_request(struct fx *f, const struct epp_keys *k, const char *path,
                          const char *body)
{
    int32_t *toks = NULL;
    uint64_t *keys = NULL;
    size_t nt = 0, nk = 0;
    char err[512] = "";
    int rc = epp_keys_for_request(k, path, body, strlen(body), NULL, &toks, &nt, &keys, &nk, err,
                                  sizeof err);
    if (rc != 0) {
        fail_msg("epp_keys_for_request(%s): %s", body, err);
    }
    assert_int_equal(nk, nt / BLOCK_SIZE);
    fx_reset(f);
    fx_request(f, "POST", path, body, NULL);
    if (f->resp.status != 200) {
        fail_msg("%s -> %d %s", body, f->resp.status, f->resp.body.data);
    }
    assert_int_equal(usage_prompt_tokens(f), (int64_t)nt);
    pthread_mutex_lock(&f->cap.mu);
    int n = f->cap.n;
    int same_tokens = n == (int)nk && memcmp(f->cap.tokens, toks, nk * BLOCK_SIZE * 4) == 0;
    int same_keys = n == (int)nk && memcmp(f->cap.hashes, keys, nk * 8) == 0;
    pthread_mutex_unlock(&f->cap.mu);
    if (!same_tokens || !same_keys) {
        fail_msg("%s %s: engine stored %d blocks, keys computed %zu (tokens %s, hashes %s)", path,
                 body, n, nk, same_tokens ? "equal" : "differ", same_keys ? "equal" : "differ");
    }
    free(toks);
    free(keys);
}

/* A prompt of about n words (several lengths land on and around block boundaries). */
static void words(char *out, size_t cap, int n)
{
    static const char *const w[] = {"the", "quick", "brown", "fox", "jumps", "over",
                                    "a",   "lazy",  "dog",   "and", "runs"};
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < n && len + 16 < cap; i++) {
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? " " : "", w[i % 11]);
    }
}

static void check_model(const char *env)
{
    struct fx f;
    fx_start(&f, env);
    struct epp_keys *k = fx_keys(&f);
    assert_int_equal(epp_keys_block_size(k), BLOCK_SIZE);
    assert_true(epp_keys_hash_seed(k) == SEED);
    assert_string_equal(epp_keys_model(k), "keys-model");
    assert_int_equal(epp_keys_max_model_len(k), 512);
    assert_true(epp_keys_prefix_caching(k));
    char text[2048], body[4096];
    for (int n = 1; n <= 40; n += 3) {
        words(text, sizeof text, n);
        snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":1}", text);
        check_request(&f, k, "/v1/completions", body);
        snprintf(body, sizeof body,
                 "{\"prompt\":\"%s\",\"max_tokens\":1,\"cache_salt\":\"tenant-%d\"}", text, n);
        check_request(&f, k, "/v1/completions", body);
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                 "{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":1}",
                 text);
        check_request(&f, k, "/v1/chat/completions", body);
    }
    check_request(&f, k, "/v1/completions",
                  "{\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12,13],\"max_tokens\":1}");
    check_request(&f, k, "/v1/completions",
                  "{\"prompt\":\"no bos\",\"add_special_tokens\":false,\"max_tokens\":1}");
    check_request(&f, k, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi there, how are you\"},"
                  "{\"role\":\"assistant\",\"content\":\"fine and you\"}],"
                  "\"continue_final_message\":true,\"add_generation_prompt\":false,"
                  "\"cache_salt\":\"s\",\"max_tokens\":1}");
    check_request(&f, k, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                  "\"part one\"},{\"type\":\"text\",\"text\":\"part two\"}]}],"
                  "\"chat_template_kwargs\":{\"enable_thinking\":false},\"max_tokens\":1}");
    check_request(&f, k, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"own template here\"}],"
                  "\"chat_template\":\"{{ bos_token }}{% for m in messages %}[{{ m.role }}]"
                  "{{ m.content }}{% endfor %}\",\"max_tokens\":1}");
    epp_keys_free(k);
    fx_stop(&f);
}

static void test_gguf_model_matches_engine(void **state)
{
    (void)state;
    check_model("TANDEM_TEST_GGUF");
}

static void test_hf_model_matches_engine(void **state)
{
    (void)state;
    check_model("TANDEM_TEST_HF");
}

/* The route: an ETag that is stable, 304 on If-None-Match, and the same tokenizer hash from
 * the GGUF and the HF twin only when their tokenizers are byte-equal (they are not: formats). */
static void test_route_etag(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "TANDEM_TEST_GGUF");
    fx_request(&f, "GET", "/tokenizer_info", NULL, NULL);
    assert_int_equal(f.resp.status, 200);
    char etag[80], etag2[80], hdr[128];
    assert_non_null(http_response_header(&f.resp, "etag", etag, sizeof etag));
    assert_int_equal(strlen(etag), 66);
    struct json_object *o = json_tokener_parse(f.resp.body.data);
    assert_non_null(o);
    struct json_object *v;
    assert_true(json_object_object_get_ex(o, "tokenizer_format", &v));
    assert_string_equal(json_object_get_string(v), "gguf");
    assert_true(json_object_object_get_ex(o, "hash_seed", &v));
    assert_string_equal(json_object_get_string(v), "18364758544493064720");
    assert_true(json_object_object_get_ex(o, "chat_template", &v));
    /* the model's own template (the generated models carry one; none → the built-in chatml) */
    assert_string_equal(json_object_get_string(v),
                        f.m->chat_template ? f.m->chat_template : chat_template_builtin("chatml"));
    json_object_put(o);
    snprintf(hdr, sizeof hdr, "If-None-Match: %s", etag);
    const char *const h[] = {hdr, NULL};
    fx_request(&f, "GET", "/tokenizer_info", NULL, h);
    assert_int_equal(f.resp.status, 304);
    fx_request(&f, "GET", "/tokenizer_info", NULL, NULL);
    assert_non_null(http_response_header(&f.resp, "etag", etag2, sizeof etag2));
    assert_string_equal(etag, etag2);
    fx_stop(&f);
}

/* LoRA: the engine's server takes no adapters yet, so the chain is checked against the kvc
 * itself: a sequence with the same lora name and salt stores the hashes the keys compute. */
static void test_lora_matches_kvc(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "TANDEM_TEST_GGUF");
    struct epp_keys *k = fx_keys(&f);
    const char *body = "{\"prompt\":[5,6,7,8,9,10,11,12,13,14],\"cache_salt\":\"x\"}";
    int32_t *toks = NULL;
    uint64_t *keys = NULL, *plain = NULL;
    size_t nt = 0, nk = 0, np = 0;
    char err[256] = "";
    assert_int_equal(epp_keys_for_request(k, "/v1/completions", body, strlen(body), "adapter-a",
                                          &toks, &nt, &keys, &nk, err, sizeof err),
                     0);
    assert_int_equal(nk, 2);
    free(toks);
    assert_int_equal(epp_keys_for_request(k, "/v1/completions", body, strlen(body), "", &toks, &nt,
                                          &plain, &np, err, sizeof err),
                     0);
    assert_true(plain[0] != keys[0] && plain[1] != keys[1]);
    struct captured *cap = calloc(1, sizeof *cap);
    assert_non_null(cap);
    kvc_event_sink sink = {.user = cap, .stored = on_stored};
    kvc *c = kvc_new(8, BLOCK_SIZE, true, SEED, &sink);
    kvc_seq s;
    assert_int_equal(kvc_seq_init(&s, c, 16, "x", "adapter-a"), 0);
    assert_int_equal(kvc_allocate(c, &s, (int32_t)nt, NULL), 0);
    kvc_cache_blocks(c, &s, toks, (int32_t)nt);
    assert_int_equal(cap->n, 2);
    assert_true(cap->hashes[0] == keys[0] && cap->hashes[1] == keys[1]);
    kvc_seq_deinit(c, &s);
    kvc_free(c);
    free(cap);
    free(toks);
    free(keys);
    free(plain);
    epp_keys_free(k);
    fx_stop(&f);
}

/* ---- malformed answers ---- */

static char *g_answer; /* a good answer (GGUF model), for the malformed variants */

static void expect_error(const char *answer, size_t len, const char *needle)
{
    char err[512] = "";
    struct epp_keys *k = epp_keys_new(answer, len, err, sizeof err);
    if (k || !strstr(err, needle)) {
        epp_keys_free(k);
        fail_msg("expected an error with '%s', got %s", needle, k ? "success" : err);
    }
}

/* The good answer with one field replaced (json text) or removed (NULL). */
static void expect_field_error(const char *name, const char *json, const char *needle)
{
    struct json_object *o = json_tokener_parse(g_answer);
    assert_non_null(o);
    if (json) {
        json_object_object_add(o, name, json_tokener_parse(json));
    } else {
        json_object_object_del(o, name);
    }
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    expect_error(s, strlen(s), needle);
    json_object_put(o);
}

static void sha_hex(const char *data, size_t len, char out[65])
{
    unsigned char md[32];
    EVP_Digest(data, len, md, NULL, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) {
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    }
}

/* The good answer with another tokenizer whose tokenizer_sha256 matches it. */
static void expect_replaced(const char *format, const char *tokenizer_text, const char *needle)
{
    struct json_object *o = json_tokener_parse(g_answer);
    assert_non_null(o);
    char hex[65];
    if (strcmp(format, "gguf") == 0) {
        unsigned char raw[64];
        int n = EVP_DecodeBlock(raw, (const unsigned char *)tokenizer_text,
                                (int)strlen(tokenizer_text));
        assert_true(n > 0);
        sha_hex((const char *)raw, (size_t)n, hex);
    } else {
        sha_hex(tokenizer_text, strlen(tokenizer_text), hex);
    }
    json_object_object_add(o, "tokenizer_format", json_object_new_string(format));
    json_object_object_add(o, "tokenizer", json_object_new_string(tokenizer_text));
    json_object_object_add(o, "tokenizer_config", NULL);
    json_object_object_add(o, "tokenizer_sha256", json_object_new_string(hex));
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    expect_error(s, strlen(s), needle);
    json_object_put(o);
}

static void test_malformed_answers(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "TANDEM_TEST_GGUF");
    fx_request(&f, "GET", "/tokenizer_info", NULL, NULL);
    g_answer = strdup(f.resp.body.data);
    fx_stop(&f);
    size_t len = strlen(g_answer);
    expect_error(g_answer, len / 2, "not one JSON object");
    expect_error(g_answer, 0, "not one JSON object");
    expect_error("[1]", 3, "not one JSON object");
    expect_field_error("scheme_version", "2", "scheme 'tandem-kvc-sha256' version 2");
    expect_field_error("scheme", "\"vllm-sha256-cbor\"", "is not the one this EPP computes");
    expect_field_error("scheme", NULL, "'scheme' is missing");
    expect_field_error("block_size", "0", "'block_size' must be in [1, 4096]");
    expect_field_error("block_size", "\"16\"", "'block_size' must be an integer");
    expect_field_error("hash_seed", "\"-1\"", "'hash_seed' must be a decimal uint64");
    expect_field_error("hash_seed", "\"18446744073709551616\"", "'hash_seed' must be");
    expect_field_error("tokenizer_format", "\"sentencepiece\"", "'tokenizer_format' must be");
    expect_field_error("chat_template", "\"{% if %}\"", "'chat_template'");
    expect_field_error("tokenizer_sha256", "\"00\"", "64 hex digits");
    /* altered bytes: the hash no longer matches */
    expect_field_error("tokenizer", "\"R0dVRgMAAAA=\"", "do not match 'tokenizer_sha256'");
    expect_field_error("tokenizer", "\"not base64!\"", "not base64");
    /* bytes that match their hash but that the engine's loaders refuse */
    expect_replaced("gguf", "R0dVRgMAAAAAAAAAAAAAAAAAAAAAAAAA", "'tokenizer' (gguf)");
    expect_replaced("hf", "{\"model\":{\"type\":\"WordPiece\"}}", "'tokenizer'");
    free(g_answer);
}

static void test_bad_requests(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "TANDEM_TEST_GGUF");
    struct epp_keys *k = fx_keys(&f);
    int32_t *toks;
    uint64_t *keys;
    size_t nt, nk;
    char err[512] = "";
    const char *b = "{\"prompt\":\"x\"}";
    assert_int_equal(epp_keys_for_request(k, "/v1/embeddings", b, strlen(b), NULL, &toks, &nt,
                                          &keys, &nk, err, sizeof err),
                     -EINVAL);
    assert_non_null(strstr(err, "/v1/embeddings"));
    b = "{\"prompt\":\"x\",\"temperature\":-1}";
    assert_int_equal(epp_keys_for_request(k, "/v1/completions", b, strlen(b), NULL, &toks, &nt,
                                          &keys, &nk, err, sizeof err),
                     -EINVAL);
    assert_non_null(strstr(err, "temperature"));
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template\":\"{% if %}\"}";
    assert_int_equal(epp_keys_for_request(k, "/v1/chat/completions", b, strlen(b), NULL, &toks, &nt,
                                          &keys, &nk, err, sizeof err),
                     -EINVAL);
    assert_non_null(strstr(err, "messages"));
    assert_null(toks);
    epp_keys_free(k);
    fx_stop(&f);
}

struct fetch_job {
    char url[96];
    struct epp_keys *k;
    char err[512];
    int done;
};

static void *fetch_thread(void *arg)
{
    struct fetch_job *j = arg;
    j->k = epp_keys_fetch(j->url, 30000, j->err, sizeof j->err);
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_fetch(void **state)
{
    (void)state;
    struct fx f;
    fx_start(&f, "TANDEM_TEST_HF");
    struct fetch_job j = {.k = NULL};
    snprintf(j.url, sizeof j.url, "%s/", f.base);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fetch_thread, &j), 0);
    for (int i = 0; i < 6000 && !__atomic_load_n(&j.done, __ATOMIC_ACQUIRE); i++) {
        uv_run(&f.loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    pthread_join(t, NULL);
    if (!j.k) {
        fail_msg("epp_keys_fetch: %s", j.err);
    }
    assert_int_equal(epp_keys_block_size(j.k), BLOCK_SIZE);
    assert_int_equal(strlen(epp_keys_tokenizer_sha256(j.k)), 64);
    epp_keys_free(j.k);
    int port = http_server_port(f.srv);
    fx_stop(&f);
    char url[64], err[512] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    assert_null(epp_keys_fetch(url, 2000, err, sizeof err));
    assert_non_null(strstr(err, "/tokenizer_info"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_etag),
        cmocka_unit_test(test_gguf_model_matches_engine),
        cmocka_unit_test(test_hf_model_matches_engine),
        cmocka_unit_test(test_lora_matches_kvc),
        cmocka_unit_test(test_malformed_answers),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_fetch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
