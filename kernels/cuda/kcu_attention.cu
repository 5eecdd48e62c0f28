/*
 * Paged KV cache writes and paged GQA attention (kcu.h), the CUDA twin of kc_attention.
 *
 * One thread block computes one (query token, query head, key split): it walks its sequence's
 * block table one KV block at a time (the tile), a warp per key computing the score (lane-strided
 * partial dot, xor-butterfly sum), then an online-softmax step per tile exactly as kc_attention
 * does it (rescale on a new tile maximum, p = e^(s - m), l += p, acc += p * v), each thread
 * owning the output dims tid, tid + 128, ... Decode batches (every sequence one new token) over
 * long contexts split the keys into KCU_ATTN_SPLIT_TOKENS-sized ranges, one block each, whose
 * partial states (m, l, acc) go to the workspace and are merged in split order by a second
 * kernel. Every arithmetic step is a kcu_math.h function; host_tests/test_kcu_attn_emul.c runs
 * the same algorithm on the host against kc_attention.
 *
 * Batches with more than one new token in some sequence go to the prefill kernel, which takes
 * KCU_PREFILL_QT queries of a sequence per block and walks their KV blocks once, each query's
 * arithmetic identical to the decode kernel's.
 */
#include <errno.h>

#include "kernels/cuda/kcu_internal.h"
#include "kernels/cuda/kcu_math.h"
#include "kernels/cuda/kcu_reduce.cuh"

enum {
    KCU_ATTN_THREADS = 128,
    KCU_ATTN_WARPS = KCU_ATTN_THREADS / KCU_WARP,
    KCU_ATTN_MAX_BLOCK = 256,                                 /* as KC_ATTN_MAX_BLOCK */
    KCU_ATTN_MAX_HEAD_DIM = 512,                              /* as KC_ATTN_MAX_HEAD_DIM */
    KCU_ATTN_DIMS = KCU_ATTN_MAX_HEAD_DIM / KCU_ATTN_THREADS, /* output dims per thread */
    KCU_STORE_THREADS = 256,
    KCU_PREFILL_QT = 8, /* queries per prefill block */
};

/* ---- KV store ---- */

__global__ static void store_kv_kernel(kcu_paged_kv kv, const float *k, const float *v,
                                       const int32_t *slot)
{
    const int32_t s = slot[blockIdx.x];
    if (s < 0) {
        return; /* padding token */
    }
    const int width = kv.n_head_kv * kv.head_dim;
    const int64_t blk = s / kv.block_size;
    const int off = s % kv.block_size;
    const float *kr = k + (int64_t)blockIdx.x * width;
    const float *vr = v + (int64_t)blockIdx.x * width;
    for (int e = threadIdx.x; e < width; e += blockDim.x) {
        const int hk = e / kv.head_dim;
        const int d = e % kv.head_dim;
        const size_t idx =
            (((size_t)blk * (size_t)kv.n_head_kv + (size_t)hk) * (size_t)kv.block_size +
             (size_t)off) *
                (size_t)kv.head_dim +
            (size_t)d;
        if (kv.f16) {
            ((uint16_t *)kv.d_k)[idx] = kcu_f32_to_f16(kr[e]);
            ((uint16_t *)kv.d_v)[idx] = kcu_f32_to_f16(vr[e]);
        } else {
            ((float *)kv.d_k)[idx] = kr[e];
            ((float *)kv.d_v)[idx] = vr[e];
        }
    }
}

static bool kv_ok(const kcu_paged_kv *kv)
{
    return kv && kv->d_k && kv->d_v && kv->block_size >= 1 &&
           kv->block_size <= KCU_ATTN_MAX_BLOCK && kv->n_head_kv >= 1 && kv->head_dim >= 1 &&
           kv->head_dim <= KCU_ATTN_MAX_HEAD_DIM;
}

extern "C" int kcu_store_kv(kcu_ctx *c, const kcu_paged_kv *kv, const float *d_k, const float *d_v,
                            const int32_t *d_slot, int32_t n)
{
    if (!c || !kv_ok(kv) || n < 0 || (n > 0 && (!d_k || !d_v || !d_slot))) {
        return -EINVAL;
    }
    if (n == 0) {
        return 0;
    }
    store_kv_kernel<<<(unsigned)n, KCU_STORE_THREADS, 0, kcu_stream(c)>>>(*kv, d_k, d_v, d_slot);
    return kcu_check_launch("kcu_store_kv");
}

/* ---- attention ---- */

__device__ __forceinline__ float kv_elem(const void *pool, bool f16, size_t idx)
{
    return f16 ? kcu_f16_to_f32(((const uint16_t *)pool)[idx]) : ((const float *)pool)[idx];
}

/* Floats of one partial state in the workspace: m, l, acc[head_dim]. */
__host__ __device__ static inline size_t part_floats(int head_dim)
{
    return (size_t)head_dim + 2;
}

/* grid (n_tokens, n_head, n_splits). n_splits == 1: writes out; else partial states to wsp,
 * indexed ((token * n_head + head) * n_splits + split). */
__global__ static void __launch_bounds__(KCU_ATTN_THREADS)
    attn_kernel(kcu_paged_kv kv, kcu_attn_batch a, int n_splits, int split_blocks, float *wsp)
{
    __shared__ float qs[KCU_ATTN_MAX_HEAD_DIM];
    __shared__ float sc[KCU_ATTN_MAX_BLOCK];
    const int32_t t = (int32_t)blockIdx.x;
    const int h = (int)blockIdx.y;
    const int sp = (int)blockIdx.z;
    const int tid = (int)threadIdx.x;
    const int lane = tid % KCU_WARP;
    const int warp = tid / KCU_WARP;
    const int hd = kv.head_dim;
    const int bs = kv.block_size;

    int32_t s = 0;
    while (s < a.n_seqs && !(t >= a.d_seq_tok[s] && t < a.d_seq_tok[s] + a.d_seq_new[s])) {
        s++;
    }
    /* a token of no sequence (none in a well-formed batch) attends to nothing: zeros out */
    const bool orphan = s == a.n_seqs;
    const int32_t n_keys = orphan ? 0 : a.d_seq_start[s] + (t - a.d_seq_tok[s]) + 1;
    const int32_t *bt = orphan ? a.d_block_tables : a.d_block_tables + a.d_seq_bt[s];
    const int hk = h / (a.n_head / kv.n_head_kv);
    const int64_t row = (int64_t)a.n_head * hd;

    for (int d = tid; d < hd; d += KCU_ATTN_THREADS) {
        qs[d] = a.d_q[t * row + (int64_t)h * hd + d];
    }
    float acc[KCU_ATTN_DIMS];
    for (int k = 0; k < KCU_ATTN_DIMS; k++) {
        acc[k] = 0.0f;
    }
    kcu_os st = kcu_os_init();
    const int32_t n_blocks = (n_keys + bs - 1) / bs;
    /* split sp covers table entries [sp * split_blocks, +split_blocks); the last one runs to the
     * end of the context whatever max_ctx said */
    const int32_t b_begin = n_splits == 1 ? 0 : sp * split_blocks;
    const int32_t b_end =
        sp == n_splits - 1 || b_begin + split_blocks > n_blocks ? n_blocks : b_begin + split_blocks;
    __syncthreads();

    for (int32_t b = b_begin; b < b_end; b++) {
        const int cnt = n_keys - b * bs < bs ? n_keys - b * bs : bs;
        const size_t base =
            ((size_t)bt[b] * (size_t)kv.n_head_kv + (size_t)hk) * (size_t)bs * (size_t)hd;
        for (int j = warp; j < cnt; j += KCU_ATTN_WARPS) {
            float part = 0.0f;
            for (int d = lane; d < hd; d += KCU_WARP) {
                part =
                    kcu_dot_step(part, qs[d], kv_elem(kv.d_k, kv.f16, base + (size_t)j * hd + d));
            }
            const float dot = kcu_warp_sum(part);
            if (lane == 0) {
                sc[j] = kcu_mul_rn(dot, a.scale);
            }
        }
        __syncthreads();
        float tile_max = -INFINITY;
        for (int j = 0; j < cnt; j++) {
            tile_max = sc[j] > tile_max ? sc[j] : tile_max;
        }
        const float corr = kcu_os_rescale(&st, tile_max);
        for (int k = 0; k < KCU_ATTN_DIMS; k++) {
            acc[k] = kcu_mul_rn(acc[k], corr);
        }
        __syncthreads(); /* every thread has read the scores before they become weights */
        for (int j = tid; j < cnt; j += KCU_ATTN_THREADS) {
            sc[j] = kcu_os_weight(sc[j], st.m);
        }
        __syncthreads();
        for (int j = 0; j < cnt; j++) {
            const float p = sc[j];
            st.l += p;
            for (int k = 0; k < KCU_ATTN_DIMS; k++) {
                const int d = tid + k * KCU_ATTN_THREADS;
                if (d < hd) {
                    acc[k] =
                        kcu_os_axpy(acc[k], p, kv_elem(kv.d_v, kv.f16, base + (size_t)j * hd + d));
                }
            }
        }
        __syncthreads(); /* sc is rewritten by the next tile */
    }

    if (n_splits == 1) {
        float *out = a.d_out + t * row + (int64_t)h * hd;
        for (int k = 0; k < KCU_ATTN_DIMS; k++) {
            const int d = tid + k * KCU_ATTN_THREADS;
            if (d < hd) {
                out[d] = kcu_os_out(acc[k], st.l);
            }
        }
        return;
    }
    float *part =
        wsp + (((size_t)t * (size_t)a.n_head + (size_t)h) * (size_t)n_splits + (size_t)sp) *
                  part_floats(hd);
    if (tid == 0) {
        part[0] = st.m;
        part[1] = st.l;
    }
    for (int k = 0; k < KCU_ATTN_DIMS; k++) {
        const int d = tid + k * KCU_ATTN_THREADS;
        if (d < hd) {
            part[2 + d] = acc[k];
        }
    }
}

/* grid (n_tokens, n_head): merges the n_splits partial states of one query in split order. */
__global__ static void __launch_bounds__(KCU_ATTN_THREADS)
    attn_merge_kernel(kcu_attn_batch a, int head_dim, int n_splits, const float *wsp)
{
    const int32_t t = (int32_t)blockIdx.x;
    const int h = (int)blockIdx.y;
    const float *parts =
        wsp + ((size_t)t * (size_t)a.n_head + (size_t)h) * (size_t)n_splits * part_floats(head_dim);
    float acc[KCU_ATTN_DIMS];
    for (int k = 0; k < KCU_ATTN_DIMS; k++) {
        acc[k] = 0.0f;
    }
    kcu_os st = kcu_os_init();
    for (int sp = 0; sp < n_splits; sp++) {
        const float *p = parts + (size_t)sp * part_floats(head_dim);
        kcu_os b;
        b.m = p[0];
        b.l = p[1];
        float ca, cb;
        kcu_os_merge(&st, b, &ca, &cb);
        for (int k = 0; k < KCU_ATTN_DIMS; k++) {
            const int d = (int)threadIdx.x + k * KCU_ATTN_THREADS;
            if (d < head_dim) {
                acc[k] = kcu_os_merge_acc(acc[k], ca, p[2 + d], cb);
            }
        }
    }
    float *out = a.d_out + ((int64_t)t * a.n_head + h) * head_dim;
    for (int k = 0; k < KCU_ATTN_DIMS; k++) {
        const int d = (int)threadIdx.x + k * KCU_ATTN_THREADS;
        if (d < head_dim) {
            out[d] = kcu_os_out(acc[k], st.l);
        }
    }
}

/* Prefill: grid (n_seqs, query tiles, n_head); the block takes KCU_PREFILL_QT consecutive new
 * tokens of one sequence and one head, and walks the sequence's KV blocks once for all of them:
 * per KV block the scores of every (query, key) pair (a warp per pair, the decode kernel's dot),
 * then per query the decode kernel's online-softmax step over the keys that query sees (causal:
 * key position <= query position; a query skips blocks wholly after it, as kc_attention). Each
 * query's arithmetic is therefore the decode kernel's (and the host emulation's) exactly; the
 * tile only shares the K/V reads. */
__global__ static void __launch_bounds__(KCU_ATTN_THREADS)
    attn_prefill_kernel(kcu_paged_kv kv, kcu_attn_batch a)
{
    __shared__ float qs[KCU_PREFILL_QT][KCU_ATTN_MAX_HEAD_DIM];
    __shared__ float sc[KCU_PREFILL_QT][KCU_ATTN_MAX_BLOCK];
    const int s = (int)blockIdx.x;
    const int32_t q0 = (int32_t)blockIdx.y * KCU_PREFILL_QT; /* first query of the tile */
    const int h = (int)blockIdx.z;
    const int tid = (int)threadIdx.x;
    const int lane = tid % KCU_WARP;
    const int warp = tid / KCU_WARP;
    const int hd = kv.head_dim;
    const int bs = kv.block_size;
    const int32_t n_new = a.d_seq_new[s];
    if (q0 >= n_new) {
        return;
    }
    const int nq = n_new - q0 < KCU_PREFILL_QT ? n_new - q0 : KCU_PREFILL_QT;
    const int32_t start = a.d_seq_start[s];
    const int32_t tok0 = a.d_seq_tok[s] + q0;
    const int32_t *bt = a.d_block_tables + a.d_seq_bt[s];
    const int hk = h / (a.n_head / kv.n_head_kv);
    const int64_t row = (int64_t)a.n_head * hd;

    for (int e = tid; e < nq * hd; e += KCU_ATTN_THREADS) {
        const int qi = e / hd;
        const int d = e % hd;
        qs[qi][d] = a.d_q[(tok0 + qi) * row + (int64_t)h * hd + d];
    }
    float acc[KCU_PREFILL_QT][KCU_ATTN_DIMS];
    kcu_os st[KCU_PREFILL_QT];
    for (int qi = 0; qi < KCU_PREFILL_QT; qi++) {
        st[qi] = kcu_os_init();
        for (int k = 0; k < KCU_ATTN_DIMS; k++) {
            acc[qi][k] = 0.0f;
        }
    }
    /* query qi sees keys [0, start + q0 + qi]: n_keys = start + q0 + qi + 1 */
    const int32_t keys_last = start + q0 + nq; /* keys of the tile's last query */
    const int32_t n_blocks = (keys_last + bs - 1) / bs;
    __syncthreads();

    for (int32_t b = 0; b < n_blocks; b++) {
        const size_t base =
            ((size_t)bt[b] * (size_t)kv.n_head_kv + (size_t)hk) * (size_t)bs * (size_t)hd;
        const int cnt_all = keys_last - b * bs < bs ? keys_last - b * bs : bs;
        for (int pair = warp; pair < nq * cnt_all; pair += KCU_ATTN_WARPS) {
            const int qi = pair / cnt_all;
            const int j = pair % cnt_all;
            if (b * bs + j > start + q0 + qi) {
                continue; /* after the query: masked (never read below) */
            }
            float part = 0.0f;
            for (int d = lane; d < hd; d += KCU_WARP) {
                part = kcu_dot_step(part, qs[qi][d],
                                    kv_elem(kv.d_k, kv.f16, base + (size_t)j * hd + d));
            }
            const float dot = kcu_warp_sum(part);
            if (lane == 0) {
                sc[qi][j] = kcu_mul_rn(dot, a.scale);
            }
        }
        __syncthreads();
        for (int qi = 0; qi < nq; qi++) {
            const int32_t n_keys = start + q0 + qi + 1;
            const int cnt = n_keys - b * bs < bs ? n_keys - b * bs : bs;
            if (cnt <= 0) {
                continue; /* this block is wholly after query qi */
            }
            float tile_max = -INFINITY;
            for (int j = 0; j < cnt; j++) {
                tile_max = sc[qi][j] > tile_max ? sc[qi][j] : tile_max;
            }
            const float corr = kcu_os_rescale(&st[qi], tile_max);
            for (int k = 0; k < KCU_ATTN_DIMS; k++) {
                acc[qi][k] = kcu_mul_rn(acc[qi][k], corr);
            }
        }
        __syncthreads(); /* scores read by all before they become weights */
        for (int pair = tid; pair < nq * cnt_all; pair += KCU_ATTN_THREADS) {
            const int qi = pair / cnt_all;
            const int j = pair % cnt_all;
            if (b * bs + j <= start + q0 + qi) {
                sc[qi][j] = kcu_os_weight(sc[qi][j], st[qi].m);
            }
        }
        __syncthreads();
        for (int j = 0; j < cnt_all; j++) {
            float vj[KCU_ATTN_DIMS];
            for (int k = 0; k < KCU_ATTN_DIMS; k++) {
                const int d = tid + k * KCU_ATTN_THREADS;
                vj[k] = d < hd ? kv_elem(kv.d_v, kv.f16, base + (size_t)j * hd + d) : 0.0f;
            }
            for (int qi = 0; qi < nq; qi++) {
                if (b * bs + j > start + q0 + qi) {
                    continue;
                }
                const float p = sc[qi][j];
                st[qi].l += p;
                for (int k = 0; k < KCU_ATTN_DIMS; k++) {
                    acc[qi][k] = kcu_os_axpy(acc[qi][k], p, vj[k]);
                }
            }
        }
        __syncthreads(); /* sc is rewritten by the next block */
    }

    for (int qi = 0; qi < nq; qi++) {
        float *out = a.d_out + (tok0 + qi) * row + (int64_t)h * hd;
        for (int k = 0; k < KCU_ATTN_DIMS; k++) {
            const int d = tid + k * KCU_ATTN_THREADS;
            if (d < hd) {
                out[d] = kcu_os_out(acc[qi][k], st[qi].l);
            }
        }
    }
}

/* Splits kcu_attention uses for a batch: only decode batches (one new token per sequence)
 * split, and only when the context is longer than one split. */
static int attn_splits(const kcu_paged_kv *kv, const kcu_attn_batch *a)
{
    if (a->max_new != 1) {
        return 1;
    }
    return kcu_attn_n_splits(a->max_ctx, kv->block_size);
}

extern "C" size_t kcu_attention_workspace(const kcu_paged_kv *kv, const kcu_attn_batch *a)
{
    if (!kv_ok(kv) || !a || a->n_tokens <= 0 || a->n_head <= 0) {
        return 0;
    }
    const int n_splits = attn_splits(kv, a);
    if (n_splits <= 1) {
        return 0;
    }
    return (size_t)a->n_tokens * (size_t)a->n_head * (size_t)n_splits * part_floats(kv->head_dim) *
           sizeof(float);
}

extern "C" int kcu_attention(kcu_ctx *c, const kcu_paged_kv *kv, const kcu_attn_batch *a,
                             void *d_wsp, size_t wsp_bytes)
{
    if (!c || !kv_ok(kv) || !a || a->n_head <= 0 || a->n_head > 65535 ||
        a->n_head % kv->n_head_kv != 0 || a->n_seqs < 0 || a->n_tokens < 0 || a->max_new < 0 ||
        a->max_ctx < 0) {
        return -EINVAL;
    }
    if (a->n_tokens == 0 || a->n_seqs == 0) {
        return 0;
    }
    if (!a->d_seq_tok || !a->d_seq_new || !a->d_seq_start || !a->d_seq_bt || !a->d_block_tables ||
        !a->d_q || !a->d_out) {
        return -EINVAL;
    }
    if (a->max_new > 1) {
        if ((a->max_new + KCU_PREFILL_QT - 1) / KCU_PREFILL_QT > 65535) {
            return -EINVAL;
        }
        const dim3 pgrid((unsigned)a->n_seqs,
                         (unsigned)((a->max_new + KCU_PREFILL_QT - 1) / KCU_PREFILL_QT),
                         (unsigned)a->n_head);
        attn_prefill_kernel<<<pgrid, KCU_ATTN_THREADS, 0, kcu_stream(c)>>>(*kv, *a);
        return kcu_check_launch("kcu_attention prefill");
    }
    int n_splits = attn_splits(kv, a);
    if (n_splits > 65535 || !d_wsp || wsp_bytes < kcu_attention_workspace(kv, a)) {
        n_splits = 1; /* no room for partial states: one pass over every context */
    }
    const dim3 grid((unsigned)a->n_tokens, (unsigned)a->n_head, (unsigned)n_splits);
    attn_kernel<<<grid, KCU_ATTN_THREADS, 0, kcu_stream(c)>>>(
        *kv, *a, n_splits, kcu_attn_split_blocks(kv->block_size), (float *)d_wsp);
    int rc = kcu_check_launch("kcu_attention");
    if (rc != 0 || n_splits == 1) {
        return rc;
    }
    const dim3 mgrid((unsigned)a->n_tokens, (unsigned)a->n_head);
    attn_merge_kernel<<<mgrid, KCU_ATTN_THREADS, 0, kcu_stream(c)>>>(*a, kv->head_dim, n_splits,
                                                                     (const float *)d_wsp);
    return kcu_check_launch("kcu_attention merge");
}
