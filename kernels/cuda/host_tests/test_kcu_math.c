/* Host tests of kcu_math.h, the arithmetic the CUDA token-wise and attention kernels run:
 * conversions bit for bit against kc_convert (every f16/bf16 pattern), RoPE angles and rotations
 * against kc_rope_cache/kc_rope_apply and its scaling (linear, Llama 3, YaRN) against
 * kc_rope_cache_ext/kc_rope_cache_yarn, SwiGLU against kc_swiglu, the RMSNorm kernel's algorithm
 * (strided partials, the block tree) against kc_rmsnorm, the tree order against an independent
 * pairwise sum, and the online softmax with split merges against a two-pass softmax. */
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
#include "kernels/cuda/kcu_math.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static float frand(void) /* [-1, 1) */
{
    return (float)((double)rnd32() / 4294967296.0 * 2.0 - 1.0);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static void test_conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        assert_int_equal(bits(kcu_f16_to_f32((uint16_t)h)), bits(kc_f16_to_f32((uint16_t)h)));
        assert_int_equal(bits(kcu_bf16_to_f32((uint16_t)h)), bits(kc_bf16_to_f32((uint16_t)h)));
        /* f32 -> f16/bf16 at every representable value, its neighbours and the midpoints */
        const uint32_t u16 = bits(kc_f16_to_f32((uint16_t)h));
        const uint32_t ub = (uint32_t)h << 16;
        const uint32_t cands[] = {u16,         u16 + 1,      u16 - 1, u16 + 0x1000,
                                  u16 + 0xFFF, u16 + 0x1001, ub,      ub + 0x8000,
                                  ub + 0x7FFF, ub + 0x8001,  ub - 1,  ub + 1};
        for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
            const float f = from_bits(cands[i]);
            assert_int_equal(kcu_f32_to_f16(f), kc_f32_to_f16(f));
            assert_int_equal(kcu_f32_to_bf16(f), kc_f32_to_bf16(f));
        }
    }
    for (int i = 0; i < 4000000; i++) {
        const float f = from_bits(rnd32());
        assert_int_equal(kcu_f32_to_f16(f), kc_f32_to_f16(f));
        assert_int_equal(kcu_f32_to_bf16(f), kc_f32_to_bf16(f));
    }
}

static void test_rope(void **state)
{
    (void)state;
    const int n_rots[] = {2, 6, 32, 64, 128};
    const float bases[] = {10000.0f, 500000.0f, 1000000.0f};
    const int32_t poss[] = {0, 1, 17, 4095, 131071};
    float cs[256];
    for (size_t a = 0; a < sizeof(n_rots) / sizeof(n_rots[0]); a++) {
        for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
            for (size_t c = 0; c < sizeof(poss) / sizeof(poss[0]); c++) {
                const int n_rot = n_rots[a];
                kc_rope_cache(cs, n_rot, poss[c], bases[b]);
                const float ts = kcu_rope_theta_scale(bases[b], n_rot);
                for (int i = 0; i < n_rot / 2; i++) {
                    const float th = kcu_rope_theta(poss[c], ts, i);
                    assert_int_equal(bits(cosf(th)), bits(cs[2 * i]));
                    assert_int_equal(bits(sinf(th)), bits(cs[2 * i + 1]));
                }
                /* rotation of 3 heads of 136 dims, first n_rot rotated, both pair layouts */
                for (int neox = 0; neox < 2; neox++) {
                    enum { HD = 136, NH = 3 };
                    float x[NH * HD], y[NH * HD];
                    for (int i = 0; i < NH * HD; i++) {
                        x[i] = y[i] = frand() * 3.0f;
                    }
                    kc_rope_apply(x, NH, HD, n_rot, cs, neox != 0);
                    for (int h = 0; h < NH; h++) {
                        for (int i = 0; i < n_rot / 2; i++) {
                            int i0, i1;
                            kcu_rope_index(i, n_rot, neox, &i0, &i1);
                            kcu_rope_pair(&y[h * HD + i0], &y[h * HD + i1], cs[2 * i],
                                          cs[2 * i + 1]);
                        }
                    }
                    for (int i = 0; i < NH * HD; i++) {
                        assert_int_equal(bits(x[i]), bits(y[i]));
                    }
                }
                /* scaled: Llama 3 style factors and a linear freq_scale */
                float ff[128];
                for (int i = 0; i < n_rot / 2; i++) {
                    ff[i] = i < n_rot / 8 ? 1.0f : i < n_rot / 4 ? 2.5f + (float)i * 0.1f : 8.0f;
                }
                const float scales[] = {1.0f, 0.25f};
                for (int sc = 0; sc < 2; sc++) {
                    kc_rope_cache_ext(cs, n_rot, poss[c], bases[b], scales[sc], sc ? NULL : ff);
                    for (int i = 0; i < n_rot / 2; i++) {
                        const float th = kcu_rope_yarn(kcu_rope_theta(poss[c], ts, i), scales[sc],
                                                       sc ? NULL : ff, i, 0.0f, 0.0f, 0.001f);
                        assert_int_equal(bits(cosf(th)), bits(cs[2 * i]));
                        assert_int_equal(bits(sinf(th)), bits(cs[2 * i + 1]));
                    }
                }
                /* YaRN: ramps of several widths, clamped at 0 and at n_rot - 1 (original
                 * contexts 4096, 64, 7 and 2^24, where n_rot 2's ramp collapses to lo == hi),
                 * factor 4, 3 and 0.5, with and without the divisors, ext_factor 1 and 0.5,
                 * attn_factor 1 and not */
                const int origs[] = {4096, 64, 7, 1 << 24};
                const float yscales[] = {0.25f, 1.0f / 3.0f, 2.0f};
                for (size_t o = 0; o < sizeof(origs) / sizeof(origs[0]); o++) {
                    for (int v = 0; v < 6; v++) {
                        const float fs = yscales[v % 3];
                        const float ext = v < 3 ? 1.0f : 0.5f;
                        const float attn = v % 2 ? 1.0f : 0.8125f;
                        const float *f = v % 2 ? ff : NULL;
                        float dims[2];
                        kc_rope_yarn_corr_dims(n_rot, origs[o], bases[b], 32.0f, 1.0f, dims);
                        kc_rope_cache_yarn(cs, n_rot, poss[c], bases[b], fs, f, ext, attn, dims);
                        const float ms = kcu_rope_yarn_mscale(attn, fs, ext);
                        const float span = kcu_rope_yarn_span(dims[0], dims[1]);
                        for (int i = 0; i < n_rot / 2; i++) {
                            const float th = kcu_rope_yarn(kcu_rope_theta(poss[c], ts, i), fs, f, i,
                                                           ext, dims[0], span);
                            assert_int_equal(bits(kcu_mul_rn(cosf(th), ms)), bits(cs[2 * i]));
                            assert_int_equal(bits(kcu_mul_rn(sinf(th), ms)), bits(cs[2 * i + 1]));
                        }
                    }
                }
            }
        }
    }
}

static void test_swiglu(void **state)
{
    (void)state;
    enum { N = 4096 };
    static float g[N], u[N], y[N];
    for (int i = 0; i < N; i++) {
        g[i] = frand() * (i < N / 2 ? 8.0f : 120.0f);
        u[i] = frand() * 2.0f;
    }
    /* the scalar level's formula (the AVX2 one takes e^x from a polynomial instead of expf) */
    const kc_isa isa = kc_isa_active();
    assert_int_equal(kc_isa_set(KC_ISA_SCALAR), 0);
    kc_swiglu(g, u, y, N);
    assert_int_equal(kc_isa_set(isa), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(bits(kcu_swiglu_elem(g[i], u[i])), bits(y[i]));
    }
}

/* Pairwise sum, lane 0's view of the xor butterfly, written independently of kcu_math.h. */
static float pairwise32(const float *v)
{
    float a[32];
    memcpy(a, v, sizeof(a));
    for (int off = 16; off > 0; off /= 2) {
        for (int l = 0; l < off; l++) {
            a[l] = a[l] + a[l + off];
        }
    }
    return a[0];
}

static void test_tree_sum(void **state)
{
    (void)state;
    float v[1024];
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 1024; i++) {
            /* magnitudes spread so that the order of the additions shows in the result */
            v[i] = frand() * powf(2.0f, (float)(rnd32() % 40) - 20.0f);
        }
        assert_int_equal(bits(kcu_warp_sum_emul(v)), bits(pairwise32(v)));
        const int n = 32 * (1 + (int)(rnd32() % 32));
        float w[32] = {0};
        double ref = 0.0;
        for (int i = 0; i < n / 32; i++) {
            w[i] = pairwise32(v + 32 * i);
        }
        for (int i = 0; i < n; i++) {
            ref += v[i];
        }
        const float t = kcu_tree_sum(v, n);
        assert_int_equal(bits(t), bits(pairwise32(w)));
        double mag = 0.0;
        for (int i = 0; i < n; i++) {
            mag += fabs((double)v[i]);
        }
        assert_true(fabs(t - ref) <= 1e-6 * mag);
    }
}

/* kcu_rmsnorm's kernel on the host: thread t sums squares of elements t, t + T, ... (T =
 * KCU_NORM_THREADS), the block tree adds the partials, every element is scaled. */
static void rmsnorm_emul(const float *x, const float *w, float *y, int64_t n, float eps)
{
    float part[KCU_NORM_THREADS];
    for (int t = 0; t < KCU_NORM_THREADS; t++) {
        float acc = 0.0f;
        for (int64_t j = t; j < n; j += KCU_NORM_THREADS) {
            acc = kcu_sumsq_step(acc, x[j]);
        }
        part[t] = acc;
    }
    const float scale = kcu_rms_scale(kcu_tree_sum(part, KCU_NORM_THREADS), n, eps);
    for (int64_t j = 0; j < n; j++) {
        y[j] = kcu_rms_apply(x[j], scale, w ? w[j] : 1.0f);
    }
}

static void test_rmsnorm(void **state)
{
    (void)state;
    const int64_t dims[] = {1, 7, 255, 256, 257, 896, 4097, 8192};
    static float x[8192], w[8192], y0[8192], y1[8192];
    for (size_t k = 0; k < sizeof(dims) / sizeof(dims[0]); k++) {
        const int64_t n = dims[k];
        for (int64_t i = 0; i < n; i++) {
            x[i] = frand() * 5.0f;
            w[i] = 1.0f + frand() * 0.5f;
        }
        for (int wi = 0; wi < 2; wi++) {
            kc_rmsnorm(x, wi ? w : NULL, y0, n, 1e-6f);
            rmsnorm_emul(x, wi ? w : NULL, y1, n, 1e-6f);
            for (int64_t i = 0; i < n; i++) {
                assert_true(fabsf(y0[i] - y1[i]) <= 2e-6f * (1.0f + fabsf(y0[i])));
            }
        }
    }
}

/* Online softmax over n scores with values v[n][D] in tiles of random sizes, the keys split in
 * random places into partial states merged in order, against a two-pass softmax in double. */
static void test_online_softmax(void **state)
{
    (void)state;
    enum { D = 5, MAXN = 700, MAXS = 8 };
    static float s[MAXN], v[MAXN][D];
    for (int rep = 0; rep < 300; rep++) {
        const int n = 1 + (int)(rnd32() % MAXN);
        const float spread = rep % 3 == 0 ? 60.0f : 4.0f;
        for (int i = 0; i < n; i++) {
            s[i] = frand() * spread;
            for (int d = 0; d < D; d++) {
                v[i][d] = frand();
            }
        }
        /* split points: n_parts ranges, some possibly empty */
        const int n_parts = 1 + (int)(rnd32() % MAXS);
        int cut[MAXS + 1];
        cut[0] = 0;
        cut[n_parts] = n;
        for (int p = 1; p < n_parts; p++) {
            cut[p] = (int)(rnd32() % (uint32_t)(n + 1));
        }
        for (int p = 1; p < n_parts; p++) { /* sort the inner cuts */
            for (int q = p + 1; q < n_parts; q++) {
                if (cut[q] < cut[p]) {
                    const int tmp = cut[p];
                    cut[p] = cut[q];
                    cut[q] = tmp;
                }
            }
        }
        kcu_os tot = kcu_os_init();
        float acc_tot[D] = {0};
        for (int p = 0; p < n_parts; p++) {
            kcu_os st = kcu_os_init();
            float acc[D] = {0};
            for (int i = cut[p]; i < cut[p + 1];) {
                const int tile = 1 + (int)(rnd32() % 40);
                const int end = i + tile < cut[p + 1] ? i + tile : cut[p + 1];
                float mx = -INFINITY;
                for (int j = i; j < end; j++) {
                    mx = s[j] > mx ? s[j] : mx;
                }
                const float corr = kcu_os_rescale(&st, mx);
                for (int d = 0; d < D; d++) {
                    acc[d] = kcu_mul_rn(acc[d], corr);
                }
                for (int j = i; j < end; j++) {
                    const float pw = kcu_os_weight(s[j], st.m);
                    st.l += pw;
                    for (int d = 0; d < D; d++) {
                        acc[d] = kcu_os_axpy(acc[d], pw, v[j][d]);
                    }
                }
                i = end;
            }
            float ca, cb;
            kcu_os_merge(&tot, st, &ca, &cb);
            for (int d = 0; d < D; d++) {
                acc_tot[d] = kcu_os_merge_acc(acc_tot[d], ca, acc[d], cb);
            }
        }
        double mx = -INFINITY, sum = 0.0, ref[D] = {0};
        for (int i = 0; i < n; i++) {
            mx = s[i] > mx ? s[i] : mx;
        }
        for (int i = 0; i < n; i++) {
            const double e = exp((double)s[i] - mx);
            sum += e;
            for (int d = 0; d < D; d++) {
                ref[d] += e * v[i][d];
            }
        }
        for (int d = 0; d < D; d++) {
            const float out = kcu_os_out(acc_tot[d], tot.l);
            assert_true(fabs(out - ref[d] / sum) < 2e-5);
        }
    }
    /* no keys at all: zero output, merging empties stays empty */
    kcu_os a = kcu_os_init();
    float ca, cb;
    kcu_os_merge(&a, kcu_os_init(), &ca, &cb);
    assert_true(a.m == -INFINITY);
    assert_true(kcu_os_out(0.0f, a.l) == 0.0f);
}

static void test_split_policy(void **state)
{
    (void)state;
    assert_int_equal(kcu_attn_n_splits(1, 16), 1);
    assert_int_equal(kcu_attn_n_splits(KCU_ATTN_SPLIT_TOKENS, 16), 1);
    assert_int_equal(kcu_attn_n_splits(KCU_ATTN_SPLIT_TOKENS + 1, 16), 2);
    assert_int_equal(kcu_attn_split_blocks(16), KCU_ATTN_SPLIT_TOKENS / 16);
    assert_int_equal(kcu_attn_split_blocks(1024), 1);
    for (int bs = 1; bs <= 256; bs++) {
        const int32_t ctx = 1 + (int32_t)(rnd32() % 20000);
        const int n = kcu_attn_n_splits(ctx, bs);
        const int per = kcu_attn_split_blocks(bs);
        const int32_t blocks = (ctx + bs - 1) / bs;
        assert_true((int32_t)n * per >= blocks && (int32_t)(n - 1) * per < blocks);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions),  cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),       cmocka_unit_test(test_tree_sum),
        cmocka_unit_test(test_rmsnorm),      cmocka_unit_test(test_online_softmax),
        cmocka_unit_test(test_split_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
