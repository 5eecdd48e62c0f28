/*
 * Tensor element types shared by the model loader, the CPU kernels and the CUDA kernels. The
 * numeric values are ggml's type ids, so a GGUF tensor's type field maps onto this enum directly,
 * and the block structs are ggml's, byte for byte. Quantized types store blocks of consecutive
 * elements along the innermost dimension (32 for the legacy types, 256 for K-quants and IQ4_XS):
 *   Q8_0:   { f16 d; int8 qs[32]; }            x = d * q
 *   Q4_0:   { f16 d; uint8 qs[16]; }           x = (q - 8) * d; element j (0..15) is the low
 *                                              nibble of qs[j], element j + 16 the high nibble
 *   Q4_1:   { f16 d, m; uint8 qs[16]; }        x = q * d + m, nibbles as Q4_0
 *   Q5_0:   { f16 d; uint8 qh[4]; qs[16]; }    x = (q - 16) * d, bit 4 of element j in bit j of
 *                                              the little-endian uint32 qh
 *   Q5_1:   { f16 d, m; uint8 qh[4]; qs[16]; } x = q * d + m
 *   IQ4_NL: { f16 d; uint8 qs[16]; }           x = d * td_iq4nl_values[q], nibbles as Q4_0
 *   Q2_K .. Q6_K, IQ4_XS: 256-element super-blocks of 16 or 32-element sub-blocks with their own
 *   (quantized) scales; the layouts are ggml's and are documented with each struct below and
 *   decoded in kc_dequantize_row (kernels/cpu/kc_convert.c).
 *   Q8_1 and Q8_K are ggml's activation types (the vec_dot_type of the types above); models
 *   never hold them.
 * Header-only so every layer can include it without linking the kernels.
 */
#ifndef TANDEM_KERNELS_DTYPE_H
#define TANDEM_KERNELS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tdtype {
    TD_F32 = 0,
    TD_F16 = 1,
    TD_Q4_0 = 2,
    TD_Q4_1 = 3,
    TD_Q5_0 = 6,
    TD_Q5_1 = 7,
    TD_Q8_0 = 8,
    TD_Q8_1 = 9,
    TD_Q2_K = 10,
    TD_Q3_K = 11,
    TD_Q4_K = 12,
    TD_Q5_K = 13,
    TD_Q6_K = 14,
    TD_Q8_K = 15,
    TD_IQ4_NL = 20,
    TD_IQ4_XS = 23,
    TD_BF16 = 30,
} tdtype;

#define TD_QK  32  /* elements per legacy quantized block (Q4_0 .. Q8_1, IQ4_NL) */
#define TD_QKK 256 /* elements per K-quant super-block (Q2_K .. Q8_K, IQ4_XS) */

typedef struct td_block_q8_0 {
    uint16_t d; /* f16 scale */
    int8_t qs[TD_QK];
} td_block_q8_0;

typedef struct td_block_q4_0 {
    uint16_t d; /* f16 scale */
    uint8_t qs[TD_QK / 2];
} td_block_q4_0;

typedef struct td_block_q4_1 {
    uint16_t d, m; /* f16 scale and minimum */
    uint8_t qs[TD_QK / 2];
} td_block_q4_1;

typedef struct td_block_q5_0 {
    uint16_t d;
    uint8_t qh[4]; /* fifth bits */
    uint8_t qs[TD_QK / 2];
} td_block_q5_0;

typedef struct td_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[TD_QK / 2];
} td_block_q5_1;

typedef struct td_block_q8_1 {
    uint16_t d, s; /* f16 scale and d * sum(qs) */
    int8_t qs[TD_QK];
} td_block_q8_1;

typedef struct td_block_iq4_nl {
    uint16_t d;
    uint8_t qs[TD_QK / 2];
} td_block_iq4_nl;

/* 16 sub-blocks of 16: scales[j] low nibble the scale, high nibble the min of sub-block j;
 * quant of element 128h + 32s + l (+16) is (qs[32h + l (+16)] >> 2s) & 3; x = d*sc*q - dmin*m. */
typedef struct td_block_q2_k {
    uint8_t scales[TD_QKK / 16];
    uint8_t qs[TD_QKK / 4];
    uint16_t d, dmin;
} td_block_q2_k;

/* 16 sub-blocks of 16 with 6-bit signed scales (12 packed bytes); low two bits as Q2_K, the third
 * bit (element 128h + 32s + l) is hmask[l] bit 4h + s, set meaning +4; x = d*(sc-32)*(q-4). */
typedef struct td_block_q3_k {
    uint8_t hmask[TD_QKK / 8];
    uint8_t qs[TD_QKK / 4];
    uint8_t scales[12];
    uint16_t d;
} td_block_q3_k;

/* 8 sub-blocks of 32 with 6-bit scales and mins (12 packed bytes); element 64c + l is the low
 * nibble of qs[32c + l], element 64c + 32 + l the high nibble; x = d*sc*q - dmin*m. */
typedef struct td_block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[TD_QKK / 2];
} td_block_q4_k;

/* Q4_K plus a fifth bit: element 64c + l has qh[l] bit 2c, element 64c + 32 + l bit 2c + 1. */
typedef struct td_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[TD_QKK / 8];
    uint8_t qs[TD_QKK / 2];
} td_block_q5_k;

/* 16 sub-blocks of 16 with int8 scales; 6-bit quants (low nibble in ql, two high bits in qh),
 * x = d * sc * (q - 32). */
typedef struct td_block_q6_k {
    uint8_t ql[TD_QKK / 2];
    uint8_t qh[TD_QKK / 4];
    int8_t scales[TD_QKK / 16];
    uint16_t d;
} td_block_q6_k;

/* ggml's activation type for K-quants: float scale, 256 quants and the sums of each 16. */
typedef struct td_block_q8_k {
    float d;
    int8_t qs[TD_QKK];
    int16_t bsums[TD_QKK / 16];
} td_block_q8_k;

/* 8 sub-blocks of 32 IQ4_NL codes with 6-bit scales (low 4 bits in scales_l, high 2 in
 * scales_h), x = d * (ls - 32) * td_iq4nl_values[q]. */
typedef struct td_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[TD_QKK / 64];
    uint8_t qs[TD_QKK / 2];
} td_block_iq4_xs;

/* The non-linear 4-bit codebook of IQ4_NL and IQ4_XS. */
static const int8_t td_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                           1,    13,   25,  38,  53,  69,  89,  113};

/* True for the types this build can load and compute with (weights). */
static inline bool td_supported(uint32_t ggml_type)
{
    switch (ggml_type) {
    case TD_F32:
    case TD_F16:
    case TD_BF16:
    case TD_Q4_0:
    case TD_Q4_1:
    case TD_Q5_0:
    case TD_Q5_1:
    case TD_Q8_0:
    case TD_Q2_K:
    case TD_Q3_K:
    case TD_Q4_K:
    case TD_Q5_K:
    case TD_Q6_K:
    case TD_IQ4_NL:
    case TD_IQ4_XS:
        return true;
    default:
        return false;
    }
}

/* True for the block-quantized weight types (everything td_supported but F32/F16/BF16). */
static inline bool td_is_quant(uint32_t ggml_type)
{
    return td_supported(ggml_type) && ggml_type != TD_F32 && ggml_type != TD_F16 &&
           ggml_type != TD_BF16;
}

/* ggml's name of a type id ("Q4_K", ...), or "unknown". */
static inline const char *td_name(uint32_t t)
{
    switch (t) {
    case TD_F32:
        return "F32";
    case TD_F16:
        return "F16";
    case TD_Q4_0:
        return "Q4_0";
    case TD_Q4_1:
        return "Q4_1";
    case TD_Q5_0:
        return "Q5_0";
    case TD_Q5_1:
        return "Q5_1";
    case TD_Q8_0:
        return "Q8_0";
    case TD_Q8_1:
        return "Q8_1";
    case TD_Q2_K:
        return "Q2_K";
    case TD_Q3_K:
        return "Q3_K";
    case TD_Q4_K:
        return "Q4_K";
    case TD_Q5_K:
        return "Q5_K";
    case TD_Q6_K:
        return "Q6_K";
    case TD_Q8_K:
        return "Q8_K";
    case 16:
        return "IQ2_XXS";
    case 17:
        return "IQ2_XS";
    case 18:
        return "IQ3_XXS";
    case 19:
        return "IQ1_S";
    case TD_IQ4_NL:
        return "IQ4_NL";
    case 21:
        return "IQ3_S";
    case 22:
        return "IQ2_S";
    case TD_IQ4_XS:
        return "IQ4_XS";
    case 24:
        return "I8";
    case 25:
        return "I16";
    case 26:
        return "I32";
    case 27:
        return "I64";
    case 28:
        return "F64";
    case 29:
        return "IQ1_M";
    case TD_BF16:
        return "BF16";
    case 34:
        return "TQ1_0";
    case 35:
        return "TQ2_0";
    case 39:
        return "MXFP4";
    default:
        return "unknown";
    }
}

/* Elements per storage block (1 for float types, 0 for ids this build does not know). */
static inline int64_t td_block_elems(tdtype t)
{
    switch (t) {
    case TD_F32:
    case TD_F16:
    case TD_BF16:
        return 1;
    case TD_Q4_0:
    case TD_Q4_1:
    case TD_Q5_0:
    case TD_Q5_1:
    case TD_Q8_0:
    case TD_Q8_1:
    case TD_IQ4_NL:
        return TD_QK;
    case TD_Q2_K:
    case TD_Q3_K:
    case TD_Q4_K:
    case TD_Q5_K:
    case TD_Q6_K:
    case TD_Q8_K:
    case TD_IQ4_XS:
        return TD_QKK;
    }
    return 0;
}

/* Bytes per storage block (0 for ids this build does not know). */
static inline size_t td_block_bytes(tdtype t)
{
    switch (t) {
    case TD_F32:
        return 4;
    case TD_F16:
    case TD_BF16:
        return 2;
    case TD_Q8_0:
        return sizeof(td_block_q8_0);
    case TD_Q4_0:
        return sizeof(td_block_q4_0);
    case TD_Q4_1:
        return sizeof(td_block_q4_1);
    case TD_Q5_0:
        return sizeof(td_block_q5_0);
    case TD_Q5_1:
        return sizeof(td_block_q5_1);
    case TD_Q8_1:
        return sizeof(td_block_q8_1);
    case TD_IQ4_NL:
        return sizeof(td_block_iq4_nl);
    case TD_Q2_K:
        return sizeof(td_block_q2_k);
    case TD_Q3_K:
        return sizeof(td_block_q3_k);
    case TD_Q4_K:
        return sizeof(td_block_q4_k);
    case TD_Q5_K:
        return sizeof(td_block_q5_k);
    case TD_Q6_K:
        return sizeof(td_block_q6_k);
    case TD_Q8_K:
        return sizeof(td_block_q8_k);
    case TD_IQ4_XS:
        return sizeof(td_block_iq4_xs);
    }
    return 0;
}

/* Bytes of one row of n elements, or 0 when n is not a whole number of blocks (or the type is
 * unknown). */
static inline size_t td_row_bytes(tdtype t, int64_t n)
{
    int64_t be = td_block_elems(t);
    if (be == 0 || n < 0 || n % be != 0) {
        return 0;
    }
    return (size_t)(n / be) * td_block_bytes(t);
}

#ifdef __cplusplus /* the CUDA kernels include this header too */
#define TD_STATIC_ASSERT static_assert
#else
#define TD_STATIC_ASSERT _Static_assert
#endif
TD_STATIC_ASSERT(sizeof(td_block_q8_0) == 34, "Q8_0 block is 34 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q4_0) == 18, "Q4_0 block is 18 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q4_1) == 20, "Q4_1 block is 20 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q5_0) == 22, "Q5_0 block is 22 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q5_1) == 24, "Q5_1 block is 24 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q8_1) == 36, "Q8_1 block is 36 bytes");
TD_STATIC_ASSERT(sizeof(td_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q2_k) == 84, "Q2_K block is 84 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q3_k) == 110, "Q3_K block is 110 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q4_k) == 144, "Q4_K block is 144 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q5_k) == 176, "Q5_K block is 176 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q6_k) == 210, "Q6_K block is 210 bytes");
TD_STATIC_ASSERT(sizeof(td_block_q8_k) == 292, "Q8_K block is 292 bytes");
TD_STATIC_ASSERT(sizeof(td_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");

#endif
