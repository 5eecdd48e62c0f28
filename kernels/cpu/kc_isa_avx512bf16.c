/* BF16 weights against BF16 activations with vdpbf16ps (AVX512_BF16); compiled with its own -m
 * flags and called only at the AVX-512 level on CPUs that have it (kc_bf16_dot_active). ggml does
 * the same on such CPUs (BF16's vec_dot_type is BF16): activations are rounded to BF16 once per
 * matmul (round to nearest even, vcvtneps2bf16), and each instruction adds two products per f32
 * lane, twice the multiply-adds of widening the weights and using vfmadd231ps. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/kc_internal.h"
#include "kernels/cpu/kc_mm_tiles.h"

#define KC_INLINE static inline __attribute__((always_inline))
#define RMB       4 /* tile: rows (decode: 1, one linear stream as kc_isa_avx512.c's RMDEC) */
#define NTB       4 /* tile: tokens (16 accumulators, 4 activations, 1 weight) */

void kc__cvt_bf16_row(const float *x, uint16_t *y, int64_t k)
{
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
        _mm256_storeu_si256((__m256i *)(y + i), (__m256i)h);
    }
    if (i < k) {
        const __mmask16 m = (__mmask16)((1u << (k - i)) - 1u);
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
        _mm256_mask_storeu_epi16(y + i, m, (__m256i)h);
    }
}

KC_INLINE void kc_tile_bf16(const kc__mm *a, tdtype ty, int64_t r0, int nr, int64_t t0, int nt)
{
    (void)ty; /* always BF16 (KC_ROWS_FN passes a type) */
    const int64_t k = a->k;
    const uint16_t *wr[RMB];
    const uint16_t *xr[NTB];
    __m512 acc[NTB][RMB];
    const bool pf = a->pf > 0;
    for (int r = 0; r < nr; r++) {
        wr[r] = (const uint16_t *)(a->w + (size_t)(r0 + r) * a->w_row_bytes);
    }
    for (int t = 0; t < nt; t++) {
        xr[t] = a->xb + (t0 + t) * k;
        for (int r = 0; r < nr; r++) {
            acc[t][r] = _mm512_setzero_ps();
        }
    }
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        __m512bh xv[NTB];
        for (int t = 0; t < nt; t++) {
            xv[t] = (__m512bh)_mm512_loadu_si512(xr[t] + i);
        }
        for (int r = 0; r < nr; r++) {
            if (pf) {
                _mm_prefetch((const char *)(wr[r] + i) + a->pf, _MM_HINT_T0);
            }
            const __m512bh wv = (__m512bh)_mm512_loadu_si512(wr[r] + i);
            for (int t = 0; t < nt; t++) {
                acc[t][r] = _mm512_dpbf16_ps(acc[t][r], wv, xv[t]);
            }
        }
    }
    if (i < k) { /* masked: the missing pair halves are zeros, which add nothing */
        const __mmask32 m = (__mmask32)((1u << (k - i)) - 1u);
        __m512bh xv[NTB];
        for (int t = 0; t < nt; t++) {
            xv[t] = (__m512bh)_mm512_maskz_loadu_epi16(m, xr[t] + i);
        }
        for (int r = 0; r < nr; r++) {
            const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, wr[r] + i);
            for (int t = 0; t < nt; t++) {
                acc[t][r] = _mm512_dpbf16_ps(acc[t][r], wv, xv[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            a->y[(t0 + t) * a->m + r0 + r] = _mm512_reduce_add_ps(acc[t][r]);
        }
    }
}

KC_ROWS_FN(kc_rows_bf16_dp, kc_tile_bf16, RMB, NTB, TD_BF16)
KC_ROWS_FN(kc_rows_bf16_dec, kc_tile_bf16, 1, NTB, TD_BF16)

void kc__bf16_rows(const kc__mm *a, int64_t r0, int64_t r1)
{
    if (a->n <= KC__DECODE_MAX_N) {
        kc_rows_bf16_dec(a, r0, r1);
    } else {
        kc_rows_bf16_dp(a, r0, r1);
    }
}
