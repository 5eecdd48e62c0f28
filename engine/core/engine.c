/*
 * The engine step loop (see engine.h). Requests live in `ereq` wrappers that pair the
 * scheduler's request with the per-sequence sampler state, stop-string matcher and incremental
 * detokenizer. The engine lock guards the scheduler, the KV block manager and the request lists;
 * the forward pass, sampling and the output processor (text, stop strings, callbacks) run
 * without it, so submissions, aborts and stats never wait for a step's compute or its text.
 */
#include "engine/core/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler/stop.h"
#include "lib/buf.h"
#include "lib/common.h"
#include "lib/clock.h"
#include "lib/err.h"
#include "lib/list.h"
#include "lib/log.h"
#include "lib/metrics.h"

#define ENGINE_DEFAULT_KV_BYTES ((size_t)1 << 30)
#define ENGINE_TEXT_CAP         ((size_t)1 << 20) /* bytes of text one step may emit per sequence */

typedef struct ereq {
    uint64_t id;
    sched_req *sr;
    struct sampling_params sp;
    int32_t *stop_ids; /* owned copy of sp.stop_token_ids */
    struct sampler_state st;
    struct stop_matcher stop;
    bool has_stop;
    detok dt;
    int32_t *teacher;
    int32_t n_teacher;
    bool return_logits;
    bool include_stop;
    engine_output_fn cb;
    void *user;
    double t_arrival, t_first, t_last;
    struct list_node live_node;  /* in engine.live */
    struct list_node abort_node; /* in engine.aborts while an abort is queued */
} ereq;

/* What the core hands the output processor about one sequence of a step, after sched_update
 * (vLLM's EngineCoreOutput): the token and whether the core ended the request. */
typedef struct core_output {
    ereq *r;
    int32_t n_before;    /* tokens generated before this step (teacher forcing) */
    int32_t token;       /* sampled (or teacher) token */
    sched_status status; /* RUNNING, or the FINISHED_* the core decided (length, stop token) */
    int32_t stop_token;  /* the stop token that finished it, or -1 */
    int error;           /* the core could not keep the token (-ENOMEM): status is ABORTED */
    sched_status end;    /* output processor: FINISHED_* the core must still apply (stop string,
                            lost text), RUNNING when none */
} core_output;

struct engine_metrics {
    struct metric *running, *waiting, *kv_usage, *cache_info;
    struct metric *prompt_tokens, *generation_tokens, *prefix_queries, *prefix_hits, *preemptions;
    struct metric *success_stop, *success_length, *success_abort;
    struct metric *ttft, *itl, *e2e, *tpot;
};

struct engine {
    const model *m;
    const tokenizer *tok;
    engine_config cfg;
    const backend_ops *ops;
    backend *be;
    kvc *kv;
    sched *s;
    int32_t n_vocab;
    int32_t max_model_len;
    int32_t num_blocks;
    int32_t *eog_ids; /* end-of-generation ids of the tokenizer */
    size_t n_eog;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_started;
    bool stop_thread;
    bool shutting_down;
    uint64_t next_id;
    struct list_node live;   /* every unfinished request (ereq.live_node), newest first */
    struct list_node aborts; /* ereq.abort_node: to abort at the next step boundary */

    /* step buffers */
    int32_t *tok_buf;
    fwd_seq *seq_buf;
    float *logits;                 /* [max_num_seqs][n_vocab] */
    float *raw_row;                /* [n_vocab] copy for return_logits */
    int32_t *sampled;              /* [max_num_seqs] */
    struct sample_result *results; /* [max_num_seqs] */
    core_output *outs;             /* [max_num_seqs] the step's sequences that got a token */
    struct sampler_scratch scratch;
    struct buf text; /* emitted text of one sequence in one step (output processor) */

    bool has_metrics;
    struct engine_metrics mx;
};

/* ---- metrics ---- */

static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                      0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                      20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_buckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                     0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double e2e_buckets[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                     5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                     60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

static struct metric *family_child(struct metric_family *f, const char *model_name)
{
    if (!f) {
        return NULL;
    }
    const char *vals[] = {model_name, "0"};
    return metrics_child(f, vals);
}

static int metrics_setup(engine *e, const char *model_name)
{
    struct metrics_registry *r = e->cfg.metrics;
    struct engine_metrics *x = &e->mx;
    const char *labels[] = {"model_name", "engine"};
    x->running =
        family_child(metrics_gauge_new(r, "vllm:num_requests_running",
                                       "Number of requests in model execution batches.", 2, labels),
                     model_name);
    x->waiting =
        family_child(metrics_gauge_new(r, "vllm:num_requests_waiting",
                                       "Number of requests waiting to be processed.", 2, labels),
                     model_name);
    x->kv_usage =
        family_child(metrics_gauge_new(r, "vllm:kv_cache_usage_perc",
                                       "KV-cache usage. 1 means 100 percent usage.", 2, labels),
                     model_name);
    x->prompt_tokens =
        family_child(metrics_counter_new(r, "vllm:prompt_tokens_total",
                                         "Number of prefill tokens processed.", 2, labels),
                     model_name);
    x->generation_tokens =
        family_child(metrics_counter_new(r, "vllm:generation_tokens_total",
                                         "Number of generation tokens processed.", 2, labels),
                     model_name);
    x->prefix_queries =
        family_child(metrics_counter_new(
                         r, "vllm:prefix_cache_queries_total",
                         "Prefix cache queries, in terms of number of queried tokens.", 2, labels),
                     model_name);
    x->prefix_hits = family_child(
        metrics_counter_new(r, "vllm:prefix_cache_hits_total",
                            "Prefix cache hits, in terms of number of cached tokens.", 2, labels),
        model_name);
    x->preemptions = family_child(metrics_counter_new(r, "vllm:num_preemptions_total",
                                                      "Cumulative number of preemption from the "
                                                      "engine.",
                                                      2, labels),
                                  model_name);
    const char *slabels[] = {"model_name", "engine", "finished_reason"};
    struct metric_family *succ = metrics_counter_new(
        r, "vllm:request_success_total", "Count of successfully processed requests.", 3, slabels);
    if (succ) {
        const char *v_stop[] = {model_name, "0", "stop"};
        const char *v_len[] = {model_name, "0", "length"};
        const char *v_abort[] = {model_name, "0", "abort"};
        x->success_stop = metrics_child(succ, v_stop);
        x->success_length = metrics_child(succ, v_len);
        x->success_abort = metrics_child(succ, v_abort);
    }
    x->ttft = family_child(metrics_histogram_new(r, "vllm:time_to_first_token_seconds",
                                                 "Histogram of time to first token in seconds.", 2,
                                                 labels, ttft_buckets, ARRAY_SIZE(ttft_buckets)),
                           model_name);
    x->itl = family_child(metrics_histogram_new(r, "vllm:inter_token_latency_seconds",
                                                "Histogram of inter-token latency in seconds.", 2,
                                                labels, itl_buckets, ARRAY_SIZE(itl_buckets)),
                          model_name);
    x->tpot = family_child(metrics_histogram_new(r, "vllm:request_time_per_output_token_seconds",
                                                 "Histogram of time_per_output_token_seconds per "
                                                 "request.",
                                                 2, labels, itl_buckets, ARRAY_SIZE(itl_buckets)),
                           model_name);
    x->e2e = family_child(metrics_histogram_new(r, "vllm:e2e_request_latency_seconds",
                                                "Histogram of e2e request latency in seconds.", 2,
                                                labels, e2e_buckets, ARRAY_SIZE(e2e_buckets)),
                          model_name);
    char bs[32], nb[32];
    snprintf(bs, sizeof bs, "%d", (int)kvc_block_size(e->kv));
    snprintf(nb, sizeof nb, "%d", (int)e->num_blocks);
    const char *clabels[] = {"block_size", "num_gpu_blocks", "cache_dtype", "enable_prefix_caching",
                             "engine"};
    const char *cvals[] = {bs, nb, e->cfg.kv_dtype == ENGINE_KV_F32 ? "float32" : "float16",
                           e->cfg.disable_prefix_caching ? "False" : "True", "0"};
    struct metric_family *ci = metrics_gauge_new(
        r, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 5, clabels);
    x->cache_info = ci ? metrics_child(ci, cvals) : NULL;
    if (x->cache_info) {
        metric_set(x->cache_info, 1);
    }
    if (!x->running || !x->waiting || !x->kv_usage || !x->prompt_tokens || !x->generation_tokens ||
        !x->prefix_queries || !x->prefix_hits || !x->preemptions || !x->success_stop || !x->ttft ||
        !x->itl || !x->e2e || !x->tpot || !x->cache_info) {
        return -EINVAL;
    }
    return 0;
}

/* Mirrors the scheduler's counters into the metric families; called with the lock held. */
static void metrics_update(engine *e)
{
    if (!e->has_metrics) {
        return;
    }
    metric_set(e->mx.running, sched_num_running(e->s));
    metric_set(e->mx.waiting, sched_num_waiting(e->s));
    metric_set(e->mx.kv_usage, sched_kv_usage(e->s));
    metric_set(e->mx.prompt_tokens, (double)sched_prompt_tokens_total(e->s));
    metric_set(e->mx.generation_tokens, (double)sched_generation_tokens_total(e->s));
    metric_set(e->mx.prefix_queries, (double)sched_prefix_queries(e->s));
    metric_set(e->mx.prefix_hits, (double)sched_prefix_hits(e->s));
    metric_set(e->mx.preemptions, (double)sched_num_preemptions(e->s));
}

/* ---- requests ---- */

static void ereq_free(ereq *r)
{
    if (!r) {
        return;
    }
    sampler_state_deinit(&r->st);
    if (r->has_stop) {
        stop_matcher_deinit(&r->stop);
    }
    detok_free(&r->dt);
    free(r->stop_ids);
    free(r->teacher);
    free(r);
}

/* Core half of ending a request (engine lock held): the scheduler lets go of it (with status,
 * unless the scheduler finished it already) and it leaves the live list, so engine_abort no
 * longer finds it. Its final output is reported afterwards, without the lock (report_finish). */
static void core_end(engine *e, ereq *r, sched_status status)
{
    if (!sched_status_finished(r->sr->status)) {
        sched_finish(e->s, r->sr, status);
    }
    list_unlink(&r->live_node);
    list_unlink(&r->abort_node);
}

/* Frees a request the core has ended (no lock needed: nothing else refers to it). */
static void ereq_release(ereq *r)
{
    sched_req_free(NULL, r->sr);
    ereq_free(r);
}

/* Fills the request's fields of an output (id, user, counts). */
static void output_fill(const ereq *r, engine_output *o)
{
    const sched_req *sr = r->sr;
    o->id = r->id;
    o->user = r->user;
    o->n_prompt = sr->n_prompt;
    o->n_generated = sr->num_output_tokens;
    o->n_cached = sr->num_cached_tokens > 0 ? sr->num_cached_tokens : 0;
    if (!o->text) {
        o->text = "";
    }
}

/* Reports a request's final output (o: what the step produced, status FINISHED_*), without the
 * engine lock, and records its finish metrics. The caller releases it once the core ended it. */
static void report_finish(engine *e, ereq *r, engine_output *o)
{
    sched_req *sr = r->sr;
    sched_status status = o->status;
    output_fill(r, o);
    o->finished = true;
    if (r->cb) {
        r->cb(r->user, o);
    }
    if (e->has_metrics) {
        double t = tandem_now_s();
        struct metric *succ = status == SCHED_FINISHED_STOPPED  ? e->mx.success_stop
                              : status == SCHED_FINISHED_LENGTH ? e->mx.success_length
                                                                : e->mx.success_abort;
        metric_inc(succ, 1);
        metric_observe(e->mx.e2e, t - r->t_arrival);
        if (sr->num_output_tokens > 1 && r->t_first > 0) {
            metric_observe(e->mx.tpot, (r->t_last - r->t_first) / (sr->num_output_tokens - 1));
        }
    }
}

/* Ends the requests whose abort is queued (lock held), moving them to done (by live_node) for
 * report_aborted. */
static void take_aborts(engine *e, struct list_node *done)
{
    while (!list_empty(&e->aborts)) {
        ereq *r = list_entry(e->aborts.next, ereq, abort_node);
        core_end(e, r, SCHED_FINISHED_ABORTED);
        list_push_back(done, &r->live_node);
    }
}

/* Ends every live request (lock held), newest first, moving them to done. */
static void take_all(engine *e, struct list_node *done)
{
    while (!list_empty(&e->live)) {
        ereq *r = list_entry(e->live.next, ereq, live_node);
        core_end(e, r, SCHED_FINISHED_ABORTED);
        list_push_back(done, &r->live_node);
    }
}

/* Reports and releases the aborted requests of done (lock not held). */
static void report_aborted(engine *e, struct list_node *done)
{
    struct list_node *n, *tmp;
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): a node is freed after its successor was read
    list_for_each_safe(done, n, tmp)
    {
        ereq *r = list_entry(n, ereq, live_node);
        engine_output o = {
            .token = -1, .status = SCHED_FINISHED_ABORTED, .stop_index = -1, .stop_token = -1};
        report_finish(e, r, &o);
        ereq_release(r);
    }
    list_init(done);
}

/* ---- creation ---- */

static int collect_eog(engine *e)
{
    size_t n = 0, cap = 8;
    e->eog_ids = malloc(cap * sizeof *e->eog_ids);
    if (!e->eog_ids) {
        return -ENOMEM;
    }
    int32_t nv = tokenizer_n_vocab(e->tok);
    for (int32_t id = 0; id < nv && n < SAMPLER_MAX_STOP_IDS / 2; id++) {
        if (!tokenizer_is_eog(e->tok, id)) {
            continue;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *p = realloc(e->eog_ids, cap * sizeof *p);
            if (!p) {
                return -ENOMEM;
            }
            e->eog_ids = p;
        }
        e->eog_ids[n++] = id;
    }
    e->n_eog = n;
    return 0;
}

engine *engine_new(const model *m, const tokenizer *tok, const engine_config *cfg, char *err,
                   size_t errlen)
{
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        tandem_set_err(err, errlen, "out of memory");
        return NULL;
    }
    if (cfg) {
        e->cfg = *cfg;
    }
    e->m = m;
    e->tok = tok;
    e->ops = e->cfg.backend ? e->cfg.backend : &cpu_backend_ops;
    e->n_vocab = m->cfg.n_vocab;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    list_init(&e->live);
    list_init(&e->aborts);
    sampler_scratch_init(&e->scratch);
    buf_init(&e->text, ENGINE_TEXT_CAP);

    engine_config *c = &e->cfg;
    if (tokenizer_n_vocab(tok) > e->n_vocab) {
        tandem_set_err(err, errlen, "tokenizer has %d tokens but the model's vocabulary is %d",
                       (int)tokenizer_n_vocab(tok), (int)e->n_vocab);
        goto err_free;
    }
    int32_t ctx = m->cfg.n_ctx_train > 0 ? m->cfg.n_ctx_train : 2048;
    if (c->max_model_len < 0 || c->max_num_seqs < 0 || c->max_num_batched_tokens < 0 ||
        c->block_size < 0 || c->max_waiting < 0) {
        tandem_set_err(err, errlen, "engine limits must not be negative");
        goto err_free;
    }
    if (c->max_model_len == 0) {
        c->max_model_len = ctx;
    } else if (c->max_model_len > ctx) {
        tandem_set_err(err, errlen,
                       "--max-model-len %d is larger than the model's context length %d "
                       "(max_position_embeddings / context_length)",
                       (int)c->max_model_len, (int)ctx);
        goto err_free;
    }
    if (c->max_model_len < 2) {
        tandem_set_err(err, errlen, "--max-model-len must be at least 2");
        goto err_free;
    }
    if (c->max_num_seqs == 0) {
        c->max_num_seqs = 128;
    }
    if (c->max_num_batched_tokens == 0) {
        c->max_num_batched_tokens = 2048;
        if (c->disable_chunked_prefill && c->max_num_batched_tokens < c->max_model_len) {
            c->max_num_batched_tokens = c->max_model_len;
        }
    }
    if (c->max_num_batched_tokens < c->max_num_seqs) {
        c->max_num_batched_tokens = c->max_num_seqs;
    }
    if (c->block_size == 0) {
        c->block_size = 16;
    }
    if (c->block_size > KVC_MAX_BLOCK_SIZE) {
        tandem_set_err(err, errlen, "--block-size %d is larger than %d", (int)c->block_size,
                       KVC_MAX_BLOCK_SIZE);
        goto err_free;
    }
    if (c->max_waiting == 0) {
        c->max_waiting = 1024;
    }
    if (c->kv_dtype == ENGINE_KV_AUTO) {
        c->kv_dtype = m->tok_embd && m->tok_embd->type == TD_F32 && m->layers &&
                              m->layers[0].wq->type == TD_F32
                          ? ENGINE_KV_F32
                          : ENGINE_KV_F16;
    }
    kv_dtype kdt = c->kv_dtype == ENGINE_KV_F32 ? KV_DTYPE_F32 : KV_DTYPE_F16;
    size_t block_bytes = e->ops->kv_block_bytes(m, c->block_size, kdt);
    if (block_bytes == 0) {
        tandem_set_err(err, errlen, "backend reports 0 bytes per KV block");
        goto err_free;
    }
    int64_t per_seq = (c->max_model_len + c->block_size - 1) / c->block_size;
    int64_t needed = (int64_t)c->max_num_seqs * per_seq + 1;
    size_t budget = c->kv_cache_bytes ? c->kv_cache_bytes : ENGINE_DEFAULT_KV_BYTES;
    int64_t fit = (int64_t)(budget / block_bytes);
    int64_t nblocks = fit < needed ? fit : needed;
    if (nblocks > KVC_MAX_BLOCKS) {
        nblocks = KVC_MAX_BLOCKS;
    }
    if (nblocks - 1 < per_seq) {
        tandem_set_err(err, errlen,
                       "--kv-cache-memory %zu bytes holds %" PRId64
                       " blocks of %d tokens (%zu bytes "
                       "each), but --max-model-len %d needs %" PRId64
                       ": raise --kv-cache-memory or lower --max-model-len",
                       budget, nblocks > 0 ? nblocks - 1 : 0, (int)c->block_size, block_bytes,
                       (int)c->max_model_len, per_seq);
        goto err_free;
    }
    e->num_blocks = (int32_t)nblocks;
    e->max_model_len = c->max_model_len;

    backend_config bc = {
        .num_blocks = e->num_blocks,
        .block_size = c->block_size,
        .kv_dtype = kdt,
        .max_batch_tokens = c->max_num_batched_tokens,
        .max_seqs = c->max_num_seqs,
        .n_threads = c->n_threads,
        .pin_threads = c->pin_threads,
    };
    e->be = e->ops->create(m, &bc, err, errlen);
    if (!e->be) {
        goto err_free;
    }
    const kvc_event_sink *sink =
        (c->kv_events.stored || c->kv_events.removed || c->kv_events.all_cleared) ? &c->kv_events
                                                                                  : NULL;
    e->kv = kvc_new(e->num_blocks, c->block_size, !c->disable_prefix_caching, c->prefix_hash_seed,
                    sink);
    if (!e->kv) {
        tandem_set_err(err, errlen, "cannot create the KV block manager (%d blocks)",
                       (int)e->num_blocks);
        goto err_free;
    }
    sched_config sc;
    sched_config_default(&sc);
    sc.max_num_seqs = c->max_num_seqs;
    sc.max_num_batched_tokens = c->max_num_batched_tokens;
    sc.max_model_len = c->max_model_len;
    sc.long_prefill_token_threshold = c->long_prefill_token_threshold;
    sc.enable_chunked_prefill = !c->disable_chunked_prefill;
    sc.policy = c->policy;
    sc.max_waiting = c->max_waiting;
    sc.block_size = c->block_size;
    e->s = sched_new(&sc, e->kv, err, errlen);
    if (!e->s) {
        goto err_free;
    }
    size_t nseq = (size_t)c->max_num_seqs;
    e->tok_buf = malloc((size_t)c->max_num_batched_tokens * sizeof *e->tok_buf);
    e->seq_buf = malloc(nseq * sizeof *e->seq_buf);
    e->logits = malloc(nseq * (size_t)e->n_vocab * sizeof *e->logits);
    e->raw_row = malloc((size_t)e->n_vocab * sizeof *e->raw_row);
    e->sampled = malloc(nseq * sizeof *e->sampled);
    e->results = malloc(nseq * sizeof *e->results);
    e->outs = malloc(nseq * sizeof *e->outs);
    if (!e->tok_buf || !e->seq_buf || !e->logits || !e->raw_row || !e->sampled || !e->results ||
        !e->outs || collect_eog(e) != 0) {
        tandem_set_err(err, errlen, "out of memory allocating step buffers");
        goto err_free;
    }
    if (c->metrics) {
        const char *name = c->served_model_name ? c->served_model_name : m->name;
        if (metrics_setup(e, name ? name : "model") != 0) {
            tandem_set_err(err, errlen, "cannot register the vllm:* metrics (already registered?)");
            goto err_free;
        }
        e->has_metrics = true;
        metrics_update(e);
    }
    return e;

err_free:
    engine_free(e);
    return NULL;
}

void engine_free(engine *e)
{
    if (!e) {
        return;
    }
    engine_stop(e);
    struct list_node done;
    list_init(&done);
    pthread_mutex_lock(&e->mu);
    if (e->s) {
        take_all(e, &done);
    }
    pthread_mutex_unlock(&e->mu);
    report_aborted(e, &done);
    sched_free(e->s);
    kvc_free(e->kv);
    if (e->be) {
        e->ops->destroy(e->be);
    }
    free(e->tok_buf);
    free(e->seq_buf);
    free(e->logits);
    free(e->raw_row);
    free(e->sampled);
    free(e->results);
    free(e->outs);
    free(e->eog_ids);
    sampler_scratch_deinit(&e->scratch);
    buf_free(&e->text);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- submission ---- */

int64_t engine_submit(engine *e, const engine_request *r, char *err, size_t errlen)
{
    if (r->n_prompt < 1 || !r->prompt) {
        return tandem_fail(err, errlen, -EINVAL, "prompt must contain at least one token");
    }
    if (r->n_prompt >= e->max_model_len) {
        return tandem_fail(
            err, errlen, -EINVAL,
            "This model's maximum context length is %d tokens. However, your request has %d "
            "input tokens. Please reduce the length of the input messages.",
            (int)e->max_model_len, (int)r->n_prompt);
    }
    for (int32_t i = 0; i < r->n_prompt; i++) {
        if (r->prompt[i] < 0 || r->prompt[i] >= e->n_vocab) {
            return tandem_fail(err, errlen, -EINVAL,
                               "prompt token %d at index %d is out of vocabulary (size %d)",
                               (int)r->prompt[i], (int)i, (int)e->n_vocab);
        }
    }
    for (int32_t i = 0; i < r->n_teacher; i++) {
        if (r->teacher[i] < 0 || r->teacher[i] >= e->n_vocab) {
            return tandem_fail(err, errlen, -EINVAL,
                               "teacher token %d at index %d is out of vocabulary (size %d)",
                               (int)r->teacher[i], (int)i, (int)e->n_vocab);
        }
    }
    for (size_t i = 0; i < r->sampling.n_stop_token_ids; i++) {
        if (r->sampling.stop_token_ids[i] < 0 || r->sampling.stop_token_ids[i] >= e->n_vocab) {
            return tandem_fail(err, errlen, -EINVAL,
                               "stop_token_ids[%zu] = %d is out of vocabulary (size %d)", i,
                               (int)r->sampling.stop_token_ids[i], (int)e->n_vocab);
        }
    }
    ereq *q = calloc(1, sizeof *q);
    if (!q) {
        return tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    int rc;
    q->sp = r->sampling;
    if (r->sampling.n_stop_token_ids > 0) {
        q->stop_ids = malloc(r->sampling.n_stop_token_ids * sizeof *q->stop_ids);
        if (!q->stop_ids) {
            rc = -ENOMEM;
            goto err_free;
        }
        memcpy(q->stop_ids, r->sampling.stop_token_ids,
               r->sampling.n_stop_token_ids * sizeof *q->stop_ids);
    }
    q->sp.stop_token_ids = q->stop_ids;
    rc = sampler_state_init(&q->st, &q->sp, r->prompt, (size_t)r->n_prompt, e->eog_ids, e->n_eog);
    if (rc != 0) {
        tandem_set_err(err, errlen, rc == -EINVAL ? "invalid stop_token_ids" : "out of memory");
        free(q->stop_ids);
        free(q);
        return rc;
    }
    if (r->n_stop > 0) {
        rc = stop_matcher_init(&q->stop, r->stop, r->n_stop, r->include_stop_str_in_output);
        if (rc != 0) {
            tandem_set_err(err, errlen, "invalid 'stop': at most %d strings of at most %d bytes",
                           STOP_MAX_STRINGS, STOP_MAX_LEN);
            goto err_free;
        }
        q->has_stop = true;
    }
    detok_init_continuation(&q->dt, e->tok, r->skip_special_tokens); /* text after the prompt */
    if (r->n_teacher > 0) {
        q->teacher = malloc((size_t)r->n_teacher * sizeof *q->teacher);
        if (!q->teacher) {
            rc = -ENOMEM;
            goto err_free;
        }
        memcpy(q->teacher, r->teacher, (size_t)r->n_teacher * sizeof *q->teacher);
        q->n_teacher = r->n_teacher;
    }
    q->return_logits = r->return_logits;
    q->include_stop = r->include_stop_str_in_output;
    q->cb = r->on_output;
    q->user = r->user;
    q->t_arrival = tandem_now_s();

    int32_t max_tokens = r->max_tokens;
    if (q->n_teacher > 0 && (max_tokens <= 0 || max_tokens > q->n_teacher)) {
        max_tokens = q->n_teacher;
    }
    pthread_mutex_lock(&e->mu);
    if (e->shutting_down) {
        pthread_mutex_unlock(&e->mu);
        tandem_set_err(err, errlen, "the engine is shutting down");
        rc = -ESHUTDOWN;
        goto err_free;
    }
    q->id = e->next_id++;
    sched_req_params p = {
        .id = q->id,
        .prompt = r->prompt,
        .n_prompt = r->n_prompt,
        .max_tokens = max_tokens,
        .priority = r->priority,
        .cache_salt = r->cache_salt,
        .user = q,
    };
    rc = sched_add(e->s, &p, &q->sr, err, errlen);
    if (rc != 0) {
        pthread_mutex_unlock(&e->mu);
        if (rc == -EAGAIN) {
            tandem_set_err(err, errlen, "the server is overloaded: %d requests are already waiting",
                           (int)e->cfg.max_waiting);
        }
        goto err_free;
    }
    list_push_front(&e->live, &q->live_node);
    if (e->has_metrics) {
        metric_set(e->mx.waiting, sched_num_waiting(e->s));
    }
    int64_t id = (int64_t)q->id; /* q is the engine thread's once the lock is released */
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return id;

err_free:
    if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "out of memory");
    }
    ereq_free(q);
    return rc;
}

void engine_abort(engine *e, uint64_t id)
{
    /* No allocation: the request carries its own queue node, so an abort cannot be lost. */
    pthread_mutex_lock(&e->mu);
    struct list_node *n, *tmp;
    list_for_each_safe(&e->live, n, tmp)
    {
        ereq *r = list_entry(n, ereq, live_node);
        if (r->id == id) {
            if (!list_linked(&r->abort_node)) {
                list_push_back(&e->aborts, &r->abort_node);
                pthread_cond_signal(&e->cv);
            }
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- the step ----
 *
 * Under the engine lock, the core: queued aborts, sched_schedule, the batch. Without it: the
 * forward pass and sampling. Under the lock again: sched_update and the checks that need only
 * token ids (stop tokens, vLLM's check_stop), which may end requests. Without it again, the
 * output processor (vLLM's v1 OutputProcessor): detokenization, stop strings and the callbacks;
 * a request that hit a stop string (or whose text was lost) is then ended in the core under one
 * more short lock. Only the stepping thread touches a running request's sampler, detokenizer
 * and stop matcher, so none of them needs the lock. */

/* Samples (or takes the teacher token for) every sequence that got logits (lock not held). */
static void sample_all(engine *e, int32_t n_logits)
{
    size_t nv = (size_t)e->n_vocab;
    for (int32_t k = 0; k < n_logits; k++) {
        const core_output *co = &e->outs[k];
        ereq *r = co->r;
        float *row = e->logits + (size_t)k * nv;
        struct sample_result *res = &e->results[k];
        memset(res, 0, sizeof *res);
        if (r->n_teacher > 0) {
            int32_t gen = co->n_before;
            res->token = r->teacher[gen < r->n_teacher ? gen : r->n_teacher - 1];
        } else {
            float *work = row;
            if (r->return_logits) {
                /* keep the raw row for the callback: sample from a copy */
                memcpy(e->raw_row, row, nv * sizeof *row);
                work = e->raw_row;
            }
            if (sampler_sample(&r->sp, &r->st, &e->scratch, work, e->n_vocab, res) != 0) {
                /* every logit masked or NaN: end the sequence with its EOS-less greedy pick */
                int32_t best = 0;
                for (size_t v = 1; v < nv; v++) {
                    if (row[v] > row[best]) {
                        best = (int32_t)v;
                    }
                }
                res->token = best;
            }
        }
        e->sampled[k] = res->token;
    }
}

/* The core's checks of one sampled token after sched_update (lock held): the sampler records it
 * and a stop token (eos, stop_token_ids) ends the request. An ended request leaves the live
 * list; the output processor reports it. */
static void core_check(engine *e, core_output *co, int32_t token)
{
    ereq *r = co->r;
    sched_req *sr = r->sr;
    co->token = token;
    co->stop_token = -1;
    co->error = 0;
    co->end = SCHED_RUNNING;
    co->status = sr->status;
    int rc = sampler_accept(&r->st, token);
    if (rc != 0) {
        co->error = rc;
        co->status = SCHED_FINISHED_ABORTED;
        core_end(e, r, SCHED_FINISHED_ABORTED);
        return;
    }
    if (r->n_teacher == 0 && sampler_is_stop_token(&r->sp, &r->st, token)) {
        co->stop_token = token;
        co->status = SCHED_FINISHED_STOPPED;
    }
    if (sched_status_finished(co->status)) {
        core_end(e, r, co->status);
    }
}

/* Detokenizes token into e->text through the stop matcher (when the request has stop strings);
 * *matched gets the index of a stop string that ended the text, or stays -1. 0, or why the text
 * could not be produced (-ENOMEM). An id the tokenizer does not know (a padded vocabulary) has no
 * text. */
static int text_push(engine *e, ereq *r, int32_t token, int *matched)
{
    char *delta = NULL;
    size_t dlen = 0;
    int rc = detok_push(&r->dt, token, &delta, &dlen);
    if (rc == -EINVAL) {
        rc = 0;
        dlen = 0;
    }
    if (rc == 0 && r->has_stop) {
        rc = stop_matcher_feed(&r->stop, delta ? delta : "", dlen, &e->text, matched);
    } else if (rc == 0 && dlen > 0) {
        rc = buf_append(&e->text, delta, dlen);
    }
    free(delta);
    return rc;
}

/* End of a request's text: the detokenizer's held-back bytes, then the stop matcher's. */
static int text_flush(engine *e, ereq *r, int *matched)
{
    char *tail = NULL;
    size_t tlen = 0;
    int rc = detok_flush(&r->dt, &tail, &tlen);
    if (rc == 0 && tlen > 0) {
        rc = r->has_stop ? stop_matcher_feed(&r->stop, tail, tlen, &e->text, matched)
                         : buf_append(&e->text, tail, tlen);
    }
    free(tail);
    if (rc == 0 && r->has_stop && *matched < 0) {
        rc = stop_matcher_flush(&r->stop, &e->text);
    }
    return rc;
}

/* The output processor for one sequence (lock not held): latency metrics, text, stop strings
 * and the callback. A request the core ended is released here; one that ends here (stop string,
 * lost text) gets co->end, is ended in the core by the caller and released after that. */
static void process_output(engine *e, core_output *co, const float *raw,
                           const struct sample_result *res)
{
    ereq *r = co->r;
    const sched_req *sr = r->sr;
    double t = tandem_now_s();
    if (e->has_metrics) {
        if (sr->num_output_tokens == 1) {
            metric_observe(e->mx.ttft, t - r->t_arrival);
        } else if (r->t_last > 0) {
            metric_observe(e->mx.itl, t - r->t_last);
        }
    }
    if (sr->num_output_tokens == 1) {
        r->t_first = t;
    }
    r->t_last = t;

    bool teacher = r->n_teacher > 0;
    bool is_stop_token = co->stop_token >= 0;
    engine_output o = {
        .token = co->token,
        .logits = r->return_logits ? raw : NULL,
        .sample = (r->sp.logprobs >= 0 && !teacher) ? res : NULL,
        .status = co->status,
        .stop_index = -1,
        .stop_token = co->stop_token,
    };
    buf_reset(&e->text);
    int matched = -1;
    int rc = co->error;
    if (rc == 0 && (!is_stop_token || r->include_stop)) {
        rc = text_push(e, r, co->token, &matched);
    } else if (rc == 0 && r->has_stop) {
        rc = stop_matcher_feed(&r->stop, "", 0, &e->text, &matched);
    }
    if (matched >= 0 && !is_stop_token) {
        o.stop_index = matched;
        o.status = SCHED_FINISHED_STOPPED;
    }
    bool finished = sched_status_finished(o.status);
    if (rc == 0 && finished && matched < 0) {
        rc = text_flush(e, r, &matched);
        if (matched >= 0) {
            o.stop_index = matched;
            o.status = SCHED_FINISHED_STOPPED;
        }
    }
    if (rc == 0) {
        rc = buf_error(&e->text);
    }
    if (rc != 0) {
        /* the token or its text is lost: end the request with an error rather than a hole */
        log_error("engine: request %" PRIu64 ": cannot produce its text (%s); ending it", r->id,
                  tandem_strerror(rc));
        o.status = SCHED_FINISHED_ABORTED;
        o.error = rc;
        o.stop_index = -1;
        o.stop_token = -1;
        finished = true;
    } else {
        o.text = buf_cstr(&e->text);
        o.text_len = e->text.len;
    }
    if (!finished) {
        output_fill(r, &o);
        if (r->cb) {
            r->cb(r->user, &o);
        }
        return;
    }
    report_finish(e, r, &o);
    if (sched_status_finished(co->status)) {
        ereq_release(r); /* the core ended it already */
    } else {
        co->end = o.status;
    }
}

int engine_step(engine *e)
{
    struct list_node aborted;
    list_init(&aborted);
    pthread_mutex_lock(&e->mu);
    take_aborts(e, &aborted);
    const sched_output *out = sched_schedule(e->s);
    if (out->n_entries == 0) {
        metrics_update(e);
        pthread_mutex_unlock(&e->mu);
        report_aborted(e, &aborted);
        return 0;
    }
    fwd_batch batch;
    int rc = sched_fill_batch(out, e->tok_buf, e->cfg.max_num_batched_tokens, e->seq_buf,
                              e->cfg.max_num_seqs, &batch);
    TANDEM_ASSERT(rc == 0);
    batch.logits = e->logits;
    int32_t n_logits = out->n_logits;
    int n = out->n_entries;
    int32_t k = 0;
    for (int32_t i = 0; i < out->n_entries; i++) {
        if (out->entries[i].wants_logits) {
            e->outs[k].r = out->entries[i].req->user;
            e->outs[k].n_before = out->entries[i].req->num_output_tokens;
            k++;
        }
    }
    pthread_mutex_unlock(&e->mu);
    report_aborted(e, &aborted);

    rc = e->ops->forward(e->be, &batch);
    if (rc == 0) {
        sample_all(e, n_logits);
    }

    pthread_mutex_lock(&e->mu);
    if (rc != 0) {
        log_error("engine: forward pass failed (%s); aborting every request", tandem_strerror(rc));
        take_all(e, &aborted);
        metrics_update(e);
        pthread_mutex_unlock(&e->mu);
        report_aborted(e, &aborted);
        return rc;
    }
    rc = sched_update(e->s, e->sampled, n_logits);
    TANDEM_ASSERT(rc == 0);
    for (k = 0; k < n_logits; k++) {
        core_check(e, &e->outs[k], e->sampled[k]);
    }
    metrics_update(e);
    pthread_mutex_unlock(&e->mu);

    size_t nv = (size_t)e->n_vocab;
    int n_end = 0;
    for (k = 0; k < n_logits; k++) {
        process_output(e, &e->outs[k], e->logits + (size_t)k * nv, &e->results[k]);
        n_end += e->outs[k].end != SCHED_RUNNING;
    }
    if (n_end > 0) {
        pthread_mutex_lock(&e->mu);
        for (k = 0; k < n_logits; k++) {
            if (e->outs[k].end != SCHED_RUNNING) {
                core_end(e, e->outs[k].r, e->outs[k].end);
            }
        }
        metrics_update(e);
        pthread_mutex_unlock(&e->mu);
        for (k = 0; k < n_logits; k++) {
            if (e->outs[k].end != SCHED_RUNNING) {
                ereq_release(e->outs[k].r);
            }
        }
    }
    return n;
}

bool engine_has_work(engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool w = sched_has_work(e->s) || !list_empty(&e->aborts);
    pthread_mutex_unlock(&e->mu);
    return w;
}

static void *engine_thread(void *arg)
{
    engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop_thread) {
        if (!sched_has_work(e->s) && list_empty(&e->aborts)) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        engine_step(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int engine_start(engine *e)
{
    pthread_mutex_lock(&e->mu);
    if (e->thread_started) {
        pthread_mutex_unlock(&e->mu);
        return 0;
    }
    e->stop_thread = false;
    int rc = pthread_create(&e->thread, NULL, engine_thread, e);
    if (rc == 0) {
        e->thread_started = true;
    }
    pthread_mutex_unlock(&e->mu);
    return -rc;
}

void engine_shutdown(engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->shutting_down = true;
    pthread_mutex_unlock(&e->mu);
}

void engine_stop(engine *e)
{
    pthread_mutex_lock(&e->mu);
    if (!e->thread_started) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    e->stop_thread = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    pthread_mutex_lock(&e->mu);
    e->thread_started = false;
    pthread_mutex_unlock(&e->mu);
}

void engine_get_stats(engine *e, engine_stats *o)
{
    pthread_mutex_lock(&e->mu);
    o->running = sched_num_running(e->s);
    o->waiting = sched_num_waiting(e->s);
    o->kv_usage = sched_kv_usage(e->s);
    o->num_blocks = e->num_blocks;
    o->block_size = kvc_block_size(e->kv);
    o->max_model_len = e->max_model_len;
    o->prompt_tokens = sched_prompt_tokens_total(e->s);
    o->generation_tokens = sched_generation_tokens_total(e->s);
    o->preemptions = sched_num_preemptions(e->s);
    o->prefix_queries = sched_prefix_queries(e->s);
    o->prefix_hits = sched_prefix_hits(e->s);
    metrics_update(e);
    pthread_mutex_unlock(&e->mu);
}

int32_t engine_max_model_len(const engine *e)
{
    return e->max_model_len;
}

const model *engine_model(const engine *e)
{
    return e->m;
}

const tokenizer *engine_tokenizer(const engine *e)
{
    return e->tok;
}

int engine_reset_prefix_cache(engine *e)
{
    pthread_mutex_lock(&e->mu);
    int rc = kvc_reset_prefix_cache(e->kv);
    pthread_mutex_unlock(&e->mu);
    return rc;
}
