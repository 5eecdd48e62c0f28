/*
 * Fuzz target for engine/server/scoring.h: the same bytes go through the /score, /rerank and
 * /pooling parsers. Each must succeed with a consistent request (queries and documents paired
 * 1:1, 1:N or N:N, one text prompt each, queries first) or fail with a 400/500 that has a
 * message. An accepted request then goes through scoring_prepare over a small SentencePiece
 * vocabulary (max_tokens_per_query / max_tokens_per_doc cuts) and its answer is built from
 * synthetic vectors: it must be valid JSON. Any crash, leak or failed check aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/scoring.h"
#include "engine/server/tests/tiny_vocab.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_scoring_request: check failed: %s (line %d)\n", #cond,           \
                    __LINE__);                                                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define FUZZ_DIMS    3
#define FUZZ_MAX_LEN 64 /* max_model_len scoring_prepare checks against */

/* the tiny vocabulary (tests/tiny_vocab.h), no space prefix */
static tokenizer *g_tok;

static void check_valid_json(const struct buf *b)
{
    char err[256];
    struct json_object *o = json_parse(buf_cstr(b), b->len, err, sizeof(err));
    if (!o) {
        fprintf(stderr, "invalid JSON built (%s): %s\n", err, buf_cstr(b));
        abort();
    }
    json_object_put(o);
}

static void check_error(int rc, const struct openai_error *err)
{
    CHECK(rc == -EINVAL || rc == -ENOMEM);
    CHECK(err->status == 400 || err->status == 500);
    CHECK(err->message[0] != '\0');
    struct buf b;
    buf_init(&b, 1 << 16);
    CHECK(openai_error_body(err, &b) == 0);
    check_valid_json(&b);
    buf_free(&b);
}

static tokenizer *vocab(void)
{
    if (!g_tok) {
        model_gguf_vocab v = tiny_vocab(0);
        char err[256];
        CHECK(tokenizer_load_gguf(&v, &g_tok, err, sizeof(err)) == 0);
    }
    return g_tok;
}

/* The request's invariants, then its prepared prompts and its answer. */
static void check_request(enum scoring_kind kind, struct openai_request *r,
                          struct scoring_request *sc)
{
    CHECK(sc->kind == kind && r->kind == OPENAI_EMBEDDING && r->n_prompts > 0);
    CHECK(r->max_tokens == 1 && r->max_tokens_set && r->n == 1);
    if (kind != SCORING_POOLING) {
        CHECK(sc->n_queries > 0 && sc->n_docs > 0);
        CHECK(sc->n_queries == 1 || sc->n_queries == sc->n_docs);
        CHECK(sc->n_queries <= SCORING_MAX_TEXTS && sc->n_docs <= SCORING_MAX_TEXTS);
        CHECK(r->n_prompts == sc->n_queries + sc->n_docs);
        CHECK(kind == SCORING_SCORE || sc->n_queries == 1);
        for (size_t i = 0; i < r->n_prompts; i++) {
            CHECK(r->prompts[i].text && !r->prompts[i].tokens);
            CHECK(r->prompts[i].text == sc->texts[i]);
        }
    }
    struct openai_error err;
    int rc = scoring_prepare(sc, r, vocab(), FUZZ_MAX_LEN, &err);
    if (rc != 0) {
        check_error(rc, &err);
        return;
    }
    float *store = calloc(r->n_prompts * FUZZ_DIMS, sizeof(*store));
    const float **vecs = calloc(r->n_prompts, sizeof(*vecs));
    int32_t *toks = calloc(r->n_prompts, sizeof(*toks));
    CHECK(store && vecs && toks);
    for (size_t i = 0; i < r->n_prompts; i++) {
        const size_t len = r->prompts[i].tokens ? r->prompts[i].n_tokens : r->prompts[i].text_len;
        for (size_t d = 0; d < FUZZ_DIMS; d++) {
            store[i * FUZZ_DIMS + d] = (float)((len + d * 7) % 5) - 2.0f;
        }
        vecs[i] = store + i * FUZZ_DIMS;
        toks[i] = (int32_t)(len % 100);
        if (sc->owned && sc->owned[i]) { /* a cut text: the prompt is the owned copy */
            CHECK(r->prompts[i].text == sc->owned[i]);
        }
    }
    const struct scoring_output o = {.id = "score-x",
                                     .model = "m",
                                     .created = 1,
                                     .vecs = vecs,
                                     .n_tokens = toks,
                                     .n = r->n_prompts,
                                     .dims = FUZZ_DIMS,
                                     .pad_token = (int)(r->n_prompts % 2),
                                     .fmt = &r->embed_fmt};
    struct buf b;
    buf_init(&b, 1 << 24);
    CHECK(scoring_build(sc, &o, &b) == 0);
    check_valid_json(&b);
    buf_free(&b);
    free(store);
    free(vecs);
    free(toks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum scoring_kind kinds[] = {SCORING_SCORE, SCORING_RERANK, SCORING_POOLING};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct openai_request r;
        struct scoring_request sc;
        struct openai_error err;
        memset(&err, 0, sizeof(err));
        int rc = scoring_parse(kinds[k], (const char *)data, size, "llama", &r, &sc, &err);
        if (rc == 0) {
            check_request(kinds[k], &r, &sc);
            openai_request_deinit(&r);
            scoring_request_deinit(&sc);
        } else {
            check_error(rc, &err);
        }
    }
    return 0;
}
