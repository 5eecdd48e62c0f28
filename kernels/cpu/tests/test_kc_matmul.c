/* Unit tests for kc_matmul over every weight type and every ISA level this CPU has: results
 * against a double-precision reference, and bit-identical results whatever the batch size and
 * thread count. Also the conversions of kc_convert.h. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_cpu.h"
#include "kernels/cpu/kc_matmul.h"
#include "kernels/cpu/kc_pool.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
/* Extreme inputs: every quant and 6-bit scale at its maximum (Q6_K scales at -128), every
 * activation 1.0 (all Q8_K quants -127): the largest integer sums the kernels can meet. */
static bool g_extreme;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Byte offsets of the f16 scale fields of a block of type t (-1 ends the list). */
static const int *f16_fields(tdtype t)
{
    static const int d0[] = {0, -1}, dm0[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1},
                     q6k[] = {208, -1};
    switch (t) {
    case TD_Q4_1:
    case TD_Q5_1:
    case TD_Q4_K:
    case TD_Q5_K:
        return dm0;
    case TD_Q2_K:
        return q2k;
    case TD_Q3_K:
        return q3k;
    case TD_Q6_K:
        return q6k;
    default:
        return d0;
    }
}

/* k elements of blocks of type t at dst: random bytes, then each f16 scale set to a small
 * random value (a random f16 could be inf or NaN). */
static void fill_blocks(tdtype t, uint8_t *dst, int64_t k)
{
    const size_t bb = td_block_bytes(t);
    const int64_t nb = k / td_block_elems(t);
    for (size_t i = 0; i < (size_t)nb * bb; i++) {
        frand();
        dst[i] = g_extreme ? 0xFF : (uint8_t)(g_rng >> 24);
        if (g_extreme && t == TD_Q6_K && i % bb >= offsetof(td_block_q6_k, scales) &&
            i % bb < offsetof(td_block_q6_k, d)) {
            dst[i] = 0x80;
        }
    }
    for (int64_t b = 0; b < nb; b++) {
        for (const int *f = f16_fields(t); *f >= 0; f++) {
            const uint16_t h = kc_f32_to_f16(0.004f + 0.002f * frand());
            memcpy(dst + (size_t)b * bb + (size_t)*f, &h, sizeof(h));
        }
    }
}

/* Random weights of type t, m rows of k; returns malloc'd data. */
static void *make_weights(tdtype t, int64_t k, int64_t m)
{
    size_t rb = td_row_bytes(t, k);
    uint8_t *data = malloc(rb * (size_t)m);
    assert_non_null(data);
    float *row = malloc(sizeof(float) * (size_t)k);
    assert_non_null(row);
    for (int64_t r = 0; r < m; r++) {
        for (int64_t i = 0; i < k; i++) {
            row[i] = frand() * 0.5f;
        }
        uint8_t *dst = data + (size_t)r * rb;
        switch (t) {
        case TD_F32:
            memcpy(dst, row, rb);
            break;
        case TD_F16:
            for (int64_t i = 0; i < k; i++) {
                ((uint16_t *)dst)[i] = kc_f32_to_f16(row[i]);
            }
            break;
        case TD_BF16:
            for (int64_t i = 0; i < k; i++) {
                ((uint16_t *)dst)[i] = kc_f32_to_bf16(row[i]);
            }
            break;
        case TD_Q8_0:
            kc_quantize_row_q8_0(row, (td_block_q8_0 *)dst, k);
            break;
        case TD_Q4_0: {
            td_block_q4_0 *b = (td_block_q4_0 *)dst;
            for (int64_t ib = 0; ib < k / TD_QK; ib++) {
                b[ib].d = kc_f32_to_f16(0.05f + 0.01f * frand());
                for (int j = 0; j < TD_QK / 2; j++) {
                    b[ib].qs[j] = (uint8_t)(g_rng >> (j % 7 * 8));
                    frand();
                }
            }
            break;
        }
        default: /* the other quantized types: random quants, small random f16 scales */
            fill_blocks(t, dst, k);
            break;
        }
    }
    free(row);
    return data;
}

/* Dequantizes one row of activations of a vec_dot type (Q8_0, Q8_1 or Q8_K). */
static void dequant_act(tdtype xt, const void *xq, float *out, int64_t k)
{
    if (xt == TD_Q8_0) {
        assert_int_equal(kc_dequantize_row(TD_Q8_0, xq, out, k), 0);
    } else if (xt == TD_Q8_1) {
        const td_block_q8_1 *b = xq;
        for (int64_t i = 0; i < k; i++) {
            const td_block_q8_1 *blk = &b[i / TD_QK];
            out[i] = kc_f16_to_f32(blk->d) * (float)blk->qs[i % TD_QK];
        }
    } else {
        const td_block_q8_k *b = xq;
        for (int64_t i = 0; i < k; i++) {
            const td_block_q8_k *blk = &b[i / TD_QKK];
            out[i] = blk->d * (float)blk->qs[i % TD_QKK];
        }
    }
}

static void quant_act(tdtype xt, const float *x, void *xq, int64_t k)
{
    if (xt == TD_Q8_0) {
        kc_quantize_row_q8_0(x, xq, k);
    } else if (xt == TD_Q8_1) {
        kc_quantize_row_q8_1(x, xq, k);
    } else {
        kc_quantize_row_q8_k(x, xq, k);
    }
}

/* Y[t][r] reference in double: dequantized weights times (quantized, for Q types) activations. */
static void reference(tdtype t, const void *w, int64_t k, int64_t m, const float *x, int64_t n,
                      double *y, double *mag)
{
    float *wr = malloc(sizeof(float) * (size_t)k);
    float *xr = malloc(sizeof(float) * (size_t)k);
    td_block_q8_k *xq = malloc(sizeof(td_block_q8_k) * (size_t)(k / TD_QK + 1));
    assert_non_null(wr);
    assert_non_null(xr);
    assert_non_null(xq);
    bool quant = td_is_quant(t);
    size_t rb = td_row_bytes(t, k);
    for (int64_t ti = 0; ti < n; ti++) {
        if (quant) {
            quant_act(kc_vec_dot_type(t), x + ti * k, xq, k);
            dequant_act(kc_vec_dot_type(t), xq, xr, k);
        } else {
            memcpy(xr, x + ti * k, sizeof(float) * (size_t)k);
            if (t == TD_BF16 && kc_bf16_dot_active()) { /* rounded like ggml's activations */
                for (int64_t i = 0; i < k; i++) {
                    xr[i] = kc_bf16_to_f32(kc_f32_to_bf16(xr[i]));
                }
            }
        }
        for (int64_t r = 0; r < m; r++) {
            assert_int_equal(kc_dequantize_row(t, (const uint8_t *)w + (size_t)r * rb, wr, k), 0);
            double s = 0.0, a = 0.0;
            for (int64_t i = 0; i < k; i++) {
                s += (double)wr[i] * (double)xr[i];
                a += fabs((double)wr[i] * (double)xr[i]);
            }
            if (t == TD_Q4_1 || t == TD_Q5_1) {
                /* ggml's Q8_1 carries s = d * sum(q) rounded to f16, and the minimum's term is
                 * m * s: the reference does the same */
                const td_block_q8_1 *xb = (const td_block_q8_1 *)xq;
                const uint8_t *wb = (const uint8_t *)w + (size_t)r * rb;
                for (int64_t b = 0; b < k / TD_QK; b++) {
                    uint16_t mh;
                    memcpy(&mh, wb + (size_t)b * td_block_bytes(t) + 2, sizeof(mh));
                    double xs = 0.0;
                    for (int j = 0; j < TD_QK; j++) {
                        xs += xr[b * TD_QK + j];
                    }
                    s += (double)kc_f16_to_f32(mh) * ((double)kc_f16_to_f32(xb[b].s) - xs);
                }
            }
            y[ti * m + r] = s;
            mag[ti * m + r] = a;
        }
    }
    free(wr);
    free(xr);
    free(xq);
}

/* Every weight type the kernels take. */
static const tdtype all_types[] = {TD_F32,  TD_F16,  TD_BF16, TD_Q8_0,   TD_Q4_0,
                                   TD_Q4_1, TD_Q5_0, TD_Q5_1, TD_IQ4_NL, TD_Q2_K,
                                   TD_Q3_K, TD_Q4_K, TD_Q5_K, TD_Q6_K,   TD_IQ4_XS};

static void check_case(kc_pool *pool1, kc_pool *pool2, tdtype t, int64_t k, int64_t m, bool pack)
{
    static const int64_t ns[] = {1, 3, 17, 64};
    const int64_t nmax = 64;
    void *w = make_weights(t, k, m);
    float *x = malloc(sizeof(float) * (size_t)(nmax * k));
    float *y = malloc(sizeof(float) * (size_t)(nmax * m));
    float *y1 = malloc(sizeof(float) * (size_t)m);
    double *ref = malloc(sizeof(double) * (size_t)(nmax * m));
    double *mag = malloc(sizeof(double) * (size_t)(nmax * m));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(y1);
    assert_non_null(ref);
    assert_non_null(mag);
    for (int64_t i = 0; i < nmax * k; i++) {
        x[i] = g_extreme ? 1.0f : frand();
    }
    kc_weight wt = {.type = t, .k = k, .m = m, .data = w};
    if (pack) {
        assert_int_equal(kc_weight_prepare(&wt), 0);
    }
    size_t ws = kc_matmul_wsize(&wt, nmax);
    void *wsp = ws ? malloc(ws) : NULL;
    reference(t, w, k, m, x, nmax, ref, mag);
    for (size_t c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
        int64_t n = ns[c];
        for (int p = 0; p < 2; p++) {
            kc_pool *pool = p ? pool2 : pool1;
            memset(y, 0, sizeof(float) * (size_t)(n * m));
            assert_int_equal(kc_matmul(pool, &wt, x, n, y, wsp, ws), 0);
            for (int64_t ti = 0; ti < n; ti++) {
                /* the same token alone, single-threaded, must give identical bits */
                assert_int_equal(kc_matmul(NULL, &wt, x + ti * k, 1, y1, wsp, ws), 0);
                for (int64_t r = 0; r < m; r++) {
                    double got = y[ti * m + r];
                    double want = ref[ti * m + r];
                    double tol = 1e-5 * mag[ti * m + r] + 1e-6;
                    if (fabs(got - want) > tol) {
                        fail_msg("isa %s type %s k %ld m %ld n %ld t %ld r %ld: got %.9g want %.9g",
                                 kc_isa_name(kc_isa_active()), td_name(t), (long)k, (long)m,
                                 (long)n, (long)ti, (long)r, got, want);
                    }
                    uint32_t bits_batch, bits_alone;
                    memcpy(&bits_batch, &y[ti * m + r], sizeof(bits_batch));
                    memcpy(&bits_alone, &y1[r], sizeof(bits_alone));
                    if (bits_batch != bits_alone) {
                        fail_msg("isa %s type %s k %ld n %ld: batch result %.9g != alone %.9g",
                                 kc_isa_name(kc_isa_active()), td_name(t), (long)k, (long)n,
                                 (double)y[ti * m + r], (double)y1[r]);
                    }
                }
            }
        }
    }
    kc_weight_release(&wt);
    free(wsp);
    free(w);
    free(x);
    free(y);
    free(y1);
    free(ref);
    free(mag);
}

static void test_matmul_all_isas(void **state)
{
    (void)state;
    kc_pool *pool1 = kc_pool_new(1, false);
    kc_pool *pool2 = kc_pool_new(2, false);
    assert_non_null(pool1);
    assert_non_null(pool2);
    kc_isa best = kc_isa_best();
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        for (size_t ti = 0; ti < sizeof(all_types) / sizeof(all_types[0]); ti++) {
            tdtype t = all_types[ti];
            bool quant = td_is_quant(t);
            if (td_block_elems(t) == TD_QKK) {
                const bool packable = t == TD_Q4_K || t == TD_Q5_K || t == TD_Q6_K;
                for (int pack = 0; pack <= (packable ? 1 : 0); pack++) {
                    check_case(pool1, pool2, t, 256, 19, pack);
                    check_case(pool1, pool2, t, 768, 37, pack);
                    check_case(pool1, pool2, t, 512, 48, pack);
                }
                continue;
            }
            for (int pack = 0; pack <= (t == TD_Q8_0 || t == TD_Q4_0 || !quant ? 1 : 0); pack++) {
                check_case(pool1, pool2, t, 64, 19, pack);
                check_case(pool1, pool2, t, 160, 37, pack);
                check_case(pool1, pool2, t, 32, 8, pack);
            }
            if (!quant) {
                check_case(pool1, pool2, t, 37, 7, false);
                check_case(pool1, pool2, t, 3, 5, false);
            }
        }
    }
    assert_int_equal(kc_isa_set(best), 0);
    kc_pool_free(pool1);
    kc_pool_free(pool2);
}

/* The decode prefetch distance (kc_tune) changes timing only: every type at every ISA level gives
 * the same bits with none, the table's and a far one. */
static void test_prefetch_tune_same_bits(void **state)
{
    (void)state;
    static const int dist[] = {0, 64, 32768};
    const int64_t k = 512, m = 48, n = 3;
    kc_pool *pool = kc_pool_new(2, false);
    float *x = malloc(sizeof(float) * (size_t)(n * k));
    float *y0 = malloc(sizeof(float) * (size_t)(n * m));
    float *y1 = malloc(sizeof(float) * (size_t)(n * m));
    assert_non_null(pool);
    assert_non_null(x);
    assert_non_null(y0);
    assert_non_null(y1);
    if (!pool || !x || !y0 || !y1) {
        kc_pool_free(pool);
        free(x);
        free(y0);
        free(y1);
        return;
    }
    for (int64_t i = 0; i < n * k; i++) {
        x[i] = frand();
    }
    const kc_tune saved = *kc_tune_get();
    const kc_isa best = kc_isa_best();
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        for (size_t ti = 0; ti < sizeof(all_types) / sizeof(all_types[0]); ti++) {
            void *w = make_weights(all_types[ti], k, m);
            kc_weight wt = {.type = all_types[ti], .k = k, .m = m, .data = w};
            assert_int_equal(kc_weight_prepare(&wt), 0);
            const size_t ws = kc_matmul_wsize(&wt, n);
            void *wsp = ws ? malloc(ws) : NULL;
            for (int64_t nn = 1; nn <= n; nn += n - 1) {
                assert_int_equal(kc_matmul(pool, &wt, x, nn, y0, wsp, ws), 0);
                for (size_t d = 0; d < sizeof(dist) / sizeof(dist[0]); d++) {
                    kc_tune t = saved;
                    for (int i = 0; i < 2; i++) {
                        t.pf_quant[i] = t.pf_half[i] = t.pf_f32[i] = dist[d];
                    }
                    /* the pool of two reads the "several" column, no pool the "one" column */
                    for (int p = 0; p < 2; p++) {
                        assert_int_equal(kc_tune_set(&t), 0);
                        assert_int_equal(kc_matmul(p ? NULL : pool, &wt, x, nn, y1, wsp, ws), 0);
                        assert_int_equal(kc_tune_set(&saved), 0);
                        if (memcmp(y0, y1, sizeof(float) * (size_t)(nn * m)) != 0) {
                            fail_msg("isa %s type %s n %ld threads %d: prefetch %d changed the "
                                     "result",
                                     kc_isa_name((kc_isa)isa), td_name(all_types[ti]), (long)nn,
                                     p ? 1 : 2, dist[d]);
                        }
                    }
                }
            }
            kc_weight_release(&wt);
            free(wsp);
            free(w);
        }
    }
    assert_int_equal(kc_isa_set(best), 0);
    kc_pool_free(pool);
    free(x);
    free(y0);
    free(y1);
}

/* A prepared float weight is a copy (2 MiB and more: in huge-page-advised memory) and gives the
 * same bits as the original. */
static void test_prepare_float_copy(void **state)
{
    (void)state;
    static const tdtype types[] = {TD_F32, TD_F16, TD_BF16};
    const int64_t k = 1024, m = 1100, n = 3; /* 4.3 MiB of F32, 2.1 MiB of F16 */
    float *x = malloc(sizeof(float) * (size_t)(n * k));
    float *y0 = malloc(sizeof(float) * (size_t)(n * m));
    float *y1 = malloc(sizeof(float) * (size_t)(n * m));
    assert_non_null(x);
    assert_non_null(y0);
    assert_non_null(y1);
    for (int64_t i = 0; i < n * k; i++) {
        x[i] = frand();
    }
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        kc_weight w = {.type = types[ti], .k = k, .m = m, .data = make_weights(types[ti], k, m)};
        const size_t ws = kc_matmul_wsize(&w, n); /* BF16 activations on AVX512_BF16 */
        void *wsp = ws ? malloc(ws) : NULL;
        assert_int_equal(kc_matmul(NULL, &w, x, n, y0, wsp, ws), 0);
        assert_int_equal(kc_weight_prepare(&w), 0);
        assert_non_null(w.packed);
        assert_ptr_not_equal(w.packed, w.data);
        assert_memory_equal(w.packed, w.data, td_row_bytes(w.type, k) * (size_t)m);
        assert_int_equal(kc_matmul(NULL, &w, x, n, y1, wsp, ws), 0);
        assert_memory_equal(y0, y1, sizeof(float) * (size_t)(n * m));
        free(wsp);
        kc_weight_release(&w);
        assert_null(w.packed);
        free((void *)w.data);
    }
    free(x);
    free(y0);
    free(y1);
}

/* The K-quant kernels (packed and not) at the extremes of their integer ranges. */
static void test_matmul_k_extremes(void **state)
{
    (void)state;
    kc_pool *pool1 = kc_pool_new(1, false);
    kc_pool *pool2 = kc_pool_new(2, false);
    assert_non_null(pool1);
    assert_non_null(pool2);
    static const tdtype types[] = {TD_Q2_K, TD_Q3_K, TD_Q4_K, TD_Q5_K, TD_Q6_K, TD_IQ4_XS};
    kc_isa best = kc_isa_best();
    g_extreme = true;
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
            for (int pack = 0; pack <= 1; pack++) {
                check_case(pool1, pool2, types[ti], 512, 24, pack);
            }
        }
    }
    g_extreme = false;
    assert_int_equal(kc_isa_set(best), 0);
    kc_pool_free(pool1);
    kc_pool_free(pool2);
}

/* kc_matmul_multi equals separate kc_matmul calls bit for bit (same type, and mixed types). */
static void test_matmul_multi(void **state)
{
    (void)state;
    kc_pool *pool = kc_pool_new(2, false);
    assert_non_null(pool);
    static const tdtype types[] = {TD_F32, TD_F16, TD_BF16, TD_Q8_0, TD_Q4_0};
    const int64_t k = 96, n = 9, ms[3] = {36, 17, 23};
    float *x = malloc(sizeof(float) * (size_t)(n * k));
    assert_non_null(x);
    for (int64_t i = 0; i < n * k; i++) {
        x[i] = frand();
    }
    size_t ws = (size_t)n * (k / TD_QK) * (sizeof(td_block_q8_0) + sizeof(int32_t));
    if (ws < (size_t)(n * k) * sizeof(uint16_t)) { /* BF16 activations (kc_bf16_dot_active) */
        ws = (size_t)(n * k) * sizeof(uint16_t);
    }
    void *wsp = malloc(ws);
    assert_non_null(wsp);
    for (size_t ti = 0; ti <= sizeof(types) / sizeof(types[0]); ti++) {
        kc_weight w[3];
        const kc_weight *wp[3];
        float *ym[3], *ys[3];
        for (int i = 0; i < 3; i++) {
            /* the last round mixes types to take the fallback path */
            tdtype t = ti < 5 ? types[ti] : types[i + 2];
            w[i] = (kc_weight){.type = t, .k = k, .m = ms[i], .data = make_weights(t, k, ms[i])};
            assert_int_equal(kc_weight_prepare(&w[i]), 0);
            wp[i] = &w[i];
            ym[i] = malloc(sizeof(float) * (size_t)(n * ms[i]));
            ys[i] = malloc(sizeof(float) * (size_t)(n * ms[i]));
            assert_non_null(ym[i]);
            assert_non_null(ys[i]);
        }
        assert_int_equal(kc_matmul_multi(pool, wp, ym, 3, x, n, wsp, ws), 0);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(kc_matmul(NULL, &w[i], x, n, ys[i], wsp, ws), 0);
            for (int64_t j = 0; j < n * ms[i]; j++) {
                uint32_t a, b;
                memcpy(&a, &ym[i][j], sizeof(a));
                memcpy(&b, &ys[i][j], sizeof(b));
                assert_int_equal(a, b);
            }
            kc_weight_release(&w[i]);
            free((void *)w[i].data);
            free(ym[i]);
            free(ys[i]);
        }
    }
    assert_int_equal(kc_matmul_multi(pool, NULL, NULL, 0, x, n, wsp, ws), -EINVAL);
    free(x);
    free(wsp);
    kc_pool_free(pool);
}

/* Every ISA level's Q8_0 quantizer gives the scalar reference's bytes, ties included. */
static void test_quantize_all_isas(void **state)
{
    (void)state;
    enum { K = 32 * 40 };
    float x[K];
    for (int i = 0; i < K; i++) {
        x[i] = frand() * (i < K / 2 ? 3.0f : 1e-3f);
    }
    /* a block whose scale is 1: x = n + 0.5 are exact ties (rounded half to even, as ggml's x86
     * activation quantizer does) */
    for (int j = 0; j < 32; j++) {
        x[j] = (float)(j - 16) + 0.5f;
    }
    x[0] = 127.0f;
    x[1] = -126.5f;
    for (int j = 32; j < 64; j++) {
        x[j] = 0.0f; /* all-zero block: d = 0 */
    }
    x[64] = -0.0f;
    x[65] = 0.49999997f * 127.0f / 127.0f;
    td_block_q8_0 ref[K / 32], got[K / 32];
    kc_isa best = kc_isa_best();
    assert_int_equal(kc_isa_set(KC_ISA_SCALAR), 0);
    kc_quantize_row_q8_0(x, ref, K);
    assert_int_equal(ref[0].qs[2], -14); /* -13.5 -> -14 (even) */
    assert_int_equal(ref[0].qs[17], 2);  /* 1.5 -> 2 */
    assert_int_equal(ref[0].qs[18], 2);  /* 2.5 -> 2 (even, not away from zero) */
    assert_int_equal(ref[0].qs[3], -12); /* -12.5 -> -12 */
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        memset(got, 0x55, sizeof(got));
        kc_quantize_row_q8_0(x, got, K);
        for (int b = 0; b < K / 32; b++) {
            assert_int_equal(got[b].d, ref[b].d);
            assert_memory_equal(got[b].qs, ref[b].qs, 32);
        }
    }
    assert_int_equal(kc_isa_set(best), 0);
}

/* Every ISA level's Q8_K quantizer gives the scalar reference's bytes: the value of largest
 * magnitude (the first of a +/- pair of equal magnitude) maps to -127, ties round half to even,
 * an all-zero block is zeros, and the 16-element sums match. */
static void test_quantize_q8k_all_isas(void **state)
{
    (void)state;
    enum { K = 256 * 6 };
    static float x[K];
    for (int i = 0; i < K; i++) {
        x[i] = frand() * (i < K / 2 ? 3.0f : 1e-3f);
    }
    for (int j = 0; j < 256; j++) { /* block 0: scale 1 (max -127), exact ties j + 0.5 */
        x[j] = (float)(j % 200 - 100) + 0.5f;
    }
    x[7] = -127.0f;
    x[9] = 127.0f; /* equal magnitude, later: the first (-127) is the max */
    for (int j = 256; j < 512; j++) {
        x[j] = 0.0f; /* block 1: all zero */
    }
    x[600] = 5.0f; /* block 2: a positive max, so the quants flip sign */
    static td_block_q8_k ref[K / 256], got[K / 256];
    kc_isa best = kc_isa_best();
    assert_int_equal(kc_isa_set(KC_ISA_SCALAR), 0);
    kc_quantize_row_q8_k(x, ref, K);
    assert_true(ref[0].d == 1.0f);
    assert_int_equal(ref[0].qs[7], -127);
    assert_int_equal(ref[0].qs[9], 127);
    assert_int_equal(ref[0].qs[0], -100); /* -99.5 -> -100 (even) */
    assert_int_equal(ref[0].qs[1], -98);  /* -98.5 -> -98 */
    assert_true(ref[1].d == 0.0f);
    assert_true(ref[2].d < 0.0f);
    for (int isa = KC_ISA_SCALAR; isa <= (int)best; isa++) {
        assert_int_equal(kc_isa_set((kc_isa)isa), 0);
        memset(got, 0x55, sizeof(got));
        kc_quantize_row_q8_k(x, got, K);
        for (int b = 0; b < K / 256; b++) {
            assert_memory_equal(&got[b].d, &ref[b].d, sizeof(float));
            assert_memory_equal(got[b].qs, ref[b].qs, 256);
            assert_memory_equal(got[b].bsums, ref[b].bsums, sizeof(ref[b].bsums));
        }
    }
    assert_int_equal(kc_isa_set(best), 0);
}

static void test_matmul_bad_args(void **state)
{
    (void)state;
    float x[64] = {0}, y[4];
    uint8_t w[4 * 34] = {0};
    kc_weight bad_k = {.type = TD_Q8_0, .k = 33, .m = 1, .data = w};
    assert_int_equal(kc_matmul(NULL, &bad_k, x, 1, y, w, sizeof(w)), -EINVAL);
    kc_weight q = {.type = TD_Q8_0, .k = 32, .m = 1, .data = w};
    assert_int_equal(kc_matmul(NULL, &q, x, 2, y, NULL, 0), -EINVAL); /* no workspace */
    kc_weight bad_t = {.type = (tdtype)12, .k = 32, .m = 1, .data = w};
    assert_int_equal(kc_matmul(NULL, &bad_t, x, 1, y, NULL, 0), -EINVAL);
    assert_int_equal(kc_isa_set((kc_isa)7), -ENOTSUP);
}

static void test_conversions(void **state)
{
    (void)state;
    assert_int_equal(kc_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(kc_f32_to_f16(-2.0f), 0xC000);
    assert_int_equal(kc_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(kc_f32_to_f16(1e6f), 0x7C00);                  /* overflow to inf */
    assert_int_equal(kc_f32_to_f16(5.9604645e-8f), 0x0001);         /* smallest subnormal */
    assert_int_equal(kc_f32_to_f16(1.0f + 1.0f / 2048.0f), 0x3C00); /* tie to even */
    assert_int_equal(kc_f32_to_f16(1.0f + 3.0f / 2048.0f), 0x3C02);
    assert_true(isnan(kc_f16_to_f32(kc_f32_to_f16(NAN))));
    for (uint32_t h = 0; h < 0x7C00; h += 7) { /* every finite positive half round-trips */
        assert_int_equal(kc_f32_to_f16(kc_f16_to_f32((uint16_t)h)), h);
        assert_int_equal(kc_f32_to_f16(kc_f16_to_f32((uint16_t)(h | 0x8000))), h | 0x8000);
    }
    assert_int_equal(kc_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(kc_f32_to_bf16(1.00390625f), 0x3F80); /* 1 + 2^-8: tie to even (down) */
    assert_int_equal(kc_f32_to_bf16(1.01171875f), 0x3F82); /* 1 + 3*2^-8: tie to even (up) */
    assert_true(isnan(kc_bf16_to_f32(kc_f32_to_bf16(NAN))));
    assert_true(kc_bf16_to_f32(0x4049) > 3.14f && kc_bf16_to_f32(0x4049) < 3.15f);

    float x[64], back[64];
    td_block_q8_0 q[2];
    for (int i = 0; i < 64; i++) {
        x[i] = frand() * 3.0f;
    }
    x[5] = 0.0f;
    kc_quantize_row_q8_0(x, q, 64);
    assert_int_equal(kc_dequantize_row(TD_Q8_0, q, back, 64), 0);
    for (int b = 0; b < 2; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        }
        assert_int_equal(q[b].d, kc_f32_to_f16(amax / 127.0f));
        float d = amax / 127.0f;
        for (int j = 0; j < 32; j++) {
            assert_int_equal(q[b].qs[j], (int)nearbyintf(x[b * 32 + j] * (127.0f / amax)));
            assert_true(fabsf(back[b * 32 + j] - x[b * 32 + j]) <= d * 0.51f + 1e-3f);
        }
    }
    td_block_q4_0 b4 = {.d = kc_f32_to_f16(0.5f)};
    for (int j = 0; j < 16; j++) {
        b4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    }
    assert_int_equal(kc_dequantize_row(TD_Q4_0, &b4, back, 32), 0);
    for (int j = 0; j < 16; j++) {
        assert_true(back[j] == (float)(j - 8) * 0.5f);
        assert_true(back[j + 16] == (float)(15 - j - 8) * 0.5f);
    }
    assert_int_equal(kc_dequantize_row(TD_Q4_0, &b4, back, 31), -EINVAL);
    assert_int_equal(kc_dequantize_row((tdtype)12, &b4, back, 32), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_matmul_bad_args),
        cmocka_unit_test(test_matmul_all_isas),
        cmocka_unit_test(test_matmul_k_extremes),
        cmocka_unit_test(test_prepare_float_copy),
        cmocka_unit_test(test_matmul_multi),
        cmocka_unit_test(test_quantize_all_isas),
        cmocka_unit_test(test_quantize_q8k_all_isas),
        cmocka_unit_test(test_prefetch_tune_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
