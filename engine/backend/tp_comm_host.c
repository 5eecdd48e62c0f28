/*
 * The host communicator of tensor parallelism (engine/core/tp.h): ranks are threads of one
 * process, so a collective is two barriers around a shared table of the ranks' buffers.
 *
 * all_reduce_sum: every rank publishes its buffer and waits for the others; then rank r sums
 * elements [n*r/size, n*(r+1)/size) over all buffers in rank order and writes the sum back into
 * every buffer (a reduce-scatter and an all-gather in one pass, each rank touching only its own
 * slice); a second barrier ends the collective. The order of the additions does not depend on
 * the rank, so every rank holds the same bits afterwards, which keeps their residual streams
 * equal.
 *
 * The barrier spins first (the ranks usually arrive within microseconds of each other: two
 * barriers per collective, four collectives per layer pair would cost milliseconds per step on
 * a condition variable's wake-ups), then yields, then sleeps on the condition variable, so an
 * oversubscribed machine still runs the rank being waited for.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "engine/core/tp.h"

#define HOST_SPIN   (1 << 12) /* pauses before yielding */
#define HOST_YIELDS 256       /* yields before sleeping */

typedef struct host_comm {
    tp_comm base;
    pthread_mutex_t mu; /* with cv: the sleeping phase of the barrier */
    pthread_cond_t cv;
    _Atomic int arrived;
    _Atomic unsigned generation;
    _Atomic bool aborted;
    float **bufs; /* [size]: the buffers of the collective in progress */
} host_comm;

static inline void host_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until all ranks arrive; -ECANCELED when aborted before or while waiting. */
static int host_barrier(host_comm *h)
{
    if (atomic_load(&h->aborted)) {
        return -ECANCELED;
    }
    const unsigned gen = atomic_load(&h->generation);
    if (atomic_fetch_add(&h->arrived, 1) == h->base.size - 1) {
        atomic_store(&h->arrived, 0);
        atomic_fetch_add(&h->generation, 1);
        /* under the mutex: a rank between its check and its wait cannot miss this */
        pthread_mutex_lock(&h->mu);
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        return 0;
    }
    for (int i = 0; i < HOST_SPIN + HOST_YIELDS; i++) {
        if (atomic_load(&h->generation) != gen) {
            return 0;
        }
        if (atomic_load(&h->aborted)) {
            return -ECANCELED;
        }
        if (i < HOST_SPIN) {
            host_relax();
        } else {
            sched_yield();
        }
    }
    pthread_mutex_lock(&h->mu);
    while (atomic_load(&h->generation) == gen && !atomic_load(&h->aborted)) {
        pthread_cond_wait(&h->cv, &h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return atomic_load(&h->generation) != gen ? 0 : -ECANCELED;
}

static int host_all_reduce_sum(tp_comm *c, int rank, float *buf, size_t n, void *stream)
{
    (void)stream;
    host_comm *h = (host_comm *)c;
    const int size = c->size;
    if (rank < 0 || rank >= size || (!buf && n > 0)) {
        return -EINVAL;
    }
    if (size == 1) {
        return 0;
    }
    h->bufs[rank] = buf;
    int rc = host_barrier(h);
    if (rc != 0) {
        return rc;
    }
    const size_t i0 = n * (size_t)rank / (size_t)size;
    const size_t i1 = n * ((size_t)rank + 1) / (size_t)size;
    for (size_t i = i0; i < i1; i++) {
        float s = h->bufs[0][i];
        for (int r = 1; r < size; r++) {
            s += h->bufs[r][i];
        }
        for (int r = 0; r < size; r++) {
            h->bufs[r][i] = s;
        }
    }
    return host_barrier(h);
}

static void host_abort(tp_comm *c)
{
    host_comm *h = (host_comm *)c;
    atomic_store(&h->aborted, true);
    pthread_mutex_lock(&h->mu);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static int host_reset(tp_comm *c)
{
    host_comm *h = (host_comm *)c;
    atomic_store(&h->arrived, 0);
    atomic_fetch_add(&h->generation, 1);
    atomic_store(&h->aborted, false);
    return 0;
}

static void host_free(tp_comm *c)
{
    host_comm *h = (host_comm *)c;
    if (!h) {
        return;
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->bufs);
    free(h);
}

static const tp_comm_ops host_comm_ops = {
    .name = "host",
    .all_reduce_sum = host_all_reduce_sum,
    .abort = host_abort,
    .reset = host_reset,
    .free = host_free,
};

tp_comm *tp_comm_host_new(int size)
{
    if (size < 1) {
        return NULL;
    }
    host_comm *h = calloc(1, sizeof(*h));
    if (!h) {
        return NULL;
    }
    h->bufs = calloc((size_t)size, sizeof(float *));
    if (!h->bufs) {
        free(h);
        return NULL;
    }
    h->base.ops = &host_comm_ops;
    h->base.size = size;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    return &h->base;
}
