/*
 * The model and configuration checks every backend's create runs (and the CUDA backend's memory
 * plan): the shapes the kernels handle (kernels/cpu/kc_ops.h's limits, which the CUDA kernels
 * share) and a usable backend_config. Errors start with "<who> backend: ".
 */
#ifndef TANDEM_ENGINE_BACKEND_BACKEND_CHECK_H
#define TANDEM_ENGINE_BACKEND_BACKEND_CHECK_H

#include <errno.h>
#include <stddef.h>

#include "engine/core/backend.h"
#include "kernels/cpu/kc_ops.h"
#include "lib/err.h"

static inline int backend_check_model(const char *who, const model *m, char *err, size_t errlen)
{
    const model_config *c = &m->cfg;
    if (c->n_layer < 1 || c->n_embd < 1 || c->n_head < 1 || c->n_head_kv < 1 || c->n_ff < 1 ||
        c->n_vocab < 1 || c->head_dim < 1) {
        return tandem_fail(err, errlen, -EINVAL, "%s backend: model dimensions must be positive",
                           who);
    }
    if (c->n_head % c->n_head_kv != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s backend: n_head %d is not a multiple of n_head_kv %d", who,
                           c->n_head, c->n_head_kv);
    }
    if (c->head_dim > KC_ATTN_MAX_HEAD_DIM || c->n_rot < 0 || c->n_rot > c->head_dim ||
        c->n_rot % 2 != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s backend: head_dim %d / n_rot %d unsupported (head_dim <= %d, "
                           "even n_rot <= head_dim)",
                           who, c->head_dim, c->n_rot, KC_ATTN_MAX_HEAD_DIM);
    }
    return 0;
}

static inline int backend_check_config(const char *who, const model *m, const backend_config *cfg,
                                       char *err, size_t errlen)
{
    int rc = backend_check_model(who, m, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (cfg->block_size < 1 || cfg->block_size > KC_ATTN_MAX_BLOCK || cfg->num_blocks < 1 ||
        cfg->max_batch_tokens < 1 || cfg->max_seqs < 1 ||
        (cfg->kv_dtype != KV_DTYPE_F32 && cfg->kv_dtype != KV_DTYPE_F16) ||
        cfg->max_lora_rank < 0 || cfg->max_lora_rank > LORA_MAX_RANK) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s backend: bad config (block_size 1..%d, num_blocks, "
                           "max_batch_tokens, max_seqs >= 1, kv dtype f32/f16, max_lora_rank "
                           "0..%d)",
                           who, KC_ATTN_MAX_BLOCK, LORA_MAX_RANK);
    }
    return 0;
}

#endif
