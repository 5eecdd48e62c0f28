/* Unit tests for engine/sampler/sampler.h: greedy, temperature, candidate sets of min_p / top_k /
 * top_p, penalties, logit_bias, allowed_token_ids, bad_words, seeds, a fixed-seed distribution
 * check, raw logprobs, min_tokens, stops. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sampler/sampler.h"

struct ctx {
    struct sampling_params p;
    struct sampler_state st;
    struct sampler_scratch sc;
};

static void ctx_init(struct ctx *c, const struct sampling_params *p, const int32_t *prompt,
                     size_t n_prompt)
{
    c->p = *p;
    sampler_scratch_init(&c->sc);
    int32_t eos = 0;
    assert_int_equal(sampler_state_init(&c->st, &c->p, prompt, n_prompt, &eos, 1), 0);
}

static void ctx_deinit(struct ctx *c)
{
    sampler_state_deinit(&c->st);
    sampler_scratch_deinit(&c->sc);
}

static int32_t sample_once(struct ctx *c, const float *logits, int n, struct sample_result *r)
{
    float *tmp = malloc((size_t)n * sizeof(*tmp));
    assert_non_null(tmp);
    memcpy(tmp, logits, (size_t)n * sizeof(*tmp));
    assert_int_equal(sampler_sample(&c->p, &c->st, &c->sc, tmp, n, r), 0);
    free(tmp);
    return r->token;
}

static void fill_random(float *l, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        l[i] = (float)((seed >> 8) % 20000) / 1000.0f - 10.0f;
    }
}

static void test_greedy_is_argmax(void **state)
{
    (void)state;
    enum { N = 151936 };
    float *l = malloc(N * sizeof(*l));
    assert_non_null(l);
    fill_random(l, N, 7);
    l[123457] = 50.0f;
    struct sampling_params p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    struct sample_result r;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sample_once(&c, l, N, &r), 123457);
    }
    c.p.temperature = 1e-6f; /* below the epsilon: still greedy */
    assert_int_equal(sample_once(&c, l, N, &r), 123457);
    /* a tiny temperature above the epsilon is not greedy in code but is nearly so */
    c.p.temperature = 1e-3f;
    assert_int_equal(sample_once(&c, l, N, &r), 123457);
    ctx_deinit(&c);
    free(l);
}

static void test_greedy_does_not_touch_rng(void **state)
{
    (void)state;
    float l[4] = {1, 2, 3, 0};
    struct sampling_params p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.has_seed = 1;
    p.seed = 5;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    uint64_t before = c.st.rng[0];
    struct sample_result r;
    assert_int_equal(sample_once(&c, l, 4, &r), 2);
    assert_true(c.st.rng[0] == before);
    ctx_deinit(&c);
}

/* Returns a bitmask of the tokens drawn in `draws` samples of an 8-token vocabulary. */
static unsigned support_of(const struct sampling_params *p, const float *l, int draws)
{
    struct ctx c;
    ctx_init(&c, p, NULL, 0);
    unsigned mask = 0;
    struct sample_result r;
    for (int i = 0; i < draws; i++) {
        mask |= 1u << sample_once(&c, l, 8, &r);
    }
    ctx_deinit(&c);
    return mask;
}

static void test_candidate_sets(void **state)
{
    (void)state;
    /* probabilities ∝ exp(l): token 3 best, then 5, 1, 6, ... */
    const float l[8] = {-1.0f, 1.0f, -3.0f, 3.0f, -2.0f, 2.0f, 0.0f, -4.0f};
    struct sampling_params p;
    sampling_params_init(&p);
    p.has_seed = 1;
    p.seed = 42;
    assert_int_equal(support_of(&p, l, 4000), 0xFFu); /* everything reachable */
    p.top_k = 2;
    assert_int_equal(support_of(&p, l, 2000), (1u << 3) | (1u << 5));
    p.top_k = 1;
    assert_int_equal(support_of(&p, l, 200), 1u << 3);
    p.top_k = -1;
    /* min_p 0.3: keep p_i >= 0.3 p_max ⇔ l_i >= 3 + ln 0.3 = 1.796: tokens 3, 5 */
    p.min_p = 0.3f;
    assert_int_equal(support_of(&p, l, 2000), (1u << 3) | (1u << 5));
    p.min_p = 0.1f; /* 3 + ln 0.1 = 0.697: tokens 3, 5, 1 */
    assert_int_equal(support_of(&p, l, 3000), (1u << 3) | (1u << 5) | (1u << 1));
    p.min_p = 0.0f;
    /* softmax: p3 = 0.6364, p5 = 0.2341, p1 = 0.0861 ... top_p 0.8: mass before 5 is 0.64 < 0.8
     * → kept; before 1 is 0.87 → dropped */
    p.top_p = 0.8f;
    assert_int_equal(support_of(&p, l, 3000), (1u << 3) | (1u << 5));
    p.top_p = 0.5f; /* mass before 5 is 0.64 ≥ 0.5 → only 3 */
    assert_int_equal(support_of(&p, l, 300), 1u << 3);
    p.top_p = 0.9f; /* 0.87 < 0.9 → 1 kept too */
    assert_int_equal(support_of(&p, l, 3000), (1u << 3) | (1u << 5) | (1u << 1));
    /* top_k then top_p: top_k 2 renormalises to p3 = 0.731: top_p 0.7 keeps only 3 */
    p.top_k = 2;
    p.top_p = 0.7f;
    assert_int_equal(support_of(&p, l, 300), 1u << 3);
    /* temperature before top_p: at T = 4 the distribution flattens, top_p 0.5 keeps 3, 5, 1 */
    p.top_k = 0;
    p.temperature = 4.0f;
    p.top_p = 0.5f;
    assert_int_equal(support_of(&p, l, 3000), (1u << 3) | (1u << 5) | (1u << 1));
}

/* top_p where all candidates are within one probability bin: the exact selection decides. */
static void test_top_p_close_logits(void **state)
{
    (void)state;
    enum { N = 40 };
    float l[N];
    for (int i = 0; i < N; i++) {
        l[i] = (float)((i * 17) % N) * 0.001f; /* distinct, shuffled, within 0.04 */
    }
    const float top_ps[] = {0.5f, 0.26f, 0.9f};
    for (size_t t = 0; t < sizeof(top_ps) / sizeof(top_ps[0]); t++) {
        /* reference: best-first, keep while the mass before is < top_p */
        double z = 0;
        for (int i = 0; i < N; i++) {
            z += exp((double)l[i]);
        }
        unsigned char want[N] = {0};
        double before = 0;
        int kept = 0;
        for (int r = N - 1; r >= 0; r--) { /* logit value r * 0.001, best first */
            int tok = -1;
            for (int i = 0; i < N; i++) {
                tok = (i * 17) % N == r ? i : tok;
            }
            if (before >= (double)top_ps[t] * z) {
                break;
            }
            want[tok] = 1;
            kept++;
            before += exp((double)l[tok]);
        }
        struct sampling_params p;
        sampling_params_init(&p);
        p.has_seed = 1;
        p.seed = 77 + t;
        p.top_p = top_ps[t];
        struct ctx c;
        ctx_init(&c, &p, NULL, 0);
        unsigned char seen[N] = {0};
        struct sample_result r;
        for (int i = 0; i < 150 * kept; i++) {
            seen[sample_once(&c, l, N, &r)] = 1;
        }
        ctx_deinit(&c);
        assert_memory_equal(seen, want, sizeof(want));
    }
}

static void test_top_p_large_vocab(void **state)
{
    (void)state;
    enum { N = 150000 };
    float *l = calloc(N, sizeof(*l));
    assert_non_null(l);
    /* 10 tokens carry ~all mass: heap path with a short pop */
    for (int i = 0; i < 10; i++) {
        l[1000 + i * 7] = 30.0f;
    }
    struct sampling_params p;
    sampling_params_init(&p);
    p.has_seed = 1;
    p.seed = 3;
    p.top_p = 0.95f;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    struct sample_result r;
    for (int i = 0; i < 50; i++) {
        int32_t t = sample_once(&c, l, N, &r);
        assert_true(t >= 1000 && t < 1070 && (t - 1000) % 7 == 0);
    }
    /* top_k large with top_p: partial selection then sort */
    c.p.top_k = 5000;
    c.p.top_p = 0.5f;
    for (int i = 0; i < 20; i++) {
        int32_t t = sample_once(&c, l, N, &r);
        assert_true(t >= 1000 && t < 1070 && (t - 1000) % 7 == 0);
    }
    ctx_deinit(&c);
    free(l);
}

static void test_penalties_arithmetic(void **state)
{
    (void)state;
    struct sampling_params p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.logprobs = 0;
    int32_t prompt[] = {1, 2, 2};
    struct ctx c;
    ctx_init(&c, &p, prompt, 3);
    assert_int_equal(sampler_accept(&c.st, 2), 0);
    assert_int_equal(sampler_accept(&c.st, 3), 0);
    assert_int_equal(sampler_accept(&c.st, 3), 0);
    float l[6] = {1.0f, 4.0f, -2.0f, 6.0f, 0.5f, 3.0f};
    struct sample_result r;
    assert_int_equal(sampler_sample(&c.p, &c.st, &c.sc, l, 6, &r), 0);
    assert_float_equal(l[0], 1.0f, 1e-6);          /* untouched (0 is also eos: min_tokens 0) */
    assert_float_equal(l[1], 2.0f, 1e-6);          /* prompt only: 4 / 2 */
    assert_float_equal(l[2], -4.0f - 0.75f, 1e-6); /* prompt+output once: -2*2 - 0.5 - 0.25 */
    assert_float_equal(l[3], 3.0f - 1.0f, 1e-6);   /* output twice: 6/2 - 0.5 - 0.5 */
    assert_float_equal(l[4], 0.5f, 1e-6);
    assert_float_equal(l[5], 3.0f, 1e-6);
    assert_int_equal(r.token, 5); /* greedy over penalised logits */
    /* raw logprobs are of the unpenalised logits: token 3 (6.0) is the raw best */
    assert_int_equal(r.rank, 3); /* raw 6.0 and 4.0 rank above 3.0 */
    ctx_deinit(&c);
}

/* logit_bias is added before the penalties (vLLM v1's order), raw logprobs do not see it, ids past
 * the vocabulary are skipped, and the state keeps its own copy of the arrays. */
static void test_logit_bias(void **state)
{
    (void)state;
    struct sampling_params p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    p.logprobs = 1;
    int32_t ids[] = {4, 1, 99};
    float vals[] = {3.0f, -10.0f, 50.0f};
    p.bias_ids = ids;
    p.bias_vals = vals;
    p.n_bias = 3;
    int32_t prompt[] = {4};
    struct ctx c;
    ctx_init(&c, &p, prompt, 1);
    ids[0] = 0; /* the caller's arrays may change after init */
    vals[0] = 0.0f;
    float l[6] = {1.0f, 4.0f, -2.0f, 2.0f, 0.5f, 1.5f};
    struct sample_result r;
    assert_int_equal(sampler_sample(&c.p, &c.st, &c.sc, l, 6, &r), 0);
    assert_float_equal(l[4], (0.5f + 3.0f) / 2.0f, 1e-6); /* bias, then the prompt's penalty */
    assert_float_equal(l[1], 4.0f - 10.0f, 1e-6);
    assert_float_equal(l[0], 1.0f, 1e-6);
    assert_int_equal(r.token, 3);        /* 2.0 beats 4's 1.75 and 1's -6 */
    assert_int_equal(r.top[0].token, 1); /* raw logprobs: token 1 (4.0) unbiased is the best */
    assert_int_equal(r.rank, 2);
    ctx_deinit(&c);
    /* a negative id or a non-finite bias is refused at init */
    int32_t neg[] = {-1};
    float one[] = {1.0f};
    p.bias_ids = neg;
    p.bias_vals = one;
    p.n_bias = 1;
    struct sampler_state st;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), -EINVAL);
    int32_t ok[] = {2};
    float inf[] = {INFINITY};
    p.bias_ids = ok;
    p.bias_vals = inf;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), -EINVAL);
}

static void test_allowed_token_ids(void **state)
{
    (void)state;
    struct sampling_params p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.logprobs = 1;
    int32_t allowed[] = {5, 2, 5, 99}; /* repeated, and one past this vocabulary */
    p.allowed_ids = allowed;
    p.n_allowed = 4;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    allowed[0] = 1; /* the caller's array may change after init */
    float l[6] = {1.0f, 4.0f, -2.0f, 2.0f, 0.5f, 1.5f};
    struct sample_result r;
    assert_int_equal(sampler_sample(&c.p, &c.st, &c.sc, l, 6, &r), 0);
    assert_int_equal(r.token, 5);        /* 1.5 beats -2.0; 1 (4.0) is not allowed */
    assert_int_equal(r.top[0].token, 1); /* raw logprobs see every token */
    for (int i = 0; i < 6; i++) {
        assert_true((i == 2 || i == 5) ? isfinite(l[i]) : isinf(l[i]));
    }
    /* drawn with temperature: only allowed tokens, ever */
    c.p.temperature = 1.0f;
    for (int k = 0; k < 200; k++) {
        float m[6] = {3.0f, 4.0f, -2.0f, 2.0f, 0.5f, 1.5f};
        assert_int_equal(sampler_sample(&c.p, &c.st, &c.sc, m, 6, &r), 0);
        assert_true(r.token == 2 || r.token == 5);
    }
    ctx_deinit(&c);
    int32_t neg[] = {-3};
    p.allowed_ids = neg;
    p.n_allowed = 1;
    struct sampler_state st;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), -EINVAL);
}

/* Greedy over l (copied) with c's state. */
static int32_t greedy_of(struct ctx *c, const float *l, int n)
{
    struct sample_result r;
    return sample_once(c, l, n, &r);
}

static void test_bad_words(void **state)
{
    (void)state;
    struct sampling_params p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.logprobs = 1;
    /* [5] (always banned), [2, 3] (3 after a 2), [1, 2, 3, 4] (4 after 1 2 3) */
    int32_t words[] = {5, 2, 3, 1, 2, 3, 4};
    int32_t lens[] = {1, 2, 4};
    p.bad_words = words;
    p.bad_words_lens = lens;
    p.n_bad_words = 3;
    struct ctx c;
    const int32_t prompt[] = {1, 2, 3, 2}; /* the prompt is no prefix: only the output counts */
    ctx_init(&c, &p, prompt, 4);
    words[0] = 6; /* the caller's arrays may change after init */
    lens[0] = 9;
    const float l[8] = {0.0f, 0.0f, 0.0f, 4.0f, 6.0f, 5.0f, 1.0f, 0.0f};
    struct sample_result r;
    float m[8];
    memcpy(m, l, sizeof m);
    m[4] = -1.0f;
    assert_int_equal(sample_once(&c, m, 8, &r), 3); /* 5 banned, 3 allowed: no 2 before it */
    assert_int_equal(r.top[0].token, 5);            /* raw logprobs see the banned token */
    assert_int_equal(sampler_accept(&c.st, 2), 0);
    assert_int_equal(greedy_of(&c, m, 8), 6); /* now 3 follows a 2: banned too */
    assert_int_equal(sampler_accept(&c.st, 7), 0);
    assert_int_equal(greedy_of(&c, m, 8), 3);
    /* 1 2 3 → 4 banned; the ring of recent tokens (3 here) wraps around many times */
    for (int k = 0; k < 10; k++) {
        assert_int_equal(sampler_accept(&c.st, 7 - k % 3), 0);
    }
    const int32_t tail[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(sampler_accept(&c.st, tail[k]), 0);
    }
    assert_int_equal(greedy_of(&c, l, 8), 3); /* 4 (after 1 2 3) and 5 banned */
    assert_int_equal(sampler_accept(&c.st, 9), 0);
    assert_int_equal(greedy_of(&c, l, 8), 4); /* 1 2 9: 4 is free again */
    ctx_deinit(&c);

    /* only [2, 3]: after 1 2 3 nothing is banned but a 3 right after a 2 */
    sampling_params_init(&p);
    p.temperature = 0.0f;
    int32_t two[] = {2, 3};
    int32_t two_len[] = {2};
    p.bad_words = two;
    p.bad_words_lens = two_len;
    p.n_bad_words = 1;
    ctx_init(&c, &p, NULL, 0);
    const float k3[4] = {0.0f, 0.0f, 1.0f, 2.0f};
    assert_int_equal(greedy_of(&c, k3, 4), 3);
    assert_int_equal(sampler_accept(&c.st, 2), 0);
    assert_int_equal(greedy_of(&c, k3, 4), 2);
    ctx_deinit(&c);

    /* bad arrays */
    struct sampler_state st;
    int32_t zero_len[] = {0};
    p.bad_words_lens = zero_len;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), -EINVAL);
    int32_t neg[] = {-1, 3};
    p.bad_words = neg;
    p.bad_words_lens = two_len;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), -EINVAL);
    p.bad_words = NULL;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), -EINVAL);
    /* every token banned: nothing can be drawn */
    int32_t all[] = {0, 1};
    int32_t ones[] = {1, 1};
    p.bad_words = all;
    p.bad_words_lens = ones;
    p.n_bad_words = 2;
    ctx_init(&c, &p, NULL, 0);
    float two_l[2] = {1.0f, 2.0f};
    assert_int_equal(sampler_sample(&c.p, &c.st, &c.sc, two_l, 2, &r), -EINVAL);
    ctx_deinit(&c);
}

static void test_seed_reproducible(void **state)
{
    (void)state;
    enum { N = 1000, STEPS = 64 };
    float l[N];
    fill_random(l, N, 11);
    for (int i = 0; i < N; i++) {
        l[i] *= 0.3f; /* flatter: many candidates */
    }
    struct sampling_params p;
    sampling_params_init(&p);
    p.has_seed = 1;
    p.seed = 1234;
    p.top_p = 0.9f;
    int32_t a[STEPS] = {0}, b[STEPS] = {0}, d[STEPS] = {0};
    struct sample_result r;
    for (int run = 0; run < 3; run++) {
        struct ctx c;
        struct sampling_params q = p;
        q.seed = run == 2 ? 1235 : 1234;
        ctx_init(&c, &q, NULL, 0);
        int32_t *dst = run == 0 ? a : run == 1 ? b : d;
        for (int s = 0; s < STEPS; s++) {
            dst[s] = sample_once(&c, l, N, &r);
            assert_int_equal(sampler_accept(&c.st, dst[s]), 0);
        }
        ctx_deinit(&c);
    }
    assert_memory_equal(a, b, sizeof(a));
    int differ = 0;
    for (int s = 0; s < STEPS; s++) {
        differ += a[s] != d[s];
    }
    assert_true(differ > STEPS / 4);
}

/* Fixed seed, 20000 draws over 5 tokens: Pearson chi-square with 4 degrees of freedom. With a
 * fixed seed the statistic is a constant; the bound (40, p ≈ 4e-8 under the null) would only be
 * exceeded by a wrong distribution. */
static void test_distribution_chi_square(void **state)
{
    (void)state;
    const float l[5] = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f};
    const float temp = 1.5f;
    struct sampling_params p;
    sampling_params_init(&p);
    p.has_seed = 1;
    p.seed = 99;
    p.temperature = temp;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    enum { DRAWS = 20000 };
    int counts[5] = {0};
    struct sample_result r;
    for (int i = 0; i < DRAWS; i++) {
        counts[sample_once(&c, l, 5, &r)]++;
    }
    ctx_deinit(&c);
    double z = 0, chi = 0;
    for (int i = 0; i < 5; i++) {
        z += exp((double)l[i] / temp);
    }
    for (int i = 0; i < 5; i++) {
        double e = DRAWS * exp((double)l[i] / temp) / z;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    assert_true(chi < 40.0);
}

static void test_logprobs_consistent(void **state)
{
    (void)state;
    enum { N = 5000 };
    float *l = malloc(N * sizeof(*l));
    assert_non_null(l);
    fill_random(l, N, 5);
    struct sampling_params p;
    sampling_params_init(&p);
    p.has_seed = 1;
    p.seed = 8;
    p.logprobs = 20;
    p.temperature = 0.7f;
    p.top_k = 40;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    struct sample_result r;
    sample_once(&c, l, N, &r);
    /* reference log_softmax of the raw logits */
    double m = -INFINITY, z = 0;
    for (int i = 0; i < N; i++) {
        m = fmax(m, l[i]);
    }
    for (int i = 0; i < N; i++) {
        z += exp(l[i] - m);
    }
    double lse = m + log(z);
    assert_int_equal(r.n_top, 20);
    double mass = 0;
    for (int i = 0; i < r.n_top; i++) {
        assert_float_equal(r.top[i].logprob, l[r.top[i].token] - lse, 1e-4);
        if (i > 0) {
            assert_true(r.top[i].logprob <= r.top[i - 1].logprob);
        }
        mass += exp((double)r.top[i].logprob);
    }
    assert_true(mass <= 1.0 + 1e-5);
    assert_float_equal(r.logprob, l[r.token] - lse, 1e-4);
    int rank = 0;
    for (int i = 0; i < N; i++) {
        rank += l[i] >= l[r.token];
    }
    assert_int_equal(r.rank, rank);
    assert_true(r.rank <= 40); /* top_k 40 */
    /* the full distribution sums to 1: a 3-token check */
    float s[3] = {0.1f, -0.7f, 2.0f};
    c.p.logprobs = 3;
    sample_once(&c, s, 3, &r);
    assert_int_equal(r.n_top, 3);
    assert_float_equal(exp((double)r.top[0].logprob) + exp((double)r.top[1].logprob) +
                           exp((double)r.top[2].logprob),
                       1.0, 1e-5);
    assert_int_equal(r.top[0].token, 2);

    /* sampler_logprobs (prompt logprobs): a given token's logprob and rank, the same top list
     * as sampling reports, the logits untouched; caps and bad arguments */
    struct sample_result q;
    float before = l[17];
    assert_int_equal(sampler_logprobs(l, N, 17, 20, &q), 0);
    assert_int_equal(q.token, 17);
    assert_float_equal(q.logprob, l[17] - lse, 1e-4);
    rank = 0;
    for (int i = 0; i < N; i++) {
        rank += l[i] >= l[17];
    }
    assert_int_equal(q.rank, rank);
    assert_true(l[17] == before);
    c.p.logprobs = 20;
    sample_once(&c, l, N, &r);
    assert_int_equal(sampler_logprobs(l, N, 17, 20, &q), 0);
    assert_int_equal(q.n_top, 20);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(q.top[i].token, r.top[i].token);
        assert_true(q.top[i].logprob == r.top[i].logprob);
    }
    assert_int_equal(sampler_logprobs(l, N, 17, 0, &q), 0);
    assert_int_equal(q.n_top, 0);
    assert_int_equal(sampler_logprobs(s, 3, 0, 50, &q), 0);
    assert_int_equal(q.n_top, 3); /* capped at the vocabulary */
    assert_int_equal(q.rank, 2);
    assert_int_equal(sampler_logprobs(s, 3, 3, 1, &q), -EINVAL);
    assert_int_equal(sampler_logprobs(s, 3, -1, 1, &q), -EINVAL);
    assert_int_equal(sampler_logprobs(s, 3, 0, -1, &q), -EINVAL);
    assert_int_equal(sampler_logprobs(s, 0, 0, 1, &q), -EINVAL);
    ctx_deinit(&c);
    free(l);
}

/* Repetition detection: vLLM's check_sequence_repetition cases. */
static int rep(const int32_t *t, int n, int max_p, int min_p, int count)
{
    struct sampling_params p;
    sampling_params_init(&p);
    p.rep_max_pattern = max_p;
    p.rep_min_pattern = min_p;
    p.rep_min_count = count;
    return sampler_is_repetition(&p, t, n);
}

static void test_repetition_detection(void **state)
{
    (void)state;
    const int32_t a[] = {1, 2, 3, 1, 2, 3, 1, 2, 3};
    assert_true(rep(a, 9, 3, 2, 3));
    assert_false(rep(a, 6, 3, 2, 3)); /* two repeats only */
    const int32_t b[] = {1, 2, 1, 2, 1, 2, 1, 2};
    assert_true(rep(b, 8, 5, 2, 4));
    const int32_t c[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    assert_false(rep(c, 9, 5, 2, 2));
    const int32_t d[] = {1, 2, 3, 1, 2, 3, 1, 2, 4};
    assert_false(rep(d, 9, 3, 2, 3)); /* the tail breaks the pattern */
    assert_false(rep(a, 0, 3, 2, 2));
    assert_false(rep(b, 8, 0, 0, 0)); /* off */
    assert_false(rep(b, 8, 5, 2, 1)); /* min_count < 2 */
    const int32_t e[] = {1, 2, 3, 4, 5, 6, 5, 6, 5, 6};
    assert_true(rep(e, 10, 3, 2, 3));
    int32_t f[40];
    for (int i = 0; i < 40; i++) {
        f[i] = 1 + i % 8;
    }
    assert_true(rep(f, 40, 10, 2, 3));
    const int32_t g[] = {10, 20, 10, 20, 10, 20};
    assert_false(rep(g, 6, 5, 3, 3)); /* min_pattern_size 3 skips the 2-token pattern */
    assert_false(rep(g, 6, 5, 2, 5));
    assert_true(rep(g, 6, 5, 0, 3)); /* min 0 counts as 1 (then 2 matches) */
    const int32_t h[] = {7, 7, 7};
    assert_true(rep(h, 3, 4, 0, 3));
    assert_false(rep(h, 3, 4, 2, 3));
}

static void test_min_tokens_bans_eos(void **state)
{
    (void)state;
    float l[4] = {10.0f, 0.0f, 9.0f, 1.0f}; /* eos 0 best, stop token 2 next */
    int32_t stops[] = {2};
    struct sampling_params p;
    sampling_params_init(&p);
    p.temperature = 0.0f;
    p.min_tokens = 2;
    p.stop_token_ids = stops;
    p.n_stop_token_ids = 1;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    struct sample_result r;
    assert_int_equal(sample_once(&c, l, 4, &r), 3);
    assert_int_equal(sampler_accept(&c.st, 3), 0);
    assert_false(sampler_is_stop_token(&c.p, &c.st, 0));
    assert_int_equal(sample_once(&c, l, 4, &r), 3);
    assert_int_equal(sampler_accept(&c.st, 3), 0);
    assert_int_equal(sample_once(&c, l, 4, &r), 0); /* n_generated 2 ≥ min_tokens */
    assert_int_equal(sampler_accept(&c.st, 0), 0);
    assert_true(sampler_is_stop_token(&c.p, &c.st, 0));
    assert_true(sampler_is_stop_token(&c.p, &c.st, 2));
    assert_false(sampler_is_stop_token(&c.p, &c.st, 3));
    ctx_deinit(&c);

    /* ignore_eos: eos is neither banned nor a stop; stop_token_ids still are */
    p.ignore_eos = 1;
    ctx_init(&c, &p, NULL, 0);
    assert_int_equal(sample_once(&c, l, 4, &r), 0);
    assert_int_equal(sampler_accept(&c.st, 0), 0);
    assert_int_equal(sampler_accept(&c.st, 0), 0);
    assert_false(sampler_is_stop_token(&c.p, &c.st, 0));
    assert_true(sampler_is_stop_token(&c.p, &c.st, 2));
    ctx_deinit(&c);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct sampling_params p;
    sampling_params_init(&p);
    struct sampler_state st;
    int32_t bad[] = {-5};
    p.stop_token_ids = bad;
    p.n_stop_token_ids = 1;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), -EINVAL);
    p.n_stop_token_ids = 0;
    assert_int_equal(sampler_state_init(&st, &p, NULL, 3, NULL, 0), -EINVAL);
    assert_int_equal(sampler_state_init(&st, &p, NULL, 0, NULL, 0), 0);
    float l[2] = {-INFINITY, -INFINITY};
    struct sample_result r;
    assert_int_equal(sampler_sample(&p, &st, NULL, l, 2, &r), -EINVAL);
    assert_int_equal(sampler_sample(&p, &st, NULL, l, 0, &r), -EINVAL);
    float ok[2] = {0.0f, 1.0f};
    assert_int_equal(sampler_sample(&p, &st, NULL, ok, 2, &r), 0); /* NULL scratch */
    assert_true(r.token == 0 || r.token == 1);
    /* unseeded states differ */
    struct sampler_state st2;
    assert_int_equal(sampler_state_init(&st2, &p, NULL, 0, NULL, 0), 0);
    assert_true(memcmp(st.rng, st2.rng, sizeof(st.rng)) != 0);
    sampler_state_deinit(&st2);
    sampler_state_deinit(&st);
}

static void test_many_output_tokens(void **state)
{
    (void)state;
    struct sampling_params p;
    sampling_params_init(&p);
    p.frequency_penalty = 0.1f;
    struct ctx c;
    ctx_init(&c, &p, NULL, 0);
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(sampler_accept(&c.st, i % 700), 0);
    }
    assert_int_equal(c.st.output.len, 700);
    assert_int_equal(c.st.n_generated, 5000);
    float l[800] = {0};
    struct sample_result r;
    c.p.temperature = 0.0f;
    assert_int_equal(sample_once(&c, l, 800, &r), 700); /* first unpenalised token */
    ctx_deinit(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_argmax),
        cmocka_unit_test(test_greedy_does_not_touch_rng),
        cmocka_unit_test(test_candidate_sets),
        cmocka_unit_test(test_top_p_close_logits),
        cmocka_unit_test(test_top_p_large_vocab),
        cmocka_unit_test(test_penalties_arithmetic),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_allowed_token_ids),
        cmocka_unit_test(test_bad_words),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_distribution_chi_square),
        cmocka_unit_test(test_logprobs_consistent),
        cmocka_unit_test(test_min_tokens_bans_eos),
        cmocka_unit_test(test_repetition_detection),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_many_output_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
