/*
 * Packed Q4_K / Q5_K / Q6_K matmul (kc_weight_prepare's 8-row interleave, see kc_internal.h),
 * included by kc_isa_avx2.c (KC_PKK_VNNI 0) and kc_isa_avx512.c (KC_PKK_VNNI 1) after they
 * define KC_INLINE and kc_h2f (prefetch distance: kc__mm.pf). Defines
 *   static void kc_rows_pkk(const kc__mm *a, int64_t r0, int64_t r1)    r0 a multiple of 8
 *
 * Each ymm lane is one of 8 rows and the activation bytes of a sub-step are broadcast to all
 * lanes, so a 32-element group of 8 rows costs 8 byte dot products per token and no horizontal
 * sum. Per group the integer sum is scaled by each row's 6-bit (Q6_K: 8-bit, per half) scale, in
 * integers: without VNNI (the ymm tile) maddubs pairs add up in int16 (as many as fit: 16 products
 * of 15 x 127 for Q4_K, 8 of 31 x 127 for Q5_K, 4 of 63 x 127 for Q6_K) and one madd applies the
 * scale; with VNNI vpdpbusd sums each row's group in int32 and vpmulld applies it. Both give the
 * same exact integers. The mins of Q4_K/Q5_K and Q6_K's offset of 32 come from the activations'
 * 16-element sums (bsums), as in kc_k_block. Every (row, token) pair gets the same operations
 * whatever the tile, so results do not depend on n. With VNNI (the AVX-512 level) the tile's two
 * 8-row groups share zmm registers, and that level sets KC_PKK_NT to 4 tokens.
 */
#ifndef TANDEM_KERNELS_CPU_KC_PK_K_H
#define TANDEM_KERNELS_CPU_KC_PK_K_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/kc_internal.h"
#include "kernels/cpu/kc_mm_tiles.h"

#ifndef KC_PKK_NT
#define KC_PKK_NT 2 /* tokens per prompt tile (2 groups of 8 rows x 2 tokens) */
#endif

KC_INLINE __m256i kc_pkk_bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm256_set1_epi32(v);
}

/* Sub-step j of group grp of a packed super-block: the quants of elements 4j + b (*wl) and
 * 16 + 4j + b (*wh) of every row, as unsigned bytes. */
KC_INLINE void kc_pkk_weights(tdtype ty, const uint8_t *blk, int grp, int j, __m256i *wl,
                              __m256i *wh)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const size_t qs = ty == TD_Q6_K ? KC__PKK_Q6_QL : KC__PKK_QS;
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + qs + 128 * grp + 32 * j));
    __m256i l = _mm256_and_si256(raw, m4);
    __m256i h = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if (ty == TD_Q5_K) { /* bit j (low) and 4 + j (high) to bit 4; 16-bit shifts, masked per byte */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + KC__PKK_Q5_QH + 32 * grp));
        const __m256i b4 = _mm256_set1_epi8(0x10);
        l = _mm256_or_si256(l, _mm256_and_si256(_mm256_slli_epi16(qh, 4 - j), b4));
        h = _mm256_or_si256(h, _mm256_and_si256(_mm256_srli_epi16(qh, j), b4));
    } else if (ty == TD_Q6_K) { /* two bits to bits 4-5 */
        const __m256i qh =
            _mm256_loadu_si256((const __m256i *)(blk + KC__PKK_Q6_QH + 64 * grp + 32 * (j / 2)));
        const __m256i b45 = _mm256_set1_epi8(0x30);
        if (j % 2 == 0) {
            l = _mm256_or_si256(l, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b45));
            h = _mm256_or_si256(h, _mm256_and_si256(_mm256_slli_epi16(qh, 2), b45));
        } else {
            l = _mm256_or_si256(l, _mm256_and_si256(qh, b45));
            h = _mm256_or_si256(h, _mm256_and_si256(_mm256_srli_epi16(qh, 2), b45));
        }
    }
    *wl = l;
    *wh = h;
}

#if !KC_PKK_VNNI
/* 16 int16: each of 8 bytes twice (the lanes of a row's two maddubs pair sums). */
KC_INLINE __m256i kc_pkk_dup16(__m128i v8)
{
    const __m128i idx = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v8, idx));
}

/* Rows r0 .. r0 + 8 ng - 1 (ng groups of 8) x tokens [t0, t0 + nt). */
KC_INLINE void kc_tile_pkk(const kc__mm *a, tdtype ty, int64_t r0, int ng, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QKK;
    const size_t bb = kc__packed_block_bytes(ty);
    const bool q6 = ty == TD_Q6_K;
    const uint8_t *gp[2];
    const td_block_q8_k *xr[KC_PKK_NT];
    __m256 acc[KC_PKK_NT][2];
    const bool pf = a->pf > 0;
    size_t sb = bb; /* bytes from one block of a group to its next */
    for (int g = 0; g < ng; g++) {
        gp[g] = kc__packed_group(a, r0 + g * KC__PACK_ROWS, nb, bb, &sb);
    }
    for (int t = 0; t < nt; t++) {
        xr[t] = a->xqk + (t0 + t) * nb;
        for (int g = 0; g < ng; g++) {
            acc[t][g] = _mm256_setzero_ps();
        }
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *blk[2];
        __m256i isum[KC_PKK_NT][2];
        for (int g = 0; g < ng; g++) {
            blk[g] = gp[g] + (size_t)ib * sb;
            if (pf) {
                for (size_t off = 0; off < bb; off += 64) {
                    _mm_prefetch((const char *)blk[g] + a->pf + off, _MM_HINT_T0);
                }
            }
            for (int t = 0; t < nt; t++) {
                isum[t][g] = _mm256_setzero_si256();
            }
        }
        for (int grp = 0; grp < 8; grp++) {
            const int8_t *xg[KC_PKK_NT];
            for (int t = 0; t < nt; t++) {
                xg[t] = xr[t][ib].qs + 32 * grp;
            }
            __m256i scl[2], sch[2];
            for (int g = 0; g < ng; g++) {
                if (q6) { /* int16 lo0 hi0 lo1 hi1 ...: each row's lo (hi) scale in both lanes */
                    const __m256i v = _mm256_cvtepi8_epi16(
                        _mm_loadu_si128((const __m128i *)(blk[g] + KC__PKK_Q6_SC + 16 * grp)));
                    const __m128i il =
                        _mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
                    const __m128i ih =
                        _mm_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
                    scl[g] = _mm256_shuffle_epi8(v, _mm256_set_m128i(il, il));
                    sch[g] = _mm256_shuffle_epi8(v, _mm256_set_m128i(ih, ih));
                } else {
                    scl[g] = kc_pkk_dup16(
                        _mm_loadl_epi64((const __m128i *)(blk[g] + KC__PKK_SC + 8 * grp)));
                    sch[g] = scl[g];
                }
            }
            /* int16 pair sums: Q4_K both halves together, Q5_K each half, Q6_K two sub-steps */
            __m256i sl[KC_PKK_NT][2], sh[KC_PKK_NT][2];
            for (int t = 0; t < nt; t++) {
                for (int g = 0; g < ng; g++) {
                    sl[t][g] = _mm256_setzero_si256();
                    sh[t][g] = _mm256_setzero_si256();
                }
            }
            for (int j = 0; j < 4; j++) {
                __m256i wl[2], wh[2];
                for (int g = 0; g < ng; g++) {
                    kc_pkk_weights(ty, blk[g], grp, j, &wl[g], &wh[g]);
                }
                for (int t = 0; t < nt; t++) {
                    const __m256i xl = kc_pkk_bcast(xg[t] + 4 * j);
                    const __m256i xh = kc_pkk_bcast(xg[t] + 16 + 4 * j);
                    for (int g = 0; g < ng; g++) {
                        const __m256i pl = _mm256_maddubs_epi16(wl[g], xl);
                        const __m256i ph = _mm256_maddubs_epi16(wh[g], xh);
                        if (ty == TD_Q4_K) {
                            sl[t][g] = _mm256_add_epi16(sl[t][g], _mm256_add_epi16(pl, ph));
                        } else {
                            sl[t][g] = _mm256_add_epi16(sl[t][g], pl);
                            sh[t][g] = _mm256_add_epi16(sh[t][g], ph);
                        }
                    }
                }
                if (ty == TD_Q4_K || (q6 && j % 2 == 0)) {
                    continue;
                }
                if (q6 || j == 3) {
                    for (int t = 0; t < nt; t++) {
                        for (int g = 0; g < ng; g++) {
                            const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(sl[t][g], scl[g]),
                                                               _mm256_madd_epi16(sh[t][g], sch[g]));
                            isum[t][g] = _mm256_add_epi32(isum[t][g], s);
                            sl[t][g] = _mm256_setzero_si256();
                            sh[t][g] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            if (ty == TD_Q4_K) {
                for (int t = 0; t < nt; t++) {
                    for (int g = 0; g < ng; g++) {
                        isum[t][g] =
                            _mm256_add_epi32(isum[t][g], _mm256_madd_epi16(sl[t][g], scl[g]));
                    }
                }
            }
        }
        for (int g = 0; g < ng; g++) {
            const __m256 dw =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk[g] + KC__PKK_D)));
            for (int t = 0; t < nt; t++) {
                const td_block_q8_k *xb = &xr[t][ib];
                __m256i is = isum[t][g];
                if (q6) { /* sum (q - 32) x sc = sum q x sc - 32 sum sc bsum, per half */
                    __m256i c = _mm256_setzero_si256();
                    for (int grp = 0; grp < 8; grp++) {
                        const __m256i sc = _mm256_cvtepi8_epi16(
                            _mm_loadu_si128((const __m128i *)(blk[g] + KC__PKK_Q6_SC + 16 * grp)));
                        int32_t bs2;
                        memcpy(&bs2, xb->bsums + 2 * grp, sizeof(bs2));
                        c = _mm256_add_epi32(c, _mm256_madd_epi16(sc, _mm256_set1_epi32(bs2)));
                    }
                    is = _mm256_sub_epi32(is, _mm256_slli_epi32(c, 5));
                }
                acc[t][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
                                            _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), acc[t][g]);
                if (!q6) { /* minus dmin x sum_g mn_g x (bsum 2g + bsum 2g+1) */
                    const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
                    /* int32 lanes 0, 1, 4, 5: the group sums of pairs 0 .. 3 */
                    const __m256i bg = _mm256_hadd_epi16(bs, bs);
                    __m256i ms = _mm256_setzero_si256();
                    for (int p = 0; p < 4; p++) {
                        const __m256i mn = _mm256_cvtepu8_epi16(
                            _mm_loadu_si128((const __m128i *)(blk[g] + KC__PKK_MN + 16 * p)));
                        const __m256i pair =
                            _mm256_permutevar8x32_epi32(bg, _mm256_set1_epi32(p % 2 + 4 * (p / 2)));
                        ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn, pair));
                    }
                    const __m256 dm =
                        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk[g] + KC__PKK_DMIN)));
                    acc[t][g] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms),
                                        _mm256_mul_ps(dm, _mm256_set1_ps(-xb->d)), acc[t][g]);
                }
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

#else
/* Two 32-byte vectors (the same field of groups of rows 0-7 and 8-15) as one zmm. */
KC_INLINE __m512i kc_pkk_ld2(const uint8_t *p0, const uint8_t *p1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* Two 16-byte vectors as one ymm. */
KC_INLINE __m256i kc_pkk_ld2h(const uint8_t *p0, const uint8_t *p1)
{
    return _mm256_set_m128i(_mm_loadu_si128((const __m128i *)p1),
                            _mm_loadu_si128((const __m128i *)p0));
}

/* kc_pkk_weights for 16 rows: the groups at b0 (rows 0-7) and b1 (rows 8-15) in one zmm. */
KC_INLINE void kc_pkk_weights16(tdtype ty, const uint8_t *b0, const uint8_t *b1, int grp, int j,
                                __m512i *wl, __m512i *wh)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const size_t qs = (ty == TD_Q6_K ? KC__PKK_Q6_QL : KC__PKK_QS) + 128 * (size_t)grp + 32 * j;
    const __m512i raw = kc_pkk_ld2(b0 + qs, b1 + qs);
    __m512i l = _mm512_and_si512(raw, m4);
    __m512i h = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    if (ty == TD_Q5_K) {
        const size_t o = KC__PKK_Q5_QH + 32 * (size_t)grp;
        const __m512i qh = kc_pkk_ld2(b0 + o, b1 + o);
        const __m512i b4 = _mm512_set1_epi8(0x10);
        l = _mm512_or_si512(l, _mm512_and_si512(_mm512_slli_epi16(qh, 4 - j), b4));
        h = _mm512_or_si512(h, _mm512_and_si512(_mm512_srli_epi16(qh, j), b4));
    } else if (ty == TD_Q6_K) {
        const size_t o = KC__PKK_Q6_QH + 64 * (size_t)grp + 32 * (j / 2);
        const __m512i qh = kc_pkk_ld2(b0 + o, b1 + o);
        const __m512i b45 = _mm512_set1_epi8(0x30);
        if (j % 2 == 0) {
            l = _mm512_or_si512(l, _mm512_and_si512(_mm512_slli_epi16(qh, 4), b45));
            h = _mm512_or_si512(h, _mm512_and_si512(_mm512_slli_epi16(qh, 2), b45));
        } else {
            l = _mm512_or_si512(l, _mm512_and_si512(qh, b45));
            h = _mm512_or_si512(h, _mm512_and_si512(_mm512_srli_epi16(qh, 2), b45));
        }
    }
    *wl = l;
    *wh = h;
}

/* The tile in zmm registers: lanes 0-7 are rows r0.., lanes 8-15 rows r0 + 8.. (ng = 2), or a
 * second copy of the first group that is never stored (ng = 1, the last group of a matrix). */
KC_INLINE void kc_tile_pkk(const kc__mm *a, tdtype ty, int64_t r0, int ng, int64_t t0, int nt)
{
    const int64_t nb = a->k / TD_QKK;
    const size_t bb = kc__packed_block_bytes(ty);
    const bool q6 = ty == TD_Q6_K;
    size_t sb; /* bytes from one block of a group to its next (the same for both groups) */
    const uint8_t *gp0 = kc__packed_group(a, r0, nb, bb, &sb);
    const uint8_t *gp1 = ng == 2 ? kc__packed_group(a, r0 + KC__PACK_ROWS, nb, bb, &sb) : gp0;
    const td_block_q8_k *xr[KC_PKK_NT];
    __m512 acc[KC_PKK_NT];
    const bool pf = a->pf > 0;
    for (int t = 0; t < nt; t++) {
        xr[t] = a->xqk + (t0 + t) * nb;
        acc[t] = _mm512_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b0 = gp0 + (size_t)ib * sb, *b1 = gp1 + (size_t)ib * sb;
        if (pf) {
            for (size_t off = 0; off < bb; off += 64) {
                _mm_prefetch((const char *)b0 + a->pf + off, _MM_HINT_T0);
                _mm_prefetch((const char *)b1 + a->pf + off, _MM_HINT_T0);
            }
        }
        __m512i isum[KC_PKK_NT];
        for (int t = 0; t < nt; t++) {
            isum[t] = _mm512_setzero_si512();
        }
        for (int grp = 0; grp < 8; grp++) {
            __m512i scl, sch;
            if (q6) {
                const __m128i ev =
                    _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
                const size_t o = KC__PKK_Q6_SC + 16 * (size_t)grp;
                const __m128i v0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b0 + o)), ev);
                const __m128i v1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b1 + o)), ev);
                scl = _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(v0, v1));
                sch = _mm512_cvtepi8_epi32(_mm_unpackhi_epi64(v0, v1));
            } else {
                const size_t o = KC__PKK_SC + 8 * (size_t)grp;
                scl = _mm512_cvtepu8_epi32(
                    _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(b0 + o)),
                                       _mm_loadl_epi64((const __m128i *)(b1 + o))));
                sch = scl;
            }
            __m512i gl[KC_PKK_NT], gh[KC_PKK_NT];
            for (int t = 0; t < nt; t++) {
                gl[t] = _mm512_setzero_si512();
                gh[t] = _mm512_setzero_si512();
            }
            for (int j = 0; j < 4; j++) {
                __m512i wl, wh;
                kc_pkk_weights16(ty, b0, b1, grp, j, &wl, &wh);
                for (int t = 0; t < nt; t++) {
                    const int8_t *xg = xr[t][ib].qs + 32 * grp;
                    int32_t vl, vh;
                    memcpy(&vl, xg + 4 * j, sizeof(vl));
                    memcpy(&vh, xg + 16 + 4 * j, sizeof(vh));
                    gl[t] = _mm512_dpbusd_epi32(gl[t], wl, _mm512_set1_epi32(vl));
                    gh[t] = _mm512_dpbusd_epi32(gh[t], wh, _mm512_set1_epi32(vh));
                }
            }
            for (int t = 0; t < nt; t++) {
                __m512i v;
                if (q6) {
                    v = _mm512_add_epi32(_mm512_mullo_epi32(gl[t], scl),
                                         _mm512_mullo_epi32(gh[t], sch));
                } else {
                    v = _mm512_mullo_epi32(_mm512_add_epi32(gl[t], gh[t]), scl);
                }
                isum[t] = _mm512_add_epi32(isum[t], v);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(kc_pkk_ld2h(b0 + KC__PKK_D, b1 + KC__PKK_D));
        for (int t = 0; t < nt; t++) {
            const td_block_q8_k *xb = &xr[t][ib];
            __m512i is = isum[t];
            if (q6) {
                __m512i c = _mm512_setzero_si512();
                for (int grp = 0; grp < 8; grp++) {
                    const size_t o = KC__PKK_Q6_SC + 16 * (size_t)grp;
                    const __m512i sc = _mm512_cvtepi8_epi16(kc_pkk_ld2h(b0 + o, b1 + o));
                    int32_t bs2;
                    memcpy(&bs2, xb->bsums + 2 * grp, sizeof(bs2));
                    c = _mm512_add_epi32(c, _mm512_madd_epi16(sc, _mm512_set1_epi32(bs2)));
                }
                is = _mm512_sub_epi32(is, _mm512_slli_epi32(c, 5));
            }
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[t]);
            if (!q6) {
                const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
                const __m256i bg = _mm256_hadd_epi16(bs, bs);
                __m512i ms = _mm512_setzero_si512();
                for (int p = 0; p < 4; p++) {
                    const size_t o = KC__PKK_MN + 16 * (size_t)p;
                    const __m512i mn = _mm512_cvtepu8_epi16(kc_pkk_ld2h(b0 + o, b1 + o));
                    const __m256i pair =
                        _mm256_permutevar8x32_epi32(bg, _mm256_set1_epi32(p % 2 + 4 * (p / 2)));
                    ms = _mm512_add_epi32(ms, _mm512_madd_epi16(mn, _mm512_broadcast_i64x4(pair)));
                }
                const __m512 dm =
                    _mm512_cvtph_ps(kc_pkk_ld2h(b0 + KC__PKK_DMIN, b1 + KC__PKK_DMIN));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms),
                                         _mm512_mul_ps(dm, _mm512_set1_ps(-xb->d)), acc[t]);
            }
        }
    }
    const int64_t valid = a->m - r0 < 8 * ng ? a->m - r0 : 8 * ng;
    const __mmask16 mask = (__mmask16)((1u << valid) - 1u);
    for (int t = 0; t < nt; t++) {
        _mm512_mask_storeu_ps(a->y + (t0 + t) * a->m + r0, mask, acc[t]);
    }
}
#endif

/* One type's rows [r0, r1): 2 groups of 8 rows at a time, KC_PKK_NT tokens (one in decode). */
KC_INLINE void kc_rows_pkk_t(const kc__mm *a, tdtype ty, int64_t r0, int64_t r1)
{
    for (int64_t tb = 0; tb < a->n; tb += KC_TB) {
        const int64_t te = tb + KC_TB < a->n ? tb + KC_TB : a->n;
        for (int64_t r = r0; r < r1; r += 2 * KC__PACK_ROWS) {
            const bool two = r + KC__PACK_ROWS < r1;
            int64_t t = tb;
            for (; t + KC_PKK_NT <= te; t += KC_PKK_NT) {
                if (two) {
                    kc_tile_pkk(a, ty, r, 2, t, KC_PKK_NT);
                } else {
                    kc_tile_pkk(a, ty, r, 1, t, KC_PKK_NT);
                }
            }
            for (; t < te; t++) {
                if (two) {
                    kc_tile_pkk(a, ty, r, 2, t, 1);
                } else {
                    kc_tile_pkk(a, ty, r, 1, t, 1);
                }
            }
        }
    }
}

static void kc_rows_pkk(const kc__mm *a, int64_t r0, int64_t r1)
{
    switch (a->type) {
    case TD_Q4_K:
        kc_rows_pkk_t(a, TD_Q4_K, r0, r1);
        break;
    case TD_Q5_K:
        kc_rows_pkk_t(a, TD_Q5_K, r0, r1);
        break;
    default:
        kc_rows_pkk_t(a, TD_Q6_K, r0, r1);
        break;
    }
}

#endif
