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
#include <strings.h>
#include <time.h>

#include "engine/backend/tp_backend.h"
#include "engine/core/lora_registry.h"
#include "engine/grammar/guide.h"
#include "engine/model/shard.h"
#include "engine/sampler/stop.h"
#include "lib/buf.h"
#include "lib/common.h"
#include "lib/clock.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/list.h"
#include "lib/log.h"
#include "lib/metrics.h"

#define ENGINE_DEFAULT_KV_BYTES ((size_t)1 << 30)
#define ENGINE_TEXT_CAP         ((size_t)1 << 20) /* bytes of text one step may emit per sequence */
/* Logits of prompt_logprobs rows one step holds at most (fwd_batch.row_logits); it bounds the
 * rows such requests compute per step (sched_config.max_prompt_logit_rows). */
#define ENGINE_PROMPT_LOGITS_BYTES ((size_t)64 << 20)
/* Repetition detection's limits: the check after every token compares at most
 * pattern × count tokens per pattern length. */
#define ENGINE_MAX_REP_PATTERN 2048
#define ENGINE_MAX_REP_COUNT   1024

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
    guide *guide;     /* structured output: the grammar's state, NULL when unconstrained */
    lora_ref *lora;   /* its LoRA adapter, NULL: the base model */
    engine_pool pool; /* embeddings: pooling, the running sum / last hidden state */
    bool normalize;
    float *pooled;    /* [n_embd] when pool */
    int32_t n_pooled; /* tokens summed into pooled (mean) */
    /* prompt logprobs (engine_request.prompt_logprobs): plp[i] for prompt position i + 1, filled
     * in order up to plp_next (the next position wanted), reported with the first output */
    bool want_plp;
    bool plp_sent;
    int32_t plp_top;
    int32_t plp_next;
    struct sample_result *plp;
    engine_output_fn cb;
    void *user;
    double t_arrival, t_first, t_last;
    struct list_node live_node;  /* in engine.live */
    struct list_node abort_node; /* in engine.aborts while an abort is queued */
    /* in engine.ending from core_end to ereq_release when its blocks will be held: a decoder
     * may read them and notify as soon as the final output is reported, before the hold exists */
    struct list_node ending_node;
    bool kv_released; /* engine_kv_release came while in engine.ending: free, do not hold */
    /* KV transfer (engine_kv_transfer) */
    engine_kvt_mode kvt;
    char *kv_request_id; /* PRODUCE: handed to the held entry when the blocks are held */
    char *remote_engine_id, *remote_host, *notify;
    int32_t remote_port;
    int32_t *remote_blocks;
    int32_t n_remote_blocks;
    int kv_loaded;        /* engine_output.kv_loaded */
    double kv_load_s;     /* engine_output.kv_load_seconds */
    struct kv_load *load; /* CONSUME: while its load runs */
} ereq;

/* A running connector load. Outlives its ereq when the request is aborted meanwhile: the
 * transfer still writes into the blocks, so the sched_req is freed when the load ends. */
struct kv_load {
    struct list_node node; /* in engine.loads */
    uint64_t id;
    sched_req *sr;
    ereq *q;       /* NULL once the request was released */
    bool fallback; /* the producer's blocks did not cover the prompt: notify only, then compute */
    double t0;     /* tandem_now_s() at its start */
};

/* A finished PRODUCE request's blocks, held for the decoder. */
struct kv_held {
    struct list_node node; /* in engine.held */
    char *request_id;
    sched_req *sr;
    double expiry; /* tandem_now_s() */
};

/* A sequence of a step whose every row has logits (prompt logprobs): its rows in row_logits. */
typedef struct plp_seq {
    ereq *r;
    int32_t start_pos;
    int32_t n_new;
} plp_seq;

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
    struct metric *success_stop, *success_length, *success_abort, *success_repetition;
    struct metric *ttft, *itl, *e2e, *tpot;
    struct metric *kv_held, *kv_released, *kv_expired; /* P/D holds (tandem_engine_kv_*) */
    struct metric_family *lora_info; /* vllm:lora_requests_info, with LoRA enabled */
    struct buf lora_running, lora_waiting;
};

struct engine {
    const model *m;
    const tokenizer *tok;
    engine_config cfg;
    const backend_ops *ops;
    backend *be;
    kvc *kv;
    kv_groups kvg; /* which block table each layer's KV lives under */
    sched *s;
    int32_t n_vocab;
    int32_t max_model_len;
    int32_t num_blocks;
    int32_t *eog_ids; /* end-of-generation ids of the tokenizer */
    size_t n_eog;
    /* structured output: the vocabulary trie (built on first use) and compiled grammars */
    pthread_mutex_t guide_mu;
    guide_vocab *guide_vocab;
    guide_registry *guides;
    lora_registry *loras; /* max_loras > 0: the loaded LoRA adapters */

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
    float *hidden;                 /* [max_num_seqs][n_embd] pooled hidden states (fwd_batch) */
    ereq **pooled_reqs;            /* [max_num_seqs] the requests of those rows, in order */
    float *row_logits; /* [plp_rows][n_vocab] every-row logits (fwd_batch.row_logits), allocated
                          with the first prompt_logprobs request (under mu) */
    int32_t plp_rows;  /* its rows (sched_config.max_prompt_logit_rows) */
    plp_seq *plp_seqs; /* [max_num_seqs] the step's sequences with all_logits */
    struct sampler_scratch scratch;
    struct buf text; /* emitted text of one sequence in one step (output processor) */

    bool has_metrics;
    struct engine_metrics mx;

    /* KV transfer */
    bool has_connector;
    engine_kv_connector conn; /* strings owned (conn_*) */
    char *conn_engine_id, *conn_host;
    struct list_node loads;  /* struct kv_load */
    struct list_node held;   /* struct kv_held, oldest first */
    struct list_node ending; /* ereq.ending_node: PRODUCE requests between core_end and release */
    int32_t n_loads, n_held;
    uint64_t kv_loads, kv_load_failures, kv_released, kv_expired;
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
        const char *v_rep[] = {model_name, "0", "repetition"};
        x->success_stop = metrics_child(succ, v_stop);
        x->success_length = metrics_child(succ, v_len);
        x->success_abort = metrics_child(succ, v_abort);
        x->success_repetition = metrics_child(succ, v_rep);
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
    x->kv_held = family_child(
        metrics_gauge_new(r, "tandem_engine_kv_held_requests",
                          "Finished prefill requests whose KV blocks are held for a decoder.", 2,
                          labels),
        model_name);
    x->kv_released = family_child(
        metrics_counter_new(r, "tandem_engine_kv_holds_released_total",
                            "Held KV blocks freed by a decoder's notification.", 2, labels),
        model_name);
    x->kv_expired =
        family_child(metrics_counter_new(
                         r, "tandem_engine_kv_holds_expired_total",
                         "Held KV blocks freed by the timeout (no decoder notified).", 2, labels),
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
    if (e->loras) {
        const char *llabels[] = {"max_lora", "waiting_lora_adapters", "running_lora_adapters"};
        x->lora_info = metrics_gauge_new(r, "vllm:lora_requests_info",
                                         "Running stats on lora requests.", 3, llabels);
        buf_init(&x->lora_running, 1 << 20);
        buf_init(&x->lora_waiting, 1 << 20);
        if (!x->lora_info) {
            return -EINVAL;
        }
    }
    if (!x->running || !x->waiting || !x->kv_usage || !x->prompt_tokens || !x->generation_tokens ||
        !x->prefix_queries || !x->prefix_hits || !x->preemptions || !x->success_stop || !x->ttft ||
        !x->itl || !x->e2e || !x->tpot || !x->cache_info || !x->kv_held || !x->kv_released ||
        !x->kv_expired) {
        return -EINVAL;
    }
    return 0;
}

/* Appends name to the comma list b unless it is there already. */
static void csv_add_unique(struct buf *b, const char *name)
{
    const size_t len = strlen(name);
    for (size_t i = 0; i < b->len;) {
        const char *item = b->data + i;
        const char *comma = memchr(item, ',', b->len - i);
        const size_t ilen = comma ? (size_t)(comma - item) : b->len - i;
        if (ilen == len && memcmp(item, name, len) == 0) {
            return;
        }
        i += ilen + 1;
    }
    if ((b->len > 0 && buf_append(b, ",", 1) != 0) || buf_append(b, name, len) != 0) {
        return; /* the metric misses a name rather than the step failing */
    }
}

/* vllm:lora_requests_info: the adapters of the running and of the waiting requests, one series
 * (the current label values) set to the time of the update, as vLLM's logger does. */
static void lora_info_update(engine *e)
{
    struct engine_metrics *x = &e->mx;
    buf_reset(&x->lora_running);
    buf_reset(&x->lora_waiting);
    struct list_node *n, *tmp;
    list_for_each_safe(&e->live, n, tmp)
    {
        const ereq *q = list_entry(n, ereq, live_node);
        if (!q->lora || sched_status_finished(q->sr->status)) {
            continue;
        }
        csv_add_unique(q->sr->status == SCHED_RUNNING ? &x->lora_running : &x->lora_waiting,
                       lora_ref_name(q->lora));
    }
    char max[16];
    snprintf(max, sizeof max, "%d", (int)e->cfg.max_loras);
    const char *vals[] = {max, x->lora_waiting.data ? x->lora_waiting.data : "",
                          x->lora_running.data ? x->lora_running.data : ""};
    struct metric *m = metrics_child(x->lora_info, vals);
    if (m) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        metric_set(m, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
        metrics_family_retain(x->lora_info, m);
    }
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
    metric_set(e->mx.kv_held, (double)e->n_held);
    metric_set(e->mx.kv_released, (double)e->kv_released);
    metric_set(e->mx.kv_expired, (double)e->kv_expired);
    if (e->mx.lora_info) {
        lora_info_update(e);
    }
}

/* ---- requests ---- */

/* End of a step's KV events (kvc_event_sink.flush); under e->mu. */
static void events_flush(engine *e)
{
    if (e->cfg.kv_events.flush) {
        e->cfg.kv_events.flush(e->cfg.kv_events.user);
    }
}

static void ereq_free(ereq *r)
{
    if (!r) {
        return;
    }
    sampler_state_deinit(&r->st);
    guide_free(r->guide);
    lora_ref_put(r->lora);
    free(r->pooled);
    free(r->plp);
    if (r->has_stop) {
        stop_matcher_deinit(&r->stop);
    }
    detok_free(&r->dt);
    free(r->stop_ids);
    free(r->teacher);
    free(r->kv_request_id);
    free(r->remote_engine_id);
    free(r->remote_host);
    free(r->notify);
    free(r->remote_blocks);
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
    if (r->sr->kv_held && r->kv_request_id) {
        list_push_back(&e->ending, &r->ending_node);
    }
}

/* Frees a request the core has ended (lock not held; nothing else refers to it but a running
 * load). A PRODUCE request holding its blocks moves them to the held list (freed by
 * engine_kv_release or the timeout); one aborted while its load runs leaves its sched_req to the
 * load. */
static void ereq_release(engine *e, ereq *r)
{
    sched_req *sr = r->sr;
    if (sr->kv_held || r->load) {
        struct kv_held *h = sr->kv_held ? calloc(1, sizeof *h) : NULL;
        pthread_mutex_lock(&e->mu);
        list_unlink(&r->ending_node);
        if (r->kv_released && sr->kv_held) {
            sched_release_held(e->s, sr); /* the decoder is done with them already */
        }
        if (r->load) {
            r->load->q = NULL;
            if (sr->load_pending) {
                sr = NULL; /* the load frees it when it ends */
            } else {
                list_unlink(&r->load->node);
                e->n_loads--;
                free(r->load);
            }
            r->load = NULL;
        }
        if (sr && sr->kv_held) {
            if (h) {
                double timeout = e->conn.hold_timeout_s > 0 ? e->conn.hold_timeout_s : 480.0;
                h->request_id = r->kv_request_id;
                r->kv_request_id = NULL;
                h->sr = sr;
                h->expiry = tandem_now_s() + timeout;
                list_push_back(&e->held, &h->node);
                e->n_held++;
                h = NULL;
                sr = NULL;
            } else {
                log_error("engine: out of memory holding the KV blocks of request %" PRIu64
                          "; freeing them (the decoder will prefill itself)",
                          r->id);
                sched_release_held(e->s, sr);
            }
        }
        if (sr) {
            sched_req_free(NULL, sr);
        }
        metrics_update(e);
        pthread_cond_signal(&e->cv); /* the thread's timed wait covers the new hold */
        pthread_mutex_unlock(&e->mu);
        free(h);
        ereq_free(r);
        return;
    }
    sched_req_free(NULL, sr);
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
    o->kv_loaded = r->kv_loaded;
    o->kv_load_seconds = r->kv_load_s;
    if (sr->kv_held) {
        o->kv_block_ids = sr->kv.blocks;
        o->n_kv_blocks = sr->kv.n_blocks;
        o->kv_request_id = r->kv_request_id;
    }
}

/* Reports a request's final output (o: what the step produced, status FINISHED_*), without the
 * engine lock, and records its finish metrics. The caller releases it once the core ended it. */
static void pool_finish(const engine *e, ereq *q);

static void report_finish(engine *e, ereq *r, engine_output *o)
{
    sched_req *sr = r->sr;
    sched_status status = o->status;
    output_fill(r, o);
    o->finished = true;
    if (r->pool != ENGINE_POOL_NONE && r->n_pooled > 0 && status != SCHED_FINISHED_ABORTED) {
        pool_finish(e, r);
        o->embedding = r->pooled;
        o->n_embedding = e->m->cfg.n_embd;
    }
    if (r->cb) {
        r->cb(r->user, o);
    }
    if (e->has_metrics) {
        double t = tandem_now_s();
        struct metric *succ = status == SCHED_FINISHED_STOPPED      ? e->mx.success_stop
                              : status == SCHED_FINISHED_LENGTH     ? e->mx.success_length
                              : status == SCHED_FINISHED_REPETITION ? e->mx.success_repetition
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
        ereq_release(e, r);
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

/* The KV cache groups of e's model (vLLM's hybrid KV cache manager where the model mixes full
 * and sliding-window attention and nothing turns the manager off). */
static int engine_plan_kv_groups(engine *e, bool kv_events, char *err, size_t errlen)
{
    const model *m = e->m;
    const int32_t n = m->cfg.n_layer;
    int32_t *window = malloc((size_t)n * sizeof(*window));
    if (!window) {
        tandem_set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    bool mixed = false;
    for (int32_t l = 0; l < n; l++) {
        window[l] = m->layers[l].swa && m->cfg.n_swa > 0 ? m->cfg.n_swa : 0;
        mixed |= window[l] != window[0];
    }
    const char *off = e->cfg.disable_hybrid_kv_cache_manager ? "--disable-hybrid-kv-cache-manager"
                      : kv_events                            ? "KV events are on"
                      : !e->ops->kv_groups                   ? "the backend keeps one block table"
                                                             : NULL;
    int rc = kv_groups_plan(&e->kvg, n, window, off == NULL);
    free(window);
    if (rc != 0) {
        tandem_set_err(err, errlen, "cannot plan the KV cache groups (%d layers)", (int)n);
        return rc;
    }
    if (e->kvg.n_groups > 1) {
        log_info("engine: hybrid KV cache manager: %d block tables of %d layers each (window %d "
                 "on the sliding ones); their blocks before the window go back to the pool",
                 (int)e->kvg.n_groups, (int)e->kvg.group_size, (int)m->cfg.n_swa);
    } else if (mixed) {
        log_info("engine: full and sliding-window layers share one block table (%s): every "
                 "layer keeps the whole context",
                 off ? off : "too many KV cache groups");
    }
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
    pthread_mutex_init(&e->guide_mu, NULL);
    list_init(&e->live);
    list_init(&e->aborts);
    list_init(&e->loads);
    list_init(&e->held);
    list_init(&e->ending);
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
        c->block_size < 0 || c->max_waiting < 0 || c->max_loras < 0 || c->max_lora_rank < 0) {
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
    const backend_ops *inner = e->ops;
    const int tp = c->tensor_parallel_size > 1 ? (int)c->tensor_parallel_size : 1;
    if (tp > 1) {
        if (model_shard_check(m, tp, err, errlen) != 0) {
            goto err_free;
        }
        e->ops = &tp_backend_ops;
    }
    if (c->max_loras > 0) {
        static const int32_t ranks[] = {1, 8, 16, 32, 64, 128, 256, 320, 512}; /* vLLM's */
        c->max_lora_rank = c->max_lora_rank > 0 ? c->max_lora_rank : 16;
        bool known = false;
        for (size_t i = 0; i < ARRAY_SIZE(ranks); i++) {
            known |= ranks[i] == c->max_lora_rank;
        }
        if (!known) {
            tandem_set_err(err, errlen,
                           "--max-lora-rank %d: must be one of 1, 8, 16, 32, 64, 128, 256, 320, "
                           "512",
                           (int)c->max_lora_rank);
            goto err_free;
        }
        if (!e->ops->lora) {
            tandem_set_err(err, errlen, "--enable-lora: the %s backend%s has no LoRA support yet",
                           inner->name, tp > 1 ? " with tensor parallelism" : "");
            goto err_free;
        }
        if (c->max_loras > c->max_num_seqs) {
            tandem_set_err(err, errlen, "--max-loras %d is larger than --max-num-seqs %d",
                           (int)c->max_loras, (int)c->max_num_seqs);
            goto err_free;
        }
        e->loras = lora_registry_new(m, c->max_lora_rank);
        if (!e->loras) {
            tandem_set_err(err, errlen, "out of memory");
            goto err_free;
        }
    }
    size_t block_bytes = tp > 1 ? tp_backend_kv_block_bytes(inner, m, tp, c->block_size, kdt)
                                : inner->kv_block_bytes(m, c->block_size, kdt);
    if (block_bytes == 0) {
        tandem_set_err(err, errlen, "backend reports 0 bytes per KV block");
        goto err_free;
    }
    const kvc_event_sink *sink =
        (c->kv_events.stored || c->kv_events.removed || c->kv_events.all_cleared) ? &c->kv_events
                                                                                  : NULL;
    if (engine_plan_kv_groups(e, sink != NULL, err, errlen) != 0) {
        goto err_free;
    }
    if (e->kvg.n_groups > 1) {
        /* a block holds group_size layers' K and V */
        block_bytes = block_bytes / (size_t)m->cfg.n_layer * (size_t)e->kvg.group_size;
    }
    int64_t per_seq = kv_groups_blocks_per_seq(e->kvg.n_groups, e->kvg.window, c->max_model_len,
                                               c->max_num_batched_tokens, c->block_size);
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
                       " (over all KV cache groups): raise --kv-cache-memory or lower "
                       "--max-model-len",
                       budget, nblocks > 0 ? nblocks - 1 : 0, (int)c->block_size, block_bytes,
                       (int)c->max_model_len, per_seq);
        goto err_free;
    }
    e->num_blocks = (int32_t)nblocks;
    e->max_model_len = c->max_model_len;
    /* vLLM's startup line: requests of max_model_len tokens the KV cache holds at once */
    log_info("engine: KV cache of %" PRId64 " blocks of %d tokens (%zu bytes each, %d block "
             "table%s per request); maximum concurrency for %d tokens per request: %.2fx",
             nblocks - 1, (int)c->block_size, block_bytes, (int)e->kvg.n_groups,
             e->kvg.n_groups > 1 ? "s" : "", (int)c->max_model_len,
             (double)(nblocks - 1) / (double)per_seq);

    backend_config bc = {
        .num_blocks = e->num_blocks,
        .block_size = c->block_size,
        .kv_dtype = kdt,
        .max_batch_tokens = c->max_num_batched_tokens,
        .max_seqs = c->max_num_seqs,
        .n_threads = c->n_threads,
        .pin_threads = c->pin_threads,
        .enforce_eager = c->enforce_eager,
        .max_model_len = c->max_model_len,
        .max_lora_rank = c->max_loras > 0 ? c->max_lora_rank : 0,
        .tp_size = tp > 1 ? tp : 0,
        .tp_inner = tp > 1 ? inner : NULL,
        .kv_groups = e->kvg.n_groups > 1 ? &e->kvg : NULL,
    };
    e->be = e->ops->create(m, &bc, err, errlen);
    if (!e->be) {
        goto err_free;
    }
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
    /* sliding groups give their blocks before the window back (one group: when every layer
     * slides, Mistral's sliding_window) */
    sc.n_kv_groups = e->kvg.n_groups;
    memcpy(sc.kv_group_window, e->kvg.window, sizeof sc.kv_group_window);
    sc.max_loras = c->max_loras;
    size_t plp_rows = ENGINE_PROMPT_LOGITS_BYTES / ((size_t)e->n_vocab * sizeof(float));
    e->plp_rows = plp_rows < 1                                   ? 1
                  : plp_rows > (size_t)c->max_num_batched_tokens ? c->max_num_batched_tokens
                                                                 : (int32_t)plp_rows;
    sc.max_prompt_logit_rows = e->plp_rows;
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
    e->plp_seqs = malloc(nseq * sizeof *e->plp_seqs);
    if (e->ops->pooling) {
        e->hidden = malloc(nseq * (size_t)m->cfg.n_embd * sizeof *e->hidden);
        e->pooled_reqs = malloc(nseq * sizeof(ereq *));
    }
    if (!e->tok_buf || !e->seq_buf || !e->logits || !e->raw_row || !e->sampled || !e->results ||
        !e->outs || !e->plp_seqs || (e->ops->pooling && (!e->hidden || !e->pooled_reqs)) ||
        collect_eog(e) != 0) {
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

static void held_free(engine *e, struct kv_held *h);

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
    /* the connector was stopped before: no load can end any more; free what is left */
    struct list_node *n, *tmp;
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): a node is freed after its successor was read
    list_for_each_safe(&e->held, n, tmp)
    {
        held_free(e, list_entry(n, struct kv_held, node));
    }
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): a node is freed after its successor was read
    list_for_each_safe(&e->loads, n, tmp)
    {
        struct kv_load *l = list_entry(n, struct kv_load, node);
        list_unlink(&l->node);
        if (!l->q) {
            sched_remote_kv_done(e->s, l->sr, false);
            sched_req_free(NULL, l->sr);
        }
        free(l);
    }
    sched_free(e->s);
    kvc_free(e->kv);
    kv_groups_free(&e->kvg);
    free(e->conn_engine_id);
    free(e->conn_host);
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
    free(e->hidden);
    free(e->pooled_reqs);
    free(e->row_logits);
    free(e->plp_seqs);
    free(e->eog_ids);
    guide_registry_free(e->guides);
    lora_registry_free(e->loras);
    buf_free(&e->mx.lora_running);
    buf_free(&e->mx.lora_waiting);
    guide_vocab_free(e->guide_vocab);
    pthread_mutex_destroy(&e->guide_mu);
    sampler_scratch_deinit(&e->scratch);
    buf_free(&e->text);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- KV transfer ---- */

/* Takes the request's kv_transfer_params in. Without a connector, or with incomplete CONSUME
 * parameters, the request is served as a plain one. 0 or -ENOMEM. */
static int kv_transfer_copy(engine *e, ereq *q, const engine_kv_transfer *t)
{
    if (t->mode == ENGINE_KVT_NONE || !e->has_connector) {
        return 0;
    }
    if (t->mode == ENGINE_KVT_PRODUCE) {
        q->kvt = ENGINE_KVT_PRODUCE;
        if (t->request_id && t->request_id[0]) {
            q->kv_request_id = strdup(t->request_id);
            if (!q->kv_request_id) {
                return -ENOMEM;
            }
        }
        return 0;
    }
    if (!t->remote_engine_id || !t->remote_host || !t->remote_request_id || t->remote_port <= 0 ||
        t->remote_port > 65535 || t->n_remote_blocks < 0 ||
        (t->n_remote_blocks > 0 && !t->remote_block_ids)) {
        log_warn("engine: kv_transfer_params with do_remote_prefill lack remote_engine_id, "
                 "remote_host, remote_port, remote_request_id or remote_block_ids; prefilling "
                 "locally");
        q->kv_loaded = -1;
        return 0;
    }
    char notify[320];
    snprintf(notify, sizeof notify, "%s:%d", t->remote_request_id, (int)e->conn.tp_size);
    q->remote_engine_id = strdup(t->remote_engine_id);
    q->remote_host = strdup(t->remote_host);
    q->notify = strdup(notify);
    if (t->n_remote_blocks > 0) {
        q->remote_blocks = malloc((size_t)t->n_remote_blocks * sizeof *q->remote_blocks);
        if (q->remote_blocks) {
            memcpy(q->remote_blocks, t->remote_block_ids,
                   (size_t)t->n_remote_blocks * sizeof *q->remote_blocks);
        }
    }
    if (!q->remote_engine_id || !q->remote_host || !q->notify ||
        (t->n_remote_blocks > 0 && !q->remote_blocks)) {
        return -ENOMEM;
    }
    q->n_remote_blocks = t->n_remote_blocks;
    q->remote_port = t->remote_port;
    q->kvt = ENGINE_KVT_CONSUME;
    return 0;
}

/* Starts the connector loads of this schedule's admitted CONSUME requests (lock held). */
static void start_loads(engine *e, const sched_output *out)
{
    for (int32_t k = 0; k < out->n_loads; k++) {
        sched_req *sr = out->loads[k];
        ereq *q = sr->user;
        struct kv_load *l = calloc(1, sizeof *l);
        int32_t first = sr->load_first_block, n = sr->load_n_blocks;
        if (!l) {
            log_error("engine: request %" PRIu64 ": out of memory for its KV load; prefilling "
                      "locally",
                      q->id);
            q->kv_loaded = -1;
            e->kv_load_failures++;
            sched_remote_kv_done(e->s, sr, false);
            continue;
        }
        if (first + n > q->n_remote_blocks) {
            log_warn("engine: request %" PRIu64 ": the producer's %d blocks do not cover the "
                     "%d-token prompt; prefilling locally",
                     q->id, (int)q->n_remote_blocks, (int)sr->n_prompt);
            l->fallback = true;
            n = 0; /* still notify, so that the producer frees its blocks */
        }
        l->id = q->id;
        l->sr = sr;
        l->t0 = tandem_now_s();
        l->q = q;
        q->load = l;
        list_push_back(&e->loads, &l->node);
        e->n_loads++;
        e->kv_loads++;
        engine_kv_load load = {
            .id = l->id,
            .remote_engine_id = q->remote_engine_id,
            .remote_host = q->remote_host,
            .remote_port = q->remote_port,
            .remote_blocks = q->remote_blocks ? q->remote_blocks + first : NULL,
            .local_blocks = sr->kv.blocks + first,
            .n_blocks = n,
            .notify = q->notify,
        };
        int rc = e->conn.start_load(e->conn.ud, &load);
        if (rc != 0) {
            log_warn("engine: request %" PRIu64 ": cannot start its KV load (%s); prefilling "
                     "locally",
                     q->id, tandem_strerror(rc));
            list_unlink(&l->node);
            e->n_loads--;
            q->load = NULL;
            free(l);
            q->kv_loaded = -1;
            e->kv_load_failures++;
            sched_remote_kv_done(e->s, sr, false);
        }
    }
}

void engine_kv_load_done(engine *e, uint64_t load_id, int status)
{
    pthread_mutex_lock(&e->mu);
    struct kv_load *l = NULL;
    struct list_node *n, *tmp;
    list_for_each_safe(&e->loads, n, tmp)
    {
        struct kv_load *c = list_entry(n, struct kv_load, node);
        if (c->id == load_id) {
            l = c;
            break;
        }
    }
    if (!l) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    list_unlink(&l->node);
    e->n_loads--;
    bool ok = status == 0 && !l->fallback;
    if (!ok) {
        e->kv_load_failures++;
        if (status != 0) {
            log_warn("engine: request %" PRIu64 ": KV load failed (%s); prefilling locally",
                     load_id, tandem_strerror(status));
        }
    }
    sched_req *sr = l->sr;
    if (l->q) {
        l->q->load = NULL;
        l->q->kv_loaded = ok ? 1 : -1;
        l->q->kv_load_s = ok ? tandem_now_s() - l->t0 : 0;
        sched_remote_kv_done(e->s, sr, ok); /* back in the queue, or just freed if aborted */
    } else {
        sched_remote_kv_done(e->s, sr, false); /* aborted and released: frees the blocks */
        sched_req_free(NULL, sr);
    }
    free(l);
    metrics_update(e);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Frees a held entry (lock held). */
static void held_free(engine *e, struct kv_held *h)
{
    list_unlink(&h->node);
    e->n_held--;
    sched_release_held(e->s, h->sr);
    sched_req_free(NULL, h->sr);
    free(h->request_id);
    free(h);
}

int engine_kv_release(engine *e, const char *request_id)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&e->mu);
    struct list_node *n, *tmp;
    list_for_each_safe(&e->held, n, tmp)
    {
        struct kv_held *h = list_entry(n, struct kv_held, node);
        if (strcmp(h->request_id, request_id) == 0) {
            held_free(e, h);
            e->kv_released++;
            rc = 0;
            break;
        }
    }
    if (rc != 0) {
        /* its final output is out but ereq_release has not made the hold yet */
        list_for_each_safe(&e->ending, n, tmp)
        {
            ereq *r = list_entry(n, ereq, ending_node);
            if (!r->kv_released && strcmp(r->kv_request_id, request_id) == 0) {
                r->kv_released = true;
                e->kv_released++;
                rc = 0;
                break;
            }
        }
    }
    metrics_update(e);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* Frees the holds whose time is up (lock held); returns the next expiry, or 0 when none. */
static double expire_held(engine *e)
{
    double now = tandem_now_s();
    struct list_node *n, *tmp;
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): a node is freed after its successor was read
    list_for_each_safe(&e->held, n, tmp)
    {
        struct kv_held *h = list_entry(n, struct kv_held, node);
        if (h->expiry > now) {
            return h->expiry; /* oldest first: the rest expire later */
        }
        log_warn("engine: releasing expired KV blocks of request %s (no decoder notified)",
                 h->request_id);
        held_free(e, h);
        e->kv_expired++;
        metrics_update(e); /* vllm:kv_cache_usage_perc drops without a step */
    }
    return 0;
}

int engine_set_kv_connector(engine *e, const engine_kv_connector *c)
{
    if (!c || !c->start_load || !c->engine_id || !c->host || c->port <= 0 || c->tp_size < 0) {
        return -EINVAL;
    }
    if (e->kvg.n_groups > 1) {
        /* vLLM too: "Turning off hybrid kv cache manager because --kv-transfer-config is set" */
        log_error("engine: the KV connector moves one block table per request, and this engine "
                  "keeps %d (the hybrid KV cache manager): start it with "
                  "--disable-hybrid-kv-cache-manager",
                  (int)e->kvg.n_groups);
        return -EINVAL;
    }
    char *id = strdup(c->engine_id), *host = strdup(c->host);
    if (!id || !host) {
        free(id);
        free(host);
        return -ENOMEM;
    }
    pthread_mutex_lock(&e->mu);
    free(e->conn_engine_id);
    free(e->conn_host);
    e->conn = *c;
    e->conn_engine_id = id;
    e->conn_host = host;
    e->conn.engine_id = id;
    e->conn.host = host;
    if (e->conn.tp_size == 0) {
        e->conn.tp_size = 1;
    }
    e->has_connector = true;
    pthread_mutex_unlock(&e->mu);
    return 0;
}

const engine_kv_connector *engine_kv_connector_get(const engine *e)
{
    return e->has_connector ? &e->conn : NULL;
}

int engine_kv_device(const engine *e)
{
    return strcmp(e->ops->name, "cuda") == 0 ? 0 : -1; /* one GPU: device 0 (tp: no P/D) */
}

void *engine_kv_pool(engine *e, int layer, int kv, size_t *bytes)
{
    return e->ops->kv_pool(e->be, layer, kv, bytes);
}

int engine_kv_adopt_pools(engine *e, void *const *bases, const size_t *bytes)
{
    if (!e->ops->kv_adopt || e->kvg.n_groups > 1) {
        return -ENOTSUP;
    }
    if (e->thread_started || e->next_id != 1) {
        return -EBUSY;
    }
    if (!bases) {
        return 0; /* the question only */
    }
    int n = e->m->cfg.n_layer;
    for (int r = 0; r < 2 * n; r++) { /* check all first: all or nothing */
        size_t have;
        if (!engine_kv_pool(e, r / 2, r % 2, &have) || !bases[r] || bytes[r] != have ||
            (uintptr_t)bases[r] % 64 != 0) {
            return -EINVAL;
        }
    }
    for (int r = 0; r < 2 * n; r++) {
        int rc = e->ops->kv_adopt(e->be, r / 2, r % 2, bases[r], bytes[r]);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* ---- submission ---- */

/* How many of ids[0..n) are outside [0, n_vocab); out gets them as "1, 2, ..." (as many as fit,
 * then ", ..."), as vLLM lists them in its messages. */
static size_t out_of_vocab(const int32_t *ids, size_t n, int32_t n_vocab, char *out, size_t size)
{
    size_t len = 0, bad = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < n_vocab) {
            continue;
        }
        if (len + 16 < size) {
            len += (size_t)snprintf(out + len, size - len, "%s%d", bad ? ", " : "", (int)ids[i]);
        } else if (len + 6 < size) {
            snprintf(out + len, size - len, ", ...");
            len = size; /* nothing more */
        }
        bad++;
    }
    return bad;
}

/* Prompt logprobs of a new request: checks and the per-position array (n_prompt - 1 entries). */
static int plp_init(engine *e, ereq *q, const engine_request *r, char *err, size_t errlen)
{
    if (r->prompt_top_logprobs < 0 || r->prompt_top_logprobs > SAMPLER_MAX_LOGPROBS) {
        return tandem_fail(err, errlen, -EINVAL,
                           "Requested prompt logprobs of %d, which is greater than max allowed: %d",
                           (int)r->prompt_top_logprobs, SAMPLER_MAX_LOGPROBS);
    }
    if (!e->ops->all_logits || r->pool != ENGINE_POOL_NONE ||
        (r->kv_transfer && r->kv_transfer->mode == ENGINE_KVT_CONSUME)) {
        return tandem_fail(err, errlen, -EINVAL, "prompt_logprobs are not supported %s",
                           !e->ops->all_logits ? "by this backend yet"
                           : r->pool != ENGINE_POOL_NONE
                               ? "for embeddings"
                               : "when the prompt's KV is loaded from a remote prefill");
    }
    if (r->n_prompt > 1) {
        q->plp = calloc((size_t)r->n_prompt - 1, sizeof *q->plp);
        if (!q->plp) {
            return tandem_fail(err, errlen, -ENOMEM, "out of memory");
        }
    }
    q->want_plp = true;
    q->plp_top = r->prompt_top_logprobs;
    q->plp_next = 1;
    return 0;
}

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
    for (size_t i = 0; i < r->sampling.n_allowed; i++) { /* vLLM's message */
        if (r->sampling.allowed_ids[i] < 0 || r->sampling.allowed_ids[i] >= e->n_vocab) {
            return tandem_fail(err, errlen, -EINVAL,
                               "allowed_token_ids contains out-of-vocab token id!");
        }
    }
    char ids[256];
    if (r->sampling.bias_ids &&
        out_of_vocab(r->sampling.bias_ids, r->sampling.n_bias, e->n_vocab, ids, sizeof ids)) {
        /* vLLM's processor._validate_logit_bias, its message */
        return tandem_fail(err, errlen, -EINVAL,
                           "token_id(s) [%s] in logit_bias contain out-of-vocab token ids. "
                           "Vocabulary size: %d",
                           ids, (int)e->n_vocab);
    }
    size_t n_bad_word_ids = 0; /* (NULL arrays with a count: the sampler's -EINVAL) */
    for (size_t i = 0; r->sampling.bad_words_lens && i < r->sampling.n_bad_words; i++) {
        n_bad_word_ids +=
            r->sampling.bad_words_lens[i] > 0 ? (size_t)r->sampling.bad_words_lens[i] : 0;
    }
    if (r->sampling.bad_words &&
        out_of_vocab(r->sampling.bad_words, n_bad_word_ids, e->n_vocab, ids, sizeof ids)) {
        /* vLLM's SamplingParams.update_from_tokenizer, its message */
        return tandem_fail(err, errlen, -EINVAL,
                           "The model vocabulary size is %d, but the following tokens were "
                           "specified as bad: [%s]. All token id values should be integers "
                           "satisfying: 0 <= token_id <= %d.",
                           (int)e->n_vocab, ids, (int)e->n_vocab - 1);
    }
    const struct sampling_params *sp = &r->sampling;
    if (sp->rep_max_pattern < 0 || sp->rep_min_pattern < 0 ||
        sp->rep_min_pattern > sp->rep_max_pattern) {
        /* vLLM's RepetitionDetectionParams, its messages */
        return tandem_fail(err, errlen, -EINVAL,
                           "max_pattern_size, min_pattern_size must be >=0, with "
                           "min_pattern_size <= max_pattern_size. Set both to 0 to disable "
                           "repetitive pattern detection.");
    }
    if (sp->rep_max_pattern > 0 && sp->rep_min_count < 2) {
        return tandem_fail(err, errlen, -EINVAL,
                           "min_count must be >= 2 to detect repetitive patterns in engine "
                           "output. If you do not wish to detect repetitive patterns, set "
                           "max_pattern_size to 0.");
    }
    if (sp->rep_max_pattern > ENGINE_MAX_REP_PATTERN || sp->rep_min_count > ENGINE_MAX_REP_COUNT) {
        return tandem_fail(err, errlen, -EINVAL,
                           "repetition_detection: max_pattern_size %d / min_count %d exceed the "
                           "server's limits (%d / %d)",
                           (int)sp->rep_max_pattern, (int)sp->rep_min_count, ENGINE_MAX_REP_PATTERN,
                           ENGINE_MAX_REP_COUNT);
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
    q->sp.bias_ids = NULL; /* the state keeps its own copies; r's arrays are the caller's */
    q->sp.bias_vals = NULL;
    q->sp.n_bias = 0;
    q->sp.allowed_ids = NULL;
    q->sp.n_allowed = 0;
    q->sp.bad_words = NULL;
    q->sp.bad_words_lens = NULL;
    q->sp.n_bad_words = 0;
    if (rc != 0) {
        tandem_set_err(err, errlen,
                       rc == -EINVAL ? "invalid stop_token_ids or bad_words" : "out of memory");
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
    if (r->pool != ENGINE_POOL_NONE) {
        if (!e->ops->pooling || r->kv_transfer || r->n_teacher > 0) {
            rc = tandem_fail(err, errlen, -EINVAL, "embeddings are not supported %s",
                             !e->ops->pooling ? "by this backend yet"
                                              : "with KV transfer or teacher tokens");
            goto err_free;
        }
        q->pooled = calloc((size_t)e->m->cfg.n_embd, sizeof *q->pooled);
        if (!q->pooled) {
            rc = -ENOMEM;
            goto err_free;
        }
        q->pool = r->pool;
        q->normalize = r->normalize;
    }
    if (r->prompt_logprobs && (rc = plp_init(e, q, r, err, errlen)) != 0) {
        goto err_free;
    }
    if (r->lora_name && r->lora_name[0]) {
        q->lora = e->loras ? lora_registry_get(e->loras, r->lora_name) : NULL;
        if (!q->lora) {
            rc = tandem_fail(err, errlen, e->loras ? -ENOENT : -EINVAL,
                             e->loras ? "The model `%s` does not exist."
                                      : "LoRA adapter '%s' requested but LoRA is not enabled",
                             r->lora_name);
            goto err_free;
        }
    }
    if (r->guide && (rc = guide_new(r->guide, &q->guide)) != 0) {
        tandem_set_err(err, errlen, "structured output: %s",
                       rc == -ENOMEM ? "out of memory" : "the grammar's start state is too large");
        goto err_free;
    }
    q->return_logits = r->return_logits;
    q->include_stop = r->include_stop_str_in_output;
    q->cb = r->on_output;
    q->user = r->user;
    q->t_arrival = tandem_now_s();
    if (r->kv_transfer && (rc = kv_transfer_copy(e, q, r->kv_transfer)) != 0) {
        tandem_set_err(err, errlen, "out of memory");
        goto err_free;
    }

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
    if (q->want_plp && !e->row_logits) {
        /* the stepping thread reads it under mu, after this request is scheduled */
        e->row_logits = malloc((size_t)e->plp_rows * (size_t)e->n_vocab * sizeof *e->row_logits);
        if (!e->row_logits) {
            pthread_mutex_unlock(&e->mu);
            tandem_set_err(err, errlen, "out of memory");
            rc = -ENOMEM;
            goto err_free;
        }
    }
    q->id = e->next_id++;
    /* an embedding sees every prompt token computed: a salt of its own keeps the prefix cache
     * from serving any of them */
    char salt[48];
    snprintf(salt, sizeof salt, "\x01tandem-embed-%" PRIu64, q->id);
    sched_req_params p = {
        .id = q->id,
        .prompt = r->prompt,
        .n_prompt = r->n_prompt,
        .max_tokens = max_tokens,
        .priority = r->priority,
        .cache_salt = q->pool != ENGINE_POOL_NONE ? salt : r->cache_salt,
        .lora_name = q->lora ? lora_ref_name(q->lora) : NULL,
        .user = q,
        .delay_free = q->kvt == ENGINE_KVT_PRODUCE,
        .load_remote = q->kvt == ENGINE_KVT_CONSUME,
        .prompt_logits = q->want_plp,
    };
    if (q->kvt == ENGINE_KVT_PRODUCE && !q->kv_request_id) {
        char id[32];
        snprintf(id, sizeof id, "tandem-%" PRIu64, q->id);
        q->kv_request_id = strdup(id);
        if (!q->kv_request_id) {
            p.delay_free = false;
            q->kvt = ENGINE_KVT_NONE;
        }
    }
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

/* Adds the step's pooled hidden states to their requests (lock not held: only the stepping
 * thread touches them). A chunk that starts the prompt (or restarts it after a preemption)
 * starts the sum again. */
static void pool_all(engine *e, const fwd_batch *batch, int32_t n_pooled)
{
    const size_t E = (size_t)e->m->cfg.n_embd;
    int32_t j = 0;
    for (int32_t i = 0; i < batch->n_seqs && j < n_pooled; i++) {
        const fwd_seq *s = &batch->seqs[i];
        if (s->pool == FWD_POOL_NONE) {
            continue;
        }
        ereq *q = e->pooled_reqs[j];
        const float *h = e->hidden + (size_t)j++ * E;
        if (s->pool == FWD_POOL_LAST || s->start_pos == 0) {
            memcpy(q->pooled, h, E * sizeof *h);
            q->n_pooled = s->n_new;
        } else {
            for (size_t d = 0; d < E; d++) {
                q->pooled[d] += h[d];
            }
            q->n_pooled += s->n_new;
        }
    }
}

/* The finished embedding of q: the mean of the sum when pooling means, L2-normalised when asked
 * (in place; called once, with the final output). */
static void pool_finish(const engine *e, ereq *q)
{
    const size_t E = (size_t)e->m->cfg.n_embd;
    if (q->pool == ENGINE_POOL_MEAN && q->n_pooled > 0) {
        for (size_t d = 0; d < E; d++) {
            q->pooled[d] /= (float)q->n_pooled;
        }
    }
    if (q->normalize) {
        double ss = 0.0;
        for (size_t d = 0; d < E; d++) {
            ss += (double)q->pooled[d] * q->pooled[d];
        }
        /* torch.nn.functional.normalize's eps: a zero vector stays zero */
        const double inv = 1.0 / (sqrt(ss) > 1e-12 ? sqrt(ss) : 1e-12);
        for (size_t d = 0; d < E; d++) {
            q->pooled[d] = (float)(q->pooled[d] * inv);
        }
    }
}

/* The prompt logprobs of the step's every-row logits (lock not held: only the stepping thread
 * touches them; a prompt's tokens never change). Row j of a sequence predicts the token at
 * start_pos + j + 1; positions already filled (a chunk computed again after a preemption) and
 * rows past the prompt are skipped. */
static void prompt_logprobs_all(engine *e, int32_t n_plp)
{
    const size_t nv = (size_t)e->n_vocab;
    const float *row = e->row_logits;
    for (int32_t i = 0; i < n_plp; i++) {
        const plp_seq *ps = &e->plp_seqs[i];
        ereq *q = ps->r;
        const sched_req *sr = q->sr;
        for (int32_t j = 0; j < ps->n_new; j++, row += nv) {
            int32_t pos = ps->start_pos + j + 1;
            if (pos != q->plp_next || pos >= sr->n_prompt) {
                continue;
            }
            int rc =
                sampler_logprobs(row, e->n_vocab, sr->tokens[pos], q->plp_top, &q->plp[pos - 1]);
            TANDEM_ASSERT(rc == 0); /* prompt ids were checked against the vocabulary */
            q->plp_next++;
        }
    }
}

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
            if (r->guide && guide_mask(r->guide, work, e->n_vocab) < 0) {
                /* the grammar's state could not be computed (memory): end the sequence */
                res->token = e->n_eog > 0 ? e->eog_ids[0] : 0;
                e->sampled[k] = res->token;
                continue;
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
            if (r->guide && guide_accept(r->guide, res->token) != 0) {
                /* only when sampling had nothing the grammar allows (e.g. min_tokens banned
                 * the end it required): end the sequence rather than break the grammar */
                res->token = e->n_eog > 0 ? e->eog_ids[0] : res->token;
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
    /* vLLM's check_stop: stop tokens, then length, then (past min_tokens) repetition */
    if (co->status == SCHED_RUNNING && r->n_teacher == 0 && r->sp.rep_max_pattern > 0 &&
        sr->num_output_tokens >= r->sp.min_tokens &&
        sampler_is_repetition(&r->sp, sr->tokens + sr->n_prompt, sr->num_output_tokens)) {
        co->status = SCHED_FINISHED_REPETITION;
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
    if (r->want_plp && !r->plp_sent) {
        /* every prompt position was computed before the first token could be sampled */
        TANDEM_ASSERT(r->plp_next == sr->n_prompt);
        r->plp_sent = true;
        o.prompt_logprobs = r->plp;
        o.n_prompt_logprobs = sr->n_prompt - 1;
    }
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
        ereq_release(e, r); /* the core ended it already */
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
    if (out->n_loads > 0) {
        start_loads(e, out);
    }
    if (out->n_entries == 0) {
        metrics_update(e);
        events_flush(e);
        pthread_mutex_unlock(&e->mu);
        report_aborted(e, &aborted);
        return 0;
    }
    fwd_batch batch;
    int rc = sched_fill_batch(out, e->tok_buf, e->cfg.max_num_batched_tokens, e->seq_buf,
                              e->cfg.max_num_seqs, &batch);
    TANDEM_ASSERT(rc == 0);
    batch.logits = e->logits;
    batch.hidden = e->hidden;
    batch.row_logits = e->row_logits;
    int32_t n_pooled = 0, n_plp = 0;
    for (int32_t i = 0; i < out->n_entries; i++) {
        ereq *q = out->entries[i].req->user;
        if (q->pool == ENGINE_POOL_MEAN) {
            e->seq_buf[i].pool = FWD_POOL_SUM;
        } else if (q->pool == ENGINE_POOL_LAST && out->entries[i].wants_logits) {
            e->seq_buf[i].pool = FWD_POOL_LAST;
        }
        if (e->seq_buf[i].pool != FWD_POOL_NONE) {
            e->pooled_reqs[n_pooled++] = q;
        }
        e->seq_buf[i].lora = q->lora ? lora_ref_adapter(q->lora) : NULL;
        if (e->seq_buf[i].all_logits) {
            e->plp_seqs[n_plp++] = (plp_seq){
                .r = q, .start_pos = e->seq_buf[i].start_pos, .n_new = e->seq_buf[i].n_new};
        }
    }
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
        pool_all(e, &batch, n_pooled);
        prompt_logprobs_all(e, n_plp);
        sample_all(e, n_logits);
    }

    pthread_mutex_lock(&e->mu);
    if (rc != 0) {
        log_error("engine: forward pass failed (%s); aborting every request", tandem_strerror(rc));
        take_all(e, &aborted);
        metrics_update(e);
        events_flush(e);
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
    events_flush(e);
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
                ereq_release(e, e->outs[k].r);
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
        double next = expire_held(e);
        if (!sched_has_work(e->s) && list_empty(&e->aborts)) {
            if (next > 0) {
                /* sleep until the oldest hold expires (or work arrives) */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                double wait = next - tandem_now_s();
                wait = wait < 0.001 ? 0.001 : wait;
                ts.tv_sec += (time_t)wait;
                ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&e->cv, &e->mu, &ts);
            } else {
                pthread_cond_wait(&e->cv, &e->mu);
            }
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
    o->kv_groups = e->kvg.n_groups;
    o->block_size = kvc_block_size(e->kv);
    o->max_model_len = e->max_model_len;
    o->prompt_tokens = sched_prompt_tokens_total(e->s);
    o->generation_tokens = sched_generation_tokens_total(e->s);
    o->preemptions = sched_num_preemptions(e->s);
    o->prefix_queries = sched_prefix_queries(e->s);
    o->prefix_hits = sched_prefix_hits(e->s);
    o->kv_held = e->n_held;
    o->kv_loading = e->n_loads;
    o->kv_loads = e->kv_loads;
    o->kv_load_failures = e->kv_load_failures;
    o->kv_released = e->kv_released;
    o->kv_expired = e->kv_expired;
    o->kv_dtype_bytes = e->cfg.kv_dtype == ENGINE_KV_F32 ? 4 : 2;
    metrics_update(e);
    pthread_mutex_unlock(&e->mu);
}

lora_registry *engine_loras(engine *e)
{
    return e->loras;
}

int32_t engine_max_model_len(const engine *e)
{
    return e->max_model_len;
}

const model *engine_model(const engine *e)
{
    return e->m;
}

int engine_pooler_config_parse(const char *json, engine_pool *pool, bool *normalize, char *err,
                               size_t errlen)
{
    struct json_object *o = NULL;
    char perr[160];
    if (json_parse_one(json, strlen(json), &o, perr, sizeof perr) != 0 ||
        json_object_get_type(o) != json_type_object) {
        json_object_put(o);
        return tandem_fail(err, errlen, -EINVAL, "--pooler-config: not a JSON object (%s)",
                           perr[0] ? perr : "wrong type");
    }
    int rc = 0;
    json_object_object_foreach(o, k, v)
    {
        if (strcmp(k, "pooling_type") == 0 && json_object_is_type(v, json_type_string)) {
            const char *t = json_object_get_string(v);
            if (strcasecmp(t, "LAST") == 0) {
                *pool = ENGINE_POOL_LAST;
            } else if (strcasecmp(t, "MEAN") == 0) {
                *pool = ENGINE_POOL_MEAN;
            } else {
                rc = tandem_fail(err, errlen, -EINVAL,
                                 "--pooler-config: pooling_type '%s' is not supported (LAST, MEAN)",
                                 t);
            }
        } else if (strcmp(k, "normalize") == 0 && json_object_is_type(v, json_type_boolean)) {
            *normalize = json_object_get_boolean(v);
        } else {
            rc = tandem_fail(err, errlen, -EINVAL,
                             "--pooler-config: unsupported or mistyped field '%s' (pooling_type, "
                             "normalize)",
                             k);
        }
        if (rc != 0) {
            break;
        }
    }
    json_object_put(o);
    return rc;
}

int engine_guide_grammar(engine *e, const char *gbnf, size_t len, guide_grammar **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&e->guide_mu);
    int rc = 0;
    if (!e->guide_vocab) {
        rc = guide_vocab_new(e->tok, e->n_vocab, e->eog_ids, e->n_eog, &e->guide_vocab);
    }
    if (rc == 0 && !e->guides && !(e->guides = guide_registry_new())) {
        rc = -ENOMEM;
    }
    pthread_mutex_unlock(&e->guide_mu);
    if (rc != 0) {
        return tandem_fail(err, errlen, rc, "structured output: out of memory");
    }
    return guide_registry_get(e->guides, e->guide_vocab, gbnf, len, out, err, errlen);
}

const tokenizer *engine_tokenizer(const engine *e)
{
    return e->tok;
}

int engine_reset_prefix_cache(engine *e)
{
    pthread_mutex_lock(&e->mu);
    int rc = kvc_reset_prefix_cache(e->kv);
    events_flush(e);
    pthread_mutex_unlock(&e->mu);
    return rc;
}
