/* Unit tests for engine/tools/genquant: FP16/BF16 rounding and Q8_0/Q4_0 quantization against
 * verbatim copies of ggml's reference code, the Q/K permutation and the PRNG. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/tools/genquant.h"

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
    uint16_t h;
    genq_convert(TD_F16, x, 1, 1, &h);
    assert_int_equal(h, genq_fp32_to_fp16(x[0]));
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
        cmocka_unit_test(test_fp16_matches_ggml), cmocka_unit_test(test_fp16_roundtrip),
        cmocka_unit_test(test_bf16_matches_ggml), cmocka_unit_test(test_q8_0_matches_ggml),
        cmocka_unit_test(test_q4_0_matches_ggml), cmocka_unit_test(test_convert_sizes),
        cmocka_unit_test(test_permute),           cmocka_unit_test(test_rng),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
