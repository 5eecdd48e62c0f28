/* Unit tests for engine/sched: validation, token budget and chunked prefill, max_num_seqs,
 * FCFS and priority order, recompute preemption, bounded waiting queue, abort in every state,
 * max_model_len, prefix-cache hits through the scheduler, and fwd_batch filling. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sched/sched.h"

typedef struct fixture {
    kvc *kv;
    sched *s;
} fixture;

static void fx_init(fixture *f, int32_t num_blocks, int32_t bs, const sched_config *cfg)
{
    f->kv = kvc_new(num_blocks, bs, true, 1, NULL);
    assert_non_null(f->kv);
    char err[256];
    f->s = sched_new(cfg, f->kv, err, sizeof(err));
    if (!f->s) {
        fail_msg("sched_new: %s", err);
    }
}

static void fx_deinit(fixture *f)
{
    sched_free(f->s);
    assert_int_equal(kvc_num_free_blocks(f->kv), kvc_num_blocks(f->kv) - 1);
    kvc_free(f->kv);
}

static sched_req *add(fixture *f, int32_t n_prompt, int32_t base, int32_t max_tokens,
                      int32_t priority)
{
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    for (int32_t i = 0; i < n_prompt; i++) {
        prompt[i] = base + i;
    }
    sched_req_params p = {.id = (uint64_t)base,
                          .prompt = prompt,
                          .n_prompt = n_prompt,
                          .max_tokens = max_tokens,
                          .priority = priority};
    sched_req *r = NULL;
    char err[256];
    int rc = sched_add(f->s, &p, &r, err, sizeof(err));
    free(prompt);
    if (rc != 0) {
        fail_msg("sched_add: %d %s", rc, err);
    }
    return r;
}

/* Samples token 7 for every entry that wants logits. */
static const sched_output *step(fixture *f)
{
    const sched_output *o = sched_schedule(f->s);
    int32_t sampled[64];
    assert_true(o->n_logits <= 64);
    for (int32_t k = 0; k < o->n_logits; k++) {
        sampled[k] = 7;
    }
    assert_int_equal(sched_update(f->s, sampled, o->n_logits), 0);
    return o;
}

static sched_config base_cfg(void)
{
    sched_config c;
    sched_config_default(&c);
    c.max_model_len = 256;
    return c;
}

/* Sliding window 6 with 4-token blocks: after each step a request holds only the blocks its
 * next query reads (positions >= num_computed - 5); a request with delay_free keeps all. */
static void test_sliding_window_frees_blocks(void **state)
{
    (void)state;
    sched_config c = base_cfg();
    c.kv_group_window[0] = 6;
    c.max_num_batched_tokens = 8;
    c.max_model_len = 128;
    fixture f;
    fx_init(&f, 33, 4, &c);
    sched_req *r = add(&f, 20, 100, 10, 0);
    step(&f); /* 8 prompt tokens: the next query (8) reads 3..8, block 0 stays */
    assert_int_equal(r->num_computed_tokens, 8);
    assert_true(r->kv.blocks[0] > 0);
    step(&f); /* 16: reads 11..16: blocks 0 and 1 (positions 0..7) go */
    assert_int_equal(r->kv.blocks[0], 0);
    assert_int_equal(r->kv.blocks[1], 0);
    assert_true(r->kv.blocks[2] > 0);
    assert_int_equal(kvc_num_free_blocks(f.kv), 32 - (r->kv.n_blocks - 2));
    while (!sched_status_finished(r->status)) {
        step(&f);
        const int32_t first = (r->num_computed_tokens - 5) / 4; /* first block still read */
        for (int32_t b = 0; b < r->kv.n_blocks && !sched_status_finished(r->status); b++) {
            assert_true(b < first ? r->kv.blocks[b] == 0 : r->kv.blocks[b] > 0);
        }
    }
    assert_int_equal(r->num_output_tokens, 10);
    /* a producer keeps its KV for the remote decoder */
    int32_t prompt[12];
    for (int32_t i = 0; i < 12; i++) {
        prompt[i] = 500 + i;
    }
    sched_req_params p = {
        .id = 9, .prompt = prompt, .n_prompt = 12, .max_tokens = 1, .delay_free = true};
    sched_req *held = NULL;
    char err[256];
    assert_int_equal(sched_add(f.s, &p, &held, err, sizeof(err)), 0);
    step(&f);
    step(&f);
    assert_true(held->kv_held);
    for (int32_t b = 0; b < held->kv.n_blocks; b++) {
        assert_true(held->kv.blocks[b] > 0);
    }
    sched_release_held(f.s, held);
    sched_req_free(f.s, held);
    sched_req_free(f.s, r);
    c.kv_group_window[0] = -1;
    assert_null(sched_new(&c, f.kv, err, sizeof(err)));
    assert_non_null(strstr(err, "kv_group_window[0]"));
    c.kv_group_window[0] = 0;
    c.n_kv_groups = KVG_MAX_GROUPS + 1;
    assert_null(sched_new(&c, f.kv, err, sizeof(err)));
    assert_non_null(strstr(err, "n_kv_groups"));
    fx_deinit(&f);
}

/* Two KV cache groups (vLLM's hybrid allocator): group 0 full attention, group 1 a window of 6
 * with 4-token blocks. Both tables cover the same positions; only group 1 gives blocks back,
 * the pool is shared and allocated all or nothing, and a prefix hit needs group 0's blocks up
 * to it and group 1's last ones before it. */
static void test_hybrid_groups(void **state)
{
    (void)state;
    sched_config c = base_cfg();
    c.n_kv_groups = 2;
    c.kv_group_window[1] = 6;
    c.max_num_batched_tokens = 8;
    c.max_model_len = 64;
    fixture f;
    /* 16 + 4 blocks per 64-token sequence (cdiv(min(5 + 8, 64), 4) + 1): 20 of the 24 */
    fx_init(&f, 25, 4, &c);
    sched_req *r = add(&f, 20, 100, 10, 0);
    const sched_output *o = step(&f);
    assert_int_equal(o->n_entries, 1);
    assert_non_null(o->entries[0].group_tables);
    assert_ptr_equal(o->entries[0].group_tables[0], r->kv.blocks);
    assert_ptr_equal(o->entries[0].group_tables[1], r->kv_more[0].blocks);
    step(&f); /* 16 computed: group 1 drops blocks 0, 1; group 0 keeps everything */
    assert_int_equal(r->kv.n_blocks, r->kv_more[0].n_blocks);
    assert_true(r->kv.blocks[0] > 0 && r->kv.blocks[1] > 0);
    assert_int_equal(r->kv_more[0].blocks[0], 0);
    assert_int_equal(r->kv_more[0].blocks[1], 0);
    assert_true(r->kv_more[0].blocks[2] > 0);
    while (!sched_status_finished(r->status)) {
        step(&f);
    }
    assert_int_equal(r->num_output_tokens, 10);
    assert_int_equal(kvc_num_free_blocks(f.kv), 24);
    assert_int_equal(kvc_check(f.kv), 0);
    /* the same prompt again: group 0 hits 16 tokens (4 blocks; at most 19), group 1 finds the
     * blocks of its window before position 16 (positions 11..15: blocks 2 and 3, cached when
     * the run went by them) */
    sched_req *again = add(&f, 20, 100, 1, 0);
    o = sched_schedule(f.s);
    assert_int_equal(again->num_computed_tokens, 16);
    assert_int_equal(again->num_cached_tokens, 16);
    assert_int_equal(o->entries[0].n_new, 4);
    assert_int_equal(again->kv_more[0].blocks[0], 0); /* outside the window: null */
    assert_int_equal(again->kv_more[0].blocks[1], 0);
    assert_true(again->kv_more[0].blocks[2] > 0);
    assert_true(again->kv_more[0].blocks[3] > 0);
    assert_int_equal(again->kv.blocks[0], r->kv.blocks[0]);
    assert_int_equal((int)sched_prefix_hits(f.s), 16); /* counted once, not per group */
    int32_t tok = 7;
    assert_int_equal(sched_update(f.s, &tok, 1), 0);
    sched_req_free(f.s, again);
    sched_req_free(f.s, r);
    /* all or nothing: two long requests do not fit their 40 blocks in 24; the second waits
     * (or is preempted) and both finish */
    sched_req *a = add(&f, 40, 300, 20, 0), *b = add(&f, 40, 700, 20, 0);
    for (int i = 0;
         i < 200 && (!sched_status_finished(a->status) || !sched_status_finished(b->status)); i++) {
        step(&f);
        assert_int_equal(kvc_check(f.kv), 0);
        for (int32_t k = 0; k < 2; k++) {
            const sched_req *q = k ? b : a;
            assert_int_equal(q->kv.n_blocks, q->kv_more[0].n_blocks);
        }
    }
    assert_int_equal(a->num_output_tokens, 20);
    assert_int_equal(b->num_output_tokens, 20);
    sched_req_free(f.s, a);
    sched_req_free(f.s, b);
    /* a context whose blocks over both groups exceed the pool is refused */
    char err[256];
    c.max_model_len = 96; /* 24 + 4 > 24 */
    assert_null(sched_new(&c, f.kv, err, sizeof(err)));
    assert_non_null(strstr(err, "KV cache groups"));
    fx_deinit(&f);
}

static void test_config_validation(void **state)
{
    (void)state;
    kvc *kv = kvc_new(17, 16, true, 0, NULL); /* 256 tokens */
    char err[256];
    sched_config c = base_cfg();
    sched *s = sched_new(&c, kv, err, sizeof(err));
    assert_non_null(s);
    assert_int_equal(sched_get_config(s)->block_size, 16);
    sched_free(s);
    c.max_model_len = 257;
    assert_null(sched_new(&c, kv, err, sizeof(err)));
    assert_non_null(strstr(err, "max_model_len"));
    c = base_cfg();
    c.block_size = 8;
    assert_null(sched_new(&c, kv, err, sizeof(err)));
    assert_non_null(strstr(err, "block_size"));
    c = base_cfg();
    c.max_num_seqs = 0;
    assert_null(sched_new(&c, kv, err, sizeof(err)));
    assert_non_null(strstr(err, "max_num_seqs"));
    c = base_cfg();
    c.enable_chunked_prefill = false;
    c.max_num_batched_tokens = 100;
    assert_null(sched_new(&c, kv, err, sizeof(err)));
    assert_non_null(strstr(err, "max_num_batched_tokens"));
    c = base_cfg();
    c.long_prefill_token_threshold = -1;
    assert_null(sched_new(&c, kv, err, sizeof(err)));
    kvc_free(kv);
}

static void test_add_validation_and_bounded_queue(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_waiting = 3;
    fx_init(&f, 64, 16, &c);
    char err[256];
    sched_req *r = NULL;
    int32_t prompt[300] = {0};
    sched_req_params p = {.prompt = prompt, .n_prompt = 0, .max_tokens = 4};
    assert_int_equal(sched_add(f.s, &p, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "prompt"));
    assert_null(r);
    p.n_prompt = 256; /* == max_model_len: no room to generate */
    assert_int_equal(sched_add(f.s, &p, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "maximum context length is 256"));
    p.n_prompt = 3;
    prompt[1] = -5;
    assert_int_equal(sched_add(f.s, &p, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "position 1"));
    prompt[1] = 0;
    /* max_tokens capped by max_model_len; <= 0 means "up to max_model_len". */
    p.n_prompt = 250;
    p.max_tokens = 100;
    assert_int_equal(sched_add(f.s, &p, &r, err, sizeof(err)), 0);
    assert_int_equal(r->cap_tokens, 256);
    sched_req *r2 = NULL, *r3 = NULL, *r4 = NULL;
    p.max_tokens = 0;
    assert_int_equal(sched_add(f.s, &p, &r2, err, sizeof(err)), 0);
    assert_int_equal(r2->max_tokens, 6);
    p.max_tokens = 2;
    assert_int_equal(sched_add(f.s, &p, &r3, err, sizeof(err)), 0);
    assert_int_equal(r3->cap_tokens, 252);
    assert_int_equal(sched_num_waiting(f.s), 3);
    assert_int_equal(sched_add(f.s, &p, &r4, err, sizeof(err)), -EAGAIN);
    assert_non_null(strstr(err, "full"));
    assert_null(r4);
    /* Room again after one leaves the queue. */
    assert_int_equal(sched_abort(f.s, r3), 0);
    assert_int_equal(sched_add(f.s, &p, &r4, err, sizeof(err)), 0);
    assert_int_equal(r4->arrival, 3);
    sched_req_free(f.s, r);
    sched_req_free(f.s, r2);
    sched_req_free(f.s, r3);
    sched_req_free(f.s, r4);
    assert_int_equal(sched_num_waiting(f.s), 0);
    fx_deinit(&f);
}

static void test_chunked_prefill_budget(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_num_batched_tokens = 32;
    fx_init(&f, 64, 16, &c);
    sched_req *r = add(&f, 100, 1000, 3, 0);
    int32_t want_start[] = {0, 32, 64, 96};
    int32_t want_new[] = {32, 32, 32, 4};
    for (int i = 0; i < 4; i++) {
        const sched_output *o = step(&f);
        assert_int_equal(o->n_entries, 1);
        assert_ptr_equal(o->entries[0].req, r);
        assert_int_equal(o->entries[0].start_pos, want_start[i]);
        assert_int_equal(o->entries[0].n_new, want_new[i]);
        assert_int_equal(o->n_tokens, want_new[i]);
        assert_int_equal(o->entries[0].n_blocks, (want_start[i] + want_new[i] + 15) / 16);
        assert_int_equal(o->entries[0].wants_logits, i == 3);
        assert_int_equal(o->n_logits, i == 3);
        assert_int_equal(r->num_output_tokens, i == 3);
    }
    assert_int_equal(r->n_tokens, 101);
    assert_int_equal(r->tokens[100], 7);
    /* Decode steps: one token each, then length. */
    const sched_output *o = step(&f);
    assert_int_equal(o->entries[0].start_pos, 100);
    assert_int_equal(o->entries[0].n_new, 1);
    o = step(&f);
    assert_int_equal(o->n_finished, 1);
    assert_ptr_equal(o->finished[0], r);
    assert_int_equal(r->status, SCHED_FINISHED_LENGTH);
    assert_string_equal(sched_status_reason(r->status), "length");
    assert_int_equal(r->num_output_tokens, 3);
    assert_int_equal(r->num_steps, 6);
    assert_int_equal(sched_generation_tokens_total(f.s), 3);
    assert_int_equal(sched_prompt_tokens_total(f.s), 100);
    assert_false(sched_has_work(f.s));
    assert_int_equal(sched_schedule(f.s)->n_entries, 0);
    sched_req_free(f.s, r);
    fx_deinit(&f);
}

static void test_long_prefill_threshold_and_no_chunking(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_num_batched_tokens = 64;
    c.long_prefill_token_threshold = 20;
    fx_init(&f, 64, 16, &c);
    sched_req *a = add(&f, 50, 0, 1, 0);
    sched_req *b = add(&f, 30, 500, 1, 0);
    const sched_output *o = step(&f);
    assert_int_equal(o->n_entries, 2);
    assert_int_equal(o->entries[0].n_new, 20);
    assert_int_equal(o->entries[1].n_new, 20);
    sched_req_free(f.s, a);
    sched_req_free(f.s, b);
    fx_deinit(&f);

    c = base_cfg();
    c.enable_chunked_prefill = false;
    c.max_num_batched_tokens = 256;
    fx_init(&f, 64, 16, &c);
    a = add(&f, 200, 0, 4, 0);
    b = add(&f, 100, 500, 4, 0);
    o = step(&f);
    assert_int_equal(o->n_entries, 1); /* b does not fit the 56 tokens left: it waits whole */
    assert_int_equal(o->entries[0].n_new, 200);
    o = step(&f);
    assert_int_equal(o->n_entries, 2);
    assert_int_equal(o->entries[1].n_new, 100);
    sched_req_free(f.s, a);
    sched_req_free(f.s, b);
    fx_deinit(&f);
}

static void test_max_num_seqs_and_fcfs_order(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_num_seqs = 2;
    fx_init(&f, 64, 16, &c);
    sched_req *r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = add(&f, 10, 100 * i, 2, 10 - i); /* priorities ignored by FCFS */
    }
    const sched_output *o = step(&f);
    assert_int_equal(o->n_entries, 2);
    assert_ptr_equal(o->entries[0].req, r[0]);
    assert_ptr_equal(o->entries[1].req, r[1]);
    assert_int_equal(sched_num_running(f.s), 2);
    assert_int_equal(sched_num_waiting(f.s), 2);
    o = step(&f); /* r0 and r1 finish (max_tokens 2) */
    assert_int_equal(o->n_finished, 2);
    o = step(&f);
    assert_ptr_equal(o->entries[0].req, r[2]);
    assert_ptr_equal(o->entries[1].req, r[3]);
    for (int i = 0; i < 4; i++) {
        sched_req_free(f.s, r[i]);
    }
    fx_deinit(&f);
}

static void test_priority_order(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_num_seqs = 1;
    c.policy = SCHED_PRIORITY;
    fx_init(&f, 64, 16, &c);
    sched_req *a = add(&f, 5, 0, 1, 5);
    sched_req *b = add(&f, 5, 100, 1, 1);
    sched_req *d = add(&f, 5, 200, 1, 5);
    sched_req *e = add(&f, 5, 300, 1, 1);
    sched_req *want[] = {b, e, a, d}; /* lower value first, then arrival */
    for (int i = 0; i < 4; i++) {
        const sched_output *o = step(&f);
        assert_int_equal(o->n_entries, 1);
        assert_ptr_equal(o->entries[0].req, want[i]);
    }
    assert_false(sched_has_work(f.s));
    sched_req_free(f.s, a);
    sched_req_free(f.s, b);
    sched_req_free(f.s, d);
    sched_req_free(f.s, e);
    fx_deinit(&f);
}

static void test_preemption_fcfs(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_model_len = 64;
    fx_init(&f, 9, 8, &c);                   /* 8 usable blocks = 64 tokens */
    sched_req *a = add(&f, 24, 0, 30, 0);    /* grows to 54 tokens: 7 blocks */
    sched_req *b = add(&f, 24, 1000, 20, 0); /* grows to 44 tokens: 6 blocks */
    const sched_output *o = step(&f);
    assert_int_equal(o->n_entries, 2);
    assert_int_equal(kvc_num_free_blocks(f.kv), 2);
    bool preempted = false;
    int steps = 0;
    while (sched_has_work(f.s) && steps < 200) {
        o = sched_schedule(f.s);
        if (o->n_preempted > 0) {
            preempted = true;
            assert_int_equal(o->n_preempted, 1);
            assert_ptr_equal(o->preempted[0], b); /* the newest running request */
            assert_int_equal(b->status, SCHED_PREEMPTED);
            assert_int_equal(b->num_computed_tokens, 0);
            assert_int_equal(b->kv.n_blocks, 0);
            assert_int_equal(o->n_entries, 1);
            assert_ptr_equal(o->entries[0].req, a);
            assert_int_equal(sched_num_waiting(f.s), 1);
        }
        int32_t sampled[4] = {3, 3, 3, 3};
        assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
        steps++;
    }
    assert_true(preempted);
    assert_int_equal(sched_num_preemptions(f.s), 1);
    assert_int_equal(b->num_preemptions, 1);
    assert_int_equal(a->status, SCHED_FINISHED_LENGTH);
    assert_int_equal(b->status, SCHED_FINISHED_LENGTH);
    assert_int_equal(a->num_output_tokens, 30);
    assert_int_equal(b->num_output_tokens, 20);
    /* b resumed by recomputing its prompt and generated tokens (prefix cache may serve some) */
    assert_int_equal(kvc_num_free_blocks(f.kv), 8);
    assert_int_equal(kvc_check(f.kv), 0);
    sched_req_free(f.s, a);
    sched_req_free(f.s, b);
    fx_deinit(&f);
}

static void test_preemption_priority(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_model_len = 64;
    c.policy = SCHED_PRIORITY;
    fx_init(&f, 9, 8, &c);
    sched_req *low = add(&f, 24, 0, 20, 9); /* runs first (alone), lower priority */
    const sched_output *o = step(&f);
    assert_ptr_equal(o->entries[0].req, low);
    sched_req *high = add(&f, 24, 1000, 30, 0); /* newest: FCFS would preempt this one */
    o = step(&f);
    assert_ptr_equal(o->entries[0].req, low);
    assert_ptr_equal(o->entries[1].req, high);
    int steps = 0;
    sched_req *victim = NULL;
    while (sched_has_work(f.s) && steps < 200) {
        o = sched_schedule(f.s);
        if (o->n_preempted > 0 && !victim) {
            victim = o->preempted[0];
        }
        int32_t sampled[4] = {3, 3, 3, 3};
        assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
        steps++;
    }
    assert_ptr_equal(victim, low);
    assert_int_equal(high->num_preemptions, 0);
    assert_int_equal(low->status, SCHED_FINISHED_LENGTH);
    assert_int_equal(high->status, SCHED_FINISHED_LENGTH);
    sched_req_free(f.s, low);
    sched_req_free(f.s, high);
    fx_deinit(&f);
}

static void test_abort_each_state(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_model_len = 64;
    c.max_num_seqs = 2;
    fx_init(&f, 9, 8, &c);
    sched_req *a = add(&f, 20, 0, 40, 0);
    sched_req *b = add(&f, 20, 100, 40, 0);
    sched_req *w = add(&f, 4, 200, 4, 0);
    /* waiting */
    assert_int_equal(sched_abort(f.s, w), 0);
    assert_int_equal(w->status, SCHED_FINISHED_ABORTED);
    assert_string_equal(sched_status_reason(w->status), "abort");
    assert_int_equal(sched_abort(f.s, w), -EALREADY);
    sched_req_free(f.s, w);
    assert_int_equal(sched_num_waiting(f.s), 2);
    /* run until b gets preempted, then abort it while PREEMPTED */
    int steps = 0;
    while (b->status != SCHED_PREEMPTED && steps < 100) {
        step(&f);
        steps++;
    }
    assert_int_equal(b->status, SCHED_PREEMPTED);
    assert_int_equal(sched_abort(f.s, b), 0);
    assert_int_equal(sched_num_waiting(f.s), 0);
    sched_req_free(f.s, b);
    /* running, between schedule and update: its entry loses its request, the rest goes on */
    sched_req *d = add(&f, 4, 300, 4, 0);
    const sched_output *o = sched_schedule(f.s);
    assert_int_equal(o->n_entries, 2);
    assert_int_equal(o->n_logits, 2);
    assert_int_equal(sched_finish(f.s, a, SCHED_RUNNING), -EINVAL);
    assert_int_equal(sched_abort(f.s, a), 0);
    sched_req_free(f.s, a);
    assert_null(o->entries[0].req);
    int32_t sampled[2] = {1, 2};
    assert_int_equal(sched_update(f.s, sampled, 1), -EINVAL); /* slots stay aligned */
    assert_int_equal(sched_update(f.s, sampled, 2), 0);
    assert_int_equal(d->tokens[4], 2);
    assert_int_equal(sched_update(f.s, sampled, 2), -EINVAL); /* once per schedule */
    /* stop string reported by the caller */
    assert_int_equal(sched_finish(f.s, d, SCHED_FINISHED_STOPPED), 0);
    assert_int_equal(sched_finish(f.s, d, SCHED_FINISHED_STOPPED), -EALREADY);
    assert_false(sched_has_work(f.s));
    sched_req_free(f.s, d);
    /* freeing an unfinished request aborts it */
    sched_req *e = add(&f, 4, 400, 4, 0);
    step(&f);
    assert_int_equal(sched_num_running(f.s), 1);
    sched_req_free(f.s, e);
    assert_int_equal(sched_num_running(f.s), 0);
    fx_deinit(&f);
}

static void test_max_model_len(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_model_len = 40;
    fx_init(&f, 9, 8, &c);
    sched_req *r = add(&f, 30, 0, 1000, 0);
    int steps = 0;
    while (sched_has_work(f.s) && steps < 100) {
        step(&f);
        steps++;
    }
    assert_int_equal(r->status, SCHED_FINISHED_LENGTH);
    assert_int_equal(r->n_tokens, 40);
    assert_int_equal(r->num_output_tokens, 10);
    assert_int_equal(steps, 10);
    sched_req_free(f.s, r);
    fx_deinit(&f);
}

static void test_prefix_hits_and_fill_batch(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    fx_init(&f, 64, 16, &c);
    sched_req *a = add(&f, 40, 0, 2, 0);
    step(&f);
    assert_int_equal(a->num_cached_tokens, 0);
    sched_req *b = add(&f, 40, 0, 2, 0); /* same prompt */
    const sched_output *o = sched_schedule(f.s);
    assert_int_equal(o->n_entries, 2);
    assert_ptr_equal(o->entries[1].req, b);
    assert_int_equal(b->num_cached_tokens, 32); /* 2 full blocks of the 40 */
    assert_int_equal(o->entries[1].start_pos, 32);
    assert_int_equal(o->entries[1].n_new, 8);
    assert_int_equal(o->entries[1].block_table[0], a->kv.blocks[0]);
    assert_int_equal(sched_prefix_hits(f.s), 32);
    assert_int_equal(sched_prefix_queries(f.s), 80);
    assert_true(sched_kv_usage(f.s) > 0.0);

    int32_t toks[64];
    fwd_seq seqs[4];
    fwd_batch batch;
    assert_int_equal(sched_fill_batch(o, toks, 8, seqs, 4, &batch), -ENOSPC);
    assert_int_equal(sched_fill_batch(o, toks, 64, seqs, 4, &batch), 0);
    assert_int_equal(batch.n_tokens, 9);
    assert_int_equal(batch.n_seqs, 2);
    assert_int_equal(toks[0], 7); /* a's sampled token, now being decoded */
    assert_int_equal(toks[1], 32);
    assert_int_equal(seqs[0].start_pos, 40);
    assert_int_equal(seqs[0].n_new, 1);
    assert_int_equal(seqs[0].n_blocks, 3);
    assert_true(seqs[0].want_logits);
    assert_int_equal(seqs[1].start_pos, 32);
    assert_int_equal(seqs[1].n_blocks, 3);
    assert_ptr_equal(seqs[1].block_table, b->kv.blocks);
    assert_null(batch.logits);
    int32_t sampled[2] = {5, 6};
    assert_int_equal(sched_update(f.s, sampled, 2), 0);
    sched_req_free(f.s, a);
    sched_req_free(f.s, b);
    fx_deinit(&f);
}

/* Adds a request of prompt base, base + 1, ... with the flags of p (its other fields are set
 * here). */
static sched_req *add_with(fixture *f, int32_t n_prompt, int32_t base, int32_t max_tokens,
                           sched_req_params p)
{
    int32_t prompt[256];
    assert_true(n_prompt <= 256);
    for (int32_t i = 0; i < n_prompt; i++) {
        prompt[i] = base + i;
    }
    p.id = (uint64_t)base;
    p.prompt = prompt;
    p.n_prompt = n_prompt;
    p.max_tokens = max_tokens;
    sched_req *r = NULL;
    char err[256];
    assert_int_equal(sched_add(f->s, &p, &r, err, sizeof(err)), 0);
    return r;
}

static sched_req *add_kv(fixture *f, int32_t n_prompt, int32_t base, int32_t max_tokens,
                         bool delay_free, bool load_remote)
{
    return add_with(f, n_prompt, base, max_tokens,
                    (sched_req_params){.delay_free = delay_free, .load_remote = load_remote});
}

/* The producer of a P/D pair: a length finish keeps the blocks until released; other finishes
 * free them at once. */
static void test_delay_free_holds_blocks(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    fx_init(&f, 70, 4, &c);
    int32_t free0 = kvc_num_free_blocks(f.kv);
    sched_req *r = add_kv(&f, 10, 100, 1, true, false);
    const sched_output *o = step(&f);
    assert_int_equal(o->n_finished, 1);
    assert_int_equal(r->status, SCHED_FINISHED_LENGTH);
    assert_true(r->kv_held);
    assert_int_equal(r->kv.n_blocks, 3); /* 10 prompt tokens + 1 sampled fit in 3 blocks of 4 */
    assert_int_equal(kvc_num_free_blocks(f.kv), free0 - 3);
    assert_false(sched_has_work(f.s));
    sched_release_held(f.s, r);
    assert_false(r->kv_held);
    assert_int_equal(kvc_num_free_blocks(f.kv), free0);
    sched_req_free(f.s, r);

    /* stopped (EOS) or aborted: no hold */
    r = add_kv(&f, 10, 200, 5, true, false);
    step(&f);
    assert_int_equal(sched_finish(f.s, r, SCHED_FINISHED_STOPPED), 0);
    assert_false(r->kv_held);
    assert_int_equal(kvc_num_free_blocks(f.kv), free0);
    sched_req_free(f.s, r);

    /* freeing a held request releases it too */
    r = add_kv(&f, 6, 300, 1, true, false);
    step(&f);
    assert_true(r->kv_held);
    sched_req_free(f.s, r);
    assert_int_equal(kvc_num_free_blocks(f.kv), free0);
    fx_deinit(&f);
}

/* The consumer: the prompt's KV is loaded (minus local prefix hits), then only the last prompt
 * token is computed. */
static void test_load_remote(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    fx_init(&f, 70, 4, &c);
    int32_t free0 = kvc_num_free_blocks(f.kv);
    sched_req *r = add_kv(&f, 10, 100, 3, false, true);
    const sched_output *o = sched_schedule(f.s);
    assert_int_equal(o->n_entries, 0); /* nothing to compute yet */
    assert_int_equal(o->n_loads, 1);
    assert_ptr_equal(o->loads[0], r);
    assert_int_equal(r->status, SCHED_WAITING_REMOTE_KV);
    assert_int_equal(r->kv.n_blocks, 3);
    assert_int_equal(r->load_first_block, 0);
    assert_int_equal(r->load_n_blocks, 3); /* tokens 0..8 sit in blocks 0..2 */
    assert_int_equal(sched_num_loading(f.s), 1);
    assert_false(sched_has_work(f.s)); /* nothing to step while the load runs */
    assert_int_equal(sched_update(f.s, NULL, 0), 0);
    assert_int_equal(sched_remote_kv_done(f.s, r, true), 0);
    assert_int_equal(r->status, SCHED_WAITING);
    assert_int_equal(r->num_computed_tokens, 9);
    o = sched_schedule(f.s);
    assert_int_equal(o->n_entries, 1);
    assert_int_equal(o->entries[0].start_pos, 9);
    assert_int_equal(o->entries[0].n_new, 1);
    assert_true(o->entries[0].wants_logits);
    int32_t tok = 7;
    assert_int_equal(sched_update(f.s, &tok, 1), 0);
    assert_int_equal(r->num_output_tokens, 1);
    /* the loaded full blocks are in the prefix cache: a second request with the same prompt
     * loads only what it lacks */
    sched_req *r2 = add_kv(&f, 10, 100, 3, false, true);
    o = sched_schedule(f.s);
    assert_int_equal(o->n_loads, 1);
    assert_int_equal(r2->load_first_block, 2); /* blocks 0 and 1 are local hits */
    assert_int_equal(r2->load_n_blocks, 1);
    assert_int_equal(r2->num_cached_tokens, 8);
    for (int32_t k = 0; k < o->n_logits; k++) {
        (void)k;
    }
    int32_t toks[4] = {7, 7, 7, 7};
    assert_int_equal(sched_update(f.s, toks, o->n_logits), 0);
    /* a failed load frees the blocks and prefills locally */
    assert_int_equal(sched_remote_kv_done(f.s, r2, false), 0);
    assert_int_equal(r2->status, SCHED_WAITING);
    assert_int_equal(r2->kv.n_blocks, 0);
    for (int i = 0; i < 20 && sched_has_work(f.s); i++) {
        step(&f);
    }
    assert_int_equal(r2->status, SCHED_FINISHED_LENGTH);
    assert_int_equal(r2->num_cached_tokens, 8); /* recounted at the local admission */
    assert_int_equal(sched_remote_kv_done(f.s, r2, true), -EINVAL); /* not loading any more */
    sched_req_free(f.s, r);
    sched_req_free(f.s, r2);
    assert_int_equal(kvc_num_free_blocks(f.kv), free0);
    fx_deinit(&f);
}

/* Aborting a request while its load runs keeps the blocks (the transfer writes into them)
 * until the load ends. */
static void test_abort_while_loading(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    fx_init(&f, 70, 4, &c);
    int32_t free0 = kvc_num_free_blocks(f.kv);
    sched_req *r = add_kv(&f, 9, 500, 3, false, true);
    const sched_output *o = sched_schedule(f.s);
    assert_int_equal(o->n_loads, 1);
    assert_int_equal(r->load_n_blocks, 2); /* tokens 0..7 in blocks 0..1; token 8 recomputed */
    assert_int_equal(sched_update(f.s, NULL, 0), 0);
    assert_int_equal(sched_abort(f.s, r), 0);
    assert_int_equal(r->status, SCHED_FINISHED_ABORTED);
    assert_true(r->load_pending);
    assert_int_equal(kvc_num_free_blocks(f.kv), free0 - 3);
    assert_int_equal(sched_num_loading(f.s), 0);
    assert_int_equal(sched_remote_kv_done(f.s, r, true), 0);
    assert_false(r->load_pending);
    assert_int_equal(kvc_num_free_blocks(f.kv), free0);
    sched_req_free(f.s, r);

    /* a one-token prompt has nothing to load */
    r = add_kv(&f, 1, 600, 2, false, true);
    o = sched_schedule(f.s);
    assert_int_equal(o->n_loads, 1);
    assert_int_equal(r->load_n_blocks, 0);
    assert_int_equal(sched_update(f.s, NULL, 0), 0);
    /* sched_free with a request still loading frees its blocks (transfers stopped first) */
    fx_deinit(&f);
    sched_req_free(NULL, r);
}

static sched_req *add_lora(fixture *f, int32_t base, int32_t max_tokens, const char *lora)
{
    int32_t prompt[6];
    for (int32_t i = 0; i < 6; i++) {
        prompt[i] = base + i;
    }
    sched_req_params p = {.id = (uint64_t)base,
                          .prompt = prompt,
                          .n_prompt = 6,
                          .max_tokens = max_tokens,
                          .lora_name = lora};
    sched_req *r = NULL;
    char err[256];
    assert_int_equal(sched_add(f->s, &p, &r, err, sizeof(err)), 0);
    return r;
}

/* max_loras 2: a request whose adapter would be a third is passed over (keeping its place)
 * while requests behind it, of running adapters or of none, start; it starts once an adapter
 * frees up. Without max_loras every request starts. */
static void test_max_loras(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_loras = 2;
    fx_init(&f, 64, 16, &c);
    sched_req *r[6];
    r[0] = add_lora(&f, 100, 2, "x");
    r[1] = add_lora(&f, 200, 20, "y");
    r[2] = add_lora(&f, 300, 9, "z"); /* a third adapter */
    r[3] = add_lora(&f, 400, 9, "x");
    r[4] = add_lora(&f, 500, 9, NULL);
    r[5] = add_lora(&f, 600, 9, "w"); /* a fourth */
    const sched_output *o = step(&f);
    assert_int_equal(o->n_entries, 4);
    assert_ptr_equal(o->entries[0].req, r[0]);
    assert_ptr_equal(o->entries[1].req, r[1]);
    assert_ptr_equal(o->entries[2].req, r[3]);
    assert_ptr_equal(o->entries[3].req, r[4]);
    assert_int_equal(sched_num_waiting(f.s), 2);
    o = step(&f); /* r0 finishes; x still runs in r3 */
    assert_int_equal(o->n_finished, 1);
    o = step(&f);
    assert_int_equal(o->n_entries, 3);
    assert_int_equal(sched_num_waiting(f.s), 2);
    while (r[3]->status == SCHED_RUNNING) { /* x's last request, r3, finishes: z gets its slot */
        step(&f);
    }
    assert_int_equal(r[2]->status, SCHED_WAITING);
    step(&f);
    assert_int_equal(r[2]->status, SCHED_RUNNING);
    assert_int_equal(r[5]->status, SCHED_WAITING);
    for (int i = 0; i < 6; i++) {
        sched_req_free(f.s, r[i]);
    }
    fx_deinit(&f);

    c.max_loras = 0;
    fx_init(&f, 64, 16, &c);
    for (int i = 0; i < 4; i++) {
        r[i] = add_lora(&f, 100 * (i + 1), 2, (const char *[]){"a", "b", "c", "d"}[i]);
    }
    o = step(&f);
    assert_int_equal(o->n_entries, 4);
    for (int i = 0; i < 4; i++) {
        sched_req_free(f.s, r[i]);
    }
    fx_deinit(&f);
}

static sched_req *add_plp(fixture *f, int32_t n_prompt, int32_t base, int32_t max_tokens)
{
    return add_with(f, n_prompt, base, max_tokens, (sched_req_params){.prompt_logits = true});
}

/* prompt_logits requests: no prefix hits (nor queries), every chunk that predicts prompt tokens
 * asks for all its rows' logits, and those rows stay within max_prompt_logit_rows a step (the
 * others' tokens do not count); the last prompt token's own chunk and decode ask for none. */
static void test_prompt_logits(void **state)
{
    (void)state;
    fixture f;
    sched_config c = base_cfg();
    c.max_prompt_logit_rows = 24;
    fx_init(&f, 64, 16, &c);
    sched_req *a = add(&f, 40, 0, 2, 0);
    step(&f); /* a's prompt blocks are cached */
    uint64_t queries = sched_prefix_queries(f.s);
    sched_req *b = add_plp(&f, 40, 0, 2); /* same prompt: no hits taken */
    sched_req *d = add_plp(&f, 10, 100, 1);
    sched_req *plain = add(&f, 30, 200, 1, 0);
    const sched_output *o = sched_schedule(f.s);
    /* a decodes, b gets 24 rows; none are left for d, which waits (and plain behind it) */
    assert_int_equal(o->n_entries, 2);
    assert_ptr_equal(o->entries[1].req, b);
    assert_int_equal(o->entries[1].start_pos, 0);
    assert_int_equal(o->entries[1].n_new, 24);
    assert_true(o->entries[1].all_logits);
    assert_false(o->entries[0].all_logits);
    assert_int_equal(b->num_cached_tokens, 0);
    assert_int_equal(sched_prefix_queries(f.s), queries);
    assert_int_equal(d->status, SCHED_WAITING);
    int32_t toks[128];
    fwd_seq seqs[8];
    fwd_batch batch;
    assert_int_equal(sched_fill_batch(o, toks, 128, seqs, 8, &batch), 0);
    assert_true(seqs[1].all_logits);
    assert_null(batch.row_logits);
    int32_t sampled[8] = {7, 7, 7, 7, 7, 7, 7, 7};
    assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
    /* b's remaining 16 tokens (start 24 < 39: its rows predict prompt tokens), d's 10 in the 8
     * rows left, plain's 30 uncapped */
    o = sched_schedule(f.s);
    assert_int_equal(o->n_entries, 3);
    assert_int_equal(o->n_tokens, 16 + 8 + 30);
    for (int32_t i = 0; i < o->n_entries; i++) {
        const sched_entry *e = &o->entries[i];
        if (e->req == b) {
            assert_int_equal(e->n_new, 16);
            assert_true(e->all_logits);
            assert_true(e->wants_logits);
        } else if (e->req == d) {
            assert_int_equal(e->n_new, 8);
            assert_true(e->all_logits);
        }
    }
    assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
    while (d->status != SCHED_FINISHED_LENGTH) {
        o = sched_schedule(f.s);
        for (int32_t i = 0; i < o->n_entries; i++) {
            if (o->entries[i].req == d) {
                /* d's last 2 tokens: position 8 predicts the last prompt token, 9 samples */
                assert_int_equal(o->entries[i].start_pos, 8);
                assert_int_equal(o->entries[i].n_new, 2);
                assert_true(o->entries[i].all_logits);
            }
            if (o->entries[i].req == b) {
                assert_false(o->entries[i].all_logits); /* decoding */
            }
        }
        assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
    }
    assert_int_equal(d->num_cached_tokens, 0);
    while (sched_has_work(f.s)) {
        step(&f);
    }
    sched_req_free(f.s, a);
    sched_req_free(f.s, b);
    sched_req_free(f.s, d);
    sched_req_free(f.s, plain);
    fx_deinit(&f);

    /* a chunk that starts at the last prompt token wants no rows: not capped */
    c.max_prompt_logit_rows = 1;
    fx_init(&f, 64, 16, &c);
    sched_req *e = add_plp(&f, 3, 0, 1);
    o = sched_schedule(f.s);
    assert_int_equal(o->entries[0].n_new, 1);
    assert_true(o->entries[0].all_logits);
    assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
    o = sched_schedule(f.s);
    assert_int_equal(o->entries[0].n_new, 1);
    assert_true(o->entries[0].all_logits); /* position 1 predicts prompt token 2 */
    assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
    o = sched_schedule(f.s);
    assert_int_equal(o->entries[0].start_pos, 2);
    assert_false(o->entries[0].all_logits);
    assert_int_equal(sched_update(f.s, sampled, o->n_logits), 0);
    assert_int_equal(e->status, SCHED_FINISHED_LENGTH);
    sched_req_free(f.s, e);
    fx_deinit(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_sliding_window_frees_blocks),
        cmocka_unit_test(test_hybrid_groups),
        cmocka_unit_test(test_add_validation_and_bounded_queue),
        cmocka_unit_test(test_chunked_prefill_budget),
        cmocka_unit_test(test_long_prefill_threshold_and_no_chunking),
        cmocka_unit_test(test_max_num_seqs_and_fcfs_order),
        cmocka_unit_test(test_priority_order),
        cmocka_unit_test(test_preemption_fcfs),
        cmocka_unit_test(test_preemption_priority),
        cmocka_unit_test(test_abort_each_state),
        cmocka_unit_test(test_max_model_len),
        cmocka_unit_test(test_prefix_hits_and_fill_batch),
        cmocka_unit_test(test_delay_free_holds_blocks),
        cmocka_unit_test(test_load_remote),
        cmocka_unit_test(test_abort_while_loading),
        cmocka_unit_test(test_max_loras),
        cmocka_unit_test(test_prompt_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
