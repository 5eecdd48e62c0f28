/* Unit tests for engine/tools/genquant: FP16/BF16 rounding and Q8_0/Q4_0 quantization against
 * verbatim copies of ggml's reference code, the other quantized types through the CPU kernels'
 * decoder (kc_dequantize_row), the Q/K permutation and the PRNG. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/tools/genquant.h"
#include "kernels/cpu/kc_convert.h"

/* ---- ggml reference code (ggml-impl.h, ggml-quants.c), copied for comparison -------------- */

static float fp32_from_bits(uint32_t w)
{
    float f;
    memcpy(&f, &w, sizeof(f));
    return f;
}

static uint32_t fp32_to_bits(float f)
{
    uint32_t w;
    memcpy(&w, &f, sizeof(w));
    return w;
}

static uint16_t ggml_fp32_to_fp16(float f)
{
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    volatile float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = fp32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) {
        bias = UINT32_C(0x71000000);
    }
    base = fp32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = fp32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

static void ggml_q8_0(const float *x, td_block_q8_0 *y, int64_t k)
{
    const int nb = (int)(k / 32);
    for (int i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            amax = amax > fabsf(v) ? amax : fabsf(v);
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ggml_fp32_to_fp16(d);
        for (int j = 0; j < 32; ++j) {
            const float x0 = x[i * 32 + j] * id;
            y[i].qs[j] = (int8_t)roundf(x0);
        }
    }
}

static void ggml_q4_0(const float *x, td_block_q4_0 *y, int64_t k)
{
    const int qk = 32;
    const int nb = (int)(k / qk);
    for (int i = 0; i < nb; i++) {
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = ggml_fp32_to_fp16(d);
        for (int j = 0; j < qk / 2; ++j) {
            volatile float x0 = x[i * qk + 0 + j] * id; /* volatile: no FMA, as in ggml's ref */
            volatile float x1 = x[i * qk + qk / 2 + j] * id;
            const uint8_t xi0 = (uint8_t)((int8_t)(x0 + 8.5f) < 15 ? (int8_t)(x0 + 8.5f) : 15);
            const uint8_t xi1 = (uint8_t)((int8_t)(x1 + 8.5f) < 15 ? (int8_t)(x1 + 8.5f) : 15);
            y[i].qs[j] = xi0;
            y[i].qs[j] |= (uint8_t)(xi1 << 4);
        }
    }
}

static uint16_t ggml_fp32_to_bf16(float s)
{
    uint32_t i = fp32_to_bits(s);
    if ((i & 0x7fffffff) > 0x7f800000) {
        return (uint16_t)((i >> 16) | 64);
    }
    return (uint16_t)((i + (0x7fff + ((i >> 16) & 1))) >> 16);
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_fp16_matches_ggml(void **state)
{
    (void)state;
    static const uint32_t edges[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0x477fe000u,
        0x477ff000u, 0x477fefffu, 0x47800000u, 0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u,
        0x32ffffffu, 0x33c00000u, 0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x3f801001u};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        float f = fp32_from_bits(edges[i]);
        assert_int_equal(genq_fp32_to_fp16(f), ggml_fp32_to_fp16(f));
    }
    for (uint64_t w = 0; w <= 0xffffffffull; w += 4093) {
        float f = fp32_from_bits((uint32_t)w);
        if (genq_fp32_to_fp16(f) != ggml_fp32_to_fp16(f)) {
            fail_msg("fp16 of 0x%08x: got 0x%04x, ggml 0x%04x", (unsigned)w, genq_fp32_to_fp16(f),
                     ggml_fp32_to_fp16(f));
        }
    }
}

static void test_fp16_roundtrip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) {
            continue; /* NaN payloads are not preserved */
        }
        float f = genq_fp16_to_fp32((uint16_t)h);
        if (genq_fp32_to_fp16(f) != h) {
            fail_msg("half 0x%04x -> %g -> 0x%04x", h, (double)f, genq_fp32_to_fp16(f));
        }
    }
    assert_true(genq_fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(genq_fp16_to_fp32(0x0001) == ldexpf(1.0f, -24));
}

static void test_bf16_matches_ggml(void **state)
{
    (void)state;
    for (uint64_t w = 0; w <= 0xffffffffull; w += 4099) {
        float f = fp32_from_bits((uint32_t)w);
        assert_int_equal(genq_fp32_to_bf16(f), ggml_fp32_to_bf16(f));
    }
    assert_int_equal(genq_fp32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(genq_fp32_to_bf16(fp32_from_bits(0x3f808000u)), 0x3f80); /* tie to even */
    assert_int_equal(genq_fp32_to_bf16(fp32_from_bits(0x3f818000u)), 0x3f82);
}

#define NQ (32 * 64)

static void fill(float *x, int64_t n, uint64_t seed)
{
    genq_rng r;
    genq_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        x[i] = genq_rng_uniform(&r) * (float)(1 + (i / 32) % 7);
    }
    for (int j = 0; j < 32; j++) {
        x[j] = 0.0f;                       /* an all-zero block: d = 0, id = 0 */
        x[32 + j] = -(float)j / 4.0f;      /* the largest magnitude is negative */
        x[64 + j] = (float)(j % 3) - 1.0f; /* ties */
    }
}

static void test_q8_0_matches_ggml(void **state)
{
    (void)state;
    static float x[NQ];
    static td_block_q8_0 a[NQ / 32], b[NQ / 32];
    for (uint64_t seed = 1; seed <= 8; seed++) {
        fill(x, NQ, seed);
        genq_quantize_q8_0(x, a, NQ);
        ggml_q8_0(x, b, NQ);
        assert_memory_equal(a, b, sizeof(a));
    }
    assert_int_equal(a[0].d, 0);
}

static void test_q4_0_matches_ggml(void **state)
{
    (void)state;
    static float x[NQ];
    static td_block_q4_0 a[NQ / 32], b[NQ / 32];
    for (uint64_t seed = 1; seed <= 8; seed++) {
        fill(x, NQ, seed);
        genq_quantize_q4_0(x, a, NQ);
        ggml_q4_0(x, b, NQ);
        assert_memory_equal(a, b, sizeof(a));
        /* dequantized values are within one step of the input (the positive end is clipped
         * at 15, i.e. 7/8 of the largest magnitude) */
        for (int i = 0; i < NQ / 32; i++) {
            float d = genq_fp16_to_fp32(a[i].d);
            for (int j = 0; j < 16; j++) {
                float lo = ((float)(a[i].qs[j] & 15) - 8.0f) * d;
                float hi = ((float)(a[i].qs[j] >> 4) - 8.0f) * d;
                assert_true(fabsf(lo - x[i * 32 + j]) <= fabsf(d) * 1.01f + 1e-3f);
                assert_true(fabsf(hi - x[i * 32 + 16 + j]) <= fabsf(d) * 1.01f + 1e-3f);
            }
        }
    }
}

static void test_convert_sizes(void **state)
{
    (void)state;
    static float x[64 * 3];
    static uint8_t out[64 * 3 * 4];
    fill(x, 64 * 3, 5);
    assert_int_equal(genq_convert(TD_F32, x, 3, 64, out), 64 * 3 * 4);
    assert_memory_equal(out, x, sizeof(x));
    assert_int_equal(genq_convert(TD_F16, x, 3, 64, out), 64 * 3 * 2);
    assert_int_equal(genq_convert(TD_BF16, x, 3, 64, out), 64 * 3 * 2);
    assert_int_equal(genq_convert(TD_Q8_0, x, 3, 64, out), 3 * 2 * 34);
    assert_int_equal(genq_convert(TD_Q4_0, x, 3, 64, out), 3 * 2 * 18);
    assert_int_equal(genq_convert(TD_Q4_0, x, 3, 48, out), 0); /* not whole blocks */
    assert_int_equal(genq_convert(TD_Q4_1, x, 3, 64, out), 3 * 2 * 20);
    assert_int_equal(genq_convert(TD_Q5_0, x, 3, 64, out), 3 * 2 * 22);
    assert_int_equal(genq_convert(TD_Q5_1, x, 3, 64, out), 3 * 2 * 24);
    assert_int_equal(genq_convert(TD_IQ4_NL, x, 3, 64, out), 3 * 2 * 18);
    assert_int_equal(genq_convert(TD_IQ4_NL, x, 3, 48, out), 0);
    assert_int_equal(genq_convert(TD_Q4_K, x, 3, 64, out), 0); /* 256-element super-blocks */
    uint16_t h;
    genq_convert(TD_F16, x, 1, 1, &h);
    assert_int_equal(h, genq_fp32_to_fp16(x[0]));
}

/* ---- the other quantized types, through kc_dequantize_row ---------------------------------- */

#define QROWS 11
#define QCOLS 1024

static const tdtype new_types[] = {TD_Q4_1, TD_Q5_0, TD_Q5_1, TD_IQ4_NL, TD_Q2_K,
                                   TD_Q3_K, TD_Q4_K, TD_Q5_K, TD_Q6_K,   TD_IQ4_XS};
#define NTYPES (sizeof(new_types) / sizeof(new_types[0]))

/* QROWS rows of QCOLS: 0 all zeros, 1 and 2 one repeated value (positive, negative), 3 uniform
 * in [-1, 1), 4 the same at 0.02 (the scale of real weights; small f16 super-block scales), 5 at
 * 50, 6 a magnitude that changes every 16 elements (1 .. 64), 7 all positive, 8 all negative,
 * 9 positive with a large offset, 10 a bell shape (sum of three uniforms) with a few outliers. */
static void fill_rows(float *x, uint64_t seed)
{
    genq_rng r;
    genq_rng_seed(&r, seed);
    for (int c = 0; c < QCOLS; c++) {
        x[0 * QCOLS + c] = 0.0f;
        x[1 * QCOLS + c] = 0.37f;
        x[2 * QCOLS + c] = -2.5f;
        x[3 * QCOLS + c] = genq_rng_uniform(&r);
        x[4 * QCOLS + c] = 0.02f * genq_rng_uniform(&r);
        x[5 * QCOLS + c] = 50.0f * genq_rng_uniform(&r);
        x[6 * QCOLS + c] = genq_rng_uniform(&r) * (float)(1 << ((c / 16) % 7));
        x[7 * QCOLS + c] = 0.5f * (genq_rng_uniform(&r) + 1.0f);
        x[8 * QCOLS + c] = -0.5f * (genq_rng_uniform(&r) + 1.0f);
        x[9 * QCOLS + c] = 3.0f + genq_rng_uniform(&r);
        float b = genq_rng_uniform(&r) + genq_rng_uniform(&r) + genq_rng_uniform(&r);
        x[10 * QCOLS + c] = c % 97 == 5 ? 8.0f * b : b;
    }
}

/* sqrt(sum (x - y)^2 / sum x^2) over n elements (0 when x is all zero and y equal to it). */
static double rel_rms(const float *x, const float *y, int64_t n)
{
    double e = 0.0, s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0.0 ? sqrt(e / s) : (e > 0.0 ? INFINITY : 0.0);
}

/* Quantizes rows x QCOLS of x with genq_convert and decodes them again into y. */
static void roundtrip(tdtype t, const float *x, float *y, int rows)
{
    const size_t rb = td_row_bytes(t, QCOLS);
    uint8_t *q = malloc(rb * (size_t)rows);
    assert_non_null(q);
    assert_int_equal(genq_convert(t, x, rows, QCOLS, q), rb * (size_t)rows);
    for (int r = 0; r < rows; r++) {
        assert_int_equal(kc_dequantize_row(t, q + (size_t)r * rb, y + (size_t)r * QCOLS, QCOLS), 0);
    }
    free(q);
}

/* Error bounds per type: the largest relative RMS error of seeds 1..4 over the uniform rows (3, 4,
 * 5) and over every non-zero row (row 10's outliers give the largest), measured (in the
 * comments) and set with ~30% margin. The constant rows are near exact. */
static const struct {
    tdtype t;
    double uniform, all;
} bounds[] = {
    {TD_Q4_1, 0.081, 0.127},   /* 0.0623, 0.0973 */
    {TD_Q5_0, 0.042, 0.104},   /* 0.0320, 0.0799 */
    {TD_Q5_1, 0.039, 0.064},   /* 0.0296, 0.0495 */
    {TD_IQ4_NL, 0.082, 0.152}, /* 0.0631, 0.1169 */
    {TD_Q2_K, 0.290, 0.380},   /* 0.2238, 0.2923 */
    {TD_Q3_K, 0.155, 0.250},   /* 0.1195, 0.1920 */
    {TD_Q4_K, 0.071, 0.120},   /* 0.0547, 0.0925 */
    {TD_Q5_K, 0.035, 0.058},   /* 0.0268, 0.0444 */
    {TD_Q6_K, 0.017, 0.036},   /* 0.0128, 0.0276 */
    {TD_IQ4_XS, 0.083, 0.154}, /* 0.0636, 0.1185 */
};

static void test_quant_error_bounds(void **state)
{
    (void)state;
    static float x[QROWS * QCOLS], y[QROWS * QCOLS];
    assert_int_equal(sizeof(bounds) / sizeof(bounds[0]), NTYPES);
    for (size_t k = 0; k < NTYPES; k++) {
        const tdtype t = bounds[k].t;
        double worst = 0.0, worst_uniform = 0.0;
        int worst_row = 0;
        for (uint64_t seed = 1; seed <= 4; seed++) {
            fill_rows(x, seed);
            roundtrip(t, x, y, QROWS);
            for (int i = 0; i < QROWS * QCOLS; i++) {
                assert_true(isfinite(y[i]));
            }
            for (int r = 1; r < QROWS; r++) {
                const double e = rel_rms(x + r * QCOLS, y + r * QCOLS, QCOLS);
                if (e > worst) {
                    worst = e;
                    worst_row = r;
                }
                if (r >= 3 && r <= 5 && e > worst_uniform) {
                    worst_uniform = e;
                }
            }
        }
        print_message("%-7s relative RMS error: uniform %.4f, worst %.4f (row %d)\n", td_name(t),
                      worst_uniform, worst, worst_row);
        if (!(worst_uniform < bounds[k].uniform) || !(worst < bounds[k].all)) {
            fail_msg("%s: relative RMS error uniform %.4f (bound %.4f), worst %.4f (row %d, bound "
                     "%.4f)",
                     td_name(t), worst_uniform, bounds[k].uniform, worst, worst_row, bounds[k].all);
        }
    }
}

/* All-zero rows decode to exact zeros (zero scales, no NaN); constant rows are near exact. */
static void test_quant_zero_rows(void **state)
{
    (void)state;
    static float x[QROWS * QCOLS], y[QROWS * QCOLS];
    fill_rows(x, 7);
    for (size_t k = 0; k < NTYPES; k++) {
        const tdtype t = new_types[k];
        memset(y, 0x7f, sizeof(y));
        roundtrip(t, x, y, QROWS);
        for (int c = 0; c < QCOLS; c++) {
            if (y[c] != 0.0f) {
                fail_msg("%s: zero row decodes to %g at %d", td_name(t), (double)y[c], c);
            }
        }
        /* one repeated value: every block alike, near exact */
        for (int r = 1; r <= 2; r++) {
            const double e = rel_rms(x + r * QCOLS, y + r * QCOLS, QCOLS);
            if (!(e < 2e-3)) {
                fail_msg("%s: constant row %d: relative RMS error %g", td_name(t), r, e);
            }
        }
    }
}

/* IQ4_NL: every element decodes to the codebook entry nearest it at its block's scale. */
static void test_iq4_nl_nearest_codes(void **state)
{
    (void)state;
    static float x[QROWS * QCOLS], y[QCOLS];
    static td_block_iq4_nl q[QCOLS / TD_QK];
    for (uint64_t seed = 1; seed <= 2; seed++) {
        fill_rows(x, seed);
        for (int r = 0; r < QROWS; r++) {
            const float *xr = x + r * QCOLS;
            genq_quantize_iq4_nl(xr, q, QCOLS);
            assert_int_equal(kc_dequantize_row(TD_IQ4_NL, q, y, QCOLS), 0);
            for (int i = 0; i < QCOLS; i++) {
                const float d = genq_fp16_to_fp32(q[i / TD_QK].d);
                float best = INFINITY;
                for (int k = 0; k < 16; k++) {
                    best = fminf(best, fabsf(xr[i] - d * (float)td_iq4nl_values[k]));
                }
                if (fabsf(xr[i] - y[i]) > best * (1.0f + 1e-6f) + 1e-30f) {
                    fail_msg("row %d element %d: %g decodes to %g, nearest level is %g away", r, i,
                             (double)xr[i], (double)y[i], (double)best);
                }
            }
        }
    }
}

/* More bits, less error: Q6_K < Q5_K < Q4_K < Q3_K < Q2_K on the same rows. */
static void test_kquant_error_order(void **state)
{
    (void)state;
    static const tdtype order[] = {TD_Q6_K, TD_Q5_K, TD_Q4_K, TD_Q3_K, TD_Q2_K};
    static float x[QROWS * QCOLS], y[QROWS * QCOLS];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        fill_rows(x, seed);
        for (int r = 3; r < QROWS; r++) {
            double prev = 0.0;
            for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
                roundtrip(order[k], x + r * QCOLS, y, 1);
                const double e = rel_rms(x + r * QCOLS, y, QCOLS);
                if (!(e > prev)) {
                    fail_msg("row %d: %s error %g not above %g", r, td_name(order[k]), e, prev);
                }
                prev = e;
            }
        }
    }
}

/* Sizes and whole blocks of every new type; the bytes do not depend on the neighbouring rows. */
static void test_quant_convert_rows(void **state)
{
    (void)state;
    static float x[QROWS * QCOLS];
    static uint8_t a[QROWS * QCOLS], b[QROWS * QCOLS];
    fill_rows(x, 3);
    for (size_t k = 0; k < NTYPES; k++) {
        const tdtype t = new_types[k];
        const int64_t be = td_block_elems(t);
        const size_t rb = td_row_bytes(t, QCOLS);
        assert_int_equal(genq_convert(t, x, QROWS, QCOLS, a), rb * QROWS);
        assert_int_equal(genq_convert(t, x, 2, be, b), 2 * td_block_bytes(t));
        assert_int_equal(genq_convert(t, x, 2, be / 2, b), 0);
        assert_int_equal(genq_convert(t, x, 1, be + 32, b),
                         be == TD_QK ? td_block_bytes(t) * 2 : 0);
        assert_int_equal(genq_convert(t, x, 1, 128, b), be == TD_QKK ? 0 : 4 * td_block_bytes(t));
        for (int r = 0; r < QROWS; r++) {
            assert_int_equal(genq_convert(t, x + r * QCOLS, 1, QCOLS, b), rb);
            assert_memory_equal(a + (size_t)r * rb, b, rb);
        }
    }
    assert_int_equal(genq_convert(TD_Q8_K, x, 1, 256, b), 0); /* not a weight type */
}

static void test_permute(void **state)
{
    (void)state;
    enum { HEADS = 3, HD = 8, COLS = 5, ROWS = HEADS * HD };
    float hf[ROWS * COLS], gguf[ROWS * COLS], back[ROWS * COLS];
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < COLS; c++) {
            hf[r * COLS + c] = (float)(r * 100 + c);
        }
    }
    genq_permute_qk(hf, gguf, HEADS, HD, COLS, 0);
    /* GGUF head 1, pair 2: rows 8+4, 8+5 come from HF rows 8+2 and 8+2+4 */
    assert_true(gguf[(8 + 4) * COLS] == 1000.0f);
    assert_true(gguf[(8 + 5) * COLS + 1] == 1401.0f);
    genq_permute_qk(gguf, back, HEADS, HD, COLS, 1);
    assert_memory_equal(hf, back, sizeof(hf));
}

static void test_rng(void **state)
{
    (void)state;
    genq_rng a, b, c;
    genq_rng_seed(&a, 42);
    genq_rng_seed(&b, 42);
    genq_rng_seed(&c, 43);
    int differ = 0;
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < 10000; i++) {
        float x = genq_rng_uniform(&a);
        assert_true(x == genq_rng_uniform(&b));
        differ += x != genq_rng_uniform(&c);
        assert_true(x >= -1.0f && x < 1.0f);
        sum += x;
        sq += (double)x * x;
    }
    assert_true(differ > 9900);
    assert_true(fabs(sum / 10000) < 0.05);
    assert_true(fabs(sq / 10000 - 1.0 / 3.0) < 0.02); /* variance of U(-1, 1) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_matches_ggml),
        cmocka_unit_test(test_fp16_roundtrip),
        cmocka_unit_test(test_bf16_matches_ggml),
        cmocka_unit_test(test_q8_0_matches_ggml),
        cmocka_unit_test(test_q4_0_matches_ggml),
        cmocka_unit_test(test_convert_sizes),
        cmocka_unit_test(test_quant_error_bounds),
        cmocka_unit_test(test_quant_zero_rows),
        cmocka_unit_test(test_iq4_nl_nearest_codes),
        cmocka_unit_test(test_kquant_error_order),
        cmocka_unit_test(test_quant_convert_rows),
        cmocka_unit_test(test_permute),
        cmocka_unit_test(test_rng),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
