/* Spin-then-futex fork/join thread pool; see kc_pool.h. */
#include "kernels/cpu/kc_pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Waits spin KC_SPIN pauses, then yield the CPU (so an oversubscribed or shared machine runs the
 * thread being waited for); idle workers sleep on the futex after KC_YIELDS yields more. */
#define KC_SPIN   (1 << 11)
#define KC_YIELDS 256

struct kc_pool {
    int n;              /* threads including the caller */
    pthread_t *workers; /* [n - 1] */
    int n_started;      /* workers actually started */
    kc_task_fn fn;      /* task of the current run */
    void *arg;
    _Atomic uint32_t gen;     /* bumped to start a run (futex word) */
    _Atomic int done;         /* workers finished with the current run */
    _Atomic int sleepers;     /* workers in futex_wait */
    _Atomic int stop;         /* set at kc_pool_free */
    _Atomic int bar_count;    /* threads arrived at the current barrier */
    _Atomic uint32_t bar_gen; /* barrier generation */
};

typedef struct kc_worker_arg {
    kc_pool *pool;
    int ith;
    int cpu; /* -1: not pinned */
} kc_worker_arg;

static inline void kc_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void kc_futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void kc_futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *kc_worker_main(void *p)
{
    kc_worker_arg wa = *(kc_worker_arg *)p;
    free(p);
    kc_pool *pool = wa.pool;
    if (wa.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(wa.cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen) {
            if (++spins < KC_SPIN) {
                kc_relax();
                continue;
            }
            if (spins < KC_SPIN + KC_YIELDS) {
                sched_yield();
                continue;
            }
            atomic_fetch_add(&pool->sleepers, 1);
            kc_futex_wait(&pool->gen, seen);
            atomic_fetch_sub(&pool->sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&pool->stop)) {
            break;
        }
        pool->fn(pool->arg, wa.ith, pool->n);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
    }
    return NULL;
}

kc_pool *kc_pool_new(int n_threads, bool pin)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) {
        ncpu = 1;
    }
    if (n_threads <= 0) {
        n_threads = (int)(ncpu > KC_POOL_MAX_THREADS ? KC_POOL_MAX_THREADS : ncpu);
    }
    if (n_threads > KC_POOL_MAX_THREADS) {
        n_threads = KC_POOL_MAX_THREADS;
    }
    kc_pool *pool = calloc(1, sizeof(*pool));
    if (!pool) {
        return NULL;
    }
    pool->n = n_threads;
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!pool->workers) {
            goto err_free_pool;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        kc_worker_arg *wa = malloc(sizeof(*wa));
        if (!wa) {
            goto err_stop;
        }
        wa->pool = pool;
        wa->ith = i;
        wa->cpu = pin ? (int)(i % ncpu) : -1;
        if (pthread_create(&pool->workers[i - 1], NULL, kc_worker_main, wa) != 0) {
            free(wa);
            goto err_stop;
        }
        pool->n_started++;
    }
    return pool;

err_stop:
    kc_pool_free(pool);
    return NULL;
err_free_pool:
    free(pool);
    return NULL;
}

void kc_pool_free(kc_pool *pool)
{
    if (!pool) {
        return;
    }
    atomic_store(&pool->stop, 1);
    atomic_fetch_add(&pool->gen, 1);
    kc_futex_wake_all(&pool->gen);
    for (int i = 0; i < pool->n_started; i++) {
        pthread_join(pool->workers[i], NULL);
    }
    free(pool->workers);
    free(pool);
}

int kc_pool_size(const kc_pool *pool)
{
    return pool->n;
}

void kc_pool_run(kc_pool *pool, kc_task_fn fn, void *arg)
{
    if (pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->sleepers) > 0) {
        kc_futex_wake_all(&pool->gen);
    }
    fn(arg, 0, pool->n);
    int spins = 0;
    while (atomic_load_explicit(&pool->done, memory_order_acquire) != pool->n - 1) {
        if (++spins < KC_SPIN) {
            kc_relax();
        } else {
            sched_yield();
        }
    }
}

void kc_pool_barrier(kc_pool *pool)
{
    if (pool->n == 1) {
        return;
    }
    uint32_t g = atomic_load(&pool->bar_gen);
    if (atomic_fetch_add(&pool->bar_count, 1) == pool->n - 1) {
        atomic_store(&pool->bar_count, 0);
        atomic_fetch_add(&pool->bar_gen, 1);
        return;
    }
    int spins = 0;
    while (atomic_load(&pool->bar_gen) == g) {
        if (++spins < KC_SPIN) {
            kc_relax();
        } else {
            sched_yield();
        }
    }
}
