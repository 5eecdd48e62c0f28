/*
 * The compute backend interface: everything the engine core needs from the device that runs the
 * model. The CPU backend (engine/backend/cpu_backend.c) and the CUDA backend
 * (engine/backend/cuda_backend.c) implement it, so the scheduler, the KV block manager and the
 * server never change.
 */
#ifndef TANDEM_ENGINE_CORE_BACKEND_H
#define TANDEM_ENGINE_CORE_BACKEND_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cache/kv_groups.h"
#include "engine/core/batch.h"
#include "engine/core/tp.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"

typedef enum kv_dtype {
    KV_DTYPE_F32,
    KV_DTYPE_F16,
} kv_dtype;

typedef struct backend_config {
    int32_t num_blocks; /* KV blocks to allocate (block 0 included) */
    int32_t block_size; /* tokens per block */
    kv_dtype kv_dtype;
    int32_t max_batch_tokens; /* largest fwd_batch.n_tokens the engine will submit */
    int32_t max_seqs;         /* largest fwd_batch.n_seqs */
    int n_threads;            /* CPU threads (0: one per online core) */
    bool pin_threads;         /* pin worker threads to cores */
    int device;               /* device ordinal for accelerator backends (0) */
    bool enforce_eager;       /* no CUDA graphs: every step launched op by op (vLLM's flag) */
    int32_t max_model_len;    /* the context, which picks LongRoPE's factors (0: n_ctx_train) */
    int32_t max_lora_rank;    /* largest LoRA rank a batch may carry (fwd_seq.lora); 0: none */
    /* Tensor parallelism (engine/core/tp.h). tp: set for one rank's backend, which then holds a
     * shard (engine/model/shard.h), sums its row-parallel outputs with tp->comm and writes only
     * logits columns [vocab_begin, vocab_end); NULL: the whole model. tp_size / tp_inner: read by
     * tp_backend_ops only (the ranks and the backend each one runs). */
    const backend_tp *tp;
    int tp_size;
    const struct backend_ops *tp_inner;
    /* KV cache groups (backend_ops.kv_groups): NULL, or n_groups 1, for one table and a pool
     * per layer; otherwise group_size pools per K and V, layer l in pool layer_slot[l] at the
     * blocks of fwd_seq.group_tables[layer_group[l]] (engine/core/batch.h). Borrowed: it must
     * outlive the backend. */
    const struct kv_groups *kv_groups;
} backend_config;

/* Validates a batch against a backend's limits (backend_config), vocabulary and layers: sizes,
 * block tables covering every position with ids below num_blocks, token ids, a logits buffer
 * when a sequence wants logits (row_logits for all_logits), adapters within max_lora_rank. 0 or
 * -EINVAL. Shared by every backend's forward. */
static inline int backend_check_batch(const backend_config *cfg, int32_t n_vocab, int32_t n_layer,
                                      const fwd_batch *batch)
{
    if (!batch || batch->n_tokens < 1 || batch->n_tokens > cfg->max_batch_tokens ||
        batch->n_seqs < 1 || batch->n_seqs > cfg->max_seqs || !batch->tokens || !batch->seqs) {
        return -EINVAL;
    }
    int64_t total = 0;
    int32_t n_logits = 0, n_pooled = 0, n_all = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const fwd_seq *s = &batch->seqs[i];
        const int32_t n_groups = cfg->kv_groups ? cfg->kv_groups->n_groups : 1;
        if (s->n_new < 1 || s->start_pos < 0 || !s->block_table ||
            (n_groups > 1) != (s->group_tables != NULL) ||
            (s->lora && (s->lora->rank > cfg->max_lora_rank || s->lora->n_layer != n_layer)) ||
            (s->all_logits && s->pool != FWD_POOL_NONE)) {
            return -EINVAL;
        }
        int64_t end = (int64_t)s->start_pos + s->n_new;
        if ((end + cfg->block_size - 1) / cfg->block_size > s->n_blocks) {
            return -EINVAL;
        }
        for (int32_t g = 0; g < n_groups; g++) {
            const int32_t *bt = n_groups > 1 ? s->group_tables[g] : s->block_table;
            for (int64_t j = 0; bt && j < (end + cfg->block_size - 1) / cfg->block_size; j++) {
                if (bt[j] < 0 || bt[j] >= cfg->num_blocks) {
                    return -EINVAL;
                }
            }
            if (!bt) {
                return -EINVAL;
            }
        }
        total += s->n_new;
        n_logits += s->want_logits ? 1 : 0;
        n_pooled += s->pool != FWD_POOL_NONE;
        n_all += s->all_logits;
    }
    if (total != batch->n_tokens || (n_logits > 0 && !batch->logits) ||
        (n_pooled > 0 && !batch->hidden) || (n_all > 0 && !batch->row_logits)) {
        return -EINVAL;
    }
    for (int32_t t = 0; t < batch->n_tokens; t++) {
        if (batch->tokens[t] < 0 || batch->tokens[t] >= n_vocab) {
            return -EINVAL;
        }
    }
    return 0;
}

/* Sequences of batch that want every row's logits (fwd_seq.all_logits). */
static inline int32_t backend_batch_all_logits(const fwd_batch *batch)
{
    int32_t n = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        n += batch->seqs[i].all_logits;
    }
    return n;
}

/* Sequences of batch that want hidden states (fwd_seq.pool). */
static inline int32_t backend_batch_pools(const fwd_batch *batch)
{
    int32_t n = 0;
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        n += batch->seqs[i].pool != FWD_POOL_NONE;
    }
    return n;
}

typedef struct backend backend;

typedef struct backend_ops {
    const char *name; /* "cpu", "cuda" */
    bool pooling;     /* forward honours fwd_seq.pool (embeddings); false: -ENOTSUP when asked */
    bool lora;        /* forward applies fwd_seq.lora (backend_config.max_lora_rank > 0) */
    bool all_logits;  /* forward honours fwd_seq.all_logits (prompt logprobs); false: -ENOTSUP */
    bool kv_groups;   /* create honours backend_config.kv_groups (several block tables) */
    /* Bytes of KV storage one block takes over all layers (K and V). */
    size_t (*kv_block_bytes)(const model *m, int32_t block_size, kv_dtype dt);
    /* Creates the backend for m (borrowed; must outlive it) with cfg; NULL and err on failure. */
    backend *(*create)(const model *m, const backend_config *cfg, char *err, size_t errlen);
    /* Runs one batch; 0 or a negative errno. Not thread-safe: one caller at a time. */
    int (*forward)(backend *b, const fwd_batch *batch);
    /* Base address and byte length of the K (kv = 0) or V (kv = 1) pool of a layer, for
     * registering the KV memory with a transfer layer. */
    void *(*kv_pool)(backend *b, int layer, int kv, size_t *bytes);
    /* Optional (NULL: unsupported). Moves a pool into mem (bytes long, at least 64-byte aligned,
     * not owned: it must outlive the backend) so a transfer layer may own the KV memory (UCX's
     * shared memory, a NIC's registered region). Only before the first forward: the contents
     * are not copied. 0 or -EINVAL. */
    int (*kv_adopt)(backend *b, int layer, int kv, void *mem, size_t bytes);
    void (*destroy)(backend *b);
    /* Optional (NULL: no tensor parallelism). The collective for `size` ranks of this backend,
     * one per device from device 0 for accelerators; NULL and err on failure. */
    tp_comm *(*tp_comm_new)(int size, char *err, size_t errlen);
} backend_ops;

extern const backend_ops cpu_backend_ops;

#ifdef TANDEM_HAVE_CUDA
/* The CUDA backend (engine/backend/cuda_backend.c, docs/cuda.md): declared only in builds that
 * have it (TANDEM_HAVE_CUDA, defined for every target linking tandem_backend_cuda), so code that
 * names it without the guard fails to compile instead of failing at run time. */
extern const backend_ops cuda_backend_ops;
#endif

#endif
