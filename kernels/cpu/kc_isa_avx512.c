/* AVX-512 (F/BW/VL/VNNI) kernels; compiled with their own -m flags, called only when the CPU
 * has them (see kc_cpu.c). Float weights: f32 FMA on 16 lanes, tails masked. Q8_0/Q4_0 weights:
 * per 32-block integer dot with vpdpbusd (sign trick) scaled by d_w * d_x into 8 f32 lanes. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/kc_internal.h"
#include "kernels/cpu/kc_mm_tiles.h"
#include "kernels/cpu/kc_ops.h"

#define KC_INLINE static inline __attribute__((always_inline))
/* Decode (n <= KC__DECODE_MAX_N) takes float rows one at a time, so the weights are read as one
 * linear stream: on Zen 5 that ran F16 at about 85 % of the read bandwidth (kc_bench --stream)
 * against about 60 % for the 4 interleaved row streams of a 4-row tile. Each (row, token) pair
 * gets the same instructions either way. */
#define RMDEC 1
#define RMF   4 /* float tiles: rows */
#define NTF   4 /* float tiles: tokens */
#define RMQ   4
#define NTQ   4

KC_INLINE float kc_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

KC_INLINE __m512 kc_ldw(tdtype ty, const void *p, int64_t i)
{
    if (ty == TD_F32) {
        return _mm512_loadu_ps((const float *)p + i);
    }
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    if (ty == TD_F16) {
        return _mm512_cvtph_ps(h);
    }
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

KC_INLINE __m512 kc_ldw_mask(tdtype ty, const void *p, int64_t i, __mmask16 m)
{
    if (ty == TD_F32) {
        return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    }
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    if (ty == TD_F16) {
        return _mm512_cvtph_ps(h);
    }
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

KC_INLINE void kc_tile_float(const kc__mm *a, tdtype ty, int64_t r0, int nr, int64_t t0, int nt)
{
    const int64_t k = a->k;
    const uint8_t *wr[RMF];
    const float *xr[NTF];
    __m512 acc[NTF][RMF];
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
            acc[t][r] = _mm512_setzero_ps();
        }
    }
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512 xv[NTF];
        for (int t = 0; t < nt; t++) {
            xv[t] = _mm512_loadu_ps(xr[t] + i);
        }
        for (int r = 0; r < nr; r++) {
            if (pf) {
                _mm_prefetch((const char *)wr[r] + pf_off + i * esz, _MM_HINT_T0);
            }
            const __m512 wv = kc_ldw(ty, wr[r], i);
            for (int t = 0; t < nt; t++) {
                acc[t][r] = _mm512_fmadd_ps(wv, xv[t], acc[t][r]);
            }
        }
    }
    if (i < k) {
        const __mmask16 m = (__mmask16)((1u << (k - i)) - 1u);
        __m512 xv[NTF];
        for (int t = 0; t < nt; t++) {
            xv[t] = _mm512_maskz_loadu_ps(m, xr[t] + i);
        }
        for (int r = 0; r < nr; r++) {
            const __m512 wv = kc_ldw_mask(ty, wr[r], i, m);
            for (int t = 0; t < nt; t++) {
                acc[t][r] = _mm512_fmadd_ps(wv, xv[t], acc[t][r]);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            a->y[(t0 + t) * a->m + r0 + r] = _mm512_reduce_add_ps(acc[t][r]);
        }
    }
}

KC_INLINE float kc_hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KC_INLINE void kc_tile_q(const kc__mm *a, int q4, int64_t r0, int nr, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QK;
    const uint8_t *wr[RMQ];
    const td_block_q8_0 *xr[NTQ];
    __m256 acc[NTQ][RMQ];
    const bool pf = a->pf > 0;
    const size_t pf_off = a->pf;
    const int64_t bsz = q4 ? (int64_t)sizeof(td_block_q4_0) : (int64_t)sizeof(td_block_q8_0);
    const __m256i lo = _mm256_set1_epi8(0x0F);
    const __m256i eight = _mm256_set1_epi8(8);
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
        __m256i xv[NTQ], negc[NTQ];
        __m256 dxv[NTQ];
        for (int t = 0; t < nt; t++) {
            xv[t] = _mm256_loadu_si256((const __m256i *)xr[t][ib].qs);
            dxv[t] = _mm256_set1_ps(kc_h2f(xr[t][ib].d));
            if (q4) {
                /* Q4_0 nibbles u = w + 8 are unsigned: sum(w x) = dpbusd(u, x) - 8 sum(x), so
                 * the lane sums start from -8 sum(x) (exact integers, same as the sign trick) */
                negc[t] =
                    _mm256_sub_epi32(_mm256_setzero_si256(),
                                     _mm256_dpbusd_epi32(_mm256_setzero_si256(), eight, xv[t]));
            }
        }
        for (int r = 0; r < nr; r++) {
            if (pf) {
                _mm_prefetch((const char *)wr[r] + pf_off + ib * bsz, _MM_HINT_T0);
            }
            if (q4) {
                const td_block_q4_0 *b = (const td_block_q4_0 *)wr[r] + ib;
                const __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
                const __m256i u =
                    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), lo);
                const __m256 dwv = _mm256_set1_ps(kc_h2f(b->d));
                for (int t = 0; t < nt; t++) {
                    const __m256i s = _mm256_dpbusd_epi32(negc[t], u, xv[t]);
                    acc[t][r] = _mm256_fmadd_ps(dwv, _mm256_mul_ps(dxv[t], _mm256_cvtepi32_ps(s)),
                                                acc[t][r]);
                }
            } else {
                const td_block_q8_0 *b = (const td_block_q8_0 *)wr[r] + ib;
                const __m256i wq = _mm256_loadu_si256((const __m256i *)b->qs);
                const __m256i wa = _mm256_abs_epi8(wq);
                const __m256 dwv = _mm256_set1_ps(kc_h2f(b->d));
                for (int t = 0; t < nt; t++) {
                    const __m256i sx = _mm256_sign_epi8(xv[t], wq);
                    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wa, sx);
                    acc[t][r] = _mm256_fmadd_ps(dwv, _mm256_mul_ps(dxv[t], _mm256_cvtepi32_ps(s)),
                                                acc[t][r]);
                }
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            a->y[(t0 + t) * a->m + r0 + r] = kc_hsum256(acc[t][r]);
        }
    }
}

/* Packed Q8_0/Q4_0 (see kc_internal.h): each ymm lane is one of 8 rows, so a block costs 8
 * (Q8_0) or 4x2 (Q4_0) vpdpbusd per (token, group) plus one convert and FMA, with no horizontal
 * sums. The unsigned weights (w + 128, or the Q4_0 nibble w + 8) are corrected exactly by
 * starting each lane's integer sum at -128 (-8) times the activation block's sum. */
#define NTP 4 /* tokens per packed tile */

KC_INLINE void kc_tile_pk(const kc__mm *a, int q4, int64_t r0, int ng, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QK;
    const size_t bb = q4 ? kc__packed_block_bytes(TD_Q4_0) : kc__packed_block_bytes(TD_Q8_0);
    const uint8_t *gp[2];
    const td_block_q8_0 *xr[NTP];
    const int32_t *xs[NTP];
    __m256 acc[NTP][2];
    const bool pf = a->pf > 0;
    const __m256i lo = _mm256_set1_epi8(0x0F);
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
        __m256i isum[NTP][2];
        for (int t = 0; t < nt; t++) {
            const __m256i c = _mm256_set1_epi32((q4 ? -8 : -128) * xs[t][ib]);
            for (int g = 0; g < ng; g++) {
                isum[t][g] = c;
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
        if (q4) {
            for (int j = 0; j < 4; j++) {
                __m256i wl[2], wh[2];
                for (int g = 0; g < ng; g++) {
                    const __m256i raw =
                        _mm256_loadu_si256((const __m256i *)(gp[g] + ib * sb + 16 + 32 * j));
                    wl[g] = _mm256_and_si256(raw, lo);
                    wh[g] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo);
                }
                for (int t = 0; t < nt; t++) {
                    int32_t xl, xh;
                    memcpy(&xl, xr[t][ib].qs + 4 * j, sizeof(xl));
                    memcpy(&xh, xr[t][ib].qs + 16 + 4 * j, sizeof(xh));
                    const __m256i bl = _mm256_set1_epi32(xl), bh = _mm256_set1_epi32(xh);
                    for (int g = 0; g < ng; g++) {
                        isum[t][g] = _mm256_dpbusd_epi32(isum[t][g], wl[g], bl);
                        isum[t][g] = _mm256_dpbusd_epi32(isum[t][g], wh[g], bh);
                    }
                }
            }
        } else {
            for (int j = 0; j < 8; j++) {
                __m256i wv[2];
                for (int g = 0; g < ng; g++) {
                    wv[g] = _mm256_loadu_si256((const __m256i *)(gp[g] + ib * sb + 16 + 32 * j));
                }
                for (int t = 0; t < nt; t++) {
                    int32_t xb;
                    memcpy(&xb, xr[t][ib].qs + 4 * j, sizeof(xb));
                    const __m256i bx = _mm256_set1_epi32(xb);
                    for (int g = 0; g < ng; g++) {
                        isum[t][g] = _mm256_dpbusd_epi32(isum[t][g], wv[g], bx);
                    }
                }
            }
        }
        for (int g = 0; g < ng; g++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp[g] + ib * sb)));
            for (int t = 0; t < nt; t++) {
                const __m256 dwx = _mm256_mul_ps(dw, _mm256_set1_ps(kc_h2f(xr[t][ib].d)));
                acc[t][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][g]), dwx, acc[t][g]);
            }
        }
    }
    for (int g = 0; g < ng; g++) {
        const int64_t row = r0 + (int64_t)g * KC__PACK_ROWS;
        const int64_t valid = a->m - row < KC__PACK_ROWS ? a->m - row : KC__PACK_ROWS;
        const __mmask8 mask = (__mmask8)((1u << valid) - 1u);
        for (int t = 0; t < nt; t++) {
            _mm256_mask_storeu_ps(a->y + (t0 + t) * a->m + row, mask, acc[t][g]);
        }
    }
}

#define KC_PK_TAIL(q4, r, ng, t, left)                                                             \
    do {                                                                                           \
        switch (left) {                                                                            \
        case 1:                                                                                    \
            kc_tile_pk(a, q4, r, ng, t, 1);                                                        \
            break;                                                                                 \
        case 2:                                                                                    \
            kc_tile_pk(a, q4, r, ng, t, 2);                                                        \
            break;                                                                                 \
        case 3:                                                                                    \
            kc_tile_pk(a, q4, r, ng, t, 3);                                                        \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

KC_INLINE void kc_rows_pk(const kc__mm *a, int q4, int64_t r0, int64_t r1)
{
    for (int64_t tb = 0; tb < a->n; tb += KC_TB) {
        const int64_t te = tb + KC_TB < a->n ? tb + KC_TB : a->n;
        for (int64_t r = r0; r < r1; r += 2 * KC__PACK_ROWS) {
            int64_t t = tb;
            if (r + KC__PACK_ROWS < r1) {
                for (; t + NTP <= te; t += NTP) {
                    kc_tile_pk(a, q4, r, 2, t, NTP);
                }
                KC_PK_TAIL(q4, r, 2, t, te - t);
            } else {
                for (; t + NTP <= te; t += NTP) {
                    kc_tile_pk(a, q4, r, 1, t, NTP);
                }
                KC_PK_TAIL(q4, r, 1, t, te - t);
            }
        }
    }
}

static void kc_rows_pk_q8(const kc__mm *a, int64_t r0, int64_t r1)
{
    kc_rows_pk(a, 0, r0, r1);
}

static void kc_rows_pk_q4(const kc__mm *a, int64_t r0, int64_t r1)
{
    kc_rows_pk(a, 1, r0, r1);
}

#define KC_PKK_VNNI 1
#define KC_PKK_NT   4
#include "kernels/cpu/kc_pk_k.h"

KC_ROWS_FN(kc_rows_f32, kc_tile_float, RMF, NTF, TD_F32)
KC_ROWS_FN(kc_rows_f32_dec, kc_tile_float, RMDEC, NTF, TD_F32)
KC_ROWS_FN(kc_rows_f16, kc_tile_float, RMF, NTF, TD_F16)
KC_ROWS_FN(kc_rows_f16_dec, kc_tile_float, RMDEC, NTF, TD_F16)
KC_ROWS_FN(kc_rows_bf16, kc_tile_float, RMF, NTF, TD_BF16)
KC_ROWS_FN(kc_rows_bf16_dec, kc_tile_float, RMDEC, NTF, TD_BF16)
KC_ROWS_FN(kc_rows_q8, kc_tile_q, RMQ, NTQ, 0)
KC_ROWS_FN(kc_rows_q4, kc_tile_q, RMQ, NTQ, 1)

static void kc_mm_rows_avx512(const kc__mm *a, int64_t r0, int64_t r1)
{
    switch (a->type) {
    case TD_F32:
        if (a->n <= KC__DECODE_MAX_N) {
            kc_rows_f32_dec(a, r0, r1);
        } else {
            kc_rows_f32(a, r0, r1);
        }
        break;
    case TD_F16:
        if (a->n <= KC__DECODE_MAX_N) {
            kc_rows_f16_dec(a, r0, r1);
        } else {
            kc_rows_f16(a, r0, r1);
        }
        break;
    case TD_BF16:
        if (a->xb) {
            kc__bf16_rows(a, r0, r1);
        } else if (a->n <= KC__DECODE_MAX_N) {
            kc_rows_bf16_dec(a, r0, r1);
        } else {
            kc_rows_bf16(a, r0, r1);
        }
        break;
    case TD_Q8_0:
        if (a->packed) {
            kc_rows_pk_q8(a, r0, r1);
        } else {
            kc_rows_q8(a, r0, r1);
        }
        break;
    case TD_Q4_0:
        if (a->packed) {
            kc_rows_pk_q4(a, r0, r1);
        } else {
            kc_rows_q4(a, r0, r1);
        }
        break;
    case TD_Q4_K:
    case TD_Q5_K:
    case TD_Q6_K:
        if (a->packed) {
            kc_rows_pkk(a, r0, r1);
        } else {
            kc__ops_avx2.mm_rows(a, r0, r1);
        }
        break;
    default: /* the other quantized types: the AVX2 kernels (every AVX-512 CPU has AVX2) */
        kc__ops_avx2.mm_rows(a, r0, r1);
        break;
    }
}

static float kc_dot_f32_avx512(const float *x, const float *y, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        acc =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static float kc_dot_f16_avx512(const float *x, const uint16_t *y, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 yv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i)));
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), yv, acc);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 yv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i));
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), yv, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static void kc_axpy_f32_avx512(float *y, float s, const float *x, int64_t n)
{
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(sv, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 r =
            _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}

static void kc_axpy_f16_avx512(float *y, float s, const uint16_t *x, int64_t n)
{
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 xv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(sv, xv, _mm512_loadu_ps(y + i)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(sv, xv, _mm512_maskz_loadu_ps(m, y + i)));
    }
}

#define KC_ATTN_NV_MAX 8 /* head_dim up to 128 in registers */

KC_INLINE __m512 kc_ld_kv(const void *p, int64_t i, bool f16)
{
    if (f16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
    }
    return _mm512_loadu_ps((const float *)p + i);
}

/* attn_block with the accumulator in NV zmm registers (head_dim = 16 * NV). */
KC_INLINE void kc_attn_blk(const float *q, const void *kb, const void *vb, int cnt, int nv,
                           bool f16, float scale, float *pm, float *pl, float *acc)
{
    const int64_t hd = 16 * (int64_t)nv;
    const size_t row = (size_t)hd * (f16 ? 2 : 4);
    __m512 qv[KC_ATTN_NV_MAX], av[KC_ATTN_NV_MAX];
    float sc[256];
    for (int v = 0; v < nv; v++) {
        qv[v] = _mm512_loadu_ps(q + 16 * v);
        av[v] = _mm512_loadu_ps(acc + 16 * v);
    }
    float bmax = -__builtin_inff();
    for (int j = 0; j < cnt; j++) {
        const void *kr = (const char *)kb + (size_t)j * row;
        __m512 s = _mm512_mul_ps(qv[0], kc_ld_kv(kr, 0, f16));
        for (int v = 1; v < nv; v++) {
            s = _mm512_fmadd_ps(qv[v], kc_ld_kv(kr, 16 * v, f16), s);
        }
        sc[j] = _mm512_reduce_add_ps(s) * scale;
        bmax = sc[j] > bmax ? sc[j] : bmax;
    }
    float m = *pm, l = *pl;
    if (bmax > m) {
        const float corr = __builtin_expf(m - bmax);
        const __m512 cv = _mm512_set1_ps(corr);
        for (int v = 0; v < nv; v++) {
            av[v] = _mm512_mul_ps(av[v], cv);
        }
        l *= corr;
        m = bmax;
    }
    for (int j = 0; j < cnt; j++) {
        const float p = __builtin_expf(sc[j] - m);
        const __m512 pv = _mm512_set1_ps(p);
        const void *vr = (const char *)vb + (size_t)j * row;
        l += p;
        for (int v = 0; v < nv; v++) {
            av[v] = _mm512_fmadd_ps(pv, kc_ld_kv(vr, 16 * v, f16), av[v]);
        }
    }
    for (int v = 0; v < nv; v++) {
        _mm512_storeu_ps(acc + 16 * v, av[v]);
    }
    *pm = m;
    *pl = l;
}

static bool kc_attn_block_avx512(const float *q, const void *kb, const void *vb, int cnt, int hd,
                                 bool f16, float scale, float *m, float *l, float *acc)
{
    if (hd % 16 != 0 || hd > 16 * KC_ATTN_NV_MAX || cnt > 256) {
        return false;
    }
#define KC_ATTN_CASE(NV)                                                                           \
    case NV:                                                                                       \
        if (f16) {                                                                                 \
            kc_attn_blk(q, kb, vb, cnt, NV, true, scale, m, l, acc);                               \
        } else {                                                                                   \
            kc_attn_blk(q, kb, vb, cnt, NV, false, scale, m, l, acc);                              \
        }                                                                                          \
        return true;
    switch (hd / 16) {
        KC_ATTN_CASE(1)
        KC_ATTN_CASE(2)
        KC_ATTN_CASE(3)
        KC_ATTN_CASE(4)
        KC_ATTN_CASE(5)
        KC_ATTN_CASE(6)
        KC_ATTN_CASE(7)
        KC_ATTN_CASE(8)
    default:
        break;
    }
#undef KC_ATTN_CASE
    return false;
}

/* e^x for x <= 0: kc_isa_avx2.c's kc_exp_neg on 16 lanes (the same steps, so the same value per
 * lane): x = n ln 2 + r, e^r by its degree-6 Taylor polynomial, times 2^n through the exponent
 * bits; below -87.3 (and for -inf) the result is 0. */
KC_INLINE __m512 kc_exp_neg512(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(x, lo);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 y = _mm512_set1_ps(1.0f / 720.0f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 120.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 24.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 6.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~under, y, _mm512_castsi512_ps(e));
}

#define KC_ATTN_LANES 16  /* (token, head) pairs per tile at most */
#define KC_ATTN_KEYS  8   /* keys scored together in the pair-lane layout: 8 FMA chains */
#define KC_ATTN_FEW   8   /* tiles of at most this many pairs score in the key-lane layout */
#define KC_ATTN_HD    256 /* largest head_dim of the tile kernel (its buffers are on the stack) */

/* Elements [d, d + 16) of an f16 or f32 row of hd, zeros past hd. */
KC_INLINE __m512 kc_ld_kv_tail(const void *row, int d, int hd, bool f16)
{
    if (hd - d >= 16) {
        return kc_ld_kv(row, d, f16);
    }
    const __mmask16 m = (__mmask16)((1u << (hd - d)) - 1u);
    if (f16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + d));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)row + d);
}

/* r[i] lane j becomes r[j] lane i. */
KC_INLINE void kc_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* 128-bit lane q of r[4g + c] now holds column 4q + c of rows 4g .. 4g + 3 */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* Scores of pairs [0, np) against block rows [ja, jb), one lane per pair (np > KC_ATTN_FEW):
 * the queries transposed once per tile (qt[d] = the pairs' q[d]), a key's scores are hd FMAs of
 * its broadcast elements, eight keys at a time. Raw (unscaled) scores into e[j][p]. */
KC_INLINE void kc_attn_scores_pairs(const float (*qt)[KC_ATTN_LANES], const uint8_t *kb,
                                    size_t row_bytes, int hd, bool f16, int ja, int jb,
                                    float (*e)[KC_ATTN_LANES])
{
    _Alignas(64) float kbuf[KC_ATTN_KEYS][KC_ATTN_HD];
    for (int j = ja; j < jb; j += KC_ATTN_KEYS) {
        const float *kr[KC_ATTN_KEYS];
        for (int jj = 0; jj < KC_ATTN_KEYS; jj++) { /* rows past jb repeat the last one */
            const uint8_t *row = kb + (size_t)(j + jj < jb ? j + jj : jb - 1) * row_bytes;
            if (!f16) {
                kr[jj] = (const float *)(const void *)row;
                continue;
            }
            for (int d = 0; d < hd; d += 16) {
                _mm512_store_ps(kbuf[jj] + d, kc_ld_kv_tail(row, d, hd, true));
            }
            kr[jj] = kbuf[jj];
        }
        __m512 s[KC_ATTN_KEYS];
        for (int jj = 0; jj < KC_ATTN_KEYS; jj++) {
            s[jj] = _mm512_setzero_ps();
        }
        for (int d = 0; d < hd; d++) {
            const __m512 qd = _mm512_load_ps(qt[d]);
            for (int jj = 0; jj < KC_ATTN_KEYS; jj++) {
                s[jj] = _mm512_fmadd_ps(_mm512_set1_ps(kr[jj][d]), qd, s[jj]);
            }
        }
        for (int jj = 0; jj < KC_ATTN_KEYS && j + jj < jb; jj++) {
            _mm512_store_ps(e[j + jj], s[jj]);
        }
    }
}

/* The same scores with one lane per key, for NP (a constant, >= np) pairs: 16 key rows are
 * transposed per 16 dimensions, and each pair's 16 scores are hd FMAs of its broadcast query
 * elements, in the same order as kc_attn_scores_pairs (so the same values). Into sc[p][j]. */
KC_INLINE void kc_attn_scores_keys(const kc__attn_tile *t, int NP, const uint8_t *kb,
                                   size_t row_bytes, int hd, bool f16, int ja, int jb,
                                   float (*sc)[KC_ATTN_MAX_BLOCK + 16])
{
    const float *q[KC_ATTN_FEW];
    for (int p = 0; p < NP; p++) {
        q[p] = t->q[p < t->np ? p : 0];
    }
    for (int j = ja; j < jb; j += 16) {
        __m512 s[KC_ATTN_FEW];
        for (int p = 0; p < NP; p++) {
            s[p] = _mm512_setzero_ps();
        }
        for (int d = 0; d < hd; d += 16) {
            __m512 r[16];
            for (int jj = 0; jj < 16; jj++) { /* rows past jb repeat the last one */
                const uint8_t *row = kb + (size_t)(j + jj < jb ? j + jj : jb - 1) * row_bytes;
                r[jj] = kc_ld_kv_tail(row, d, hd, f16);
            }
            kc_transpose16(r);
            const int nd = hd - d < 16 ? hd - d : 16;
            for (int dd = 0; dd < nd; dd++) {
                for (int p = 0; p < NP; p++) {
                    s[p] = _mm512_fmadd_ps(_mm512_set1_ps(q[p][d + dd]), r[dd], s[p]);
                }
            }
        }
        for (int p = 0; p < NP; p++) {
            _mm512_storeu_ps(sc[p] + j, s[p]);
        }
    }
}

/* acc[p] = acc[p] * corr[p] + sum over rows j in [ja, jb), in order, of w(p, j) * v[j] for NP
 * (a constant) pairs, w(p, j) = w[j * sj + p * sp]; each value row is loaded once per 16 dims. */
KC_INLINE void kc_attn_values(float (*acc)[KC_ATTN_HD], int NP, int hd, const uint8_t *vb,
                              size_t row_bytes, bool f16, int ja, int jb, const float *w, int sj,
                              int sp, const float *corr)
{
    for (int d = 0; d < hd; d += 16) {
        __m512 a[KC_ATTN_LANES];
        for (int p = 0; p < NP; p++) {
            a[p] = _mm512_mul_ps(_mm512_load_ps(acc[p] + d), _mm512_set1_ps(corr[p]));
        }
        for (int j = ja; j < jb; j++) {
            const __m512 v = kc_ld_kv_tail(vb + (size_t)j * row_bytes, d, hd, f16);
            for (int p = 0; p < NP; p++) {
                a[p] = _mm512_fmadd_ps(_mm512_set1_ps(w[j * sj + p * sp]), v, a[p]);
            }
        }
        for (int p = 0; p < NP; p++) {
            _mm512_store_ps(acc[p] + d, a[p]);
        }
    }
}

/* Scaled, soft-capped, masked to each pair's key range (-inf outside): score vector v of the
 * lanes' (key j, pair p) where the lanes are pairs (jv = set1(j), lf / le the pairs' ranges) or
 * keys (jv = the keys' positions, lf / le = set1 of the pair's range). */
KC_INLINE __m512 kc_attn_finish_score(const kc__attn_tile *t, __m512 v, __m512i jv, __m512i lf,
                                      __m512i le)
{
    v = _mm512_mul_ps(v, _mm512_set1_ps(t->scale));
    if (t->softcap != 0.0f) {
        _Alignas(64) float tmp[16];
        _mm512_store_ps(tmp, v);
        for (int i = 0; i < 16; i++) {
            tmp[i] = tanhf(tmp[i] * (1.0f / t->softcap)) * t->softcap;
        }
        v = _mm512_load_ps(tmp);
    }
    const __mmask16 in = _mm512_cmp_epi32_mask(jv, lf, _MM_CMPINT_NLT) &
                         _mm512_cmp_epi32_mask(jv, le, _MM_CMPINT_LT);
    return _mm512_mask_mov_ps(_mm512_set1_ps(-__builtin_inff()), in, v);
}

/* CALL(NP) with the constant NP of a few-pair tile (np <= KC_ATTN_FEW): 2, 4 or 8. */
#define KC_ATTN_FEW_SWITCH(np, CALL)                                                               \
    do {                                                                                           \
        if ((np) <= 2) {                                                                           \
            CALL(2);                                                                               \
        } else if ((np) <= 4) {                                                                    \
            CALL(4);                                                                               \
        } else {                                                                                   \
            CALL(KC_ATTN_FEW);                                                                     \
        }                                                                                          \
    } while (0)

/*
 * A tile of up to 16 (token, head) pairs against one KV head, online softmax per KV block. The
 * scores are hd-long FMA chains in dimension order with no horizontal sums, laid out one lane
 * per pair for a full tile (prefill) or one lane per key for a few pairs (decode: a GQA group);
 * both give the same values. The running max, sum and correction are vectors over the pairs; the
 * accumulators are rows per pair and each value row folds in once per 16 dims. Lane p's
 * arithmetic depends only on pair p (unused lanes never enter it), so a pair's result is the
 * same in any tile, whatever its size. head_dim need not be a multiple of 16 (tails masked).
 */
static bool kc_attn_tile_avx512(const kc__attn_tile *t)
{
    const int hd = t->head_dim, bs = t->block_size, np = t->np;
    if (hd > KC_ATTN_HD || np < 1 || np > KC_ATTN_LANES) {
        return false;
    }
    const bool f16 = t->f16, few = np <= KC_ATTN_FEW;
    const size_t row_bytes = (size_t)hd * (f16 ? 2 : 4);
    const int hd16 = (hd + 15) / 16 * 16;
    _Alignas(64) float acc[KC_ATTN_LANES][KC_ATTN_HD];
    _Alignas(64) float qt[KC_ATTN_HD][KC_ATTN_LANES];           /* pair lanes */
    _Alignas(64) float e[KC_ATTN_MAX_BLOCK][KC_ATTN_LANES];     /* pair lanes */
    _Alignas(64) float sc[KC_ATTN_FEW][KC_ATTN_MAX_BLOCK + 16]; /* key lanes */
    _Alignas(64) int32_t lf[KC_ATTN_LANES], le[KC_ATTN_LANES];
    _Alignas(64) float cf[KC_ATTN_LANES], lv[KC_ATTN_LANES], mv[KC_ATTN_LANES];
    int32_t lo = INT32_MAX, hi = 0;
    for (int p = 0; p < KC_ATTN_LANES; p++) {
        const bool on = p < np;
        lf[p] = on ? t->first[p] : 0;
        le[p] = on ? t->end[p] : 0; /* an empty range for unused lanes */
        if (on) {
            lo = t->first[p] < lo ? t->first[p] : lo;
            hi = t->end[p] > hi ? t->end[p] : hi;
        }
        memset(acc[p], 0, sizeof(float) * (size_t)hd16);
        for (int d = 0; !few && d < hd; d++) {
            qt[d][p] = on ? t->q[p][d] : 0.0f;
        }
    }
    const __m512i vfirst = _mm512_load_si512(lf), vend = _mm512_load_si512(le);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    __m512 m = ninf, l = _mm512_setzero_ps();
    for (int32_t b = lo / bs; b * bs < hi; b++) {
        const int ja = (int)((b * bs > lo ? b * bs : lo) - b * bs);
        const int jb = (int)(((b + 1) * bs < hi ? (b + 1) * bs : hi) - b * bs);
        const size_t base = ((size_t)t->block_table[b] * (size_t)t->n_head_kv + (size_t)t->hk) *
                            (size_t)bs * row_bytes;
        const uint8_t *kb = (const uint8_t *)t->k + base, *vb = (const uint8_t *)t->v + base;
        __m512 bmax = ninf;
        if (few) {
#define KC_SCORES_KEYS(NP) kc_attn_scores_keys(t, NP, kb, row_bytes, hd, f16, ja, jb, sc)
            KC_ATTN_FEW_SWITCH(np, KC_SCORES_KEYS);
#undef KC_SCORES_KEYS
            _Alignas(64) float bm[KC_ATTN_LANES];
            for (int p = 0; p < KC_ATTN_LANES; p++) {
                __m512 mx = ninf;
                for (int j = ja; p < np && j < jb; j += 16) {
                    const __m512i jv =
                        _mm512_add_epi32(_mm512_set1_epi32((int32_t)(b * bs + j)), iota);
                    const __m512 v =
                        kc_attn_finish_score(t, _mm512_loadu_ps(sc[p] + j), jv,
                                             _mm512_set1_epi32(lf[p]), _mm512_set1_epi32(le[p]));
                    _mm512_storeu_ps(sc[p] + j, v);
                    const __mmask16 live =
                        (__mmask16)(jb - j >= 16 ? 0xffff : (1u << (jb - j)) - 1u);
                    mx = _mm512_mask_max_ps(mx, live, mx, v);
                }
                bm[p] = _mm512_reduce_max_ps(mx);
            }
            bmax = _mm512_load_ps(bm);
        } else {
            kc_attn_scores_pairs((const float(*)[KC_ATTN_LANES])qt, kb, row_bytes, hd, f16, ja, jb,
                                 e);
            for (int j = ja; j < jb; j++) {
                const __m512 v =
                    kc_attn_finish_score(t, _mm512_load_ps(e[j]),
                                         _mm512_set1_epi32((int32_t)(b * bs + j)), vfirst, vend);
                _mm512_store_ps(e[j], v);
                bmax = _mm512_max_ps(bmax, v);
            }
        }
        /* lanes whose block max rose rescale what they have; -inf - -inf stays untouched */
        const __mmask16 up = _mm512_cmp_ps_mask(bmax, m, _CMP_GT_OQ);
        const __m512 corr =
            _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), up, kc_exp_neg512(_mm512_sub_ps(m, bmax)));
        m = _mm512_mask_mov_ps(m, up, bmax);
        l = _mm512_mul_ps(l, corr);
        _mm512_store_ps(cf, corr);
        /* e^(s - m); scores of -inf (outside the range, or no key yet) give 0; the sum in key
         * order */
        if (few) {
            _mm512_store_ps(lv, l);
            _mm512_store_ps(mv, m);
            for (int p = 0; p < np; p++) {
                for (int j = ja; j < jb; j += 16) {
                    const __m512 s = _mm512_loadu_ps(sc[p] + j);
                    const __mmask16 valid = _mm512_cmp_ps_mask(s, ninf, _CMP_GT_OQ);
                    _mm512_storeu_ps(sc[p] + j,
                                     _mm512_maskz_mov_ps(valid, kc_exp_neg512(_mm512_sub_ps(
                                                                    s, _mm512_set1_ps(mv[p])))));
                }
                for (int j = ja; j < jb; j++) {
                    lv[p] += sc[p][j];
                }
            }
            l = _mm512_load_ps(lv);
#define KC_VALUES_KEYS(NP)                                                                         \
    kc_attn_values(acc, NP, hd, vb, row_bytes, f16, ja, jb, sc[0], 1, KC_ATTN_MAX_BLOCK + 16, cf)
            KC_ATTN_FEW_SWITCH(np, KC_VALUES_KEYS);
#undef KC_VALUES_KEYS
        } else {
            for (int j = ja; j < jb; j++) {
                const __m512 s = _mm512_load_ps(e[j]);
                const __mmask16 valid = _mm512_cmp_ps_mask(s, ninf, _CMP_GT_OQ);
                const __m512 w = _mm512_maskz_mov_ps(valid, kc_exp_neg512(_mm512_sub_ps(s, m)));
                l = _mm512_add_ps(l, w);
                _mm512_store_ps(e[j], w);
            }
            kc_attn_values(acc, KC_ATTN_LANES, hd, vb, row_bytes, f16, ja, jb, e[0], KC_ATTN_LANES,
                           1, cf);
        }
    }
    _mm512_store_ps(lv, l);
    for (int p = 0; p < np; p++) {
        const float inv = 1.0f / lv[p];
        for (int d = 0; d < hd; d++) {
            t->out[p][d] = acc[p][d] * inv;
        }
    }
    return true;
}

/* silu(g) * u as kc_isa_avx2.c's kc_swiglu_avx2 on 16 lanes; the tail as the scalar level. */
static void kc_swiglu_avx512(const float *gate, const float *up, float *y, int64_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 e = kc_exp_neg512(_mm512_castsi512_ps(
            _mm512_or_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN))));
        const __m512 r = _mm512_div_ps(one, _mm512_add_ps(one, e));
        const __mmask16 pos = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GE_OQ);
        const __m512 sig = _mm512_mask_mov_ps(_mm512_mul_ps(e, r), pos, r);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        const float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

#define KC_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static void kc_quant_q8_avx512(const float *x, td_block_q8_0 *y, int64_t k)
{
    for (int64_t i = 0; i < k / TD_QK; i++) {
        const __m512 v0 = _mm512_loadu_ps(x + i * TD_QK);
        const __m512 v1 = _mm512_loadu_ps(x + i * TD_QK + 16);
        const float amax =
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        /* ggml's x86 activation quantizer: id = 127 / amax, round half to even */
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m512 idv = _mm512_set1_ps(id);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, idv), KC_RNE));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, idv), KC_RNE));
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtepi32_epi8(q1));
    }
}

const kc__isa_ops kc__ops_avx512 = {
    .quant_q8 = kc_quant_q8_avx512,
    .quant_q8k = kc__quantize_q8k_avx2,
    .attn_block = kc_attn_block_avx512,
    .attn_tile = kc_attn_tile_avx512,
    .attn_tile_np = KC_ATTN_LANES,
    .swiglu = kc_swiglu_avx512,
    .mm_rows = kc_mm_rows_avx512,
    .dot_f32 = kc_dot_f32_avx512,
    .dot_f16 = kc_dot_f16_avx512,
    .axpy_f32 = kc_axpy_f32_avx512,
    .axpy_f16 = kc_axpy_f16_avx512,
};
