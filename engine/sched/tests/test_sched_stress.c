/* Stress test for engine/sched + engine/cache: 1,000 requests with random prompt lengths
 * (1..300, many sharing prefixes), random max_tokens, random cancellations (also between
 * schedule and update), a KV pool small enough to force many preemptions, and a fake model that
 * samples deterministic pseudo-random tokens and sometimes EOS. A fake backend stores the token
 * of every computed position in its block slot and checks, whenever a request is scheduled, that
 * its block table maps [0, start_pos) to exactly the request's tokens (prefix hits and
 * recomputes included) and that it never writes into a block another request holds. Run again
 * with three KV cache groups (full attention and two sliding windows, vLLM's hybrid manager):
 * each group's table must hold the tokens its window reads, the pool shared by the groups. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sched/sched.h"

#define N_REQ      1000
#define BS         16
#define N_BLOCKS   72  /* 71 usable = 1136 tokens, a handful of requests at once */
#define MAX_BLOCKS 128 /* the pool of the run with KV cache groups */
#define MAX_LEN    512
#define MAX_STEPS  40000
#define N_PREFIX   6
#define MAX_PROMPT 300

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t mix2(uint64_t a, uint64_t b)
{
    uint64_t x = a * 0x100000001B3ull ^ b;
    return splitmix(&x);
}

typedef struct world {
    kvc *kv;
    sched *s;
    int32_t num_blocks;
    int32_t n_groups;
    const int32_t *window;         /* [n_groups] 0: full attention */
    int32_t slots[MAX_BLOCKS][BS]; /* fake KV: the token computed at each slot, -1 unknown */
    sched_req *reqs[N_REQ];
    int32_t add_step[N_REQ];
    int32_t end_step[N_REQ];
    sched_status final_status[N_REQ];
    int32_t prompt_len[N_REQ];
    int32_t max_tokens[N_REQ];
    int32_t prefix_of[N_REQ];
    int32_t prefixes[N_PREFIX][MAX_PROMPT];
    uint64_t rng;
} world;

static void build_prompt(world *w, int i, int32_t *out)
{
    uint64_t x = (uint64_t)i * 7919u;
    int32_t n = w->prompt_len[i];
    int32_t shared = w->prefix_of[i] >= 0 ? n * 3 / 4 : 0;
    for (int32_t p = 0; p < n; p++) {
        out[p] = p < shared ? w->prefixes[w->prefix_of[i]][p] : (int32_t)(splitmix(&x) % 32000);
    }
}

/* Checks and writes the fake KV of one scheduled entry, in every group: the positions its
 * first new token reads (a sliding group: the window's) hold the request's tokens. */
static void backend_run_entry(world *w, const sched_entry *e)
{
    const sched_req *r = e->req;
    assert_int_equal(e->start_pos, r->num_computed_tokens);
    assert_true(e->n_new >= 1);
    assert_int_equal(e->n_blocks, (e->start_pos + e->n_new + BS - 1) / BS);
    assert_true(e->n_blocks <= r->kv.n_blocks);
    assert_ptr_equal(e->tokens, r->tokens + e->start_pos);
    assert_int_equal(e->wants_logits, e->start_pos + e->n_new == r->n_tokens);
    assert_true((w->n_groups > 1) == (e->group_tables != NULL));
    for (int32_t g = 0; g < w->n_groups; g++) {
        /* (group_tables is set with several groups: asserted above) */
        const int32_t *bt = g == 0 || !e->group_tables ? e->block_table : e->group_tables[g];
        int32_t first = w->window[g] > 0 ? e->start_pos - w->window[g] + 1 : 0;
        for (int32_t p = first > 0 ? first : 0; p < e->start_pos; p++) {
            int32_t b = bt[p / BS];
            assert_true(b >= 1 && b < w->num_blocks);
            if (w->slots[b][p % BS] != r->tokens[p]) {
                fail_msg("request %llu, group %d: position %d in block %d holds %d, want %d",
                         (unsigned long long)r->id, (int)g, p, b, w->slots[b][p % BS],
                         r->tokens[p]);
            }
        }
        for (int32_t p = e->start_pos; p < e->start_pos + e->n_new; p++) {
            int32_t b = bt[p / BS];
            assert_true(b >= 1 && b < w->num_blocks);
            assert_int_equal(kvc_ref_cnt(w->kv, b), 1); /* never write into a shared block */
            w->slots[b][p % BS] = r->tokens[p];
        }
    }
}

/* Every reference count equals the number of live requests' table entries (of every group)
 * holding the block. */
static void check_refs(world *w, int submitted)
{
    int32_t refs[MAX_BLOCKS] = {0};
    for (int i = 0; i < submitted; i++) {
        const sched_req *r = w->reqs[i];
        if (!r) {
            continue;
        }
        for (int32_t g = 0; g < w->n_groups; g++) {
            const kvc_seq *q = g == 0 ? &r->kv : &r->kv_more[g - 1];
            if (sched_status_finished(r->status) || r->status != SCHED_RUNNING) {
                assert_int_equal(q->n_blocks, 0);
            }
            assert_int_equal(q->n_blocks, r->kv.n_blocks);
            for (int32_t b = 0; b < q->n_blocks; b++) {
                refs[q->blocks[b]] += q->blocks[b] != 0; /* 0: a sliding group's null entry */
            }
        }
    }
    int32_t free_blocks = 0;
    for (int b = 1; b < w->num_blocks; b++) {
        assert_int_equal(kvc_ref_cnt(w->kv, b), refs[b]);
        free_blocks += refs[b] == 0;
    }
    assert_int_equal(kvc_num_free_blocks(w->kv), free_blocks);
    assert_int_equal(kvc_check(w->kv), 0);
}

/* Frees a finished request as soon as the caller is done with it. */
static void reap(world *w, int i)
{
    assert_true(sched_status_finished(w->reqs[i]->status));
    w->final_status[i] = w->reqs[i]->status;
    sched_req_free(w->s, w->reqs[i]);
    w->reqs[i] = NULL;
}

static void abort_random(world *w, int submitted, int step, int *n_aborted)
{
    for (int tries = 0; tries < 4 && submitted > 0; tries++) {
        int i = (int)(splitmix(&w->rng) % (uint64_t)submitted);
        sched_req *r = w->reqs[i];
        if (r && !sched_status_finished(r->status)) {
            assert_int_equal(sched_abort(w->s, r), 0);
            assert_int_equal(r->kv.n_blocks, 0);
            w->end_step[i] = step;
            (*n_aborted)++;
            reap(w, i); /* freed at once, even between schedule and update */
            return;
        }
    }
}

static void run_stress(sched_policy policy, uint64_t seed, int32_t max_bound, int32_t n_groups,
                       const int32_t *window, int32_t num_blocks)
{
    world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    w->rng = seed;
    w->num_blocks = num_blocks;
    w->n_groups = n_groups;
    w->window = window;
    w->kv = kvc_new(num_blocks, BS, true, seed, NULL);
    assert_non_null(w->kv);
    sched_config cfg;
    sched_config_default(&cfg);
    cfg.n_kv_groups = n_groups;
    memcpy(cfg.kv_group_window, window, sizeof(*window) * (size_t)n_groups);
    cfg.max_num_seqs = 16;
    cfg.max_num_batched_tokens = 256;
    cfg.max_model_len = MAX_LEN;
    cfg.long_prefill_token_threshold = 128;
    cfg.max_waiting = 48;
    cfg.policy = policy;
    char err[256];
    w->s = sched_new(&cfg, w->kv, err, sizeof(err));
    assert_non_null(w->s);
    memset(w->slots, 0xff, sizeof(w->slots));
    for (int k = 0; k < N_PREFIX; k++) {
        for (int p = 0; p < MAX_PROMPT; p++) {
            w->prefixes[k][p] = (int32_t)(splitmix(&w->rng) % 32000);
        }
    }
    for (int i = 0; i < N_REQ; i++) {
        w->prompt_len[i] = 1 + (int32_t)(splitmix(&w->rng) % MAX_PROMPT);
        uint64_t m = splitmix(&w->rng) % 100;
        w->max_tokens[i] = m < 80 ? 1 + (int32_t)(m % 24) : 100 + (int32_t)(m * 3);
        w->prefix_of[i] = (splitmix(&w->rng) % 3) ? (int32_t)(splitmix(&w->rng) % N_PREFIX) : -1;
        w->end_step[i] = -1;
    }

    int submitted = 0, n_aborted = 0, n_stopped = 0, n_length = 0, n_eagain = 0;
    int32_t prompt[MAX_PROMPT];
    int step = 0;
    for (; step < MAX_STEPS && (submitted < N_REQ || sched_has_work(w->s)); step++) {
        /* arrivals: a few per step, bounded queue pushes back */
        int arrivals = (int)(splitmix(&w->rng) % 4);
        for (int a = 0; a < arrivals && submitted < N_REQ; a++) {
            int i = submitted;
            build_prompt(w, i, prompt);
            sched_req_params p = {.id = (uint64_t)i,
                                  .prompt = prompt,
                                  .n_prompt = w->prompt_len[i],
                                  .max_tokens = w->max_tokens[i],
                                  .priority = (int32_t)(i % 3),
                                  .cache_salt = (i % 10 == 0) ? "tenant" : NULL};
            int rc = sched_add(w->s, &p, &w->reqs[i], err, sizeof(err));
            if (rc == -EAGAIN) {
                n_eagain++;
                break;
            }
            assert_int_equal(rc, 0);
            w->add_step[i] = step;
            submitted++;
        }
        if (splitmix(&w->rng) % 25 == 0) {
            abort_random(w, submitted, step, &n_aborted);
        }

        const sched_output *o = sched_schedule(w->s);
        assert_true(o->n_tokens <= cfg.max_num_batched_tokens);
        assert_true(o->n_entries <= cfg.max_num_seqs);
        assert_true(sched_num_running(w->s) <= cfg.max_num_seqs);
        int32_t sum = 0;
        for (int32_t e = 0; e < o->n_entries; e++) {
            backend_run_entry(w, &o->entries[e]);
            sum += o->entries[e].n_new;
        }
        assert_int_equal(sum, o->n_tokens);
        if (splitmix(&w->rng) % 60 == 0) {
            abort_random(w, submitted, step, &n_aborted); /* mid-step cancellation */
        }
        int32_t sampled[16];
        int32_t k = 0;
        for (int32_t e = 0; e < o->n_entries; e++) {
            if (!o->entries[e].wants_logits) {
                continue;
            }
            const sched_req *r = o->entries[e].req;
            sampled[k++] = r ? (int32_t)(mix2(r->id, (uint64_t)r->n_tokens) % 32000) : 0;
        }
        assert_int_equal(k, o->n_logits);
        assert_int_equal(sched_update(w->s, sampled, k), 0);
        for (int32_t f = 0; f < o->n_finished; f++) {
            sched_req *r = o->finished[f];
            assert_int_equal(r->status, SCHED_FINISHED_LENGTH);
            assert_true(r->num_output_tokens == r->max_tokens || r->n_tokens == MAX_LEN);
            w->end_step[r->id] = step;
            n_length++;
        }
        /* EOS: the caller finishes requests whose last sampled token is "EOS" */
        k = 0;
        for (int32_t e = 0; e < o->n_entries; e++) {
            sched_req *r = o->entries[e].req;
            if (!o->entries[e].wants_logits) {
                continue;
            }
            int32_t tok = sampled[k++];
            if (!r) {
                continue;
            }
            assert_int_equal(r->tokens[r->n_tokens - 1], tok);
            if (r->status == SCHED_RUNNING && tok % 53 == 0) {
                assert_int_equal(sched_finish(w->s, r, SCHED_FINISHED_STOPPED), 0);
                w->end_step[r->id] = step;
                n_stopped++;
            }
        }
        for (int i = 0; i < submitted; i++) {
            if (w->reqs[i] && sched_status_finished(w->reqs[i]->status)) {
                reap(w, i);
            }
        }
        if (step % 8 == 0) {
            check_refs(w, submitted);
        }
    }
    assert_int_equal(submitted, N_REQ);
    assert_false(sched_has_work(w->s));
    check_refs(w, submitted);
    /* every request ended, none starved past the bound */
    int32_t worst = 0;
    for (int i = 0; i < N_REQ; i++) {
        assert_null(w->reqs[i]);
        assert_true(sched_status_finished(w->final_status[i]));
        assert_true(w->end_step[i] >= w->add_step[i]);
        int32_t life = w->end_step[i] - w->add_step[i];
        worst = life > worst ? life : worst;
    }
    print_message("policy %d: %d steps, %d length, %d stopped, %d aborted, %d EAGAIN, "
                  "%llu preemptions, prefix hits %llu / %llu tokens, worst lifetime %d steps\n",
                  (int)policy, step, n_length, n_stopped, n_aborted, n_eagain,
                  (unsigned long long)sched_num_preemptions(w->s),
                  (unsigned long long)sched_prefix_hits(w->s),
                  (unsigned long long)sched_prefix_queries(w->s), worst);
    assert_int_equal(n_length + n_stopped + n_aborted, N_REQ);
    assert_true(n_aborted > 10);
    assert_true(n_stopped > 10);
    assert_true(sched_num_preemptions(w->s) > 20);
    assert_true(sched_prefix_hits(w->s) > 0);
    assert_true(worst <= max_bound);
    /* KV accounting back to its start: every block free (cached ones are evictable) */
    assert_int_equal(kvc_num_free_blocks(w->kv), num_blocks - 1);
    assert_true(kvc_usage(w->kv) == 0.0);
    assert_int_equal(kvc_reset_prefix_cache(w->kv), 0);
    assert_int_equal(kvc_num_cached_blocks(w->kv), 0);
    sched_free(w->s);
    kvc_free(w->kv);
    free(w);
}

static const int32_t one_table[1] = {0};

static void test_stress_fcfs(void **state)
{
    (void)state;
    run_stress(SCHED_FCFS, 1, 1000, 1, one_table, N_BLOCKS);
}

static void test_stress_priority(void **state)
{
    (void)state;
    run_stress(SCHED_PRIORITY, 2, 2000, 1, one_table, N_BLOCKS);
}

/* Full attention and windows of 40 and 24 tokens: one 512-token request needs 32 + 20 + 19
 * blocks at most, the pool holds 127. */
static void test_stress_kv_groups(void **state)
{
    (void)state;
    static const int32_t windows[3] = {0, 40, 24};
    run_stress(SCHED_FCFS, 3, 1000, 3, windows, MAX_BLOCKS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_fcfs),
        cmocka_unit_test(test_stress_priority),
        cmocka_unit_test(test_stress_kv_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
