/* AVX2 + FMA + F16C kernels; compiled with their own -m flags, called only when the CPU has
 * them (see kc_cpu.c). Float weights: f32 FMA on 8 lanes, a scalar tail after the horizontal
 * sum. Q8_0/Q4_0: per 32-block maddubs/madd integer dot (sign trick) scaled by d_w * d_x. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/kc_internal.h"
#include "kernels/cpu/kc_mm_tiles.h"

#define KC_INLINE       static inline __attribute__((always_inline))
#define KC_PF_MAX_N     4     /* prefetch weights when the matmul has at most this many tokens */
#define KC_PF_DIST      16384 /* bytes ahead, Q8_0/Q4_0 (the thread's rows are contiguous) */
#define KC_PF_DIST_HALF 8192  /* bytes ahead, F16/BF16 (measured best) */
#define RMF             4
#define NTF             3
#define RMQ             2
#define NTQ             3

KC_INLINE float kc_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

KC_INLINE float kc_bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

KC_INLINE __m256 kc_ldw(tdtype ty, const void *p, int64_t i)
{
    if (ty == TD_F32) {
        return _mm256_loadu_ps((const float *)p + i);
    }
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (ty == TD_F16) {
        return _mm256_cvtph_ps(h);
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

KC_INLINE float kc_w1(tdtype ty, const void *p, int64_t i)
{
    if (ty == TD_F32) {
        return ((const float *)p)[i];
    }
    if (ty == TD_F16) {
        return kc_h2f(((const uint16_t *)p)[i]);
    }
    return kc_bf2f(((const uint16_t *)p)[i]);
}

KC_INLINE float kc_hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KC_INLINE void kc_tile_float(const kc__mm *a, tdtype ty, int64_t r0, int nr, int64_t t0, int nt)
{
    const int64_t k = a->k;
    const uint8_t *wr[RMF];
    const float *xr[NTF];
    __m256 acc[NTF][RMF];
    /* decode (few tokens) streams the weights once: prefetch the next row tile */
    const bool pf = ty != TD_F32 && a->n <= KC_PF_MAX_N; /* f32 streams fine unaided */
    const size_t pf_off = KC_PF_DIST_HALF;
    const int64_t esz = ty == TD_F32 ? 4 : 2;
    for (int r = 0; r < nr; r++) {
        wr[r] = a->w + (size_t)(r0 + r) * a->w_row_bytes;
    }
    for (int t = 0; t < nt; t++) {
        xr[t] = a->x + (t0 + t) * k;
        for (int r = 0; r < nr; r++) {
            acc[t][r] = _mm256_setzero_ps();
        }
    }
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 xv[NTF];
        for (int t = 0; t < nt; t++) {
            xv[t] = _mm256_loadu_ps(xr[t] + i);
        }
        for (int r = 0; r < nr; r++) {
            if (pf) {
                _mm_prefetch((const char *)wr[r] + pf_off + i * esz, _MM_HINT_T0);
            }
            const __m256 wv = kc_ldw(ty, wr[r], i);
            for (int t = 0; t < nt; t++) {
                acc[t][r] = _mm256_fmadd_ps(wv, xv[t], acc[t][r]);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            float s = kc_hsum256(acc[t][r]);
            for (int64_t j = i; j < k; j++) {
                s += kc_w1(ty, wr[r], j) * xr[t][j];
            }
            a->y[(t0 + t) * a->m + r0 + r] = s;
        }
    }
}

KC_INLINE void kc_tile_q(const kc__mm *a, int q4, int64_t r0, int nr, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QK;
    const uint8_t *wr[RMQ];
    const td_block_q8_0 *xr[NTQ];
    __m256 acc[NTQ][RMQ];
    const bool pf = a->n <= KC_PF_MAX_N;
    const size_t pf_off = KC_PF_DIST;
    const int64_t bsz = q4 ? (int64_t)sizeof(td_block_q4_0) : (int64_t)sizeof(td_block_q8_0);
    const __m256i lo = _mm256_set1_epi8(0x0F);
    const __m256i eight = _mm256_set1_epi8(8);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < nr; r++) {
        wr[r] = a->w + (size_t)(r0 + r) * a->w_row_bytes;
    }
    for (int t = 0; t < nt; t++) {
        xr[t] = a->xq + (t0 + t) * nb;
        for (int r = 0; r < nr; r++) {
            acc[t][r] = _mm256_setzero_ps();
        }
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        __m256i xv[NTQ];
        float dx[NTQ];
        for (int t = 0; t < nt; t++) {
            xv[t] = _mm256_loadu_si256((const __m256i *)xr[t][ib].qs);
            dx[t] = kc_h2f(xr[t][ib].d);
        }
        for (int r = 0; r < nr; r++) {
            __m256i wq;
            float dw;
            if (pf) {
                _mm_prefetch((const char *)wr[r] + pf_off + ib * bsz, _MM_HINT_T0);
            }
            if (q4) {
                const td_block_q4_0 *b = (const td_block_q4_0 *)wr[r] + ib;
                const __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
                const __m256i v = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
                wq = _mm256_sub_epi8(_mm256_and_si256(v, lo), eight);
                dw = kc_h2f(b->d);
            } else {
                const td_block_q8_0 *b = (const td_block_q8_0 *)wr[r] + ib;
                wq = _mm256_loadu_si256((const __m256i *)b->qs);
                dw = kc_h2f(b->d);
            }
            const __m256i wa = _mm256_abs_epi8(wq);
            for (int t = 0; t < nt; t++) {
                const __m256i sx = _mm256_sign_epi8(xv[t], wq);
                const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, sx), ones);
                acc[t][r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[t]), _mm256_cvtepi32_ps(s), acc[t][r]);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            a->y[(t0 + t) * a->m + r0 + r] = kc_hsum256(acc[t][r]);
        }
    }
}

KC_ROWS_FN(kc_rows_f32, kc_tile_float, RMF, NTF, TD_F32)
KC_ROWS_FN(kc_rows_f16, kc_tile_float, RMF, NTF, TD_F16)
KC_ROWS_FN(kc_rows_bf16, kc_tile_float, RMF, NTF, TD_BF16)
KC_ROWS_FN(kc_rows_q8, kc_tile_q, RMQ, NTQ, 0)
KC_ROWS_FN(kc_rows_q4, kc_tile_q, RMQ, NTQ, 1)

static void kc_mm_rows_avx2(const kc__mm *a, int64_t r0, int64_t r1)
{
    switch (a->type) {
    case TD_F32:
        kc_rows_f32(a, r0, r1);
        break;
    case TD_F16:
        kc_rows_f16(a, r0, r1);
        break;
    case TD_BF16:
        kc_rows_bf16(a, r0, r1);
        break;
    case TD_Q8_0:
        kc_rows_q8(a, r0, r1);
        break;
    case TD_Q4_0:
        kc_rows_q4(a, r0, r1);
        break;
    }
}

static float kc_dot_f32_avx2(const float *x, const float *y, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
    }
    float s = kc_hsum256(acc);
    for (; i < n; i++) {
        s += x[i] * y[i];
    }
    return s;
}

static float kc_dot_f16_avx2(const float *x, const uint16_t *y, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 yv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), yv, acc);
    }
    float s = kc_hsum256(acc);
    for (; i < n; i++) {
        s += x[i] * kc_h2f(y[i]);
    }
    return s;
}

static void kc_axpy_f32_avx2(float *y, float s, const float *x, int64_t n)
{
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(sv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) {
        y[i] += s * x[i];
    }
}

static void kc_axpy_f16_avx2(float *y, float s, const uint16_t *x, int64_t n)
{
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(sv, xv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) {
        y[i] += s * kc_h2f(x[i]);
    }
}

static void kc_quant_q8_avx2(const float *x, td_block_q8_0 *y, int64_t k)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < k / TD_QK; i++) {
        __m256 v[4];
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(x + i * TD_QK + 8 * j);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[j]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        /* ggml's x86 activation quantizer: id = 127 / amax, round half to even */
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int j = 0; j < 4; j++) {
            q[j] = _mm256_cvtps_epi32(_mm256_round_ps(
                _mm256_mul_ps(v[j], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
        const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
        const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
        _mm256_storeu_si256((__m256i *)y[i].qs, b);
    }
}

const kc__isa_ops kc__ops_avx2 = {
    .quant_q8 = kc_quant_q8_avx2,
    .mm_rows = kc_mm_rows_avx2,
    .dot_f32 = kc_dot_f32_avx2,
    .dot_f16 = kc_dot_f16_avx2,
    .axpy_f32 = kc_axpy_f32_avx2,
    .axpy_f16 = kc_axpy_f16_avx2,
};
