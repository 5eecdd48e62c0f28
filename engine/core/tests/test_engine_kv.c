/*
 * The engine's half of P/D KV transfer on a small generated model ($TANDEM_TEST_MODEL), with an
 * in-process connector that copies blocks between two engines' KV pools (what the agent's UCX
 * transport does between processes): a producer holds its blocks after a length finish and
 * reports them; a consumer loads what it lacks and computes only the last prompt token; greedy
 * output equals a unified run's token for token; held blocks come back on release, on expiry and
 * on engine_free; partial prefix hits load fewer blocks; failed or short loads fall back to a
 * local prefill with the same output; a request aborted while its load runs frees its blocks
 * when the load ends.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/core/engine.h"

static model *g_model;
static tokenizer *g_tok;

struct collect {
    int32_t tokens[256];
    int n;
    int finished;
    sched_status status;
    int32_t blocks[256];
    int32_t n_blocks;
    char request_id[96];
    int kv_loaded;
    int32_t n_cached;
};

static void on_out(void *user, const engine_output *o)
{
    struct collect *c = user;
    if (o->token >= 0 && c->n < 256) {
        c->tokens[c->n++] = o->token;
    }
    if (o->finished) {
        c->finished = 1;
        c->status = o->status;
        c->kv_loaded = o->kv_loaded;
        c->n_cached = o->n_cached;
        if (o->n_kv_blocks > 0) {
            c->n_blocks = o->n_kv_blocks;
            memcpy(c->blocks, o->kv_block_ids, (size_t)o->n_kv_blocks * sizeof(int32_t));
            snprintf(c->request_id, sizeof c->request_id, "%s", o->kv_request_id);
        }
    }
}

/* The fake transport: the loads are queued and run by pump() (like a transport thread). */
struct xfer {
    engine *self;   /* the consumer */
    engine *remote; /* the producer */
    int fail;       /* answer every load with this status */
    int hold;       /* keep loads queued until released */
    int n_pending;
    engine_kv_load pending[8];
    int32_t rb[8][64], lb[8][64];
    char notify[8][128];
    int loads, blocks_moved;
    char last_notify[128];
};

static int start_load(void *ud, const engine_kv_load *l)
{
    struct xfer *x = ud;
    if (x->n_pending == 8 || l->n_blocks > 64) {
        return -EAGAIN;
    }
    int k = x->n_pending++;
    x->pending[k] = *l;
    memcpy(x->rb[k], l->remote_blocks ? l->remote_blocks : x->rb[k],
           (size_t)l->n_blocks * sizeof(int32_t));
    memcpy(x->lb[k], l->local_blocks, (size_t)l->n_blocks * sizeof(int32_t));
    snprintf(x->notify[k], sizeof x->notify[k], "%s", l->notify);
    x->loads++;
    return 0;
}

static void pump(struct xfer *x)
{
    for (int k = 0; k < x->n_pending; k++) {
        engine_kv_load *l = &x->pending[k];
        int status = x->fail;
        for (int32_t i = 0; status == 0 && i < l->n_blocks; i++) {
            for (int layer = 0; layer < g_model->cfg.n_layer; layer++) {
                for (int kv = 0; kv < 2; kv++) {
                    size_t rbytes, lbytes;
                    char *src = engine_kv_pool(x->remote, layer, kv, &rbytes);
                    char *dst = engine_kv_pool(x->self, layer, kv, &lbytes);
                    engine_stats rs, ls;
                    engine_get_stats(x->remote, &rs);
                    engine_get_stats(x->self, &ls);
                    size_t bb = rbytes / (size_t)rs.num_blocks;
                    assert_int_equal(bb, lbytes / (size_t)ls.num_blocks);
                    memcpy(dst + (size_t)x->lb[k][i] * bb, src + (size_t)x->rb[k][i] * bb, bb);
                }
            }
            x->blocks_moved++;
        }
        snprintf(x->last_notify, sizeof x->last_notify, "%s", x->notify[k]);
        if (status == 0) {
            /* the notification: "<remote_request_id>:<tp>" → the producer frees */
            char id[128];
            snprintf(id, sizeof id, "%s", x->notify[k]);
            char *colon = strrchr(id, ':');
            assert_non_null(colon);
            assert_string_equal(colon, ":1");
            *colon = '\0';
            assert_int_equal(engine_kv_release(x->remote, id), 0);
        }
        engine_kv_load_done(x->self, l->id, status);
    }
    x->n_pending = 0;
}

static engine *new_engine(struct xfer *x, const char *id, double hold_s)
{
    engine_config c;
    memset(&c, 0, sizeof c);
    c.max_num_seqs = 8;
    c.kv_cache_bytes = 4u << 20;
    c.block_size = 16;
    c.n_threads = 1;
    c.kv_dtype = ENGINE_KV_F32;
    char err[256];
    engine *e = engine_new(g_model, g_tok, &c, err, sizeof err);
    if (!e) {
        fail_msg("engine_new: %s", err);
    }
    engine_kv_connector kc = {
        .ud = x,
        .engine_id = id,
        .host = "127.0.0.1",
        .port = 5600,
        .tp_size = 1,
        .hold_timeout_s = hold_s,
        .start_load = start_load,
    };
    assert_int_equal(engine_set_kv_connector(e, &kc), 0);
    return e;
}

static int setup(void **state)
{
    (void)state;
    const char *path = getenv("TANDEM_TEST_MODEL");
    char err[512];
    if (!path) {
        print_error("TANDEM_TEST_MODEL is not set\n");
        return -1;
    }
    g_model = model_load(path, err, sizeof err);
    if (!g_model || tokenizer_from_model(g_model, &g_tok, err, sizeof err) != 0) {
        print_error("model: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tokenizer_free(g_tok);
    model_free(g_model);
    return 0;
}

static void run(engine *e, struct xfer *x, struct collect *c)
{
    for (int i = 0; i < 2000 && !c->finished; i++) {
        if (x) {
            pump(x);
        }
        assert_true(engine_step(e) >= 0);
    }
    assert_true(c->finished);
}

static void prompt_of(int32_t *p, int32_t n, int32_t seed)
{
    for (int32_t i = 0; i < n; i++) {
        p[i] = 1 + (seed * 31 + i * 7) % 500;
    }
}

static int64_t submit(engine *e, const int32_t *prompt, int32_t n, int32_t max_tokens,
                      const engine_kv_transfer *t, struct collect *c)
{
    engine_request r = {
        .prompt = prompt,
        .n_prompt = n,
        .max_tokens = max_tokens,
        .kv_transfer = t,
        .on_output = on_out,
        .user = c,
    };
    sampling_params_init(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    char err[256];
    int64_t id = engine_submit(e, &r, err, sizeof err);
    if (id < 0) {
        fail_msg("engine_submit: %s", err);
    }
    return id;
}

/* Prefill on P (max_tokens 1, PRODUCE), decode on D (CONSUME) == unified on D. */
static void pd_once(engine *p, engine *d, struct xfer *x, int32_t n_prompt, int32_t seed,
                    int expect_loaded)
{
    int32_t prompt[200];
    prompt_of(prompt, n_prompt, seed);
    struct collect uni = {0}, pre = {0}, dec = {0};
    /* the unified reference, on a third engine so that D's cache is not warmed */
    struct xfer none = {0};
    engine *u = new_engine(&none, "u", 0);
    submit(u, prompt, n_prompt, 12, NULL, &uni);
    run(u, NULL, &uni);
    engine_free(u);

    engine_kv_transfer pt = {.mode = ENGINE_KVT_PRODUCE, .request_id = "req-1"};
    submit(p, prompt, n_prompt, 1, &pt, &pre);
    run(p, NULL, &pre);
    assert_int_equal(pre.status, SCHED_FINISHED_LENGTH);
    assert_string_equal(pre.request_id, "req-1");
    assert_int_equal(pre.n_blocks, (n_prompt + 15) / 16); /* the prompt (the 1 token: no KV yet) */
    engine_stats ps;
    engine_get_stats(p, &ps);
    assert_int_equal(ps.kv_held, 1);

    engine_kv_transfer ct = {
        .mode = ENGINE_KVT_CONSUME,
        .remote_engine_id = "p",
        .remote_host = "127.0.0.1",
        .remote_port = 5600,
        .remote_request_id = "req-1",
        .remote_block_ids = pre.blocks,
        .n_remote_blocks = pre.n_blocks,
    };
    submit(d, prompt, n_prompt, 12, &ct, &dec);
    run(d, x, &dec);
    assert_int_equal(dec.kv_loaded, expect_loaded);
    assert_int_equal(dec.n, uni.n);
    assert_memory_equal(dec.tokens, uni.tokens, (size_t)uni.n * sizeof(int32_t));
    engine_get_stats(p, &ps);
    assert_int_equal(ps.kv_held, 0); /* notified: freed */
    assert_string_equal(x->last_notify, "req-1:1");
}

static void test_pd_equals_unified(void **state)
{
    (void)state;
    struct xfer x = {0};
    engine *p = new_engine(&x, "p", 0);
    engine *d = new_engine(&x, "d", 0);
    x.self = d;
    x.remote = p;
    engine_stats p0;
    engine_get_stats(p, &p0);
    int32_t lens[] = {1, 2, 15, 16, 17, 33, 64, 100, 150};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        int moved = x.blocks_moved;
        pd_once(p, d, &x, lens[i], (int32_t)i + 1, 1);
        /* only the blocks of tokens before the last one move */
        assert_int_equal(x.blocks_moved - moved, (lens[i] - 1 + 15) / 16);
    }
    engine_stats p1, d1;
    engine_get_stats(p, &p1);
    engine_get_stats(d, &d1);
    assert_int_equal(p1.kv_usage, 0);
    assert_int_equal(d1.kv_usage, 0);
    assert_int_equal(d1.kv_loading, 0);
    engine_free(p);
    engine_free(d);
}

/* Pools moved into memory someone else owns (what the agent does with UCX's): P/D still equals
 * unified, and the move is refused once the engine served a request or with a wrong size. */
static void test_adopted_pools(void **state)
{
    (void)state;
    struct xfer x = {0};
    engine *p = new_engine(&x, "p", 0);
    engine *d = new_engine(&x, "d", 0);
    x.self = d;
    x.remote = p;
    int n = 2 * g_model->cfg.n_layer;
    void *mem[2][64];
    size_t bytes[64] = {0};
    assert_true(n <= 64);
    engine *both[2] = {p, d};
    assert_int_equal(engine_kv_adopt_pools(p, NULL, NULL), 0);
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < n; r++) {
            void *old = engine_kv_pool(both[k], r / 2, r % 2, &bytes[r]);
            assert_non_null(old);
            assert_int_equal(posix_memalign(&mem[k][r], 4096, bytes[r]), 0);
            memset(mem[k][r], 0xa5, bytes[r]); /* not zeroed: the engine must not care */
        }
        size_t wrong = bytes[n - 1];
        bytes[n - 1] = wrong - 1;
        assert_int_equal(engine_kv_adopt_pools(both[k], mem[k], bytes), -EINVAL);
        bytes[n - 1] = wrong;
        assert_int_equal(engine_kv_adopt_pools(both[k], mem[k], bytes), 0);
        for (int r = 0; r < n; r++) {
            assert_ptr_equal(engine_kv_pool(both[k], r / 2, r % 2, NULL), mem[k][r]);
        }
    }
    pd_once(p, d, &x, 100, 3, 1);
    pd_once(p, d, &x, 33, 4, 1);
    assert_int_equal(engine_kv_adopt_pools(p, NULL, NULL), -EBUSY);
    assert_int_equal(engine_kv_adopt_pools(p, mem[0], bytes), -EBUSY);
    engine_free(p);
    engine_free(d);
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < n; r++) {
            free(mem[k][r]);
        }
    }
}

/* The decoder already holds a prefix: only the missing blocks move. */
static void test_partial_prefix_hit(void **state)
{
    (void)state;
    struct xfer x = {0};
    engine *p = new_engine(&x, "p", 0);
    engine *d = new_engine(&x, "d", 0);
    x.self = d;
    x.remote = p;
    int32_t prompt[100];
    prompt_of(prompt, 100, 9);
    /* warm D with the first 64 tokens (4 full blocks) */
    struct collect warm = {0};
    submit(d, prompt, 64, 1, NULL, &warm);
    run(d, NULL, &warm);
    int moved = x.blocks_moved;
    pd_once(p, d, &x, 100, 9, 1);
    /* blocks 4..6 hold tokens 64..98: three move, four were local */
    assert_int_equal(x.blocks_moved - moved, 3);
    engine_free(p);
    engine_free(d);
}

/* A failed load, a producer whose blocks do not cover the prompt, and missing parameters: the
 * decoder computes the prompt itself and the answer is the same. */
static void test_fallbacks(void **state)
{
    (void)state;
    struct xfer x = {0};
    engine *p = new_engine(&x, "p", 0);
    engine *d = new_engine(&x, "d", 0);
    x.self = d;
    x.remote = p;
    x.fail = -ECONNREFUSED;
    int32_t prompt[40];
    prompt_of(prompt, 40, 3);
    struct collect uni = {0}, dec = {0};
    submit(p, prompt, 40, 8, NULL, &uni);
    run(p, NULL, &uni);
    int32_t fake_blocks[3] = {1, 2, 3};
    engine_kv_transfer ct = {
        .mode = ENGINE_KVT_CONSUME,
        .remote_engine_id = "p",
        .remote_host = "127.0.0.1",
        .remote_port = 5600,
        .remote_request_id = "gone",
        .remote_block_ids = fake_blocks,
        .n_remote_blocks = 3,
    };
    submit(d, prompt, 40, 8, &ct, &dec);
    run(d, &x, &dec);
    assert_int_equal(dec.kv_loaded, -1);
    assert_int_equal(dec.n, 8);
    assert_memory_equal(dec.tokens, uni.tokens, 8 * sizeof(int32_t));

    /* too few remote blocks: notify only (n 0), then compute */
    x.fail = 0;
    struct collect pre = {0}, dec2 = {0};
    engine_kv_transfer pt = {.mode = ENGINE_KVT_PRODUCE, .request_id = "short"};
    submit(p, prompt, 40, 1, &pt, &pre);
    run(p, NULL, &pre);
    ct.remote_request_id = "short";
    ct.remote_block_ids = pre.blocks;
    ct.n_remote_blocks = 1;
    int loads = x.loads, moved = x.blocks_moved;
    submit(d, prompt, 40, 8, &ct, &dec2);
    run(d, &x, &dec2);
    assert_int_equal(x.loads - loads, 1);
    assert_int_equal(x.blocks_moved, moved);
    assert_int_equal(dec2.kv_loaded, -1);
    assert_memory_equal(dec2.tokens, uni.tokens, 8 * sizeof(int32_t));
    engine_stats ps;
    engine_get_stats(p, &ps);
    assert_int_equal(ps.kv_held, 0); /* still notified */

    /* do_remote_prefill without the producer's fields: a plain request */
    struct collect dec3 = {0};
    engine_kv_transfer bad = {.mode = ENGINE_KVT_CONSUME, .remote_host = "127.0.0.1"};
    submit(d, prompt, 40, 8, &bad, &dec3);
    run(d, &x, &dec3);
    assert_int_equal(dec3.kv_loaded, -1);
    assert_memory_equal(dec3.tokens, uni.tokens, 8 * sizeof(int32_t));
    engine_free(p);
    engine_free(d);
}

/* Holds end on release, on expiry, and when the engine is freed; unknown ids are -ENOENT. */
static void test_hold_release_and_expiry(void **state)
{
    (void)state;
    struct xfer x = {0};
    engine *p = new_engine(&x, "p", 0.2);
    int32_t prompt[50];
    prompt_of(prompt, 50, 5);
    engine_stats s0, s;
    engine_get_stats(p, &s0);
    struct collect a = {0};
    engine_kv_transfer pt = {.mode = ENGINE_KVT_PRODUCE, .request_id = "exp"};
    submit(p, prompt, 50, 1, &pt, &a);
    run(p, NULL, &a);
    engine_get_stats(p, &s);
    assert_int_equal(s.kv_held, 1);
    assert_true(s.kv_usage > 0);
    assert_int_equal(engine_kv_release(p, "nope"), -ENOENT);
    /* the engine thread frees it when the 0.2 s are up */
    assert_int_equal(engine_start(p), 0);
    for (int i = 0; i < 300; i++) {
        engine_get_stats(p, &s);
        if (s.kv_held == 0) {
            break;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(s.kv_held, 0);
    assert_int_equal(s.kv_expired, 1);
    assert_int_equal(s.kv_usage, 0);
    assert_int_equal(engine_kv_release(p, "exp"), -ENOENT);
    engine_stop(p);
    /* a stopped (EOS-like) finish does not hold; max_tokens > 1 finishing by length does */
    struct collect b = {0};
    pt.request_id = "kept";
    submit(p, prompt, 50, 3, &pt, &b);
    run(p, NULL, &b);
    assert_int_equal(b.n_blocks, 4);
    engine_free(p); /* frees the hold */
}

/* A request aborted while its load runs: its blocks stay until the load ends, then return. */
static void test_abort_during_load(void **state)
{
    (void)state;
    struct xfer x = {0};
    engine *p = new_engine(&x, "p", 0);
    engine *d = new_engine(&x, "d", 0);
    x.self = d;
    x.remote = p;
    int32_t prompt[60];
    prompt_of(prompt, 60, 8);
    struct collect pre = {0}, dec = {0};
    engine_kv_transfer pt = {.mode = ENGINE_KVT_PRODUCE, .request_id = "ab"};
    submit(p, prompt, 60, 1, &pt, &pre);
    run(p, NULL, &pre);
    engine_kv_transfer ct = {
        .mode = ENGINE_KVT_CONSUME,
        .remote_engine_id = "p",
        .remote_host = "127.0.0.1",
        .remote_port = 5600,
        .remote_request_id = "ab",
        .remote_block_ids = pre.blocks,
        .n_remote_blocks = pre.n_blocks,
    };
    int64_t id = submit(d, prompt, 60, 8, &ct, &dec);
    engine_step(d); /* admitted: the load is queued */
    assert_int_equal(x.n_pending, 1);
    engine_stats ds;
    engine_get_stats(d, &ds);
    assert_int_equal(ds.kv_loading, 1);
    assert_true(ds.kv_usage > 0);
    engine_abort(d, (uint64_t)id);
    engine_step(d);
    assert_true(dec.finished);
    assert_int_equal(dec.status, SCHED_FINISHED_ABORTED);
    engine_get_stats(d, &ds);
    assert_true(ds.kv_usage > 0); /* the transfer may still write into them */
    pump(&x);
    engine_get_stats(d, &ds);
    assert_int_equal(ds.kv_loading, 0);
    assert_int_equal(ds.kv_usage, 0);

    /* a load still running when the engine is freed (the transport was stopped) */
    struct collect pre2 = {0}, dec2 = {0};
    pt.request_id = "left";
    submit(p, prompt, 60, 1, &pt, &pre2);
    run(p, NULL, &pre2);
    ct.remote_request_id = "left";
    ct.remote_block_ids = pre2.blocks;
    submit(d, prompt, 60, 8, &ct, &dec2);
    engine_step(d);
    assert_int_equal(x.n_pending, 1);
    engine_free(d);
    x.n_pending = 0;
    engine_free(p);
}

/* The decoder's notification may come as soon as the final output is reported, before the
 * engine turned the request's blocks into a hold: it still frees them (the race the agent's
 * e2e test found under ASan). */
struct early {
    engine *e;
    struct collect c;
    int rc;
};

static void on_out_release(void *user, const engine_output *o)
{
    struct early *x = user;
    on_out(&x->c, o);
    if (o->finished && o->n_kv_blocks > 0) {
        x->rc = engine_kv_release(x->e, o->kv_request_id);
    }
}

static void test_release_before_hold(void **state)
{
    (void)state;
    struct xfer x = {0};
    engine *p = new_engine(&x, "p", 0);
    int32_t prompt[50];
    prompt_of(prompt, 50, 6);
    struct early ea = {.e = p, .rc = 1};
    engine_kv_transfer pt = {.mode = ENGINE_KVT_PRODUCE, .request_id = "early"};
    engine_request r = {
        .prompt = prompt,
        .n_prompt = 50,
        .max_tokens = 1,
        .kv_transfer = &pt,
        .on_output = on_out_release,
        .user = &ea,
    };
    sampling_params_init(&r.sampling);
    r.sampling.temperature = 0;
    char err[256];
    assert_true(engine_submit(p, &r, err, sizeof err) >= 0);
    for (int i = 0; i < 100 && !ea.c.finished; i++) {
        engine_step(p);
    }
    assert_true(ea.c.finished);
    assert_int_equal(ea.rc, 0);
    engine_stats s;
    engine_get_stats(p, &s);
    assert_int_equal(s.kv_held, 0);
    assert_int_equal(s.kv_usage, 0);
    assert_int_equal(s.kv_released, 1);
    /* a second notification for it is unknown */
    assert_int_equal(engine_kv_release(p, "early"), -ENOENT);
    engine_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pd_equals_unified),       cmocka_unit_test(test_adopted_pools),
        cmocka_unit_test(test_partial_prefix_hit),      cmocka_unit_test(test_fallbacks),
        cmocka_unit_test(test_hold_release_and_expiry), cmocka_unit_test(test_abort_during_load),
        cmocka_unit_test(test_release_before_hold),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
