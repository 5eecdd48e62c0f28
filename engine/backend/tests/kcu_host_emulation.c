/*
 * A host emulation of the kernel ABI of kernels/cuda/kcu.h on the CPU kernels (kernels/cpu), for
 * one test only: unit/backend/cuda_emulated links engine/backend/cuda_backend.c against it
 * instead of libtandem_cuda, so the backend's own code (weight upload and tied-embedding
 * sharing, the batch metadata it builds (positions, KV slots, per-sequence arrays, concatenated
 * block tables), the op order, the logit-row gather and the buffer swaps of the last layer, the
 * logits copy, the growth of its buffers) runs on machines without a GPU, under ASan too.
 *
 * This is NOT the CUDA implementation and says nothing about the kernels: "device" memory is
 * malloc'd host memory, every op runs synchronously on the host, and each op is the CPU
 * backend's kernel for it, so the emulated backend must match the CPU backend exactly except
 * where the device's storage differs (F32 weights are kept as F16, as kcu_weight_upload does).
 * The kernels are tested against the CPU kernels by kernels/cuda/tests on a GPU.
 *
 * It emulates EMU_DEVICES devices, and kcu_comm (NCCL) with the host collective of
 * engine/core/tp.h, so tensor parallelism over the CUDA backend's ranks runs here too.
 *
 * CUDA graphs: between kcu_capture_begin and kcu_capture_end the ops are recorded, with their
 * arguments by value as a kernel launch captures them (structs copied, pointers kept), and run
 * only when the graph is launched, as on a device: a backend that captured a stale pointer or
 * a value that changes between steps gets wrong logits here too.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_matmul.h"
#include "kernels/cpu/kc_ops.h"
#include "kernels/cpu/kc_pool.h"
#include "engine/core/tp.h"
#include "kernels/cuda/kcu.h"

#define EMU_HDR     64 /* bytes before a weight's data: its kc_weight */
#define EMU_DEVICES 4

typedef enum emu_op {
    EMU_MATMUL,
    EMU_EMBED,
    EMU_RMSNORM,
    EMU_ADD_BIAS,
    EMU_ADD,
    EMU_SWIGLU,
    EMU_ROPE,
    EMU_GATHER,
    EMU_STORE_KV,
    EMU_ATTENTION,
} emu_op;

/* One recorded op: its arguments by value. */
typedef struct emu_node {
    emu_op op;
    kcu_weight w;
    kcu_paged_kv kv;
    kcu_attn_batch ab;
    const void *in[3];
    void *out[2];
    int64_t n, dim;
    int i0, i1, i2;
    float f;
    kcu_rope_scaling rope;
    bool flag;
    tdtype type;
    size_t bytes;
} emu_node;

struct kcu_graph {
    emu_node *nodes;
    int n, cap;
    bool failed; /* recording ran out of memory */
};

struct kcu_ctx {
    kc_pool *pool;
    kcu_graph *rec; /* the graph being captured, or NULL */
};

/* Appends a node to the capture; true when c is capturing (the op must not run now). */
static bool emu_record(kcu_ctx *c, const emu_node *nd)
{
    kcu_graph *g = c->rec;
    if (!g) {
        return false;
    }
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        emu_node *p = realloc(g->nodes, sizeof(*p) * (size_t)cap);
        if (!p) {
            g->failed = true;
            return true;
        }
        g->nodes = p;
        g->cap = cap;
    }
    g->nodes[g->n++] = *nd;
    return true;
}

int kcu_device_count(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return EMU_DEVICES;
}

int kcu_device_query(int dev, kcu_device_info *info, char *err, size_t errlen)
{
    if (dev < 0 || dev >= EMU_DEVICES) {
        snprintf(err, errlen, "host emulation: no device %d", dev);
        return -ENODEV;
    }
    memset(info, 0, sizeof(*info));
    snprintf(info->name, sizeof(info->name), "host emulation of kcu.h");
    info->cc_major = 9;
    info->total_bytes = (size_t)8 << 30;
    info->free_bytes = (size_t)7 << 30;
    info->sm_count = 1;
    return 0;
}

bool kcu_device_supported(const kcu_device_info *info)
{
    return info->cc_major >= 8;
}

kcu_ctx *kcu_ctx_create(int dev, char *err, size_t errlen)
{
    kcu_ctx *c = calloc(1, sizeof(*c));
    if (dev < 0 || dev >= EMU_DEVICES || !c || !(c->pool = kc_pool_new(1, false))) {
        snprintf(err, errlen, "host emulation: cannot create a context");
        free(c);
        return NULL;
    }
    return c;
}

void kcu_graph_free(kcu_graph *g);

void kcu_ctx_destroy(kcu_ctx *c)
{
    if (c) {
        kcu_graph_free(c->rec);
        kc_pool_free(c->pool);
        free(c);
    }
}

/* ---- collectives: one host communicator shared by the clique ---- */

struct kcu_comm {
    tp_comm *host; /* shared; rank 0's comm owns it */
    int rank;
};

int kcu_comm_init_all(int n, kcu_comm **comms, char *err, size_t errlen)
{
    tp_comm *host = n > 0 && n <= EMU_DEVICES ? tp_comm_host_new(n) : NULL;
    if (!host) {
        snprintf(err, errlen, "host emulation: no clique of %d devices", n);
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        comms[i] = calloc(1, sizeof(kcu_comm));
        if (!comms[i]) {
            for (int j = 0; j < i; j++) {
                free(comms[j]);
            }
            host->ops->free(host);
            snprintf(err, errlen, "host emulation: out of memory");
            return -ENOMEM;
        }
        comms[i]->host = host;
        comms[i]->rank = i;
    }
    return 0;
}

int kcu_all_reduce_sum(kcu_comm *comm, kcu_ctx *c, float *d_buf, size_t n)
{
    (void)c;
    return comm->host->ops->all_reduce_sum(comm->host, comm->rank, d_buf, n, NULL);
}

void kcu_comm_abort(kcu_comm *comm)
{
    comm->host->ops->abort(comm->host);
}

void kcu_comm_destroy(kcu_comm *comm)
{
    if (comm && comm->rank == 0) {
        comm->host->ops->free(comm->host);
    }
    free(comm);
}

const char *kcu_last_error(void)
{
    return "";
}

void *kcu_malloc(kcu_ctx *c, size_t bytes)
{
    (void)c;
    return bytes <= ((size_t)7 << 30) ? malloc(bytes ? bytes : 1) : NULL;
}

void kcu_free(kcu_ctx *c, void *d_ptr)
{
    (void)c;
    free(d_ptr);
}

int kcu_memset(kcu_ctx *c, void *d_ptr, int value, size_t bytes)
{
    (void)c;
    memset(d_ptr, value, bytes);
    return 0;
}

/* Copies and syncs are not captured by the backend: inside a capture they are its bug. */
int kcu_h2d(kcu_ctx *c, void *d_dst, const void *h_src, size_t bytes)
{
    if (c->rec) {
        return -EINVAL;
    }
    memcpy(d_dst, h_src, bytes);
    return 0;
}

int kcu_d2h(kcu_ctx *c, void *h_dst, const void *d_src, size_t bytes)
{
    if (c->rec) {
        return -EINVAL;
    }
    memcpy(h_dst, d_src, bytes);
    return 0;
}

int kcu_sync(kcu_ctx *c)
{
    return c->rec ? -EIO : 0; /* cudaStreamSynchronize during a capture invalidates it */
}

void *kcu_host_alloc(size_t bytes)
{
    return malloc(bytes ? bytes : 1);
}

void kcu_host_free(void *h_ptr)
{
    free(h_ptr);
}

static kc_weight *emu_kw(const kcu_weight *w)
{
    return (kc_weight *)((uint8_t *)w->d_data - EMU_HDR);
}

int kcu_weight_upload(kcu_ctx *c, kcu_weight *w, tdtype src_type, const void *h_data, int64_t rows,
                      int64_t cols)
{
    (void)c;
    const tdtype dt = src_type == TD_F32 ? TD_F16 : src_type;
    const size_t rb = td_row_bytes(dt, cols);
    if (!td_supported(src_type) || rb == 0 || rows < 1) {
        return -EINVAL;
    }
    uint8_t *mem = aligned_alloc(64, (EMU_HDR + rb * (size_t)rows + 63) / 64 * 64);
    if (!mem) {
        return -ENOMEM;
    }
    uint8_t *data = mem + EMU_HDR;
    if (src_type == TD_F32) {
        for (int64_t r = 0; r < rows; r++) {
            kc_f32_to_f16_row((const float *)h_data + r * cols, (uint16_t *)(data + rb * (size_t)r),
                              cols);
        }
    } else {
        memcpy(data, h_data, rb * (size_t)rows);
    }
    kc_weight *kw = (kc_weight *)mem;
    *kw = (kc_weight){.type = dt, .k = cols, .m = rows, .data = data};
    if (kc_weight_prepare(kw) != 0) {
        free(mem);
        return -ENOMEM;
    }
    *w = (kcu_weight){.type = dt, .rows = rows, .cols = cols, .d_data = data};
    return 0;
}

void kcu_weight_free(kcu_ctx *c, kcu_weight *w)
{
    (void)c;
    if (w->d_data) {
        kc_weight *kw = emu_kw(w);
        kc_weight_release(kw);
        free(kw);
        w->d_data = NULL;
    }
}

size_t kcu_matmul_workspace(const kcu_weight *w, int64_t n)
{
    kc_weight kw = {.type = w->type, .k = w->cols, .m = w->rows};
    return kc_matmul_wsize(&kw, n);
}

static int emu_matmul(kcu_ctx *c, const kcu_weight *w, const float *d_x, int64_t n, float *d_y,
                      void *d_wsp, size_t wsp_bytes)
{
    return kc_matmul(c->pool, emu_kw(w), d_x, n, d_y, d_wsp, wsp_bytes);
}

static int emu_embed(kcu_ctx *c, tdtype type, const void *d_table, int64_t dim,
                     const int32_t *d_ids, int32_t n, float *d_out)
{
    (void)c;
    for (int32_t i = 0; i < n; i++) {
        if (kc_embed_row(type, d_table, dim, d_ids[i], d_out + (int64_t)i * dim) != 0) {
            return -EINVAL;
        }
    }
    return 0;
}

static int emu_rmsnorm(kcu_ctx *c, const float *d_x, const float *d_w, float *d_y, int64_t n,
                       int64_t dim, float eps)
{
    (void)c;
    for (int64_t i = 0; i < n; i++) {
        kc_rmsnorm(d_x + i * dim, d_w, d_y + i * dim, dim, eps);
    }
    return 0;
}

static int emu_add_bias(kcu_ctx *c, float *d_x, const float *d_b, int64_t n, int64_t dim)
{
    (void)c;
    for (int64_t i = 0; i < n; i++) {
        kc_add(d_x + i * dim, d_b, dim);
    }
    return 0;
}

static int emu_add(kcu_ctx *c, float *d_y, const float *d_x, int64_t n)
{
    (void)c;
    kc_add(d_y, d_x, n);
    return 0;
}

static int emu_swiglu(kcu_ctx *c, float *d_gate, const float *d_up, int64_t n)
{
    (void)c;
    kc_swiglu(d_gate, d_up, d_gate, n);
    return 0;
}

static int emu_rope(kcu_ctx *c, float *d_x, int64_t n, int n_head, int head_dim, int n_rot,
                    const int32_t *d_pos, float base, bool neox, const kcu_rope_scaling *s)
{
    (void)c;
    float cs[KC_ATTN_MAX_HEAD_DIM];
    for (int64_t i = 0; i < n; i++) {
        kc_rope_cache_yarn(cs, n_rot, d_pos[i], base, s->freq_scale, s->d_freq_factors,
                           s->ext_factor, s->attn_factor, s->corr_dims);
        kc_rope_apply(d_x + i * n_head * head_dim, n_head, head_dim, n_rot, cs, neox);
    }
    return 0;
}

static int emu_gather_rows(kcu_ctx *c, float *d_dst, const float *d_src, const int32_t *d_rows,
                           int32_t n, int64_t dim)
{
    (void)c;
    for (int32_t i = 0; i < n; i++) {
        memcpy(d_dst + (int64_t)i * dim, d_src + (int64_t)d_rows[i] * dim,
               sizeof(float) * (size_t)dim);
    }
    return 0;
}

static int emu_store_kv(kcu_ctx *c, const kcu_paged_kv *kv, const float *d_k, const float *d_v,
                        const int32_t *d_slot, int32_t n)
{
    (void)c;
    const size_t hd = (size_t)kv->head_dim, bs = (size_t)kv->block_size;
    for (int32_t t = 0; t < n; t++) {
        const size_t blk = (size_t)d_slot[t] / bs, off = (size_t)d_slot[t] % bs;
        for (int h = 0; h < kv->n_head_kv; h++) {
            const size_t slot = ((blk * (size_t)kv->n_head_kv + (size_t)h) * bs + off) * hd;
            const float *kr = d_k + ((size_t)t * (size_t)kv->n_head_kv + (size_t)h) * hd;
            const float *vr = d_v + ((size_t)t * (size_t)kv->n_head_kv + (size_t)h) * hd;
            if (kv->f16) {
                kc_f32_to_f16_row(kr, (uint16_t *)kv->d_k + slot, (int64_t)hd);
                kc_f32_to_f16_row(vr, (uint16_t *)kv->d_v + slot, (int64_t)hd);
            } else {
                memcpy((float *)kv->d_k + slot, kr, sizeof(float) * hd);
                memcpy((float *)kv->d_v + slot, vr, sizeof(float) * hd);
            }
        }
    }
    return 0;
}

size_t kcu_attention_workspace(const kcu_paged_kv *kv, const kcu_attn_batch *a)
{
    (void)kv;
    return sizeof(kc_attn_seq) * (size_t)a->n_seqs;
}

static int emu_attention(kcu_ctx *c, const kcu_paged_kv *kv, const kcu_attn_batch *a, void *d_wsp,
                         size_t wsp_bytes)
{
    if (wsp_bytes < kcu_attention_workspace(kv, a)) {
        return -EINVAL;
    }
    kc_attn_seq *seqs = d_wsp;
    const int64_t qd = (int64_t)a->n_head * kv->head_dim;
    for (int32_t s = 0; s < a->n_seqs; s++) {
        seqs[s] = (kc_attn_seq){.n_new = a->d_seq_new[s],
                                .start_pos = a->d_seq_start[s],
                                .block_table = a->d_block_tables + a->d_seq_bt[s],
                                .q = a->d_q + (int64_t)a->d_seq_tok[s] * qd,
                                .out = a->d_out + (int64_t)a->d_seq_tok[s] * qd};
    }
    kc_paged_kv ckv = {.k = kv->d_k,
                       .v = kv->d_v,
                       .f16 = kv->f16,
                       .block_size = kv->block_size,
                       .n_head_kv = kv->n_head_kv,
                       .head_dim = kv->head_dim};
    return kc_attention(c->pool, &ckv, a->n_head, seqs, a->n_seqs, qd, qd, a->scale);
}

/* ---- the public ops: recorded while capturing, else run ---- */

int kcu_matmul(kcu_ctx *c, const kcu_weight *w, const float *d_x, int64_t n, float *d_y,
               void *d_wsp, size_t wsp_bytes)
{
    emu_node nd = {
        .op = EMU_MATMUL, .w = *w, .in = {d_x}, .out = {d_y, d_wsp}, .n = n, .bytes = wsp_bytes};
    return emu_record(c, &nd) ? 0 : emu_matmul(c, w, d_x, n, d_y, d_wsp, wsp_bytes);
}

int kcu_embed(kcu_ctx *c, tdtype type, const void *d_table, int64_t dim, const int32_t *d_ids,
              int32_t n, float *d_out)
{
    emu_node nd = {
        .op = EMU_EMBED, .type = type, .in = {d_table, d_ids}, .out = {d_out}, .dim = dim, .n = n};
    return emu_record(c, &nd) ? 0 : emu_embed(c, type, d_table, dim, d_ids, n, d_out);
}

int kcu_rmsnorm(kcu_ctx *c, const float *d_x, const float *d_w, float *d_y, int64_t n, int64_t dim,
                float eps)
{
    emu_node nd = {.op = EMU_RMSNORM, .in = {d_x, d_w}, .out = {d_y}, .n = n, .dim = dim, .f = eps};
    return emu_record(c, &nd) ? 0 : emu_rmsnorm(c, d_x, d_w, d_y, n, dim, eps);
}

int kcu_add_bias(kcu_ctx *c, float *d_x, const float *d_b, int64_t n, int64_t dim)
{
    emu_node nd = {.op = EMU_ADD_BIAS, .in = {d_b}, .out = {d_x}, .n = n, .dim = dim};
    return emu_record(c, &nd) ? 0 : emu_add_bias(c, d_x, d_b, n, dim);
}

int kcu_add(kcu_ctx *c, float *d_y, const float *d_x, int64_t n)
{
    emu_node nd = {.op = EMU_ADD, .in = {d_x}, .out = {d_y}, .n = n};
    return emu_record(c, &nd) ? 0 : emu_add(c, d_y, d_x, n);
}

int kcu_swiglu(kcu_ctx *c, float *d_gate, const float *d_up, int64_t n)
{
    emu_node nd = {.op = EMU_SWIGLU, .in = {d_up}, .out = {d_gate}, .n = n};
    return emu_record(c, &nd) ? 0 : emu_swiglu(c, d_gate, d_up, n);
}

int kcu_rope(kcu_ctx *c, float *d_x, int64_t n, int n_head, int head_dim, int n_rot,
             const int32_t *d_pos, float base, bool neox, const kcu_rope_scaling *s)
{
    const kcu_rope_scaling none = {.freq_scale = 1.0f, .attn_factor = 1.0f};
    emu_node nd = {.op = EMU_ROPE,
                   .in = {d_pos},
                   .out = {d_x},
                   .n = n,
                   .i0 = n_head,
                   .i1 = head_dim,
                   .i2 = n_rot,
                   .f = base,
                   .rope = s ? *s : none,
                   .flag = neox};
    return emu_record(c, &nd)
               ? 0
               : emu_rope(c, d_x, n, n_head, head_dim, n_rot, d_pos, base, neox, &nd.rope);
}

int kcu_gather_rows(kcu_ctx *c, float *d_dst, const float *d_src, const int32_t *d_rows, int32_t n,
                    int64_t dim)
{
    emu_node nd = {.op = EMU_GATHER, .in = {d_src, d_rows}, .out = {d_dst}, .n = n, .dim = dim};
    return emu_record(c, &nd) ? 0 : emu_gather_rows(c, d_dst, d_src, d_rows, n, dim);
}

int kcu_store_kv(kcu_ctx *c, const kcu_paged_kv *kv, const float *d_k, const float *d_v,
                 const int32_t *d_slot, int32_t n)
{
    emu_node nd = {.op = EMU_STORE_KV, .kv = *kv, .in = {d_k, d_v, d_slot}, .n = n};
    return emu_record(c, &nd) ? 0 : emu_store_kv(c, kv, d_k, d_v, d_slot, n);
}

int kcu_attention(kcu_ctx *c, const kcu_paged_kv *kv, const kcu_attn_batch *a, void *d_wsp,
                  size_t wsp_bytes)
{
    emu_node nd = {.op = EMU_ATTENTION, .kv = *kv, .ab = *a, .out = {d_wsp}, .bytes = wsp_bytes};
    return emu_record(c, &nd) ? 0 : emu_attention(c, kv, a, d_wsp, wsp_bytes);
}

/* ---- graphs ---- */

int kcu_capture_begin(kcu_ctx *c)
{
    if (!c || c->rec) {
        return -EINVAL;
    }
    c->rec = calloc(1, sizeof(kcu_graph));
    return c->rec ? 0 : -ENOMEM;
}

int kcu_capture_end(kcu_ctx *c, kcu_graph **out)
{
    if (out) {
        *out = NULL;
    }
    if (!c || !c->rec) {
        return -EINVAL;
    }
    kcu_graph *g = c->rec;
    c->rec = NULL;
    if (g->failed || !out) {
        kcu_graph_free(g);
        return out ? -ENOMEM : 0;
    }
    *out = g;
    return 0;
}

static int emu_run(kcu_ctx *c, const emu_node *nd)
{
    switch (nd->op) {
    case EMU_MATMUL:
        return emu_matmul(c, &nd->w, nd->in[0], nd->n, nd->out[0], nd->out[1], nd->bytes);
    case EMU_EMBED:
        return emu_embed(c, nd->type, nd->in[0], nd->dim, nd->in[1], (int32_t)nd->n, nd->out[0]);
    case EMU_RMSNORM:
        return emu_rmsnorm(c, nd->in[0], nd->in[1], nd->out[0], nd->n, nd->dim, nd->f);
    case EMU_ADD_BIAS:
        return emu_add_bias(c, nd->out[0], nd->in[0], nd->n, nd->dim);
    case EMU_ADD:
        return emu_add(c, nd->out[0], nd->in[0], nd->n);
    case EMU_SWIGLU:
        return emu_swiglu(c, nd->out[0], nd->in[0], nd->n);
    case EMU_ROPE:
        return emu_rope(c, nd->out[0], nd->n, nd->i0, nd->i1, nd->i2, nd->in[0], nd->f, nd->flag,
                        &nd->rope);
    case EMU_GATHER:
        return emu_gather_rows(c, nd->out[0], nd->in[0], nd->in[1], (int32_t)nd->n, nd->dim);
    case EMU_STORE_KV:
        return emu_store_kv(c, &nd->kv, nd->in[0], nd->in[1], nd->in[2], (int32_t)nd->n);
    case EMU_ATTENTION:
        return emu_attention(c, &nd->kv, &nd->ab, nd->out[0], nd->bytes);
    }
    return -EINVAL;
}

int kcu_graph_launch(kcu_ctx *c, kcu_graph *g)
{
    if (!c || !g || c->rec) {
        return -EINVAL;
    }
    for (int i = 0; i < g->n; i++) {
        int rc = emu_run(c, &g->nodes[i]);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

void kcu_graph_free(kcu_graph *g)
{
    if (g) {
        free(g->nodes);
        free(g);
    }
}
