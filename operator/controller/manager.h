/*
 * The controller manager of tandem-operator (controller-runtime's Manager in C): the informer
 * cache the reconcilers read, two rate-limited work queues ("inferencepool", "inferencemodel")
 * fed by informer events, worker threads that run the reconcilers, leader election on a Lease,
 * and the HTTP endpoints /metrics (metrics address) and /healthz, /readyz (health address).
 *
 * Lifecycle (manager_new → manager_run → manager_free): informers start at once (followers keep
 * warm caches); /readyz turns 200 when every informer has synced; only the leader runs workers;
 * SIGTERM drains the queues (a reconcile in flight finishes), releases the Lease, stops the
 * informers and returns 0; losing the Lease stops the same way and returns 1 (the process exits
 * non-zero and restarts, as with controller-runtime). docs/operations.md describes flags, metrics
 * and behaviour.
 *
 * The informer cache the reconcilers read is cache.h's; which events wake which controller is the
 * watch table's (watches.h).
 */
#ifndef TANDEM_OPERATOR_MANAGER_H
#define TANDEM_OPERATOR_MANAGER_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/kube/client.h"
#include "lib/version.h"
#include "operator/controller/cache.h"

#define OPERATOR_NAME    "tandem-operator"
#define OPERATOR_VERSION TANDEM_VERSION

/* The controllers (controller label of the metrics, work queue names). */
#define CONTROLLER_POOL  "inferencepool"
#define CONTROLLER_MODEL "inferencemodel"

struct manager_options {
    const char *const *namespaces; /* watched namespaces; NULL/0 = all */
    size_t n_namespaces;
    int leader_elect; /* run the leader election (else lead at once) */
    const char *leader_election_namespace;
    const char *leader_election_id; /* Lease name */
    const char *identity;           /* NULL → "<$POD_NAME, else hostname>_<random uuid>" */
    long lease_duration_ms;         /* 0 → 15000 */
    long renew_deadline_ms;         /* 0 → 10000 */
    long retry_period_ms;           /* 0 → 2000 */
    const char *metrics_addr;       /* "host:port", ":port"; NULL, "" or "0" = off */
    const char *health_addr;        /* same for /healthz and /readyz */
    const char *agent_image;        /* NULL: desired.h's default */
    const char *epp_image;
    const char *otlp_traces_endpoint; /* NULL: none (desired.h) */
    int workers;                      /* per controller; 0 → 2 */
    long resync_s;                    /* informer resync; 0 = off */
    long graceful_shutdown_ms;        /* cap on draining the queues at SIGTERM; 0 → 30000 */
    /* Client for the Lease (NULL: the main client). A separate one keeps renewals out of the
     * reconcilers' connection pool and rate limit, and out of the main client's request stats
     * (tandem_operator_kube_requests_total then counts only informers, reconciles and Events). */
    struct kube_client *leader_client;
    /* Tests: when non-NULL, the bound ports are stored here once listening. */
    int *metrics_port_out;
    int *health_port_out;
};

struct manager;

/* A manager for client c (which must outlive it); o is copied, its strings and arrays are
 * borrowed and must outlive the manager. NULL on OOM or when the event loop cannot be made. */
struct manager *manager_new(struct kube_client *c, const struct manager_options *o);

/*
 * Runs the manager until SIGTERM/SIGINT or manager_stop (returns 0), or until the Lease is lost
 * or it cannot start (returns 1, the reason logged). Blocks the calling thread, which runs the
 * HTTP servers' libuv loop. Call once.
 */
int manager_run(struct manager *m);

/* Asks manager_run to shut down as on SIGTERM. From any thread, from manager_new until
 * manager_run has returned (a stop requested before manager_run starts takes effect at once). */
void manager_stop(struct manager *m);

/* Frees the manager (after manager_run returned, or if it never ran). NULL allowed. When the
 * workers outlived the graceful shutdown timeout the memory is left to the process exit. */
void manager_free(struct manager *m);

/*
 * Parses a bind address: ":8080" (every interface), "127.0.0.1:8080", "[::1]:8080", "8080".
 * "0" or "" means disabled (returns 1). host gets "0.0.0.0" / "::" / the literal. 0 ok, 1
 * disabled, -EINVAL malformed.
 */
int manager_parse_bind_address(const char *addr, char *host, size_t hostlen, int *port);

/* Parses a Go duration ("15s", "10m", "1h30m", "250ms", "0") into milliseconds (sub-millisecond
 * parts are rounded down). 0, or -EINVAL (malformed, negative, no unit, overflow). */
int manager_parse_duration(const char *s, long *ms);

#endif /* TANDEM_OPERATOR_MANAGER_H */
