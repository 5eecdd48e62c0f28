/* Host tests of kcu_quant.h, the Q8_0/Q4_0 arithmetic the CUDA matmul kernels execute:
 *   - element and block dequantisation: bit-identical to kc_dequantize_row (the same float
 *     multiply), for every one of the 65536 f16 scale patterns and every quantised value;
 *   - the block dot with f32 activations: within the rounding bound of 32 fmaf steps and one
 *     multiply of a double-precision reference, on random blocks incl. extreme scales;
 *   - the decode GEMV's row order (kcu_q_row_dot_emul): within its rounding bound of the double
 *     reference, and within the activation-quantisation bound of kc_matmul, which quantises the
 *     activations to Q8_0 (the GPU kernel keeps them f32, so the two differ by that much). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_matmul.h"
#include "kernels/cuda/kcu_quant.h"

#define U32 0x1.0p-24 /* unit roundoff of f32 */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static float frand(void) /* [-1, 1) */
{
    return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

static int same_bits(float a, float b)
{
    if (isnan(a) && isnan(b)) {
        return 1;
    }
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof(ua));
    memcpy(&ub, &b, sizeof(ub));
    return ua == ub;
}

static void fill_q8(td_block_q8_0 *b, uint16_t d)
{
    b->d = d;
    for (int j = 0; j < TD_QK; j++) {
        b->qs[j] = (int8_t)(rnd32() & 0xFF);
    }
}

static void fill_q4(td_block_q4_0 *b, uint16_t d)
{
    b->d = d;
    for (int j = 0; j < TD_QK / 2; j++) {
        b->qs[j] = (uint8_t)(rnd32() & 0xFF);
    }
}

/* Every f16 scale (incl. zero, subnormals, the largest finite, inf and NaN) with random values. */
static void test_dequant_q8_0_bit_exact(void **state)
{
    (void)state;
    for (uint32_t d = 0; d < 65536; d++) {
        td_block_q8_0 b;
        fill_q8(&b, (uint16_t)d);
        if (d == 0x3C00) { /* d = 1: include -128 and 127 */
            b.qs[0] = -128;
            b.qs[1] = 127;
        }
        float ref[TD_QK], blk[TD_QK];
        assert_int_equal(kc_dequantize_row(TD_Q8_0, &b, ref, TD_QK), 0);
        kcu_q8_0_dequant(&b, blk);
        for (int j = 0; j < TD_QK; j++) {
            if (!same_bits(ref[j], blk[j]) || !same_bits(ref[j], kcu_q8_0_elem(&b, j))) {
                fail_msg("Q8_0 d=0x%04x j=%d: cpu %a, block %a, elem %a", d, j, (double)ref[j],
                         (double)blk[j], (double)kcu_q8_0_elem(&b, j));
            }
        }
    }
}

static void test_dequant_q4_0_bit_exact(void **state)
{
    (void)state;
    for (uint32_t d = 0; d < 65536; d++) {
        td_block_q4_0 b;
        fill_q4(&b, (uint16_t)d);
        float ref[TD_QK], blk[TD_QK];
        assert_int_equal(kc_dequantize_row(TD_Q4_0, &b, ref, TD_QK), 0);
        kcu_q4_0_dequant(&b, blk);
        for (int j = 0; j < TD_QK; j++) {
            if (!same_bits(ref[j], blk[j]) || !same_bits(ref[j], kcu_q4_0_elem(&b, j))) {
                fail_msg("Q4_0 d=0x%04x j=%d: cpu %a, block %a, elem %a", d, j, (double)ref[j],
                         (double)blk[j], (double)kcu_q4_0_elem(&b, j));
            }
        }
    }
}

/* Every byte value in every position: the nibble order (low = element j, high = j + 16). */
static void test_q4_0_nibbles(void **state)
{
    (void)state;
    for (int v = 0; v < 256; v++) {
        td_block_q4_0 b;
        b.d = kc_f32_to_f16(1.0f);
        for (int j = 0; j < TD_QK / 2; j++) {
            b.qs[j] = (uint8_t)((v + j * 37) & 0xFF);
        }
        for (int j = 0; j < TD_QK / 2; j++) {
            assert_int_equal(kcu_q4_0_q(&b, j), (b.qs[j] & 0x0F) - 8);
            assert_int_equal(kcu_q4_0_q(&b, j + 16), (b.qs[j] >> 4) - 8);
        }
    }
}

/* A random finite scale: mostly typical magnitudes, some extremes. */
static uint16_t rand_scale(int i)
{
    switch (i % 8) {
    case 0:
        return 0x7BFF; /* 65504, the largest f16 */
    case 1:
        return 0x0001; /* smallest subnormal */
    case 2:
        return (uint16_t)(rnd32() & 0x03FF); /* subnormal */
    case 3:
        return (uint16_t)(0x8000 | kc_f32_to_f16(0.01f + 0.001f * frand())); /* negative */
    case 4:
        return 0x0000;
    default: {
        uint16_t h;
        do {
            h = (uint16_t)(rnd32() & 0x7FFF);
        } while ((h & 0x7C00) == 0x7C00); /* no inf/NaN */
        return h;
    }
    }
}

/* Block dot: |dot - exact| <= 33 u d sum|q x| (32 fmaf roundings, the scale multiply) plus an
 * underflow allowance for subnormal results. */
static void test_block_dot(void **state)
{
    (void)state;
    for (int i = 0; i < 20000; i++) {
        float x[TD_QK];
        const float xs = i % 5 == 0 ? 1e4f : 1.0f; /* large activations too */
        for (int j = 0; j < TD_QK; j++) {
            x[j] = frand() * xs;
        }
        const int q4 = i & 1;
        td_block_q8_0 b8;
        td_block_q4_0 b4;
        fill_q8(&b8, rand_scale(i >> 1));
        fill_q4(&b4, rand_scale(i >> 1));
        double exact = 0.0, mag = 0.0;
        for (int j = 0; j < TD_QK; j++) {
            const double q = q4 ? kcu_q4_0_q(&b4, j) : b8.qs[j];
            exact += q * x[j];
            mag += fabs(q * x[j]);
        }
        const double d = kc_f16_to_f32(q4 ? b4.d : b8.d);
        exact *= d;
        mag *= fabs(d);
        const float got = q4 ? kcu_q4_0_dot(&b4, x) : kcu_q8_0_dot(&b8, x);
        const double tol = 33.0 * U32 * mag + 0x1.0p-149;
        if (!(fabs((double)got - exact) <= tol)) {
            fail_msg("%s block %d: dot %a, exact %a, tol %g", q4 ? "Q4_0" : "Q8_0", i, (double)got,
                     exact, tol);
        }
    }
}

/* Rows of quantised weights, the GEMV's order vs the double reference and vs kc_matmul. */
static void check_rows(tdtype t, int64_t k, int64_t m)
{
    const int64_t nb = k / TD_QK;
    const size_t rb = td_row_bytes(t, k);
    uint8_t *w = malloc(rb * (size_t)m);
    float *x = malloc(sizeof(float) * (size_t)k);
    float *y = malloc(sizeof(float) * (size_t)m);
    float *wf = malloc(sizeof(float) * (size_t)k);
    td_block_q8_0 *xq = malloc(sizeof(td_block_q8_0) * (size_t)nb);
    assert_true(w && x && y && wf && xq);
    for (int64_t r = 0; r < m; r++) {
        for (int64_t b = 0; b < nb; b++) {
            const uint16_t d = kc_f32_to_f16((0.02f + 0.01f * frand()) * (r % 3 ? 1.0f : 40.0f));
            if (t == TD_Q8_0) {
                fill_q8((td_block_q8_0 *)(w + (size_t)r * rb) + b, d);
            } else {
                fill_q4((td_block_q4_0 *)(w + (size_t)r * rb) + b, d);
            }
        }
    }
    for (int64_t i = 0; i < k; i++) {
        x[i] = frand() * (i % 97 == 0 ? 20.0f : 1.0f); /* a few outliers, as real activations */
    }
    kc_weight kw = {.type = t, .k = k, .m = m, .data = w, .packed = NULL};
    const size_t ws = kc_matmul_wsize(&kw, 1);
    void *wsp = malloc(ws);
    assert_non_null(wsp);
    assert_int_equal(kc_matmul(NULL, &kw, x, 1, y, wsp, ws), 0);
    kc_quantize_row_q8_0(x, xq, k); /* what kc_matmul saw */

    for (int64_t r = 0; r < m; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        assert_int_equal(kc_dequantize_row(t, row, wf, k), 0);
        double exact = 0.0, mag = 0.0, qerr = 0.0;
        for (int64_t b = 0; b < nb; b++) {
            const double dx = kc_f16_to_f32(xq[b].d);
            for (int j = 0; j < TD_QK; j++) {
                const int64_t i = b * TD_QK + j;
                exact += (double)wf[i] * x[i];
                mag += fabs((double)wf[i] * x[i]);
                /* |x - q dx| <= dx / 2 + |q| |dx - amax / 127| <= dx (1/2 + 127 2^-11) */
                qerr += fabs((double)wf[i]) * dx * (0.5 + 127.0 * 0x1.0p-11);
            }
        }
        const float got = kcu_q_row_dot_emul(t, row, x, nb);
        /* 32 fmaf + 1 multiply per block, nb/32 lane additions, 5 butterfly additions */
        const int64_t lane_adds = nb / 32;
        const double tol = (double)(TD_QK + 1 + lane_adds + 1 + 5) * U32 * mag * 1.01;
        if (!(fabs((double)got - exact) <= tol)) {
            fail_msg("%s k=%lld row %lld: gemv order %a, exact %a, tol %g", td_name(t),
                     (long long)k, (long long)r, (double)got, exact, tol);
        }
        /* kc_matmul: Q8_0 activations; its own rounding is bounded like ours */
        const double tol_cpu = qerr * 1.01 + 2.0 * tol;
        if (!(fabs((double)got - (double)y[r]) <= tol_cpu)) {
            fail_msg("%s k=%lld row %lld: gemv order %a, kc_matmul %a, tol %g", td_name(t),
                     (long long)k, (long long)r, (double)got, (double)y[r], tol_cpu);
        }
    }
    free(wsp);
    free(xq);
    free(wf);
    free(y);
    free(x);
    free(w);
}

static void test_row_dot_q8_0(void **state)
{
    (void)state;
    const int64_t ks[] = {32, 64, 96, 1024, 1056, 4096, 32 * 97};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        check_rows(TD_Q8_0, ks[i], 37);
    }
}

static void test_row_dot_q4_0(void **state)
{
    (void)state;
    const int64_t ks[] = {32, 64, 96, 1024, 1056, 4096, 32 * 97};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        check_rows(TD_Q4_0, ks[i], 37);
    }
}

/* The lane assignment: with one non-zero block the emulation is that block's dot exactly, and
 * a row of nb blocks all equal to 1.0 sums to nb exactly (small integers are exact). */
static void test_row_dot_order(void **state)
{
    (void)state;
    enum { NB = 70 };
    td_block_q8_0 row[NB];
    float x[NB * TD_QK];
    memset(row, 0, sizeof(row));
    for (int i = 0; i < NB * TD_QK; i++) {
        x[i] = frand();
    }
    for (int hot = 0; hot < NB; hot++) {
        memset(row, 0, sizeof(row));
        fill_q8(&row[hot], kc_f32_to_f16(0.5f));
        const float want = kcu_q8_0_dot(&row[hot], x + hot * TD_QK);
        const float got = kcu_q_row_dot_emul(TD_Q8_0, row, x, NB);
        assert_true(same_bits(want, got));
    }
    for (int b = 0; b < NB; b++) {
        row[b].d = kc_f32_to_f16(1.0f);
        for (int j = 0; j < TD_QK; j++) {
            row[b].qs[j] = 1;
        }
    }
    for (int i = 0; i < NB * TD_QK; i++) {
        x[i] = 1.0f / 32.0f;
    }
    assert_true(kcu_q_row_dot_emul(TD_Q8_0, row, x, NB) == (float)NB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_q8_0_bit_exact),
        cmocka_unit_test(test_dequant_q4_0_bit_exact),
        cmocka_unit_test(test_q4_0_nibbles),
        cmocka_unit_test(test_block_dot),
        cmocka_unit_test(test_row_dot_q8_0),
        cmocka_unit_test(test_row_dot_q4_0),
        cmocka_unit_test(test_row_dot_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
