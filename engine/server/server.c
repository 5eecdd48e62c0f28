/*
 * HTTP glue between lib/http_server and the engine (see server.h). A `gen` is one generation
 * request (completion or chat) with n choices, each an engine request; engine outputs are
 * copied into `out_event`s by the engine thread and drained on the loop thread, where they are
 * turned into SSE chunks or accumulated into the final body.
 */
#include "engine/server/server.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "engine/server/api_key.h"
#include "engine/server/lora_api.h"
#include "engine/server/tool_parser.h"
#include "engine/server/openai.h"
#include "engine/server/prompt.h"
#include "engine/server/responses.h"
#include "engine/server/scoring.h"
#include "engine/server/tokenizer_info.h"
#include "engine/template/chat_template.h"
#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/list.h"
#include "lib/log.h"
#include "lib/json.h"
#include "lib/trace.h"

#define SERVER_MAX_TEXT     ((size_t)64 << 20) /* bytes of generated text per choice */
#define SERVER_MAX_BODY_OUT ((size_t)256 << 20)
#define SERVER_VERSION      "tandem-engine 0.1.0"

struct gen;

struct lp_entry {
    int32_t token;
    float logprob;
    int n_top;
    struct sample_top top[SAMPLER_MAX_LOGPROBS];
};

/* A prompt's logprobs (engine_output.prompt_logprobs of its first output), one allocation:
 * pos[i] for prompt position i + 1, its top entries tops[pos[i].top ..) (n_top of them). */
struct plp_pos {
    int32_t token;
    float logprob;
    int32_t rank;
    int32_t n_top;
    size_t top;
};

struct plp_store {
    size_t n;
    struct plp_pos *pos;
    struct sample_top *tops;
};

/* One engine output on its way to the loop thread: a single allocation holding its text. */
struct out_event {
    struct list_node node; /* in engine_server.queue */
    struct choice *c;
    int lost;  /* the choice's own event: outputs were lost (out of memory); fail the request */
    int error; /* engine_output.error */
    int32_t token;
    const char *text; /* the event's own bytes */
    size_t text_len;
    int finished;
    sched_status status;
    int stop_index;
    int32_t stop_token;
    int32_t n_prompt, n_generated, n_cached;
    int has_lp;
    struct lp_entry lp;
    struct plp_store *plp; /* owned: the prompt logprobs the first output carries, or NULL */
    int kv_loaded;
    double kv_load_s;
    /* a finished PRODUCE request's held blocks (stored after the text) */
    const int32_t *kv_blocks;
    int32_t n_kv_blocks;
    const char *kv_request_id;
};

struct choice {
    struct gen *g;
    int index;
    int64_t id; /* engine request id, 0 when not submitted */
    int done;
    struct buf text;     /* accumulated text (non-streaming) */
    size_t text_emitted; /* streamed: characters of text sent so far (logprob text offsets) */
    enum openai_finish finish;
    int stop_index;
    int32_t stop_token;
    int32_t n_generated;
    struct lp_entry *lps; /* accumulated logprobs (non-streaming) */
    size_t n_lps, cap_lps;
    /* Guarded by engine_server.mu: once an output of this choice could not be queued, this
     * preallocated event carries that (and the finish, when it comes) instead, so a lost output
     * fails the request instead of leaving a hole in its text or a request that never ends. */
    int lost;
    struct out_event lost_ev;
    struct json_object *kv_params; /* the producer's kv_transfer_params for the answer */
    int32_t n_prompt;              /* its prompt's tokens and how many came from the cache */
    int32_t n_cached;
    const char *echo; /* completions echo: its prompt's text (the gen's), echo_len bytes */
    size_t echo_len;
    struct tool_stream *ts; /* streamed chat, tool_choice auto: the parser's state */
    float *embedding;       /* embeddings: the pooled vector (engine thread, before the final
                               event is queued), n_embedding floats */
    int32_t n_embedding;
    int tool_started; /* streamed named tool call: its id and name were sent */
    /* return_token_ids: the generated ids (non-streaming), and whether a streamed completion
     * choice sent its prompt's ids (vLLM: in its first chunk only) */
    int32_t *ids;
    size_t n_ids, cap_ids;
    int prompt_ids_sent;
    /* prompt_logprobs: taken from the first token's event (plp_ready then; plp stays NULL for a
     * one-token prompt, which has no position to report) */
    struct plp_store *plp;
    int plp_ready;
    int echoed; /* streamed completions echo: the prompt went out (with the first output) */
    /* stream_interval > 1 (stream_hold): whether an output went out, and the outputs held since
     * the last chunk: their text, their tokens' logprobs and ids, and how many tokens */
    int sent_any;
    struct buf held_text;
    struct lp_entry *held_lps;
    int32_t *held_ids;
    size_t n_held_lps, cap_held_lps, n_held_ids, cap_held_ids, n_held_tokens;
};

struct gen {
    struct engine_server *s;
    struct http_request *req; /* NULL once the client is gone or the answer was sent */
    struct openai_request o;
    enum openai_kind kind;
    char id[80];
    int64_t created;
    int n;                /* choices: n_prompts × n_per, choice p * n_per + j is prompt p's j-th */
    int n_per;            /* the request's n */
    int n_prompts;        /* completions: prompts in the request; chat: 1 */
    char **echo;          /* [n_prompts] completions echo: each prompt's text, or NULL */
    size_t *echo_len;     /* [n_prompts] their lengths */
    int32_t **prompt_ids; /* [n_prompts] return_token_ids or echo: each prompt's ids as run, or
                             NULL */
    size_t *n_prompt_ids; /* [n_prompts] their counts */
    struct choice *choices;
    int pending;      /* submitted choices not finished */
    double kv_load_s; /* P/D: the longest KV load of its choices (x-kv-transfer-time-ms) */
    int failed;       /* a stream write failed: abort and stop writing */
    int errored;      /* ended with an error (gen_fail) */
    double t_start;
    struct list_node node; /* in engine_server.gens */
    /* tracing (NULL spans: off or not sampled) */
    struct span *span;    /* llm_request (SERVER), ends in gen_free */
    struct span *prefill; /* a P/D producer's prefill (INTERNAL): submit to the first output */
    int first_seen;       /* the first token arrived (first_token event) */
    int kv_traced;        /* the kv_transfer span was recorded */
    int32_t kv_blocks;    /* a P/D consumer's remote blocks */
    char xrid[72];        /* the x-request-id the request came with ("" when none) */
    char *prompt_text;    /* chat with return_prompt_text: the rendered prompt, or NULL */
    size_t prompt_text_len;
    const char *lora; /* the LoRA adapter the request names as its model (g->o.model), or
                         NULL: the base model */
    /* /v1/responses: its fields and stream state (owned), or NULL for other requests */
    struct responses_request *rs;
    /* /score, /rerank, /pooling: how the pooled vectors become the answer (kind SCORING_NONE
     * for other requests) */
    struct scoring_request sc;
};

struct engine_server {
    uv_loop_t *loop;
    struct http_server *srv;
    engine *e;
    const tokenizer *tok;
    char *served_name;
    char *model_root;
    struct api_keys *keys;    /* --api-key: /v1 requests need one (api_key.h) */
    struct tool_parser tools; /* --tool-call-parser (kind TOOL_PARSER_NONE: none) */
    engine_pool pool;         /* /v1/embeddings: --pooler-config pooling_type (LAST) */
    bool pool_normalize;      /* and its normalize (true) */
    int auto_tools;           /* --enable-auto-tool-choice with a parser */
    struct chat_template *ct; /* the compiled template (override, model's, or chatml) */
    struct prompt_ctx pc;     /* what prompts are built with (prompt.h) */
    char *template_src;       /* the template text in use, for /tokenizer_info */
    uint64_t hash_seed;
    int prefix_caching_off;
    struct buf info;    /* the /tokenizer_info body, built on first use */
    char info_etag[72]; /* its ETag, "" until built */
    int log_requests;
    int64_t created;
    struct openai_defaults defaults; /* generation config (all has_* 0: vLLM's defaults) */

    uv_async_t async;
    int async_open;
    pthread_mutex_t mu;
    struct list_node queue; /* out_event.node: outputs for the loop, in engine order */

    struct list_node gens; /* live generations (gen.node), newest first */
    int n_gens;
    struct tracer *tracer;
    size_t kv_block_bytes; /* bytes of one KV block, all layers, K and V (kv_transfer spans) */
};

/* ---- the engine → loop queue ---- */

static void event_fill(struct out_event *ev, const engine_output *o)
{
    ev->error = o->error;
    ev->token = o->token;
    ev->finished = o->finished;
    ev->status = o->status;
    ev->stop_index = o->stop_index;
    ev->stop_token = o->stop_token;
    ev->n_prompt = o->n_prompt;
    ev->n_generated = o->n_generated;
    ev->n_cached = o->n_cached;
    ev->kv_loaded = o->kv_loaded;
    ev->kv_load_s = o->kv_load_seconds;
    ev->has_lp = 0;
    if (o->sample && o->token >= 0) {
        ev->has_lp = 1;
        ev->lp.token = o->token;
        ev->lp.logprob = o->sample->logprob;
        ev->lp.n_top = o->sample->n_top;
        memcpy(ev->lp.top, o->sample->top, (size_t)o->sample->n_top * sizeof ev->lp.top[0]);
    }
}

/* Copies the n prompt positions of engine_output.prompt_logprobs (borrowed during the callback).
 * NULL when out of memory. */
static struct plp_store *plp_copy(const struct sample_result *r, int32_t n)
{
    size_t n_tops = 0;
    for (int32_t i = 0; i < n; i++) {
        n_tops += (size_t)r[i].n_top;
    }
    struct plp_store *p =
        malloc(sizeof *p + (size_t)n * sizeof(struct plp_pos) + n_tops * sizeof(struct sample_top));
    if (!p) {
        return NULL;
    }
    p->n = (size_t)n;
    p->pos = (struct plp_pos *)(void *)(p + 1);
    p->tops = (struct sample_top *)(void *)(p->pos + n);
    size_t t = 0;
    for (int32_t i = 0; i < n; i++) {
        p->pos[i] = (struct plp_pos){.token = r[i].token,
                                     .logprob = r[i].logprob,
                                     .rank = r[i].rank,
                                     .n_top = r[i].n_top,
                                     .top = t};
        memcpy(p->tops + t, r[i].top, (size_t)r[i].n_top * sizeof *p->tops);
        t += (size_t)r[i].n_top;
    }
    return p;
}

/* Engine thread: queues the output for the loop. Nothing is dropped: when the event cannot be
 * allocated, the choice's preallocated event takes over (see struct choice). */
static void on_engine_output(void *user, const engine_output *o)
{
    struct choice *c = user;
    struct engine_server *s = c->g->s;
    size_t kv_bytes = 0, id_len = 0;
    if (o->n_kv_blocks > 0 && o->kv_request_id) {
        id_len = strlen(o->kv_request_id);
        kv_bytes = (size_t)o->n_kv_blocks * sizeof(int32_t) + id_len + 1;
    }
    int lost_copy = 0;
    if (o->embedding && !c->embedding) {
        /* read by the loop thread after the final event, which the queue's lock orders */
        c->embedding = malloc((size_t)o->n_embedding * sizeof *c->embedding);
        if (c->embedding) {
            memcpy(c->embedding, o->embedding, (size_t)o->n_embedding * sizeof *c->embedding);
            c->n_embedding = o->n_embedding;
        } else {
            lost_copy = 1;
        }
    }
    struct plp_store *plp = NULL;
    if (o->prompt_logprobs && o->n_prompt_logprobs > 0) {
        plp = plp_copy(o->prompt_logprobs, o->n_prompt_logprobs);
        if (!plp) {
            lost_copy = 1;
        }
    }
    /* [event][kv block ids][text NUL][kv request id NUL] (the ids first: aligned) */
    struct out_event *ev = lost_copy ? NULL : malloc(sizeof *ev + kv_bytes + o->text_len + 1);
    if (ev) {
        memset(ev, 0, sizeof *ev);
        ev->c = c;
        char *p = (char *)(ev + 1);
        if (kv_bytes) {
            memcpy(p, o->kv_block_ids, (size_t)o->n_kv_blocks * sizeof(int32_t));
            ev->kv_blocks = (const int32_t *)(void *)p;
            ev->n_kv_blocks = o->n_kv_blocks;
            p += (size_t)o->n_kv_blocks * sizeof(int32_t);
        }
        memcpy(p, o->text, o->text_len);
        p[o->text_len] = '\0';
        ev->text = p;
        ev->text_len = o->text_len;
        if (kv_bytes) {
            char *id = p + o->text_len + 1;
            memcpy(id, o->kv_request_id, id_len + 1);
            ev->kv_request_id = id;
        }
        event_fill(ev, o);
        ev->plp = plp;
        plp = NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (ev && !c->lost) {
        list_push_back(&s->queue, &ev->node);
        ev = NULL;
    } else {
        struct out_event *l = &c->lost_ev;
        int finished = l->finished || o->finished;
        c->lost = 1;
        event_fill(l, o);
        l->finished = finished;
        l->lost = 1;
        if (!list_linked(&l->node)) {
            list_push_back(&s->queue, &l->node);
        }
    }
    int open = s->async_open;
    pthread_mutex_unlock(&s->mu);
    if (ev) { /* unused: the choice already lost an output */
        free(ev->plp);
        free(ev);
    }
    free(plp);
    if (open) {
        uv_async_send(&s->async);
    }
}

/* ---- generation lifetime ---- */

static const char *finish_name(enum openai_finish f)
{
    return f == OPENAI_FINISH_STOP         ? "stop"
           : f == OPENAI_FINISH_LENGTH     ? "length"
           : f == OPENAI_FINISH_ABORT      ? "abort"
           : f == OPENAI_FINISH_REPETITION ? "repetition"
                                           : "none";
}

/* Usage over the prompts: each prompt's tokens once (its first choice's), cached tokens the
 * most any of its choices got. */
static void gen_prompt_usage(const struct gen *g, int32_t *n_prompt, int32_t *n_cached)
{
    int64_t np = 0, nc = 0;
    for (int p = 0; p < g->n_prompts && g->n_per > 0; p++) {
        int32_t cached = 0;
        for (int j = 0; j < g->n_per; j++) {
            const struct choice *c = &g->choices[p * g->n_per + j];
            cached = c->n_cached > cached ? c->n_cached : cached;
        }
        np += g->choices[p * g->n_per].n_prompt;
        nc += cached;
    }
    *n_prompt = (int32_t)(np > INT32_MAX ? INT32_MAX : np);
    *n_cached = (int32_t)(nc > INT32_MAX ? INT32_MAX : nc);
}

/* The request's span gets its usage and ends (the generation is over). */
static void gen_trace_end(struct gen *g)
{
    if (!g->span) {
        return;
    }
    int64_t completion = 0;
    for (int i = 0; i < g->n; i++) {
        completion += g->choices[i].n_generated;
    }
    int32_t n_prompt, n_cached;
    gen_prompt_usage(g, &n_prompt, &n_cached);
    span_set_int(g->span, "gen_ai.usage.prompt_tokens", n_prompt);
    span_set_int(g->span, "gen_ai.usage.completion_tokens", completion);
    span_set_int(g->span, "tandem.usage.cached_tokens", n_cached);
    if (g->n > 0) {
        span_set_str(g->span, "gen_ai.response.finish_reasons", finish_name(g->choices[0].finish));
    }
    span_set_double(g->span, "gen_ai.latency.e2e", tandem_now_s() - g->t_start);
    span_set_status(g->prefill, SPAN_STATUS_ERROR, "ended before the first token");
    span_end(g->prefill);
    span_end(g->span);
    g->prefill = g->span = NULL;
}

/* A request that fails before it reaches the engine: its span ends with the error. */
static void gen_trace_fail(struct gen *g, int status, const char *why)
{
    span_set_int(g->span, "http.response.status_code", status);
    if (status >= 500) {
        span_set_status(g->span, SPAN_STATUS_ERROR, why);
    }
    span_end(g->prefill);
    span_end(g->span);
    g->prefill = g->span = NULL;
}

static void free_prompt_ids(int32_t **ids, int n)
{
    for (int p = 0; ids && p < n; p++) {
        free(ids[p]);
    }
    free(ids);
}

static void gen_free_echo(struct gen *g)
{
    for (int p = 0; g->echo && p < g->n_prompts; p++) {
        free(g->echo[p]);
    }
    free(g->echo);
    free(g->echo_len);
    g->echo = NULL;
    g->echo_len = NULL;
}

static void gen_free(struct gen *g)
{
    struct engine_server *s = g->s;
    gen_trace_end(g);
    list_unlink(&g->node);
    s->n_gens--;
    for (int i = 0; i < g->n; i++) {
        buf_free(&g->choices[i].text);
        free(g->choices[i].lps);
        json_object_put(g->choices[i].kv_params);
        tool_stream_free(g->choices[i].ts);
        free(g->choices[i].embedding);
        free(g->choices[i].ids);
        free(g->choices[i].plp);
        buf_free(&g->choices[i].held_text);
        free(g->choices[i].held_lps);
        free(g->choices[i].held_ids);
    }
    free(g->choices);
    gen_free_echo(g);
    free_prompt_ids(g->prompt_ids, g->n_prompts);
    free(g->n_prompt_ids);
    free(g->prompt_text);
    openai_request_deinit(&g->o);
    scoring_request_deinit(&g->sc);
    responses_request_free(g->rs);
    free(g);
}

static void gen_abort_all(struct gen *g)
{
    for (int i = 0; i < g->n; i++) {
        if (g->choices[i].id > 0 && !g->choices[i].done) {
            engine_abort(g->s->e, (uint64_t)g->choices[i].id);
        }
    }
}

static void respond_openai_error(struct http_request *req, const struct openai_error *err)
{
    if (err->status == 503) {
        http_add_header(req, "Retry-After", "1");
    }
    http_respond_error(req, err->status, err->type, err->message,
                       err->param[0] ? err->param : NULL);
}

/* Ends the request with an error the client sees (a 500 body, or an SSE error event and [DONE]
 * on a stream already answered 200) and a log line, and aborts its sequences. Their final
 * outputs still arrive and release the generation. The first failure wins. */
static void gen_fail(struct gen *g, const char *fmt, ...) TANDEM_PRINTF(2, 3);
static void gen_fail(struct gen *g, const char *fmt, ...)
{
    if (g->errored) {
        return;
    }
    g->errored = 1;
    struct openai_error err;
    memset(&err, 0, sizeof err);
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    tandem_set_errv(why, sizeof why, fmt, ap);
    va_end(ap);
    log_error("request %s: %s; ending it with an error", g->id, why);
    span_set_status(g->span, SPAN_STATUS_ERROR, why);
    gen_abort_all(g);
    if (!g->req) {
        return;
    }
    openai_error_set(&err, 500, NULL, "%s", why);
    if (!g->o.stream) {
        respond_openai_error(g->req, &err);
    } else {
        if (!g->failed) {
            struct buf body, frame;
            buf_init(&body, 4096);
            buf_init(&frame, 8192);
            /* /v1/responses: an "error" event (its streams have no [DONE]) */
            if (g->rs ? responses_stream_error(g->rs, why, &frame) == 0
                      : openai_error_body(&err, &body) == 0 &&
                            openai_sse_data(&frame, body.data, body.len) == 0 &&
                            openai_sse_done(&frame) == 0) {
                http_stream_send(g->req, frame.data, frame.len);
            }
            buf_free(&body);
            buf_free(&frame);
        }
        http_stream_end(g->req);
    }
    g->failed = 1;
    g->req = NULL;
}

static void on_client_abort(struct http_request *req, void *ud, const char *reason)
{
    struct gen *g = ud;
    (void)req;
    log_debug("request %s: %s; aborting its sequences", g->id, reason);
    span_set_status(g->span, SPAN_STATUS_ERROR, reason);
    g->req = NULL;
    gen_abort_all(g);
    if (g->pending == 0) {
        gen_free(g);
    }
}

static enum openai_finish finish_of(sched_status st)
{
    switch (st) {
    case SCHED_FINISHED_STOPPED:
        return OPENAI_FINISH_STOP;
    case SCHED_FINISHED_LENGTH:
        return OPENAI_FINISH_LENGTH;
    case SCHED_FINISHED_ABORTED:
        return OPENAI_FINISH_ABORT;
    case SCHED_FINISHED_REPETITION:
        return OPENAI_FINISH_REPETITION;
    default:
        return OPENAI_FINISH_NONE;
    }
}

/* A choice's logprobs in the builder's shape (lp_build, plp_build); pieces point into the
 * tokenizer (stable). Release with lp_view_free. */
struct lp_view {
    struct openai_token_logprob *lps; /* completions / chat logprobs entries */
    size_t n_lps;
    struct openai_top_logprob *tops;
    struct openai_prompt_logprobs plp; /* the prompt_logprobs field */
    struct openai_prompt_logprob *plp_pos;
    struct openai_top_logprob *plp_tops;
};

static void lp_view_free(struct lp_view *v)
{
    free(v->lps);
    free(v->tops);
    free(v->plp_pos);
    free(v->plp_tops);
    memset(v, 0, sizeof *v);
}

static void top_fill(const struct engine_server *s, struct openai_top_logprob *t,
                     const struct sample_top *src)
{
    t->token = src->token;
    t->text = tokenizer_piece(s->tok, src->token, &t->text_len);
    t->logprob = src->logprob;
}

/* How many of a prompt position's top entries an echo shows: vLLM cuts its dict (the token, then
 * the tops without it) to its first logprobs + 1 entries, so at most logprobs tops besides the
 * token. */
static size_t echo_tops(const struct plp_store *p, const struct plp_pos *e, int logprobs)
{
    size_t keep = 0;
    int others = 0;
    for (int32_t j = 0; j < e->n_top; j++) {
        if (p->tops[e->top + (size_t)j].token != e->token) {
            if (others == logprobs) {
                break;
            }
            others++;
        }
        keep = (size_t)j + 1;
    }
    return keep;
}

/* The completions / chat logprobs entries of a choice: with_prompt (an echo, once the prompt's
 * logprobs came) first the prompt's tokens (the first without logprobs, as vLLM), then the n_gen
 * generated ones. 0 or -ENOMEM. */
static int lp_build(const struct gen *g, const struct choice *c, bool with_prompt,
                    const struct lp_entry *gen, size_t n_gen, struct lp_view *v)
{
    const struct engine_server *s = g->s;
    const struct plp_store *p = c->plp;
    const int32_t *prompt = g->prompt_ids ? g->prompt_ids[c->index / g->n_per] : NULL;
    with_prompt = with_prompt && c->plp_ready && prompt;
    const size_t n_plp = with_prompt ? 1 + (p ? p->n : 0) : 0;
    size_t n_tops = 0;
    for (size_t i = 0; with_prompt && p && i < p->n; i++) {
        n_tops += echo_tops(p, &p->pos[i], g->o.logprobs);
    }
    for (size_t i = 0; i < n_gen; i++) {
        n_tops += (size_t)gen[i].n_top;
    }
    v->lps = calloc(n_plp + n_gen ? n_plp + n_gen : 1, sizeof *v->lps);
    v->tops = calloc(n_tops ? n_tops : 1, sizeof *v->tops);
    if (!v->lps || !v->tops) {
        return -ENOMEM;
    }
    size_t t = 0, k = 0;
    if (with_prompt) {
        struct openai_token_logprob *first = &v->lps[k++];
        first->token = prompt[0];
        first->text = tokenizer_piece(s->tok, prompt[0], &first->text_len);
        first->no_logprob = 1;
    }
    for (size_t i = 0; k < n_plp; i++, k++) {
        const struct plp_pos *e = &p->pos[i];
        struct openai_token_logprob *o = &v->lps[k];
        o->token = e->token;
        o->text = tokenizer_piece(s->tok, e->token, &o->text_len);
        o->logprob = e->logprob;
        o->top = v->tops + t;
        o->n_top = echo_tops(p, e, g->o.logprobs);
        for (size_t j = 0; j < o->n_top; j++, t++) {
            top_fill(s, &v->tops[t], &p->tops[e->top + j]);
        }
    }
    for (size_t i = 0; i < n_gen; i++, k++) {
        struct openai_token_logprob *o = &v->lps[k];
        o->token = gen[i].token;
        o->text = tokenizer_piece(s->tok, gen[i].token, &o->text_len);
        o->logprob = gen[i].logprob;
        o->top = v->tops + t;
        o->n_top = (size_t)gen[i].n_top;
        for (int j = 0; j < gen[i].n_top; j++, t++) {
            top_fill(s, &v->tops[t], &gen[i].top[j]);
        }
    }
    v->n_lps = k;
    return 0;
}

/* The prompt_logprobs field of a choice (c->plp: none before its first token's output, or for a
 * one-token prompt: [null]). 0 or -ENOMEM. */
static int plp_build(const struct engine_server *s, const struct choice *c, struct lp_view *v)
{
    const struct plp_store *p = c->plp;
    const size_t n = p ? p->n : 0;
    size_t n_tops = 0;
    for (size_t i = 0; i < n; i++) {
        n_tops += (size_t)p->pos[i].n_top;
    }
    v->plp_pos = calloc(n ? n : 1, sizeof *v->plp_pos);
    v->plp_tops = calloc(n_tops ? n_tops : 1, sizeof *v->plp_tops);
    if (!v->plp_pos || !v->plp_tops) {
        return -ENOMEM;
    }
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        const struct plp_pos *e = &p->pos[i];
        struct openai_prompt_logprob *o = &v->plp_pos[i];
        o->token = e->token;
        o->text = tokenizer_piece(s->tok, e->token, &o->text_len);
        o->logprob = e->logprob;
        o->rank = e->rank;
        o->top = v->plp_tops + t;
        o->n_top = (size_t)e->n_top;
        for (int32_t j = 0; j < e->n_top; j++, t++) {
            top_fill(s, &v->plp_tops[t], &p->tops[e->top + (size_t)j]);
        }
    }
    v->plp.pos = v->plp_pos;
    v->plp.n = n;
    return 0;
}

static void fill_meta(struct gen *g, struct openai_meta *meta)
{
    memset(meta, 0, sizeof *meta); /* fields not set here are absent (NULL) */
    meta->id = g->id;
    meta->model = g->lora ? g->lora : g->s->served_name;
    meta->created = g->created;
    meta->kv_transfer_params = g->n > 0 ? g->choices[0].kv_params : NULL;
    meta->tokens_as_ids = g->o.return_tokens_as_token_ids;
    meta->return_token_ids = g->o.return_token_ids;
    if (g->kind == OPENAI_CHAT && g->o.return_token_ids && g->prompt_ids) {
        meta->prompt_token_ids = g->prompt_ids[0];
        meta->n_prompt_token_ids = g->n_prompt_ids[0];
    }
    meta->prompt_text = g->prompt_text;
    meta->prompt_text_len = g->prompt_text_len;
}

static void fill_usage(struct gen *g, struct openai_usage *u)
{
    int32_t n_prompt, n_cached;
    gen_prompt_usage(g, &n_prompt, &n_cached);
    u->prompt_tokens = n_prompt;
    u->completion_tokens = 0;
    for (int i = 0; i < g->n; i++) {
        u->completion_tokens += g->choices[i].n_generated;
    }
    u->cached_tokens = n_cached;
}

static void send_chunk_json(struct gen *g, struct buf *json)
{
    if (!g->req || g->failed) {
        return;
    }
    struct buf frame;
    buf_init(&frame, SERVER_MAX_BODY_OUT);
    if (openai_sse_data(&frame, json->data ? json->data : "", json->len) != 0 ||
        http_stream_send(g->req, frame.data, frame.len) != 0) {
        log_warn("request %s: cannot stream to the client (slow or gone); aborting", g->id);
        g->failed = 1;
        gen_abort_all(g);
    }
    buf_free(&frame);
}

/* ---- tool calls (chat): the text turned into tool_calls as vLLM's serving code does ---- */

static int tool_mode(const struct gen *g)
{
    return g->kind == OPENAI_CHAT && g->o.tool_choice != OPENAI_TOOL_NONE;
}

/* A call of the named tool whose arguments are text[0..len) (vLLM: the output is the
 * arguments, content ""). */
static int named_call(const struct gen *g, const char *text, size_t len, struct tool_result *res)
{
    memset(res, 0, sizeof *res);
    res->calls = calloc(1, sizeof *res->calls);
    res->content = calloc(1, 1);
    if (!res->calls || !res->content) {
        tool_result_free(res);
        return -ENOMEM;
    }
    struct tool_call *tc = &res->calls[0];
    res->n_calls = 1;
    res->tools_called = 1;
    openai_make_id(tc->id, sizeof tc->id, "chatcmpl-tool-");
    tc->name = strdup(g->o.tool_name);
    tc->arguments = malloc(len + 1);
    if (!tc->name || !tc->arguments) {
        tool_result_free(res);
        return -ENOMEM;
    }
    tc->name_len = strlen(tc->name);
    memcpy(tc->arguments, text, len);
    tc->arguments[len] = '\0';
    tc->arguments_len = len;
    return 0;
}

/* Calls in a chunk's delta form: {"id", "type": "function", "index", "function": {"name",
 * "arguments"}} each (vLLM's DeltaToolCall field order). */
static int delta_calls_json(const struct tool_call *calls, size_t n, struct buf *out)
{
    buf_appends(out, "[");
    for (size_t i = 0; i < n; i++) {
        buf_appends(out, i ? ",{\"id\":" : "{\"id\":");
        openai_json_string(out, calls[i].id, strlen(calls[i].id));
        buf_appendf(out, ",\"type\":\"function\",\"index\":%zu,\"function\":{\"name\":", i);
        openai_json_string(out, calls[i].name, calls[i].name_len);
        buf_appends(out, ",\"arguments\":");
        openai_json_string(out, calls[i].arguments, calls[i].arguments_len);
        buf_appends(out, "}}");
    }
    buf_appends(out, "]");
    return buf_error(out);
}

/* A whole answer's choice: content and tool_calls from the text (res and json hold them). */
static int tools_full(struct gen *g, struct choice *c, struct openai_choice *oc,
                      struct tool_result *res, struct buf *json)
{
    const char *text = c->text.data ? c->text.data : "";
    char err[128];
    int rc;
    if (g->o.tool_choice == OPENAI_TOOL_AUTO) {
        rc = tool_parse_complete(&g->s->tools, text, c->text.len, res, err, sizeof err);
    } else if (g->o.tool_choice == OPENAI_TOOL_REQUIRED) {
        rc = tool_parse_required(&g->s->tools, text, c->text.len, res);
    } else {
        rc = named_call(g, text, c->text.len, res);
    }
    if (rc != 0) {
        return rc;
    }
    size_t n = res->n_calls > 1 && !g->o.parallel_tool_calls ? 1 : res->n_calls;
    if (res->tools_called) {
        rc = tool_calls_json(res->calls, n, json);
        if (rc != 0) {
            return rc;
        }
        oc->tool_calls_json = json->data;
        oc->tool_calls_json_len = json->len;
    }
    oc->text = res->content ? res->content : "";
    oc->text_len = res->content ? res->content_len : 0;
    oc->content_null = res->content == NULL;
    /* "tool_calls" for auto and required calls, "stop" for a named one (OpenAI's rule) */
    if ((g->o.tool_choice == OPENAI_TOOL_AUTO && res->tools_called) ||
        (g->o.tool_choice == OPENAI_TOOL_REQUIRED && n > 0 && c->finish == OPENAI_FINISH_STOP)) {
        oc->finish = OPENAI_FINISH_TOOL_CALLS;
    }
    return 0;
}

/* Drops the entries of calls after the first (parallel_tool_calls false). */
static void delta_first_call_only(struct tool_delta *d)
{
    size_t k = 0;
    for (size_t i = 0; i < d->n_calls; i++) {
        if (d->calls[i].index == 0) {
            if (k != i) {
                struct tool_delta_call t = d->calls[k];
                d->calls[k] = d->calls[i];
                d->calls[i] = t;
            }
            k++;
        }
    }
    /* release the dropped entries: tool_delta_reset/free only see the first n_calls */
    while (d->n_calls > k) {
        struct tool_delta_call *e = &d->calls[--d->n_calls];
        free(e->name);
        e->name = NULL;
        buf_free(&e->arguments);
    }
}

/* A streamed event's content and tool-call entries (into oc; td and json hold them). */
static int tools_stream(struct gen *g, struct choice *c, const struct out_event *ev,
                        struct openai_choice *oc, struct tool_delta *td, struct buf *json)
{
    int rc = 0;
    oc->text = NULL;
    oc->text_len = 0;
    if (g->o.tool_choice == OPENAI_TOOL_AUTO) {
        if (!c->ts) {
            rc = tool_stream_new(&g->s->tools, &c->ts);
        }
        if (rc == 0 && ev->text_len > 0) {
            rc = tool_stream_feed(c->ts, ev->text, ev->text_len, td);
        }
        if (rc == 0 && ev->finished) {
            rc = tool_stream_finish(c->ts, td);
        }
        if (rc != 0) {
            return rc;
        }
        if (!g->o.parallel_tool_calls) {
            delta_first_call_only(td);
        }
        oc->text = td->content.data;
        oc->text_len = td->content.len;
        if (td->n_calls > 0) {
            rc = tool_delta_json(td, json);
        }
        if (ev->finished && tool_stream_calls(c->ts) > 0) {
            oc->finish = OPENAI_FINISH_TOOL_CALLS;
        }
    } else if (g->o.tool_choice == OPENAI_TOOL_NAMED) {
        /* the output is the arguments: the first piece brings the id and the name */
        if (ev->text_len > 0 && !c->tool_started) {
            char id[TOOL_CALL_ID_MAX + 1];
            openai_make_id(id, sizeof id, "chatcmpl-tool-");
            buf_appends(json, "[{\"id\":");
            openai_json_string(json, id, strlen(id));
            buf_appends(json, ",\"type\":\"function\",\"index\":0,\"function\":{\"name\":");
            openai_json_string(json, g->o.tool_name, strlen(g->o.tool_name));
            buf_appends(json, ",\"arguments\":");
            openai_json_string(json, ev->text, ev->text_len);
            buf_appends(json, "}}]");
            c->tool_started = 1;
        } else if (ev->text_len > 0) {
            buf_appends(json, "[{\"index\":0,\"function\":{\"arguments\":");
            openai_json_string(json, ev->text, ev->text_len);
            buf_appends(json, "}}]");
        }
        rc = buf_error(json);
    } else {
        /* required: the array is only known whole; its calls go out with the last chunk */
        rc = ev->text_len > 0 ? buf_append(&c->text, ev->text, ev->text_len) : 0;
        if (rc == 0 && ev->finished) {
            struct tool_result res;
            memset(&res, 0, sizeof res);
            rc = tool_parse_required(&g->s->tools, c->text.data ? c->text.data : "", c->text.len,
                                     &res);
            if (rc == 0 && res.n_calls > 0) {
                size_t n = res.n_calls > 1 && !g->o.parallel_tool_calls ? 1 : res.n_calls;
                rc = delta_calls_json(res.calls, n, json);
                if (c->finish == OPENAI_FINISH_STOP) {
                    oc->finish = OPENAI_FINISH_TOOL_CALLS;
                }
            } else if (rc == 0) {
                /* not the grammar's array (cut off): the text as content */
                rc = buf_append(&td->content, c->text.data ? c->text.data : "", c->text.len);
                oc->text = td->content.data;
                oc->text_len = td->content.len;
            }
            tool_result_free(&res);
        }
    }
    if (rc == 0 && json->len > 0) {
        oc->tool_calls_json = json->data;
        oc->tool_calls_json_len = json->len;
    }
    return rc;
}

/* A streamed completion choice's text for the event: its first output brings the echo before its
 * text (vLLM sends the prompt with the first output), an echo without generation no more than
 * the echo. Points into joined when both are there. 0 or the buffer's error. */
static int stream_text(const struct gen *g, const struct choice *c, const struct out_event *ev,
                       bool echo_now, struct buf *joined, struct openai_choice *oc)
{
    const char *head = echo_now && c->echo ? c->echo : "";
    const size_t head_len = echo_now && c->echo ? c->echo_len : 0;
    const char *tail = g->o.echo_only ? "" : ev->text;
    const size_t tail_len = g->o.echo_only ? 0 : ev->text_len;
    oc->text = head_len ? head : tail;
    oc->text_len = head_len ? head_len : tail_len;
    if (head_len && tail_len) {
        buf_append(joined, head, head_len);
        buf_append(joined, tail, tail_len);
        oc->text = joined->data;
        oc->text_len = joined->len;
    }
    return buf_error(joined);
}

/* ---- /v1/responses (responses.h): the chat generation answered in the Responses form ---- */

/* What a Responses answer reports: the generation's settings (max_output_tokens is the
 * max_tokens the engine ran with, as vLLM's sampling_params.max_tokens), and usage when u. */
static void rs_result(struct gen *g, struct responses_result *res, struct openai_usage *u,
                      enum openai_finish finish)
{
    const struct engine_server *s = g->s;
    int64_t mt = g->o.max_tokens_set ? g->o.max_tokens
                                     : engine_max_model_len(s->e) - (int64_t)g->choices[0].n_prompt;
    if (s->defaults.has_max_tokens && mt > s->defaults.max_tokens) {
        mt = s->defaults.max_tokens;
    }
    memset(res, 0, sizeof *res);
    res->id = g->id;
    res->model = g->lora ? g->lora : s->served_name;
    res->created_at = g->created;
    res->finish = finish;
    res->temperature = g->o.sampling.temperature;
    res->top_p = g->o.sampling.top_p;
    res->max_output_tokens = mt;
    res->tool_mode = tool_mode(g);
    if (u) {
        fill_usage(g, u);
        res->usage = u;
    }
}

/* Sends frames (whole SSE events) as they are. */
static void rs_send(struct gen *g, const struct buf *frames)
{
    if (!g->req || g->failed || frames->len == 0) {
        return;
    }
    if (http_stream_send(g->req, frames->data, frames->len) != 0) {
        log_warn("request %s: cannot stream to the client (slow or gone); aborting", g->id);
        g->failed = 1;
        gen_abort_all(g);
    }
}

static void rs_stream_start(struct gen *g)
{
    struct responses_result res;
    struct buf frames;
    rs_result(g, &res, NULL, OPENAI_FINISH_NONE);
    buf_init(&frames, SERVER_MAX_BODY_OUT);
    int rc = responses_stream_begin(g->rs, &res, &frames);
    if (rc == 0) {
        rs_send(g, &frames);
    } else {
        gen_fail(g, "cannot build the response events (%s)", tandem_strerror(rc));
    }
    buf_free(&frames);
}

/* Tool calls of a streamed event, as entries (calls[], owned; their names borrowed from res):
 * "auto" through the server's parser as chat streams them (into td), a named tool's or
 * "required"'s output once whole (into res), as the chat stream sends "required"'s. */
static int rs_tool_entries(struct gen *g, struct choice *c, const struct out_event *ev,
                           struct tool_delta *td, struct tool_result *res,
                           struct tool_delta_call **calls, size_t *n_calls, const char **text,
                           size_t *len)
{
    int rc = 0;
    *text = NULL;
    *len = 0;
    if (g->o.tool_choice == OPENAI_TOOL_AUTO) {
        rc = c->ts ? 0 : tool_stream_new(&g->s->tools, &c->ts);
        if (rc == 0 && ev->text_len > 0) {
            rc = tool_stream_feed(c->ts, ev->text, ev->text_len, td);
        }
        if (rc == 0 && ev->finished) {
            rc = tool_stream_finish(c->ts, td);
        }
        if (rc == 0 && !g->o.parallel_tool_calls) {
            delta_first_call_only(td);
        }
        *text = td->content.data;
        *len = td->content.len;
        *calls = td->calls;
        *n_calls = td->n_calls;
        return rc;
    }
    rc = ev->text_len > 0 ? buf_append(&c->text, ev->text, ev->text_len) : 0;
    if (rc != 0 || !ev->finished) {
        return rc;
    }
    const char *all = c->text.data ? c->text.data : "";
    rc = g->o.tool_choice == OPENAI_TOOL_REQUIRED
             ? tool_parse_required(&g->s->tools, all, c->text.len, res)
             : named_call(g, all, c->text.len, res);
    if (rc != 0) {
        return rc;
    }
    size_t n = res->n_calls > 1 && !g->o.parallel_tool_calls ? 1 : res->n_calls;
    struct tool_delta_call *e = n > 0 ? calloc(n, sizeof *e) : NULL;
    if (n > 0 && !e) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        e[i].index = i;
        memcpy(e[i].id, res->calls[i].id, sizeof e[i].id);
        e[i].name = res->calls[i].name;
        e[i].name_len = res->calls[i].name_len;
        buf_init(&e[i].arguments, SERVER_MAX_TEXT);
        rc = rc ? rc
                : buf_append(&e[i].arguments, res->calls[i].arguments, res->calls[i].arguments_len);
    }
    *calls = e;
    *n_calls = n;
    if (rc == 0 && n == 0 && res->content) { /* not the grammar's array (cut off): the text */
        *text = res->content;
        *len = res->content_len;
    }
    return rc;
}

static void rs_stream_event(struct gen *g, struct choice *c, const struct out_event *ev)
{
    struct lp_view lv;
    struct tool_delta td;
    struct tool_result tr;
    struct tool_delta_call *own = NULL, *calls = NULL;
    size_t n_calls = 0;
    const char *text = ev->text;
    size_t len = ev->text_len;
    struct buf frames;
    memset(&lv, 0, sizeof lv);
    memset(&tr, 0, sizeof tr);
    tool_delta_init(&td);
    buf_init(&frames, SERVER_MAX_BODY_OUT);
    int rc = 0;
    if (g->o.logprobs >= 0 && ev->has_lp) {
        rc = lp_build(g, c, false, &ev->lp, 1, &lv);
    }
    if (rc == 0 && tool_mode(g)) {
        rc = rs_tool_entries(g, c, ev, &td, &tr, &calls, &n_calls, &text, &len);
        own = calls != td.calls ? calls : NULL;
    }
    if (rc == 0) {
        rc = responses_stream_delta(g->rs, text, len, lv.lps, lv.n_lps, calls, n_calls, &frames);
    }
    if (rc == 0) {
        rs_send(g, &frames);
    } else {
        gen_fail(g, "cannot build the response events (%s)", tandem_strerror(rc));
    }
    for (size_t i = 0; own && i < n_calls; i++) {
        buf_free(&own[i].arguments);
    }
    free(own);
    tool_result_free(&tr);
    tool_delta_free(&td);
    lp_view_free(&lv);
    buf_free(&frames);
}

static void rs_finish_stream(struct gen *g)
{
    if (!g->req) {
        return;
    }
    if (!g->failed) {
        struct openai_usage u;
        struct responses_result res;
        struct buf frames;
        rs_result(g, &res, &u, g->choices[0].finish);
        buf_init(&frames, SERVER_MAX_BODY_OUT);
        int rc = responses_stream_end(g->rs, &res, &frames);
        if (rc == 0) {
            rs_send(g, &frames);
        }
        buf_free(&frames);
        if (rc != 0) {
            gen_fail(g, "cannot build the response events (%s)", tandem_strerror(rc));
            return;
        }
    }
    http_stream_end(g->req);
    g->req = NULL;
}

static void rs_respond_full(struct gen *g)
{
    struct choice *c = &g->choices[0];
    struct openai_usage u;
    struct responses_result res;
    struct lp_view lv;
    struct tool_result tr;
    struct openai_choice oc;
    struct buf calls_json, body;
    memset(&lv, 0, sizeof lv);
    memset(&tr, 0, sizeof tr);
    memset(&oc, 0, sizeof oc);
    buf_init(&calls_json, SERVER_MAX_BODY_OUT);
    buf_init(&body, SERVER_MAX_BODY_OUT);
    rs_result(g, &res, &u, c->finish);
    res.text = c->text.data ? c->text.data : "";
    res.text_len = c->text.len;
    int rc = 0;
    if (g->o.logprobs >= 0) {
        rc = lp_build(g, c, false, c->lps, c->n_lps, &lv);
        res.logprobs = lv.lps;
        res.n_logprobs = lv.n_lps;
    }
    if (rc == 0 && tool_mode(g)) {
        rc = tools_full(g, c, &oc, &tr, &calls_json);
        res.text = oc.content_null ? NULL : oc.text;
        res.text_len = oc.content_null ? 0 : oc.text_len;
        res.calls = tr.calls;
        res.n_calls = !tr.tools_called                              ? 0
                      : tr.n_calls > 1 && !g->o.parallel_tool_calls ? 1
                                                                    : tr.n_calls;
    }
    if (rc == 0) {
        rc = responses_build(g->rs, &res, &body);
    }
    if (rc == 0) {
        http_respond_json(g->req, 200, body.data);
        g->req = NULL;
    } else {
        gen_fail(g, "cannot build the response body (%s)", tandem_strerror(rc));
    }
    tool_result_free(&tr);
    lp_view_free(&lv);
    buf_free(&calls_json);
    buf_free(&body);
}

/* GET /v1/responses/{id}, POST /v1/responses/{id}/cancel: vLLM without its store keeps no
 * response, so every id is its 404. */
static void h_responses_stored(struct http_request *req, void *ud)
{
    (void)ud;
    const char *path = http_request_path(req) + strlen("/v1/responses");
    const char *cancel = strstr(path, "/cancel");
    const int post = strcmp(http_request_method(req), "POST") == 0;
    size_t id_len = path[0] == '/' ? strcspn(path + 1, "/") : 0;
    if (id_len == 0 || (post && (!cancel || cancel != path + 1 + id_len || cancel[7] != '\0')) ||
        (!post && path[1 + id_len] != '\0')) {
        http_respond_error(req, 404, "NotFoundError", "Not Found", NULL);
        return;
    }
    char msg[256];
    snprintf(msg, sizeof msg, "Response with id '%.*s' not found.",
             (int)(id_len > 200 ? 200 : id_len), path + 1);
    http_respond_error(req, 404, "invalid_request_error", msg, "response_id");
}

/* vLLM's stream_interval (RequestState.make_request_output): a choice's first output and its
 * last go out at once; the others wait until stream_interval tokens have come since its last
 * chunk and go out as one. 1: ev is held, nothing to send; 0: send *send, ev itself or (merged)
 * the held outputs and ev as one, whose logprobs and ids are c's held ones until
 * stream_release; -ENOMEM. */
static int stream_hold(const struct gen *g, struct choice *c, const struct out_event *ev,
                       struct out_event *merged, const struct out_event **send)
{
    *send = ev;
    const size_t interval = g->o.stream_interval > 1 ? (size_t)g->o.stream_interval : 1;
    const size_t n_tok = ev->token >= 0 ? 1 : 0;
    const bool release = !c->sent_any || ev->finished || c->n_held_tokens + n_tok >= interval;
    c->sent_any = 1;
    const bool holding = c->held_text.len > 0 || c->n_held_ids > 0 || c->n_held_lps > 0;
    if (interval == 1 || (release && !holding)) {
        return 0;
    }
    int32_t *ids =
        tandem_grow(c->held_ids, &c->cap_held_ids, c->n_held_ids + 1, sizeof *c->held_ids, 16);
    if (ids) {
        c->held_ids = ids;
    }
    struct lp_entry *lps = ev->has_lp ? tandem_grow(c->held_lps, &c->cap_held_lps,
                                                    c->n_held_lps + 1, sizeof *c->held_lps, 4)
                                      : c->held_lps;
    if (lps) {
        c->held_lps = lps;
    }
    if (!ids || (ev->has_lp && !lps) || buf_append(&c->held_text, ev->text, ev->text_len) != 0) {
        return -ENOMEM;
    }
    if (n_tok) {
        c->held_ids[c->n_held_ids++] = ev->token;
    }
    if (ev->has_lp) {
        c->held_lps[c->n_held_lps++] = ev->lp;
    }
    c->n_held_tokens += n_tok;
    if (!release) {
        return 1;
    }
    *merged = *ev;
    merged->text = c->held_text.data ? c->held_text.data : "";
    merged->text_len = c->held_text.len;
    *send = merged;
    return 0;
}

/* After a merged chunk (stream_hold) went out: nothing held any more. */
static void stream_release(struct choice *c)
{
    buf_reset(&c->held_text);
    c->n_held_lps = 0;
    c->n_held_ids = 0;
    c->n_held_tokens = 0;
}

static void stream_event(struct gen *g, struct choice *c, const struct out_event *ev)
{
    if (g->rs) {
        rs_stream_event(g, c, ev);
        return;
    }
    struct out_event merged;
    const struct out_event *send = ev;
    const int held = stream_hold(g, c, ev, &merged, &send);
    if (held != 0) {
        if (held < 0) {
            gen_fail(g, "out of memory holding stream outputs (stream_interval)");
        }
        return;
    }
    ev = send;
    const bool batched = send == &merged; /* its tokens are c's held ones */
    struct openai_meta meta;
    fill_meta(g, &meta);
    struct openai_choice oc = {
        .index = c->index,
        .text = ev->text,
        .text_len = ev->text_len,
        .finish = ev->finished ? c->finish : OPENAI_FINISH_NONE,
        .stop_str = NULL,
        .text_offset = c->text_emitted,
    };
    if (ev->finished && c->stop_index >= 0 && c->stop_index < (int)g->o.n_stop) {
        oc.stop_str = g->o.stop[c->stop_index];
    } else if (ev->finished && c->stop_token >= 0) {
        oc.stop_token = c->stop_token;
        oc.has_stop_token = 1;
    }
    const bool completion = g->kind == OPENAI_COMPLETION;
    /* the echo waits for the output that brings the prompt's logprobs when it shows them */
    const bool echo_now = completion && g->o.echo && !c->echoed &&
                          (c->plp_ready || !g->o.has_prompt_logprobs || ev->finished);
    const struct lp_entry *gen_lps = batched ? c->held_lps : &ev->lp;
    const size_t n_gen = g->o.echo_only ? 0 : batched ? c->n_held_lps : ev->has_lp ? 1 : 0;
    const int32_t *tok_ids = batched ? c->held_ids : &ev->token;
    const size_t n_tok = batched ? c->n_held_ids : ev->token >= 0 ? 1 : 0;
    /* return_token_ids: each chunk carries its tokens (vLLM sends a chunk per output then, with
     * or without text); a completion choice's first chunk its prompt's ids */
    const int carry_ids = g->o.return_token_ids && n_tok > 0;
    struct openai_usage u;
    struct lp_view lv;
    memset(&lv, 0, sizeof lv);
    struct tool_delta td;
    struct buf calls, joined, json;
    tool_delta_init(&td);
    buf_init(&calls, SERVER_MAX_BODY_OUT);
    buf_init(&joined, SERVER_MAX_BODY_OUT);
    buf_init(&json, SERVER_MAX_BODY_OUT);
    int rc = 0;
    if (completion && stream_text(g, c, ev, echo_now, &joined, &oc) != 0) {
        gen_fail(g, "out of memory echoing the prompt");
        goto out;
    }
    /* logprobs: this output's token, after the prompt's tokens with an echo (vLLM's
     * _create_completion_logprobs over prompt + output) */
    if (g->o.logprobs >= 0 && (n_gen > 0 || (echo_now && c->plp_ready))) {
        if (lp_build(g, c, echo_now, gen_lps, n_gen, &lv) != 0) {
            gen_fail(g, "out of memory building logprobs");
            goto out;
        }
        oc.logprobs = lv.lps;
        oc.n_logprobs = lv.n_lps;
    }
    if (g->o.return_token_ids) {
        oc.token_ids = n_tok > 0 ? tok_ids : NULL;
        oc.n_token_ids = n_tok;
    }
    if (tool_mode(g) && tools_stream(g, c, ev, &oc, &td, &calls) != 0) {
        gen_fail(g, "cannot extract the tool calls");
        goto out;
    }
    if (oc.text_len == 0 && !oc.tool_calls_json && !ev->finished && !oc.logprobs && !carry_ids) {
        goto out; /* nothing to say (e.g. a token held back by a stop string) */
    }
    if (tool_mode(g) && carry_ids && oc.text_len == 0 && !oc.tool_calls_json) {
        oc.delta_empty = 1; /* vLLM's DeltaMessage() when the parser holds everything back */
    }
    if (g->o.return_token_ids && completion && !c->prompt_ids_sent) {
        const int p = c->index / g->n_per;
        oc.prompt_token_ids = g->prompt_ids[p];
        oc.n_prompt_token_ids = g->n_prompt_ids[p];
        c->prompt_ids_sent = 1;
    }
    fill_usage(g, &u);
    rc = g->kind == OPENAI_CHAT
             ? openai_build_chat_chunk(&meta, &oc, 1, 0, g->o.continuous_usage_stats ? &u : NULL,
                                       &json)
             : openai_build_completion_chunk(&meta, &oc, 1, g->o.continuous_usage_stats ? &u : NULL,
                                             &json);
    if (rc == 0) {
        send_chunk_json(g, &json);
        if (echo_now) {
            c->echoed = 1;
        }
        /* vLLM's text offsets count characters of the text sent so far */
        c->text_emitted += openai_text_chars(oc.text, oc.text_len);
    } else {
        gen_fail(g, "cannot build a stream chunk (%s)", tandem_strerror(rc));
    }
out:
    if (batched) {
        stream_release(c);
    }
    buf_free(&json);
    buf_free(&joined);
    tool_delta_free(&td);
    buf_free(&calls);
    lp_view_free(&lv);
}

static void finish_stream(struct gen *g)
{
    if (g->rs) {
        rs_finish_stream(g);
        return;
    }
    if (!g->req) {
        return;
    }
    if (!g->failed && g->o.include_usage) {
        struct openai_meta meta;
        fill_meta(g, &meta);
        struct openai_usage u;
        fill_usage(g, &u);
        struct buf json;
        buf_init(&json, SERVER_MAX_BODY_OUT);
        int rc = openai_build_usage_chunk(&meta, g->kind, &u, &json);
        if (rc == 0) {
            send_chunk_json(g, &json);
        }
        buf_free(&json);
        if (rc != 0) {
            gen_fail(g, "cannot build the usage chunk (%s)", tandem_strerror(rc));
            return;
        }
    }
    if (!g->failed) {
        struct buf done;
        buf_init(&done, 64);
        if (openai_sse_done(&done) == 0) {
            http_stream_send(g->req, done.data, done.len);
        }
        buf_free(&done);
    }
    http_stream_end(g->req);
    g->req = NULL;
}

/* The /v1/embeddings answer: every choice's pooled vector. */
static void respond_embeddings(struct gen *g)
{
    struct openai_meta meta;
    fill_meta(g, &meta);
    struct openai_usage u;
    fill_usage(g, &u);
    u.completion_tokens = 0; /* the token sampled after each prompt is not an output */
    const float **vecs = calloc((size_t)g->n, sizeof *vecs);
    struct buf body;
    buf_init(&body, SERVER_MAX_BODY_OUT);
    int rc = vecs ? 0 : -ENOMEM;
    int32_t dims = g->n > 0 ? g->choices[0].n_embedding : 0;
    for (int i = 0; rc == 0 && i < g->n; i++) {
        vecs[i] = g->choices[i].embedding;
        rc = vecs[i] && g->choices[i].n_embedding == dims ? 0 : -EIO;
    }
    const struct openai_embed_format *fmt = &g->o.embed_fmt;
    const bool bytes =
        fmt->encoding == OPENAI_EMBED_BYTES || fmt->encoding == OPENAI_EMBED_BYTES_ONLY;
    struct buf md; /* encoding_format "bytes": the metadata header */
    buf_init(&md, SERVER_MAX_BODY_OUT);
    if (rc == 0) {
        rc = bytes ? openai_build_embeddings_bytes(&meta, vecs, (size_t)g->n, dims, fmt, &u, &body,
                                                   &md)
                   : openai_build_embeddings_fmt(&meta, vecs, (size_t)g->n, dims, fmt, &u, &body);
    }
    if (rc == 0 && bytes) {
        if (md.len > 0) {
            http_add_header(g->req, "metadata", md.data);
        }
        http_respond(g->req, 200, "application/octet-stream", body.data ? body.data : "", body.len);
        g->req = NULL;
    } else if (rc == 0) {
        http_respond_json(g->req, 200, body.data);
        g->req = NULL;
    } else {
        gen_fail(g, "cannot build the embeddings (%s)", tandem_strerror(rc));
    }
    buf_free(&md);
    buf_free(&body);
    free(vecs);
}

/* /score, /rerank, /pooling: scoring.c's answer from every choice's pooled vector. */
static void respond_scoring(struct gen *g)
{
    const enum openai_embed_encoding enc = g->o.embed_fmt.encoding;
    if (enc == OPENAI_EMBED_BYTES || enc == OPENAI_EMBED_BYTES_ONLY) {
        respond_embeddings(g); /* /pooling: vLLM's encode_pooling_bytes, as for embeddings */
        return;
    }
    const float **vecs = calloc((size_t)g->n, sizeof *vecs);
    int32_t *n_tokens = calloc((size_t)g->n, sizeof *n_tokens);
    struct buf body;
    buf_init(&body, SERVER_MAX_BODY_OUT);
    int rc = vecs && n_tokens ? 0 : -ENOMEM;
    const int32_t dims = g->n > 0 ? g->choices[0].n_embedding : 0;
    for (int i = 0; rc == 0 && i < g->n; i++) {
        vecs[i] = g->choices[i].embedding;
        n_tokens[i] = g->choices[i].n_prompt;
        rc = vecs[i] && g->choices[i].n_embedding == dims ? 0 : -EIO;
    }
    if (rc == 0) {
        const struct scoring_output so = {
            .id = g->id,
            .model = g->s->served_name, /* vLLM's models.model_name(): the base model's */
            .created = g->created,
            .vecs = vecs,
            .n_tokens = n_tokens,
            .n = (size_t)g->n,
            .dims = (size_t)dims,
            .pad_token = engine_model(g->s->e)->vocab.pad_id >= 0,
            .fmt = &g->o.embed_fmt,
        };
        rc = scoring_build(&g->sc, &so, &body);
    }
    if (rc == 0) {
        http_respond_json(g->req, 200, body.data);
        g->req = NULL;
    } else {
        gen_fail(g, "cannot build the answer (%s)", tandem_strerror(rc));
    }
    buf_free(&body);
    free(vecs);
    free(n_tokens);
}

static void respond_full(struct gen *g)
{
    if (g->rs) {
        rs_respond_full(g);
        return;
    }
    if (g->sc.kind != SCORING_NONE) {
        respond_scoring(g);
        return;
    }
    if (g->kind == OPENAI_EMBEDDING) {
        respond_embeddings(g);
        return;
    }
    struct openai_meta meta;
    fill_meta(g, &meta);
    struct openai_usage u;
    fill_usage(g, &u);
    struct openai_choice *cs = calloc((size_t)g->n, sizeof *cs);
    struct lp_view *lvs = calloc((size_t)g->n, sizeof *lvs);
    struct tool_result *tres = tool_mode(g) ? calloc((size_t)g->n, sizeof *tres) : NULL;
    struct buf *tjson = tool_mode(g) ? calloc((size_t)g->n, sizeof *tjson) : NULL;
    struct buf body;
    buf_init(&body, SERVER_MAX_BODY_OUT);
    int rc = -ENOMEM;
    if (!cs || !lvs || (tool_mode(g) && (!tres || !tjson))) {
        goto out;
    }
    for (int i = 0; tjson && i < g->n; i++) {
        buf_init(&tjson[i], SERVER_MAX_BODY_OUT);
    }
    for (int i = 0; i < g->n; i++) {
        struct choice *c = &g->choices[i];
        cs[i].index = i;
        cs[i].text = c->text.data ? c->text.data : "";
        cs[i].text_len = c->text.len;
        cs[i].finish = c->finish;
        if (c->stop_index >= 0 && c->stop_index < (int)g->o.n_stop) {
            cs[i].stop_str = g->o.stop[c->stop_index];
        } else if (c->stop_token >= 0) {
            cs[i].stop_token = c->stop_token;
            cs[i].has_stop_token = 1;
        }
        /* logprobs: an echo's cover the prompt too (vLLM's echo: prompt + output, offsets from
         * 0), an echo without generation's the prompt only */
        if (g->o.logprobs >= 0 && lp_build(g, c, g->kind == OPENAI_COMPLETION && g->o.echo, c->lps,
                                           g->o.echo_only ? 0 : c->n_lps, &lvs[i]) != 0) {
            goto out;
        }
        if (g->o.logprobs >= 0) {
            cs[i].logprobs = lvs[i].lps;
            cs[i].n_logprobs = lvs[i].n_lps;
        }
        /* prompt_logprobs: each completion choice its prompt's, chat the response's */
        if (g->o.has_prompt_logprobs && (g->kind == OPENAI_COMPLETION || i == 0)) {
            if (plp_build(g->s, c, &lvs[i]) != 0) {
                goto out;
            }
            if (g->kind == OPENAI_COMPLETION) {
                cs[i].prompt_logprobs = &lvs[i].plp;
            } else {
                meta.prompt_logprobs = &lvs[i].plp;
            }
        }
        if (g->o.return_token_ids) {
            cs[i].token_ids = c->ids;
            cs[i].n_token_ids = c->n_ids;
            cs[i].prompt_token_ids = g->prompt_ids[i / g->n_per];
            cs[i].n_prompt_token_ids = g->n_prompt_ids[i / g->n_per];
        }
        if (tres && tools_full(g, c, &cs[i], &tres[i], &tjson[i]) != 0) {
            goto out; /* rc is still -ENOMEM */
        }
    }
    rc = g->kind == OPENAI_CHAT ? openai_build_chat(&meta, cs, (size_t)g->n, &u, &body)
                                : openai_build_completion(&meta, cs, (size_t)g->n, &u, &body);
out:
    if (rc == 0) {
        if (g->kv_load_s > 0) {
            /* P/D: how long this pod pulled the prompt's KV blocks (a streamed answer starts
             * before the pull, so only a whole answer can say) */
            char ms[32];
            snprintf(ms, sizeof ms, "%.1f", g->kv_load_s * 1e3);
            http_add_header(g->req, "x-kv-transfer-time-ms", ms);
        }
        http_respond_json(g->req, 200, body.data);
        g->req = NULL;
    } else {
        gen_fail(g, "cannot build the response body");
    }
    buf_free(&body);
    for (int i = 0; lvs && i < g->n; i++) {
        lp_view_free(&lvs[i]);
    }
    free(lvs);
    for (int i = 0; tres && tjson && i < g->n; i++) {
        tool_result_free(&tres[i]);
        buf_free(&tjson[i]);
    }
    free(tres);
    free(tjson);
    free(cs);
}

/* Non-streaming: accumulates the event's text and logprob into the choice (an echo without
 * generation keeps neither: its answer is the prompt). */
static void collect_event(struct gen *g, struct choice *c, const struct out_event *ev)
{
    int rc = ev->text_len > 0 && !g->o.echo_only ? buf_append(&c->text, ev->text, ev->text_len) : 0;
    if (rc == -ENOSPC) {
        gen_fail(g, "generated text exceeds %zu bytes", (size_t)SERVER_MAX_TEXT);
        return;
    }
    if (rc != 0) {
        gen_fail(g, "cannot collect the generated text (%s)", tandem_strerror(rc));
        return;
    }
    if (ev->has_lp && g->o.logprobs >= 0 && !g->o.echo_only) {
        struct lp_entry *p = tandem_grow(c->lps, &c->cap_lps, c->n_lps + 1, sizeof *p, 16);
        if (!p) {
            gen_fail(g, "out of memory collecting logprobs");
            return;
        }
        c->lps = p;
        c->lps[c->n_lps++] = ev->lp;
    }
    if (g->o.return_token_ids && ev->token >= 0) {
        int32_t *p = tandem_grow(c->ids, &c->cap_ids, c->n_ids + 1, sizeof *p, 16);
        if (!p) {
            gen_fail(g, "out of memory collecting token ids");
            return;
        }
        c->ids = p;
        c->ids[c->n_ids++] = ev->token;
    }
}

/* The answer of a PRODUCE request (vLLM NixlConnector's request_finished): where the decoder
 * finds the prompt's KV. When nobody can receive it (the client is gone), the blocks are let go
 * at once instead of waiting for the hold timeout. */
static void kv_params_of(struct engine_server *s, struct choice *c, const struct out_event *ev)
{
    const engine_kv_connector *kc = engine_kv_connector_get(s->e);
    if (!c->g->req || c->g->failed || !kc || c->index > 0) {
        /* nobody to tell, or a second choice (one kv_transfer_params per answer) */
        engine_kv_release(s->e, ev->kv_request_id);
        return;
    }
    struct json_object *kv = json_object_new_object();
    struct json_object *ids = json_object_new_array_ext(ev->n_kv_blocks);
    if (!kv || !ids) {
        json_object_put(kv);
        json_object_put(ids);
        engine_kv_release(s->e, ev->kv_request_id);
        return;
    }
    for (int32_t i = 0; i < ev->n_kv_blocks; i++) {
        json_object_array_add(ids, json_object_new_int(ev->kv_blocks[i]));
    }
    json_object_object_add(kv, "do_remote_prefill", json_object_new_boolean(1));
    json_object_object_add(kv, "do_remote_decode", json_object_new_boolean(0));
    json_object_object_add(kv, "remote_block_ids", ids);
    json_object_object_add(kv, "remote_engine_id", json_object_new_string(kc->engine_id));
    json_object_object_add(kv, "remote_request_id", json_object_new_string(ev->kv_request_id));
    json_object_object_add(kv, "remote_host", json_object_new_string(kc->host));
    json_object_object_add(kv, "remote_port", json_object_new_int(kc->port));
    json_object_object_add(kv, "tp_size", json_object_new_int(kc->tp_size));
    json_object_put(c->kv_params);
    c->kv_params = kv;
}

/* The spans an engine output closes: kv_transfer (a consumer's KV pull, reported with its first
 * output: start = now - its duration), prefill (a producer's, up to the first output) and the
 * first_token event. */
static void trace_event(struct gen *g, const struct out_event *ev)
{
    int64_t now = trace_now_unix_ns();
    if (ev->kv_loaded != 0 && !g->kv_traced) {
        g->kv_traced = 1;
        struct span *k = span_child(g->span, "kv_transfer", SPAN_KIND_INTERNAL);
        span_set_start(k, now - (int64_t)(ev->kv_load_s * 1e9));
        span_set_int(k, "tandem.kv.blocks", g->kv_blocks);
        span_set_int(k, "tandem.kv.bytes", (int64_t)g->s->kv_block_bytes * g->kv_blocks);
        span_set_double(k, "tandem.kv.seconds", ev->kv_load_s);
        span_set_str(k, "x-request-id", g->xrid);
        if (ev->kv_loaded < 0) {
            span_set_status(k, SPAN_STATUS_ERROR,
                            "the KV pull failed; the prompt was prefilled here");
        }
        span_end_at(k, now);
    }
    if (!g->first_seen && (ev->token >= 0 || ev->n_generated > 0)) {
        g->first_seen = 1;
        int e = span_add_event_at(g->span, "first_token", now);
        double ttft = tandem_now_s() - g->t_start;
        span_event_set_double(g->span, e, "gen_ai.latency.time_to_first_token", ttft);
        span_set_double(g->span, "gen_ai.latency.time_to_first_token", ttft);
        span_set_int(g->prefill, "gen_ai.usage.prompt_tokens", ev->n_prompt);
        span_set_int(g->prefill, "tandem.usage.cached_tokens", ev->n_cached);
        span_end_at(g->prefill, now);
        g->prefill = NULL;
    }
}

static void handle_event(struct engine_server *s, struct out_event *ev)
{
    struct choice *c = ev->c;
    struct gen *g = c->g;
    (void)s;
    if (!c->plp_ready && (ev->plp || ev->token >= 0)) {
        /* the first token's output carries the prompt's logprobs (when asked) */
        c->plp_ready = 1;
        c->plp = ev->plp;
        ev->plp = NULL;
    }
    c->n_generated = ev->n_generated;
    c->n_prompt = ev->n_prompt;
    if (ev->n_cached > c->n_cached) {
        c->n_cached = ev->n_cached;
    }
    if (ev->kv_loaded == 1 && ev->kv_load_s > g->kv_load_s) {
        g->kv_load_s = ev->kv_load_s;
    }
    if (g->span) {
        trace_event(g, ev);
    }
    if (ev->finished) {
        c->finish = finish_of(ev->status);
        c->stop_index = ev->stop_index;
        c->stop_token = ev->stop_token;
        if (ev->n_kv_blocks > 0) {
            kv_params_of(s, c, ev);
        }
    }
    if (ev->lost) {
        gen_fail(g, "out of memory passing the engine's output to the server");
    } else if (ev->error) {
        gen_fail(g, "the engine could not finish the request (%s)", tandem_strerror(ev->error));
    }
    if (g->req && !g->failed) {
        if (g->o.stream) {
            stream_event(g, c, ev);
        } else {
            collect_event(g, c, ev);
        }
    }
    if (!ev->finished) {
        return;
    }
    c->done = 1;
    g->pending--;
    if (g->pending > 0) {
        return;
    }
    if (s->log_requests) {
        struct openai_usage u;
        fill_usage(g, &u);
        char tid[33];
        span_trace_id_hex(g->span, tid);
        log_info("request %s finished: prompt %" PRId64 " tokens (%" PRId64
                 " cached), generated %" PRId64 ", %.3f s%s%s",
                 g->id, u.prompt_tokens, u.cached_tokens, u.completion_tokens,
                 tandem_now_s() - g->t_start, tid[0] ? " trace_id=" : "", tid);
    }
    gen_trace_end(g); /* before the answer completes: inside the caller's span */
    if (g->req) {
        if (g->o.stream) {
            finish_stream(g);
        } else {
            respond_full(g);
        }
    }
    gen_free(g);
}

static void drain_queue(struct engine_server *s)
{
    for (;;) {
        pthread_mutex_lock(&s->mu);
        struct list_node *n = list_first(&s->queue);
        if (!n) {
            pthread_mutex_unlock(&s->mu);
            return;
        }
        list_unlink(n);
        struct out_event *ev = list_entry(n, struct out_event, node);
        struct out_event lost;
        int owned = !ev->lost;
        if (!owned) {
            lost = *ev; /* the engine thread may update the choice's event again */
            ev = &lost;
        }
        pthread_mutex_unlock(&s->mu);
        handle_event(s, ev);
        if (owned) {
            free(ev->plp);
            free(ev);
        }
    }
}

static void on_async(uv_async_t *a)
{
    drain_queue(a->data);
}

/* ---- request handling ---- */

/* The served model, or a loaded LoRA adapter of it (*lora then true; lora may be NULL where
 * both mean the same, e.g. tokenization); a 404 for any other name. */
static int check_model(struct engine_server *s, const char *name, bool *lora,
                       struct openai_error *err)
{
    if (lora) {
        *lora = false;
    }
    if (!name || strcmp(name, s->served_name) == 0) {
        return 0;
    }
    lora_registry *r = engine_loras(s->e);
    lora_ref *ref = r ? lora_registry_get(r, name) : NULL;
    if (!ref) {
        openai_error_set(err, 404, "model", "The model `%s` does not exist.", name);
        return -ENOENT;
    }
    lora_ref_put(ref);
    if (lora) {
        *lora = true;
    }
    return 0;
}

/* kv_transfer_params of a request (vLLM NixlConnector, NIXL v2): do_remote_decode → this
 * engine produces (holds the blocks for a decoder); do_remote_prefill → it consumes (loads the
 * blocks from remote_host). Wrong types are a 400 naming the field; a consumer's missing fields
 * leave the request a plain one (the engine logs it). *blocks is malloc'd (free it). */
static int kv_transfer_of(struct json_object *kv, engine_kv_transfer *t, int32_t **blocks,
                          struct openai_error *err)
{
    memset(t, 0, sizeof *t);
    *blocks = NULL;
    if (!kv) {
        return 0;
    }
    struct json_object *v;
    int remote_decode = json_object_object_get_ex(kv, "do_remote_decode", &v) && v &&
                        json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
    int remote_prefill = json_object_object_get_ex(kv, "do_remote_prefill", &v) && v &&
                         json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
    if (remote_decode && !remote_prefill) {
        t->mode = ENGINE_KVT_PRODUCE;
        return 0;
    }
    if (!remote_prefill) {
        return 0;
    }
    static const char *const strs[] = {"remote_engine_id", "remote_host", "remote_request_id"};
    const char **dst[] = {&t->remote_engine_id, &t->remote_host, &t->remote_request_id};
    for (size_t i = 0; i < ARRAY_SIZE(strs); i++) {
        if (json_object_object_get_ex(kv, strs[i], &v) && v) {
            if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) > 256) {
                openai_error_set(err, 400, "kv_transfer_params",
                                 "'kv_transfer_params.%s' must be a string of at most 256 bytes",
                                 strs[i]);
                return -EINVAL;
            }
            *dst[i] = json_object_get_string(v);
        }
    }
    if (json_object_object_get_ex(kv, "remote_port", &v) && v) {
        int64_t port = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
        if (port < 1 || port > 65535) {
            openai_error_set(err, 400, "kv_transfer_params",
                             "'kv_transfer_params.remote_port' must be a port number");
            return -EINVAL;
        }
        t->remote_port = (int32_t)port;
    }
    if (json_object_object_get_ex(kv, "remote_block_ids", &v) && v) {
        size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
        if (!json_object_is_type(v, json_type_array) || n > (1u << 20)) {
            openai_error_set(err, 400, "kv_transfer_params",
                             "'kv_transfer_params.remote_block_ids' must be a list of block ids");
            return -EINVAL;
        }
        *blocks = malloc((n ? n : 1) * sizeof **blocks);
        if (!*blocks) {
            openai_error_set(err, 500, NULL, "out of memory");
            return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            struct json_object *e = json_object_array_get_idx(v, i);
            int64_t id = e && json_object_is_type(e, json_type_int) ? json_object_get_int64(e) : -1;
            if (id < 1 || id > INT32_MAX) {
                free(*blocks);
                *blocks = NULL;
                openai_error_set(err, 400, "kv_transfer_params",
                                 "'kv_transfer_params.remote_block_ids[%zu]' must be a block id "
                                 "(an integer >= 1)",
                                 i);
                return -EINVAL;
            }
            (*blocks)[i] = (int32_t)id;
        }
        t->remote_block_ids = *blocks;
        t->n_remote_blocks = (int32_t)n;
    }
    t->mode = ENGINE_KVT_CONSUME;
    return 0;
}

/* The request's attributes once it is parsed; a P/D producer's prefill span starts. */
static void trace_request(struct gen *g, const engine_kv_transfer *kvt)
{
    span_set_str(g->span, "gen_ai.request.id", g->id);
    span_set_str(g->span, "gen_ai.response.model", g->lora ? g->lora : g->s->served_name);
    span_set_int(g->span, "gen_ai.request.n", g->n);
    span_set_double(g->span, "gen_ai.request.temperature", g->o.sampling.temperature);
    span_set_double(g->span, "gen_ai.request.top_p", g->o.sampling.top_p);
    if (g->o.max_tokens_set) {
        span_set_int(g->span, "gen_ai.request.max_tokens", g->o.max_tokens);
    }
    span_set_bool(g->span, "tandem.stream", g->o.stream);
    int32_t n_prompt, n_cached;
    gen_prompt_usage(g, &n_prompt, &n_cached);
    span_set_int(g->span, "gen_ai.usage.prompt_tokens", n_prompt);
    if (kvt->mode == ENGINE_KVT_PRODUCE) {
        span_set_str(g->span, "tandem.kv.role", "producer");
        g->prefill = span_child(g->span, "prefill", SPAN_KIND_INTERNAL);
        span_set_str(g->prefill, "x-request-id", g->xrid);
    } else if (kvt->mode == ENGINE_KVT_CONSUME) {
        span_set_str(g->span, "tandem.kv.role", "consumer");
        span_set_str(g->span, "tandem.kv.remote_host", kvt->remote_host ? kvt->remote_host : "");
        g->kv_blocks = kvt->n_remote_blocks;
    }
}

/* The compiled grammar of a request's structured-output constraint (400 naming the field when
 * it does not compile). */
static int structured_grammar(struct engine_server *s, const struct openai_guide *og,
                              guide_grammar **out, struct openai_error *err)
{
    struct buf gbnf;
    buf_init(&gbnf, GRAMMAR_MAX_TEXT);
    int rc = openai_guide_gbnf(og, &gbnf, err);
    if (rc == 0) {
        char msg[400] = "";
        rc = engine_guide_grammar(s->e, gbnf.data, gbnf.len, out, msg, sizeof msg);
        if (rc == -ENOMEM) {
            openai_error_set(err, 500, NULL, "out of memory");
        } else if (rc != 0) {
            openai_error_set(err, 400, og->param, "'%s': %s", og->param, msg);
        }
    }
    buf_free(&gbnf);
    return rc;
}

/* sk: a scoring request (/score, /rerank, /pooling, kind OPENAI_EMBEDDING), or SCORING_NONE */
static void handle_generate(struct http_request *req, struct engine_server *s,
                            enum openai_kind kind, enum scoring_kind sk)
{
    size_t blen = 0;
    const char *body = http_request_body(req, &blen);
    struct openai_error err;
    memset(&err, 0, sizeof err);
    struct gen *g = calloc(1, sizeof *g);
    if (!g) {
        http_respond_error(req, 500, "InternalServerError", "out of memory", NULL);
        return;
    }
    g->s = s;
    g->kind = kind;
    g->t_start = tandem_now_s();
    if (s->tracer) {
        struct trace_ctx in;
        const char *xrid = http_request_header(req, "x-request-id");
        g->span = trace_server_span(s->tracer, "llm_request",
                                    http_request_header(req, "traceparent"), &in);
        span_set_str(g->span, "gen_ai.operation.name",
                     kind == OPENAI_CHAT ? "chat" : "text_completion");
        span_set_str(g->span, "gen_ai.system", "tandem");
        span_set_str(g->span, "url.path", http_request_path(req));
        if (xrid) {
            snprintf(g->xrid, sizeof g->xrid, "%s", xrid);
            span_set_str(g->span, "x-request-id", g->xrid);
        }
    }
    /* /v1/responses: a chat request in the Responses form (responses.h) */
    const bool responses = strcmp(http_request_path(req), "/v1/responses") == 0;
    int rc = responses ? responses_parse(body ? body : "", blen, s->auto_tools, &g->rs, &g->o, &err)
             : sk != SCORING_NONE
                 ? scoring_parse(sk, body ? body : "", blen,
                                 model_arch_name(engine_model(s->e)->cfg.arch), &g->o, &g->sc, &err)
             : kind == OPENAI_CHAT ? openai_parse_chat(body ? body : "", blen, &g->o, &err)
             : kind == OPENAI_EMBEDDING
                 ? openai_parse_embedding(body ? body : "", blen, &g->o, &err)
                 : openai_parse_completion(body ? body : "", blen, &g->o, &err);
    if (rc != 0) {
        gen_trace_fail(g, err.status, err.message);
        respond_openai_error(req, &err);
        free(g);
        return;
    }
    openai_apply_defaults(&g->o, &s->defaults);
    /* chat has one prompt (its messages); a completion one per entry of its prompt list */
    const int n_prompts = kind == OPENAI_CHAT ? 1 : (int)g->o.n_prompts;
    int32_t **ids = calloc((size_t)n_prompts, sizeof *ids);
    size_t *n_ids = calloc((size_t)n_prompts, sizeof *n_ids);
    int32_t *max_tok = calloc((size_t)n_prompts, sizeof *max_tok);
    int32_t *kv_blocks = NULL;
    char *prompt_text = NULL;
    engine_kv_transfer kvt = {.mode = ENGINE_KVT_NONE};
    guide_grammar *constraint = NULL; /* structured output, shared by the choices */
    g->n_prompts = n_prompts;
    g->echo = calloc((size_t)n_prompts, sizeof *g->echo);
    g->echo_len = calloc((size_t)n_prompts, sizeof *g->echo_len);
    if (!ids || !n_ids || !max_tok || !g->echo || !g->echo_len) {
        openai_error_set(&err, 500, NULL, "out of memory");
        goto err_respond;
    }
    bool is_lora = false;
    if (check_model(s, g->o.model, &is_lora, &err) != 0) {
        goto err_respond;
    }
    g->lora = is_lora ? g->o.model : NULL;
    if (g->rs && responses_check(g->rs, &err) != 0) {
        goto err_respond;
    }
    if (sk != SCORING_NONE &&
        scoring_prepare(&g->sc, &g->o, s->tok, engine_max_model_len(s->e), &err) != 0) {
        goto err_respond;
    }
    if (prompt_bad_words(&s->pc, &g->o, &err) != 0) {
        goto err_respond;
    }
    if (kind == OPENAI_EMBEDDING && g->o.embed_dimensions > 0) {
        /* vLLM: only matryoshka models may return fewer dimensions; none here is one */
        openai_error_set(&err, 400, "dimensions",
                         "Model \"%s\" does not support matryoshka representation, changing "
                         "output dimensions will lead to poor results.",
                         s->served_name);
        goto err_respond;
    }
    if (kind == OPENAI_CHAT && g->o.tool_choice == OPENAI_TOOL_AUTO && !s->auto_tools) {
        openai_error_set(&err, 400, "tool_choice",
                         "\"auto\" tool choice requires --enable-auto-tool-choice and "
                         "--tool-call-parser to be set");
        goto err_respond;
    }
    const int32_t max_len = engine_max_model_len(s->e);
    for (int p = 0; p < n_prompts; p++) {
        size_t prompt_len = 0;
        if (kind != OPENAI_CHAT) {
            openai_request_select_prompt(&g->o, (size_t)p);
        }
        if (prompt_build(&s->pc, &g->o, &ids[p], &n_ids[p], &prompt_text, &prompt_len, &err) != 0) {
            goto err_respond;
        }
        if (kind == OPENAI_CHAT && g->o.return_prompt_text && prompt_text) {
            g->prompt_text = strndup(prompt_text, prompt_len); /* vLLM's res.prompt */
            g->prompt_text_len = prompt_len;
            if (!g->prompt_text) {
                openai_error_set(&err, 500, NULL, "out of memory");
                goto err_respond;
            }
        }
        if (g->o.truncate_prompt_tokens != 0) {
            const int32_t k =
                g->o.truncate_prompt_tokens < 0 ? max_len : g->o.truncate_prompt_tokens;
            if (k > max_len) {
                openai_error_set(&err, 400, "truncate_prompt_tokens",
                                 "truncate_prompt_tokens value (%d) is greater than max_model_len "
                                 "(%d). Please request a smaller truncation size.",
                                 (int)k, (int)max_len);
                goto err_respond;
            }
            if ((int64_t)n_ids[p] > k) { /* keep the last k (left side cut), or the first k */
                if (!g->o.truncate_right) {
                    memmove(ids[p], ids[p] + n_ids[p] - (size_t)k, (size_t)k * sizeof *ids[p]);
                }
                n_ids[p] = (size_t)k;
                free(prompt_text); /* an echo is then the kept tokens' text */
                prompt_text = NULL;
            }
        }
        if ((int64_t)n_ids[p] >= max_len) {
            openai_error_set(&err, 400,
                             kind == OPENAI_CHAT        ? "messages"
                             : kind == OPENAI_EMBEDDING ? "input"
                                                        : "prompt",
                             "This model's maximum context length is %d tokens. However, your "
                             "request has %zu input tokens. Please reduce the length of the "
                             "input messages.",
                             (int)max_len, n_ids[p]);
            goto err_respond;
        }
        int32_t mt = g->o.max_tokens_set ? g->o.max_tokens : max_len - (int32_t)n_ids[p];
        if ((int64_t)n_ids[p] + mt > max_len) {
            openai_error_set(&err, 400,
                             kind == OPENAI_CHAT ? "max_completion_tokens" : "max_tokens",
                             "This model's maximum context length is %d tokens. However, you "
                             "requested %" PRId64 " tokens (%zu in the messages, %d in the "
                             "completion). Please reduce the length of the messages or "
                             "completion.",
                             (int)max_len, (int64_t)n_ids[p] + mt, n_ids[p], (int)mt);
            goto err_respond;
        }
        if (s->defaults.has_max_tokens && mt > s->defaults.max_tokens) {
            mt = s->defaults.max_tokens; /* generation config's max_new_tokens caps it */
        }
        max_tok[p] = mt;
        if (g->o.echo && kind == OPENAI_COMPLETION && !g->o.return_token_ids) {
            /* (vLLM echoes no prompt text with return_token_ids: the ids say it) */
            if (prompt_text) {
                g->echo[p] = prompt_text;
                g->echo_len[p] = prompt_len;
                prompt_text = NULL;
            } else {
                char *t = NULL;
                size_t tl = 0;
                int drc =
                    tokenizer_decode(s->tok, ids[p], n_ids[p], g->o.skip_special_tokens, &t, &tl);
                if (drc == -ENOMEM) {
                    openai_error_set(&err, 500, NULL, "out of memory");
                    goto err_respond;
                }
                if (drc == 0) { /* ids the tokenizer does not know (a padded vocabulary): none */
                    g->echo[p] = t;
                    g->echo_len[p] = tl;
                }
            }
        }
        free(prompt_text);
        prompt_text = NULL;
    }
    /* vLLM checks prompt_logprobs against max_logprobs once the prompt is rendered (-1: the
     * vocabulary, the width of the logits) */
    if (openai_resolve_sampling(&g->o, engine_model(s->e)->cfg.n_vocab, &err) != 0) {
        goto err_respond;
    }

    const char *xrid = http_request_header(req, "x-request-id");
    const char *prefix = g->rs                      ? "resp_"
                         : sk != SCORING_NONE       ? scoring_id_prefix(sk)
                         : kind == OPENAI_CHAT      ? "chatcmpl-"
                         : kind == OPENAI_EMBEDDING ? "embd-"
                                                    : "cmpl-";
    if (xrid && xrid[0] && strlen(xrid) < 64 &&
        strspn(xrid, "0123456789abcdefABCDEF-_.:") == strlen(xrid)) {
        snprintf(g->id, sizeof g->id, "%s%s", prefix, xrid);
    } else if (g->rs && g->rs->request_id) {
        snprintf(g->id, sizeof g->id, "%s", g->rs->request_id); /* vLLM: the id as given */
    } else if (g->o.request_id && kind != OPENAI_EMBEDDING) {
        /* vLLM: the body's request_id without the header (pooling ids ignore it) */
        snprintf(g->id, sizeof g->id, "%s%s", prefix, g->o.request_id);
    } else {
        openai_make_id(g->id, sizeof g->id, prefix);
    }
    g->created = (int64_t)time(NULL);
    g->n_per = g->o.n;
    g->n = n_prompts * g->o.n;
    g->choices = calloc((size_t)g->n, sizeof *g->choices);
    if (!g->choices) {
        openai_error_set(&err, 500, NULL, "out of memory");
        goto err_respond;
    }
    for (int i = 0; i < g->n; i++) {
        struct choice *c = &g->choices[i];
        const int p = i / g->n_per;
        c->g = g;
        c->index = i;
        c->stop_index = -1;
        c->stop_token = -1;
        c->n_prompt = (int32_t)n_ids[p];
        c->echo = g->echo[p];
        c->echo_len = g->echo_len[p];
        buf_init(&c->text, SERVER_MAX_TEXT);
        buf_init(&c->held_text, SERVER_MAX_TEXT);
        c->lost_ev.c = c;
        int arc = c->echo ? buf_append(&c->text, c->echo, c->echo_len) : 0;
        if (arc != 0) {
            openai_error_set(&err, 500, NULL, "cannot echo the prompt (%s)", tandem_strerror(arc));
            goto err_respond;
        }
    }
    if (kv_transfer_of(g->o.kv_transfer_params, &kvt, &kv_blocks, &err) != 0) {
        goto err_respond;
    }
    if (g->o.guide.kind != OPENAI_GUIDE_NONE &&
        structured_grammar(s, &g->o.guide, &constraint, &err) != 0) {
        goto err_respond;
    }
    if (g->span) {
        trace_request(g, &kvt);
    }
    g->req = req;
    list_push_front(&s->gens, &g->node);
    s->n_gens++;

    engine_request er = {
        .sampling = g->o.sampling,
        .stop = g->o.stop,
        .n_stop = g->o.n_stop,
        .include_stop_str_in_output = g->o.include_stop_str_in_output,
        /* hermes and mistral markers may be special tokens: keep them for the parser (vLLM's
         * adjust_request of those parsers) */
        .skip_special_tokens =
            g->o.skip_special_tokens &&
            !(kind == OPENAI_CHAT && g->o.tool_choice == OPENAI_TOOL_AUTO &&
              (s->tools.kind == TOOL_PARSER_HERMES || s->tools.kind == TOOL_PARSER_MISTRAL)),
        .priority = g->o.priority,
        .cache_salt = g->o.cache_salt,
        .lora_name = g->lora,
        .on_output = on_engine_output,
    };
    er.sampling.logprobs = g->o.logprobs;
    er.prompt_logprobs = g->o.has_prompt_logprobs;
    er.prompt_top_logprobs = g->o.has_prompt_logprobs ? (int32_t)g->o.prompt_logprobs : 0;
    er.kv_transfer = kvt.mode != ENGINE_KVT_NONE ? &kvt : NULL;
    er.guide = constraint;
    if (kind == OPENAI_EMBEDDING) {
        er.pool = s->pool;
        er.normalize = g->o.embed_normalize >= 0 ? g->o.embed_normalize != 0 : s->pool_normalize;
    }
    char eerr[512] = "", kv_id[96];
    for (int i = 0; i < g->n; i++) {
        const int p = i / g->n_per, j = i % g->n_per;
        er.prompt = ids[p];
        er.n_prompt = (int32_t)n_ids[p];
        er.max_tokens = max_tok[p];
        er.user = &g->choices[i];
        if (g->n_per > 1 && g->o.sampling.has_seed) {
            er.sampling.seed = g->o.sampling.seed + (uint64_t)j; /* per prompt, as vLLM's n */
        }
        if (kvt.mode == ENGINE_KVT_PRODUCE) {
            /* the id the decoder notifies: the response id (x-request-id based), per choice */
            snprintf(kv_id, sizeof kv_id, g->n > 1 ? "%s-%d" : "%s", g->id, i);
            kvt.request_id = kv_id;
        }
        int64_t id = engine_submit(s->e, &er, eerr, sizeof eerr);
        if (id < 0) {
            gen_abort_all(g);
            g->req = NULL;
            int st = id == -EAGAIN || id == -ESHUTDOWN ? 503
                     : id == -ENOMEM                   ? 500
                     : id == -ENOENT                   ? 404 /* the adapter was unloaded */
                                                       : 400;
            openai_error_set(&err, st, NULL, "%s", eerr);
            span_set_int(g->span, "http.response.status_code", st);
            if (st >= 500) {
                span_set_status(g->span, SPAN_STATUS_ERROR, eerr);
            }
            if (g->pending == 0) {
                gen_free(g);
            }
            free_prompt_ids(ids, n_prompts);
            free(n_ids);
            free(max_tok);
            free(kv_blocks);
            guide_grammar_unref(constraint);
            respond_openai_error(req, &err);
            return;
        }
        g->choices[i].id = id;
        g->pending++;
    }
    if (g->o.return_token_ids || g->o.echo) { /* the answer names them, or an echo's logprobs */
        g->prompt_ids = ids;
        g->n_prompt_ids = n_ids;
        ids = NULL;
        n_ids = NULL;
    }
    free_prompt_ids(ids, n_prompts);
    free(n_ids);
    free(max_tok);
    free(kv_blocks);
    guide_grammar_unref(constraint); /* each request holds its own reference */
    http_request_on_abort(req, on_client_abort, g);
    if (g->o.stream) {
        http_stream_start(req, 200, "text/event-stream");
        if (g->rs) {
            rs_stream_start(g);
        } else if (kind == OPENAI_CHAT) {
            struct openai_meta meta;
            fill_meta(g, &meta);
            for (int i = 0; i < g->n && g->req; i++) {
                struct openai_choice oc = {.index = i};
                struct buf json;
                buf_init(&json, SERVER_MAX_BODY_OUT);
                int crc = openai_build_chat_chunk(&meta, &oc, 1, 1, NULL, &json);
                if (crc == 0) {
                    send_chunk_json(g, &json);
                }
                buf_free(&json);
                if (crc != 0) {
                    gen_fail(g, "cannot build a stream chunk (%s)", tandem_strerror(crc));
                }
            }
        }
        /* a completion's echo goes out with its first output (stream_event), as vLLM's */
    }
    return;

err_respond:
    guide_grammar_unref(constraint);
    free_prompt_ids(ids, n_prompts);
    free(n_ids);
    free(max_tok);
    free(kv_blocks);
    free(prompt_text);
    if (g->rs) {
        responses_fix_error(&err); /* a chat field's name → its Responses name */
    }
    gen_trace_fail(g, err.status, err.message);
    respond_openai_error(req, &err);
    openai_request_deinit(&g->o);
    scoring_request_deinit(&g->sc);
    responses_request_free(g->rs);
    gen_free_echo(g);
    for (int i = 0; g->choices && i < g->n; i++) {
        buf_free(&g->choices[i].text);
    }
    free(g->choices);
    free(g->prompt_text);
    free(g);
}

/* The http_server gate: vLLM's API key check before any routing, so an unknown /v1 path is a
 * 401 without a key and a 404 with one, as behind vLLM's middleware. */
static int auth_gate(struct http_request *req, void *ud)
{
    const struct engine_server *s = ud;
    if (api_keys_allow(s->keys, http_request_method(req), http_request_path(req),
                       http_request_header(req, "authorization"))) {
        return 0;
    }
    http_respond_json(req, 401, API_KEYS_UNAUTHORIZED_BODY);
    return 1;
}

static void h_completions(struct http_request *req, void *ud)
{
    handle_generate(req, ud, OPENAI_COMPLETION, SCORING_NONE);
}

static void h_chat(struct http_request *req, void *ud)
{
    handle_generate(req, ud, OPENAI_CHAT, SCORING_NONE);
}

static void h_embeddings(struct http_request *req, void *ud)
{
    handle_generate(req, ud, OPENAI_EMBEDDING, SCORING_NONE);
}

static void h_score(struct http_request *req, void *ud)
{
    handle_generate(req, ud, OPENAI_EMBEDDING, SCORING_SCORE);
}

static void h_rerank(struct http_request *req, void *ud)
{
    handle_generate(req, ud, OPENAI_EMBEDDING, SCORING_RERANK);
}

static void h_pooling(struct http_request *req, void *ud)
{
    handle_generate(req, ud, OPENAI_EMBEDDING, SCORING_POOLING);
}

static void h_responses(struct http_request *req, void *ud)
{
    handle_generate(req, ud, OPENAI_CHAT, SCORING_NONE); /* the path makes it a Responses one */
}

static void h_health(struct http_request *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, NULL, "", 0);
}

static void h_version(struct http_request *req, void *ud)
{
    (void)ud;
    http_respond_json(req, 200, "{\"version\":\"" SERVER_VERSION "\"}");
}

static void h_models(struct http_request *req, void *ud)
{
    struct engine_server *s = ud;
    struct buf out;
    buf_init(&out, 1 << 20);
    lora_info *loras = NULL;
    size_t n_loras = 0;
    lora_registry *r = engine_loras(s->e);
    const char **names = NULL, **roots = NULL;
    int rc = r ? lora_registry_list(r, &loras, &n_loras) : 0;
    if (rc == 0 && n_loras > 0) {
        names = calloc(n_loras, sizeof *names);
        roots = calloc(n_loras, sizeof *roots);
        rc = names && roots ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < n_loras; i++) {
            names[i] = loras[i].name;
            roots[i] = loras[i].path;
        }
    }
    if (rc == 0 &&
        openai_build_models(s->served_name, s->model_root, s->created, engine_max_model_len(s->e),
                            names, roots, n_loras, &out) == 0) {
        http_respond_json(req, 200, out.data);
    } else {
        http_respond_error(req, 500, "InternalServerError", "cannot build the model list", NULL);
    }
    free(names);
    free(roots);
    lora_info_free(loras, n_loras);
    buf_free(&out);
}

/* POST /v1/load_lora_adapter and /v1/unload_lora_adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING):
 * vLLM answers a success as plain text. */
static void lora_update(struct http_request *req, struct engine_server *s, bool load)
{
    size_t blen = 0;
    const char *body = http_request_body(req, &blen);
    char msg[512];
    struct openai_error err;
    memset(&err, 0, sizeof err);
    lora_registry *r = engine_loras(s->e);
    int rc = load ? lora_api_load(r, body, blen, msg, sizeof msg, &err)
                  : lora_api_unload(r, body, blen, msg, sizeof msg, &err);
    if (rc != 0) {
        respond_openai_error(req, &err);
        return;
    }
    log_info("%s", msg);
    http_respond(req, 200, "text/plain; charset=utf-8", msg, strlen(msg));
}

static void h_load_lora(struct http_request *req, void *ud)
{
    lora_update(req, ud, true);
}

static void h_unload_lora(struct http_request *req, void *ud)
{
    lora_update(req, ud, false);
}

static void h_tokenize(struct http_request *req, void *ud)
{
    struct engine_server *s = ud;
    size_t blen = 0;
    const char *body = http_request_body(req, &blen);
    struct openai_request o;
    struct openai_error err;
    memset(&err, 0, sizeof err);
    int want_strs = 0;
    if (openai_parse_tokenize(body ? body : "", blen, &o, &want_strs, &err) != 0) {
        respond_openai_error(req, &err);
        return;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    size_t tl = 0;
    const char **strs = NULL;
    size_t *lens = NULL;
    struct buf out;
    buf_init(&out, SERVER_MAX_BODY_OUT);
    if (check_model(s, o.model, NULL, &err) != 0 ||
        prompt_build(&s->pc, &o, &ids, &n, &text, &tl, &err) != 0) {
        respond_openai_error(req, &err);
        goto out;
    }
    if (want_strs) {
        strs = calloc(n ? n : 1, sizeof *strs);
        lens = calloc(n ? n : 1, sizeof *lens);
        if (!strs || !lens) {
            http_respond_error(req, 500, "InternalServerError", "out of memory", NULL);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            strs[i] = tokenizer_piece(s->tok, ids[i], &lens[i]);
        }
    }
    if (openai_build_tokenize(ids, n, engine_max_model_len(s->e), strs, lens, &out) == 0) {
        http_respond_json(req, 200, out.data);
    } else {
        http_respond_error(req, 500, "InternalServerError", "cannot build the response", NULL);
    }
out:
    buf_free(&out);
    free(strs);
    free(lens);
    free(ids);
    free(text);
    openai_request_deinit(&o);
}

static void h_detokenize(struct http_request *req, void *ud)
{
    struct engine_server *s = ud;
    size_t blen = 0;
    const char *body = http_request_body(req, &blen);
    struct json_object *root = NULL;
    const char *model_name = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    struct openai_error err;
    memset(&err, 0, sizeof err);
    if (openai_parse_detokenize(body ? body : "", blen, &root, &model_name, &ids, &n, &err) != 0) {
        respond_openai_error(req, &err);
        return;
    }
    int32_t nv = tokenizer_n_vocab(s->tok);
    char *text = NULL;
    size_t tl = 0;
    struct buf out;
    buf_init(&out, SERVER_MAX_BODY_OUT);
    if (check_model(s, model_name, NULL, &err) != 0) {
        respond_openai_error(req, &err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= nv) {
            openai_error_set(&err, 400, "tokens", "token id %d at index %zu is out of vocabulary",
                             (int)ids[i], i);
            respond_openai_error(req, &err);
            goto out;
        }
    }
    if (tokenizer_decode(s->tok, ids, n, false, &text, &tl) != 0 ||
        openai_build_detokenize(text, tl, &out) != 0) {
        http_respond_error(req, 500, "InternalServerError", "cannot detokenize", NULL);
        goto out;
    }
    http_respond_json(req, 200, out.data);
out:
    buf_free(&out);
    free(text);
    free(ids);
    json_object_put(root);
}

int engine_server_tokenizer_info(struct engine_server *s, const char **body, size_t *len,
                                 const char **etag, char *err, size_t errlen)
{
    if (!s->info_etag[0]) {
        engine_stats st;
        engine_get_stats(s->e, &st);
        struct tokenizer_info_params p = {
            .m = engine_model(s->e),
            .tok = s->tok,
            .served_model_name = s->served_name,
            .chat_template = s->template_src,
            .max_model_len = engine_max_model_len(s->e),
            .block_size = st.block_size,
            .hash_seed = s->hash_seed,
            .prefix_caching = !s->prefix_caching_off,
        };
        buf_reset(&s->info);
        int rc = tokenizer_info_build(&p, &s->info, s->info_etag, sizeof s->info_etag, err, errlen);
        if (rc != 0) {
            s->info_etag[0] = '\0';
            return rc;
        }
    }
    *body = s->info.data;
    *len = s->info.len;
    *etag = s->info_etag;
    return 0;
}

static void h_tokenizer_info(struct http_request *req, void *ud)
{
    struct engine_server *s = ud;
    const char *body = NULL, *etag = NULL;
    size_t len = 0;
    char err[512] = "";
    if (engine_server_tokenizer_info(s, &body, &len, &etag, err, sizeof err) != 0) {
        log_error("/tokenizer_info: %s", err);
        http_respond_error(req, 500, "InternalServerError", err, NULL);
        return;
    }
    http_add_header(req, "ETag", etag);
    http_add_header(req, "Cache-Control", "no-cache");
    const char *inm = http_request_header(req, "if-none-match");
    if (inm && strcmp(inm, etag) == 0) {
        http_respond(req, 304, NULL, "", 0);
        return;
    }
    http_respond(req, 200, "application/json", body, len);
}

struct engine_server *engine_server_new(uv_loop_t *loop, struct http_server *srv, engine *e,
                                        const struct engine_server_config *cfg, char *err,
                                        size_t errlen)
{
    struct engine_server *s = calloc(1, sizeof *s);
    if (!s) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->srv = srv;
    s->e = e;
    s->tok = engine_tokenizer(e);
    const model *m = engine_model(e);
    s->served_name = strdup(cfg->served_model_name ? cfg->served_model_name : m->name);
    s->model_root = strdup(cfg->model_root ? cfg->model_root : m->path);
    const char *tmpl = cfg->chat_template ? cfg->chat_template : m->chat_template;
    if (!tmpl) {
        log_info("the model has no chat template; using the built-in chatml template");
        tmpl = chat_template_builtin("chatml");
    }
    s->log_requests = cfg->log_requests;
    s->tracer = cfg->tracer;
    if (s->tracer) {
        engine_stats est;
        engine_get_stats(e, &est);
        s->kv_block_bytes = (size_t)2 * (size_t)m->cfg.n_layer * (size_t)m->cfg.n_head_kv *
                            (size_t)m->cfg.head_dim * (size_t)est.block_size *
                            (size_t)est.kv_dtype_bytes;
    }
    s->hash_seed = cfg->prefix_hash_seed;
    s->prefix_caching_off = cfg->disable_prefix_caching;
    buf_init(&s->info, TOKENIZER_MAX_JSON_BYTES * 2);
    s->template_src = strdup(tmpl);
    if (cfg->defaults) {
        s->defaults = *cfg->defaults;
    }
    s->created = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    list_init(&s->gens);
    list_init(&s->queue);
    if (!s->served_name || !s->model_root || !s->template_src) {
        tandem_set_err(err, errlen, "out of memory");
        goto err_free;
    }
    char terr[512] = "";
    s->ct = chat_template_new(tmpl, m->bos_token, m->eos_token, terr, sizeof terr);
    if (!s->ct) {
        tandem_set_err(err, errlen, "chat template: %s", terr);
        goto err_free;
    }
    s->pc = (struct prompt_ctx){
        .tok = s->tok, .ct = s->ct, .bos_token = m->bos_token, .eos_token = m->eos_token};
    enum tool_parser_kind tk = TOOL_PARSER_NONE;
    if (cfg->tool_call_parser && tool_parser_kind_from_name(cfg->tool_call_parser, &tk) != 0) {
        tandem_set_err(err, errlen, "unknown tool call parser '%s'", cfg->tool_call_parser);
        goto err_free;
    }
    tool_parser_init(&s->tools, tk);
    s->pool = ENGINE_POOL_LAST; /* vLLM's default for a causal LM run as an embedding model */
    s->pool_normalize = true;
    if (cfg->pooler_config && engine_pooler_config_parse(cfg->pooler_config, &s->pool,
                                                         &s->pool_normalize, err, errlen) != 0) {
        goto err_free;
    }
    s->tools.mistral_args_token = tokenizer_token_id(s->tok, "[ARGS]", 6) >= 0;
    s->auto_tools = cfg->enable_auto_tool_choice && tk != TOOL_PARSER_NONE;
    s->keys = api_keys_new(cfg->api_keys, cfg->n_api_keys, err, errlen);
    if (!s->keys) {
        goto err_free;
    }
    if (api_keys_count(s->keys) > 0) {
        http_server_set_gate(srv, auth_gate, s);
        log_info("API key authentication on: %zu key(s) for /v1/*", api_keys_count(s->keys));
    }
    if (uv_async_init(loop, &s->async, on_async) != 0) {
        tandem_set_err(err, errlen, "cannot create the engine wake-up handle");
        goto err_free;
    }
    s->async.data = s;
    s->async_open = 1;
    if (http_server_route(srv, "POST", "/v1/completions", 0, h_completions, s) != 0 ||
        http_server_route(srv, "POST", "/v1/chat/completions", 0, h_chat, s) != 0 ||
        http_server_route(srv, "POST", "/v1/embeddings", 0, h_embeddings, s) != 0 ||
        http_server_route(srv, "POST", "/score", 0, h_score, s) != 0 ||
        http_server_route(srv, "POST", "/v1/score", 0, h_score, s) != 0 ||
        http_server_route(srv, "POST", "/rerank", 0, h_rerank, s) != 0 ||
        http_server_route(srv, "POST", "/v1/rerank", 0, h_rerank, s) != 0 ||
        http_server_route(srv, "POST", "/v2/rerank", 0, h_rerank, s) != 0 ||
        http_server_route(srv, "POST", "/pooling", 0, h_pooling, s) != 0 ||
        http_server_route(srv, "POST", "/v1/responses", 0, h_responses, s) != 0 ||
        http_server_route(srv, "GET", "/v1/responses", 1, h_responses_stored, s) != 0 ||
        http_server_route(srv, "POST", "/v1/responses", 1, h_responses_stored, s) != 0 ||
        http_server_route(srv, "GET", "/v1/models", 0, h_models, s) != 0 ||
        http_server_route(srv, "GET", "/health", 0, h_health, s) != 0 ||
        http_server_route(srv, NULL, "/ping", 0, h_health, s) != 0 ||
        http_server_route(srv, "GET", "/version", 0, h_version, s) != 0 ||
        http_server_route(srv, "POST", "/tokenize", 0, h_tokenize, s) != 0 ||
        http_server_route(srv, "POST", "/detokenize", 0, h_detokenize, s) != 0 ||
        http_server_route(srv, "GET", "/tokenizer_info", 0, h_tokenizer_info, s) != 0 ||
        (engine_loras(e) && lora_runtime_updating_allowed() &&
         (http_server_route(srv, "POST", "/v1/load_lora_adapter", 0, h_load_lora, s) != 0 ||
          http_server_route(srv, "POST", "/v1/unload_lora_adapter", 0, h_unload_lora, s) != 0))) {
        tandem_set_err(err, errlen, "cannot register the routes");
        engine_server_free(s);
        return NULL;
    }
    return s;

err_free:
    api_keys_free(s->keys);
    free(s->served_name);
    free(s->model_root);
    free(s->template_src);
    buf_free(&s->info);
    chat_template_free(s->ct);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

int engine_server_in_flight(const struct engine_server *s)
{
    return s->n_gens;
}

static void on_async_closed(uv_handle_t *h)
{
    (void)h;
}

void engine_server_free(struct engine_server *s)
{
    if (!s) {
        return;
    }
    drain_queue(s); /* final outputs of aborted sequences */
    while (!list_empty(&s->gens)) {
        struct gen *g = list_entry(s->gens.next, struct gen, node);
        g->req = NULL; // NOLINT(clang-analyzer-unix.Malloc): gen_free unlinked the old head
        gen_free(g);
    }
    pthread_mutex_lock(&s->mu);
    int open = s->async_open;
    s->async_open = 0;
    pthread_mutex_unlock(&s->mu);
    if (open) {
        uv_close((uv_handle_t *)&s->async, on_async_closed);
        uv_run(s->loop, UV_RUN_NOWAIT);
    }
    api_keys_free(s->keys);
    free(s->served_name);
    free(s->model_root);
    free(s->template_src);
    buf_free(&s->info);
    chat_template_free(s->ct);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
