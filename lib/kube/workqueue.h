/*
 * A work queue with client-go semantics (k8s.io/client-go/util/workqueue): the controller's inbox
 * of object keys ("ns/name").
 *
 *   FIFO + dirty set + processing set: adding a key that is already waiting is a no-op
 *   (de-duplication); a key being processed is never handed to a second worker; a key added while
 *   it is processed is queued again when the worker calls kube_workqueue_done.
 *   Delayed adds (add_after) wait in a min-heap of ready times; the getter threads move keys whose
 *   time has come into the FIFO (no extra thread).
 *   Rate-limited adds use max(per-key exponential backoff base·2^failures capped at max, a global
 *   token bucket qps/burst) — client-go's DefaultControllerRateLimiter (5 ms .. 1000 s, 10 qps,
 *   burst 100). kube_workqueue_forget resets a key's failure count.
 *
 * Metrics (when a registry is given), client-go's workqueue_* families with labels name and
 * controller: workqueue_depth, workqueue_adds_total, workqueue_queue_duration_seconds,
 * workqueue_work_duration_seconds (histograms, buckets 1e-8 .. 1e3 in decades),
 * workqueue_unfinished_work_seconds, workqueue_longest_running_processor_seconds (gauges refreshed
 * every 500 ms by a small thread) and workqueue_retries_total. Several queues may share one
 * registry (the families are registered once per registry; the workqueue_* names are reserved for
 * this module).
 *
 * Time: delays, backoff and metric durations use the queue's clock (lib/clock.h's tandem_now_ns, or
 * a fake one installed with kube_workqueue_set_clock for deterministic tests); the timeout of
 * kube_workqueue_get is always real time.
 *
 * Every function is thread-safe. Keys are copied.
 */
#ifndef TANDEM_LIB_KUBE_WORKQUEUE_H
#define TANDEM_LIB_KUBE_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/metrics.h"

/* Monotonic nanoseconds. */
typedef int64_t (*kube_clock_fn)(void *ud);

/* ---- rate limiter (also usable on its own) ---- */

struct kube_rate_limiter;

/* base_delay_ms 0 → 5, max_delay_ms 0 → 1000000 (1000 s), qps 0 → 10, burst 0 → 100. A negative
 * qps disables the token bucket. NULL on OOM. */
struct kube_rate_limiter *kube_rate_limiter_new(long base_delay_ms, long max_delay_ms, double qps,
                                                int burst);
void kube_rate_limiter_free(struct kube_rate_limiter *rl); /* NULL allowed */

/* How long key should wait before it is retried, in ns, as client-go's MaxOf(exponential,
 * bucket).When(key) at time now_ns: counts one failure for key and takes one token. */
int64_t kube_rate_limiter_when(struct kube_rate_limiter *rl, const char *key, int64_t now_ns);
/* Forgets key's failures (the bucket is unaffected). */
void kube_rate_limiter_forget(struct kube_rate_limiter *rl, const char *key);
/* Failures counted for key since the last forget. */
int kube_rate_limiter_num_requeues(struct kube_rate_limiter *rl, const char *key);

/* ---- the queue ---- */

struct kube_workqueue;

struct kube_workqueue_options {
    const char *controller; /* value of the "controller" label; NULL → the queue name */
    long base_delay_ms;     /* rate limiter settings, as kube_rate_limiter_new */
    long max_delay_ms;
    double qps;
    int burst;
};

/* A new queue named name (copied; the "name" metric label). m may be NULL (no metrics); it must
 * outlive the queue. NULL on OOM. */
struct kube_workqueue *kube_workqueue_new(const char *name, struct metrics_registry *m);
/* Same with options (o may be NULL for the defaults). */
struct kube_workqueue *kube_workqueue_new_opts(const char *name, struct metrics_registry *m,
                                               const struct kube_workqueue_options *o);
/* Frees the queue. No thread may be inside a call on it (shut it down and join the workers
 * first). NULL allowed. */
void kube_workqueue_free(struct kube_workqueue *q);

/* Installs a clock (NULL → tandem_now_ns). While a custom clock is set, blocked getters re-read
 * it at least every 10 ms of real time, so a test that advances its fake clock sees delayed keys
 * become ready without waiting. Set it before any key is added. */
void kube_workqueue_set_clock(struct kube_workqueue *q, kube_clock_fn now_ns, void *ud);

/* Queues key unless it is already waiting to be processed. Ignored after shutdown. */
void kube_workqueue_add(struct kube_workqueue *q, const char *key);
/* Queues key after delay_ms (<= 0: now). A key already waiting keeps the earlier of the two ready
 * times; keys due at the same time are queued in the order they were delayed. Counts a retry in
 * workqueue_retries_total. Ignored after shutdown. */
void kube_workqueue_add_after(struct kube_workqueue *q, const char *key, long delay_ms);
/* add_after(key, rate limiter's delay for key). */
void kube_workqueue_add_rate_limited(struct kube_workqueue *q, const char *key);
/* Resets key's failure count (call after a successful reconcile). */
void kube_workqueue_forget(struct kube_workqueue *q, const char *key);
int kube_workqueue_num_requeues(struct kube_workqueue *q, const char *key);

/* Takes the next key: 0 with *key set (a malloc'd copy the caller frees; the key is now being
 * processed until kube_workqueue_done), -ETIMEDOUT when none came within timeout_ms (0 = do not
 * block, -1 = forever), -ESHUTDOWN once the queue is shut down and empty (keys queued before the
 * shutdown are still handed out first), -ENOMEM. */
int kube_workqueue_get(struct kube_workqueue *q, char **key, long timeout_ms);
/* Marks key processed; if it was added meanwhile it is queued again. */
void kube_workqueue_done(struct kube_workqueue *q, const char *key);

/* Stops accepting keys and wakes every getter; delayed keys are dropped. Returns at once. */
void kube_workqueue_shutdown(struct kube_workqueue *q);
/* Like shutdown, then waits until no key is being processed (workers still call done). */
void kube_workqueue_shutdown_drain(struct kube_workqueue *q);
int kube_workqueue_shutting_down(struct kube_workqueue *q);

/* Keys ready in the FIFO (delayed keys whose time has come included; others not). */
size_t kube_workqueue_len(struct kube_workqueue *q);

#endif /* TANDEM_LIB_KUBE_WORKQUEUE_H */
