/*
 * Internal to kernels/cpu: the per-ISA kernel table. Each of kc_isa_scalar.c, kc_isa_avx2.c and
 * kc_isa_avx512.c is compiled with its own -m flags and fills one table; kc__ops() returns the
 * table of the active level (kc_isa_active).
 */
#ifndef TANDEM_KERNELS_CPU_KC_INTERNAL_H
#define TANDEM_KERNELS_CPU_KC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* One matmul, as the per-ISA row kernels see it. */
typedef struct kc__mm {
    tdtype type;
    int64_t k, m, n;
    const uint8_t *w; /* weight rows */
    size_t w_row_bytes;
    size_t pf;      /* decode: software-prefetch distance in weight bytes (kc_tune), 0 for none */
    const float *x; /* [n][k] activations */
    /* quantized activations, one of three by the weight's vec_dot type (kc_vec_dot_type) */
    const td_block_q8_0 *xq;  /* [n][k / TD_QK] Q8_0 (Q4_0, Q5_0, Q8_0, IQ4_NL weights) */
    const td_block_q8_1 *xq1; /* [n][k / TD_QK] Q8_1 (Q4_1, Q5_1) */
    const td_block_q8_k *xqk; /* [n][k / TD_QKK] Q8_K (K-quants, IQ4_XS) */
    const int32_t *xsum;      /* [n][k / TD_QK] sums of each xq block's quants (Q8_0 only) */
    const uint16_t *xb;       /* [n][k] BF16 activations (BF16 weights, kc_bf16_dot_active) */
    const uint8_t *packed;    /* kc_weight.packed (KC__PACK_ROWS-row interleaved) or NULL */
    float *y;                 /* [n][m] */
} kc__mm;

/*
 * Packed weights (kc_weight_prepare) hold rows in groups of KC__PACK_ROWS (the last group padded
 * with zero rows). The kernels take two groups at a time (2p and 2p + 1; row ranges start on
 * multiples of 16), so each such pair is stored block by block in the order they read it: block 0
 * of group 2p, block 0 of group 2p + 1, block 1 of 2p, ... Decode then reads one linear stream,
 * which the hardware prefetchers follow much better than two (on Zen 5 two interleaved streams ran
 * at about 60 % of the bandwidth). A last group without a partner keeps its blocks in a row.
 *
 * Packed Q8_0/Q4_0, per group, per 32-block: uint16 d[8] (f16 scales of the 8 rows) then
 * sub-step vectors of 32 bytes where byte 4r+b of vector j holds row r's quant 4j+b: Q8_0 has 8
 * vectors of unsigned w + 128, Q4_0 4 vectors of the original nibble bytes (low nibble: element
 * 4j+b, high nibble: element 16+4j+b). One vpdpbusd then adds 4 products to each row's lane.
 */
#define KC__PACK_ROWS 8

/* Matmuls of at most this many tokens are decode: one-row float tiles, software prefetch. */
#define KC__DECODE_MAX_N 4

/*
 * Packed K-quants, per group of 8 rows and per 256-element super-block (the integer dot of a
 * 32-element group is then a few vector ops per (token, 8 rows), no horizontal sums):
 *   Q4_K, Q5_K: f16 d[8] | f16 dmin[8] | u8 sc[8 groups][8 rows] | u8 mn[4][8 rows][2] (the mins
 *               of groups 2p and 2p + 1) | qs[8 groups][4 sub-steps][32] | Q5_K: qh[8 groups][32]
 *   Q6_K:       f16 d[8] | i8 sc[8 groups][8 rows][2] (the scales of the group's two halves) |
 *               ql[8 groups][4 sub-steps][32] | qh[8 groups][2][32]
 * Sub-step j of a group: byte 4r + b holds row r's element 4j + b of the group in its low nibble
 * and element 16 + 4j + b in its high nibble (Q6_K: the low four of its six bits). Q5_K qh byte
 * 4r + b: bit j is the fifth bit of element 4j + b, bit 4 + j that of element 16 + 4j + b. Q6_K qh
 * vector h, byte 4r + b: bits 0-1, 2-3, 4-5, 6-7 are the high two bits of elements 8h + b,
 * 16 + 8h + b, 8h + 4 + b and 16 + 8h + 4 + b. Padding rows are all zero (d = 0).
 */
#define KC__PKK_D     0
#define KC__PKK_DMIN  16
#define KC__PKK_SC    32
#define KC__PKK_MN    96
#define KC__PKK_QS    160
#define KC__PKK_Q5_QH (KC__PKK_QS + 1024)
#define KC__PKK_Q6_SC 16
#define KC__PKK_Q6_QL 144
#define KC__PKK_Q6_QH (KC__PKK_Q6_QL + 1024)

/* Bytes of one packed block (32 elements for Q8_0/Q4_0, 256 for the K types) of 8 rows. */
static inline size_t kc__packed_block_bytes(tdtype t)
{
    switch (t) {
    case TD_Q4_0:
        return 16 + 4 * 32;
    case TD_Q4_K:
        return KC__PKK_Q5_QH;
    case TD_Q5_K:
        return KC__PKK_Q5_QH + 8 * 32;
    case TD_Q6_K:
        return KC__PKK_Q6_QH + 8 * 64;
    default: /* Q8_0 */
        return 16 + 8 * 32;
    }
}

/* Byte offset of block ib of group g in a packed weight of ng groups of nb blocks of bb bytes. */
static inline size_t kc__packed_offset(int64_t g, int64_t ib, int64_t ng, int64_t nb, size_t bb)
{
    const int64_t first = g & ~(int64_t)1; /* the pair's first group */
    const int64_t pos = first + 1 < ng ? 2 * ib + (g & 1) : ib;
    return ((size_t)first * (size_t)nb + (size_t)pos) * bb;
}

/* The first block of the group holding row r0 (a multiple of KC__PACK_ROWS) of a packed weight
 * of nb blocks of bb bytes per row group, and in *stride the bytes from one of its blocks to the
 * next. */
static inline const uint8_t *kc__packed_group(const kc__mm *a, int64_t r0, int64_t nb, size_t bb,
                                              size_t *stride)
{
    const int64_t ng = (a->m + KC__PACK_ROWS - 1) / KC__PACK_ROWS;
    const int64_t g = r0 / KC__PACK_ROWS;
    *stride = (g | 1) < ng ? 2 * bb : bb;
    return a->packed + kc__packed_offset(g, 0, ng, nb, bb);
}

/* Up to KC_ATTN_TILE (query token, head) pairs of one sequence that read the same KV head,
 * pair p over the keys [first[p], end[p]) (kc_attn_tile in kc_ops.c builds them). */
#define KC_ATTN_TILE 16
typedef struct kc__attn_tile {
    int np;
    const float *q[KC_ATTN_TILE];
    float *out[KC_ATTN_TILE];
    int32_t first[KC_ATTN_TILE], end[KC_ATTN_TILE];
    const int32_t *block_table;
    const void *k, *v; /* the layer's pools */
    bool f16;
    int32_t block_size, n_head_kv, hk, head_dim;
    float scale, softcap;
} kc__attn_tile;

typedef struct kc__isa_ops {
    /* Y[t][r] for every token t and rows r in [r0, r1). */
    void (*mm_rows)(const kc__mm *a, int64_t r0, int64_t r1);
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f16)(const float *a, const uint16_t *b, int64_t n);
    /* y += s * x */
    void (*axpy_f32)(float *y, float s, const float *x, int64_t n);
    void (*axpy_f16)(float *y, float s, const uint16_t *x, int64_t n);
    /* Q8_0 quantization of k floats (k % 32 == 0), bit-identical to the scalar reference. */
    void (*quant_q8)(const float *x, td_block_q8_0 *y, int64_t k);
    /* Q8_K quantization of k floats (k % 256 == 0), bit-identical to kc__quantize_q8k_ref. */
    void (*quant_q8k)(const float *x, td_block_q8_k *y, int64_t k);
    /* One KV block of online-softmax attention for one query: folds cnt keys/values (rows of hd
     * f16 or f32 elements at kb/vb) into the running max *m, sum *l and accumulator acc[hd].
     * Returns false (touching nothing) when this level has no kernel for hd; may be NULL. */
    bool (*attn_block)(const float *q, const void *kb, const void *vb, int cnt, int hd, bool f16,
                       float scale, float *m, float *l, float *acc);
    /* A whole tile of queries (kc__attn_tile): each key and value row is loaded and converted
     * once for all the pairs, the online softmax runs with one lane per pair. Each pair's result
     * depends only on its own query, keys and values, not on the tile's other pairs. Returns
     * false (touching nothing) when this level has no kernel for the head size; may be NULL. */
    bool (*attn_tile)(const kc__attn_tile *t);
    int attn_tile_np; /* pairs per tile attn_tile takes (<= KC_ATTN_TILE) */
    /* y = silu(gate) * up (kc_swiglu); may be NULL (the scalar loop). */
    void (*swiglu)(const float *gate, const float *up, float *y, int64_t n);
} kc__isa_ops;

extern const kc__isa_ops kc__ops_scalar;
#if defined(__x86_64__)
extern const kc__isa_ops kc__ops_avx2;
extern const kc__isa_ops kc__ops_avx512;
#endif

/* The scalar Q8_0 quantizer (ggml's reference rounding), used by the scalar level. */
void kc__quantize_q8_ref(const float *x, td_block_q8_0 *y, int64_t k);

/* The scalar Q8_K quantizer (ggml's quantize_row_q8_K_ref), and the AVX2 one, which the AVX-512
 * level uses too. */
void kc__quantize_q8k_ref(const float *x, td_block_q8_k *y, int64_t k);
#if defined(__x86_64__)
void kc__quantize_q8k_avx2(const float *x, td_block_q8_k *y, int64_t k);
#endif

/* Scalar building blocks of the quantized types (kc_quants.c), shared by the ISA levels. */
void kc__k4_scales(const uint8_t q[12], uint8_t sc[8], uint8_t mn[8]); /* Q4_K/Q5_K */
void kc__q3k_scales(const uint8_t q[12], int8_t sc[16]);               /* Q3_K, minus 32 */
void kc__legacy_quants(tdtype t, const void *blk, int8_t q[TD_QK]);
void kc__k_quants(tdtype t, const void *blk, int8_t q[TD_QKK]);

/* Dot product of one weight row of a quantized type with k activations in its vec_dot type
 * (a td_block_q8_0/q8_1/q8_k array): the scalar reference every level falls back to. */
float kc__vec_dot_ref(tdtype t, const void *w, const void *xq, int64_t k);

/* The activations of token t of a matmul in its weight's vec_dot type. */
static inline const void *kc__mm_xq(const kc__mm *a, int64_t t)
{
    if (a->xqk) {
        return a->xqk + t * (a->k / TD_QKK);
    }
    if (a->xq1) {
        return a->xq1 + t * (a->k / TD_QK);
    }
    return a->xq + t * (a->k / TD_QK);
}

#if defined(__x86_64__)
/* kc_isa_avx512bf16.c: BF16 rows against a->xb with vdpbf16ps, and the activations' rounding to
 * BF16 (nearest even). Only when kc_bf16_dot_active(). */
void kc__bf16_rows(const kc__mm *a, int64_t r0, int64_t r1);
void kc__cvt_bf16_row(const float *x, uint16_t *y, int64_t k);
#endif

/* Table of the active ISA level. */
const kc__isa_ops *kc__ops(void);

#endif
