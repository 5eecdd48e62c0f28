/*
 * Sampling pipeline (see sampler.h): penalties, bans, greedy/temperature, min_p, top_k, top_p,
 * a draw, and raw logprobs, over a candidate set that is only as large as each step needs.
 */
#include "engine/sampler/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "lib/clock.h"
#include "lib/common.h"

void sampling_params_init(struct sampling_params *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->logprobs = -1;
}

/* ---- RNG: xoshiro256** seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static void rng_seed(uint64_t s[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        s[i] = splitmix64(&x);
    }
}

double sampler_rng_uniform(struct sampler_state *st)
{
    return (double)(rng_next(st->rng) >> 11) * 0x1.0p-53;
}

/* ---- token → count hash table ---- */

static uint32_t hash_token(int32_t t)
{
    uint32_t h = (uint32_t)t * 0x9E3779B1u;
    return h ^ (h >> 16);
}

static int counts_grow(struct sampler_counts *c)
{
    /* fresh arrays (every key is rehashed); the capacity stays a power of two */
    size_t ncap = c->cap;
    int32_t *nk = tandem_grow(NULL, &ncap, c->cap + 1, sizeof(*nk), 64);
    int32_t *nv = nk ? malloc(ncap * sizeof(*nv)) : NULL;
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -ENOMEM;
    }
    for (size_t i = 0; i < ncap; i++) {
        nk[i] = -1;
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (c->keys[i] < 0) {
            continue;
        }
        size_t j = hash_token(c->keys[i]) & (ncap - 1);
        while (nk[j] >= 0) {
            j = (j + 1) & (ncap - 1);
        }
        nk[j] = c->keys[i];
        nv[j] = c->vals[i];
    }
    free(c->keys);
    free(c->vals);
    c->keys = nk;
    c->vals = nv;
    c->cap = ncap;
    return 0;
}

/* Adds delta to token's count (inserting it). */
static int counts_add(struct sampler_counts *c, int32_t token, int32_t delta)
{
    if ((c->len + 1) * 2 > c->cap) {
        int rc = counts_grow(c);
        if (rc != 0) {
            return rc;
        }
    }
    size_t j = hash_token(token) & (c->cap - 1);
    while (c->keys[j] >= 0 && c->keys[j] != token) {
        j = (j + 1) & (c->cap - 1);
    }
    if (c->keys[j] < 0) {
        c->keys[j] = token;
        c->vals[j] = 0;
        c->len++;
    }
    c->vals[j] += delta;
    return 0;
}

static int32_t counts_get(const struct sampler_counts *c, int32_t token)
{
    if (c->cap == 0) {
        return 0;
    }
    size_t j = hash_token(token) & (c->cap - 1);
    while (c->keys[j] >= 0) {
        if (c->keys[j] == token) {
            return c->vals[j];
        }
        j = (j + 1) & (c->cap - 1);
    }
    return 0;
}

static void counts_free(struct sampler_counts *c)
{
    free(c->keys);
    free(c->vals);
    memset(c, 0, sizeof(*c));
}

/* ---- state ---- */

static int add_stop_id(struct sampler_state *st, int32_t id)
{
    if (id < 0) {
        return -EINVAL;
    }
    for (size_t i = 0; i < st->n_stop_ids; i++) {
        if (st->stop_ids[i] == id) {
            return 0;
        }
    }
    if (st->n_stop_ids >= SAMPLER_MAX_STOP_IDS) {
        return -EINVAL;
    }
    st->stop_ids[st->n_stop_ids++] = id;
    return 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The state's copy of params' bad_words, and the ring of recent output tokens their prefixes
 * are matched against (as long as the longest prefix). */
static int bad_words_init(struct sampler_state *st, const struct sampling_params *params)
{
    if (!params->bad_words || !params->bad_words_lens) {
        return -EINVAL;
    }
    size_t total = 0, longest = 0;
    for (size_t i = 0; i < params->n_bad_words; i++) {
        const int32_t len = params->bad_words_lens[i];
        if (len < 1 || (size_t)len > SIZE_MAX / sizeof(int32_t) - total) {
            return -EINVAL;
        }
        total += (size_t)len;
        longest = (size_t)len > longest ? (size_t)len : longest;
    }
    st->bad_words = malloc(total * sizeof(*st->bad_words));
    st->bad_words_lens = malloc(params->n_bad_words * sizeof(*st->bad_words_lens));
    st->recent = longest > 1 ? malloc((longest - 1) * sizeof(*st->recent)) : NULL;
    if (!st->bad_words || !st->bad_words_lens || (longest > 1 && !st->recent)) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < total; i++) {
        if (params->bad_words[i] < 0) {
            return -EINVAL;
        }
        st->bad_words[i] = params->bad_words[i];
    }
    memcpy(st->bad_words_lens, params->bad_words_lens,
           params->n_bad_words * sizeof(*st->bad_words_lens));
    st->n_bad_words = params->n_bad_words;
    st->recent_cap = longest > 1 ? longest - 1 : 0;
    return 0;
}

int sampler_state_init(struct sampler_state *st, const struct sampling_params *params,
                       const int32_t *prompt, size_t n_prompt, const int32_t *eos_ids, size_t n_eos)
{
    int rc = -EINVAL;
    memset(st, 0, sizeof(*st));
    if ((n_prompt && !prompt) || (n_eos && !eos_ids) ||
        (params->n_stop_token_ids && !params->stop_token_ids)) {
        return -EINVAL;
    }
    if (params->has_seed) {
        rng_seed(st->rng, params->seed);
    } else {
        uint64_t seed;
        if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed)) {
            seed = (uint64_t)tandem_now_ns() ^ (uint64_t)(uintptr_t)st;
        }
        rng_seed(st->rng, seed);
    }
    if (n_eos > SAMPLER_MAX_STOP_IDS || params->n_stop_token_ids > SAMPLER_MAX_STOP_IDS - n_eos) {
        return -EINVAL;
    }
    st->stop_ids = calloc(n_eos + params->n_stop_token_ids + 1, sizeof(*st->stop_ids));
    if (!st->stop_ids) {
        return -ENOMEM;
    }
    if (!params->ignore_eos) {
        for (size_t i = 0; i < n_eos; i++) {
            if ((rc = add_stop_id(st, eos_ids[i])) != 0) {
                goto err_free;
            }
        }
    }
    st->n_eos = st->n_stop_ids;
    for (size_t i = 0; i < params->n_stop_token_ids; i++) {
        if ((rc = add_stop_id(st, params->stop_token_ids[i])) != 0) {
            goto err_free;
        }
    }
    if (params->n_bias > 0) {
        if (!params->bias_ids || !params->bias_vals) {
            rc = -EINVAL;
            goto err_free;
        }
        st->bias_ids = malloc(params->n_bias * sizeof(*st->bias_ids));
        st->bias_vals = malloc(params->n_bias * sizeof(*st->bias_vals));
        if (!st->bias_ids || !st->bias_vals) {
            rc = -ENOMEM;
            goto err_free;
        }
        for (size_t i = 0; i < params->n_bias; i++) {
            if (params->bias_ids[i] < 0 || !isfinite(params->bias_vals[i])) {
                rc = -EINVAL;
                goto err_free;
            }
            st->bias_ids[i] = params->bias_ids[i];
            st->bias_vals[i] = params->bias_vals[i];
        }
        st->n_bias = params->n_bias;
    }
    if (params->n_allowed > 0) {
        if (!params->allowed_ids) {
            rc = -EINVAL;
            goto err_free;
        }
        st->allowed_ids = malloc(params->n_allowed * sizeof(*st->allowed_ids));
        if (!st->allowed_ids) {
            rc = -ENOMEM;
            goto err_free;
        }
        for (size_t i = 0; i < params->n_allowed; i++) {
            if (params->allowed_ids[i] < 0) {
                rc = -EINVAL;
                goto err_free;
            }
            st->allowed_ids[i] = params->allowed_ids[i];
        }
        qsort(st->allowed_ids, params->n_allowed, sizeof(*st->allowed_ids), cmp_i32);
        size_t n = 0;
        for (size_t i = 0; i < params->n_allowed; i++) {
            if (n == 0 || st->allowed_ids[n - 1] != st->allowed_ids[i]) {
                st->allowed_ids[n++] = st->allowed_ids[i];
            }
        }
        st->n_allowed = n;
    }
    if (params->n_bad_words > 0 && (rc = bad_words_init(st, params)) != 0) {
        goto err_free;
    }
    st->track_output = params->repetition_penalty != 1.0f || params->presence_penalty != 0.0f ||
                       params->frequency_penalty != 0.0f;
    if (params->repetition_penalty != 1.0f) {
        for (size_t i = 0; i < n_prompt; i++) {
            if (prompt[i] < 0) {
                rc = -EINVAL;
                goto err_free;
            }
            if (counts_get(&st->prompt, prompt[i]) == 0 &&
                (rc = counts_add(&st->prompt, prompt[i], 1)) != 0) {
                goto err_free;
            }
        }
    }
    return 0;
err_free:
    sampler_state_deinit(st);
    return rc;
}

void sampler_state_deinit(struct sampler_state *st)
{
    counts_free(&st->output);
    counts_free(&st->prompt);
    free(st->stop_ids);
    st->stop_ids = NULL;
    st->n_stop_ids = 0;
    free(st->bias_ids);
    free(st->bias_vals);
    st->bias_ids = NULL;
    st->bias_vals = NULL;
    st->n_bias = 0;
    free(st->allowed_ids);
    st->allowed_ids = NULL;
    st->n_allowed = 0;
    free(st->bad_words);
    free(st->bad_words_lens);
    free(st->recent);
    st->bad_words = NULL;
    st->bad_words_lens = NULL;
    st->recent = NULL;
    st->n_bad_words = 0;
    st->recent_cap = 0;
}

int sampler_accept(struct sampler_state *st, int32_t token)
{
    if (st->track_output && token >= 0) {
        int rc = counts_add(&st->output, token, 1);
        if (rc != 0) {
            return rc;
        }
    }
    if (st->recent_cap > 0) {
        st->recent[(size_t)st->n_generated % st->recent_cap] = token;
    }
    st->n_generated++;
    return 0;
}

int sampler_is_stop_token(const struct sampling_params *params, const struct sampler_state *st,
                          int32_t token)
{
    if (st->n_generated < params->min_tokens) {
        return 0;
    }
    for (size_t i = 0; i < st->n_stop_ids; i++) {
        if (st->stop_ids[i] == token) {
            return 1;
        }
    }
    return 0;
}

/* ---- scratch ---- */

void sampler_scratch_init(struct sampler_scratch *s)
{
    memset(s, 0, sizeof(*s));
}

void sampler_scratch_deinit(struct sampler_scratch *s)
{
    free(s->idx);
    free(s->val);
    free(s->raw);
    memset(s, 0, sizeof(*s));
}

static int scratch_reserve(struct sampler_scratch *s, size_t n)
{
    if (s->cap >= n) {
        return 0;
    }
    int32_t *idx = malloc(n * sizeof(*idx));
    float *val = malloc(n * sizeof(*val));
    float *raw = malloc(n * sizeof(*raw));
    if (!idx || !val || !raw) {
        free(idx);
        free(val);
        free(raw);
        return -ENOMEM;
    }
    free(s->idx);
    free(s->val);
    free(s->raw);
    s->idx = idx;
    s->val = val;
    s->raw = raw;
    s->cap = n;
    return 0;
}

/* ---- candidate selection helpers ---- */

/* "a ranks before b": higher logit first, lower token id on ties (deterministic). */
static int ranks_before(float va, int32_t ia, float vb, int32_t ib)
{
    return va > vb || (va == vb && ia < ib);
}

static void cand_swap(int32_t *idx, float *val, size_t a, size_t b)
{
    int32_t ti = idx[a];
    idx[a] = idx[b];
    idx[b] = ti;
    float tv = val[a];
    val[a] = val[b];
    val[b] = tv;
}

/* Sift-down in a heap over [0, n) whose root is the worst candidate (by ranks_before). */
static void worst_heap_sift(int32_t *idx, float *val, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, worst = i;
        if (l < n && ranks_before(val[worst], idx[worst], val[l], idx[l])) {
            worst = l;
        }
        if (l + 1 < n && ranks_before(val[worst], idx[worst], val[l + 1], idx[l + 1])) {
            worst = l + 1;
        }
        if (worst == i) {
            return;
        }
        cand_swap(idx, val, i, worst);
        i = worst;
    }
}

/* Small k: the k best kept in a heap at [0, k); one comparison per other candidate. */
static void select_top_k_heap(int32_t *idx, float *val, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;) {
        worst_heap_sift(idx, val, k, i);
    }
    for (size_t i = k; i < n; i++) {
        if (ranks_before(val[i], idx[i], val[0], idx[0])) {
            cand_swap(idx, val, 0, i);
            worst_heap_sift(idx, val, k, 0);
        }
    }
}

/* Partial selection: afterwards the k best candidates are in [0, k) (in no particular order). */
static void select_top_k(int32_t *idx, float *val, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the k-th boundary lies in [lo, hi) */
    uint64_t pick = 0x2545F4914F6CDD1DULL;
    while (hi - lo > 1) {
        pick = pick * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t p = lo + (size_t)((pick >> 33) % (hi - lo));
        cand_swap(idx, val, p, hi - 1);
        float pv = val[hi - 1];
        int32_t pi = idx[hi - 1];
        size_t store = lo;
        for (size_t i = lo; i < hi - 1; i++) {
            if (ranks_before(val[i], idx[i], pv, pi)) {
                cand_swap(idx, val, i, store++);
            }
        }
        cand_swap(idx, val, store, hi - 1);
        if (store == k || store + 1 == k) {
            return;
        }
        if (store > k) {
            hi = store;
        } else {
            lo = store + 1;
        }
    }
}

/*
 * top_p over candidates whose val[] are unnormalised probabilities: moves the smallest set of
 * best candidates whose mass reaches target to [0, k) (in no particular order) and returns k.
 * A token is kept while the mass ranked before it is < top_p (vLLM's rule), i.e. the smallest
 * best-first prefix with mass ≥ target. Quickselect on mass: expected O(n), nothing sorted.
 */
static size_t select_top_p(int32_t *idx, float *val, size_t n, double target)
{
    size_t lo = 0, hi = n; /* [0, lo) kept (mass acc); the boundary k is in (lo, hi] */
    double acc = 0.0;
    uint64_t pick = 0x9E3779B97F4A7C15ULL;
    while (hi - lo > 1) {
        pick = pick * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t p = lo + (size_t)((pick >> 33) % (hi - lo));
        cand_swap(idx, val, p, hi - 1);
        float pv = val[hi - 1];
        int32_t pi = idx[hi - 1];
        size_t store = lo;
        double upper = 0.0; /* mass of the candidates ranked before the pivot */
        for (size_t i = lo; i < hi - 1; i++) {
            if (ranks_before(val[i], idx[i], pv, pi)) {
                upper += val[i];
                cand_swap(idx, val, i, store++);
            }
        }
        cand_swap(idx, val, store, hi - 1);
        if (store > lo && acc + upper >= target) {
            hi = store; /* the boundary is among the better ones */
            continue;
        }
        acc += upper + pv;
        if (acc >= target) {
            return store + 1;
        }
        lo = store + 1;
    }
    return hi > 0 ? hi : 1;
}

#define TOP_P_BINS 1024 /* log-scale probability bins of apply_top_p: 16 per power of two */

/* Bin of an unnormalised probability e in [0, 1]: 0 for e = 1, +1 per 1/16 octave lower. */
static size_t prob_bin(float e)
{
    static const float one = 1.0f;
    uint32_t be, b1;
    memcpy(&be, &e, sizeof(be));
    memcpy(&b1, &one, sizeof(b1));
    uint32_t d = (b1 >> 19) - (be >> 19); /* positive floats order as integers */
    return d < TOP_P_BINS ? d : TOP_P_BINS - 1;
}

/*
 * top_p (see select_top_p) in two steps: the mass of each log-scale bin, the bin where the
 * running mass reaches target; bins before it are kept whole and only the candidates of that
 * bin go through the exact selection. One pass over the candidates plus two compactions.
 */
static size_t apply_top_p(int32_t *idx, float *val, size_t n, double target)
{
    double mass[TOP_P_BINS] = {0};
    for (size_t i = 0; i < n; i++) {
        mass[prob_bin(val[i])] += val[i];
    }
    double acc = 0.0;
    size_t cut = TOP_P_BINS - 1;
    for (size_t b = 0; b < TOP_P_BINS; b++) {
        if (acc + mass[b] >= target) {
            cut = b;
            break;
        }
        acc += mass[b];
    }
    size_t k0 = 0;
    for (size_t i = 0; i < n; i++) {
        if (prob_bin(val[i]) < cut) {
            cand_swap(idx, val, i, k0++);
        }
    }
    size_t k1 = k0;
    for (size_t i = k0; i < n; i++) {
        if (prob_bin(val[i]) == cut) {
            cand_swap(idx, val, i, k1++);
        }
    }
    if (k1 == k0) {
        return k0 > 0 ? k0 : 1; /* rounding: the whole set is kept */
    }
    return k0 + select_top_p(idx + k0, val + k0, k1 - k0, target - acc);
}

/* Raw logprobs: log-sum-exp of the raw logits, the top-N (best first). */
static void raw_logprobs_top(const float *raw, int n_vocab, int n_top, double *lse_out,
                             struct sample_result *out)
{
    float m = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        if (raw[i] > m) {
            m = raw[i];
        }
    }
    double z = 0.0;
    if (isfinite(m)) {
        for (int i = 0; i < n_vocab; i++) {
            z += expf(raw[i] - m);
        }
    }
    double lse = isfinite(m) ? m + log(z) : (double)m;
    *lse_out = lse;
    /* min-heap of size n_top, by ranks_before reversed */
    int32_t hi_idx[SAMPLER_MAX_LOGPROBS];
    float hi_val[SAMPLER_MAX_LOGPROBS];
    int h = 0;
    for (int i = 0; i < n_vocab && n_top > 0; i++) {
        float v = raw[i];
        if (h < n_top) {
            int j = h++;
            hi_idx[j] = i;
            hi_val[j] = v;
            while (j > 0) { /* sift up: parent must be the worse one */
                int p = (j - 1) / 2;
                if (!ranks_before(hi_val[p], hi_idx[p], hi_val[j], hi_idx[j])) {
                    break;
                }
                cand_swap(hi_idx, hi_val, (size_t)p, (size_t)j);
                j = p;
            }
        } else if (ranks_before(v, i, hi_val[0], hi_idx[0])) {
            hi_idx[0] = i;
            hi_val[0] = v;
            int j = 0;
            for (;;) {
                int l = 2 * j + 1, worst = j;
                if (l < h && ranks_before(hi_val[worst], hi_idx[worst], hi_val[l], hi_idx[l])) {
                    worst = l;
                }
                if (l + 1 < h &&
                    ranks_before(hi_val[worst], hi_idx[worst], hi_val[l + 1], hi_idx[l + 1])) {
                    worst = l + 1;
                }
                if (worst == j) {
                    break;
                }
                cand_swap(hi_idx, hi_val, (size_t)j, (size_t)worst);
                j = worst;
            }
        }
    }
    /* sort best-first */
    for (int i = 1; i < h; i++) {
        for (int j = i; j > 0 && ranks_before(hi_val[j], hi_idx[j], hi_val[j - 1], hi_idx[j - 1]);
             j--) {
            cand_swap(hi_idx, hi_val, (size_t)j, (size_t)j - 1);
        }
    }
    out->n_top = h;
    for (int i = 0; i < h; i++) {
        out->top[i].token = hi_idx[i];
        double lp = (double)hi_val[i] - lse;
        out->top[i].logprob =
            isnan(lp) || lp < SAMPLER_LOGPROB_FLOOR ? SAMPLER_LOGPROB_FLOOR : (float)lp;
    }
}

/* out->logprob and out->rank of token among raw[0..n_vocab) (lse: their log-sum-exp). The rank
 * counts the logits >= the token's, as vLLM's batched_count_greater_than does. */
static void token_logprob(const float *raw, int n_vocab, int32_t token, double lse,
                          struct sample_result *out)
{
    float tv = raw[token];
    double lp = (double)tv - lse;
    out->logprob = isnan(lp) || lp < SAMPLER_LOGPROB_FLOOR ? SAMPLER_LOGPROB_FLOOR : (float)lp;
    int rank = 0;
    for (int i = 0; i < n_vocab; i++) {
        rank += raw[i] >= tv;
    }
    out->rank = rank;
}

int sampler_logprobs(const float *raw, int n_vocab, int32_t token, int n_top,
                     struct sample_result *out)
{
    if (n_vocab < 1 || token < 0 || token >= n_vocab || n_top < 0) {
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    n_top = n_top > SAMPLER_MAX_LOGPROBS ? SAMPLER_MAX_LOGPROBS : n_top;
    n_top = n_top > n_vocab ? n_vocab : n_top;
    double lse = 0.0;
    raw_logprobs_top(raw, n_vocab, n_top, &lse, out);
    out->token = token;
    token_logprob(raw, n_vocab, token, lse, out);
    return 0;
}

/* bad_words: bans the last token of every sequence whose other tokens end the output so far
 * (vLLM v1's apply_bad_words; a sequence longer than the output plus one cannot match yet). */
static void apply_bad_words(const struct sampler_state *st, float *logits, int n_vocab)
{
    const int32_t *seq = st->bad_words;
    const size_t n_out = (size_t)st->n_generated;
    for (size_t i = 0; i < st->n_bad_words; seq += st->bad_words_lens[i], i++) {
        const size_t prefix = (size_t)st->bad_words_lens[i] - 1;
        if (prefix > n_out) {
            continue;
        }
        size_t k = 0; /* seq[prefix - 1 - k] against the (k + 1)-th last output token */
        while (k < prefix && st->recent[(n_out - 1 - k) % st->recent_cap] == seq[prefix - 1 - k]) {
            k++;
        }
        if (k == prefix && seq[prefix] < n_vocab) {
            logits[seq[prefix]] = -INFINITY;
        }
    }
}

static void apply_penalties(const struct sampling_params *p, const struct sampler_state *st,
                            float *logits, int n_vocab)
{
    float rep = p->repetition_penalty;
    if (rep != 1.0f) {
        for (size_t i = 0; i < st->prompt.cap; i++) {
            int32_t t = st->prompt.keys[i];
            if (t >= 0 && t < n_vocab) {
                logits[t] = logits[t] > 0 ? logits[t] / rep : logits[t] * rep;
            }
        }
    }
    for (size_t i = 0; i < st->output.cap; i++) {
        int32_t t = st->output.keys[i];
        if (t < 0 || t >= n_vocab) {
            continue;
        }
        int32_t count = st->output.vals[i];
        if (rep != 1.0f && counts_get(&st->prompt, t) == 0) {
            logits[t] = logits[t] > 0 ? logits[t] / rep : logits[t] * rep;
        }
        logits[t] -= p->frequency_penalty * (float)count + p->presence_penalty * (count > 0);
    }
}

int sampler_sample(const struct sampling_params *params, struct sampler_state *st,
                   struct sampler_scratch *scratch, float *logits, int n_vocab,
                   struct sample_result *out)
{
    struct sampler_scratch local;
    int rc = 0;
    if (n_vocab < 1) {
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    if (!scratch) {
        sampler_scratch_init(&local);
        scratch = &local;
    }
    rc = scratch_reserve(scratch, (size_t)n_vocab);
    if (rc != 0) {
        goto out_free;
    }
    int want_lp = params->logprobs >= 0;
    double lse = 0.0;
    if (want_lp) {
        memcpy(scratch->raw, logits, (size_t)n_vocab * sizeof(*logits));
        int n_top =
            params->logprobs > SAMPLER_MAX_LOGPROBS ? SAMPLER_MAX_LOGPROBS : params->logprobs;
        if (n_top > n_vocab) {
            n_top = n_vocab;
        }
        raw_logprobs_top(scratch->raw, n_vocab, n_top, &lse, out);
    }
    if (st->n_allowed > 0) {
        /* allowed_token_ids: every other token out (after the raw logprobs, as in vLLM v1);
         * scratch->val holds the kept logits meanwhile (it has n_vocab entries) */
        size_t kept = 0;
        for (size_t i = 0; i < st->n_allowed && st->allowed_ids[i] < n_vocab; i++) {
            scratch->val[kept++] = logits[st->allowed_ids[i]];
        }
        for (int i = 0; i < n_vocab; i++) {
            logits[i] = -INFINITY;
        }
        for (size_t i = 0; i < kept; i++) {
            logits[st->allowed_ids[i]] = scratch->val[i];
        }
    }
    if (st->n_bad_words > 0) {
        apply_bad_words(st, logits, n_vocab);
    }
    for (size_t i = 0; i < st->n_bias; i++) { /* ids past the vocabulary: the engine refuses
                                                 them at admission; skipped here */
        if (st->bias_ids[i] < n_vocab) {
            logits[st->bias_ids[i]] += st->bias_vals[i];
        }
    }
    apply_penalties(params, st, logits, n_vocab);
    if (st->n_generated < params->min_tokens) {
        for (size_t i = 0; i < st->n_stop_ids; i++) {
            if (st->stop_ids[i] < n_vocab) {
                logits[st->stop_ids[i]] = -INFINITY;
            }
        }
    }
    int32_t token = -1;
    float best = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        if (logits[i] > best) {
            best = logits[i];
            token = i;
        }
    }
    if (token < 0) {
        rc = -EINVAL; /* all -inf or NaN */
        goto out_free;
    }
    float inv_t = 1.0f / params->temperature;
    float m = best * inv_t;
    /* greedy; an infinite max (overflow or +inf logits) leaves nothing else to draw */
    if (params->temperature >= (float)SAMPLER_GREEDY_EPS && isfinite(m)) {
        /* tokens below max - SAMPLER_PRUNE_LOGIT cannot be drawn in practice (see sampler.h) */
        float floor_v = m - SAMPLER_PRUNE_LOGIT;
        if (params->min_p > 0.0f && m + logf(params->min_p) > floor_v) {
            floor_v = m + logf(params->min_p); /* p_i >= min_p * p_max */
        }
        size_t n = 0;
        for (int i = 0; i < n_vocab; i++) {
            float v = logits[i] * inv_t;
            logits[i] = v;
            if (v >= floor_v && v > -INFINITY) {
                scratch->idx[n] = i;
                scratch->val[n] = v;
                n++;
            }
        }
        if (params->top_k > 0 && (size_t)params->top_k < n) {
            if (params->top_k <= 1024) {
                select_top_k_heap(scratch->idx, scratch->val, n, (size_t)params->top_k);
            } else {
                select_top_k(scratch->idx, scratch->val, n, (size_t)params->top_k);
            }
            n = (size_t)params->top_k;
        }
        if (n == 0) {
            rc = -EINVAL; /* unreachable: the argmax is always a candidate */
            goto out_free;
        }
        double z = 0.0;
        for (size_t i = 0; i < n; i++) {
            float e = expf(scratch->val[i] - m); /* probabilities, unnormalised */
            scratch->val[i] = e;
            z += e;
        }
        if (params->top_p < 1.0f) {
            n = apply_top_p(scratch->idx, scratch->val, n, (double)params->top_p * z);
            z = 0.0;
            for (size_t i = 0; i < n; i++) {
                z += scratch->val[i];
            }
        }
        double u = sampler_rng_uniform(st) * z;
        double cum = 0.0;
        token = scratch->idx[n - 1];
        for (size_t i = 0; i < n; i++) {
            cum += scratch->val[i];
            if (u < cum) {
                token = scratch->idx[i];
                break;
            }
        }
    }
    out->token = token;
    if (want_lp) {
        token_logprob(scratch->raw, n_vocab, token, lse, out);
    }
out_free:
    if (scratch == &local) {
        sampler_scratch_deinit(&local);
    }
    return rc;
}

int sampler_is_repetition(const struct sampling_params *params, const int32_t *out, int32_t n)
{
    const int32_t min_len = params->rep_min_pattern > 0 ? params->rep_min_pattern : 1;
    const int32_t count = params->rep_min_count;
    if (params->rep_max_pattern <= 0 || count < 2 || min_len > params->rep_max_pattern) {
        return 0;
    }
    for (int32_t len = min_len; len <= params->rep_max_pattern; len++) {
        if ((int64_t)len * count > n) {
            return 0; /* longer patterns need even more tokens */
        }
        const int32_t *tail = out + n - len;
        int32_t m = 1;
        while (m < count &&
               memcmp(tail - (int64_t)m * len, tail, (size_t)len * sizeof *tail) == 0) {
            m++;
        }
        if (m == count) {
            return 1;
        }
    }
    return 0;
}
