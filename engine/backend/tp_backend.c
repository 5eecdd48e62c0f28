/*
 * tp_backend_ops: tensor parallelism as one backend (engine/core/tp.h, docs/tensor-parallel.md).
 * It splits the model into backend_config.tp_size shards (engine/model/shard.h), creates one
 * backend of kind backend_config.tp_inner per shard, each on its own thread (a CUDA rank's thread
 * is the one that talks to its device), and runs every forward on all ranks at once. The ranks
 * meet in the inner backend's collective (tp_comm_new) twice per layer.
 *
 * Why threads and not processes (vLLM runs a process per GPU): Python needs processes to get
 * around its interpreter lock; C does not. One process keeps one scheduler, one KV block
 * manager and one copy of the batch, with no IPC to hand a step to the workers; NCCL supports
 * one communicator per device from threads of one process (ncclCommInitAll).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend/tp_backend.h"
#include "engine/model/shard.h"
#include "lib/err.h"
#include "lib/log.h"

typedef struct tp_rank {
    struct backend *tb;
    int rank;
    model *shard;
    backend_tp tp;
    backend_config cfg;
    backend *be;
    pthread_t thread;
    bool started;
    int rc; /* the last step's result */
    char err[256];
} tp_rank;

struct backend {
    const backend_ops *inner;
    int size;
    tp_comm *comm;
    tp_rank *ranks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long job; /* incremented per step; ranks run it once */
    int n_done;        /* ranks finished with the current job (or with creating) */
    const fwd_batch *batch;
    bool quit;
    bool broken; /* a collective could not be re-armed: every step fails */
};

size_t tp_backend_kv_block_bytes(const backend_ops *inner, const model *m, int size,
                                 int32_t block_size, kv_dtype dt)
{
    int first, count;
    model_shard_kv_heads(&m->cfg, 0, size, &first, &count);
    if (m->cfg.n_head_kv < 1) {
        return 0;
    }
    return inner->kv_block_bytes(m, block_size, dt) / (size_t)m->cfg.n_head_kv * (size_t)count;
}

static void tp_done(struct backend *b)
{
    pthread_mutex_lock(&b->mu);
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void *tp_rank_main(void *arg)
{
    tp_rank *r = arg;
    struct backend *b = r->tb;
    r->be = b->inner->create(r->shard, &r->cfg, r->err, sizeof r->err);
    tp_done(b);
    if (!r->be) {
        return NULL;
    }
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        while (!b->quit && b->job == seen) {
            pthread_cond_wait(&b->cv, &b->mu);
        }
        if (b->quit) {
            pthread_mutex_unlock(&b->mu);
            /* on the thread that created it: a CUDA rank's device is current here */
            b->inner->destroy(r->be);
            r->be = NULL;
            return NULL;
        }
        seen = b->job;
        const fwd_batch *batch = b->batch;
        pthread_mutex_unlock(&b->mu);
        r->rc = b->inner->forward(r->be, batch);
        if (r->rc != 0) {
            b->comm->ops->abort(b->comm); /* the others may wait for us in a collective */
        }
        tp_done(b);
    }
}

/* Waits until n_done reaches want. */
static void tp_wait(struct backend *b, int want)
{
    pthread_mutex_lock(&b->mu);
    while (b->n_done < want) {
        pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
}

static void tp_destroy(struct backend *b)
{
    if (!b) {
        return;
    }
    pthread_mutex_lock(&b->mu);
    b->quit = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; b->ranks && i < b->size; i++) {
        tp_rank *r = &b->ranks[i];
        if (r->started) {
            pthread_join(r->thread, NULL);
        }
        if (r->be) {
            b->inner->destroy(r->be);
        }
        model_shard_free(r->shard);
    }
    free(b->ranks);
    if (b->comm) {
        b->comm->ops->free(b->comm);
    }
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

static int tp_threads_per_rank(const backend_config *cfg, int size)
{
    long total = cfg->n_threads > 0 ? cfg->n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    long per = total / size;
    return per < 1 ? 1 : (int)per;
}

static struct backend *tp_create(const model *m, const backend_config *cfg, char *err,
                                 size_t errlen)
{
    const int size = cfg->tp_size;
    const backend_ops *inner = cfg->tp_inner;
    if (size < 2 || !inner || inner == &tp_backend_ops) {
        tandem_set_err(err, errlen, "tp backend: tp_size >= 2 and an inner backend are required");
        return NULL;
    }
    if (!inner->tp_comm_new) {
        tandem_set_err(err, errlen,
                       "--tensor-parallel-size %d: the %s backend has no collective for tensor "
                       "parallelism",
                       size, inner->name);
        return NULL;
    }
    if (model_shard_check(m, size, err, errlen) != 0) {
        return NULL;
    }
    struct backend *b = calloc(1, sizeof(*b));
    if (!b) {
        tandem_set_err(err, errlen, "tp backend: out of memory");
        return NULL;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->inner = inner;
    b->size = size;
    b->ranks = calloc((size_t)size, sizeof(tp_rank));
    if (!b->ranks) {
        tandem_set_err(err, errlen, "tp backend: out of memory");
        goto err_destroy;
    }
    b->comm = inner->tp_comm_new(size, err, errlen);
    if (!b->comm) {
        goto err_destroy;
    }
    const int threads = tp_threads_per_rank(cfg, size);
    for (int i = 0; i < size; i++) {
        tp_rank *r = &b->ranks[i];
        r->tb = b;
        r->rank = i;
        r->shard = model_shard(m, i, size, &r->tp.vocab_begin, &r->tp.vocab_end, err, errlen);
        if (!r->shard) {
            goto err_destroy;
        }
        r->tp.rank = i;
        r->tp.size = size;
        r->tp.comm = b->comm;
        r->cfg = *cfg;
        r->cfg.tp_size = 0;
        r->cfg.tp_inner = NULL;
        r->cfg.tp = &r->tp;
        r->cfg.device = cfg->device + i;
        r->cfg.n_threads = threads;
        r->cfg.pin_threads = false; /* the ranks' pools would pin to the same cores */
    }
    for (int i = 0; i < size; i++) {
        tp_rank *r = &b->ranks[i];
        if (pthread_create(&r->thread, NULL, tp_rank_main, r) != 0) {
            tp_wait(b, i); /* the started ones finish creating before teardown */
            tandem_set_err(err, errlen, "tp backend: cannot start the thread of rank %d", i);
            goto err_destroy;
        }
        r->started = true;
    }
    tp_wait(b, size);
    for (int i = 0; i < size; i++) {
        if (!b->ranks[i].be) {
            tandem_set_err(err, errlen, "tensor parallel rank %d of %d: %s", i, size,
                           b->ranks[i].err);
            goto err_destroy;
        }
    }
    log_info("tensor parallelism: %d ranks of the %s backend, %d thread(s) each, %s collective",
             size, inner->name, threads, b->comm->ops->name);
    return b;

err_destroy:
    tp_destroy(b);
    return NULL;
}

static int tp_forward(struct backend *b, const fwd_batch *batch)
{
    if (b->broken) {
        return -EIO;
    }
    /* every rank checks too, but a bad batch must not reach the collectives at all */
    if (batch && (backend_batch_pools(batch) > 0 || backend_batch_all_logits(batch) > 0)) {
        return -ENOTSUP; /* ops.pooling, ops.all_logits false: the engine does not send these */
    }
    if (!batch) {
        return -EINVAL;
    }
    pthread_mutex_lock(&b->mu);
    b->batch = batch;
    b->n_done = 0;
    b->job++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    tp_wait(b, b->size);
    int rc = 0;
    for (int i = 0; i < b->size; i++) {
        if (b->ranks[i].rc != 0) {
            rc = rc ? rc : b->ranks[i].rc;
        }
    }
    if (rc != 0 && b->comm->ops->reset(b->comm) != 0) {
        log_error("tensor parallelism: the %s collective cannot be re-armed after a failed step; "
                  "every later step fails",
                  b->comm->ops->name);
        b->broken = true;
    }
    return rc;
}

static void *tp_kv_pool(struct backend *b, int layer, int kv, size_t *bytes)
{
    (void)b;
    (void)layer;
    (void)kv;
    if (bytes) {
        *bytes = 0;
    }
    return NULL; /* one pool per rank: no single region to register */
}

static size_t tp_kv_block_bytes_unknown(const model *m, int32_t block_size, kv_dtype dt)
{
    (void)m;
    (void)block_size;
    (void)dt;
    return 0; /* depends on the size: tp_backend_kv_block_bytes */
}

const backend_ops tp_backend_ops = {
    .name = "tp",
    .kv_block_bytes = tp_kv_block_bytes_unknown,
    .create = tp_create,
    .forward = tp_forward,
    .kv_pool = tp_kv_pool,
    .kv_adopt = NULL,
    .destroy = tp_destroy,
    .tp_comm_new = NULL,
};
