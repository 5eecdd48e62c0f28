/*
 * The CUDA compute backend (cuda_backend_ops of engine/core/backend.h): the CPU backend's forward
 * pass (engine/backend/cpu_backend.c, same op order) on the kernels of kernels/cuda (kcu.h).
 *
 * Device memory, allocated in create and kept until destroy:
 *   - weights, uploaded once: matrices through kcu_weight_upload (F32/F16 as F16, BF16 as BF16,
 *     Q8_0/Q4_0 quantised; the other quantized types, which have no device kernels yet, are
 *     dequantised on the host and uploaded as F16), the token embedding table in its host layout
 *     for kcu_embed (F16 for those other types; shared with the output matrix when the output is
 *     tied and the device keeps the host layout, i.e. every type but F32), norms and biases as
 *     f32 vectors;
 *   - one K and one V pool per layer, [num_blocks][n_head_kv][block_size][head_dim] in f32 or
 *     f16, the CPU backend's layout (engine/core/batch.h);
 *   - scratch for T = max(max_batch_tokens, max_seqs) rows, the matmul workspace, the attention
 *     workspace and the batch metadata (tokens, positions, KV slots, sequences, block tables).
 * Per forward: the metadata is written to pinned host memory and copied in one transfer, every
 * op is enqueued on the context's one stream, only the logit rows that sample come back, and the
 * call ends with kcu_sync, so forward is synchronous like the CPU backend's. The block-table and
 * attention-workspace buffers grow (after that sync) when a batch needs more than create sized.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend_check.h"
#include "engine/backend/cuda_backend.h"
#include "engine/core/backend.h"
#include "engine/model/shard.h"
#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_ops.h"
#include "kernels/cuda/kcu.h"
#include "lib/err.h"
#include "lib/log.h"

#define CUDA_MAX_GRAPHS 64  /* captured decode steps kept (batch size x context bucket) */
#define CUDA_GRAPH_CTX0 256 /* the smallest context bucket of a captured step */
#define CUDA_MIB(x)     ((double)(x) / (1024.0 * 1024.0))

typedef struct cuda_layer {
    kcu_weight wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm; /* device [n_embd] */
    float *q_norm, *k_norm;      /* device [head_dim] or NULL */
    float *bq, *bk, *bv;         /* device [q_dim], [kv_dim], [kv_dim] or NULL */
    void *k_pool, *v_pool;       /* device KV pools, pool_bytes each */
} cuda_layer;

struct backend {
    const model *m;
    backend_config cfg;
    kcu_ctx *ctx;
    int n_layer, n_embd, n_head, n_head_kv, hd, n_rot, n_ff, n_vocab, q_dim, kv_dim;
    int32_t T; /* scratch rows */
    size_t kv_esz, pool_bytes;
    cuda_layer *layers;
    kcu_weight output;
    void *d_embd; /* the embedding table in host layout (may alias output.d_data) */
    bool embd_shared;
    tdtype embd_type;
    float *out_norm;
    kcu_rope_scaling rope; /* RoPE scaling (model.h); .d_freq_factors aliases d_rope_freqs */
    float *d_rope_freqs;   /* RoPE divisors (model_rope_freqs) on the device [n_rot / 2], or NULL */
    /* device scratch, T rows */
    float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up;
    float *logits; /* [max_seqs][n_out] */
    void *wsp;     /* matmul workspace */
    size_t wsp_bytes;
    const backend_tp *tp; /* NULL: the whole model */
    /* CUDA graphs of decode steps (see cuda_forward), keyed by batch size and context bucket */
    bool graphs; /* capture and replay (not --enforce-eager, not a tensor-parallel rank) */
    struct {
        int32_t n, ctx;
        kcu_graph *g;
    } graph[CUDA_MAX_GRAPHS];
    int n_graph;
    int32_t n_out; /* output rows: n_vocab, or this rank's vocabulary slice */
    void *awsp;    /* attention workspace (grows) */
    size_t awsp_bytes;
    /* batch metadata: int32 [tokens T][pos T][slot T][seq_tok S][seq_new S][seq_start S]
     * [seq_bt S][out_rows S][block tables bt_cap], host (pinned) and device copies */
    int32_t *h_meta, *d_meta;
    size_t bt_cap;
};

/* Offsets into the metadata buffers. */
enum { META_TOK, META_POS, META_SLOT };
enum { META_SEQ_TOK, META_SEQ_NEW, META_SEQ_START, META_SEQ_BT, META_OUT_ROWS, META_N_SEQ };

static size_t meta_off_tok(const backend *b, int which)
{
    return (size_t)which * (size_t)b->T;
}

static size_t meta_off_seq(const backend *b, int which)
{
    return 3 * (size_t)b->T + (size_t)which * (size_t)b->cfg.max_seqs;
}

static size_t meta_off_bt(const backend *b)
{
    return meta_off_seq(b, META_N_SEQ);
}

static size_t cuda_kv_block_bytes(const model *m, int32_t block_size, kv_dtype dt)
{
    const model_config *c = &m->cfg;
    size_t esz = dt == KV_DTYPE_F16 ? 2 : 4;
    return (size_t)c->n_layer * 2 * (size_t)c->n_head_kv * (size_t)block_size *
           (size_t)c->head_dim * esz;
}

/* ---- checks and sizes shared by create and the memory plan ---- */

/* Types the device kernels take as they are (kcu_weight_upload, kcu_embed); the others are
 * dequantised to F16 on the host first. */
static bool cuda_native_type(tdtype t)
{
    return t == TD_F32 || t == TD_F16 || t == TD_BF16 || t == TD_Q8_0 || t == TD_Q4_0;
}

/* The type a host tensor of type t has on the device (as a matrix or an embedding table). */
static tdtype cuda_device_type(tdtype t)
{
    return t == TD_F32 || !cuda_native_type(t) ? TD_F16 : t;
}

/* rows x k elements of type t at src as F16 (malloc'd), or NULL. */
static uint16_t *cuda_host_f16(tdtype t, const void *src, int64_t k, int64_t rows)
{
    const size_t rb = td_row_bytes(t, k);
    uint16_t *out = malloc(sizeof(uint16_t) * (size_t)k * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)k);
    if (!out || !row || rb == 0) {
        free(out);
        free(row);
        return NULL;
    }
    for (int64_t r = 0; r < rows; r++) {
        if (kc_dequantize_row(t, (const uint8_t *)src + (size_t)r * rb, row, k) != 0) {
            free(out);
            free(row);
            return NULL;
        }
        kc_f32_to_f16_row(row, out + (size_t)r * (size_t)k, k);
    }
    free(row);
    return out;
}

/* Checks a 2-D weight {k, m} and fills a device weight descriptor (no data yet). */
static int cuda_weight_desc(kcu_weight *w, const model_tensor *t, int64_t k, int64_t m,
                            const char *what, char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    if (!t) {
        return tandem_fail(err, errlen, -EINVAL, "cuda backend: missing tensor %s", what);
    }
    if (!td_supported(t->type)) {
        return tandem_fail(err, errlen, -EINVAL, "cuda backend: tensor %s has unsupported type %u",
                           t->name ? t->name : what, (unsigned)t->type);
    }
    if (t->ne[0] != k || t->ne[1] < m || td_row_bytes(t->type, k) == 0 || !t->data) {
        return tandem_fail(err, errlen, -EINVAL,
                           "cuda backend: tensor %s has shape {%lld, %lld}, want {%lld, %lld}",
                           t->name ? t->name : what, (long long)t->ne[0], (long long)t->ne[1],
                           (long long)k, (long long)m);
    }
    w->type = cuda_device_type(t->type); /* kcu_weight_upload's rule, and cuda_host_f16 */
    w->rows = m;
    w->cols = k;
    return 0;
}

static size_t cuda_weight_bytes(const kcu_weight *w)
{
    return td_row_bytes(w->type, w->cols) * (size_t)w->rows;
}

static size_t cuda_max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

static int32_t cuda_rows(int32_t max_batch_tokens, int32_t max_seqs)
{
    return max_batch_tokens > max_seqs ? max_batch_tokens : max_seqs;
}

/* Block-table entries the metadata buffer starts with: max_ctx tokens for every sequence. */
static size_t cuda_bt_entries(int32_t max_seqs, int32_t block_size, int32_t max_ctx)
{
    return (size_t)max_seqs * (size_t)((max_ctx + block_size - 1) / block_size);
}

static size_t cuda_meta_bytes(int32_t T, int32_t S, size_t bt)
{
    return sizeof(int32_t) * (3 * (size_t)T + (size_t)META_N_SEQ * (size_t)S + bt);
}

/* Attention workspace for the worst of a batch of T tokens in S sequences over max_ctx: a
 * prefill-sized batch (T tokens) or a decode step of S sequences of one token each (the kernels
 * may split long contexts of decode steps into partial results). */
static size_t cuda_attn_wsp(const model_config *c, int32_t block_size, kv_dtype dt, int32_t T,
                            int32_t S, int32_t max_ctx)
{
    kcu_paged_kv kv = {.f16 = dt == KV_DTYPE_F16,
                       .block_size = block_size,
                       .n_head_kv = c->n_head_kv,
                       .head_dim = c->head_dim};
    kcu_attn_batch a = {.n_seqs = S,
                        .n_tokens = T,
                        .max_new = T,
                        .max_ctx = max_ctx,
                        .n_head = c->n_head,
                        .scale = 1.0f};
    const size_t prefill = kcu_attention_workspace(&kv, &a);
    a.n_tokens = S;
    a.max_new = 1;
    return cuda_max_size(prefill, kcu_attention_workspace(&kv, &a));
}

int cuda_backend_mem_plan(const model *m, int32_t max_batch_tokens, int32_t max_seqs,
                          int32_t block_size, kv_dtype dt, int32_t max_ctx, cuda_mem_plan *plan,
                          char *err, size_t errlen)
{
    memset(plan, 0, sizeof(*plan));
    int rc = backend_check_model("cuda", m, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (max_batch_tokens < 1 || max_seqs < 1 || block_size < 1 || max_ctx < 1) {
        return tandem_fail(err, errlen, -EINVAL, "cuda backend: bad sizes for the memory plan");
    }
    const model_config *c = &m->cfg;
    const int64_t E = c->n_embd, F = c->n_ff, qd = (int64_t)c->n_head * c->head_dim;
    const int64_t kvd = (int64_t)c->n_head_kv * c->head_dim, V = c->n_vocab;
    const int32_t T = cuda_rows(max_batch_tokens, max_seqs);
    size_t w = 0, ws = 0;
    kcu_weight d;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *ml = &m->layers[l];
        const struct {
            const model_tensor *t;
            int64_t k, rows;
        } mats[] = {{ml->wq, E, qd},    {ml->wk, E, kvd}, {ml->wv, E, kvd},  {ml->wo, qd, E},
                    {ml->w_gate, E, F}, {ml->w_up, E, F}, {ml->w_down, F, E}};
        for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) {
            if ((rc = cuda_weight_desc(&d, mats[i].t, mats[i].k, mats[i].rows, "layer", err,
                                       errlen)) != 0) {
                return rc;
            }
            w += cuda_weight_bytes(&d);
            ws = cuda_max_size(ws, kcu_matmul_workspace(&d, T));
        }
        const model_tensor *vecs[] = {ml->attn_norm, ml->ffn_norm, ml->q_norm, ml->k_norm,
                                      ml->bq,        ml->bk,       ml->bv};
        for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) {
            w += vecs[i] ? sizeof(float) * (size_t)vecs[i]->ne[0] : 0;
        }
    }
    const model_tensor *out_t = c->tied_output || !m->output ? m->tok_embd : m->output;
    /* a tensor-parallel shard's output holds its vocabulary slice (engine/model/shard.h) */
    const int64_t Vout = out_t && out_t->ne[1] < V ? out_t->ne[1] : V;
    if ((rc = cuda_weight_desc(&d, out_t, E, Vout, "output", err, errlen)) != 0) {
        return rc;
    }
    w += cuda_weight_bytes(&d) + sizeof(float) * (size_t)E;
    ws = cuda_max_size(ws, kcu_matmul_workspace(&d, T));
    if (out_t != m->tok_embd || m->tok_embd->type == TD_F32) {
        const tdtype et = m->tok_embd->type; /* cuda_upload_embd's table */
        w += td_row_bytes(cuda_native_type(et) ? et : TD_F16, E) * (size_t)V;
    }
    plan->weight_bytes = w;
    const size_t fT = sizeof(float) * (size_t)T;
    plan->scratch_bytes =
        fT * (size_t)(3 * E + 2 * qd + 2 * kvd + 2 * F) + sizeof(float) * (size_t)max_seqs * Vout +
        ws + cuda_attn_wsp(c, block_size, dt, T, max_seqs, max_ctx) +
        cuda_meta_bytes(T, max_seqs, cuda_bt_entries(max_seqs, block_size, max_ctx));
    return 0;
}

int cuda_backend_graphs(const backend *b)
{
    return b->n_graph;
}

int cuda_backend_device_count(char *err, size_t errlen)
{
    return kcu_device_count(err, errlen);
}

/* Device dev exists, has code in this build, and its memory: 0 or -ENODEV with err. */
static int cuda_device(int dev, kcu_device_info *info, char *err, size_t errlen)
{
    char why[256] = "";
    if (kcu_device_count(why, sizeof(why)) < 1) {
        return tandem_fail(err, errlen, -ENODEV, "cuda backend: no usable CUDA device: %s",
                           why[0] ? why : "none found");
    }
    if (kcu_device_query(dev, info, why, sizeof(why)) != 0) {
        return tandem_fail(err, errlen, -ENODEV, "cuda backend: cannot query device %d: %s", dev,
                           why);
    }
    if (!kcu_device_supported(info)) {
        return tandem_fail(err, errlen, -ENODEV,
                           "cuda backend: device %d (%s) has compute capability %d.%d, which this "
                           "build has no code for (rebuild with CMAKE_CUDA_ARCHITECTURES=%d%d)",
                           dev, info->name, info->cc_major, info->cc_minor, info->cc_major,
                           info->cc_minor);
    }
    return 0;
}

/* The KV budget of one rank on device dev: its shard's (or the whole model's) plan. */
static int cuda_rank_budget(const model *m, int dev, int32_t max_batch_tokens, int32_t max_seqs,
                            int32_t block_size, kv_dtype dt, int32_t max_ctx, double util,
                            double *left, char *info, size_t infolen, char *err, size_t errlen)
{
    kcu_device_info di;
    int rc = cuda_device(dev, &di, err, errlen);
    if (rc != 0) {
        return rc;
    }
    cuda_mem_plan p;
    if ((rc = cuda_backend_mem_plan(m, max_batch_tokens, max_seqs, block_size, dt, max_ctx, &p, err,
                                    errlen)) != 0) {
        return rc;
    }
    const double share = util * (double)di.total_bytes;
    const double used = (double)(di.total_bytes - di.free_bytes);
    *left = share - used - (double)p.weight_bytes - (double)p.scratch_bytes;
    if (*left < (double)cuda_kv_block_bytes(m, block_size, dt) * 2.0) {
        return tandem_fail(
            err, errlen, -ENOMEM,
            "cuda backend: not enough device memory: --gpu-memory-utilization %g of device %d "
            "(%s, %.1f MiB total, %.1f MiB in use) is %.1f MiB, but the weights need %.1f MiB and "
            "scratch %.1f MiB, leaving none for the KV cache",
            util, dev, di.name, CUDA_MIB(di.total_bytes), CUDA_MIB(used), CUDA_MIB(share),
            CUDA_MIB(p.weight_bytes), CUDA_MIB(p.scratch_bytes));
    }
    if (info && infolen) {
        snprintf(info, infolen,
                 "cuda device %d: %s (compute capability %d.%d, %d SMs, %.1f MiB total, %.1f MiB "
                 "in use); weights %.1f MiB, scratch %.1f MiB; --gpu-memory-utilization %g leaves "
                 "%.1f MiB for the KV cache",
                 dev, di.name, di.cc_major, di.cc_minor, di.sm_count, CUDA_MIB(di.total_bytes),
                 CUDA_MIB(used), CUDA_MIB(p.weight_bytes), CUDA_MIB(p.scratch_bytes), util,
                 CUDA_MIB(*left));
    }
    return 0;
}

int cuda_backend_kv_budget(const model *m, int tp_size, int32_t max_batch_tokens, int32_t max_seqs,
                           int32_t block_size, kv_dtype dt, int32_t max_ctx, double util,
                           size_t *kv_bytes, char *info, size_t infolen, char *err, size_t errlen)
{
    *kv_bytes = 0;
    if (!(util > 0.0 && util <= 1.0)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "cuda backend: --gpu-memory-utilization %g is not in (0, 1]", util);
    }
    if (tp_size <= 1) {
        double left = 0;
        int rc = cuda_rank_budget(m, 0, max_batch_tokens, max_seqs, block_size, dt, max_ctx, util,
                                  &left, info, infolen, err, errlen);
        *kv_bytes = rc == 0 ? (size_t)left : 0;
        return rc;
    }
    /* one budget for every rank (the engine has one block count): the smallest */
    double least = -1;
    for (int r = 0; r < tp_size; r++) {
        model *shard = model_shard_shapes(m, r, tp_size, err, errlen);
        if (!shard) {
            return -EINVAL;
        }
        double left = 0;
        char line[512] = "";
        int rc = cuda_rank_budget(shard, r, max_batch_tokens, max_seqs, block_size, dt, max_ctx,
                                  util, &left, line, sizeof line, err, errlen);
        model_shard_free(shard);
        if (rc != 0) {
            return rc;
        }
        if (least < 0 || left < least) {
            least = left;
            if (info && infolen) {
                snprintf(info, infolen, "tensor parallel rank %d of %d (the least room): %s", r,
                         tp_size, line);
            }
        }
    }
    *kv_bytes = (size_t)least;
    return 0;
}

/* ---- create / destroy ---- */

static void cuda_dfree(backend *b, void *p)
{
    if (p) {
        kcu_free(b->ctx, p);
    }
}

/* Drops the captured graphs: they hold the buffers' addresses, which are about to change. */
static void cuda_graphs_clear(backend *b)
{
    for (int i = 0; i < b->n_graph; i++) {
        kcu_graph_free(b->graph[i].g);
    }
    b->n_graph = 0;
}

static void cuda_destroy(backend *b)
{
    if (!b) {
        return;
    }
    if (b->ctx) {
        kcu_sync(b->ctx);
        cuda_graphs_clear(b);
        if (b->layers) {
            for (int l = 0; l < b->n_layer; l++) {
                cuda_layer *L = &b->layers[l];
                kcu_weight *all[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
                for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
                    if (all[i]->d_data) {
                        kcu_weight_free(b->ctx, all[i]);
                    }
                }
                float *vecs[] = {L->attn_norm, L->ffn_norm, L->q_norm, L->k_norm,
                                 L->bq,        L->bk,       L->bv};
                for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) {
                    cuda_dfree(b, vecs[i]);
                }
                cuda_dfree(b, L->k_pool);
                cuda_dfree(b, L->v_pool);
            }
        }
        if (!b->embd_shared) {
            cuda_dfree(b, b->d_embd);
        }
        if (b->output.d_data) {
            kcu_weight_free(b->ctx, &b->output);
        }
        float *scratch[] = {b->d_rope_freqs, b->out_norm, b->x,    b->xn, b->q,     b->k, b->v,
                            b->att,          b->tmp,      b->gate, b->up, b->logits};
        for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++) {
            cuda_dfree(b, scratch[i]);
        }
        cuda_dfree(b, b->wsp);
        cuda_dfree(b, b->awsp);
        cuda_dfree(b, b->d_meta);
        kcu_ctx_destroy(b->ctx);
    }
    if (b->h_meta) {
        kcu_host_free(b->h_meta);
    }
    free(b->layers);
    free(b);
}

/* Device allocation with an error naming what it was for. */
static void *cuda_alloc(backend *b, size_t bytes, const char *what, char *err, size_t errlen)
{
    void *p = kcu_malloc(b->ctx, bytes ? bytes : 1);
    if (!p) {
        tandem_set_err(err, errlen,
                       "cuda backend: cannot allocate %.1f MiB of device memory for %s",
                       CUDA_MIB(bytes), what);
    }
    return p;
}

/* Uploads a checked 2-D weight. */
static int cuda_weight(backend *b, kcu_weight *w, const model_tensor *t, int64_t k, int64_t m,
                       const char *what, char *err, size_t errlen)
{
    int rc = cuda_weight_desc(w, t, k, m, what, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (cuda_native_type(t->type)) {
        rc = kcu_weight_upload(b->ctx, w, t->type, t->data, m, k);
    } else {
        uint16_t *h = cuda_host_f16(t->type, t->data, k, m);
        if (!h) {
            return tandem_fail(err, errlen, -ENOMEM,
                               "cuda backend: cannot dequantise tensor %s (%s) to F16",
                               t->name ? t->name : what, td_name(t->type));
        }
        rc = kcu_weight_upload(b->ctx, w, TD_F16, h, m, k);
        free(h);
    }
    if (rc != 0) {
        w->d_data = NULL;
        return tandem_fail(err, errlen, rc, "cuda backend: cannot upload tensor %s (%s): %s",
                           t->name ? t->name : what, td_name(t->type), kcu_last_error());
    }
    return 0;
}

/* f32 device copy of a 1-D vector of n elements (NULL tensor allowed when optional). */
static int cuda_vector(backend *b, float **out, const model_tensor *t, int64_t n, bool optional,
                       const char *what, char *err, size_t errlen)
{
    *out = NULL;
    if (!t) {
        if (optional) {
            return 0;
        }
        return tandem_fail(err, errlen, -EINVAL, "cuda backend: missing tensor %s", what);
    }
    if (!td_supported(t->type) || t->ne[0] != n || !t->data) {
        return tandem_fail(err, errlen, -EINVAL,
                           "cuda backend: tensor %s must be a vector of %lld elements",
                           t->name ? t->name : what, (long long)n);
    }
    float *h = malloc(sizeof(float) * (size_t)n);
    if (!h) {
        return tandem_fail(err, errlen, -ENOMEM, "cuda backend: out of memory");
    }
    if (kc_dequantize_row(t->type, t->data, h, n) != 0) {
        free(h);
        return tandem_fail(err, errlen, -EINVAL,
                           "cuda backend: tensor %s cannot be read as %lld floats",
                           t->name ? t->name : what, (long long)n);
    }
    *out = cuda_alloc(b, sizeof(float) * (size_t)n, t->name ? t->name : what, err, errlen);
    int rc = *out ? kcu_h2d(b->ctx, *out, h, sizeof(float) * (size_t)n) : -ENOMEM;
    if (rc == 0) {
        rc = kcu_sync(b->ctx); /* h is pageable and freed next */
    }
    free(h);
    if (rc != 0 && *out) {
        tandem_set_err(err, errlen, "cuda backend: cannot upload %s: %s", t->name ? t->name : what,
                       kcu_last_error());
    }
    return rc;
}

static int cuda_upload_layer(backend *b, int l, char *err, size_t errlen)
{
    const model_layer *ml = &b->m->layers[l];
    cuda_layer *L = &b->layers[l];
    const int64_t E = b->n_embd, F = b->n_ff;
    char what[64];
    snprintf(what, sizeof(what), "layer %d", l);
    if (cuda_weight(b, &L->wq, ml->wq, E, b->q_dim, what, err, errlen) ||
        cuda_weight(b, &L->wk, ml->wk, E, b->kv_dim, what, err, errlen) ||
        cuda_weight(b, &L->wv, ml->wv, E, b->kv_dim, what, err, errlen) ||
        cuda_weight(b, &L->wo, ml->wo, b->q_dim, E, what, err, errlen) ||
        cuda_weight(b, &L->gate, ml->w_gate, E, F, what, err, errlen) ||
        cuda_weight(b, &L->up, ml->w_up, E, F, what, err, errlen) ||
        cuda_weight(b, &L->down, ml->w_down, F, E, what, err, errlen) ||
        cuda_vector(b, &L->attn_norm, ml->attn_norm, E, false, what, err, errlen) ||
        cuda_vector(b, &L->ffn_norm, ml->ffn_norm, E, false, what, err, errlen) ||
        cuda_vector(b, &L->q_norm, ml->q_norm, b->hd, true, what, err, errlen) ||
        cuda_vector(b, &L->k_norm, ml->k_norm, b->hd, true, what, err, errlen) ||
        cuda_vector(b, &L->bq, ml->bq, b->q_dim, true, what, err, errlen) ||
        cuda_vector(b, &L->bk, ml->bk, b->kv_dim, true, what, err, errlen) ||
        cuda_vector(b, &L->bv, ml->bv, b->kv_dim, true, what, err, errlen)) {
        return -1;
    }
    snprintf(what, sizeof(what), "the KV cache of layer %d", l);
    L->k_pool = cuda_alloc(b, b->pool_bytes, what, err, errlen);
    L->v_pool = L->k_pool ? cuda_alloc(b, b->pool_bytes, what, err, errlen) : NULL;
    if (!L->v_pool) {
        return -ENOMEM;
    }
    /* block 0 and unused blocks are never read, but keep the pools deterministic */
    if (kcu_memset(b->ctx, L->k_pool, 0, b->pool_bytes) != 0 ||
        kcu_memset(b->ctx, L->v_pool, 0, b->pool_bytes) != 0) {
        return tandem_fail(err, errlen, -EIO, "cuda backend: cannot clear the KV cache: %s",
                           kcu_last_error());
    }
    return 0;
}

static int cuda_upload_embd(backend *b, char *err, size_t errlen)
{
    const model *m = b->m;
    const model_config *c = &m->cfg;
    const int64_t E = b->n_embd;
    const model_tensor *out_t = c->tied_output || !m->output ? m->tok_embd : m->output;
    if (cuda_weight(b, &b->output, out_t, E, b->n_out, "output", err, errlen) ||
        cuda_vector(b, &b->out_norm, m->output_norm, E, false, "output_norm", err, errlen)) {
        return -1;
    }
    kcu_weight emb;
    if (cuda_weight_desc(&emb, m->tok_embd, E, b->n_vocab, "token_embd", err, errlen) != 0) {
        return -1;
    }
    const bool native = cuda_native_type(m->tok_embd->type);
    b->embd_type = native ? m->tok_embd->type : TD_F16;
    /* kcu_weight_upload keeps the host layout for every type but F32 (and the types converted
     * to F16, whose device layout is F16's, which kcu_embed reads) */
    if (out_t == m->tok_embd && m->tok_embd->type != TD_F32) {
        b->d_embd = b->output.d_data;
        b->embd_shared = true;
        return 0;
    }
    const size_t bytes = td_row_bytes(b->embd_type, E) * (size_t)b->n_vocab;
    b->d_embd = cuda_alloc(b, bytes, "the token embedding table", err, errlen);
    if (!b->d_embd) {
        return -ENOMEM;
    }
    uint16_t *h =
        native ? NULL : cuda_host_f16(m->tok_embd->type, m->tok_embd->data, E, b->n_vocab);
    if (!native && !h) {
        return tandem_fail(err, errlen, -ENOMEM,
                           "cuda backend: cannot dequantise token_embd (%s) to F16",
                           td_name(m->tok_embd->type));
    }
    const int rc = kcu_h2d(b->ctx, b->d_embd, native ? m->tok_embd->data : (const void *)h, bytes);
    const int rs = rc == 0 ? kcu_sync(b->ctx) : rc; /* h is freed next */
    free(h);
    if (rs != 0) {
        return tandem_fail(err, errlen, -EIO, "cuda backend: cannot upload token_embd: %s",
                           kcu_last_error());
    }
    return 0;
}

/* RoPE scaling: the linear / YaRN factor's multiplier, YaRN's ramp and magnitude, and Llama 3's
 * divisors on the device. */
static int cuda_upload_rope(backend *b, char *err, size_t errlen)
{
    const model_config *c = &b->m->cfg;
    b->rope.freq_scale = model_rope_freq_scale(c);
    b->rope.ext_factor = model_rope_ext_factor(c);
    b->rope.attn_factor = model_rope_attn_factor(c);
    if (b->rope.ext_factor != 0.0f) {
        kc_rope_yarn_corr_dims(c->n_rot, c->rope_yarn_orig_ctx, c->rope_base,
                               c->rope_yarn_beta_fast, c->rope_yarn_beta_slow, b->rope.corr_dims);
    }
    /* LongRoPE's short or long factors by the context, Llama 3's divisors, or none */
    const float *freqs =
        model_rope_freqs(c, b->cfg.max_model_len > 0 ? b->cfg.max_model_len : c->n_ctx_train);
    if (!freqs || b->n_rot < 2) {
        return 0;
    }
    const size_t bytes = sizeof(float) * (size_t)(b->n_rot / 2);
    b->d_rope_freqs = cuda_alloc(b, bytes, "rope_freqs", err, errlen);
    if (!b->d_rope_freqs) {
        return -ENOMEM;
    }
    if (kcu_h2d(b->ctx, b->d_rope_freqs, freqs, bytes) != 0 || kcu_sync(b->ctx) != 0) {
        return tandem_fail(err, errlen, -EIO, "cuda backend: cannot upload rope_freqs: %s",
                           kcu_last_error());
    }
    b->rope.d_freq_factors = b->d_rope_freqs;
    return 0;
}

static int32_t cuda_create_ctx(const backend *b)
{
    const int64_t all = (int64_t)b->cfg.num_blocks * b->cfg.block_size;
    const int64_t train = b->m->cfg.n_ctx_train > 0 ? b->m->cfg.n_ctx_train : all;
    const int64_t ctx = train < all ? train : all;
    return (int32_t)(ctx > INT32_MAX ? INT32_MAX : ctx);
}

/* The architectures the CUDA kernels implement: llama / qwen2 / qwen3 and phi3 (its fused
 * matrices are row views; partial rotary dims rotate the first n_rot of each head); gemma's
 * features, sliding windows and experts run on the CPU backend only, for now. */
static int cuda_check_arch(const model *m, char *err, size_t errlen)
{
    const model_config *c = &m->cfg;
    const char *what = NULL;
    if (c->arch != MODEL_ARCH_LLAMA && c->arch != MODEL_ARCH_QWEN2 && c->arch != MODEL_ARCH_QWEN3 &&
        c->arch != MODEL_ARCH_PHI3) {
        what = model_arch_name(c->arch);
    } else if (c->n_expert > 0) {
        what = "mixture of experts";
    } else if (c->n_swa > 0) {
        what = "sliding-window attention";
    }
    if (what) {
        return tandem_fail(err, errlen, -ENOTSUP,
                           "cuda backend: %s is not supported yet (run it with --device cpu)",
                           what);
    }
    return 0;
}

static backend *cuda_create(const model *m, const backend_config *cfg, char *err, size_t errlen)
{
    if (backend_check_config("cuda", m, cfg, err, errlen) != 0 ||
        cuda_check_arch(m, err, errlen) != 0) {
        return NULL;
    }
    kcu_device_info di;
    if (cuda_device(cfg->device, &di, err, errlen) != 0) {
        return NULL;
    }
    const model_config *c = &m->cfg;
    backend *b = calloc(1, sizeof(*b));
    if (!b) {
        tandem_set_err(err, errlen, "cuda backend: out of memory");
        return NULL;
    }
    b->m = m;
    b->cfg = *cfg;
    b->n_layer = c->n_layer;
    b->n_embd = c->n_embd;
    b->n_head = c->n_head;
    b->n_head_kv = c->n_head_kv;
    b->hd = c->head_dim;
    b->n_rot = c->n_rot;
    b->n_ff = c->n_ff;
    b->n_vocab = c->n_vocab;
    b->q_dim = c->n_head * c->head_dim;
    b->kv_dim = c->n_head_kv * c->head_dim;
    b->T = cuda_rows(cfg->max_batch_tokens, cfg->max_seqs);
    b->kv_esz = cfg->kv_dtype == KV_DTYPE_F16 ? 2 : 4;
    b->tp = cfg->tp;
    b->n_out = b->tp ? b->tp->vocab_end - b->tp->vocab_begin : b->n_vocab;
    b->graphs = !cfg->enforce_eager && !cfg->tp;
    b->pool_bytes =
        (size_t)cfg->num_blocks * (size_t)b->kv_dim * (size_t)cfg->block_size * b->kv_esz;

    const int32_t max_ctx = cuda_create_ctx(b);
    cuda_mem_plan p;
    if (cuda_backend_mem_plan(m, cfg->max_batch_tokens, cfg->max_seqs, cfg->block_size,
                              cfg->kv_dtype, max_ctx, &p, err, errlen) != 0) {
        goto err_destroy;
    }
    const size_t kv_total = 2 * (size_t)b->n_layer * b->pool_bytes;
    const size_t need = p.weight_bytes + p.scratch_bytes + kv_total;
    if (need > di.free_bytes) {
        tandem_set_err(err, errlen,
                       "cuda backend: not enough device memory: weights %.1f MiB + KV cache %.1f "
                       "MiB (%d blocks of %d tokens) + scratch %.1f MiB = %.1f MiB needed, %.1f "
                       "MiB free of %.1f MiB on device %d (%s); lower --kv-cache-memory / "
                       "--gpu-memory-utilization or --max-num-batched-tokens",
                       CUDA_MIB(p.weight_bytes), CUDA_MIB(kv_total), (int)cfg->num_blocks,
                       (int)cfg->block_size, CUDA_MIB(p.scratch_bytes), CUDA_MIB(need),
                       CUDA_MIB(di.free_bytes), CUDA_MIB(di.total_bytes), cfg->device, di.name);
        goto err_destroy;
    }
    b->ctx = kcu_ctx_create(cfg->device, err, errlen);
    if (!b->ctx) {
        goto err_destroy;
    }
    b->layers = calloc((size_t)b->n_layer, sizeof(cuda_layer));
    if (!b->layers) {
        tandem_set_err(err, errlen, "cuda backend: out of memory");
        goto err_destroy;
    }
    for (int l = 0; l < b->n_layer; l++) {
        if (cuda_upload_layer(b, l, err, errlen) != 0) {
            goto err_destroy;
        }
    }
    if (cuda_upload_embd(b, err, errlen) != 0 || cuda_upload_rope(b, err, errlen) != 0) {
        goto err_destroy;
    }
    const int64_t E = b->n_embd, F = b->n_ff;
    const size_t fT = sizeof(float) * (size_t)b->T;
    struct {
        float **p;
        size_t bytes;
    } bufs[] = {{&b->x, fT * (size_t)E},
                {&b->xn, fT * (size_t)E},
                {&b->q, fT * (size_t)b->q_dim},
                {&b->k, fT * (size_t)b->kv_dim},
                {&b->v, fT * (size_t)b->kv_dim},
                {&b->att, fT * (size_t)b->q_dim},
                {&b->tmp, fT * (size_t)E},
                {&b->gate, fT * (size_t)F},
                {&b->up, fT * (size_t)F},
                {&b->logits, sizeof(float) * (size_t)cfg->max_seqs * (size_t)b->n_out}};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        *bufs[i].p = cuda_alloc(b, bufs[i].bytes, "scratch buffers", err, errlen);
        if (!*bufs[i].p) {
            goto err_destroy;
        }
    }
    size_t ws = kcu_matmul_workspace(&b->output, b->T);
    for (int l = 0; l < b->n_layer; l++) {
        const cuda_layer *L = &b->layers[l];
        const kcu_weight *all[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
            ws = cuda_max_size(ws, kcu_matmul_workspace(all[i], b->T));
        }
    }
    b->wsp_bytes = ws;
    if (ws && !(b->wsp = cuda_alloc(b, ws, "the matmul workspace", err, errlen))) {
        goto err_destroy;
    }
    b->awsp_bytes = cuda_attn_wsp(c, cfg->block_size, cfg->kv_dtype, b->T, cfg->max_seqs, max_ctx);
    if (b->awsp_bytes &&
        !(b->awsp = cuda_alloc(b, b->awsp_bytes, "the attention workspace", err, errlen))) {
        goto err_destroy;
    }
    b->bt_cap = cuda_bt_entries(cfg->max_seqs, cfg->block_size, max_ctx);
    const size_t mb = cuda_meta_bytes(b->T, cfg->max_seqs, b->bt_cap);
    b->h_meta = kcu_host_alloc(mb);
    b->d_meta = cuda_alloc(b, mb, "batch metadata", err, errlen);
    if (!b->h_meta || !b->d_meta) {
        if (!b->h_meta) {
            tandem_set_err(err, errlen, "cuda backend: out of host memory for batch metadata");
        }
        goto err_destroy;
    }
    if (kcu_sync(b->ctx) != 0) {
        tandem_set_err(err, errlen, "cuda backend: uploading the weights failed: %s",
                       kcu_last_error());
        goto err_destroy;
    }
    return b;

err_destroy:
    cuda_destroy(b);
    return NULL;
}

/* ---- forward ---- */

static int cuda_check_batch(const backend *b, const fwd_batch *batch)
{
    return backend_check_batch(&b->cfg, b->n_vocab, b->n_layer, batch);
}

/* Grows the block-table room of the metadata buffers to at least need entries (nothing may be in
 * flight: forward ends with kcu_sync). */
static int cuda_grow_meta(backend *b, size_t need)
{
    if (need <= b->bt_cap) {
        return 0;
    }
    size_t cap = b->bt_cap * 2 > need ? b->bt_cap * 2 : need;
    const size_t mb = cuda_meta_bytes(b->T, b->cfg.max_seqs, cap);
    int32_t *h = kcu_host_alloc(mb);
    int32_t *d = h ? kcu_malloc(b->ctx, mb) : NULL;
    if (!d) {
        if (h) {
            kcu_host_free(h);
        }
        return -ENOMEM;
    }
    cuda_graphs_clear(b);
    kcu_host_free(b->h_meta);
    kcu_free(b->ctx, b->d_meta);
    b->h_meta = h;
    b->d_meta = d;
    b->bt_cap = cap;
    return 0;
}

static int cuda_grow_awsp(backend *b, size_t need)
{
    if (need <= b->awsp_bytes) {
        return 0;
    }
    void *d = kcu_malloc(b->ctx, need);
    if (!d) {
        return -ENOMEM;
    }
    cuda_graphs_clear(b);
    cuda_dfree(b, b->awsp);
    b->awsp = d;
    b->awsp_bytes = need;
    return 0;
}

/* Fills the host metadata; returns the int32 count to upload, the logit rows in *n_out. */
static size_t cuda_fill_meta(backend *b, const fwd_batch *batch, int32_t *n_out, int32_t *max_new,
                             int32_t *max_ctx)
{
    int32_t *h = b->h_meta;
    int32_t *pos = h + meta_off_tok(b, META_POS), *slot = h + meta_off_tok(b, META_SLOT);
    int32_t *seq_tok = h + meta_off_seq(b, META_SEQ_TOK);
    int32_t *seq_new = h + meta_off_seq(b, META_SEQ_NEW);
    int32_t *seq_start = h + meta_off_seq(b, META_SEQ_START);
    int32_t *seq_bt = h + meta_off_seq(b, META_SEQ_BT);
    int32_t *out_rows = h + meta_off_seq(b, META_OUT_ROWS);
    int32_t *bt = h + meta_off_bt(b);
    const int32_t bs = b->cfg.block_size;
    memcpy(h + meta_off_tok(b, META_TOK), batch->tokens, sizeof(int32_t) * (size_t)batch->n_tokens);
    int32_t t = 0, nb_total = 0;
    *n_out = *max_new = *max_ctx = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const fwd_seq *s = &batch->seqs[i];
        const int32_t nb = (s->start_pos + s->n_new + bs - 1) / bs;
        seq_tok[i] = t;
        seq_new[i] = s->n_new;
        seq_start[i] = s->start_pos;
        seq_bt[i] = nb_total;
        memcpy(bt + nb_total, s->block_table, sizeof(int32_t) * (size_t)nb);
        nb_total += nb;
        for (int32_t j = 0; j < s->n_new; j++, t++) {
            const int32_t p = s->start_pos + j;
            pos[t] = p;
            slot[t] = s->block_table[p / bs] * bs + p % bs;
        }
        if (s->want_logits) {
            out_rows[(*n_out)++] = t - 1;
        }
        *max_new = s->n_new > *max_new ? s->n_new : *max_new;
        *max_ctx = s->start_pos + s->n_new > *max_ctx ? s->start_pos + s->n_new : *max_ctx;
    }
    return meta_off_bt(b) + (size_t)nb_total;
}

/* Logs the kernel error behind a failed step once per forward. */
static int cuda_fail(int rc, const char *what)
{
    log_error("cuda backend: %s failed (%d): %s", what, rc, kcu_last_error());
    return rc;
}

#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0) {                                                                            \
            return cuda_fail(rc_, what);                                                           \
        }                                                                                          \
    } while (0)

static int cuda_mm(backend *b, const kcu_weight *w, const float *x, int32_t n, float *y)
{
    return kcu_matmul(b->ctx, w, x, n, y, b->wsp, b->wsp_bytes);
}

/* Tensor parallelism: sums the rank's partial rows over the ranks, on the stream (no-op on one
 * rank). */
static int cuda_tp_sum(backend *b, float *y, int32_t n_rows)
{
    if (!b->tp) {
        return 0;
    }
    return b->tp->comm->ops->all_reduce_sum(b->tp->comm, b->tp->rank, y,
                                            (size_t)n_rows * (size_t)b->n_embd, b->ctx);
}

/* The logits rows to the host; one rank of several writes its own columns. */
static int cuda_logits_out(backend *b, float *logits, int32_t n_rows)
{
    if (!b->tp) {
        return kcu_d2h(b->ctx, logits, b->logits,
                       sizeof(float) * (size_t)n_rows * (size_t)b->n_vocab);
    }
    for (int32_t r = 0; r < n_rows; r++) {
        int rc = kcu_d2h(b->ctx, logits + (int64_t)r * b->n_vocab + b->tp->vocab_begin,
                         b->logits + (int64_t)r * b->n_out, sizeof(float) * (size_t)b->n_out);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* The layers from the QKV projections through attention, for layer l. */
static int cuda_attn_block(backend *b, const cuda_layer *L, const kcu_attn_batch *ab,
                           const int32_t *d_pos, const int32_t *d_slot, int32_t T)
{
    const float eps = b->m->cfg.rms_eps;
    CUDA_TRY(cuda_mm(b, &L->wq, b->xn, T, b->q), "Q projection");
    CUDA_TRY(cuda_mm(b, &L->wk, b->xn, T, b->k), "K projection");
    CUDA_TRY(cuda_mm(b, &L->wv, b->xn, T, b->v), "V projection");
    if (L->bq) {
        CUDA_TRY(kcu_add_bias(b->ctx, b->q, L->bq, T, b->q_dim), "Q bias");
    }
    if (L->bk) {
        CUDA_TRY(kcu_add_bias(b->ctx, b->k, L->bk, T, b->kv_dim), "K bias");
    }
    if (L->bv) {
        CUDA_TRY(kcu_add_bias(b->ctx, b->v, L->bv, T, b->kv_dim), "V bias");
    }
    if (L->q_norm) {
        CUDA_TRY(kcu_rmsnorm(b->ctx, b->q, L->q_norm, b->q, (int64_t)T * b->n_head, b->hd, eps),
                 "Q norm");
    }
    if (L->k_norm) {
        CUDA_TRY(kcu_rmsnorm(b->ctx, b->k, L->k_norm, b->k, (int64_t)T * b->n_head_kv, b->hd, eps),
                 "K norm");
    }
    if (b->n_rot > 0) {
        const float base = b->m->cfg.rope_base;
        const bool neox = b->m->cfg.rope_neox;
        CUDA_TRY(kcu_rope(b->ctx, b->q, T, b->n_head, b->hd, b->n_rot, d_pos, base, neox, &b->rope),
                 "RoPE on Q");
        CUDA_TRY(
            kcu_rope(b->ctx, b->k, T, b->n_head_kv, b->hd, b->n_rot, d_pos, base, neox, &b->rope),
            "RoPE on K");
    }
    kcu_paged_kv kv = {.d_k = L->k_pool,
                       .d_v = L->v_pool,
                       .f16 = b->kv_esz == 2,
                       .block_size = b->cfg.block_size,
                       .n_head_kv = b->n_head_kv,
                       .head_dim = b->hd};
    CUDA_TRY(kcu_store_kv(b->ctx, &kv, b->k, b->v, d_slot, T), "KV store");
    CUDA_TRY(kcu_attention(b->ctx, &kv, ab, b->awsp, b->awsp_bytes), "attention");
    return 0;
}

/* Everything of a step after the metadata upload, up to the logits in b->logits: the embedding,
 * the layers, the final norm and the logits matmul (n_out rows; none when n_out is 0). Enqueued
 * only, so that a decode step can be captured as a CUDA graph. */
static int cuda_enqueue(backend *b, const kcu_attn_batch *ab, int32_t T, int32_t n_out)
{
    const int32_t *d = b->d_meta;
    const int32_t *d_pos = d + meta_off_tok(b, META_POS);
    const int32_t *d_slot = d + meta_off_tok(b, META_SLOT);
    const int32_t *d_out_rows = d + meta_off_seq(b, META_OUT_ROWS);
    const int64_t E = b->n_embd;
    const float eps = b->m->cfg.rms_eps;
    int rc;
    CUDA_TRY(kcu_embed(b->ctx, b->embd_type, b->d_embd, E, d + meta_off_tok(b, META_TOK), T, b->x),
             "embedding");
    float *x = b->x, *xn = b->xn, *att = b->att;
    int32_t n_rows = T;
    for (int l = 0; l < b->n_layer; l++) {
        const cuda_layer *L = &b->layers[l];
        CUDA_TRY(kcu_rmsnorm(b->ctx, x, L->attn_norm, xn, T, E, eps), "attention norm");
        if ((rc = cuda_attn_block(b, L, ab, d_pos, d_slot, T)) != 0) {
            return rc;
        }
        if (l == b->n_layer - 1) {
            /* only the rows that produce logits matter past the last attention */
            if (n_out == 0) {
                return 0;
            }
            CUDA_TRY(kcu_gather_rows(b->ctx, b->q, att, d_out_rows, n_out, b->q_dim),
                     "gathering the logit rows");
            CUDA_TRY(kcu_gather_rows(b->ctx, xn, x, d_out_rows, n_out, E),
                     "gathering the logit rows");
            att = b->q;
            float *sw = x;
            x = xn;
            xn = sw;
            n_rows = n_out;
        }
        CUDA_TRY(cuda_mm(b, &L->wo, att, n_rows, b->tmp), "output projection");
        CUDA_TRY(cuda_tp_sum(b, b->tmp, n_rows), "all-reduce of the output projection");
        CUDA_TRY(kcu_add(b->ctx, x, b->tmp, (int64_t)n_rows * E), "residual");
        CUDA_TRY(kcu_rmsnorm(b->ctx, x, L->ffn_norm, xn, n_rows, E, eps), "FFN norm");
        CUDA_TRY(cuda_mm(b, &L->gate, xn, n_rows, b->gate), "gate projection");
        CUDA_TRY(cuda_mm(b, &L->up, xn, n_rows, b->up), "up projection");
        CUDA_TRY(kcu_swiglu(b->ctx, b->gate, b->up, (int64_t)n_rows * b->n_ff), "SwiGLU");
        CUDA_TRY(cuda_mm(b, &L->down, b->gate, n_rows, b->tmp), "down projection");
        CUDA_TRY(cuda_tp_sum(b, b->tmp, n_rows), "all-reduce of the down projection");
        CUDA_TRY(kcu_add(b->ctx, x, b->tmp, (int64_t)n_rows * E), "residual");
    }
    CUDA_TRY(kcu_rmsnorm(b->ctx, x, b->out_norm, xn, n_rows, E, eps), "output norm");
    CUDA_TRY(cuda_mm(b, &b->output, xn, n_rows, b->logits), "logits");
    return 0;
}

/* The context bucket a decode step of up to max_ctx keys is captured for: a power of two from
 * CUDA_GRAPH_CTX0, capped at what the backend was sized for. The attention kernel sizes its grid
 * by the bucket and walks each sequence's own length (kcu_attention_workspace covers it). */
static int32_t cuda_graph_ctx(const backend *b, int32_t max_ctx)
{
    int64_t ctx = CUDA_GRAPH_CTX0;
    while (ctx < max_ctx) {
        ctx *= 2;
    }
    const int64_t cap = (int64_t)b->cfg.num_blocks * b->cfg.block_size;
    return (int32_t)(ctx < cap ? ctx : (cap > max_ctx ? cap : max_ctx));
}

/* A decode step (one new token per sequence, every sequence sampling) through its CUDA graph,
 * captured on first use: 0; 1 when the step must run eagerly instead (graphs off, the cache
 * full, a capture refused); or a negative errno. ab->max_ctx is raised to the bucket. */
static int cuda_graph_step(backend *b, kcu_attn_batch *ab, int32_t n)
{
    if (!b->graphs) {
        return 1;
    }
    const int32_t ctx = cuda_graph_ctx(b, ab->max_ctx);
    kcu_graph *g = NULL;
    for (int i = 0; i < b->n_graph && !g; i++) {
        g = b->graph[i].n == n && b->graph[i].ctx == ctx ? b->graph[i].g : NULL;
    }
    ab->max_ctx = ctx;
    if (!g) {
        if (b->n_graph == CUDA_MAX_GRAPHS) {
            return 1;
        }
        kcu_paged_kv shape = {.f16 = b->kv_esz == 2,
                              .block_size = b->cfg.block_size,
                              .n_head_kv = b->n_head_kv,
                              .head_dim = b->hd};
        int rc = cuda_grow_awsp(b, kcu_attention_workspace(&shape, ab));
        if (rc != 0) {
            return cuda_fail(rc, "growing the attention workspace");
        }
        if (kcu_capture_begin(b->ctx) != 0) {
            log_info("cuda backend: CUDA graphs unavailable (%s); decode steps run eagerly",
                     kcu_last_error());
            b->graphs = false;
            return 1;
        }
        rc = cuda_enqueue(b, ab, n, n);
        int end = kcu_capture_end(b->ctx, rc == 0 ? &g : NULL);
        if (rc != 0 || end != 0) {
            log_warn("cuda backend: capturing a decode step of %d sequences failed (%s); decode "
                     "steps run eagerly",
                     (int)n, kcu_last_error());
            b->graphs = false;
            return 1;
        }
        b->graph[b->n_graph].n = n;
        b->graph[b->n_graph].ctx = ctx;
        b->graph[b->n_graph].g = g;
        b->n_graph++;
    }
    CUDA_TRY(kcu_graph_launch(b->ctx, g), "graph launch");
    return 0;
}

static int cuda_forward(backend *b, const fwd_batch *batch)
{
    int rc = cuda_check_batch(b, batch);
    if (rc != 0) {
        return rc;
    }
    if (backend_batch_pools(batch) > 0 || backend_batch_all_logits(batch) > 0) {
        /* no pooled hidden states or every-row logits on this backend yet (ops.pooling and
         * ops.all_logits false) */
        return -ENOTSUP;
    }
    size_t bt_need = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const fwd_seq *s = &batch->seqs[i];
        bt_need += (size_t)((s->start_pos + s->n_new + b->cfg.block_size - 1) / b->cfg.block_size);
    }
    if ((rc = cuda_grow_meta(b, bt_need)) != 0) {
        return cuda_fail(rc, "growing the block-table buffer");
    }
    const int32_t T = batch->n_tokens;
    int32_t n_out = 0, max_new = 0, max_ctx = 0;
    const size_t n_meta = cuda_fill_meta(b, batch, &n_out, &max_new, &max_ctx);
    const int32_t *d = b->d_meta;
    kcu_attn_batch ab = {.n_seqs = batch->n_seqs,
                         .n_tokens = T,
                         .d_seq_tok = d + meta_off_seq(b, META_SEQ_TOK),
                         .d_seq_new = d + meta_off_seq(b, META_SEQ_NEW),
                         .d_seq_start = d + meta_off_seq(b, META_SEQ_START),
                         .d_seq_bt = d + meta_off_seq(b, META_SEQ_BT),
                         .d_block_tables = d + meta_off_bt(b),
                         .max_new = max_new,
                         .max_ctx = max_ctx,
                         .d_q = b->q,
                         .d_out = b->att,
                         .n_head = b->n_head,
                         .scale = 1.0f / sqrtf((float)b->hd)};
    kcu_paged_kv kv_shape = {.f16 = b->kv_esz == 2,
                             .block_size = b->cfg.block_size,
                             .n_head_kv = b->n_head_kv,
                             .head_dim = b->hd};
    if ((rc = cuda_grow_awsp(b, kcu_attention_workspace(&kv_shape, &ab))) != 0) {
        return cuda_fail(rc, "growing the attention workspace");
    }
    CUDA_TRY(kcu_h2d(b->ctx, b->d_meta, b->h_meta, sizeof(int32_t) * n_meta), "metadata upload");
    /* a decode step replays its graph; the rest (prefill, mixed batches, rows without logits)
     * is enqueued op by op */
    rc = max_new == 1 && n_out == T ? cuda_graph_step(b, &ab, T) : 1;
    if (rc == 1) {
        rc = cuda_enqueue(b, &ab, T, n_out);
    }
    if (rc != 0) {
        return rc;
    }
    if (n_out > 0) {
        CUDA_TRY(cuda_logits_out(b, batch->logits, n_out), "logits download");
    }
    CUDA_TRY(kcu_sync(b->ctx), "forward pass");
    return 0;
}

/* Device pointers: registering them with a transfer layer needs device-memory support (UCX
 * cuda_copy / cuda_ipc), which the agent does not have yet (docs/cuda.md). */
static void *cuda_kv_pool(backend *b, int layer, int kv, size_t *bytes)
{
    if (layer < 0 || layer >= b->n_layer || (kv != 0 && kv != 1)) {
        if (bytes) {
            *bytes = 0;
        }
        return NULL;
    }
    if (bytes) {
        *bytes = b->pool_bytes;
    }
    return kv == 0 ? b->layers[layer].k_pool : b->layers[layer].v_pool;
}

/* ---- tensor parallelism: NCCL (kcu_comm) behind engine/core/tp.h ---- */

typedef struct cuda_comm {
    tp_comm base;
    kcu_comm **comms; /* [size], device i's */
    bool aborted;
} cuda_comm;

/* stream: the rank's kcu_ctx (cuda_tp_sum) */
static int cuda_comm_all_reduce(tp_comm *c, int rank, float *buf, size_t n, void *stream)
{
    cuda_comm *cc = (cuda_comm *)c;
    if (rank < 0 || rank >= c->size || !stream) {
        return -EINVAL;
    }
    return kcu_all_reduce_sum(cc->comms[rank], (kcu_ctx *)stream, buf, n);
}

static void cuda_comm_abort(tp_comm *c)
{
    cuda_comm *cc = (cuda_comm *)c;
    if (!cc->aborted) {
        cc->aborted = true;
        for (int i = 0; i < c->size; i++) {
            kcu_comm_abort(cc->comms[i]);
        }
    }
}

static int cuda_comm_reset(tp_comm *c)
{
    return ((cuda_comm *)c)->aborted ? -EIO : 0; /* an aborted NCCL communicator is gone */
}

static void cuda_comm_free(tp_comm *c)
{
    cuda_comm *cc = (cuda_comm *)c;
    if (!cc) {
        return;
    }
    for (int i = 0; cc->comms && i < c->size; i++) {
        kcu_comm_destroy(cc->comms[i]);
    }
    free(cc->comms);
    free(cc);
}

static const tp_comm_ops cuda_comm_ops = {
    .name = "nccl",
    .all_reduce_sum = cuda_comm_all_reduce,
    .abort = cuda_comm_abort,
    .reset = cuda_comm_reset,
    .free = cuda_comm_free,
};

static tp_comm *cuda_tp_comm_new(int size, char *err, size_t errlen)
{
    cuda_comm *cc = calloc(1, sizeof(*cc));
    kcu_comm **comms = calloc((size_t)(size > 0 ? size : 1), sizeof(kcu_comm *));
    if (!cc || !comms) {
        free(cc);
        free(comms);
        tandem_set_err(err, errlen, "cuda backend: out of memory");
        return NULL;
    }
    char why[512] = "";
    if (kcu_comm_init_all(size, comms, why, sizeof why) != 0) {
        tandem_set_err(err, errlen, "cuda backend: tensor parallelism over %d GPUs: %s", size, why);
        free(comms);
        free(cc);
        return NULL;
    }
    cc->base.ops = &cuda_comm_ops;
    cc->base.size = size;
    cc->comms = comms;
    return &cc->base;
}

const backend_ops cuda_backend_ops = {
    .name = "cuda",
    .kv_block_bytes = cuda_kv_block_bytes,
    .create = cuda_create,
    .forward = cuda_forward,
    .kv_pool = cuda_kv_pool,
    .kv_adopt = NULL,
    .destroy = cuda_destroy,
    .tp_comm_new = cuda_tp_comm_new,
};
