/*
 * Leader election on a coordination.k8s.io/v1 Lease, with the algorithm of client-go's
 * LeaderElector (tools/leaderelection/leaderelection.go + resourcelock/leaselock.go):
 *
 *   acquire: every retry period (jittered by 1.2) try to acquire or renew until it succeeds;
 *   renew:   every retry period, retry for up to the renew deadline; failing that, leadership is
 *            lost (the process is expected to exit, as controller-runtime's manager does);
 *   tryAcquireOrRenew: a leader whose observed lease is still valid PUTs its renewal directly;
 *            otherwise GET (create when missing), remember the record with the candidate's OWN
 *            monotonic time whenever it changes, and give up while another holder's lease has
 *            not expired by that observation (observedTime + leaseDurationSeconds); otherwise
 *            PUT with the resourceVersion read, so concurrent candidates get 409 Conflict.
 *            acquireTime and leaseTransitions are kept on renewal; a new holder increments
 *            leaseTransitions. Lease timestamps are never compared with the local clock, so
 *            clock skew between candidates does not matter.
 *   release (release_on_cancel): a leader that is stopped writes holderIdentity "" and
 *            leaseDurationSeconds 1, so a successor acquires at once.
 *
 * Times in the Lease are MicroTime ("2006-01-02T15:04:05.000000Z"). Everything runs on the
 * elector's own thread, and so do the callbacks, which must return promptly (start the work on
 * another thread): a callback that blocks delays renewals.
 *
 * The client's per-request timeout should be shorter than the renew deadline.
 */
#ifndef TANDEM_LIB_KUBE_LEADER_H
#define TANDEM_LIB_KUBE_LEADER_H

#include <stddef.h>

#include "lib/kube/client.h"

struct kube_leader_callbacks {
    /* This candidate became the leader. */
    void (*on_started_leading)(void *ud);
    /* The elector's run ended: leadership was lost (renewal failed within the renew deadline) or
     * the elector was stopped. As in client-go it is called whenever the run ends, also for a
     * candidate that never led; kube_leader_was_leading tells them apart. */
    void (*on_stopped_leading)(void *ud);
    /* The observed holder changed (identity "" after a release); also the first observation. */
    void (*on_new_leader)(void *ud, const char *identity);
    void *ud;
};

struct kube_leader_config {
    const char *lease_name;      /* required */
    const char *lease_namespace; /* required */
    const char *identity;        /* required: unique per candidate (e.g. pod name + uuid) */
    long lease_duration_ms;      /* 0 → 15000; written as whole seconds */
    long renew_deadline_ms;      /* 0 → 10000 */
    long retry_period_ms;        /* 0 → 2000 */
    int release_on_cancel;       /* release the lease when stopped while leading */
    struct kube_leader_callbacks cb;
};

struct kube_leader;

/* Validates cfg as client-go does (lease duration > renew deadline > 1.2 × retry period, all > 0,
 * lease duration at least 1 s, non-empty identity/name/namespace) and copies it. c must outlive
 * the elector. NULL with err set on invalid config or OOM. */
struct kube_leader *kube_leader_new(struct kube_client *c, const struct kube_leader_config *cfg,
                                    char *err, size_t errlen);

/* Starts the elector thread: -EBUSY when already started, or -errno from pthread_create. */
int kube_leader_start(struct kube_leader *le);

/* Stops the elector and joins its thread: waits are interrupted at once, a request in flight
 * finishes. A leader releases the lease first when release_on_cancel is set; without it the lease
 * simply expires (what a killed process leaves behind). on_stopped_leading has been called when it
 * returns (if the elector was started). Idempotent. Not from a callback (it would join its own
 * thread). */
void kube_leader_stop(struct kube_leader *le);

/* Stops it if needed and frees it. NULL allowed. */
void kube_leader_free(struct kube_leader *le);

/* 1 while this candidate leads (between on_started_leading and losing or stopping). */
int kube_leader_is_leader(struct kube_leader *le);
/* 1 when this candidate led at some point of its run. */
int kube_leader_was_leading(struct kube_leader *le);
/* The holder identity last observed, as a malloc'd string ("" when none or unknown); NULL on
 * OOM. */
char *kube_leader_get_leader(struct kube_leader *le);

/* Formats a CLOCK_REALTIME time (seconds, nanoseconds) as a Kubernetes MicroTime
 * "2006-01-02T15:04:05.000000Z" into out (at least 28 bytes). Returns out. */
char *kube_format_micro_time(long long sec, long nsec, char *out, size_t outlen);

#endif /* TANDEM_LIB_KUBE_LEADER_H */
