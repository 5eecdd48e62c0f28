/*
 * A fork/join thread pool for the CPU kernels. kc_pool_run(pool, fn, arg) calls fn(arg, ith, nth)
 * once for every ith in [0, nth) (nth = kc_pool_size), the calling thread running ith 0, and
 * returns when all have returned. Idle workers spin briefly (so back-to-back runs of one forward
 * pass cost well under a microsecond to start) and then sleep on a futex.
 *
 * Ownership and threads: one thread at a time may call kc_pool_run on a pool (it is not
 * re-entrant: fn must not call kc_pool_run on the same pool). kc_pool_barrier may only be called
 * from inside fn, by every one of the nth threads, the same number of times.
 */
#ifndef TANDEM_KERNELS_CPU_KC_POOL_H
#define TANDEM_KERNELS_CPU_KC_POOL_H

#include <stdbool.h>

typedef struct kc_pool kc_pool;

typedef void (*kc_task_fn)(void *arg, int ith, int nth);

#define KC_POOL_MAX_THREADS 256

/*
 * Creates a pool of n_threads threads in all, the caller included (so n_threads - 1 workers);
 * n_threads 0 means one per online CPU, clamped to [1, KC_POOL_MAX_THREADS]. With pin, worker i
 * is pinned to online CPU i (modulo the CPU count); the caller's affinity is left alone.
 * NULL when memory or threads cannot be had. Free with kc_pool_free.
 */
kc_pool *kc_pool_new(int n_threads, bool pin);

/* Stops and joins the workers and frees the pool. NULL is a no-op. */
void kc_pool_free(kc_pool *pool);

/* Threads in the pool, the caller included (>= 1). */
int kc_pool_size(const kc_pool *pool);

/* Runs fn(arg, ith, nth) on every thread of the pool and waits for all. */
void kc_pool_run(kc_pool *pool, kc_task_fn fn, void *arg);

/* Waits until all nth threads of the current run have reached it. Only inside fn. */
void kc_pool_barrier(kc_pool *pool);

#endif
