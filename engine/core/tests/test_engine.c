/*
 * Engine core tests on a small generated model ($TANDEM_TEST_MODEL, written by tandem-genmodel
 * in a ctest fixture): invariance of logits (alone / batched / chunked / prefix-cache hit),
 * finish reasons, stop strings, aborts, limits, and a 1,000-request stress run with random
 * lengths, cancellations and preemptions that must leave the KV cache as it found it; on a
 * model mixing full and sliding-window layers, the hybrid KV cache manager against one table.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/core/engine.h"

static model *g_model;
static tokenizer *g_tok;

struct collect {
    float *rows; /* logits rows (n_vocab each), when return_logits */
    size_t text_len;
    int32_t tokens[512];
    char text[4096];
    int n;
    int n_rows;
    int finished;
    sched_status status;
    int stop_index;
    int32_t stop_token;
    int32_t n_cached;
    int callbacks_after_finish;
    /* prompt logprobs: a copy of what came (plp, when set), the outputs that carried them */
    struct sample_result *plp;
    int32_t n_plp;
    int plp_outputs;
    int plp_top; /* the top count asked: every entry is checked against it */
};

static void on_out(void *user, const engine_output *o)
{
    struct collect *c = user;
    if (c->finished) {
        c->callbacks_after_finish++;
        return;
    }
    if (o->token >= 0 && c->n < 512) {
        c->tokens[c->n++] = o->token;
    }
    if (o->prompt_logprobs || o->n_prompt_logprobs > 0) {
        if (!o->prompt_logprobs) { /* a count without entries */
            c->plp_outputs = -1000;
            return;
        }
        c->plp_outputs++;
        c->n_plp = o->n_prompt_logprobs;
        for (int32_t i = 0; i < o->n_prompt_logprobs; i++) {
            const struct sample_result *r = &o->prompt_logprobs[i];
            int top = c->plp_top < g_model->cfg.n_vocab ? c->plp_top : g_model->cfg.n_vocab;
            if (r->rank < 1 || r->logprob > 0.0f || r->n_top != top ||
                (r->n_top > 0 && r->top[0].logprob < r->logprob)) {
                c->plp_outputs = -1000; /* fails the test's count check */
            }
            for (int j = 1; j < r->n_top; j++) {
                if (r->top[j].logprob > r->top[j - 1].logprob) {
                    c->plp_outputs = -1000;
                }
            }
        }
        if (c->plp) {
            memcpy(c->plp, o->prompt_logprobs, (size_t)o->n_prompt_logprobs * sizeof *c->plp);
        }
    }
    if (o->logits && c->rows && c->n_rows < 64) {
        memcpy(c->rows + (size_t)c->n_rows * (size_t)g_model->cfg.n_vocab, o->logits,
               (size_t)g_model->cfg.n_vocab * sizeof(float));
        c->n_rows++;
    }
    if (o->text_len && c->text_len + o->text_len < sizeof c->text) {
        memcpy(c->text + c->text_len, o->text, o->text_len);
        c->text_len += o->text_len;
    }
    if (o->finished) {
        c->finished = 1;
        c->status = o->status;
        c->stop_index = o->stop_index;
        c->stop_token = o->stop_token;
        c->n_cached = o->n_cached;
    }
}

static int setup(void **state)
{
    (void)state;
    const char *path = getenv("TANDEM_TEST_MODEL");
    if (!path) {
        print_error("TANDEM_TEST_MODEL is not set\n");
        return -1;
    }
    char err[512];
    g_model = model_load(path, err, sizeof err);
    if (!g_model) {
        print_error("model_load: %s\n", err);
        return -1;
    }
    if (tokenizer_from_model(g_model, &g_tok, err, sizeof err) != 0) {
        print_error("tokenizer: %s\n", err);
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

/* The tests' engine configuration: 256-token context, F32 KV cache, one thread. */
static engine_config test_config(int32_t max_seqs, int32_t max_batched, size_t kv_bytes,
                                 int32_t block_size)
{
    engine_config c;
    memset(&c, 0, sizeof c);
    c.max_model_len = 256;
    c.max_num_seqs = max_seqs;
    c.max_num_batched_tokens = max_batched;
    c.kv_cache_bytes = kv_bytes;
    c.block_size = block_size;
    c.kv_dtype = ENGINE_KV_F32;
    c.n_threads = 1;
    return c;
}

static engine *make_engine(int32_t max_seqs, int32_t max_batched, size_t kv_bytes,
                           int32_t block_size)
{
    engine_config c = test_config(max_seqs, max_batched, kv_bytes, block_size);
    char err[512];
    engine *e = engine_new(g_model, g_tok, &c, err, sizeof err);
    if (!e) {
        print_error("engine_new: %s\n", err);
    }
    assert_non_null(e);
    return e;
}

static void make_prompt(int32_t *p, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (int32_t)(3 + (seed >> 8) % (uint32_t)(g_model->cfg.n_vocab - 3));
    }
}

static void submit(engine *e, struct collect *c, const int32_t *prompt, int n_prompt,
                   const int32_t *teacher, int n_teacher, int max_tokens)
{
    engine_request r;
    memset(&r, 0, sizeof r);
    sampling_params_init(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.teacher = teacher;
    r.n_teacher = n_teacher;
    r.max_tokens = max_tokens;
    r.return_logits = c->rows != NULL;
    r.skip_special_tokens = true;
    r.on_output = on_out;
    r.user = c;
    char err[256];
    assert_true(engine_submit(e, &r, err, sizeof err) > 0);
}

static void run_until_idle(engine *e, int max_steps)
{
    for (int i = 0; i < max_steps && engine_has_work(e); i++) {
        assert_true(engine_step(e) >= 0);
    }
    assert_false(engine_has_work(e));
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = d > m ? d : m;
    }
    return m;
}

/* The same prompt + teacher tokens: alone, batched with two others, prefilled in chunks of 8,
 * and after a prefix-cache hit: every logits row agrees within 1e-4. */
static void test_invariance(void **state)
{
    (void)state;
    size_t nv = (size_t)g_model->cfg.n_vocab;
    int32_t prompt[45], teacher[6], other1[30], other2[61];
    make_prompt(prompt, 45, 7);
    make_prompt(teacher, 6, 8);
    make_prompt(other1, 30, 9);
    make_prompt(other2, 61, 10);
    float *ref = calloc(7 * nv, sizeof(float));
    float *got = calloc(7 * nv, sizeof(float));
    assert_non_null(ref);
    assert_non_null(got);

    /* alone, whole prefill */
    engine *e = make_engine(8, 512, 4u << 20, 16);
    struct collect a = {.rows = ref};
    submit(e, &a, prompt, 45, teacher, 6, 0);
    run_until_idle(e, 100);
    assert_int_equal(a.n_rows, 6);
    assert_int_equal(a.n, 6);
    assert_memory_equal(a.tokens, teacher, sizeof teacher);

    /* again on the same engine: prefix-cache hit of 32 tokens (2 full blocks; <= 44) */
    struct collect b = {.rows = got};
    submit(e, &b, prompt, 45, teacher, 6, 0);
    run_until_idle(e, 100);
    assert_int_equal(b.n_rows, 6);
    assert_int_equal(b.n_cached, 32);
    assert_true(max_diff(ref, got, 6 * nv) <= 1e-4);
    engine_stats st;
    engine_get_stats(e, &st);
    assert_true(st.prefix_hits >= 32);
    engine_free(e);

    /* batched with two other sequences */
    e = make_engine(8, 512, 4u << 20, 16);
    struct collect c = {.rows = got}, o1 = {0}, o2 = {0};
    submit(e, &o1, other1, 30, NULL, 0, 9);
    submit(e, &c, prompt, 45, teacher, 6, 0);
    submit(e, &o2, other2, 61, NULL, 0, 4);
    run_until_idle(e, 100);
    assert_int_equal(c.n_rows, 6);
    assert_true(o1.finished && o2.finished);
    assert_int_equal(o1.n, 9);
    assert_int_equal(o2.n, 4);
    assert_true(max_diff(ref, got, 6 * nv) <= 1e-4);
    engine_free(e);

    /* chunked prefill: 8 tokens per step */
    memset(got, 0, 7 * nv * sizeof(float));
    e = make_engine(1, 8, 4u << 20, 16);
    struct collect d = {.rows = got};
    submit(e, &d, prompt, 45, teacher, 6, 0);
    run_until_idle(e, 100);
    assert_int_equal(d.n_rows, 6);
    assert_true(max_diff(ref, got, 6 * nv) <= 1e-4);
    engine_free(e);
    free(ref);
    free(got);
}

/* prompt_logprobs: a prompt's every position against the logits teacher forcing produces for
 * it (prompt = its first token, teacher = the rest): whole, in chunks of 8 batched with another
 * prompt_logprobs request and a plain one, and after the prompt's blocks were cached (no hits
 * are taken). */
static void check_plp(const struct sample_result *got, const float *ref_rows, const int32_t *p,
                      int n, int top)
{
    const int nv = g_model->cfg.n_vocab;
    for (int i = 1; i < n; i++) {
        struct sample_result want;
        assert_int_equal(
            sampler_logprobs(ref_rows + (size_t)(i - 1) * (size_t)nv, nv, p[i], top, &want), 0);
        const struct sample_result *g = &got[i - 1];
        assert_int_equal(g->token, p[i]);
        assert_true(fabsf(g->logprob - want.logprob) <= 1e-4f);
        assert_int_equal(g->n_top, want.n_top);
        for (int j = 0; j < want.n_top; j++) {
            assert_true(fabsf(g->top[j].logprob - want.top[j].logprob) <= 1e-4f);
            /* the same token unless a neighbour is within the tolerance (order of near-ties) */
            bool tie =
                (j > 0 && want.top[j - 1].logprob - want.top[j].logprob < 1e-3f) ||
                (j + 1 < want.n_top && want.top[j].logprob - want.top[j + 1].logprob < 1e-3f);
            assert_true(tie || g->top[j].token == want.top[j].token);
        }
        assert_true(abs(g->rank - want.rank) <= 1 || g->rank == want.rank);
    }
}

static void submit_plp(engine *e, struct collect *c, const int32_t *prompt, int n_prompt, int top,
                       int max_tokens)
{
    engine_request r;
    memset(&r, 0, sizeof r);
    sampling_params_init(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.max_tokens = max_tokens;
    r.prompt_logprobs = true;
    r.prompt_top_logprobs = top;
    c->plp_top = top;
    r.on_output = on_out;
    r.user = c;
    char err[256];
    int64_t id = engine_submit(e, &r, err, sizeof err);
    if (id <= 0) {
        print_error("engine_submit: %s\n", err);
    }
    assert_true(id > 0);
}

static void test_prompt_logprobs(void **state)
{
    (void)state;
    enum { N = 45, M = 29 };
    const size_t nv = (size_t)g_model->cfg.n_vocab;
    int32_t p[N], q[M], other[20];
    make_prompt(p, N, 21);
    make_prompt(q, M, 22);
    make_prompt(other, 20, 23);
    float *ref_p = calloc((size_t)N * nv, sizeof(float));
    float *ref_q = calloc((size_t)M * nv, sizeof(float));
    struct sample_result *got_p = calloc(N, sizeof *got_p);
    struct sample_result *got_q = calloc(M, sizeof *got_q);
    assert_true(ref_p && ref_q && got_p && got_q);

    engine *e = make_engine(8, 512, 4u << 20, 16);
    struct collect rp = {.rows = ref_p}, rq = {.rows = ref_q};
    submit(e, &rp, p, 1, p + 1, N - 1, 0);
    submit(e, &rq, q, 1, q + 1, M - 1, 0);
    run_until_idle(e, 200);
    assert_int_equal(rp.n_rows, N - 1);
    assert_int_equal(rq.n_rows, M - 1);

    /* whole prompt in one step; the prompt's blocks are now cached by the teacher run too */
    struct collect a = {.plp = got_p};
    submit_plp(e, &a, p, N, 5, 3);
    run_until_idle(e, 100);
    assert_int_equal(a.plp_outputs, 1);
    assert_int_equal(a.n_plp, N - 1);
    assert_int_equal(a.n_cached, 0); /* no prefix-cache hits for prompt logprobs */
    check_plp(got_p, ref_p, p, N, 5);
    /* the generated tokens are those of the teacher run's greedy continuation */
    struct collect g = {0};
    submit(e, &g, p, N, NULL, 0, 3);
    run_until_idle(e, 100);
    assert_memory_equal(a.tokens, g.tokens, 3 * sizeof(int32_t));
    engine_free(e);

    /* chunks of 8 tokens a step, batched with another prompt_logprobs request (top 0, max
     * tokens 1) and a plain one; a one-token prompt has no positions */
    memset(got_p, 0, N * sizeof *got_p);
    e = make_engine(4, 8, 4u << 20, 16);
    struct collect b = {.plp = got_p}, c = {.plp = got_q}, o = {0}, one = {0};
    submit(e, &o, other, 20, NULL, 0, 6);
    submit_plp(e, &b, p, N, SAMPLER_MAX_LOGPROBS, 2);
    submit_plp(e, &c, q, M, 0, 1);
    submit_plp(e, &one, p, 1, 3, 1);
    run_until_idle(e, 200);
    assert_int_equal(b.plp_outputs, 1);
    assert_int_equal(c.plp_outputs, 1);
    assert_int_equal(one.plp_outputs, 0); /* nothing to report: no entries */
    assert_int_equal(one.n, 1);
    assert_int_equal(o.n, 6);
    check_plp(got_p, ref_p, p, N, SAMPLER_MAX_LOGPROBS);
    check_plp(got_q, ref_q, q, M, 0);

    /* refusals name the field */
    engine_request r;
    memset(&r, 0, sizeof r);
    sampling_params_init(&r.sampling);
    r.prompt = p;
    r.n_prompt = 4;
    r.prompt_logprobs = true;
    r.prompt_top_logprobs = SAMPLER_MAX_LOGPROBS + 1;
    char err[256];
    assert_int_equal(engine_submit(e, &r, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "prompt logprobs of 21"));
    r.prompt_top_logprobs = 1;
    r.pool = ENGINE_POOL_LAST;
    assert_int_equal(engine_submit(e, &r, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "prompt_logprobs"));
    engine_free(e);
    free(ref_p);
    free(ref_q);
    free(got_p);
    free(got_q);
}

static void test_finish_reasons(void **state)
{
    (void)state;
    engine *e = make_engine(4, 256, 4u << 20, 16);
    int32_t prompt[10];
    make_prompt(prompt, 10, 3);
    /* length */
    struct collect a = {0};
    submit(e, &a, prompt, 10, NULL, 0, 5);
    run_until_idle(e, 50);
    assert_true(a.finished);
    assert_int_equal(a.status, SCHED_FINISHED_LENGTH);
    assert_int_equal(a.n, 5);
    assert_int_equal(a.callbacks_after_finish, 0);

    /* stop token: forcing greedy, the first generated token of this prompt is a stop id */
    engine_request r;
    memset(&r, 0, sizeof r);
    sampling_params_init(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    int32_t stop_id = a.tokens[2];
    r.sampling.stop_token_ids = &stop_id;
    r.sampling.n_stop_token_ids = 1;
    r.prompt = prompt;
    r.n_prompt = 10;
    r.max_tokens = 20;
    r.on_output = on_out;
    struct collect b = {0};
    r.user = &b;
    char err[256];
    assert_true(engine_submit(e, &r, err, sizeof err) > 0);
    run_until_idle(e, 50);
    assert_int_equal(b.status, SCHED_FINISHED_STOPPED);
    assert_int_equal(b.stop_token, stop_id);
    assert_true(b.n <= 3);
    assert_int_equal(b.tokens[b.n - 1], stop_id);

    /* stop string: the text of the first generated tokens, once decoded */
    struct collect c = {0};
    submit(e, &c, prompt, 10, NULL, 0, 12);
    run_until_idle(e, 50);
    if (c.text_len >= 2) {
        char stop[3] = {c.text[c.text_len - 2], c.text[c.text_len - 1], 0};
        const char *stops[] = {stop};
        r.sampling.n_stop_token_ids = 0;
        r.stop = stops;
        r.n_stop = 1;
        r.max_tokens = 12;
        struct collect d = {0};
        r.user = &d;
        assert_true(engine_submit(e, &r, err, sizeof err) > 0);
        run_until_idle(e, 50);
        assert_int_equal(d.status, SCHED_FINISHED_STOPPED);
        assert_int_equal(d.stop_index, 0);
        /* the output ends before the stop string's first occurrence and never contains it */
        assert_null(memmem(d.text, d.text_len, stop, 2));
        assert_true(d.text_len <= c.text_len - 2);
        assert_memory_equal(d.text, c.text, d.text_len);
        /* the output processor told the core: the request no longer holds KV blocks */
        engine_stats st;
        engine_get_stats(e, &st);
        assert_int_equal(st.running + st.waiting, 0);
        assert_true(st.kv_usage < 1e-9);
    }
    /* repetition detection: a bias makes greedy repeat one token; it ends the request after
     * min_count of them (past min_tokens), a stop token still comes first */
    engine_request rr;
    memset(&rr, 0, sizeof rr);
    sampling_params_init(&rr.sampling);
    rr.sampling.temperature = 0;
    rr.sampling.ignore_eos = 1;
    int32_t tok = 11;
    float big = 100.0f;
    rr.sampling.bias_ids = &tok;
    rr.sampling.bias_vals = &big;
    rr.sampling.n_bias = 1;
    rr.sampling.rep_max_pattern = 4;
    rr.sampling.rep_min_count = 3;
    rr.prompt = prompt;
    rr.n_prompt = 10;
    rr.max_tokens = 20;
    rr.on_output = on_out;
    struct collect g = {0};
    rr.user = &g;
    assert_true(engine_submit(e, &rr, err, sizeof err) > 0);
    run_until_idle(e, 50);
    assert_int_equal(g.status, SCHED_FINISHED_REPETITION);
    assert_int_equal(g.n, 3);
    rr.sampling.min_tokens = 5;
    struct collect h = {0};
    rr.user = &h;
    assert_true(engine_submit(e, &rr, err, sizeof err) > 0);
    run_until_idle(e, 50);
    assert_int_equal(h.status, SCHED_FINISHED_REPETITION);
    assert_int_equal(h.n, 5);
    rr.sampling.min_tokens = 0;
    rr.sampling.stop_token_ids = &tok;
    rr.sampling.n_stop_token_ids = 1;
    struct collect k = {0};
    rr.user = &k;
    assert_true(engine_submit(e, &rr, err, sizeof err) > 0);
    run_until_idle(e, 50);
    assert_int_equal(k.status, SCHED_FINISHED_STOPPED);
    assert_int_equal(k.n, 1);
    rr.sampling.n_stop_token_ids = 0;
    rr.sampling.rep_min_count = 1; /* vLLM's refusals */
    assert_int_equal(engine_submit(e, &rr, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "min_count must be >= 2"));
    rr.sampling.rep_min_count = 3;
    rr.sampling.rep_min_pattern = 5;
    assert_int_equal(engine_submit(e, &rr, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "min_pattern_size <= max_pattern_size"));
    rr.sampling.rep_min_pattern = 0;
    rr.sampling.rep_max_pattern = 4096;
    assert_int_equal(engine_submit(e, &rr, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "limits"));
    engine_get_stats(e, &(engine_stats){0});
    engine_free(e);
}

static void test_limits_and_abort(void **state)
{
    (void)state;
    engine_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_model_len = 64;
    cfg.max_num_seqs = 2;
    cfg.max_waiting = 2;
    cfg.kv_cache_bytes = 4u << 20;
    cfg.n_threads = 1;
    char err[512];
    engine *e = engine_new(g_model, g_tok, &cfg, err, sizeof err);
    assert_non_null(e);
    int32_t prompt[80];
    make_prompt(prompt, 80, 5);
    engine_request r;
    memset(&r, 0, sizeof r);
    sampling_params_init(&r.sampling);
    r.sampling.ignore_eos = 1; /* the requests below must end by length */
    r.sampling.has_seed = 1;
    r.sampling.seed = 3;
    r.prompt = prompt;
    r.n_prompt = 64; /* == max_model_len: too long */
    r.on_output = on_out;
    struct collect c[4];
    memset(c, 0, sizeof c);
    r.user = &c[0];
    assert_int_equal(engine_submit(e, &r, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "maximum context length is 64"));
    r.n_prompt = 8;
    int32_t bad = g_model->cfg.n_vocab;
    r.prompt = &bad;
    r.n_prompt = 1;
    assert_int_equal(engine_submit(e, &r, err, sizeof err), -EINVAL);
    r.prompt = prompt;
    r.n_prompt = 8;
    r.max_tokens = 40;
    int64_t ids[3];
    for (int i = 0; i < 2; i++) {
        r.user = &c[i];
        ids[i] = engine_submit(e, &r, err, sizeof err);
        assert_true(ids[i] > 0);
    }
    r.user = &c[2];
    assert_int_equal(engine_submit(e, &r, err, sizeof err), -EAGAIN); /* queue bound */
    assert_true(engine_step(e) > 0);
    engine_abort(e, (uint64_t)ids[0]);
    assert_true(engine_step(e) > 0);
    assert_true(c[0].finished);
    assert_int_equal(c[0].status, SCHED_FINISHED_ABORTED);
    run_until_idle(e, 100);
    assert_int_equal(c[1].status, SCHED_FINISHED_LENGTH);
    engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.running, 0);
    assert_true(st.kv_usage < 1e-9);
    engine_shutdown(e);
    r.user = &c[3];
    assert_int_equal(engine_submit(e, &r, err, sizeof err), -ESHUTDOWN);
    engine_free(e);
}

/* Output callbacks run without the engine lock: one may take it (stats) and queue an abort. */
struct reentrant {
    engine *e;
    uint64_t victim;
    struct collect c;
    int calls;
};

static void on_out_reenter(void *user, const engine_output *o)
{
    struct reentrant *x = user;
    if (x->calls++ == 0) {
        engine_stats st;
        engine_get_stats(x->e, &st); /* would deadlock under the engine lock */
        assert_int_equal(st.running, 2);
        engine_abort(x->e, x->victim);
    }
    on_out(&x->c, o);
}

static void test_callbacks_unlocked(void **state)
{
    (void)state;
    engine *e = make_engine(4, 256, 4u << 20, 16);
    int32_t prompt[12];
    make_prompt(prompt, 12, 31);
    struct collect victim = {0};
    submit(e, &victim, prompt, 12, NULL, 0, 20);
    struct reentrant x = {.e = e, .victim = 1}; /* the first id */
    engine_request r;
    memset(&r, 0, sizeof r);
    sampling_params_init(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    r.prompt = prompt;
    r.n_prompt = 12;
    r.max_tokens = 5;
    r.on_output = on_out_reenter;
    r.user = &x;
    char err[256];
    assert_true(engine_submit(e, &r, err, sizeof err) > 0);
    run_until_idle(e, 50);
    assert_true(victim.finished);
    assert_int_equal(victim.status, SCHED_FINISHED_ABORTED);
    assert_true(victim.n < 20);
    assert_true(x.c.finished);
    assert_int_equal(x.c.status, SCHED_FINISHED_LENGTH);
    assert_int_equal(x.c.n, 5);
    engine_free(e);
}

/* Aborts need no allocation and are never lost: 64 queued at once (running and waiting
 * requests, duplicates, unknown and finished ids) all land at the next step, each with exactly
 * one FINISHED_ABORTED output, and the KV cache is empty afterwards. */
static void test_abort_queue(void **state)
{
    (void)state;
    enum { N = 64 };
    engine *e = make_engine(8, 256, 4u << 20, 16);
    int32_t prompt[20];
    make_prompt(prompt, 20, 21);
    struct collect *cs = calloc(N + 1, sizeof *cs);
    assert_non_null(cs);
    int64_t ids[N + 1];
    engine_request r;
    memset(&r, 0, sizeof r);
    sampling_params_init(&r.sampling);
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    r.prompt = prompt;
    r.n_prompt = 20;
    r.max_tokens = 3;
    r.on_output = on_out;
    char err[256];
    for (int i = 0; i <= N; i++) {
        r.user = &cs[i];
        ids[i] = engine_submit(e, &r, err, sizeof err);
        assert_true(ids[i] > 0);
    }
    /* the last request is never aborted: it runs to its length */
    engine_abort(e, (uint64_t)ids[N] + 1000); /* unknown: ignored */
    assert_true(engine_step(e) > 0);          /* 8 running, the rest waiting */
    for (int i = 0; i < N; i++) {
        engine_abort(e, (uint64_t)ids[i]);
        engine_abort(e, (uint64_t)ids[i]); /* a duplicate is one abort */
    }
    assert_true(engine_has_work(e));
    for (int i = 0; i < 100 && !cs[N].finished; i++) {
        assert_true(engine_step(e) >= 0);
    }
    for (int i = 0; i < N; i++) {
        assert_true(cs[i].finished);
        assert_int_equal(cs[i].status, SCHED_FINISHED_ABORTED);
        assert_int_equal(cs[i].callbacks_after_finish, 0);
        assert_true(cs[i].n <= 1); /* the first step's token at most */
    }
    assert_true(cs[N].finished);
    assert_int_equal(cs[N].status, SCHED_FINISHED_LENGTH);
    assert_int_equal(cs[N].n, 3);
    engine_abort(e, (uint64_t)ids[N]); /* finished: ignored */
    assert_false(engine_has_work(e));
    assert_int_equal(engine_step(e), 0);
    assert_int_equal(cs[N].callbacks_after_finish, 0);
    engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.running + st.waiting, 0);
    assert_true(st.kv_usage < 1e-9);
    engine_free(e);
    free(cs);
}

/* 1,000 requests, random prompt lengths (1..120) and max_tokens, random aborts, a KV cache of
 * only 40 blocks of 8 tokens so that preemption happens often. */
static void test_stress(void **state)
{
    (void)state;
    enum { N = 1000 };
    engine_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_model_len = 160;
    cfg.max_num_seqs = 16;
    cfg.max_num_batched_tokens = 96;
    cfg.block_size = 8;
    cfg.max_waiting = N;
    cfg.n_threads = 1;
    cfg.kv_dtype = ENGINE_KV_F16;
    /* 40 usable blocks: ask for just that many bytes */
    size_t per_block = cpu_backend_ops.kv_block_bytes(g_model, 8, KV_DTYPE_F16);
    cfg.kv_cache_bytes = per_block * 41;
    char err[512];
    engine *e = engine_new(g_model, g_tok, &cfg, err, sizeof err);
    if (!e) {
        print_error("engine_new: %s\n", err);
    }
    assert_non_null(e);
    struct collect *cs = calloc(N, sizeof *cs);
    int64_t *ids = calloc(N, sizeof *ids);
    assert_non_null(cs);
    assert_non_null(ids);
    uint32_t rng = 12345;
    int32_t prompt[160];
    int submitted = 0, steps = 0, aborted = 0;
    while ((submitted < N || engine_has_work(e)) && steps < 20000) {
        for (int k = 0; k < 8 && submitted < N; k++) {
            rng = rng * 1664525u + 1013904223u;
            int len = 1 + (int)((rng >> 8) % 120);
            make_prompt(prompt, len, rng);
            if (rng % 5 == 0 && len > 16) {
                make_prompt(prompt, 16, 99); /* shared prefixes: prefix-cache hits */
            }
            engine_request r;
            memset(&r, 0, sizeof r);
            sampling_params_init(&r.sampling);
            r.sampling.temperature = (rng >> 3) % 2 ? 0.8f : 0.0f;
            r.sampling.seed = rng;
            r.sampling.has_seed = 1;
            r.prompt = prompt;
            r.n_prompt = len;
            r.max_tokens = 1 + (int)((rng >> 12) % 24);
            if ((rng >> 16) % 4 == 0) { /* prompt logprobs across chunks and preemptions */
                r.prompt_logprobs = true;
                r.prompt_top_logprobs = (int32_t)((rng >> 18) % 4);
                cs[submitted].plp_top = r.prompt_top_logprobs;
                cs[submitted].n_plp = -1;
            }
            r.on_output = on_out;
            r.user = &cs[submitted];
            ids[submitted] = engine_submit(e, &r, err, sizeof err);
            assert_true(ids[submitted] > 0);
            submitted++;
        }
        rng = rng * 1664525u + 1013904223u;
        if (rng % 7 == 0 && submitted > 0) {
            int victim = (int)((rng >> 8) % (uint32_t)submitted);
            if (!cs[victim].finished) {
                engine_abort(e, (uint64_t)ids[victim]);
                aborted++;
            }
        }
        assert_true(engine_step(e) >= 0);
        steps++;
    }
    assert_false(engine_has_work(e));
    int fin_stop = 0, fin_len = 0, fin_abort = 0, n_plp_checked = 0;
    for (int i = 0; i < N; i++) {
        assert_true(cs[i].finished);
        assert_int_equal(cs[i].callbacks_after_finish, 0);
        /* prompt logprobs came with the first token, complete and well-formed */
        assert_true(cs[i].plp_outputs >= 0 && cs[i].plp_outputs <= 1);
        if (cs[i].n_plp != 0 && cs[i].n > 0) {
            assert_int_equal(cs[i].plp_outputs, cs[i].n_plp > 0 ? 1 : 0);
            n_plp_checked++;
        }
        fin_stop += cs[i].status == SCHED_FINISHED_STOPPED;
        fin_len += cs[i].status == SCHED_FINISHED_LENGTH;
        fin_abort += cs[i].status == SCHED_FINISHED_ABORTED;
    }
    assert_int_equal(fin_stop + fin_len + fin_abort, N);
    assert_true(fin_abort > 0 && fin_abort <= aborted);
    engine_stats st;
    engine_get_stats(e, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.waiting, 0);
    assert_true(st.kv_usage < 1e-9); /* every block is free again */
    assert_true(st.preemptions > 0);
    assert_true(st.prefix_hits > 0);
    assert_true(n_plp_checked > 50);
    print_message("stress: %d steps, %d stop, %d length, %d aborted, %llu preemptions, %llu "
                  "prefix-hit tokens\n",
                  steps, fin_stop, fin_len, fin_abort, (unsigned long long)st.preemptions,
                  (unsigned long long)st.prefix_hits);
    engine_free(e);
    free(cs);
    free(ids);
}

/* Whether the test model mixes full and sliding-window attention layers (gemma2/3). */
static bool model_mixes_windows(void)
{
    for (int l = 1; l < g_model->cfg.n_layer; l++) {
        if (g_model->layers[l].swa != g_model->layers[0].swa) {
            return g_model->cfg.n_swa > 0;
        }
    }
    return false;
}

static int fake_start_load(void *ud, const engine_kv_load *l)
{
    (void)ud;
    (void)l;
    return -ENOTSUP;
}

static engine *make_hybrid_engine(bool disable, size_t kv_bytes, char *err, size_t errlen)
{
    engine_config c = test_config(4, 64, kv_bytes, 16);
    c.disable_hybrid_kv_cache_manager = disable;
    return engine_new(g_model, g_tok, &c, err, errlen);
}

/* The hybrid KV cache manager (vLLM's KV cache groups): on a model mixing full and sliding
 * layers the sliding ones get block tables of their own. Logits are those of the one-table
 * layout, a memory budget too small for one max_model_len sequence there suffices here, and
 * while a long prompt runs the sliding groups hold only their window's blocks. */
static void test_hybrid_kv_groups(void **state)
{
    (void)state;
    const size_t layer_block = cpu_backend_ops.kv_block_bytes(g_model, 16, KV_DTYPE_F32) /
                               (size_t)g_model->cfg.n_layer; /* one layer's K and V per block */
    char err[512];
    engine *one = make_hybrid_engine(true, 64u << 20, err, sizeof err);
    engine *hyb = make_hybrid_engine(false, 64u << 20, err, sizeof err);
    assert_non_null(one);
    assert_non_null(hyb);
    engine_stats s1, sh;
    engine_get_stats(one, &s1);
    engine_get_stats(hyb, &sh);
    assert_int_equal(s1.kv_groups, 1);
    if (!model_mixes_windows()) {
        assert_int_equal(sh.kv_groups, 1); /* one attention type: nothing to split */
        engine_free(one);
        engine_free(hyb);
        return;
    }
    assert_true(sh.kv_groups > 1);
    /* a P/D connector moves one block table per request: refused, and no pools to adopt */
    engine_kv_connector conn = {.engine_id = "e",
                                .host = "127.0.0.1",
                                .port = 1,
                                .tp_size = 1,
                                .start_load = fake_start_load};
    assert_int_equal(engine_set_kv_connector(hyb, &conn), -EINVAL);
    assert_int_equal(engine_set_kv_connector(one, &conn), 0);
    assert_int_equal(engine_kv_adopt_pools(hyb, NULL, NULL), -ENOTSUP);

    /* 200 prompt tokens + 8 teacher-forced ones, prefilled 64 per step */
    size_t nv = (size_t)g_model->cfg.n_vocab;
    int32_t prompt[200], teacher[8];
    make_prompt(prompt, 200, 21);
    make_prompt(teacher, 8, 22);
    float *ref = calloc(9 * nv, sizeof(float)), *got = calloc(9 * nv, sizeof(float));
    assert_non_null(ref);
    assert_non_null(got);
    struct collect a = {.rows = ref}, b = {.rows = got};
    submit(one, &a, prompt, 200, teacher, 8, 0);
    run_until_idle(one, 100);
    submit(hyb, &b, prompt, 200, teacher, 8, 0);
    const int32_t window = g_model->cfg.n_swa, bs = 16;
    int32_t max_used = 0;
    for (int i = 0; i < 100 && engine_has_work(hyb); i++) {
        assert_true(engine_step(hyb) >= 0);
        engine_get_stats(hyb, &sh);
        int32_t used = (int32_t)(sh.kv_usage * (sh.num_blocks - 1) + 0.5);
        max_used = used > max_used ? used : max_used;
    }
    assert_false(engine_has_work(hyb));
    assert_int_equal(a.n_rows, 8);
    assert_int_equal(b.n_rows, 8);
    assert_true(max_diff(ref, got, 8 * nv) <= 1e-6);
    /* at most: the full groups' 13 blocks of 208 tokens, and per sliding group the blocks of
     * its window plus a 64-token step, which it held before the step's release */
    int32_t sliding = 0, full_groups = 0;
    {
        /* groups per attention type, from the plan (its rule: unit/cache/test_kv_groups) */
        int32_t window_of[64];
        assert_true(g_model->cfg.n_layer <= 64);
        for (int l = 0; l < g_model->cfg.n_layer; l++) {
            window_of[l] = g_model->layers[l].swa ? window : 0;
        }
        kv_groups plan;
        assert_int_equal(kv_groups_plan(&plan, g_model->cfg.n_layer, window_of, true), 0);
        for (int32_t k = 0; k < plan.n_groups; k++) {
            sliding += plan.window[k] > 0;
            full_groups += plan.window[k] == 0;
        }
        kv_groups_free(&plan);
        assert_int_equal(sh.kv_groups, full_groups + sliding);
    }
    int32_t per_sliding = (window - 1 + 64 + bs - 1) / bs + 1;
    assert_true(max_used <= full_groups * 13 + sliding * per_sliding);
    assert_true(max_used < (full_groups + sliding) * 13); /* the sliding groups gave blocks back */
    print_message("hybrid: %d groups, at most %d blocks in use for a 208-token sequence\n",
                  (int)sh.kv_groups, (int)max_used);

    /* the same prompt again on the hybrid engine: a prefix hit over every group */
    memset(got, 0, 9 * nv * sizeof(float));
    struct collect c = {.rows = got};
    submit(hyb, &c, prompt, 200, teacher, 8, 0);
    run_until_idle(hyb, 100);
    assert_true(c.n_cached > 0 && c.n_cached % bs == 0);
    assert_true(max_diff(ref, got, 8 * nv) <= 1e-4);
    engine_free(one);
    engine_free(hyb);
    free(ref);
    free(got);

    /* a budget below one 256-token sequence in the one-table layout (16 blocks + the null
     * block of n_layer layers) is enough with the groups */
    size_t budget = layer_block * (size_t)g_model->cfg.n_layer * 16;
    one = make_hybrid_engine(true, budget, err, sizeof err);
    assert_null(one);
    assert_non_null(strstr(err, "--kv-cache-memory"));
    hyb = make_hybrid_engine(false, budget, err, sizeof err);
    if (!hyb) {
        print_error("engine_new: %s\n", err);
    }
    assert_non_null(hyb);
    engine_free(hyb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariance),         cmocka_unit_test(test_finish_reasons),
        cmocka_unit_test(test_limits_and_abort),   cmocka_unit_test(test_abort_queue),
        cmocka_unit_test(test_callbacks_unlocked), cmocka_unit_test(test_stress),
        cmocka_unit_test(test_prompt_logprobs),    cmocka_unit_test(test_hybrid_kv_groups),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
