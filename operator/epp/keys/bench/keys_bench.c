/*
 * tandem-epp-keys-bench: time to tokenize and hash a ~2k-token chat request with
 * epp_keys_for_request (what the EPP spends per request for precise prefix routing).
 *
 *   tandem-epp-keys-bench MODEL [--iters N] [--block-size B]
 *
 * MODEL is a GGUF file or HF directory (e.g. from tandem-genmodel); the /tokenizer_info answer
 * is built by the engine's server code exactly as a pod would serve it. Prints p50/p99/mean.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/engine.h"
#include "engine/server/server.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/http_server.h"
#include "operator/epp/keys/keys.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A chat body of about target tokens: a system prompt and turns of English text. */
static int chat_body(struct buf *b, int approx_words)
{
    static const char *const w[] = {"the",   "router", "keeps", "every", "prefix", "where",
                                    "cache", "blocks", "were",  "last",  "seen",   "today"};
    buf_appends(b,
                "{\"model\":\"bench\",\"messages\":[{\"role\":\"system\",\"content\":\"You are a "
                "helpful assistant.\"}");
    for (int turn = 0; turn < 8; turn++) {
        buf_appendf(b, ",{\"role\":\"%s\",\"content\":\"", turn % 2 ? "assistant" : "user");
        for (int i = 0; i < approx_words / 8; i++) {
            buf_appendf(b, "%s%s", i ? " " : "", w[(i * 7 + turn) % 12]);
        }
        buf_appends(b, "\"}");
    }
    buf_appends(b, "],\"cache_salt\":\"bench\"}");
    return buf_error(b);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [--iters N] [--block-size B]\n", argv[0]);
        return 2;
    }
    int iters = 2000, bs = 16;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--iters") == 0) {
            iters = (int)strtol(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--block-size") == 0) {
            bs = (int)strtol(argv[i + 1], NULL, 10);
        }
    }
    if (iters < 1) {
        iters = 1;
    }
    char err[512] = "";
    model *m = model_load(argv[1], err, sizeof err);
    tokenizer *tok = NULL;
    if (!m || tokenizer_from_model(m, &tok, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    engine_config cfg = {
        .max_model_len = 4096, .max_num_seqs = 1, .block_size = bs, .n_threads = 1};
    engine *e = engine_new(m, tok, &cfg, err, sizeof err);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct http_server_config hc;
    http_server_config_init(&hc);
    hc.host = "127.0.0.1";
    struct http_server *srv = e ? http_server_new(&loop, &hc, err, sizeof err) : NULL;
    struct engine_server_config sc = {.served_model_name = "bench"};
    struct engine_server *es = srv ? engine_server_new(&loop, srv, e, &sc, err, sizeof err) : NULL;
    const char *answer = NULL, *etag = NULL;
    size_t alen = 0;
    if (!es || engine_server_tokenizer_info(es, &answer, &alen, &etag, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double t0 = tandem_now_s();
    struct epp_keys *k = epp_keys_new(answer, alen, err, sizeof err);
    double t_build = tandem_now_s() - t0;
    struct buf body;
    buf_init(&body, (size_t)1 << 24);
    if (!k || chat_body(&body, 1950) != 0) {
        fprintf(stderr, "%s\n", k ? "cannot build the body" : err);
        return 1;
    }
    double *t = calloc((size_t)iters, sizeof *t);
    if (!t) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    size_t n_tokens = 0, n_keys = 0;
    for (int i = 0; i < iters; i++) {
        int32_t *toks;
        uint64_t *keys;
        double s = tandem_now_s();
        if (epp_keys_for_request(k, "/v1/chat/completions", body.data, body.len, NULL, &toks,
                                 &n_tokens, &keys, &n_keys, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            free(t);
            return 1;
        }
        t[i] = tandem_now_s() - s;
        free(toks);
        free(keys);
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    double sum = 0;
    for (int i = 0; i < iters; i++) {
        sum += t[i];
    }
    printf("answer %zu bytes, epp_keys_new %.2f ms\n", alen, t_build * 1e3);
    printf("chat request: %zu bytes, %zu tokens, %zu block keys (block size %d), %d iterations\n",
           body.len, n_tokens, n_keys, bs, iters);
    printf("tokenize+hash: p50 %.1f us  p99 %.1f us  mean %.1f us\n", t[iters / 2] * 1e6,
           t[(size_t)((double)iters * 0.99)] * 1e6, sum / iters * 1e6);
    free(t);
    buf_free(&body);
    epp_keys_free(k);
    engine_server_free(es);
    uv_run(&loop, UV_RUN_DEFAULT);
    http_server_free(srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    engine_free(e);
    tokenizer_free(tok);
    model_free(m);
    return 0;
}
