/*
 * The engine core: one step loop that ties the scheduler (engine/sched), the KV block manager
 * (engine/cache), a compute backend (engine/core/backend.h), the sampler and stop strings
 * (engine/sampler) and the incremental detokenizer (engine/tokenizer) together. The server and
 * the CLI talk only to this API.
 *
 * One step (engine_step), split as vLLM v1 splits EngineCore from its OutputProcessor:
 *   core, under the engine lock: queued aborts are applied → sched_schedule → sched_fill_batch;
 *   without the lock: backend forward → per sequence that wants logits: sample (or take the
 *   teacher token);
 *   core, under the lock: sched_update → stop tokens (eos, stop_token_ids), which may end a
 *   request;
 *   output processor, without the lock: detokenize, stop strings, one engine_output callback per
 *   sequence that produced a token or finished; a request ended by a stop string (or whose text
 *   was lost) is then ended in the core under one more short lock.
 * The engine lock thus covers only the scheduler, the KV block manager and the request lists;
 * the stepping thread alone touches a running request's sampler, detokenizer and stop matcher.
 *
 * Threads: engine_submit, engine_abort, engine_stats and engine_shutdown may be called from any
 * thread. engine_step is called by one thread at a time: either the caller's own loop (CLI,
 * tests: deterministic) or the engine's thread (engine_start). Output callbacks run on the
 * stepping thread without the engine lock (aborted requests' ones too, at the start of the
 * step): they may call engine_submit and engine_abort but not engine_step, engine_stop or
 * engine_free, and should be quick (queue the output and wake your own loop).
 *
 * Metrics: when engine_config.metrics is set, the engine registers and updates vLLM's metric
 * families there (vllm:num_requests_running, vllm:kv_cache_usage_perc, ... see docs/engine.md),
 * labelled model_name and engine="0".
 */
#ifndef TANDEM_ENGINE_CORE_ENGINE_H
#define TANDEM_ENGINE_CORE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cache/kvcache.h"
#include "engine/core/backend.h"
#include "engine/core/lora_registry.h"
#include "engine/grammar/guide.h"
#include "engine/model/model.h"
#include "engine/sampler/sampler.h"
#include "engine/sched/sched.h"
#include "engine/tokenizer/tokenizer.h"

struct metrics_registry;

/* KV storage element type: auto picks F32 for F32 models and F16 otherwise (like vLLM's "auto"
 * follows the model dtype). */
typedef enum engine_kv_dtype {
    ENGINE_KV_AUTO,
    ENGINE_KV_F32,
    ENGINE_KV_F16,
} engine_kv_dtype;

typedef struct engine_config {
    int32_t max_model_len;          /* 0: the model's context length */
    int32_t max_num_seqs;           /* 0: 128 */
    int32_t max_num_batched_tokens; /* 0: 2048 (at least max_num_seqs) */
    int32_t block_size;             /* 0: 16 */
    size_t kv_cache_bytes;          /* 0: 1 GiB, trimmed to what max_num_seqs full sequences need */
    engine_kv_dtype kv_dtype;
    int n_threads; /* 0: one per online core */
    bool pin_threads;
    bool enforce_eager; /* GPU backends: no CUDA graphs (vLLM's --enforce-eager) */
    bool disable_prefix_caching;
    uint64_t prefix_hash_seed; /* seeds the block-hash chain (like PYTHONHASHSEED) */
    int32_t max_waiting;       /* 0: 1024; beyond it engine_submit answers -EAGAIN */
    sched_policy policy;
    int32_t long_prefill_token_threshold; /* 0: off */
    bool disable_chunked_prefill;
    kvc_event_sink kv_events;         /* KV cache events (all callbacks may be NULL) */
    struct metrics_registry *metrics; /* NULL: no metrics */
    const char *served_model_name;    /* model_name label; NULL: the model's name */
    const backend_ops *backend;       /* NULL: cpu_backend_ops */
    /* 0/1: one backend; N: the model split over N ranks of `backend` (tp_backend_ops,
     * docs/tensor-parallel.md); kv_cache_bytes is then each rank's budget */
    int32_t tensor_parallel_size;
    /* LoRA (vLLM's --enable-lora): > 0 turns it on, at most this many distinct adapters run at
     * once (--max-loras); adapters are loaded through engine_loras */
    int32_t max_loras;
    int32_t max_lora_rank; /* 0: 16; one of vLLM's 1, 8, 16, 32, 64, 128, 256, 320, 512 */
    /* vLLM's --disable-hybrid-kv-cache-manager: a model mixing full and sliding-window attention
     * layers (gemma2, gemma3) then keeps one block table, every layer's blocks for the whole
     * context. Otherwise the sliding layers get block tables of their own whose blocks before the
     * window go back to the pool (engine/cache/kv_groups.h), except where vLLM turns the hybrid
     * manager off too: with KV events (kv_events), a KV connector (set this: the engine refuses
     * engine_set_kv_connector with several groups), a backend without groups (CUDA, tensor
     * parallelism). */
    bool disable_hybrid_kv_cache_manager;
} engine_config;

typedef struct engine engine;

/*
 * P/D KV transfer (vLLM's KV connector with NIXL v2 semantics; docs/agent.md). The engine does
 * the scheduling half: a PRODUCE request (kv_transfer_params.do_remote_decode) keeps its blocks
 * after it finishes by length until engine_kv_release (the decoder's notification) or the hold
 * timeout; a CONSUME request (do_remote_prefill) reuses its local prefix hits, has the connector
 * copy the blocks it lacks from the producer, then computes from the last prompt token on. The
 * connector (the agent's UCX transport) does the moving.
 */
typedef enum engine_kvt_mode {
    ENGINE_KVT_NONE,
    ENGINE_KVT_PRODUCE,
    ENGINE_KVT_CONSUME,
} engine_kvt_mode;

typedef struct engine_kv_transfer {
    engine_kvt_mode mode;
    const char *request_id; /* PRODUCE: what the decoder will notify (remote_request_id) */
    /* CONSUME: the producer's kv_transfer_params */
    const char *remote_engine_id;
    const char *remote_host;
    int32_t remote_port;
    const char *remote_request_id;
    const int32_t *remote_block_ids;
    int32_t n_remote_blocks;
} engine_kv_transfer;

/* One load for the connector: copy remote_blocks[i] of every KV region of the remote engine into
 * local_blocks[i] of ours, then send notify to the producer (also when n_blocks is 0). */
typedef struct engine_kv_load {
    uint64_t id; /* for engine_kv_load_done */
    const char *remote_engine_id;
    const char *remote_host;
    int32_t remote_port;
    const int32_t *remote_blocks; /* [n_blocks], borrowed for the call */
    const int32_t *local_blocks;
    int32_t n_blocks;
    const char *notify; /* "<remote_request_id>:<tp_size>" */
} engine_kv_load;

typedef struct engine_kv_connector {
    void *ud;
    const char *engine_id; /* this engine's id (remote_engine_id of its answers) */
    const char *host;      /* side channel address (remote_host) */
    int32_t port;          /* side channel port (remote_port) */
    int32_t tp_size;       /* 1 */
    double hold_timeout_s; /* held blocks are freed after this; 0: 480 (vLLM's
                              VLLM_NIXL_ABORT_REQUEST_TIMEOUT) */
    /* Queues a load (called with the engine lock held: only queue). 0, or a negative errno: the
     * request is then prefilled locally. Its end is reported with engine_kv_load_done. */
    int (*start_load)(void *ud, const engine_kv_load *load);
} engine_kv_connector;

/* What one step reports about one request (borrowed pointers: valid during the callback). */
typedef struct engine_output {
    uint64_t id;
    void *user;
    int32_t token;       /* token generated in this step, -1 when none (abort, error) */
    const float *logits; /* raw logits of this step ([n_vocab]) when return_logits */
    const struct sample_result *sample; /* logprobs of the token when asked, else NULL */
    /* engine_request.prompt_logprobs, on the request's first output only (else NULL / 0):
     * [n_prompt - 1] entries, entry i for prompt position i + 1 (token: the prompt's token there,
     * logprob and rank: its raw ones, top: the most likely tokens, best first) */
    const struct sample_result *prompt_logprobs;
    int32_t n_prompt_logprobs;
    const char *text; /* new text safe to emit (stop strings applied), may be "" */
    size_t text_len;
    bool finished;
    sched_status status; /* FINISHED_* when finished */
    int stop_index;      /* index of the matched stop string, -1 */
    int32_t stop_token;  /* the stop token id (eos / stop_token_ids), -1 */
    int32_t n_prompt;
    int32_t n_generated;
    int32_t n_cached; /* prompt tokens served from the prefix cache */
    int error; /* 0, or why the engine ended the request early (-ENOMEM: its text could not be
                  produced); it is then finished with FINISHED_ABORTED and text "" */
    /* finished PRODUCE request whose blocks are held for the decoder (n_kv_blocks > 0): */
    const int32_t *kv_block_ids;
    int32_t n_kv_blocks;
    const char *kv_request_id;
    /* embedding requests (engine_request.pool), finished output: the pooled vector */
    const float *embedding;
    int32_t n_embedding;
    /* CONSUME: 1 the prompt's KV was loaded remotely, -1 the load failed and the prompt was
     * computed here; 0 not a CONSUME request */
    int kv_loaded;
    double kv_load_seconds; /* kv_loaded 1: how long the load took (start to done) */
} engine_output;

typedef void (*engine_output_fn)(void *user, const engine_output *out);

/* Pooling of an embedding request (vLLM's pooling_type): the final-normed hidden state of the
 * prompt's last token, or the mean over all its tokens. */
typedef enum engine_pool {
    ENGINE_POOL_NONE = 0,
    ENGINE_POOL_LAST,
    ENGINE_POOL_MEAN,
} engine_pool;

typedef struct engine_request {
    const int32_t *prompt; /* [n_prompt] token ids (copied) */
    int32_t n_prompt;
    struct sampling_params sampling; /* its arrays are copied */
    int32_t max_tokens;              /* <= 0: until max_model_len */
    const char *const *stop;         /* [n_stop] stop strings (copied) */
    size_t n_stop;
    bool include_stop_str_in_output;
    bool skip_special_tokens;
    int32_t priority;
    const char *cache_salt;
    /* a loaded LoRA adapter's name (engine_loras), NULL: the base model; it also enters every
     * block hash, so the prefix cache never mixes adapters */
    const char *lora_name;
    const int32_t *teacher; /* [n_teacher] tokens forced instead of sampled ones (copied); the
                               request ends after them unless max_tokens ends it first */
    int32_t n_teacher;
    bool return_logits; /* engine_output.logits gets the raw row */
    /* vLLM's prompt_logprobs: the first output carries, for every prompt position after the
     * first, the prompt token's raw logprob and rank and the prompt_top_logprobs (0 ..
     * SAMPLER_MAX_LOGPROBS) most likely tokens there. The prompt then bypasses the prefix cache
     * (every position needs its logits, as vLLM v1) and is computed in chunks the engine bounds
     * (the logits of every row are held for a step). */
    bool prompt_logprobs;
    int32_t prompt_top_logprobs;
    guide_grammar *guide; /* structured output (engine_guide_grammar), NULL: none; the request
                             takes its own reference */
    /* embeddings: pool the prompt's hidden states into the finished output's embedding (L2-
     * normalised when normalize); the prompt is run without the prefix cache (a mean needs every
     * token), and max_tokens should be 1: the token sampled after the prompt is not used */
    engine_pool pool;
    bool normalize;
    const engine_kv_transfer *kv_transfer; /* NULL: none (copied) */
    engine_output_fn on_output;
    void *user;
} engine_request;

/* Builds the engine for m and tok (borrowed; they must outlive it) with cfg (copied; NULL for
 * defaults): sizes and allocates the KV cache, creates the backend. NULL + err on failure. */
engine *engine_new(const model *m, const tokenizer *tok, const engine_config *cfg, char *err,
                   size_t errlen);
/* Stops the thread (if started), aborts every request (their callbacks fire) and frees. */
void engine_free(engine *e);

/* Queues a request. Returns its id (> 0), or -EINVAL (err: the reason, naming the field:
 * prompt too long for max_model_len, token id out of the vocabulary, bad sampling values),
 * -EAGAIN (waiting queue full: answer 503 + Retry-After), -ESHUTDOWN (draining), -ENOMEM. */
int64_t engine_submit(engine *e, const engine_request *r, char *err, size_t errlen);

/* Aborts a request (applied at the next step boundary; its callback reports FINISHED_ABORTED).
 * Unknown or finished ids are ignored. Never fails: the queue node is part of the request. */
void engine_abort(engine *e, uint64_t id);

/* Runs one step. Returns the number of sequences computed (0: nothing to do) or a negative errno
 * from the backend (every running request is then aborted). */
int engine_step(engine *e);

/* True while any request is queued or running. */
bool engine_has_work(engine *e);

/* Starts a thread that steps while there is work and sleeps otherwise. 0 or -errno. */
int engine_start(engine *e);
/* Refuses new requests (-ESHUTDOWN) from now on; running ones continue. */
void engine_shutdown(engine *e);
/* Stops the thread after the current step (requests stay queued). */
void engine_stop(engine *e);

typedef struct engine_stats {
    int32_t running, waiting;
    double kv_usage;
    int32_t num_blocks; /* KV blocks (including the null block) */
    int32_t block_size;
    int32_t max_model_len;
    uint64_t prompt_tokens, generation_tokens, preemptions, prefix_queries, prefix_hits;
    int32_t kv_held;    /* finished PRODUCE requests holding blocks */
    int32_t kv_loading; /* CONSUME requests whose load runs */
    uint64_t kv_loads, kv_load_failures, kv_released, kv_expired;
    int32_t kv_dtype_bytes; /* 4 (F32) or 2 (F16) */
    int32_t kv_groups;      /* KV cache groups: block tables per request (1 without the hybrid
                               KV cache manager) */
} engine_stats;

void engine_get_stats(engine *e, engine_stats *out);
int32_t engine_max_model_len(const engine *e);
const model *engine_model(const engine *e);
const tokenizer *engine_tokenizer(const engine *e);

/* Reads vLLM's --pooler-config JSON ({"pooling_type": "LAST" | "MEAN", "normalize": bool})
 * into pool / normalize (fields it lacks stay as they are). 0, or -EINVAL with err naming the
 * field. */
int engine_pooler_config_parse(const char *json, engine_pool *pool, bool *normalize, char *err,
                               size_t errlen);

/* The compiled grammar of GBNF text gbnf[0..len) over this engine's vocabulary, for
 * engine_request.guide: compiled once and shared while it stays among the engine's recent
 * grammars (guide_registry). *out gets a reference the caller drops (guide_grammar_unref) after
 * submitting. 0, or the compile error (-EINVAL, -E2BIG with err naming the rule), -ENOMEM. */
int engine_guide_grammar(engine *e, const char *gbnf, size_t len, guide_grammar **out, char *err,
                         size_t errlen);

/* The loaded LoRA adapters (load, unload, list: lora_registry.h), NULL when max_loras is 0. */
lora_registry *engine_loras(engine *e);

/* Clears the prefix cache (AllBlocksCleared event); -EBUSY while any request runs. */
int engine_reset_prefix_cache(engine *e);

/* Attaches the KV connector (copied, strings too) before engine_start. -EINVAL, -ENOMEM. */
int engine_set_kv_connector(engine *e, const engine_kv_connector *c);
/* The connector given, or NULL. */
const engine_kv_connector *engine_kv_connector_get(const engine *e);
/* A load ended (any thread): status 0 the blocks are in place, else the request is prefilled
 * here. Unknown ids are ignored. */
void engine_kv_load_done(engine *e, uint64_t load_id, int status);
/* The decoder's notification for request_id (any thread): frees the held blocks. 0, or -ENOENT
 * for an id that holds nothing (unknown, already released or expired). */
int engine_kv_release(engine *e, const char *request_id);
/* Base and length of the K (kv 0) or V (kv 1) pool of a layer, for the connector's
 * registration. */
void *engine_kv_pool(engine *e, int layer, int kv, size_t *bytes);
/* Where those pools live: -1 host memory, else the CUDA device ordinal (the cuda backend's). */
int engine_kv_device(const engine *e);
/* Moves the KV pools into memory the connector's transport allocated (bases[2 * layer + kv], each
 * bytes[...] long, equal to engine_kv_pool's, 64-byte aligned; not owned: it must outlive the
 * engine's last step). Only before engine_start and the first submit. 0, -EBUSY (too late),
 * -ENOTSUP (the backend cannot), -EINVAL (a size or alignment differs; nothing moved). bases
 * NULL asks only whether it would (0, -EBUSY, -ENOTSUP). */
int engine_kv_adopt_pools(engine *e, void *const *bases, const size_t *bytes);

#endif
