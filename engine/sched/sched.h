/*
 * The continuous-batching scheduler, with vLLM v1 semantics (vllm/v1/core/sched/scheduler.py):
 * no prefill/decode phases; every step each request is given tokens so that its
 * num_computed_tokens catches up with its token count (prompt + generated), under a token budget
 * (max_num_batched_tokens) and a sequence limit (max_num_seqs). Covers chunked prefill, prefix
 * caching (through engine/cache) and recompute preemption when KV blocks run out.
 *
 * One engine step:
 *   const sched_output *out = sched_schedule(s);          // who runs, which tokens, which blocks
 *   sched_fill_batch(out, ...) -> fwd_batch -> backend forward -> sample one token per entry
 *       with wants_logits (in entry order, the order of fwd_batch.logits rows)
 *   sched_update(s, sampled, n_sampled);                  // advance, append, cache, finish
 *   for each entry still RUNNING: detokenize; on EOS / stop string: sched_finish(s, req, STOPPED)
 *   out->finished lists requests the update finished (length); free them when done with them.
 *
 * Ownership: sched_add allocates a request and returns it; the scheduler keeps a borrowed
 * pointer while the request is WAITING/RUNNING/PREEMPTED and drops it the moment the request
 * finishes (sched_update for length, sched_finish, sched_abort). The caller frees every request
 * it got from sched_add with sched_req_free, once it no longer needs its tokens; freeing an
 * unfinished request aborts it first. A request finished or aborted between sched_schedule and
 * sched_update is removed from the pending output (its entry keeps its slot with req == NULL),
 * so it may be freed at once.
 *
 * Not thread-safe: one engine thread calls everything (other threads hand it aborts/new requests
 * through their own queue).
 *
 * Where this differs from vLLM, on purpose: prefix-cache queries/hits are counted once per
 * admission (vLLM counts every scheduling attempt of a waiting request); the PRIORITY waiting
 * queue is a sorted list rather than a heap (same order); a request whose prompt does not fit
 * the remaining budget with chunked prefill off blocks the queue head (as vLLM's break does).
 * Finish order matches vLLM's check_stop: length (max_tokens / max_model_len) is decided in
 * sched_update, EOS and stop strings afterwards by the caller through sched_finish.
 */
#ifndef TANDEM_ENGINE_SCHED_SCHED_H
#define TANDEM_ENGINE_SCHED_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cache/kv_groups.h"
#include "engine/cache/kvcache.h"
#include "engine/core/batch.h"
#include "lib/list.h"

typedef enum sched_policy {
    SCHED_FCFS,     /* arrival order; preempt the newest running request */
    SCHED_PRIORITY, /* lower priority value first, then arrival; preempt the max (prio, arrival) */
} sched_policy;

typedef enum sched_status {
    SCHED_WAITING,
    SCHED_RUNNING,
    SCHED_PREEMPTED,           /* back in the waiting queue, KV freed, will recompute */
    SCHED_FINISHED_STOPPED,    /* EOS / stop token / stop string (sched_finish) */
    SCHED_FINISHED_LENGTH,     /* max_tokens or max_model_len reached */
    SCHED_FINISHED_ABORTED,    /* cancelled (client gone, shutdown) */
    SCHED_WAITING_REMOTE_KV,   /* blocks allocated, the prompt's KV being loaded from a remote
                                  engine (sched_output.loads; sched_remote_kv_done ends it) */
    SCHED_FINISHED_REPETITION, /* the output repeats a pattern (repetition detection, through
                                  sched_finish) */
} sched_status;

/* True for the FINISHED_* states. */
bool sched_status_finished(sched_status st);
/* "stop", "length", "abort", "repetition" (vLLM finish_reason strings), or NULL for unfinished
 * states. */
const char *sched_status_reason(sched_status st);

typedef struct sched_config {
    int32_t max_num_seqs;                 /* running requests at most (>= 1) */
    int32_t max_num_batched_tokens;       /* tokens per step at most (>= 1) */
    int32_t max_model_len;                /* prompt + generated tokens at most (>= 2) */
    int32_t long_prefill_token_threshold; /* cap on one request's tokens per step; 0 = off */
    bool enable_chunked_prefill;          /* default true; false needs max_num_batched_tokens >=
                                             max_model_len and a prompt then runs whole or waits */
    sched_policy policy;
    int32_t max_waiting; /* waiting queue bound for sched_add (>= 1); -EAGAIN beyond */
    int32_t block_size;  /* 0: take the kvc's; otherwise must equal it */
    /* KV cache groups (engine/cache/kv_groups.h): block tables per request, 0 read as 1; the
     * groups share the kvc's pool and are allocated all or nothing. */
    int32_t n_kv_groups;
    /* per group: > 0 its layers attend to this many positions at most (sliding-window
     * attention): after each step a running request gives back the group's blocks before its
     * window (kvc_release_before), unless it keeps its KV for a remote decoder (delay_free), and
     * its prefix hits need only the window's blocks (kvc_lookup_window); 0 full attention */
    int32_t kv_group_window[KVG_MAX_GROUPS];
    /* > 0: running requests use at most this many distinct LoRA adapters (lora_name); a waiting
     * request that would add one more is passed over until one finishes (vLLM's max_loras) */
    int32_t max_loras;
    /* > 0: at most this many rows of prompt_logits requests (their chunks' tokens) per step: the
     * caller holds every such row's logits for the step (0: no bound) */
    int32_t max_prompt_logit_rows;
} sched_config;

/* Defaults: 128 seqs, 2048 tokens, max_model_len 2048, threshold off, chunked prefill on, FCFS,
 * max_waiting 1024, block_size 0. */
void sched_config_default(sched_config *cfg);

/* What the caller supplies for a new request. Everything is copied. */
typedef struct sched_req_params {
    uint64_t id;            /* caller's id, not interpreted */
    const int32_t *prompt;  /* [n_prompt] token ids, each >= 0 */
    int32_t n_prompt;       /* >= 1 and < max_model_len */
    int32_t max_tokens;     /* tokens to generate; <= 0: up to max_model_len; capped there */
    int32_t priority;       /* PRIORITY policy: lower runs first */
    const char *cache_salt; /* NULL: none; isolates prefix-cache hits by tenant */
    const char *lora_name;  /* NULL: none; enters every block hash and stored events */
    void *user;             /* caller's pointer, not interpreted */
    /* KV transfer (vLLM's KV connector, scheduler side):
     * delay_free: a request that finishes by length keeps its blocks (kv_held) until
     *   sched_release_held: a remote decoder reads them (the producer of a P/D pair);
     * load_remote: at admission the prompt's KV is loaded from elsewhere instead of computed:
     *   the request then waits in SCHED_WAITING_REMOTE_KV (the consumer). */
    bool delay_free;
    bool load_remote;
    /* prompt logprobs (vLLM's prompt_logprobs): the prompt is computed without prefix-cache hits
     * (and not counted as a prefix query), its chunks bounded by max_prompt_logit_rows, and each
     * chunk's entry asks for every row's logits (sched_entry.all_logits) */
    bool prompt_logits;
} sched_req_params;

/* A request. Read any field; write none (use the functions). */
typedef struct sched_req {
    uint64_t id;
    int32_t priority;
    void *user;
    uint64_t arrival; /* order of sched_add, from 0 */
    int32_t *tokens;  /* [n_tokens] prompt then generated tokens */
    int32_t n_tokens;
    int32_t cap_tokens; /* min(n_prompt + max_tokens, max_model_len) */
    int32_t n_prompt;
    int32_t max_tokens;          /* after defaulting (the cap may end it earlier: length) */
    int32_t num_computed_tokens; /* tokens whose KV is in the cache */
    int32_t num_cached_tokens;   /* prompt tokens served by the prefix cache at the first
                                    admission (usage.prompt_tokens_details.cached_tokens);
                                    -1 before the first admission */
    sched_status status;
    kvc_seq kv;                /* block table kv.blocks[0 .. kv.n_blocks) of KV cache group 0;
                                  the array never moves */
    kvc_seq *kv_more;          /* [n_kv_groups - 1] the other groups' tables (NULL: one group);
                                  each holds as many entries as kv */
    const int32_t **tables;    /* [n_kv_groups] every group's blocks array (NULL: one group) */
    int32_t n_kv_groups;       /* the scheduler's sched_config.n_kv_groups (at least 1) */
    int32_t num_preemptions;   /* times this request was preempted */
    int32_t num_output_tokens; /* generated tokens (n_tokens - n_prompt) */
    int32_t num_steps;         /* steps this request was scheduled in */
    bool delay_free;           /* see sched_req_params */
    bool load_remote;          /* still to be loaded remotely at admission */
    bool kv_held;              /* finished by length with its blocks kept (sched_release_held) */
    bool load_pending;         /* aborted while its load runs: blocks freed by the load's end */
    bool prompt_logits;        /* see sched_req_params */
    int32_t load_first_block;  /* WAITING_REMOTE_KV: first block of the load (local prefix hits
                                  before it) */
    int32_t load_n_blocks;     /* blocks [load_first_block, +n) to load: those holding prompt
                                  tokens before the last one (which is recomputed) */
    char *cache_salt;          /* owned copies (NULL when none) */
    char *lora_name;
    /* scheduler internals */
    struct list_node wait_node; /* in the waiting queue while WAITING/PREEMPTED */
    int32_t running_idx;        /* index in the running array, -1 when not running */
    int32_t out_idx;            /* entry in the pending output, -1 when none */
} sched_req;

/* One scheduled request of a step; directly a fwd_seq (engine/core/batch.h). */
typedef struct sched_entry {
    sched_req *req;             /* NULL when finished/aborted after scheduling: skip it */
    int32_t start_pos;          /* == req->num_computed_tokens at schedule time */
    int32_t n_new;              /* tokens to compute: req->tokens[start_pos .. start_pos + n_new) */
    const int32_t *tokens;      /* == req->tokens + start_pos */
    const int32_t *block_table; /* == req->kv.blocks, covering [0, start_pos + n_new) */
    const int32_t *const *group_tables; /* == req->tables: every group's (NULL: one group) */
    int32_t n_blocks;                   /* ceil((start_pos + n_new) / block_size) */
    bool wants_logits; /* start_pos + n_new == req->n_tokens: sample one token after */
    bool all_logits;   /* prompt_logits and start_pos < n_prompt - 1: the chunk's rows predict
                          prompt tokens, so every row's logits are wanted (fwd_seq.all_logits) */
} sched_entry;

/* A step's schedule, owned by the scheduler; valid until the next sched_schedule. After
 * sched_update the entries still name their requests (to check stop conditions), finished ones
 * included, until the caller frees those. */
typedef struct sched_output {
    sched_entry *entries; /* [n_entries] running requests first, then newly admitted ones */
    int32_t n_entries;
    int32_t n_tokens;      /* sum of n_new */
    int32_t n_logits;      /* entries with wants_logits: the n_sampled sched_update expects */
    sched_req **preempted; /* [n_preempted] preempted during this schedule (now waiting) */
    int32_t n_preempted;
    sched_req **finished; /* [n_finished] finished by the last sched_update (length) */
    int32_t n_finished;
    sched_req **loads; /* [n_loads] admitted for a remote KV load (WAITING_REMOTE_KV): start
                          each load, then report it with sched_remote_kv_done */
    int32_t n_loads;
} sched_output;

typedef struct sched sched;

/* Creates a scheduler over kv (borrowed; must outlive it; the scheduler is its only user of
 * blocks). Fails (NULL, message in err) on invalid config: limits < 1, block_size mismatch,
 * max_model_len above the pool's capacity ((num_blocks - 1) * block_size: one request alone must
 * always fit, which guarantees progress; with several KV cache groups, its blocks over all of
 * them, kv_groups_blocks_per_seq), or chunked prefill off with
 * max_num_batched_tokens < max_model_len. */
sched *sched_new(const sched_config *cfg, kvc *kv, char *err, size_t errlen);
/* Frees the scheduler. Requests stay the caller's: unfinished ones are aborted first (blocks
 * released); free them afterwards with sched_req_free(NULL, r). NULL is fine. */
void sched_free(sched *s);

/* Validates and queues a request. 0 and *out on success. -EINVAL (reason in err naming the
 * field: empty prompt, negative token id, prompt >= max_model_len), -EAGAIN when max_waiting
 * requests are already waiting (server: 503 + Retry-After), -ENOMEM. */
int sched_add(sched *s, const sched_req_params *p, sched_req **out, char *err, size_t errlen);

/* Cancels a request in any unfinished state: removes it from its queue and from the pending
 * output, frees its blocks, status FINISHED_ABORTED. 0, or -EALREADY when already finished. */
int sched_abort(sched *s, sched_req *r);

/* Finishes a running/waiting request with the given FINISHED_* status (EOS, stop string) as
 * sched_abort does. 0, -EALREADY when already finished, -EINVAL for a non-finished status. */
int sched_finish(sched *s, sched_req *r, sched_status st);

/* Frees a request from sched_add, aborting it first when unfinished (s may be NULL only for a
 * finished request that holds no blocks: not kv_held, not load_pending). NULL r is fine. */
void sched_req_free(sched *s, sched_req *r);

/* The remote load of a WAITING_REMOTE_KV request ended. ok: its blocks hold the prompt's KV up
 * to the last prompt token, which is recomputed (num_computed_tokens = n_prompt - 1, the loaded
 * full blocks enter the prefix cache) and it waits for admission at the queue's front; not ok:
 * its blocks are freed and it is prefilled locally like any request. A request aborted while
 * loading (load_pending) only gets its blocks freed. 0, or -EINVAL for a request in another
 * state. */
int sched_remote_kv_done(sched *s, sched_req *r, bool ok);

/* Frees the blocks of a kv_held request (the remote decoder has read them, or the hold
 * expired). No-op for one that holds none. */
void sched_release_held(sched *s, sched_req *r);

/* Requests waiting for their remote KV load. */
int32_t sched_num_loading(const sched *s);

/* Plans one step (phase A: running requests, preempting when blocks run out; phase B, only when
 * nothing was preempted: admit waiting requests with prefix-cache lookup and chunking). Never
 * NULL; n_entries may be 0 (nothing to do). Invalidates the previous output. */
const sched_output *sched_schedule(sched *s);

/* Applies the step's results: sampled[k] is the token sampled for the k-th entry with
 * wants_logits (entries whose req became NULL still own their slot k). Advances
 * num_computed_tokens, appends the sampled tokens, caches newly full blocks (KV events),
 * finishes requests that reached max_tokens or max_model_len (FINISHED_LENGTH; blocks freed)
 * and lists them in out->finished. 0, or -EINVAL when n_sampled != out->n_logits or a sampled
 * token is negative (nothing applied). Call once per sched_schedule. */
int sched_update(sched *s, const int32_t *sampled, int32_t n_sampled);

/* Fills a fwd_batch from out: copies the entries' tokens into tokens_buf (cap tokens_cap) and
 * one fwd_seq per entry into seqs (cap seqs_cap), in entry order, so logits row k belongs to
 * the k-th entry with wants_logits, which is what sched_update expects. batch->logits,
 * hidden and row_logits are left NULL for the caller. Call it right after sched_schedule, before
 * anything can be aborted. 0, -ENOSPC (a buffer too small) or -EINVAL (an entry already lost its
 * request). */
int sched_fill_batch(const sched_output *out, int32_t *tokens_buf, int32_t tokens_cap,
                     fwd_seq *seqs, int32_t seqs_cap, fwd_batch *batch);

/* Stats. */
int32_t sched_num_running(const sched *s);
int32_t sched_num_waiting(const sched *s); /* includes preempted requests */
bool sched_has_work(const sched *s);       /* anything running or waiting */
uint64_t sched_num_preemptions(const sched *s);
uint64_t sched_prompt_tokens_total(const sched *s);     /* prompts that produced a 1st token */
uint64_t sched_generation_tokens_total(const sched *s); /* sampled tokens appended */
double sched_kv_usage(const sched *s);
uint64_t sched_prefix_queries(const sched *s);
uint64_t sched_prefix_hits(const sched *s);
const sched_config *sched_get_config(const sched *s);

#endif
