/* AVX2 + FMA + F16C kernels; compiled with their own -m flags, called only when the CPU has
 * them (see kc_cpu.c). Float weights: f32 FMA on 8 lanes, a scalar tail after the horizontal
 * sum. Q8_0/Q4_0: per 32-block maddubs/madd integer dot (sign trick) scaled by d_w * d_x. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/kc_internal.h"
#include "kernels/cpu/kc_ops.h"
#include "kernels/cpu/kc_mm_tiles.h"

#define KC_INLINE static inline __attribute__((always_inline))
/* Float tiles are 3 x 3: 9 accumulators, 3 activations and 1 weight fit the 16 ymm registers;
 * 4 x 3 spilled an accumulator to the stack every step (F16 prompt processing at 0.5x). */
#define RMF 3
#define NTF 3
#define RMQ 2
#define NTQ 3

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
    const bool pf = a->pf > 0; /* decode (kc_tune: F32 may stream unaided) */
    const size_t pf_off = a->pf;
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

/* The 32 bytes of fifth bits of a Q5_0/Q5_1 block: 0x10 in byte i where bit i of qh is set. */
KC_INLINE __m256i kc_q5_hbits(const uint8_t qh[4])
{
    uint32_t h;
    memcpy(&h, qh, sizeof(h));
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits),
                            _mm256_set1_epi8(0x10));
}

/* The 32 nibbles of 16 bytes in element order: low nibbles, then high nibbles. */
KC_INLINE __m256i kc_nibbles(const uint8_t *qs)
{
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

/* The integer quants of a 32-element block of a legacy type (as kc__legacy_quants), its scale
 * and, for Q4_1/Q5_1, its minimum. */
KC_INLINE __m256i kc_legacy_block(tdtype ty, const uint8_t *blk, float *d, float *m)
{
    uint16_t h;
    memcpy(&h, blk, sizeof(h));
    *d = kc_h2f(h);
    switch (ty) {
    case TD_Q8_0:
        return _mm256_loadu_si256((const __m256i *)((const td_block_q8_0 *)blk)->qs);
    case TD_Q4_0:
        return _mm256_sub_epi8(kc_nibbles(((const td_block_q4_0 *)blk)->qs), _mm256_set1_epi8(8));
    case TD_Q4_1:
        *m = kc_h2f(((const td_block_q4_1 *)blk)->m);
        return kc_nibbles(((const td_block_q4_1 *)blk)->qs);
    case TD_Q5_0: {
        const td_block_q5_0 *b = (const td_block_q5_0 *)blk;
        return _mm256_sub_epi8(_mm256_or_si256(kc_nibbles(b->qs), kc_q5_hbits(b->qh)),
                               _mm256_set1_epi8(16));
    }
    case TD_Q5_1: {
        const td_block_q5_1 *b = (const td_block_q5_1 *)blk;
        *m = kc_h2f(b->m);
        return _mm256_or_si256(kc_nibbles(b->qs), kc_q5_hbits(b->qh));
    }
    default: { /* IQ4_NL */
        const __m128i tab = _mm_loadu_si128((const __m128i *)td_iq4nl_values);
        return _mm256_shuffle_epi8(_mm256_set_m128i(tab, tab),
                                   kc_nibbles(((const td_block_iq4_nl *)blk)->qs));
    }
    }
}

KC_INLINE void kc_tile_q(const kc__mm *a, tdtype ty, int64_t r0, int nr, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QK;
    const bool q81 = ty == TD_Q4_1 || ty == TD_Q5_1; /* Q8_1 activations, a minimum term */
    const uint8_t *wr[RMQ];
    __m256 acc[NTQ][RMQ];
    float macc[NTQ][RMQ]; /* sum of m * s (Q4_1/Q5_1) */
    const bool pf = a->pf > 0;
    const size_t pf_off = a->pf;
    const int64_t bsz = (int64_t)td_block_bytes(ty);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < nr; r++) {
        wr[r] = a->w + (size_t)(r0 + r) * a->w_row_bytes;
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            acc[t][r] = _mm256_setzero_ps();
            macc[t][r] = 0.0f;
        }
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        __m256i xv[NTQ];
        float dx[NTQ], sx[NTQ];
        for (int t = 0; t < nt; t++) {
            if (q81) {
                const td_block_q8_1 *xb = a->xq1 + (t0 + t) * nb + ib;
                xv[t] = _mm256_loadu_si256((const __m256i *)xb->qs);
                dx[t] = kc_h2f(xb->d);
                sx[t] = kc_h2f(xb->s);
            } else {
                const td_block_q8_0 *xb = a->xq + (t0 + t) * nb + ib;
                xv[t] = _mm256_loadu_si256((const __m256i *)xb->qs);
                dx[t] = kc_h2f(xb->d);
                sx[t] = 0.0f;
            }
        }
        for (int r = 0; r < nr; r++) {
            if (pf) {
                _mm_prefetch((const char *)wr[r] + pf_off + ib * bsz, _MM_HINT_T0);
            }
            float dw, mw = 0.0f;
            const __m256i wq = kc_legacy_block(ty, wr[r] + ib * bsz, &dw, &mw);
            const __m256i wa = _mm256_abs_epi8(wq);
            for (int t = 0; t < nt; t++) {
                const __m256i sxv = _mm256_sign_epi8(xv[t], wq);
                const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, sxv), ones);
                acc[t][r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[t]), _mm256_cvtepi32_ps(s), acc[t][r]);
                if (q81) {
                    macc[t][r] += mw * sx[t];
                }
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            a->y[(t0 + t) * a->m + r0 + r] = kc_hsum256(acc[t][r]) + macc[t][r];
        }
    }
}

/* ---- packed Q4_0 and Q8_0 (kc_weight_prepare's 8-row interleave, see kc_internal.h) ----
 *
 * Each ymm lane is one of 8 rows; the activation bytes of a sub-step are broadcast to all lanes.
 * Q4_0: per sub-step j the raw bytes give the nibbles of elements 4j..4j+3 (low) and 16+4j..
 * (high) of every row; the eight maddubs of a block add up in int16 (|sum| <= 8 * 2 * 15 * 127
 * = 30480: no saturation) before one madd widens each row's lane pair to int32, and the unsigned
 * nibbles (w + 8) are corrected exactly by -8 times the activation block's sum.
 * Q8_0: the layout stores w + 128 (for VNNI); one xor gives w back, and the sign trick (|w|
 * against x with w's sign) keeps maddubs exact (|pair| <= 2 * 128 * 127), so each sub-step
 * widens to int32 at once. */
#define NTP4 2 /* tokens per packed tile (2 groups x 2 tokens: 4 int and 4 f32 accumulators) */

KC_INLINE void kc_tile_pk(const kc__mm *a, int q8, int64_t r0, int ng, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QK;
    const size_t bb = kc__packed_block_bytes(q8 ? TD_Q8_0 : TD_Q4_0);
    const uint8_t *gp[2];
    const td_block_q8_0 *xr[NTP4];
    const int32_t *xs[NTP4];
    __m256 acc[NTP4][2];
    const bool pf = a->pf > 0;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    const __m256i ones = _mm256_set1_epi16(1);
    size_t sb = bb; /* bytes from one block of a group to its next */
    for (int g = 0; g < ng; g++) {
        gp[g] = kc__packed_group(a, r0 + g * KC__PACK_ROWS, nb, bb, &sb);
    }
    for (int t = 0; t < nt; t++) {
        xr[t] = a->xq + (t0 + t) * nb;
        xs[t] = a->xsum + (t0 + t) * nb;
        for (int g = 0; g < ng; g++) {
            acc[t][g] = _mm256_setzero_ps();
        }
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        __m256i s[NTP4][2]; /* Q4_0: int16 pair sums; Q8_0: int32 row sums */
        for (int t = 0; t < nt; t++) {
            for (int g = 0; g < ng; g++) {
                s[t][g] = _mm256_setzero_si256();
            }
        }
        if (pf) {
            for (int g = 0; g < ng; g++) {
                const char *p = (const char *)gp[g] + ib * (int64_t)sb + a->pf;
                for (size_t off = 0; off < bb; off += 64) {
                    _mm_prefetch(p + off, _MM_HINT_T0);
                }
            }
        }
        for (int j = 0; j < (q8 ? 8 : 4); j++) {
            __m256i w0[2], w1[2]; /* Q4_0: low / high nibbles; Q8_0: w / |w| */
            for (int g = 0; g < ng; g++) {
                const __m256i raw =
                    _mm256_loadu_si256((const __m256i *)(gp[g] + ib * sb + 16 + 32 * j));
                if (q8) {
                    w0[g] = _mm256_xor_si256(raw, bias);
                    w1[g] = _mm256_abs_epi8(w0[g]);
                } else {
                    w0[g] = _mm256_and_si256(raw, m4);
                    w1[g] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                }
            }
            for (int t = 0; t < nt; t++) {
                int32_t xl, xh = 0;
                memcpy(&xl, xr[t][ib].qs + 4 * j, sizeof(xl));
                if (!q8) {
                    memcpy(&xh, xr[t][ib].qs + 16 + 4 * j, sizeof(xh));
                }
                const __m256i bl = _mm256_set1_epi32(xl), bh = _mm256_set1_epi32(xh);
                for (int g = 0; g < ng; g++) {
                    if (q8) {
                        const __m256i p = _mm256_maddubs_epi16(w1[g], _mm256_sign_epi8(bl, w0[g]));
                        s[t][g] = _mm256_add_epi32(s[t][g], _mm256_madd_epi16(p, ones));
                    } else {
                        s[t][g] = _mm256_add_epi16(s[t][g], _mm256_maddubs_epi16(w0[g], bl));
                        s[t][g] = _mm256_add_epi16(s[t][g], _mm256_maddubs_epi16(w1[g], bh));
                    }
                }
            }
        }
        for (int g = 0; g < ng; g++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp[g] + ib * sb)));
            for (int t = 0; t < nt; t++) {
                const __m256i isum = q8 ? s[t][g]
                                        : _mm256_sub_epi32(_mm256_madd_epi16(s[t][g], ones),
                                                           _mm256_set1_epi32(8 * xs[t][ib]));
                const __m256 dwx = _mm256_mul_ps(dw, _mm256_set1_ps(kc_h2f(xr[t][ib].d)));
                acc[t][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dwx, acc[t][g]);
            }
        }
    }
    for (int g = 0; g < ng; g++) {
        const int64_t row = r0 + (int64_t)g * KC__PACK_ROWS;
        const int64_t valid = a->m - row < KC__PACK_ROWS ? a->m - row : KC__PACK_ROWS;
        for (int t = 0; t < nt; t++) {
            float out[KC__PACK_ROWS];
            _mm256_storeu_ps(out, acc[t][g]);
            memcpy(a->y + (t0 + t) * a->m + row, out, sizeof(float) * (size_t)valid);
        }
    }
}

/* Rows [r0, r1) (r0 a multiple of 8) of a packed weight: 2 groups of 8 rows at a time. */
KC_INLINE void kc_rows_pk(const kc__mm *a, int q8, int64_t r0, int64_t r1)
{
    for (int64_t tb = 0; tb < a->n; tb += KC_TB) {
        const int64_t te = tb + KC_TB < a->n ? tb + KC_TB : a->n;
        for (int64_t r = r0; r < r1; r += 2 * KC__PACK_ROWS) {
            const int ng = r + KC__PACK_ROWS < r1 ? 2 : 1;
            int64_t t = tb;
            for (; t + NTP4 <= te; t += NTP4) {
                if (ng == 2) {
                    kc_tile_pk(a, q8, r, 2, t, NTP4);
                } else {
                    kc_tile_pk(a, q8, r, 1, t, NTP4);
                }
            }
            if (t < te) {
                if (ng == 2) {
                    kc_tile_pk(a, q8, r, 2, t, 1);
                } else {
                    kc_tile_pk(a, q8, r, 1, t, 1);
                }
            }
        }
    }
}

static void kc_rows_pk4(const kc__mm *a, int64_t r0, int64_t r1)
{
    kc_rows_pk(a, 0, r0, r1);
}

static void kc_rows_pk8(const kc__mm *a, int64_t r0, int64_t r1)
{
    kc_rows_pk(a, 1, r0, r1);
}

/* ---- K-quants and IQ4_XS against Q8_K activations ----
 *
 * A super-block is 8 groups of 32 elements. Per group the weights decode to 32 bytes w (unsigned
 * for Q2_K/Q4_K/Q5_K/Q6_K, signed for Q3_K/IQ4_XS) and a vector of 16 int16 scales s (the first 8
 * for elements 0..15, the last 8 for 16..31), and each token adds madd(maddubs(w, x), s) to its
 * int32 sum: exactly sum_j sc_j * sum(q * x) over the sub-blocks. Q6_K's offset of 32 and the
 * minimums of Q2_K/Q4_K/Q5_K are applied per super-block through the activations' 16-element
 * sums (bsums), in int32 for Q6_K and as a second float term for the minimums. */

/* Per-row, per-super-block state: what the groups and the corrections need. */
typedef struct kc_ksb {
    const uint8_t *blk;
    float d, dmin;
    __m256i sc16;     /* scale per 16 elements, int16 */
    __m256i slo, shi; /* sc16's low / high half in both 128-bit lanes */
    __m256i mins16;   /* minimum per 16 elements (Q2_K/Q4_K/Q5_K) */
    __m256i qh;       /* Q5_K fifth bits, Q3_K high bits */
} kc_ksb;

/* 16 int16 of 8 bytes each repeated twice: b0 b0 b1 b1 ... b7 b7 (bytes 8 .. 15 of v when hi). */
KC_INLINE __m256i kc_dup8_epu8(__m128i v, int hi)
{
    const __m128i lo_idx = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m128i idx = hi ? _mm_add_epi8(lo_idx, _mm_set1_epi8(8)) : lo_idx;
    return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, idx));
}

KC_INLINE void kc_ksb_load(tdtype ty, const uint8_t *blk, kc_ksb *s)
{
    s->blk = blk;
    s->dmin = 0.0f;
    switch (ty) {
    case TD_Q4_K:
    case TD_Q5_K: {
        /* Q4_K and Q5_K share the d, dmin and scales offsets. The 12 bytes of 6-bit scales and
         * mins unpack to bytes 0..7 (scales) and 8..15 (mins), as kc__k4_scales. */
        /* in 32-bit lanes, from the 12 bytes u0 u1 u2 (and 4 bytes of qs after them):
         * [u0 & m6, (u2 & m4) | ((u0 >> 6) & m2) << 4, u1 & m6, ((u2 >> 4) & m4) | ((u1 >> 6)
         * & m2) << 4], all in registers (scalar stores then a vector load stall on store
         * forwarding) */
        const td_block_q4_k *b = (const td_block_q4_k *)blk;
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales);
        const __m128i a = _mm_shuffle_epi32(raw, _MM_SHUFFLE(2, 1, 2, 0)); /* u0 u2 u1 u2 */
        const __m128i c = _mm_shuffle_epi32(raw, _MM_SHUFFLE(1, 1, 0, 0)); /* u0 u0 u1 u1 */
        const __m128i lo = _mm_and_si128(a, _mm_set1_epi8(0x3f));
        const __m128i hi = _mm_or_si128(
            _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)), _mm_set1_epi8(0x0f)),
            _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(c, 6), _mm_set1_epi8(0x03)), 4));
        const __m128i v = _mm_blend_epi32(lo, hi, 0xA);
        s->sc16 = kc_dup8_epu8(v, 0);
        s->mins16 = kc_dup8_epu8(v, 1);
        s->d = kc_h2f(b->d);
        s->dmin = kc_h2f(b->dmin);
        if (ty == TD_Q5_K) {
            s->qh = _mm256_loadu_si256((const __m256i *)((const td_block_q5_k *)blk)->qh);
        }
        break;
    }
    case TD_Q6_K: {
        const td_block_q6_k *b = (const td_block_q6_k *)blk;
        s->d = kc_h2f(b->d);
        s->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        break;
    }
    case TD_Q2_K: {
        const td_block_q2_k *b = (const td_block_q2_k *)blk;
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        s->d = kc_h2f(b->d);
        s->dmin = kc_h2f(b->dmin);
        s->sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, m4));
        s->mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        s->qh = _mm256_setzero_si256();
        break;
    }
    case TD_Q3_K: {
        /* kc__q3k_scales in registers: low nibbles of bytes 0..7 then their high nibbles, each
         * with two bits of byte 8 + j % 4 (shifted by 2 (j / 4)) on top, minus 32 */
        const td_block_q3_k *b = (const td_block_q3_k *)blk;
        uint32_t h4;
        memcpy(&h4, b->scales + 8, sizeof(h4));
        const __m128i lo8 = _mm_loadl_epi64((const __m128i *)b->scales);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m128i nib =
            _mm_unpacklo_epi64(_mm_and_si128(lo8, m4), _mm_and_si128(_mm_srli_epi16(lo8, 4), m4));
        const __m128i hb = _mm_and_si128(
            _mm_srlv_epi32(_mm_set1_epi32((int)h4), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
        const __m128i u = _mm_or_si128(nib, _mm_slli_epi16(hb, 4));
        s->d = kc_h2f(b->d);
        s->sc16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(u), _mm256_set1_epi16(32));
        s->qh = _mm256_loadu_si256((const __m256i *)b->hmask);
        break;
    }
    default: { /* IQ4_XS */
        /* scale ib: nibble ib of scales_l (low first) | bits 2 ib, 2 ib + 1 of scales_h << 4 */
        const td_block_iq4_xs *b = (const td_block_iq4_xs *)blk;
        uint32_t l4;
        memcpy(&l4, b->scales_l, sizeof(l4));
        const __m128i sl = _mm_cvtsi32_si128((int)l4);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        const __m128i nib =
            _mm_unpacklo_epi8(_mm_and_si128(sl, m4), _mm_and_si128(_mm_srli_epi16(sl, 4), m4));
        const __m128i sh = _mm_set1_epi32(b->scales_h);
        const __m128i m2 = _mm_set1_epi32(3); /* masked before packing: no saturation */
        const __m128i h0 = _mm_and_si128(_mm_srlv_epi32(sh, _mm_setr_epi32(0, 2, 4, 6)), m2);
        const __m128i h1 = _mm_and_si128(_mm_srlv_epi32(sh, _mm_setr_epi32(8, 10, 12, 14)), m2);
        const __m128i hw = _mm_packs_epi32(h0, h1);
        const __m128i hb = _mm_packus_epi16(hw, hw); /* bytes 0..7: the bits of ib 0..7 */
        const __m128i ls = _mm_or_si128(nib, _mm_slli_epi16(hb, 4));
        s->d = kc_h2f(b->d);
        s->sc16 = _mm256_sub_epi16(kc_dup8_epu8(ls, 0), _mm256_set1_epi16(32));
        break;
    }
    }
    s->slo = _mm256_permute2x128_si256(s->sc16, s->sc16, 0x00);
    s->shi = _mm256_permute2x128_si256(s->sc16, s->sc16, 0x11);
}

/* The scale vector of group g: sc16[2g] in the low 128-bit lane (elements 0..15 of the group),
 * sc16[2g + 1] in the high lane. */
KC_INLINE __m256i kc_ksb_scales(const kc_ksb *s, int g)
{
    const int w = (2 * g) % 8; /* word of the half that holds sc16[2g] */
    const __m256i idx = _mm256_set_m128i(_mm_set1_epi16((short)(((2 * w + 3) << 8) | (2 * w + 2))),
                                         _mm_set1_epi16((short)(((2 * w + 1) << 8) | (2 * w))));
    return _mm256_shuffle_epi8(g < 4 ? s->slo : s->shi, idx);
}

/* 2-bit field f (0..3) of 32 bytes, as bytes. */
KC_INLINE __m256i kc_bits2(__m256i v, int f)
{
    return _mm256_and_si256(_mm256_srli_epi16(v, 2 * f), _mm256_set1_epi8(3));
}

/* The 32 quants of group g (elements 32g .. 32g + 31). */
KC_INLINE __m256i kc_ksb_group(tdtype ty, const kc_ksb *s, int g)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    switch (ty) {
    case TD_Q4_K:
    case TD_Q5_K: {
        const uint8_t *qs = ty == TD_Q4_K ? ((const td_block_q4_k *)s->blk)->qs
                                          : ((const td_block_q5_k *)s->blk)->qs;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * (g / 2)));
        __m256i q = _mm256_and_si256(g % 2 ? _mm256_srli_epi16(raw, 4) : raw, m4);
        if (ty == TD_Q5_K) { /* bit g of qh[l] is element 32g + l's fifth bit: move it to bit 4
                              * (16-bit shifts; the mask drops what crosses bytes) */
            const __m256i h =
                g <= 4 ? _mm256_slli_epi16(s->qh, 4 - g) : _mm256_srli_epi16(s->qh, g - 4);
            q = _mm256_or_si256(q, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
        }
        return q;
    }
    case TD_Q6_K: { /* unsigned 0..63; the 32 is subtracted per super-block */
        const td_block_q6_k *b = (const td_block_q6_k *)s->blk;
        const int h = g / 4, j = g % 4; /* elements 128h + 32j + l */
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (j % 2)));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m256i lo = _mm256_and_si256(j < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
        return _mm256_or_si256(lo, _mm256_slli_epi16(kc_bits2(qh, j), 4));
    }
    case TD_Q2_K: {
        const td_block_q2_k *b = (const td_block_q2_k *)s->blk;
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (g / 4)));
        return kc_bits2(q, g % 4);
    }
    case TD_Q3_K: { /* signed: low two bits minus 4 where the high bit is clear */
        const td_block_q3_k *b = (const td_block_q3_k *)s->blk;
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (g / 4)));
        const __m256i bit = _mm256_set1_epi8((char)(1 << g));
        const __m256i clear =
            _mm256_cmpeq_epi8(_mm256_and_si256(s->qh, bit), _mm256_setzero_si256());
        return _mm256_sub_epi8(kc_bits2(q, g % 4), _mm256_and_si256(clear, _mm256_set1_epi8(4)));
    }
    default: { /* IQ4_XS, signed codebook values */
        const td_block_iq4_xs *b = (const td_block_iq4_xs *)s->blk;
        const __m128i tab = _mm_loadu_si128((const __m128i *)td_iq4nl_values);
        return _mm256_shuffle_epi8(_mm256_set_m128i(tab, tab), kc_nibbles(b->qs + 16 * g));
    }
    }
}

KC_INLINE bool kc_k_signed(tdtype ty)
{
    return ty == TD_Q3_K || ty == TD_IQ4_XS;
}

#define RMK 1 /* prompt tiles: 1 row x 4 tokens (the decode dominates; no row reuse) */
#define NTK 4
/* decode tiles (n <= KC__DECODE_MAX_N): 2 rows x 1 token, two independent chains */
#define RMKD 2
#define NTKD 1

/* One super-block of row r against tokens [t0, t0 + nt): adds to acc[0 .. nt). */
KC_INLINE void kc_k_block(const kc__mm *a, tdtype ty, const uint8_t *blk, int64_t ib, int64_t nb,
                          int64_t t0, int nt, __m256 *acc)
{
    const bool has_min = ty == TD_Q2_K || ty == TD_Q4_K || ty == TD_Q5_K;
    kc_ksb sb;
    kc_ksb_load(ty, blk, &sb);
    const td_block_q8_k *xb[NTK];
    __m256i isum[NTK];
    for (int t = 0; t < nt; t++) {
        xb[t] = a->xqk + (t0 + t) * nb + ib;
        isum[t] = _mm256_setzero_si256();
    }
    for (int g = 0; g < 8; g++) {
        const __m256i w = kc_ksb_group(ty, &sb, g);
        const __m256i sv = kc_ksb_scales(&sb, g);
        const __m256i wa = kc_k_signed(ty) ? _mm256_abs_epi8(w) : w;
        for (int t = 0; t < nt; t++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xb[t]->qs + 32 * g));
            if (kc_k_signed(ty)) {
                xv = _mm256_sign_epi8(xv, w);
            }
            const __m256i p = _mm256_maddubs_epi16(wa, xv);
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sv));
        }
    }
    for (int t = 0; t < nt; t++) {
        const __m256i bs = _mm256_loadu_si256((const __m256i *)xb[t]->bsums);
        if (ty == TD_Q6_K) { /* sum (q - 32) x = sum q x - 32 sum x, per scale */
            isum[t] =
                _mm256_sub_epi32(isum[t], _mm256_slli_epi32(_mm256_madd_epi16(bs, sb.sc16), 5));
        }
        const float dx = xb[t]->d;
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * sb.d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        if (has_min) {
            const __m256i ms = _mm256_madd_epi16(bs, sb.mins16);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-dx * sb.dmin), _mm256_cvtepi32_ps(ms), acc[t]);
        }
    }
}

/* Rows [r0, r0 + nr) x tokens [t0, t0 + nt), super-block by super-block with the rows
 * interleaved: each (row, token) pair gets the same operations in the same order whatever nr
 * and nt are. */
KC_INLINE void kc_tile_k(const kc__mm *a, tdtype ty, int64_t r0, int nr, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QKK;
    const bool pf = a->pf > 0;
    const int64_t bsz = (int64_t)td_block_bytes(ty);
    const uint8_t *wr[RMKD > RMK ? RMKD : RMK];
    __m256 acc[RMKD > RMK ? RMKD : RMK][NTK];
    for (int r = 0; r < nr; r++) {
        wr[r] = a->w + (size_t)(r0 + r) * a->w_row_bytes;
        for (int t = 0; t < nt; t++) {
            acc[r][t] = _mm256_setzero_ps();
        }
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        for (int r = 0; r < nr; r++) {
            const uint8_t *blk = wr[r] + ib * bsz;
            if (pf) {
                for (int64_t off = 0; off < bsz; off += 64) {
                    _mm_prefetch((const char *)blk + a->pf + off, _MM_HINT_T0);
                }
            }
            kc_k_block(a, ty, blk, ib, nb, t0, nt, acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) {
        for (int t = 0; t < nt; t++) {
            a->y[(t0 + t) * a->m + r0 + r] = kc_hsum256(acc[r][t]);
        }
    }
}

KC_ROWS_FN(kc_rows_f32, kc_tile_float, RMF, NTF, TD_F32)
KC_ROWS_FN(kc_rows_f16, kc_tile_float, RMF, NTF, TD_F16)
KC_ROWS_FN(kc_rows_bf16, kc_tile_float, RMF, NTF, TD_BF16)
KC_ROWS_FN(kc_rows_q8, kc_tile_q, RMQ, NTQ, TD_Q8_0)
KC_ROWS_FN(kc_rows_q4, kc_tile_q, RMQ, NTQ, TD_Q4_0)
KC_ROWS_FN(kc_rows_q4_1, kc_tile_q, RMQ, NTQ, TD_Q4_1)
KC_ROWS_FN(kc_rows_q5_0, kc_tile_q, RMQ, NTQ, TD_Q5_0)
KC_ROWS_FN(kc_rows_q5_1, kc_tile_q, RMQ, NTQ, TD_Q5_1)
KC_ROWS_FN(kc_rows_iq4_nl, kc_tile_q, RMQ, NTQ, TD_IQ4_NL)
KC_ROWS_FN(kc_rows_q2_k, kc_tile_k, RMK, NTK, TD_Q2_K)
KC_ROWS_FN(kc_rows_q2_k_dec, kc_tile_k, RMKD, NTKD, TD_Q2_K)
KC_ROWS_FN(kc_rows_q3_k, kc_tile_k, RMK, NTK, TD_Q3_K)
KC_ROWS_FN(kc_rows_q3_k_dec, kc_tile_k, RMKD, NTKD, TD_Q3_K)
KC_ROWS_FN(kc_rows_q4_k, kc_tile_k, RMK, NTK, TD_Q4_K)
KC_ROWS_FN(kc_rows_q4_k_dec, kc_tile_k, RMKD, NTKD, TD_Q4_K)
KC_ROWS_FN(kc_rows_q5_k, kc_tile_k, RMK, NTK, TD_Q5_K)
KC_ROWS_FN(kc_rows_q5_k_dec, kc_tile_k, RMKD, NTKD, TD_Q5_K)
KC_ROWS_FN(kc_rows_q6_k, kc_tile_k, RMK, NTK, TD_Q6_K)
KC_ROWS_FN(kc_rows_q6_k_dec, kc_tile_k, RMKD, NTKD, TD_Q6_K)
KC_ROWS_FN(kc_rows_iq4_xs, kc_tile_k, RMK, NTK, TD_IQ4_XS)
KC_ROWS_FN(kc_rows_iq4_xs_dec, kc_tile_k, RMKD, NTKD, TD_IQ4_XS)

#define KC_PKK_VNNI 0
#include "kernels/cpu/kc_pk_k.h"

/* A K type's case: the packed kernel for a prepared weight; otherwise the 2-row decode tiles for
 * a few tokens, the 1 x 4 prompt tiles for more. */
#define KC_K_CASE(T, rows)                                                                         \
    case T:                                                                                        \
        if (a->packed) {                                                                           \
            kc_rows_pkk(a, r0, r1);                                                                \
        } else if (a->n <= KC__DECODE_MAX_N) {                                                     \
            rows##_dec(a, r0, r1);                                                                 \
        } else {                                                                                   \
            rows(a, r0, r1);                                                                       \
        }                                                                                          \
        break

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
        if (a->packed) {
            kc_rows_pk8(a, r0, r1);
        } else {
            kc_rows_q8(a, r0, r1);
        }
        break;
    case TD_Q4_0:
        if (a->packed) {
            kc_rows_pk4(a, r0, r1);
        } else {
            kc_rows_q4(a, r0, r1);
        }
        break;
    case TD_Q4_1:
        kc_rows_q4_1(a, r0, r1);
        break;
    case TD_Q5_0:
        kc_rows_q5_0(a, r0, r1);
        break;
    case TD_Q5_1:
        kc_rows_q5_1(a, r0, r1);
        break;
    case TD_IQ4_NL:
        kc_rows_iq4_nl(a, r0, r1);
        break;
        KC_K_CASE(TD_Q2_K, kc_rows_q2_k);
        KC_K_CASE(TD_Q3_K, kc_rows_q3_k);
        KC_K_CASE(TD_Q4_K, kc_rows_q4_k);
        KC_K_CASE(TD_Q5_K, kc_rows_q5_k);
        KC_K_CASE(TD_Q6_K, kc_rows_q6_k);
        KC_K_CASE(TD_IQ4_XS, kc_rows_iq4_xs);
    default:
        kc__ops_scalar.mm_rows(a, r0, r1);
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

/* e^x for x <= 0 (the softmax's exponents), ~1 ulp: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2
 * split in two for an exact n ln 2), e^r by its degree-6 Taylor polynomial (error below r^7 / 7!
 * = 1.2e-7), times 2^n through the exponent bits. Below -87.3 (and for -inf) the result is 0. */
KC_INLINE __m256 kc_exp_neg(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 y = _mm256_set1_ps(1.0f / 720.0f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 120.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 24.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 6.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

/* The 8 horizontal sums of a[0..7], lane p = sum of a[p] (each in the same order). */
KC_INLINE __m256 kc_hsum8x8(const __m256 a[8])
{
    const __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
    /* lanes: [a0 a1 a2 a3 | a0 a1 a2 a3] halves of the low / high 128 bits of each */
    const __m256 lo = _mm256_permute2f128_ps(s0123, s4567, 0x20);
    const __m256 hi = _mm256_permute2f128_ps(s0123, s4567, 0x31);
    return _mm256_add_ps(lo, hi);
}

KC_INLINE __m256 kc_kv8(const void *row, bool f16, int d)
{
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)))
               : _mm256_loadu_ps((const float *)row + d);
}

/*
 * A tile of up to 8 (token, head) pairs against one KV head: per KV block, the scores of every
 * key for all pairs (one lane each; the key row is read once), the block's max per lane, the
 * correction, e^(s - m) by kc_exp_neg, then the values folded into each pair's accumulator with
 * the value row read once per 8 dims. Lanes outside a pair's key range contribute exact zeros.
 */
static bool kc_attn_tile_avx2(const kc__attn_tile *t)
{
    const int hd = t->head_dim, bs = t->block_size, np = t->np;
    if (hd % 8 != 0 || hd > KC_ATTN_MAX_HEAD_DIM || np < 1 || np > 8) {
        return false;
    }
    const size_t esz = t->f16 ? 2 : 4;
    _Alignas(32) float acc[8][KC_ATTN_MAX_HEAD_DIM];
    _Alignas(32) float sc[KC_ATTN_MAX_BLOCK][8];
    _Alignas(32) float lanes_first[8], lanes_end[8];
    int32_t lo = INT32_MAX, hi = 0;
    for (int p = 0; p < 8; p++) {
        const bool on = p < np;
        lanes_first[p] = on ? (float)t->first[p] : 0.0f;
        lanes_end[p] = on ? (float)t->end[p] : 0.0f; /* an empty range for unused lanes */
        if (on) {
            lo = t->first[p] < lo ? t->first[p] : lo;
            hi = t->end[p] > hi ? t->end[p] : hi;
        }
        memset(acc[p], 0, sizeof(float) * (size_t)hd);
    }
    const __m256 vfirst = _mm256_load_ps(lanes_first), vend = _mm256_load_ps(lanes_end);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m = ninf, l = _mm256_setzero_ps();
    for (int32_t b = lo / bs; b * bs < hi; b++) {
        const int32_t j0 = b * bs > lo ? b * bs : lo;
        const int32_t j1 = (b + 1) * bs < hi ? (b + 1) * bs : hi;
        const size_t base =
            (((size_t)t->block_table[b] * (size_t)t->n_head_kv + (size_t)t->hk) * (size_t)bs) *
            (size_t)hd * esz;
        const uint8_t *kb = (const uint8_t *)t->k + base, *vb = (const uint8_t *)t->v + base;
        __m256 bmax = ninf;
        for (int32_t j = j0; j < j1; j++) {
            const void *kr = kb + (size_t)(j - b * bs) * (size_t)hd * esz;
            __m256 dot[8];
            for (int p = 0; p < 8; p++) {
                dot[p] = _mm256_setzero_ps();
            }
            for (int d = 0; d < hd; d += 8) {
                const __m256 kv = kc_kv8(kr, t->f16, d);
                for (int p = 0; p < np; p++) {
                    dot[p] = _mm256_fmadd_ps(_mm256_loadu_ps(t->q[p] + d), kv, dot[p]);
                }
            }
            __m256 s = _mm256_mul_ps(kc_hsum8x8(dot), _mm256_set1_ps(t->scale));
            if (t->softcap != 0.0f) {
                _Alignas(32) float tmp[8];
                _mm256_store_ps(tmp, s);
                for (int p = 0; p < 8; p++) {
                    tmp[p] = tanhf(tmp[p] * (1.0f / t->softcap)) * t->softcap;
                }
                s = _mm256_load_ps(tmp);
            }
            const __m256 jf = _mm256_set1_ps((float)j);
            const __m256 in = _mm256_and_ps(_mm256_cmp_ps(jf, vfirst, _CMP_GE_OQ),
                                            _mm256_cmp_ps(jf, vend, _CMP_LT_OQ));
            s = _mm256_blendv_ps(ninf, s, in);
            _mm256_store_ps(sc[j - j0], s);
            bmax = _mm256_max_ps(bmax, s);
        }
        /* lanes whose block max rose rescale what they have; -inf - -inf stays untouched */
        const __m256 up = _mm256_cmp_ps(bmax, m, _CMP_GT_OQ);
        const __m256 corr =
            _mm256_blendv_ps(_mm256_set1_ps(1.0f), kc_exp_neg(_mm256_sub_ps(m, bmax)), up);
        m = _mm256_blendv_ps(m, bmax, up);
        l = _mm256_mul_ps(l, corr);
        _Alignas(32) float cf[8];
        _mm256_store_ps(cf, corr);
        for (int32_t j = j0; j < j1; j++) {
            /* e^(s - m); lanes with no key yet (m = -inf) or outside their range give 0 */
            const __m256 s = _mm256_load_ps(sc[j - j0]);
            const __m256 valid = _mm256_cmp_ps(s, ninf, _CMP_GT_OQ);
            const __m256 e = _mm256_and_ps(valid, kc_exp_neg(_mm256_sub_ps(s, m)));
            l = _mm256_add_ps(l, e);
            _mm256_store_ps(sc[j - j0], e);
        }
        for (int d = 0; d < hd; d += 8) {
            __m256 a[8];
            for (int p = 0; p < np; p++) {
                a[p] = _mm256_mul_ps(_mm256_load_ps(acc[p] + d), _mm256_set1_ps(cf[p]));
            }
            for (int32_t j = j0; j < j1; j++) {
                const __m256 vv = kc_kv8(vb + (size_t)(j - b * bs) * (size_t)hd * esz, t->f16, d);
                for (int p = 0; p < np; p++) {
                    a[p] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[j - j0][p]), vv, a[p]);
                }
            }
            for (int p = 0; p < np; p++) {
                _mm256_store_ps(acc[p] + d, a[p]);
            }
        }
    }
    _Alignas(32) float lf[8];
    _mm256_store_ps(lf, l);
    for (int p = 0; p < np; p++) {
        const __m256 inv = _mm256_set1_ps(1.0f / lf[p]);
        for (int d = 0; d < hd; d += 8) {
            _mm256_storeu_ps(t->out[p] + d, _mm256_mul_ps(_mm256_load_ps(acc[p] + d), inv));
        }
    }
    return true;
}

/* silu(g) * u with sigmoid(g) from e = e^-|g| (kc_exp_neg's range): 1 / (1 + e) for g >= 0,
 * e / (1 + e) below; the tail as the scalar level. */
static void kc_swiglu_avx2(const float *gate, const float *up, float *y, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = kc_exp_neg(_mm256_or_ps(g, sign));
        const __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
        const __m256 pos = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GE_OQ);
        const __m256 sig = _mm256_blendv_ps(_mm256_mul_ps(e, r), r, pos);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        const float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
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

/* kc__quantize_q8k_ref with 8 lanes: the same products, the same rounding (half to even) and
 * clamp, so the same bytes. */
void kc__quantize_q8k_avx2(const float *x, td_block_q8_k *y, int64_t k)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < k / TD_QKK; i++) {
        const float *xb = x + i * TD_QKK;
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < TD_QKK; j += 8) {
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        /* the first element of that magnitude, as the reference's strict > keeps it */
        float max = 0.0f;
        const __m256 av = _mm256_set1_ps(amax);
        for (int j = 0; j < TD_QKK; j += 8) {
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)), av, _CMP_EQ_OQ));
            if (hit) {
                max = xb[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i q127 = _mm256_set1_epi32(127);
        for (int j = 0; j < TD_QKK; j += 32) {
            __m256i q[4];
            for (int v = 0; v < 4; v++) {
                const __m256 p = _mm256_mul_ps(is, _mm256_loadu_ps(xb + j + 8 * v));
                q[v] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(
                                            p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                                        q127);
            }
            const __m256i b = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
                perm);
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), b);
            /* the two 16-element sums: bytes -> pairs -> quads, then each 128-bit half */
            const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), b),
                                                 _mm256_set1_epi16(1));
            const __m256i s2 = _mm256_hadd_epi32(s4, s4);
            const __m256i s1 = _mm256_hadd_epi32(s2, s2);
            y[i].bsums[j / 16] = (int16_t)_mm256_extract_epi32(s1, 0);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm256_extract_epi32(s1, 4);
        }
        y[i].d = 1.0f / iscale;
    }
}

const kc__isa_ops kc__ops_avx2 = {
    .quant_q8 = kc_quant_q8_avx2,
    .quant_q8k = kc__quantize_q8k_avx2,
    .mm_rows = kc_mm_rows_avx2,
    .dot_f32 = kc_dot_f32_avx2,
    .dot_f16 = kc_dot_f16_avx2,
    .axpy_f32 = kc_axpy_f32_avx2,
    .axpy_f16 = kc_axpy_f16_avx2,
    .attn_tile = kc_attn_tile_avx2,
    .attn_tile_np = 8,
    .swiglu = kc_swiglu_avx2,
};
