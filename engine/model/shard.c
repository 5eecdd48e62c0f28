/*
 * Tensor-parallel shards of a model (shard.h). Row slices are views into the full model; column
 * slices (wo, w_down) are copies, owned by the shard.
 */
#include "engine/model/shard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/err.h"

/* Tensors a shard owns per layer: wq wk wv bq bk bv wo gate up down. */
#define SHARD_PER_LAYER 10

typedef struct shard_priv {
    model_tensor *tensors; /* [SHARD_PER_LAYER * n_layer + 1] */
    void **copies;         /* column-slice buffers, [2 * n_layer] */
    int n_copies;
} shard_priv;

void model_shard_kv_heads(const model_config *c, int rank, int size, int *first, int *count)
{
    if (size <= 1) {
        *first = 0;
        *count = c->n_head_kv;
    } else if (c->n_head_kv % size == 0) {
        *count = c->n_head_kv / size;
        *first = rank * *count;
    } else { /* size % n_head_kv == 0: replicate the head this rank's query heads use */
        *count = 1;
        *first = (int)((int64_t)rank * c->n_head_kv / size);
    }
}

static bool shard_cols_ok(const model_tensor *t, int64_t c0, int64_t n)
{
    if (!t) {
        return true;
    }
    int64_t be = td_block_elems(t->type);
    return c0 % be == 0 && n % be == 0;
}

int model_shard_check(const model *m, int size, char *err, size_t errlen)
{
    const model_config *c = &m->cfg;
    if (size < 1) {
        return tandem_fail(err, errlen, -EINVAL, "tensor parallel size %d must be at least 1",
                           size);
    }
    if (size == 1) {
        return 0;
    }
    if (c->n_expert > 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tensor parallelism of mixture-of-experts models (%s with %d experts) "
                           "is not supported",
                           model_arch_name(c->arch), c->n_expert);
    }
    if (c->n_head % size != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tensor parallel size %d does not divide the model's %d attention heads",
                           size, c->n_head);
    }
    if (c->n_head_kv % size != 0 && size % c->n_head_kv != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tensor parallel size %d and the model's %d key/value heads: one must "
                           "divide the other",
                           size, c->n_head_kv);
    }
    if (c->n_ff % size != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tensor parallel size %d does not divide the model's feed-forward size "
                           "%d",
                           size, c->n_ff);
    }
    if (c->n_vocab < size) {
        return tandem_fail(err, errlen, -EINVAL,
                           "tensor parallel size %d is larger than the vocabulary (%d)", size,
                           c->n_vocab);
    }
    const int64_t q_cols = (int64_t)c->n_head / size * c->head_dim;
    const int64_t f_cols = c->n_ff / size;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        if (!shard_cols_ok(L->wo, q_cols, q_cols) || !shard_cols_ok(L->w_down, f_cols, f_cols)) {
            const model_tensor *t = shard_cols_ok(L->wo, q_cols, q_cols) ? L->w_down : L->wo;
            return tandem_fail(err, errlen, -EINVAL,
                               "tensor %s (%s) cannot be split over %d ranks: each rank's %lld "
                               "input columns are not whole %lld-element blocks",
                               t->name ? t->name : "?", td_name(t->type), size,
                               (long long)(t == L->wo ? q_cols : f_cols),
                               (long long)td_block_elems(t->type));
        }
    }
    return 0;
}

/* dst = rows [r0, r1) of the 2-D tensor src (a view). */
static int shard_rows(model_tensor *dst, const model_tensor *src, int64_t r0, int64_t r1, char *err,
                      size_t errlen)
{
    size_t rb = td_row_bytes(src->type, src->ne[0]);
    if (rb == 0 || r0 < 0 || r1 > src->ne[1] || r1 <= r0 || !src->data) {
        return tandem_fail(err, errlen, -EINVAL, "shard: tensor %s: rows [%lld, %lld) of %lld",
                           src->name ? src->name : "?", (long long)r0, (long long)r1,
                           (long long)src->ne[1]);
    }
    *dst = *src;
    dst->n_dims = 2;
    dst->ne[1] = r1 - r0;
    dst->data = (const char *)src->data + (size_t)r0 * rb;
    dst->nbytes = (size_t)(r1 - r0) * rb;
    return 0;
}

/* dst = elements [i0, i1) of the vector src (a view); NULL stays NULL. */
static int shard_vec(const model_tensor **out, model_tensor *dst, const model_tensor *src,
                     int64_t i0, int64_t i1, char *err, size_t errlen)
{
    if (!src) {
        *out = NULL;
        return 0;
    }
    int64_t be = td_block_elems(src->type);
    if (i0 % be != 0 || i1 % be != 0 || i1 > src->ne[0] || !src->data) {
        return tandem_fail(err, errlen, -EINVAL, "shard: vector %s: elements [%lld, %lld)",
                           src->name ? src->name : "?", (long long)i0, (long long)i1);
    }
    *dst = *src;
    dst->n_dims = 1;
    dst->ne[0] = i1 - i0;
    dst->ne[1] = 1;
    dst->data = (const char *)src->data + td_row_bytes(src->type, i0);
    dst->nbytes = td_row_bytes(src->type, i1 - i0);
    *out = dst;
    return 0;
}

/* dst = input columns [c0, c1) of every row of src (a copy into *buf; with shapes_only no copy:
 * dst->data is src's, which has other contents and must not be read). */
static int shard_cols(model_tensor *dst, void **buf, const model_tensor *src, int64_t c0,
                      int64_t c1, bool shapes_only, char *err, size_t errlen)
{
    const size_t rb = td_row_bytes(src->type, src->ne[0]);
    const size_t off = td_row_bytes(src->type, c0);
    const size_t nb = td_row_bytes(src->type, c1 - c0);
    if (rb == 0 || nb == 0 || (c0 > 0 && off == 0) || c1 > src->ne[0] || !src->data) {
        return tandem_fail(err, errlen, -EINVAL,
                           "shard: tensor %s (%s): columns [%lld, %lld) are not whole blocks",
                           src->name ? src->name : "?", td_name(src->type), (long long)c0,
                           (long long)c1);
    }
    const int64_t rows = src->ne[1];
    if (shapes_only) {
        *dst = *src;
        dst->n_dims = 2;
        dst->ne[0] = c1 - c0;
        dst->nbytes = nb * (size_t)rows;
        return 0;
    }
    char *p = aligned_alloc(64, (nb * (size_t)rows + 63) / 64 * 64);
    if (!p) {
        return tandem_fail(err, errlen, -ENOMEM, "shard: out of memory copying %s",
                           src->name ? src->name : "?");
    }
    for (int64_t r = 0; r < rows; r++) {
        memcpy(p + (size_t)r * nb, (const char *)src->data + (size_t)r * rb + off, nb);
    }
    *buf = p;
    *dst = *src;
    dst->n_dims = 2;
    dst->ne[0] = c1 - c0;
    dst->data = p;
    dst->nbytes = nb * (size_t)rows;
    return 0;
}

void model_shard_free(model *s)
{
    if (!s) {
        return;
    }
    shard_priv *p = s->priv;
    if (p) {
        for (int i = 0; i < p->n_copies; i++) {
            free(p->copies[i]);
        }
        free(p->copies);
        free(p->tensors);
        free(p);
    }
    free(s->layers);
    free(s);
}

static model *shard_build(const model *m, int rank, int size, bool shapes_only,
                          int32_t *vocab_begin, int32_t *vocab_end, char *err, size_t errlen)
{
    if (rank < 0 || rank >= size || model_shard_check(m, size, err, errlen) != 0) {
        if (rank < 0 || rank >= size) {
            tandem_set_err(err, errlen, "shard: rank %d of %d", rank, size);
        }
        return NULL;
    }
    const model_config *c = &m->cfg;
    model *s = calloc(1, sizeof(*s));
    shard_priv *p = calloc(1, sizeof(*p));
    if (!s || !p) {
        free(p);
        free(s);
        tandem_set_err(err, errlen, "shard: out of memory");
        return NULL;
    }
    *s = *m;
    s->priv = p;
    s->n_tensors = 0;
    s->tensors = NULL;
    s->layers = calloc((size_t)c->n_layer, sizeof(model_layer));
    p->tensors = calloc((size_t)c->n_layer * SHARD_PER_LAYER + 1, sizeof(model_tensor));
    p->copies = calloc((size_t)c->n_layer * 2, sizeof(void *));
    if (!s->layers || !p->tensors || !p->copies) {
        tandem_set_err(err, errlen, "shard: out of memory");
        goto err_free;
    }
    const int hd = c->head_dim;
    const int nh = c->n_head / size, h0 = rank * nh;
    int kv0, nkv;
    model_shard_kv_heads(c, rank, size, &kv0, &nkv);
    const int nf = c->n_ff / size, f0 = rank * nf;
    s->cfg.n_head = nh;
    s->cfg.n_head_kv = nkv;
    s->cfg.n_ff = nf;
    s->cfg.tied_output = false;
    const int64_t q0 = (int64_t)h0 * hd, q1 = q0 + (int64_t)nh * hd;
    const int64_t k0 = (int64_t)kv0 * hd, k1 = k0 + (int64_t)nkv * hd;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *F = &m->layers[l];
        model_layer *L = &s->layers[l];
        model_tensor *t = &p->tensors[(size_t)l * SHARD_PER_LAYER];
        *L = *F;
        if (shard_rows(&t[0], F->wq, q0, q1, err, errlen) ||
            shard_rows(&t[1], F->wk, k0, k1, err, errlen) ||
            shard_rows(&t[2], F->wv, k0, k1, err, errlen) ||
            shard_vec(&L->bq, &t[3], F->bq, q0, q1, err, errlen) ||
            shard_vec(&L->bk, &t[4], F->bk, k0, k1, err, errlen) ||
            shard_vec(&L->bv, &t[5], F->bv, k0, k1, err, errlen) ||
            shard_cols(&t[6], &p->copies[p->n_copies++], F->wo, q0, q1, shapes_only, err, errlen) ||
            shard_rows(&t[7], F->w_gate, f0, f0 + nf, err, errlen) ||
            shard_rows(&t[8], F->w_up, f0, f0 + nf, err, errlen) ||
            shard_cols(&t[9], &p->copies[p->n_copies++], F->w_down, f0, f0 + nf, shapes_only, err,
                       errlen)) {
            goto err_free;
        }
        L->wq = &t[0];
        L->wk = &t[1];
        L->wv = &t[2];
        L->wo = &t[6];
        L->w_gate = &t[7];
        L->w_up = &t[8];
        L->w_down = &t[9];
    }
    const int32_t vb = (int32_t)((int64_t)c->n_vocab * rank / size);
    const int32_t ve = (int32_t)((int64_t)c->n_vocab * (rank + 1) / size);
    const model_tensor *out = c->tied_output || !m->output ? m->tok_embd : m->output;
    model_tensor *ot = &p->tensors[(size_t)c->n_layer * SHARD_PER_LAYER];
    if (!out || shard_rows(ot, out, vb, ve, err, errlen) != 0) {
        if (!out) {
            tandem_set_err(err, errlen, "shard: the model has no output matrix");
        }
        goto err_free;
    }
    s->output = ot;
    s->tensors = NULL; /* the shard's tensors are reached through layers and output only */
    s->n_tensors = 0;
    *vocab_begin = vb;
    *vocab_end = ve;
    return s;

err_free:
    model_shard_free(s);
    return NULL;
}

model *model_shard(const model *m, int rank, int size, int32_t *vocab_begin, int32_t *vocab_end,
                   char *err, size_t errlen)
{
    return shard_build(m, rank, size, false, vocab_begin, vocab_end, err, errlen);
}

model *model_shard_shapes(const model *m, int rank, int size, char *err, size_t errlen)
{
    int32_t vb, ve;
    return shard_build(m, rank, size, true, &vb, &ve, err, errlen);
}
