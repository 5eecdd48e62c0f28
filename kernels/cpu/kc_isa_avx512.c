/* AVX-512 (F/BW/VL/VNNI) kernels; compiled with their own -m flags, called only when the CPU
 * has them (see kc_cpu.c). Float weights: f32 FMA on 16 lanes, tails masked. Q8_0/Q4_0 weights:
 * per 32-block integer dot with vpdpbusd (sign trick) scaled by d_w * d_x into 8 f32 lanes. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/cpu/kc_internal.h"
#include "kernels/cpu/kc_mm_tiles.h"

#define KC_INLINE       static inline __attribute__((always_inline))
#define KC_PF_MAX_N     4     /* prefetch weights when the matmul has at most this many tokens */
#define KC_PF_DIST      16384 /* bytes ahead, Q8_0/Q4_0 (the thread's rows are contiguous) */
#define KC_PF_DIST_HALF 8192  /* bytes ahead, F16/BF16 (measured best) */
/* Decode (n <= KC_PF_MAX_N) takes float rows one at a time, so the weights are read as one
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
    const bool pf = ty != TD_F32 && a->n <= KC_PF_MAX_N; /* f32 streams fine unaided */
    const size_t pf_off = KC_PF_DIST_HALF;
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
    const bool pf = a->n <= KC_PF_MAX_N;
    const size_t pf_off = KC_PF_DIST;
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
    const bool pf = a->n <= KC_PF_MAX_N;
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
                const char *p = (const char *)gp[g] + ib * (int64_t)sb + KC_PF_DIST;
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
        if (a->n <= KC_PF_MAX_N) {
            kc_rows_f32_dec(a, r0, r1);
        } else {
            kc_rows_f32(a, r0, r1);
        }
        break;
    case TD_F16:
        if (a->n <= KC_PF_MAX_N) {
            kc_rows_f16_dec(a, r0, r1);
        } else {
            kc_rows_f16(a, r0, r1);
        }
        break;
    case TD_BF16:
        if (a->xb) {
            kc__bf16_rows(a, r0, r1);
        } else if (a->n <= KC_PF_MAX_N) {
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
    .mm_rows = kc_mm_rows_avx512,
    .dot_f32 = kc_dot_f32_avx512,
    .dot_f16 = kc_dot_f16_avx512,
    .axpy_f32 = kc_axpy_f32_avx512,
    .axpy_f16 = kc_axpy_f16_avx512,
};
