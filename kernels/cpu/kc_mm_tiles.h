/*
 * Internal to kernels/cpu, included by the per-ISA files: the loop nest shared by every matmul
 * row kernel. KC_ROWS_FN(name, TILE, RM, NT, ...) defines
 *   static void name(const kc__mm *a, int64_t r0, int64_t r1)
 * which walks tokens in chunks of KC_TB (so the chunk's activations stay in L2), rows in tiles of
 * RM and tokens in tiles of NT, calling TILE(a, ..., row0, nrows, tok0, ntoks) with compile-time
 * tile sizes (RM x NT, RM x 1..NT-1, 1 x 1..NT). Every TILE computes each (token, row) pair with
 * the same instruction sequence whatever the tile size, which keeps results independent of n.
 */
#ifndef TANDEM_KERNELS_CPU_KC_MM_TILES_H
#define TANDEM_KERNELS_CPU_KC_MM_TILES_H

#include "kernels/cpu/kc_internal.h"

#define KC_TB 64 /* tokens per cache chunk */

#define KC_TILE_TAIL(TILE, a, r, nr, t, left, ...)                                                 \
    do {                                                                                           \
        switch (left) {                                                                            \
        case 1:                                                                                    \
            TILE(a, __VA_ARGS__, r, nr, t, 1);                                                     \
            break;                                                                                 \
        case 2:                                                                                    \
            TILE(a, __VA_ARGS__, r, nr, t, 2);                                                     \
            break;                                                                                 \
        case 3:                                                                                    \
            TILE(a, __VA_ARGS__, r, nr, t, 3);                                                     \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

#define KC_ROWS_FN(name, TILE, RM, NT, ...)                                                        \
    static void name(const kc__mm *a, int64_t r0, int64_t r1)                                      \
    {                                                                                              \
        for (int64_t tb = 0; tb < a->n; tb += KC_TB) {                                             \
            const int64_t te = tb + KC_TB < a->n ? tb + KC_TB : a->n;                              \
            for (int64_t r = r0; r < r1; r += RM) {                                                \
                if (r + RM <= r1) {                                                                \
                    int64_t t = tb;                                                                \
                    for (; t + NT <= te; t += NT) {                                                \
                        TILE(a, __VA_ARGS__, r, RM, t, NT);                                        \
                    }                                                                              \
                    KC_TILE_TAIL(TILE, a, r, RM, t, te - t, __VA_ARGS__);                          \
                } else {                                                                           \
                    for (int64_t rr = r; rr < r1; rr++) {                                          \
                        int64_t t = tb;                                                            \
                        for (; t + NT <= te; t += NT) {                                            \
                            TILE(a, __VA_ARGS__, rr, 1, t, NT);                                    \
                        }                                                                          \
                        KC_TILE_TAIL(TILE, a, rr, 1, t, te - t, __VA_ARGS__);                      \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

#endif
