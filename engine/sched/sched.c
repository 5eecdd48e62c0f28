/*
 * Continuous-batching scheduler (see sched.h). Running requests live in an array in admission
 * order (FCFS preempts its tail); waiting requests in a lib/list.h queue (FCFS: arrival order,
 * preempted ones pushed to the front; PRIORITY: kept sorted by (priority, arrival)).
 */
#include "engine/sched/sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common.h"
#include "lib/err.h"
#include "lib/list.h"

struct sched {
    sched_config cfg;
    kvc *kv;
    int32_t block_size;
    sched_req **running; /* [cfg.max_num_seqs] in admission order */
    int32_t n_running;
    struct list_node waiting; /* sched_req.wait_node, in queue order */
    int32_t n_waiting;
    struct list_node loading; /* sched_req.wait_node while WAITING_REMOTE_KV */
    int32_t n_loading;
    uint64_t next_arrival;
    sched_output out;
    int32_t n_groups;    /* KV cache groups (cfg.n_kv_groups, at least 1) */
    bool update_pending; /* a schedule awaits its sched_update */
    uint64_t preemptions;
    uint64_t prompt_tokens;
    uint64_t generation_tokens;
    const char **loras; /* [max_num_seqs] running requests' distinct adapters (max_loras > 0) */
    int32_t n_loras;
    /* a waiting request's prefix hits per group, from the lookup to the allocation */
    kvc_hits hits[KVG_MAX_GROUPS];
};

bool sched_status_finished(sched_status st)
{
    return st == SCHED_FINISHED_STOPPED || st == SCHED_FINISHED_LENGTH ||
           st == SCHED_FINISHED_ABORTED || st == SCHED_FINISHED_REPETITION;
}

const char *sched_status_reason(sched_status st)
{
    switch (st) {
    case SCHED_FINISHED_STOPPED:
        return "stop";
    case SCHED_FINISHED_LENGTH:
        return "length";
    case SCHED_FINISHED_ABORTED:
        return "abort";
    case SCHED_FINISHED_REPETITION:
        return "repetition";
    default:
        return NULL;
    }
}

void sched_config_default(sched_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_num_seqs = 128;
    cfg->max_num_batched_tokens = 2048;
    cfg->max_model_len = 2048;
    cfg->long_prefill_token_threshold = 0;
    cfg->enable_chunked_prefill = true;
    cfg->policy = SCHED_FCFS;
    cfg->max_waiting = 1024;
    cfg->block_size = 0;
}

sched *sched_new(const sched_config *cfg, kvc *kv, char *err, size_t errlen)
{
    tandem_set_err(err, errlen, "%s", "");
    if (!cfg || !kv) {
        tandem_set_err(err, errlen, "sched: config and KV cache are required");
        return NULL;
    }
    int32_t bs = kvc_block_size(kv);
    int64_t capacity = (int64_t)(kvc_num_blocks(kv) - 1) * bs;
    if (cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < 1 || cfg->max_waiting < 1) {
        tandem_set_err(
            err, errlen,
            "max_num_seqs (%d), max_num_batched_tokens (%d) and max_waiting (%d) must be >= 1",
            cfg->max_num_seqs, cfg->max_num_batched_tokens, cfg->max_waiting);
        return NULL;
    }
    if (cfg->max_model_len < 2) {
        tandem_set_err(err, errlen, "max_model_len: %d must be >= 2", cfg->max_model_len);
        return NULL;
    }
    const int32_t n_groups = cfg->n_kv_groups > 0 ? cfg->n_kv_groups : 1;
    if (cfg->n_kv_groups < 0 || cfg->n_kv_groups > KVG_MAX_GROUPS) {
        tandem_set_err(err, errlen, "n_kv_groups: %d must be in [0, %d]", cfg->n_kv_groups,
                       KVG_MAX_GROUPS);
        return NULL;
    }
    for (int32_t g = 0; g < n_groups; g++) {
        if (cfg->kv_group_window[g] < 0) {
            tandem_set_err(err, errlen, "kv_group_window[%d]: %d must be >= 0", (int)g,
                           cfg->kv_group_window[g]);
            return NULL;
        }
    }
    if (cfg->long_prefill_token_threshold < 0) {
        tandem_set_err(err, errlen, "long_prefill_token_threshold: %d must be >= 0",
                       cfg->long_prefill_token_threshold);
        return NULL;
    }
    if (cfg->max_prompt_logit_rows < 0) {
        tandem_set_err(err, errlen, "max_prompt_logit_rows: %d must be >= 0",
                       cfg->max_prompt_logit_rows);
        return NULL;
    }
    if (cfg->policy != SCHED_FCFS && cfg->policy != SCHED_PRIORITY) {
        tandem_set_err(err, errlen, "policy: unknown value %d", (int)cfg->policy);
        return NULL;
    }
    if (cfg->block_size != 0 && cfg->block_size != bs) {
        tandem_set_err(err, errlen, "block_size: %d differs from the KV cache's %d",
                       cfg->block_size, bs);
        return NULL;
    }
    /* one request alone must always fit (one group: its whole context, capacity) */
    int64_t per_seq = kv_groups_blocks_per_seq(n_groups, cfg->kv_group_window, cfg->max_model_len,
                                               cfg->max_num_batched_tokens, bs);
    if (per_seq > kvc_num_blocks(kv) - 1) {
        if (n_groups == 1) {
            tandem_set_err(err, errlen,
                           "max_model_len: %d tokens exceed the KV cache capacity of %lld tokens "
                           "(%d blocks of %d)",
                           cfg->max_model_len, (long long)capacity, kvc_num_blocks(kv) - 1, bs);
        } else {
            tandem_set_err(err, errlen,
                           "max_model_len: a %d-token sequence needs %lld blocks over its %d KV "
                           "cache groups, more than the %d blocks of the KV cache",
                           cfg->max_model_len, (long long)per_seq, (int)n_groups,
                           kvc_num_blocks(kv) - 1);
        }
        return NULL;
    }
    if (!cfg->enable_chunked_prefill && cfg->max_num_batched_tokens < cfg->max_model_len) {
        tandem_set_err(
            err, errlen,
            "max_num_batched_tokens: %d is below max_model_len %d with chunked prefill off",
            cfg->max_num_batched_tokens, cfg->max_model_len);
        return NULL;
    }
    sched *s = calloc(1, sizeof(*s));
    if (!s) {
        goto err_nomem;
    }
    s->cfg = *cfg;
    s->cfg.block_size = bs;
    s->cfg.n_kv_groups = n_groups;
    s->n_groups = n_groups;
    list_init(&s->waiting);
    list_init(&s->loading);
    s->kv = kv;
    s->block_size = bs;
    size_t n = (size_t)cfg->max_num_seqs;
    s->running = calloc(n, sizeof(sched_req *));
    s->loras = calloc(n, sizeof(char *));
    s->out.entries = calloc(n, sizeof(*s->out.entries));
    s->out.preempted = calloc(n, sizeof(sched_req *));
    s->out.finished = calloc(n, sizeof(sched_req *));
    s->out.loads = calloc(n, sizeof(sched_req *));
    bool hits_ok = true;
    for (int32_t g = 0; g < n_groups; g++) {
        s->hits[g].cap = (cfg->max_model_len + bs - 1) / bs; /* a request's max_blocks at most */
        s->hits[g].blocks = calloc((size_t)s->hits[g].cap, sizeof(*s->hits[g].blocks));
        hits_ok &= s->hits[g].blocks != NULL;
    }
    if (!s->running || !s->loras || !s->out.entries || !s->out.preempted || !s->out.finished ||
        !s->out.loads || !hits_ok) {
        goto err_free;
    }
    return s;

err_free:
    for (int32_t g = 0; g < n_groups; g++) {
        free(s->hits[g].blocks);
    }
    free(s->running);
    free(s->loras);
    free(s->out.entries);
    free(s->out.preempted);
    free(s->out.finished);
    free(s->out.loads);
    free(s);
err_nomem:
    tandem_set_err(err, errlen, "sched: out of memory");
    return NULL;
}

/* ---- queues ----------------------------------------------------------------------------- */

static bool prio_before(const sched_req *a, const sched_req *b)
{
    return a->priority != b->priority ? a->priority < b->priority : a->arrival < b->arrival;
}

static sched_req *wait_entry(struct list_node *n)
{
    return n ? list_entry(n, sched_req, wait_node) : NULL;
}

/* FCFS: at the tail (new) or the head (preempted). PRIORITY: in (priority, arrival) order. */
static void wait_push(sched *s, sched_req *r, bool front)
{
    if (s->cfg.policy == SCHED_PRIORITY) {
        struct list_node *pos = s->waiting.prev;
        while (pos != &s->waiting && prio_before(r, wait_entry(pos))) {
            pos = pos->prev;
        }
        list_insert_after(pos, &r->wait_node);
    } else if (front) {
        list_push_front(&s->waiting, &r->wait_node);
    } else {
        list_push_back(&s->waiting, &r->wait_node);
    }
    s->n_waiting++;
}

static void wait_remove(sched *s, sched_req *r)
{
    list_unlink(&r->wait_node);
    s->n_waiting--;
}

static void running_remove(sched *s, sched_req *r)
{
    int32_t i = r->running_idx;
    TANDEM_ASSERT(i >= 0 && i < s->n_running && s->running[i] == r);
    for (; i + 1 < s->n_running; i++) {
        s->running[i] = s->running[i + 1];
        s->running[i]->running_idx = i;
    }
    s->n_running--;
    r->running_idx = -1;
}

/* Drops r's entry from the output being built (schedule time only), refunding nothing. */
static void out_remove_entry(sched *s, sched_req *r)
{
    sched_output *o = &s->out;
    int32_t i = r->out_idx;
    TANDEM_ASSERT(i >= 0 && i < o->n_entries && o->entries[i].req == r);
    o->n_tokens -= o->entries[i].n_new;
    o->n_logits -= o->entries[i].wants_logits;
    for (; i + 1 < o->n_entries; i++) {
        o->entries[i] = o->entries[i + 1];
        o->entries[i].req->out_idx = i;
    }
    o->n_entries--;
    r->out_idx = -1;
}

/* ---- KV cache groups: every group of a request moves together ----------------------------- */

static kvc_seq *req_kv(sched_req *r, int32_t g)
{
    return g == 0 ? &r->kv : &r->kv_more[g - 1];
}

static void kv_release(sched *s, sched_req *r)
{
    for (int32_t g = 0; g < s->n_groups; g++) {
        kvc_release(s->kv, req_kv(r, g));
    }
}

/* Registers the full blocks of r's computed tokens in the prefix cache, in every group. */
static void kv_cache(sched *s, sched_req *r)
{
    for (int32_t g = 0; g < s->n_groups; g++) {
        kvc_cache_blocks(s->kv, req_kv(r, g), r->tokens, r->num_computed_tokens);
    }
}

/* Gives back the blocks of r's sliding-window groups that the next query (at
 * num_computed_tokens) no longer reads, unless r keeps its KV for a remote decoder. */
static void kv_release_skipped(sched *s, sched_req *r)
{
    for (int32_t g = 0; g < s->n_groups && !r->delay_free; g++) {
        int32_t w = s->cfg.kv_group_window[g];
        if (w > 0) {
            kvc_release_before(s->kv, req_kv(r, g), r->num_computed_tokens - w + 1);
        }
    }
}

/* The prefix hit of a waiting request over every group, into s->hits (vLLM's hybrid
 * coordinator: each group's lookup capped by the others' until they agree; a full-attention
 * group's hits are a prefix and are shortened to the agreed length). Hit tokens. */
static int32_t kv_lookup(sched *s, sched_req *r)
{
    if (s->n_groups == 1) {
        return kvc_lookup(s->kv, &r->kv, r->tokens, r->n_tokens, &s->hits[0]);
    }
    int32_t hit = r->n_tokens;
    for (int32_t before = -1; hit != before;) {
        before = hit;
        for (int32_t g = 0; g < s->n_groups; g++) {
            int32_t w = s->cfg.kv_group_window[g];
            int32_t got =
                w > 0 ? kvc_lookup_window(s->kv, req_kv(r, g), r->tokens, r->n_tokens, hit, w,
                                          &s->hits[g])
                      : kvc_lookup(s->kv, req_kv(r, g), r->tokens, r->n_tokens, &s->hits[g]);
            TANDEM_ASSERT(got >= 0);
            hit = got < hit ? got : hit;
        }
    }
    for (int32_t g = 0; g < s->n_groups; g++) {
        TANDEM_ASSERT(s->hits[g].n_blocks * s->block_size >= hit);
        s->hits[g].n_blocks = hit / s->block_size;
    }
    return hit;
}

/* No prefix hits (and no query) in any group. */
static void kv_no_hits(sched *s)
{
    for (int32_t g = 0; g < s->n_groups; g++) {
        s->hits[g].n_blocks = 0;
        s->hits[g].query_tokens = 0;
    }
}

/* Makes every group of r hold blocks for positions [0, n_total), taking the lookup's hits in
 * s->hits first when with_hits: all groups or none (-ENOSPC). */
static int kv_allocate(sched *s, sched_req *r, int32_t n_total, bool with_hits)
{
    if (s->n_groups == 1) {
        return kvc_allocate(s->kv, &r->kv, n_total, with_hits ? &s->hits[0] : NULL);
    }
    int64_t need = 0;
    for (int32_t g = 0; g < s->n_groups; g++) {
        int32_t n = kvc_blocks_needed(s->kv, req_kv(r, g), n_total, with_hits ? &s->hits[g] : NULL);
        if (n < 0) {
            return n;
        }
        need += n;
    }
    if (need > kvc_num_free_blocks(s->kv)) {
        return -ENOSPC;
    }
    /* every group's hits out of the free queue before any fresh block is popped from it (a pop
     * may evict a cached block: never another group's hit) */
    for (int32_t g = 0; with_hits && g < s->n_groups; g++) {
        int rc =
            kvc_allocate(s->kv, req_kv(r, g), s->hits[g].n_blocks * s->block_size, &s->hits[g]);
        TANDEM_ASSERT(rc == 0);
    }
    for (int32_t g = 0; g < s->n_groups; g++) {
        int rc = kvc_allocate(s->kv, req_kv(r, g), n_total, NULL);
        TANDEM_ASSERT(rc == 0);
    }
    return 0;
}

/* Takes r out of every queue and the pending output, frees its blocks, sets st. A request that
 * finishes by length with delay_free keeps its blocks (kv_held); one whose remote load runs
 * keeps them until the load ends (load_pending: the transfer still writes into them). */
static void finish_internal(sched *s, sched_req *r, sched_status st)
{
    if (r->status == SCHED_RUNNING) {
        running_remove(s, r);
    } else if (r->status == SCHED_WAITING_REMOTE_KV) {
        list_unlink(&r->wait_node);
        s->n_loading--;
        r->load_pending = true;
    } else {
        wait_remove(s, r);
    }
    if (r->out_idx >= 0) {
        s->out.entries[r->out_idx].req = NULL;
        r->out_idx = -1;
    }
    if (st == SCHED_FINISHED_LENGTH && r->delay_free && r->kv.n_blocks > 0) {
        r->kv_held = true;
    } else if (!r->load_pending) {
        kv_release(s, r);
    }
    r->status = st;
}

/* ---- requests --------------------------------------------------------------------------- */

/* Frees the tables of r's groups (holding no blocks). */
static void req_free_kv(sched_req *r)
{
    for (int32_t g = 0; g < r->n_kv_groups; g++) {
        kvc_seq *q = g == 0 ? &r->kv : (r->kv_more ? &r->kv_more[g - 1] : NULL);
        if (q) {
            TANDEM_ASSERT(q->n_blocks == 0);
            free(q->blocks);
            free(q->hashes);
        }
    }
    free(r->kv_more);
    free(r->tables);
}

static char *dup_opt(const char *str)
{
    return (str && str[0]) ? strdup(str) : NULL;
}

int sched_add(sched *s, const sched_req_params *p, sched_req **out, char *err, size_t errlen)
{
    tandem_set_err(err, errlen, "%s", "");
    *out = NULL;
    if (p->n_prompt < 1 || !p->prompt) {
        return tandem_fail(err, errlen, -EINVAL, "prompt: must contain at least one token");
    }
    if (p->n_prompt >= s->cfg.max_model_len) {
        return tandem_fail(
            err, errlen, -EINVAL,
            "prompt: this model's maximum context length is %d tokens, but the prompt has "
            "%d tokens",
            s->cfg.max_model_len, p->n_prompt);
    }
    for (int32_t i = 0; i < p->n_prompt; i++) {
        if (p->prompt[i] < 0) {
            return tandem_fail(err, errlen, -EINVAL,
                               "prompt: token id %d at position %d is negative", p->prompt[i], i);
        }
    }
    if (s->n_waiting >= s->cfg.max_waiting) {
        tandem_set_err(err, errlen, "waiting queue is full (%d requests); retry later",
                       s->n_waiting);
        return -EAGAIN;
    }
    int32_t room = s->cfg.max_model_len - p->n_prompt;
    int32_t max_tokens = p->max_tokens <= 0 ? room : p->max_tokens;
    int32_t cap = p->n_prompt + (max_tokens < room ? max_tokens : room);
    sched_req *r = calloc(1, sizeof(*r));
    if (!r) {
        goto err_nomem;
    }
    r->n_kv_groups = s->n_groups;
    r->tokens = malloc((size_t)cap * sizeof(*r->tokens));
    r->cache_salt = dup_opt(p->cache_salt);
    r->lora_name = dup_opt(p->lora_name);
    if (!r->tokens || (p->cache_salt && p->cache_salt[0] && !r->cache_salt) ||
        (p->lora_name && p->lora_name[0] && !r->lora_name)) {
        goto err_free;
    }
    if (kvc_seq_init(&r->kv, s->kv, cap, r->cache_salt, r->lora_name) != 0) {
        goto err_free;
    }
    if (s->n_groups > 1) {
        r->kv_more = calloc((size_t)s->n_groups - 1, sizeof(*r->kv_more));
        r->tables = calloc((size_t)s->n_groups, sizeof(*r->tables));
        if (!r->kv_more || !r->tables) {
            goto err_free;
        }
        r->tables[0] = r->kv.blocks;
        for (int32_t g = 1; g < s->n_groups; g++) {
            if (kvc_seq_init(&r->kv_more[g - 1], s->kv, cap, r->cache_salt, r->lora_name) != 0) {
                goto err_free;
            }
            kvc_seq_set_group(&r->kv_more[g - 1], g);
            r->tables[g] = r->kv_more[g - 1].blocks;
        }
    }
    memcpy(r->tokens, p->prompt, (size_t)p->n_prompt * sizeof(*r->tokens));
    r->id = p->id;
    r->priority = p->priority;
    r->user = p->user;
    r->arrival = s->next_arrival++;
    r->n_tokens = p->n_prompt;
    r->n_prompt = p->n_prompt;
    r->cap_tokens = cap;
    r->max_tokens = max_tokens;
    r->num_cached_tokens = -1;
    r->delay_free = p->delay_free;
    r->load_remote = p->load_remote;
    r->prompt_logits = p->prompt_logits;
    r->status = SCHED_WAITING;
    r->running_idx = -1;
    r->out_idx = -1;
    wait_push(s, r, false);
    *out = r;
    return 0;

err_free:
    req_free_kv(r);
    free(r->tokens);
    free(r->cache_salt);
    free(r->lora_name);
    free(r);
err_nomem:
    return tandem_fail(err, errlen, -ENOMEM, "out of memory");
}

int sched_abort(sched *s, sched_req *r)
{
    return sched_finish(s, r, SCHED_FINISHED_ABORTED);
}

int sched_finish(sched *s, sched_req *r, sched_status st)
{
    if (!sched_status_finished(st)) {
        return -EINVAL;
    }
    if (sched_status_finished(r->status)) {
        return -EALREADY;
    }
    finish_internal(s, r, st);
    return 0;
}

void sched_req_free(sched *s, sched_req *r)
{
    if (!r) {
        return;
    }
    if (!sched_status_finished(r->status)) {
        TANDEM_ASSERT(s != NULL);
        finish_internal(s, r, SCHED_FINISHED_ABORTED);
    }
    if (r->kv_held) {
        TANDEM_ASSERT(s != NULL);
        sched_release_held(s, r);
    }
    TANDEM_ASSERT(!r->load_pending);
    req_free_kv(r);
    free(r->tokens);
    free(r->cache_salt);
    free(r->lora_name);
    free(r);
}

void sched_free(sched *s)
{
    if (!s) {
        return;
    }
    while (s->n_running > 0) {
        finish_internal(s, s->running[s->n_running - 1], SCHED_FINISHED_ABORTED);
    }
    while (!list_empty(&s->waiting)) {
        finish_internal(s, wait_entry(list_first(&s->waiting)), SCHED_FINISHED_ABORTED);
    }
    while (!list_empty(&s->loading)) {
        /* the caller stopped every transfer before freeing the scheduler */
        sched_req *r = wait_entry(list_first(&s->loading));
        finish_internal(s, r, SCHED_FINISHED_ABORTED);
        r->load_pending = false;
        kv_release(s, r);
    }
    free(s->running);
    free(s->loras);
    free(s->out.entries);
    free(s->out.preempted);
    free(s->out.finished);
    free(s->out.loads);
    for (int32_t g = 0; g < s->n_groups; g++) {
        free(s->hits[g].blocks);
    }
    free(s);
}

/* ---- scheduling ------------------------------------------------------------------------- */

/* A prompt_logits request whose next chunk has rows that predict prompt tokens. */
static bool wants_prompt_logits(const sched_req *r)
{
    return r->prompt_logits && r->num_computed_tokens < r->n_prompt - 1;
}

static void out_add(sched *s, sched_req *r, int32_t n_new)
{
    sched_output *o = &s->out;
    TANDEM_ASSERT(o->n_entries < s->cfg.max_num_seqs);
    sched_entry *e = &o->entries[o->n_entries];
    e->req = r;
    e->start_pos = r->num_computed_tokens;
    e->n_new = n_new;
    e->tokens = r->tokens + r->num_computed_tokens;
    e->block_table = r->kv.blocks;
    e->group_tables = r->tables;
    e->n_blocks = (r->num_computed_tokens + n_new + s->block_size - 1) / s->block_size;
    for (int32_t g = 0; g < s->n_groups; g++) {
        TANDEM_ASSERT(e->n_blocks <= req_kv(r, g)->n_blocks);
    }
    e->wants_logits = r->num_computed_tokens + n_new == r->n_tokens;
    e->all_logits = wants_prompt_logits(r);
    r->out_idx = o->n_entries++;
    o->n_tokens += n_new;
    o->n_logits += e->wants_logits;
}

/* The running request to preempt: the newest (FCFS) or the max (priority, arrival). */
static sched_req *pick_victim(const sched *s)
{
    sched_req *v = s->running[s->n_running - 1];
    if (s->cfg.policy == SCHED_PRIORITY) {
        for (int32_t i = 0; i < s->n_running; i++) {
            if (prio_before(v, s->running[i])) {
                v = s->running[i];
            }
        }
    }
    return v;
}

/* Recompute preemption: frees v's blocks and sends it back to the front of the waiting queue.
 * Returns the budget refunded when v had already been scheduled this step. */
static int32_t preempt(sched *s, sched_req *v)
{
    int32_t refund = 0;
    running_remove(s, v);
    if (v->out_idx >= 0) {
        refund = s->out.entries[v->out_idx].n_new;
        out_remove_entry(s, v);
    }
    kv_release(s, v);
    v->num_computed_tokens = 0;
    v->status = SCHED_PREEMPTED;
    v->num_preemptions++;
    s->preemptions++;
    wait_push(s, v, true);
    TANDEM_ASSERT(s->out.n_preempted < s->cfg.max_num_seqs);
    s->out.preempted[s->out.n_preempted++] = v;
    return refund;
}

/* The distinct LoRA adapters of the running requests, into s->loras (max_loras > 0). */
static void lora_collect(sched *s)
{
    s->n_loras = 0;
    for (int32_t i = 0; s->cfg.max_loras > 0 && i < s->n_running; i++) {
        const char *name = s->running[i]->lora_name;
        int32_t k = 0;
        while (name && k < s->n_loras && strcmp(s->loras[k], name) != 0) {
            k++;
        }
        if (name && k == s->n_loras) {
            s->loras[s->n_loras++] = name;
        }
    }
}

/* Whether admitting r keeps the running requests within max_loras distinct adapters; when it
 * does, r's adapter counts from now on. */
static bool lora_admit(sched *s, const sched_req *r)
{
    if (s->cfg.max_loras <= 0 || !r->lora_name) {
        return true;
    }
    for (int32_t k = 0; k < s->n_loras; k++) {
        if (strcmp(s->loras[k], r->lora_name) == 0) {
            return true;
        }
    }
    if (s->n_loras >= s->cfg.max_loras) {
        return false;
    }
    s->loras[s->n_loras++] = r->lora_name;
    return true;
}

/* A request's tokens this step: n capped by the long-prefill threshold and the token budget,
 * and for a chunk that wants every row's logits by the step's remaining logit rows (*rows,
 * charged here). */
static int32_t cap_new_tokens(const sched *s, const sched_req *r, int32_t n, int32_t budget,
                              int32_t *rows)
{
    int32_t thr = s->cfg.long_prefill_token_threshold;
    if (thr > 0 && n > thr) {
        n = thr;
    }
    n = n < budget ? n : budget;
    if (wants_prompt_logits(r) && s->cfg.max_prompt_logit_rows > 0) {
        n = n < *rows ? n : *rows;
        *rows -= n > 0 ? n : 0;
    }
    return n;
}

/* Admits a load_remote request for its remote KV load: local prefix hits first, then blocks for
 * the whole prompt; it waits in the loading list, outside the running set and the token budget
 * (vLLM's WAITING_FOR_REMOTE_KVS). -ENOSPC when the blocks are not there (it stays queued). */
static int admit_remote(sched *s, sched_req *r)
{
    sched_output *o = &s->out;
    int32_t hit = kv_lookup(s, r);
    TANDEM_ASSERT(hit >= 0);
    if (kv_allocate(s, r, r->n_tokens, true) != 0) {
        return -ENOSPC;
    }
    wait_remove(s, r);
    r->load_remote = false;
    r->status = SCHED_WAITING_REMOTE_KV;
    r->num_computed_tokens = hit;
    if (r->num_cached_tokens < 0) {
        r->num_cached_tokens = hit;
    }
    /* the last prompt token is recomputed for its logits: load the blocks of the ones before */
    int32_t need = (r->n_tokens - 1 + s->block_size - 1) / s->block_size;
    r->load_first_block = hit / s->block_size;
    r->load_n_blocks = need > r->load_first_block ? need - r->load_first_block : 0;
    list_push_back(&s->loading, &r->wait_node);
    s->n_loading++;
    o->loads[o->n_loads++] = r;
    return 0;
}

int sched_remote_kv_done(sched *s, sched_req *r, bool ok)
{
    if (r->load_pending) {
        r->load_pending = false;
        kv_release(s, r);
        return 0;
    }
    if (r->status != SCHED_WAITING_REMOTE_KV) {
        return -EINVAL;
    }
    list_unlink(&r->wait_node);
    s->n_loading--;
    r->status = SCHED_WAITING;
    if (ok) {
        r->num_computed_tokens = r->n_tokens - 1;
        kv_cache(s, r);
    } else {
        kv_release(s, r);
        r->num_computed_tokens = 0;
        r->num_cached_tokens = -1;
    }
    /* FCFS: at the front, as a preempted request; PRIORITY: in its place */
    wait_push(s, r, true);
    return 0;
}

void sched_release_held(sched *s, sched_req *r)
{
    if (r->kv_held) {
        r->kv_held = false;
        kv_release(s, r);
    }
}

int32_t sched_num_loading(const sched *s)
{
    return s->n_loading;
}

const sched_output *sched_schedule(sched *s)
{
    sched_output *o = &s->out;
    /* Without an update since the last schedule, its live entries still point back here (after
     * an update none does, and finished requests may already be freed). */
    for (int32_t i = 0; s->update_pending && i < o->n_entries; i++) {
        if (o->entries[i].req) {
            o->entries[i].req->out_idx = -1;
        }
    }
    o->n_entries = o->n_tokens = o->n_logits = 0;
    o->n_preempted = 0;
    o->n_finished = 0;
    o->n_loads = 0;
    s->update_pending = true;
    int32_t budget = s->cfg.max_num_batched_tokens;
    int32_t rows = s->cfg.max_prompt_logit_rows; /* logit rows left (prompt_logits chunks) */

    /* Phase A: running requests, in order. */
    for (int32_t i = 0; i < s->n_running && budget > 0; i++) {
        sched_req *r = s->running[i];
        int32_t n_new = cap_new_tokens(s, r, r->n_tokens - r->num_computed_tokens, budget, &rows);
        if (n_new <= 0) {
            continue;
        }
        bool scheduled = true;
        while (kv_allocate(s, r, r->num_computed_tokens + n_new, false) != 0) {
            sched_req *v = pick_victim(s);
            int32_t v_idx = v->running_idx;
            budget += preempt(s, v);
            if (v == r) {
                scheduled = false;
                break;
            }
            if (v_idx < i) {
                i--;
            }
        }
        if (!scheduled) {
            break;
        }
        out_add(s, r, n_new);
        budget -= n_new;
    }

    /* Phase B: admit waiting requests, unless this step preempted. A request whose LoRA adapter
     * would be one too many (max_loras) is passed over and keeps its place (vLLM v1). */
    struct list_node *pos = list_first(&s->waiting), *next;
    lora_collect(s);
    for (; o->n_preempted == 0 && pos && pos != &s->waiting && budget > 0 &&
           s->n_running < s->cfg.max_num_seqs;
         pos = next) {
        next = pos->next;
        sched_req *r = wait_entry(pos);
        if (!lora_admit(s, r)) {
            continue;
        }
        if (r->load_remote) {
            if (o->n_loads >= s->cfg.max_num_seqs || admit_remote(s, r) != 0) {
                break;
            }
            continue;
        }
        if (r->kv.n_blocks > 0) {
            /* loaded remotely: its blocks hold the prompt up to the last token */
            int32_t n_new =
                cap_new_tokens(s, r, r->n_tokens - r->num_computed_tokens, budget, &rows);
            if (n_new <= 0 || kv_allocate(s, r, r->num_computed_tokens + n_new, false) != 0) {
                break;
            }
            wait_remove(s, r);
            r->status = SCHED_RUNNING;
            r->running_idx = s->n_running;
            s->running[s->n_running++] = r;
            out_add(s, r, n_new);
            budget -= n_new;
            continue;
        }
        int32_t hit = 0;
        if (r->prompt_logits) {
            /* every prompt position needs its logits: no hits, and no query (vLLM v1) */
            kv_no_hits(s);
        } else {
            hit = kv_lookup(s, r);
            TANDEM_ASSERT(hit >= 0);
        }
        int32_t n_new = r->n_tokens - hit;
        if (!s->cfg.enable_chunked_prefill && n_new > budget) {
            break;
        }
        const int32_t rows_before = rows;
        n_new = cap_new_tokens(s, r, n_new, budget, &rows);
        if (n_new <= 0 || kv_allocate(s, r, hit + n_new, true) != 0) {
            rows = rows_before;
            break;
        }
        wait_remove(s, r);
        r->status = SCHED_RUNNING;
        r->num_computed_tokens = hit;
        if (r->num_cached_tokens < 0) {
            r->num_cached_tokens = hit;
        }
        r->running_idx = s->n_running;
        s->running[s->n_running++] = r;
        out_add(s, r, n_new);
        budget -= n_new;
    }
    return o;
}

int sched_update(sched *s, const int32_t *sampled, int32_t n_sampled)
{
    sched_output *o = &s->out;
    if (!s->update_pending || n_sampled != o->n_logits || (n_sampled > 0 && !sampled)) {
        return -EINVAL;
    }
    for (int32_t k = 0; k < n_sampled; k++) {
        if (sampled[k] < 0) {
            return -EINVAL;
        }
    }
    s->update_pending = false;
    o->n_finished = 0;
    int32_t k = 0;
    for (int32_t i = 0; i < o->n_entries; i++) {
        sched_entry *e = &o->entries[i];
        int32_t tok = e->wants_logits ? sampled[k++] : -1;
        sched_req *r = e->req;
        if (!r) {
            continue;
        }
        r->out_idx = -1;
        r->num_computed_tokens += e->n_new;
        r->num_steps++;
        if (e->wants_logits) {
            TANDEM_ASSERT(r->n_tokens < r->cap_tokens);
            r->tokens[r->n_tokens++] = tok;
            r->num_output_tokens++;
            s->generation_tokens++;
            if (r->num_output_tokens == 1) {
                s->prompt_tokens += (uint64_t)r->n_prompt;
            }
        }
        kv_cache(s, r);
        kv_release_skipped(s, r);
        if (e->wants_logits &&
            (r->num_output_tokens >= r->max_tokens || r->n_tokens >= r->cap_tokens)) {
            finish_internal(s, r, SCHED_FINISHED_LENGTH);
            o->finished[o->n_finished++] = r;
        }
    }
    return 0;
}

int sched_fill_batch(const sched_output *out, int32_t *tokens_buf, int32_t tokens_cap,
                     fwd_seq *seqs, int32_t seqs_cap, fwd_batch *batch)
{
    if (out->n_tokens > tokens_cap || out->n_entries > seqs_cap) {
        return -ENOSPC;
    }
    int32_t pos = 0;
    for (int32_t i = 0; i < out->n_entries; i++) {
        const sched_entry *e = &out->entries[i];
        if (!e->req) {
            return -EINVAL;
        }
        memcpy(tokens_buf + pos, e->tokens, (size_t)e->n_new * sizeof(*tokens_buf));
        pos += e->n_new;
        seqs[i] = (fwd_seq){
            .n_new = e->n_new,
            .start_pos = e->start_pos,
            .block_table = e->block_table,
            .group_tables = e->group_tables,
            .n_blocks = e->n_blocks,
            .want_logits = e->wants_logits,
            .all_logits = e->all_logits,
        };
    }
    *batch = (fwd_batch){
        .n_tokens = pos,
        .tokens = tokens_buf,
        .n_seqs = out->n_entries,
        .seqs = seqs,
        .logits = NULL,
    };
    return 0;
}

/* ---- stats ------------------------------------------------------------------------------ */

int32_t sched_num_running(const sched *s)
{
    return s->n_running;
}

int32_t sched_num_waiting(const sched *s)
{
    return s->n_waiting;
}

bool sched_has_work(const sched *s)
{
    return s->n_running > 0 || s->n_waiting > 0;
}

uint64_t sched_num_preemptions(const sched *s)
{
    return s->preemptions;
}

uint64_t sched_prompt_tokens_total(const sched *s)
{
    return s->prompt_tokens;
}

uint64_t sched_generation_tokens_total(const sched *s)
{
    return s->generation_tokens;
}

double sched_kv_usage(const sched *s)
{
    return kvc_usage(s->kv);
}

uint64_t sched_prefix_queries(const sched *s)
{
    return kvc_prefix_queries(s->kv);
}

uint64_t sched_prefix_hits(const sched *s)
{
    return kvc_prefix_hits(s->kv);
}

const sched_config *sched_get_config(const sched *s)
{
    return &s->cfg;
}
