/*
 * Tensor element types shared by the model loader, the CPU kernels and the CUDA kernels. The
 * numeric values are ggml's type ids, so a GGUF tensor's type field maps onto this enum directly.
 * Quantized types store blocks of TD_QK consecutive elements along the innermost dimension:
 *   Q8_0: { f16 d; int8 qs[32]; }   34 bytes, x = d * q
 *   Q4_0: { f16 d; uint8 qs[16]; }  18 bytes, x = (q - 8) * d; element j (0..15) is the low
 *                                   nibble of qs[j], element j + 16 the high nibble of qs[j].
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
    TD_Q8_0 = 8,
    TD_BF16 = 30,
} tdtype;

#define TD_QK 32 /* elements per quantized block */

typedef struct td_block_q8_0 {
    uint16_t d; /* f16 scale */
    int8_t qs[TD_QK];
} td_block_q8_0;

typedef struct td_block_q4_0 {
    uint16_t d; /* f16 scale */
    uint8_t qs[TD_QK / 2];
} td_block_q4_0;

/* True for the types this build can load and compute with. */
static inline bool td_supported(uint32_t ggml_type)
{
    return ggml_type == TD_F32 || ggml_type == TD_F16 || ggml_type == TD_Q4_0 ||
           ggml_type == TD_Q8_0 || ggml_type == TD_BF16;
}

/* "F32", "F16", "BF16", "Q8_0", "Q4_0"; for other ggml ids their ggml name when known
 * ("Q4_K", ...) or "type N" is not available here: callers print the number. */
static inline const char *td_name(uint32_t t)
{
    switch (t) {
    case TD_F32:
        return "F32";
    case TD_F16:
        return "F16";
    case TD_Q4_0:
        return "Q4_0";
    case TD_Q8_0:
        return "Q8_0";
    case TD_BF16:
        return "BF16";
    case 3:
        return "Q4_1";
    case 6:
        return "Q5_0";
    case 7:
        return "Q5_1";
    case 9:
        return "Q8_1";
    case 10:
        return "Q2_K";
    case 11:
        return "Q3_K";
    case 12:
        return "Q4_K";
    case 13:
        return "Q5_K";
    case 14:
        return "Q6_K";
    case 15:
        return "Q8_K";
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
    default:
        return "unknown";
    }
}

/* Elements per storage block (1 for float types). */
static inline int64_t td_block_elems(tdtype t)
{
    return (t == TD_Q8_0 || t == TD_Q4_0) ? TD_QK : 1;
}

/* Bytes per storage block. */
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
    }
    return 0;
}

/* Bytes of one row of n elements, or 0 when n is not a whole number of blocks. */
static inline size_t td_row_bytes(tdtype t, int64_t n)
{
    int64_t be = td_block_elems(t);
    if (n < 0 || n % be != 0) {
        return 0;
    }
    return (size_t)(n / be) * td_block_bytes(t);
}

#ifdef __cplusplus /* the CUDA kernels include this header too */
static_assert(sizeof(td_block_q8_0) == 34, "Q8_0 block is 34 bytes");
static_assert(sizeof(td_block_q4_0) == 18, "Q4_0 block is 18 bytes");
#else
_Static_assert(sizeof(td_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(td_block_q4_0) == 18, "Q4_0 block is 18 bytes");
#endif

#endif
