/*
 * A blocking, thread-safe Kubernetes REST client (the role of client-go's rest.Interface +
 * dynamic client). Every call is synchronous; any thread may use one client concurrently. Each
 * call takes its own curl easy handle; connections, DNS and TLS sessions are shared between
 * threads through one CURLSH, so keep-alive reuse works across calls and threads.
 *
 * Objects are json-c trees (unstructured, like client-go's dynamic client). Failures from the API
 * server come back as a KUBE_E* code with struct kube_error filled from the Status body; transport
 * failures as KUBE_ETRANSPORT / KUBE_ETIMEOUT. Retries (exponential backoff with jitter, honouring
 * Retry-After) on 429, 500, 502, 503, 504 and transport errors for idempotent verbs (GET, PUT,
 * DELETE, PATCH); a POST is retried only when it cannot have reached the server (connect failure)
 * or got 429. Response bodies are capped at KUBE_MAX_RESPONSE.
 */
#ifndef TANDEM_LIB_KUBE_CLIENT_H
#define TANDEM_LIB_KUBE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "lib/buf.h"
#include "lib/err.h"
#include "lib/kube/config.h"

/* Static description of a resource type. */
struct kube_resource {
    const char *group;   /* "" for core */
    const char *version; /* "v1" */
    const char *plural;  /* "deployments" */
    const char *kind;    /* "Deployment" */
    int namespaced;      /* non-zero: lives in a namespace */
};

extern const struct kube_resource KUBE_PODS, KUBE_SERVICES, KUBE_CONFIGMAPS, KUBE_SECRETS,
    KUBE_SERVICEACCOUNTS, KUBE_EVENTS, KUBE_NAMESPACES, KUBE_NODES, KUBE_ENDPOINTS,
    KUBE_DEPLOYMENTS, KUBE_REPLICASETS, KUBE_DAEMONSETS, KUBE_LEASES, KUBE_ROLES, KUBE_ROLEBINDINGS,
    KUBE_HPAS /* autoscaling/v2 */, KUBE_CRDS;

struct kube_error {
    int http_status;   /* 0 for transport errors */
    char reason[64];   /* Status.reason: "NotFound", "Conflict", "AlreadyExists", "Invalid", ... */
    char message[512]; /* Status.message, or the curl error */
};

/* API failures come back as the KUBE_E* codes of lib/err.h (tandem_strerror names them). */

/* Largest response body accepted (a larger one fails with -EFBIG and a message). */
#define KUBE_MAX_RESPONSE (64u << 20)

struct kube_client_options {
    const char *user_agent; /* NULL → "tandem/<version>" */
    long timeout_ms;        /* per attempt; 0 → 30000 */
    int max_retries;        /* 0 → 5; negative → no retries */
    long backoff_base_ms;   /* 0 → 100: first retry waits base..2*base (jittered) */
    long backoff_max_ms;    /* 0 → 10000: cap on one wait (Retry-After is capped at 60 s) */
    double qps;             /* client-side token bucket rate; 0 = off */
    int burst;              /* bucket size (>= 1 when qps > 0) */
};

/* A new client; cfg is copied (free it whenever). opts NULL → defaults. Returns NULL with err set
 * when cfg is unusable (no server) or on OOM. Calls curl_global_init once per process. */
struct kube_client *kube_client_new(const struct kube_config *cfg,
                                    const struct kube_client_options *opts, char *err,
                                    size_t errlen);
/* Frees the client. No call may be in flight. NULL is fine. */
void kube_client_free(struct kube_client *c);
/* The config's namespace ("default" when unset). Lives as long as the client. */
const char *kube_client_namespace(const struct kube_client *c);

/*
 * Every call below: ns may be NULL for cluster-scoped resources (and for "all namespaces" in
 * kube_list); *out (when out is non-NULL) receives a new json-c reference the caller puts; err may
 * be NULL. Returns 0, a KUBE_E* code, or a negative errno (-ENOMEM, -EINVAL for bad arguments or
 * an unparsable 2xx body, -EFBIG for an oversized response).
 */
int kube_get(struct kube_client *c, const struct kube_resource *r, const char *ns, const char *name,
             struct json_object **out, struct kube_error *err);

struct kube_list_options {
    const char *label_selector;         /* NULL = none */
    const char *field_selector;         /* NULL = none */
    long limit;                         /* 0 = no limit */
    const char *continue_token;         /* NULL = first page */
    const char *resource_version;       /* NULL = most recent (quorum read) */
    const char *resource_version_match; /* "Exact" / "NotOlderThan" / NULL */
};

/* One page: the raw XList object (items, metadata.continue, metadata.resourceVersion). */
int kube_list(struct kube_client *c, const struct kube_resource *r, const char *ns,
              const struct kube_list_options *o, struct json_object **out, struct kube_error *err);

/* Follows continue tokens (o->limit is the page size) and returns one XList with all items and
 * the resourceVersion of the last page. A 410 Expired mid-pagination restarts the list once from
 * scratch (continue_token and resource_version dropped). */
int kube_list_all(struct kube_client *c, const struct kube_resource *r, const char *ns,
                  const struct kube_list_options *o, struct json_object **out,
                  struct kube_error *err);

/* POST: obj is not consumed. */
int kube_create(struct kube_client *c, const struct kube_resource *r, const char *ns,
                struct json_object *obj, struct json_object **out, struct kube_error *err);
/* PUT (obj should carry metadata.resourceVersion for optimistic concurrency). */
int kube_update(struct kube_client *c, const struct kube_resource *r, const char *ns,
                const char *name, struct json_object *obj, struct json_object **out,
                struct kube_error *err);
/* PUT .../status */
int kube_update_status(struct kube_client *c, const struct kube_resource *r, const char *ns,
                       const char *name, struct json_object *obj, struct json_object **out,
                       struct kube_error *err);

enum kube_patch_type {
    KUBE_PATCH_MERGE,     /* application/merge-patch+json */
    KUBE_PATCH_JSON,      /* application/json-patch+json */
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json */
    KUBE_PATCH_APPLY,     /* application/apply-patch+yaml (server-side apply) */
};

struct kube_patch_options {
    const char *field_manager; /* required for APPLY; NULL → the user agent's first word */
    int force;                 /* APPLY: force=true */
    const char *subresource;   /* NULL or "status" / "scale" */
    int dry_run;               /* dryRun=All */
};

int kube_patch(struct kube_client *c, const struct kube_resource *r, const char *ns,
               const char *name, enum kube_patch_type t, const char *body, size_t len,
               const struct kube_patch_options *o, struct json_object **out,
               struct kube_error *err);

struct kube_delete_options {
    const char *propagation_policy; /* "Background" | "Foreground" | "Orphan" | NULL */
    long grace_period_seconds;      /* -1 = unset (0 is a valid value) */
    const char *precondition_uid;   /* NULL = none */
    const char *precondition_rv;    /* NULL = none */
};

/* DELETE with a DeleteOptions body when o is non-NULL. *out: the returned object or Status. */
int kube_delete(struct kube_client *c, const struct kube_resource *r, const char *ns,
                const char *name, const struct kube_delete_options *o, struct json_object **out,
                struct kube_error *err);

/* Raw request for anything else. path_and_query is absolute ("/version"); content_type/body may
 * be NULL. *http_status (may be NULL) gets the final status; resp_body (may be NULL; the caller
 * inits it, its max is lowered to KUBE_MAX_RESPONSE) gets the body. Non-2xx → the KUBE_E* code. */
int kube_request(struct kube_client *c, const char *method, const char *path_and_query,
                 const char *content_type, const char *body, size_t len, long *http_status,
                 struct buf *resp_body, struct kube_error *err);

/* "/apis/apps/v1/namespaces/ns/deployments/name[/sub]" appended to out (not reset first); ns NULL
 * or "" for cluster scope / all namespaces; name NULL for the collection. Path segments are
 * percent-escaped. -EINVAL for a name containing '/' or equal to "." / "..". */
int kube_resource_path(const struct kube_resource *r, const char *ns, const char *name,
                       const char *subresource, struct buf *out);

/* Appends "?k=v" or "&k=v" (v percent-escaped for a query) to out; nothing when v is NULL. */
int kube_query_append(struct buf *out, const char *key, const char *value);

/* Request counters for tests and the "no writes in steady state" benchmark. reads: GET/list;
 * writes: POST/PUT/PATCH/DELETE; watches: watch streams opened; retries: extra attempts;
 * errors: calls that returned non-zero. requests counts every attempt sent. */
struct kube_client_stats {
    unsigned long requests, reads, writes, watches, retries, errors;
};
void kube_client_stats(const struct kube_client *c, struct kube_client_stats *out);

/* Status body → kube_error + return code (0 for 2xx). Works for non-JSON bodies (message = the
 * first bytes of the body) and empty ones (reason from the status code). err may be NULL. */
int kube_error_from_response(long http_status, const char *body, size_t len,
                             struct kube_error *err);

/* Fills err (NULL allowed) for a failure without a Status answer (a transport error, a request
 * refused before it was sent, a malformed response): reason and message are cut to fit. */
void kube_error_set(struct kube_error *err, int http_status, const char *reason,
                    const char *message);

/* Tests: the monotonic clock (milliseconds) used to decide when token_file is re-read (every
 * 60 s). NULL restores the real clock. Call before the client is shared between threads. */
void kube_client_set_clock(struct kube_client *c, uint64_t (*now_ms)(void *ud), void *ud);

/* Lowers the response body cap (0 → KUBE_MAX_RESPONSE). Call before the client is shared. */
void kube_client_set_max_response(struct kube_client *c, size_t max);

/* ---- internal to lib/kube (used by watch.c); not part of the public API ---- */
struct curl_slist;
enum kube__counter {
    KUBE__REQUEST,
    KUBE__READ,
    KUBE__WRITE,
    KUBE__WATCH,
    KUBE__RETRY,
    KUBE__ERROR
};
void kube__count(struct kube_client *c, enum kube__counter which);
/* Sets URL, share, TLS, User-Agent, Accept, Content-Type (may be NULL) and Authorization on a
 * CURL easy handle; *headers must be freed (curl_slist_free_all) after the transfer. */
int kube__easy_setup(struct kube_client *c, void *easy, const char *path_and_query,
                     const char *content_type, int force_token, struct curl_slist **headers,
                     char *err, size_t errlen);
void kube__token_invalidate(struct kube_client *c); /* re-read token_file now (after a 401) */
int kube__has_token_file(const struct kube_client *c);
void kube__rate_wait(struct kube_client *c);
/* Strict JSON (json-c tokener, depth 512) of exactly one value; new reference in *out. */
int kube__parse_json(const char *data, size_t len, struct json_object **out, char *err,
                     size_t errlen);
void kube__sleep_ms(long ms);
long kube__backoff_ms(struct kube_client *c, int attempt);
long kube__timeout_ms(const struct kube_client *c);

#endif /* TANDEM_LIB_KUBE_CLIENT_H */
