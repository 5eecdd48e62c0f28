/* Unit tests for kc_ops: RMSNorm, RoPE (NORM and NeoX, partial n_rot), SwiGLU, softmax, add,
 * embedding rows, and paged attention (GQA/MHA, f32/f16 KV, several sequences, scattered block
 * tables) against double-precision references at every ISA level this CPU has. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_cpu.h"
#include "kernels/cpu/kc_ops.h"
#include "kernels/cpu/kc_pool.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void test_rmsnorm_swiglu_softmax_add(void **state)
{
    (void)state;
    float x[37], w[37], y[37], g[37], u[37];
    for (int i = 0; i < 37; i++) {
        x[i] = frand() * 4.0f;
        w[i] = 1.0f + frand() * 0.5f;
        g[i] = frand() * 6.0f;
        u[i] = frand();
    }
    kc_rmsnorm(x, w, y, 37, 1e-5f);
    double ss = 0.0;
    for (int i = 0; i < 37; i++) {
        ss += (double)x[i] * x[i];
    }
    double sc = 1.0 / sqrt(ss / 37 + 1e-5);
    for (int i = 0; i < 37; i++) {
        assert_true(fabs(y[i] - x[i] * sc * w[i]) < 1e-5 * (1 + fabs(x[i] * sc * w[i])));
    }
    kc_rmsnorm(x, NULL, y, 37, 1e-5f);
    assert_true(fabs(y[3] - x[3] * sc) < 1e-5);
    kc_swiglu(g, u, y, 37);
    for (int i = 0; i < 37; i++) {
        double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        assert_true(fabs(y[i] - want) < 1e-5 * (1 + fabs(want)));
    }
    float s[5] = {1000.0f, 1001.0f, -5.0f, 1000.5f, -INFINITY};
    kc_softmax(s, 5);
    double e0 = exp(-1.0), e3 = exp(-0.5), tot = e0 + 1.0 + e3;
    assert_true(fabs(s[0] - e0 / tot) < 1e-6);
    assert_true(fabs(s[1] - 1.0 / tot) < 1e-6);
    assert_true(s[4] == 0.0f);
    memcpy(y, x, sizeof(x));
    kc_add(y, w, 37);
    assert_true(y[36] == x[36] + w[36]);
}

static void test_rope(void **state)
{
    (void)state;
    const int hd = 24, heads = 3;
    for (int neox = 0; neox < 2; neox++) {
        for (int n_rot = 8; n_rot <= hd; n_rot += 16) { /* partial (8) and full (24) */
            for (int pos = 0; pos < 200; pos += 37) {
                float x[72], orig[72], cs[24];
                for (int i = 0; i < heads * hd; i++) {
                    x[i] = orig[i] = frand();
                }
                kc_rope_cache(cs, n_rot, pos, 10000.0f);
                kc_rope_apply(x, heads, hd, n_rot, cs, neox);
                for (int h = 0; h < heads; h++) {
                    const float *o = orig + h * hd;
                    const float *r = x + h * hd;
                    for (int i = 0; i < n_rot / 2; i++) {
                        double th = pos * pow(10000.0, -2.0 * i / n_rot);
                        int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
                        double a = o[i0] * cos(th) - o[i1] * sin(th);
                        double b = o[i0] * sin(th) + o[i1] * cos(th);
                        assert_true(fabs(r[i0] - a) < 2e-5);
                        assert_true(fabs(r[i1] - b) < 2e-5);
                    }
                    for (int i = n_rot; i < hd; i++) {
                        assert_true(r[i] == o[i]); /* beyond n_rot: unchanged */
                    }
                }
            }
        }
    }
}

/* ggml's YaRN in double, written from the formulas (not from kc_rope_cache_yarn): corr_dim(b) =
 * n_rot ln(n_ctx_orig / (2 pi b)) / (2 ln base), the ramp between floor(corr_dim(beta_fast))
 * and ceil(corr_dim(beta_slow)), the mix of the interpolated and extrapolated angle, and the
 * magnitude attn_factor (1 + 0.1 ln(1 / freq_scale)). */
static double yarn_corr_dim_ref(int n_rot, int n_ctx_orig, double beta, double base)
{
    return n_rot * log(n_ctx_orig / (2.0 * M_PI * beta)) / (2.0 * log(base));
}

static void yarn_ref(double *cs, int n_rot, int pos, double base, double freq_scale,
                     const float *ff, double ext, double attn, int n_ctx_orig)
{
    const double lo = fmax(0.0, floor(yarn_corr_dim_ref(n_rot, n_ctx_orig, 32.0, base)));
    const double hi = fmin(n_rot - 1, ceil(yarn_corr_dim_ref(n_rot, n_ctx_orig, 1.0, base)));
    const double ms = ext != 0.0 ? attn * (1.0 + 0.1 * log(1.0 / freq_scale)) : attn;
    for (int i = 0; i < n_rot / 2; i++) {
        const double extrap = pos * pow(base, -2.0 * i / n_rot) / (ff ? ff[i] : 1.0);
        const double interp = freq_scale * extrap;
        const double y = (i - lo) / fmax(0.001, hi - lo);
        const double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * ext;
        const double th = interp * (1.0 - mix) + extrap * mix;
        cs[2 * i] = cos(th) * ms;
        cs[2 * i + 1] = sin(th) * ms;
    }
}

/*
 * kc_rope_cache_yarn against yarn_ref. Within 1e-6 where the angles are small (positions up to
 * 16, n_rot up to 64); elsewhere within 1e-6 plus the float rounding of ggml's angle recurrence
 * (theta *= theta_scale: i + 1 roundings, plus the divisor, the mix and the magnitude), which no
 * YaRN arithmetic can remove. ext_factor 0 gives kc_rope_cache_ext's cache bit for bit.
 */
static void test_rope_yarn(void **state)
{
    (void)state;
    const int n_rots[] = {32, 64, 128, 6};
    const double bases[] = {10000.0, 1000000.0};
    const int origs[] = {4096, 32768, 64};
    const float scales[] = {0.25f, 0.125f, 1.0f / 3.0f};
    const int poss[] = {0, 1, 2, 3, 5, 9, 16, 100, 4095, 65535};
    float ff[64];
    for (int i = 0; i < 64; i++) {
        ff[i] = 1.0f + (float)(i % 5) * 0.75f;
    }
    double worst_small = 0.0, worst_excess = 0.0;
    for (size_t a = 0; a < sizeof(n_rots) / sizeof(n_rots[0]); a++) {
        for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
            for (size_t o = 0; o < sizeof(origs) / sizeof(origs[0]); o++) {
                const int n_rot = n_rots[a];
                const float base = (float)bases[b];
                float dims[2];
                kc_rope_yarn_corr_dims(n_rot, origs[o], base, 32.0f, 1.0f, dims);
                assert_true(dims[0] ==
                            fmax(0.0, floor(yarn_corr_dim_ref(n_rot, origs[o], 32.0, bases[b]))));
                assert_true(dims[1] == fmin(n_rot - 1, ceil(yarn_corr_dim_ref(n_rot, origs[o], 1.0,
                                                                              bases[b]))));
                for (int v = 0; v < 6; v++) {
                    const float fs = scales[v % 3];
                    const float *f = v >= 3 ? ff : NULL;
                    const float attn = v % 2 ? 1.0f : 0.875f;
                    for (size_t p = 0; p < sizeof(poss) / sizeof(poss[0]); p++) {
                        const int pos = poss[p];
                        float cs[128], plain[128];
                        double want[128];
                        kc_rope_cache_yarn(cs, n_rot, pos, base, fs, f, 1.0f, attn, dims);
                        yarn_ref(want, n_rot, pos, bases[b], fs, f, 1.0, attn, origs[o]);
                        for (int i = 0; i < n_rot; i++) {
                            const int pair = i / 2;
                            const double d = fabs(cs[i] - want[i]);
                            const double th =
                                pos * pow(bases[b], -2.0 * pair / n_rot) / (f ? f[pair] : 1.0);
                            const double recur = 1.2e-7 * (pair + 4) * th * 1.2;
                            if (pos <= 16 && n_rot <= 64) {
                                worst_small = d > worst_small ? d : worst_small;
                            }
                            worst_excess = d - recur > worst_excess ? d - recur : worst_excess;
                        }
                        /* ext_factor 0 is the plain cache, bit for bit (attn_factor 1) */
                        kc_rope_cache_yarn(cs, n_rot, pos, base, fs, f, 0.0f, 1.0f, dims);
                        kc_rope_cache_ext(plain, n_rot, pos, base, fs, f);
                        assert_memory_equal(cs, plain, sizeof(float) * (size_t)n_rot);
                        kc_rope_cache_yarn(cs, n_rot, pos, base, 1.0f, NULL, 0.0f, 1.0f, dims);
                        kc_rope_cache(plain, n_rot, pos, base);
                        assert_memory_equal(cs, plain, sizeof(float) * (size_t)n_rot);
                    }
                }
            }
        }
    }
    print_message("yarn: max |cache - reference| %.3g (small angles), beyond the recurrence "
                  "bound %.3g\n",
                  worst_small, worst_excess);
    assert_true(worst_small < 1e-6);
    assert_true(worst_excess < 1e-6);
}

/* SwiGLU at every ISA level over silu's whole range (both signs, the exp's underflow, zeros,
 * infinities) against double, and in place. */
static void test_swiglu_isa(void **state)
{
    (void)state;
    enum { N = 203 };
    float g[N], u[N], y[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)(i - 101) * 0.9f; /* -90.9 .. 90.9 */
        u[i] = 0.5f + frand();
    }
    g[0] = -INFINITY;
    g[1] = INFINITY;
    g[2] = -0.0f;
    kc_isa best = kc_isa_best();
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        kc_swiglu(g, u, y, N);
        for (int i = 1; i < N; i++) {
            const double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            if (isinf(want) ? y[i] != want : !(fabs(y[i] - want) <= 2e-6 * (1.0 + fabs(want)))) {
                fail_msg("isa %s swiglu(%g): %g vs %g", kc_isa_name((kc_isa)isa), (double)g[i],
                         (double)y[i], want);
            }
        }
        assert_true(isnan(y[0])); /* -inf / (1 + inf), as the scalar formula gives */
        float in[N];
        memcpy(in, g, sizeof(in));
        kc_swiglu(in, u, in, N);
        assert_memory_equal(in + 1, y + 1, sizeof(float) * (N - 1));
    }
    assert_int_equal(kc_isa_set(best), 0);
}

/* GeGLU and soft-capping against double evaluations of their formulas. */
static void test_geglu_softcap(void **state)
{
    (void)state;
    enum { N = 257 };
    float g[N], u[N], y[N], c[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)i * 0.08f - 10.24f; /* -10.24 .. 10.24 */
        u[i] = frand();
        c[i] = g[i] * 7.0f;
    }
    kc_geglu(g, u, y, N);
    kc_softcap(c, N, 30.0f);
    for (int i = 0; i < N; i++) {
        const double x = g[i];
        const double gelu = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        assert_true(fabs(y[i] - gelu * u[i]) <= 2e-6 * (1.0 + fabs(gelu * u[i])));
        const double cap = 30.0 * tanh((double)g[i] * 7.0 / 30.0);
        assert_true(fabs(c[i] - cap) <= 4e-6 * (1.0 + fabs(cap)));
        assert_true(fabsf(c[i]) <= 30.0f);
    }
    kc_geglu(g, u, g, N); /* in place */
    assert_memory_equal(g, y, sizeof(y));
}

static void test_embed_row(void **state)
{
    (void)state;
    float rows[3][64], out[64];
    td_block_q8_0 q[3][2];
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 64; i++) {
            rows[r][i] = frand();
        }
        kc_quantize_row_q8_0(rows[r], q[r], 64);
    }
    assert_int_equal(kc_embed_row(TD_F32, rows, 64, 2, out), 0);
    assert_memory_equal(out, rows[2], sizeof(out));
    assert_int_equal(kc_embed_row(TD_Q8_0, q, 64, 1, out), 0);
    for (int i = 0; i < 64; i++) {
        assert_true(fabsf(out[i] - rows[1][i]) < 0.01f);
    }
    assert_int_equal(kc_embed_row(TD_Q8_0, q, 63, 1, out), -EINVAL);
    assert_int_equal(kc_embed_row((tdtype)99, q, 64, 1, out), -EINVAL);
}

/* Attention over a random paged cache vs a dense double reference; window > 0 slides (the
 * block-table entries wholly before every query's window are poisoned: reading one faults),
 * softcap > 0 caps the scores. */
static void check_attention_ex(kc_pool *pool, bool f16, int n_head, int n_head_kv, int hd, int bs,
                               int window, float softcap)
{
    enum { NSEQ = 3, NB = 24 };
    const int32_t start[NSEQ] = {0, 9, 3}, n_new[NSEQ] = {7, 1, 17};
    int32_t tables[NSEQ][8];
    const size_t kv_elems = (size_t)NB * n_head_kv * bs * hd;
    float *kf = malloc(kv_elems * sizeof(float)), *vf = malloc(kv_elems * sizeof(float));
    uint16_t *kh = malloc(kv_elems * 2), *vh = malloc(kv_elems * 2);
    assert_true(kf && vf && kh && vh);
    for (size_t i = 0; i < kv_elems; i++) {
        kf[i] = frand();
        vf[i] = frand();
        kh[i] = kc_f32_to_f16(kf[i]);
        vh[i] = kc_f32_to_f16(vf[i]);
        if (f16) { /* reference reads what the cache holds */
            kf[i] = kc_f16_to_f32(kh[i]);
            vf[i] = kc_f16_to_f32(vh[i]);
        }
    }
    int next = 1;
    for (int s = 0; s < NSEQ; s++) {
        for (int b = 0; b < 8; b++) {
            tables[s][b] = (next * 7) % NB; /* scattered, distinct while next < NB */
            next++;
            if (window > 0 && (b + 1) * bs <= start[s] - window + 1) {
                tables[s][b] = INT32_MIN / 2;
            }
        }
    }
    const int qd = n_head * hd;
    int total = 0;
    for (int s = 0; s < NSEQ; s++) {
        total += n_new[s];
    }
    float *q = malloc(sizeof(float) * (size_t)total * qd);
    float *out = malloc(sizeof(float) * (size_t)total * qd);
    assert_true(q && out);
    for (int i = 0; i < total * qd; i++) {
        q[i] = frand() * 2.0f;
    }
    kc_attn_seq seqs[NSEQ];
    int off = 0;
    for (int s = 0; s < NSEQ; s++) {
        seqs[s] = (kc_attn_seq){.n_new = n_new[s],
                                .start_pos = start[s],
                                .block_table = tables[s],
                                .q = q + (size_t)off * qd,
                                .out = out + (size_t)off * qd};
        off += n_new[s];
    }
    kc_paged_kv kv = {.k = f16 ? (const void *)kh : kf,
                      .v = f16 ? (const void *)vh : vf,
                      .f16 = f16,
                      .block_size = bs,
                      .n_head_kv = n_head_kv,
                      .head_dim = hd};
    const float scale = 1.0f / sqrtf((float)hd);
    const kc_attn_params ap = {.scale = scale, .softcap = softcap, .window = window};
    assert_int_equal(kc_attention_ex(pool, &kv, n_head, seqs, NSEQ, qd, qd, &ap), 0);
    double sc[64];
    off = 0;
    for (int s = 0; s < NSEQ; s++) {
        for (int i = 0; i < n_new[s]; i++, off++) {
            const int pos = start[s] + i;
            for (int h = 0; h < n_head; h++) {
                const int hk = h / (n_head / n_head_kv);
                const float *qh = q + (size_t)off * qd + h * hd;
                double mx = -1e300, sum = 0.0;
                const int j0 = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
                for (int j = j0; j <= pos; j++) {
                    size_t base = (((size_t)tables[s][j / bs] * n_head_kv + hk) * bs + j % bs) * hd;
                    double d = 0.0;
                    for (int e = 0; e < hd; e++) {
                        d += (double)qh[e] * kf[base + e];
                    }
                    sc[j] = d * scale;
                    if (softcap > 0.0f) {
                        sc[j] = softcap * tanh(sc[j] / softcap);
                    }
                    mx = fmax(mx, sc[j]);
                }
                for (int j = j0; j <= pos; j++) {
                    sc[j] = exp(sc[j] - mx);
                    sum += sc[j];
                }
                for (int e = 0; e < hd; e++) {
                    double a = 0.0;
                    for (int j = j0; j <= pos; j++) {
                        size_t base =
                            (((size_t)tables[s][j / bs] * n_head_kv + hk) * bs + j % bs) * hd;
                        a += sc[j] * vf[base + e];
                    }
                    double got = out[(size_t)off * qd + h * hd + e];
                    if (fabs(got - a / sum) > 2e-5) {
                        fail_msg("isa %s attention (window %d, softcap %g) s %d tok %d head %d "
                                 "dim %d: %g vs %g",
                                 kc_isa_name(kc_isa_active()), window, (double)softcap, s, i, h, e,
                                 got, a / sum);
                    }
                }
            }
        }
    }
    free(kf);
    free(vf);
    free(kh);
    free(vh);
    free(q);
    free(out);
}

static void check_attention(kc_pool *pool, bool f16, int n_head, int n_head_kv, int hd, int bs)
{
    check_attention_ex(pool, f16, n_head, n_head_kv, hd, bs, 0, 0.0f);
}

static void test_attention(void **state)
{
    (void)state;
    kc_pool *pool = kc_pool_new(2, false);
    assert_non_null(pool);
    kc_isa best = kc_isa_best();
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        for (int f16 = 0; f16 < 2; f16++) {
            check_attention(pool, f16, 4, 2, 16, 4);  /* GQA */
            check_attention(NULL, f16, 3, 3, 20, 3);  /* MHA, odd head_dim and block */
            check_attention(pool, f16, 8, 1, 64, 16); /* MQA */
            /* sliding windows starting inside blocks, across them, and wider than the
             * sequence; soft-capping (scores near the cap: q scaled up) */
            check_attention_ex(pool, f16, 4, 2, 16, 4, 5, 0.0f);
            check_attention_ex(NULL, f16, 3, 3, 20, 3, 1, 0.0f);
            check_attention_ex(pool, f16, 8, 1, 64, 16, 7, 0.0f);
            check_attention_ex(pool, f16, 4, 2, 16, 4, 64, 0.0f);
            check_attention_ex(pool, f16, 4, 2, 16, 4, 0, 1.5f);
            check_attention_ex(pool, f16, 4, 2, 32, 8, 6, 0.7f);
        }
    }
    assert_int_equal(kc_isa_set(best), 0);
    kc_paged_kv bad = {.block_size = 4, .n_head_kv = 3, .head_dim = 16};
    kc_attn_seq none = {0};
    assert_int_equal(kc_attention(NULL, &bad, 4, &none, 0, 64, 64, 1.0f), -EINVAL);
    bad.n_head_kv = 2;
    bad.head_dim = KC_ATTN_MAX_HEAD_DIM + 1;
    assert_int_equal(kc_attention(NULL, &bad, 4, &none, 0, 64, 64, 1.0f), -EINVAL);
    bad.head_dim = 16;
    kc_attn_params neg = {.scale = 1.0f, .window = -1};
    assert_int_equal(kc_attention_ex(NULL, &bad, 4, &none, 0, 64, 64, &neg), -EINVAL);
    neg = (kc_attn_params){.scale = 1.0f, .softcap = -1.0f};
    assert_int_equal(kc_attention_ex(NULL, &bad, 4, &none, 0, 64, 64, &neg), -EINVAL);
    kc_pool_free(pool);
}

/* One sequence's attention computed for all its n tokens at once (full tiles) and one token at
 * a time (a decode step: the tile holds one GQA group) must agree bit for bit at every ISA level:
 * the tile kernels lay their lanes out differently for few and many pairs. */
static void check_attention_tiles(bool f16, int n_head, int n_head_kv, int hd, int bs, int window,
                                  float softcap)
{
    enum { N = 40, NB = 16 };
    int32_t table[NB];
    const size_t kv_elems = (size_t)NB * n_head_kv * bs * hd;
    float *kf = malloc(kv_elems * sizeof(float)), *vf = malloc(kv_elems * sizeof(float));
    uint16_t *kh = malloc(kv_elems * 2), *vh = malloc(kv_elems * 2);
    const int qd = n_head * hd;
    float *q = malloc(sizeof(float) * N * qd);
    float *all = malloc(sizeof(float) * N * qd), *one = malloc(sizeof(float) * N * qd);
    assert_true(kf && vf && kh && vh && q && all && one);
    for (size_t i = 0; i < kv_elems; i++) {
        kf[i] = frand();
        vf[i] = frand();
        kh[i] = kc_f32_to_f16(kf[i]);
        vh[i] = kc_f32_to_f16(vf[i]);
    }
    for (int i = 0; i < N * qd; i++) {
        q[i] = frand() * 3.0f;
    }
    for (int b = 0; b < NB; b++) {
        table[b] = (b * 5 + 3) % NB;
    }
    kc_paged_kv kv = {.k = f16 ? (const void *)kh : kf,
                      .v = f16 ? (const void *)vh : vf,
                      .f16 = f16,
                      .block_size = bs,
                      .n_head_kv = n_head_kv,
                      .head_dim = hd};
    const kc_attn_params ap = {
        .scale = 1.0f / sqrtf((float)hd), .softcap = softcap, .window = window};
    kc_attn_seq s = {.n_new = N, .start_pos = 0, .block_table = table, .q = q, .out = all};
    assert_int_equal(kc_attention_ex(NULL, &kv, n_head, &s, 1, qd, qd, &ap), 0);
    for (int i = 0; i < N; i++) {
        s = (kc_attn_seq){.n_new = 1,
                          .start_pos = i,
                          .block_table = table,
                          .q = q + (size_t)i * qd,
                          .out = one + (size_t)i * qd};
        assert_int_equal(kc_attention_ex(NULL, &kv, n_head, &s, 1, qd, qd, &ap), 0);
    }
    for (int i = 0; i < N * qd; i++) {
        uint32_t ba, bo; /* bit for bit: NaN payloads and signed zeros included */
        memcpy(&ba, &all[i], sizeof ba);
        memcpy(&bo, &one[i], sizeof bo);
        if (ba != bo) {
            fail_msg("isa %s heads %d/%d hd %d window %d softcap %g: token %d elem %d: %.9g "
                     "at once, %.9g alone",
                     kc_isa_name(kc_isa_active()), n_head, n_head_kv, hd, window, (double)softcap,
                     i / qd, i % qd, (double)all[i], (double)one[i]);
        }
    }
    free(kf);
    free(vf);
    free(kh);
    free(vh);
    free(q);
    free(all);
    free(one);
}

static void test_attention_tiles(void **state)
{
    (void)state;
    const kc_isa best = kc_isa_best();
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        for (int f16 = 0; f16 < 2; f16++) {
            check_attention_tiles(f16, 8, 4, 64, 16, 0, 0.0f);  /* G = 2 */
            check_attention_tiles(f16, 16, 4, 64, 16, 0, 0.0f); /* G = 4 */
            check_attention_tiles(f16, 8, 1, 32, 8, 0, 0.0f);   /* G = 8 */
            check_attention_tiles(f16, 12, 1, 16, 4, 0, 0.0f);  /* G = 12: tiles split groups */
            check_attention_tiles(f16, 3, 3, 20, 3, 0, 0.0f);   /* MHA, head_dim tail */
            check_attention_tiles(f16, 4, 2, 40, 16, 9, 0.0f);  /* window inside blocks */
            check_attention_tiles(f16, 4, 2, 24, 8, 0, 0.7f);   /* soft-capping */
            check_attention_tiles(f16, 2, 1, 256, 32, 0, 0.0f); /* largest tile head_dim */
        }
    }
    assert_int_equal(kc_isa_set(best), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_swiglu_softmax_add),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_yarn),
        cmocka_unit_test(test_geglu_softcap),
        cmocka_unit_test(test_swiglu_isa),
        cmocka_unit_test(test_embed_row),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
