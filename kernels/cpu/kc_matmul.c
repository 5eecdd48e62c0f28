/* Matmul driver: activation quantization, thread split over rows, ISA dispatch; see
 * kc_matmul.h. */
#include "kernels/cpu/kc_matmul.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_cpu.h"
#include "kernels/cpu/kc_internal.h"

#define KC_ROW_ALIGN 16 /* rows per chunk are a multiple of this (covers every tile height) */
#define KC_CHUNKS_PER_THREAD                                                                       \
    4 /* row chunks claimed dynamically, so a preempted thread holds up                            \
         at most one small chunk instead of its whole share */

const kc__isa_ops *kc__ops(void)
{
#if defined(__x86_64__)
    switch (kc_isa_active()) {
    case KC_ISA_AVX512:
        return &kc__ops_avx512;
    case KC_ISA_AVX2:
        return &kc__ops_avx2;
    case KC_ISA_SCALAR:
        break;
    }
#endif
    return &kc__ops_scalar;
}

/* Types kc_weight_prepare repacks for the packed AVX2 / AVX-512 kernels. */
static bool kc_is_packable(tdtype t)
{
    return t == TD_Q8_0 || t == TD_Q4_0 || t == TD_Q4_K || t == TD_Q5_K || t == TD_Q6_K;
}

bool kc_bf16_dot_active(void)
{
#if defined(__x86_64__)
    return kc_isa_active() == KC_ISA_AVX512 && kc_cpu_features_get()->avx512bf16;
#else
    return false;
#endif
}

size_t kc_matmul_wsize(const kc_weight *w, int64_t n)
{
    if (w->type == TD_BF16 && n > 0 && w->k > 0 && kc_bf16_dot_active()) {
        return (size_t)n * (size_t)w->k * sizeof(uint16_t);
    }
    if (!td_is_quant(w->type) || n <= 0 || w->k <= 0) {
        return 0;
    }
    switch (kc_vec_dot_type(w->type)) {
    case TD_Q8_0: /* [n][nb] int32 block sums, then [n][nb] Q8_0 blocks */
        return (size_t)n * (size_t)(w->k / TD_QK) * (sizeof(td_block_q8_0) + sizeof(int32_t));
    case TD_Q8_1:
        return (size_t)n * (size_t)(w->k / TD_QK) * sizeof(td_block_q8_1);
    default:
        return (size_t)n * (size_t)(w->k / TD_QKK) * sizeof(td_block_q8_k);
    }
}

static bool kc_weight_ok(const kc_weight *w)
{
    return td_supported(w->type) && w->k > 0 && w->m > 0 && td_row_bytes(w->type, w->k) != 0;
}

/*
 * Memory for weights that decode streams (zeroed if zero): buffers of 2 MiB and more are aligned to
 * 2 MiB and asked for transparent huge pages (MADV_HUGEPAGE; the common THP setting is "madvise"),
 * so streaming them takes a TLB miss per 2 MiB instead of per 4 KiB.
 */
static void *kc_stream_alloc(size_t bytes, bool zero)
{
    const size_t huge = (size_t)2 << 20;
    const bool big = bytes >= huge;
    const size_t align = big ? huge : 64;
    const size_t size = (bytes + 63) / 64 * 64;
    void *p = NULL;
    if (posix_memalign(&p, align, size) != 0) { /* unlike aligned_alloc, any size */
        return NULL;
    }
#if defined(MADV_HUGEPAGE)
    if (big) {
        (void)madvise(p, size, MADV_HUGEPAGE); /* advice only: fine if THP is off */
    }
#endif
    if (zero) {
        memset(p, 0, size);
    }
    return p;
}

/* One packed Q8_0/Q4_0 block ib of the 8 rows at rows[] (NULL: a padding row). */
static void kc_pack_legacy(tdtype t, const uint8_t *const rows[KC__PACK_ROWS], int64_t ib,
                           uint8_t *dst)
{
    const int nsub = t == TD_Q4_0 ? 4 : 8;
    uint16_t d[KC__PACK_ROWS] = {0};
    for (int r = 0; r < KC__PACK_ROWS; r++) {
        const uint8_t *src = rows[r];
        for (int j = 0; j < nsub; j++) {
            for (int b = 0; b < 4; b++) {
                uint8_t v;
                if (!src) {
                    v = t == TD_Q4_0 ? 0x88 : 0x80; /* weight 0 */
                } else if (t == TD_Q4_0) {
                    v = ((const td_block_q4_0 *)src)[ib].qs[4 * j + b];
                } else {
                    v = (uint8_t)(((const td_block_q8_0 *)src)[ib].qs[4 * j + b] ^ 0x80);
                }
                dst[16 + 32 * j + 4 * r + b] = v;
            }
        }
        if (src) {
            d[r] = t == TD_Q4_0 ? ((const td_block_q4_0 *)src)[ib].d
                                : ((const td_block_q8_0 *)src)[ib].d;
        }
    }
    memcpy(dst, d, sizeof(d));
}

/* One packed Q4_K/Q5_K/Q6_K super-block ib of the 8 rows at rows[] (kc_internal.h's layout);
 * dst is zeroed, so padding rows (NULL) stay zero. */
static void kc_pack_k(tdtype t, const uint8_t *const rows[KC__PACK_ROWS], int64_t ib, uint8_t *dst)
{
    const size_t bsz = td_block_bytes(t);
    for (int r = 0; r < KC__PACK_ROWS; r++) {
        if (!rows[r]) {
            continue;
        }
        const uint8_t *blk = rows[r] + (size_t)ib * bsz;
        int8_t q8[TD_QKK];
        uint8_t q[TD_QKK]; /* unsigned: 0..15, 0..31, 0..63 */
        kc__k_quants(t, blk, q8);
        for (int i = 0; i < TD_QKK; i++) {
            q[i] = (uint8_t)(t == TD_Q6_K ? q8[i] + 32 : q8[i]);
        }
        uint16_t d;
        if (t == TD_Q6_K) {
            const td_block_q6_k *b = (const td_block_q6_k *)blk;
            d = b->d;
            for (int h = 0; h < 16; h++) {
                dst[KC__PKK_Q6_SC + 16 * (h / 2) + 2 * r + h % 2] = (uint8_t)b->scales[h];
            }
        } else {
            const td_block_q4_k *b = (const td_block_q4_k *)blk; /* Q5_K: same header */
            uint8_t sc[8], mn[8];
            kc__k4_scales(b->scales, sc, mn);
            d = b->d;
            memcpy(dst + KC__PKK_DMIN + 2 * r, &b->dmin, sizeof(b->dmin));
            for (int g = 0; g < 8; g++) {
                dst[KC__PKK_SC + 8 * g + r] = sc[g];
                dst[KC__PKK_MN + 16 * (g / 2) + 2 * r + g % 2] = mn[g];
            }
        }
        memcpy(dst + KC__PKK_D + 2 * r, &d, sizeof(d));
        const size_t qs = t == TD_Q6_K ? KC__PKK_Q6_QL : KC__PKK_QS;
        for (int g = 0; g < 8; g++) {
            const uint8_t *e = q + 32 * g;
            for (int j = 0; j < 4; j++) {
                for (int b = 0; b < 4; b++) {
                    const int lo = 4 * j + b, hi = 16 + 4 * j + b;
                    const size_t at = 4 * (size_t)r + (size_t)b;
                    dst[qs + 128 * g + 32 * j + at] = (uint8_t)((e[lo] & 15) | (e[hi] & 15) << 4);
                    if (t == TD_Q5_K) {
                        dst[KC__PKK_Q5_QH + 32 * g + at] |=
                            (uint8_t)(((e[lo] >> 4) & 1) << j | ((e[hi] >> 4) & 1) << (4 + j));
                    } else if (t == TD_Q6_K) {
                        const int sh = 4 * (j % 2);
                        dst[KC__PKK_Q6_QH + 64 * g + 32 * (j / 2) + at] |=
                            (uint8_t)((e[lo] >> 4) << sh | (e[hi] >> 4) << (sh + 2));
                    }
                }
            }
        }
    }
}

int kc_weight_prepare(kc_weight *w)
{
    if (!td_is_quant(w->type) && !w->packed && kc_weight_ok(w)) {
        /* float weights: the same rows, in memory decode streams faster */
        const size_t bytes = td_row_bytes(w->type, w->k) * (size_t)w->m;
        void *c = kc_stream_alloc(bytes, false);
        if (!c) {
            return -ENOMEM;
        }
        memcpy(c, w->data, bytes);
        w->packed = c;
        return 0;
    }
    /* AVX-512 (VNNI) and AVX2 both have packed kernels for these types */
    const bool packs = kc_isa_active() >= KC_ISA_AVX2;
    const int64_t be = td_block_elems(w->type);
    if (!kc_is_packable(w->type) || w->packed || !packs || w->k <= 0 || w->k % be != 0 ||
        w->m <= 0) {
        return 0;
    }
    const int64_t nb = w->k / be;
    const int64_t ng = (w->m + KC__PACK_ROWS - 1) / KC__PACK_ROWS;
    const size_t bb = kc__packed_block_bytes(w->type);
    const size_t bytes = (size_t)ng * (size_t)nb * bb;
    uint8_t *p = kc_stream_alloc(bytes, true);
    if (!p) {
        return -ENOMEM;
    }
    const size_t rb = td_row_bytes(w->type, w->k);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *rows[KC__PACK_ROWS];
        for (int r = 0; r < KC__PACK_ROWS; r++) {
            const int64_t row = g * KC__PACK_ROWS + r;
            rows[r] = row < w->m ? (const uint8_t *)w->data + (size_t)row * rb : NULL;
        }
        for (int64_t ib = 0; ib < nb; ib++) {
            uint8_t *dst = p + kc__packed_offset(g, ib, ng, nb, bb);
            if (be == TD_QKK) {
                kc_pack_k(w->type, rows, ib, dst);
            } else {
                kc_pack_legacy(w->type, rows, ib, dst);
            }
        }
    }
    w->packed = p;
    return 0;
}

void kc_weight_release(kc_weight *w)
{
    free(w->packed);
    w->packed = NULL;
}

typedef struct kc_mm_task {
    kc__mm mm[KC_MATMUL_MAX_MULTI];
    int nw;
    int64_t m_total; /* rows over all weights */
    const kc__isa_ops *ops;
    kc_pool *pool;
    td_block_q8_0 *xq; /* quantized activations (one of three, or none) */
    td_block_q8_1 *xq1;
    td_block_q8_k *xqk;
    uint16_t *xb;  /* BF16 activations */
    int32_t *xsum; /* [n][nb] block sums of xq */
    bool quantize; /* workers quantize (split by token, then a barrier) */
    int64_t chunk; /* rows per chunk (a multiple of KC_ROW_ALIGN) */
    int64_t n_chunks;
    atomic_int_fast64_t next_chunk; /* next chunk to claim */
} kc_mm_task;

/* Decode prefetch distance for weights of type ty in a matmul of n tokens on nth threads. */
static size_t kc_prefetch_distance(tdtype ty, int64_t n, int nth)
{
    if (n > KC__DECODE_MAX_N) {
        return 0;
    }
    const kc_tune *tune = kc_tune_get();
    const int i = nth > 1 ? KC_TUNE_MANY : KC_TUNE_ONE;
    if (ty == TD_F32) {
        return (size_t)tune->pf_f32[i];
    }
    if (ty == TD_F16 || ty == TD_BF16) {
        return (size_t)tune->pf_half[i];
    }
    return (size_t)tune->pf_quant[i];
}

/* Quantizes activation rows [i0, n) step `step` (and, for Q8_0, their block sums). */
static void kc_quantize_rows(const kc_mm_task *t, int64_t i0, int64_t step)
{
    const kc__mm *a0 = &t->mm[0];
    const int64_t nb = a0->k / TD_QK;
    for (int64_t i = i0; i < a0->n; i += step) {
#if defined(__x86_64__)
        if (t->xb) {
            kc__cvt_bf16_row(a0->x + i * a0->k, t->xb + i * a0->k, a0->k);
            continue;
        }
#endif
        if (t->xqk) {
            t->ops->quant_q8k(a0->x + i * a0->k, t->xqk + i * (a0->k / TD_QKK), a0->k);
            continue;
        }
        if (t->xq1) {
            kc_quantize_row_q8_1(a0->x + i * a0->k, t->xq1 + i * nb, a0->k);
            continue;
        }
        t->ops->quant_q8(a0->x + i * a0->k, t->xq + i * nb, a0->k);
        for (int64_t b = 0; b < nb; b++) {
            int32_t sum = 0;
            for (int j = 0; j < TD_QK; j++) {
                sum += t->xq[i * nb + b].qs[j];
            }
            t->xsum[i * nb + b] = sum;
        }
    }
}

/* Row of a weight with m rows where a global split boundary at local offset off falls. */
static int64_t kc_local_row(int64_t off, int64_t m)
{
    if (off <= 0) {
        return 0;
    }
    off = (off + KC_ROW_ALIGN - 1) / KC_ROW_ALIGN * KC_ROW_ALIGN;
    return off < m ? off : m;
}

/* Computes global rows [g0, g1) (over all weights, in order) of the task. */
static void kc_mm_range(const kc_mm_task *t, int64_t g0, int64_t g1)
{
    int64_t base = 0;
    for (int i = 0; i < t->nw; i++) {
        const kc__mm *a = &t->mm[i];
        /* the same rounding of a shared boundary on both sides keeps ranges exact and disjoint,
         * and every range starts on a KC_ROW_ALIGN row of its own weight (packed kernels) */
        const int64_t r0 = kc_local_row(g0 - base, a->m);
        const int64_t r1 = kc_local_row(g1 - base, a->m);
        if (r0 < r1) {
            t->ops->mm_rows(a, r0, r1);
        }
        base += a->m;
    }
}

/* Workers claim row chunks from a shared counter (each chunk computed by exactly one thread, so
 * results do not depend on who computes what). The first chunk of each thread is its own, which
 * keeps the common case free of contention on the counter. */
static void kc_mm_worker(void *arg, int ith, int nth)
{
    kc_mm_task *t = arg;
    if (t->quantize) {
        kc_quantize_rows(t, ith, nth);
        if (t->pool) {
            kc_pool_barrier(t->pool);
        }
    }
    for (int64_t c = ith; c < t->n_chunks;
         c = atomic_fetch_add_explicit(&t->next_chunk, 1, memory_order_relaxed)) {
        const int64_t g0 = c * t->chunk;
        const int64_t g1 = g0 + t->chunk < t->m_total ? g0 + t->chunk : t->m_total;
        kc_mm_range(t, g0, g1);
    }
}

int kc_matmul_multi(kc_pool *pool, const kc_weight *const *ws, float *const *ys, int nw,
                    const float *x, int64_t n, void *wsp, size_t wsp_bytes)
{
    if (nw < 1 || nw > KC_MATMUL_MAX_MULTI || n < 0) {
        return -EINVAL;
    }
    for (int i = 0; i < nw; i++) {
        if (!kc_weight_ok(ws[i])) {
            return -EINVAL;
        }
    }
    const tdtype xtype = kc_vec_dot_type(ws[0]->type);
    for (int i = 1; i < nw; i++) { /* one activation quantization serves every weight */
        if (kc_vec_dot_type(ws[i]->type) != xtype || ws[i]->k != ws[0]->k) {
            for (int j = 0; j < nw; j++) {
                int rc = kc_matmul_multi(pool, &ws[j], &ys[j], 1, x, n, wsp, wsp_bytes);
                if (rc != 0) {
                    return rc;
                }
            }
            return 0;
        }
    }
    if (n == 0) {
        return 0;
    }
    size_t need = kc_matmul_wsize(ws[0], n);
    if (need > 0 && (wsp == NULL || wsp_bytes < need)) {
        return -EINVAL;
    }
    kc_mm_task t = {.nw = nw, .ops = kc__ops(), .pool = pool};
    if (need > 0) { /* the layouts of kc_matmul_wsize */
        if (xtype == TD_BF16) {
            t.xb = wsp;
        } else if (xtype == TD_Q8_0) {
            t.xsum = wsp;
            t.xq = (td_block_q8_0 *)(t.xsum + n * (ws[0]->k / TD_QK));
        } else if (xtype == TD_Q8_1) {
            t.xq1 = wsp;
        } else {
            t.xqk = wsp;
        }
    }
    for (int i = 0; i < nw; i++) {
        const bool float_copy = ws[i]->packed && !td_is_quant(ws[i]->type);
        t.mm[i] = (kc__mm){.type = ws[i]->type,
                           .k = ws[i]->k,
                           .m = ws[i]->m,
                           .n = n,
                           .w = float_copy ? ws[i]->packed : ws[i]->data,
                           .w_row_bytes = td_row_bytes(ws[i]->type, ws[i]->k),
                           .x = x,
                           .xq = t.xq,
                           .xq1 = t.xq1,
                           .xqk = t.xqk,
                           .xsum = t.xsum,
                           .xb = t.xb,
                           .packed = float_copy ? NULL : ws[i]->packed,
                           .y = ys[i]};
        t.mm[i].pf = kc_prefetch_distance(ws[i]->type, n, pool ? kc_pool_size(pool) : 1);
        t.m_total += ws[i]->m;
    }
    if (need > 0) {
        /* a few tokens (decode): the caller quantizes alone, saving the workers a barrier */
        t.quantize = pool && n >= 4 * (int64_t)kc_pool_size(pool);
        if (!t.quantize) {
            kc_quantize_rows(&t, 0, 1);
        }
    }
    const int nth = pool ? kc_pool_size(pool) : 1;
    int64_t chunk = (t.m_total + (int64_t)nth * KC_CHUNKS_PER_THREAD - 1) /
                    ((int64_t)nth * KC_CHUNKS_PER_THREAD);
    chunk = (chunk + KC_ROW_ALIGN - 1) / KC_ROW_ALIGN * KC_ROW_ALIGN;
    t.chunk = chunk;
    t.n_chunks = (t.m_total + chunk - 1) / chunk;
    atomic_init(&t.next_chunk, nth); /* chunks 0 .. nth-1 are taken by thread ith first */
    if (pool) {
        kc_pool_run(pool, kc_mm_worker, &t);
    } else {
        kc_mm_worker(&t, 0, 1);
    }
    return 0;
}

int kc_matmul(kc_pool *pool, const kc_weight *w, const float *x, int64_t n, float *y, void *wsp,
              size_t wsp_bytes)
{
    return kc_matmul_multi(pool, &w, &y, 1, x, n, wsp, wsp_bytes);
}
