/*
 * The SSRF allowlist of the P/D sidecar (llm-d's pd-sidecar --enable-ssrf-protection): the pod
 * IPs and pod names of the agent's InferencePool, kept current by two informers, so that a
 * request's x-prefiller-host-port can only send the prefill leg to a pod of the pool.
 *
 * lib/kube/poolwatch.h follows the pool and its pods (its spec.selector, kube_pool_selector):
 * when the selector changes the set is emptied and refilled by the new pod informer's list; when
 * the pool is deleted, or its selector is invalid or empty, the set is empty and nothing is
 * allowed. A pool that does not exist yet is not an error: the set stays empty until it appears.
 *
 * The set holds, for every pod that matches, status.podIP and the addresses of status.podIPs
 * (dual-stack pods have one per family), plus the pod's name. As in llm-d there is no Ready
 * check (a pod that is starting or terminating still owns its IP), but pods in phase Succeeded
 * or Failed are left out: the kubelet has released their IP, which another pod may get.
 *
 * Pool groups (--pool-group), each with its version and the shape of spec.selector:
 *   tandem.dev                    v1alpha1  {matchLabels, matchExpressions} (a LabelSelector)
 *   inference.networking.k8s.io   v1        {matchLabels} only (GIE v1)
 *   inference.networking.x-k8s.io v1alpha2  a plain map of labels (GIE <= v0.5, llm-d's legacy)
 *
 * Hosts: the check compares the host only; any port of an allowed host is allowed. An IP literal
 * is compared by address (its canonical inet_ntop form, so "fd00:0::1", "[fd00::1]" and
 * "fd00::1" are one host, and an IPv4-mapped IPv6 address is its IPv4 address). A name that is
 * not an IP literal is allowed only when it equals the name of a pod in the set (compared in
 * lower case; llm-d keeps names too). Note that the sidecar resolves such a name with the
 * resolver, which may find something else of that name (a Service through the search domains):
 * prefer IPs. Names that the C library would read as a number-and-dots IPv4 address ("10.1",
 * "2130706433", "0x7f.1"), a trailing dot, zone ids ("fe80::1%eth0"), a port and anything else
 * that is neither an IP literal nor a DNS-1123 subdomain are refused.
 *
 * Threading: the informers run on their own threads; the set is guarded by a mutex, so
 * allowlist_allows and allowlist_size may be called from any thread.
 *
 * RBAC: the agent's ServiceAccount needs get, list and watch on pods and on inferencepools of
 * the pool group in the pool's namespace.
 */
#ifndef TANDEM_AGENT_ALLOWLIST_H
#define TANDEM_AGENT_ALLOWLIST_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "lib/kube/client.h"

#define ALLOWLIST_DEFAULT_SYNC_MS 30000

/* Pods the set holds at most (more are left out, with a log line: fail closed). */
#define ALLOWLIST_MAX_PODS 65536

struct allowlist_config {
    struct kube_client *client; /* borrowed (outlives the allowlist), or NULL: one is made */
    const char *kubeconfig;     /* when client is NULL: NULL → kube_config_load's resolution
                                   (in-cluster, $KUBECONFIG, ~/.kube/config) */
    const char *ns;             /* the pool's namespace (required) */
    const char *pool;           /* the pool's name (required) */
    const char *pool_group;     /* NULL → "tandem.dev"; see the table above */
    long sync_timeout_ms;       /* bound on the start; 0 → ALLOWLIST_DEFAULT_SYNC_MS */
};

struct allowlist;

/*
 * Checks that the pool group is known and that the pool and pod collections can be listed (so an
 * RBAC or CRD problem is named at once; these two requests are bounded by the client's timeout
 * and retries), starts the informers and waits until the pool's cache and then the pod cache have
 * synced, until sync_timeout_ms after the call at most. NULL with a message in err on failure;
 * the message names the resource that could not be listed or did not sync and, where permissions
 * may be the cause, that the ServiceAccount needs get, list and watch on it
 * ("inferencepools.tandem.dev in namespace ns").
 */
struct allowlist *allowlist_new(const struct allowlist_config *c, char *err, size_t errlen);

/* Whether the sidecar may connect to host (an IP literal, "[IPv6]", or a pod name; no port). Any
 * thread. al is a struct allowlist * (the signature is agent/sidecar.h's sidecar_allow_fn); a NULL
 * al or host allows nothing. To allow everything (protection off), give the sidecar no allow
 * function instead. */
bool allowlist_allows(void *al, const char *host);

/* Pods in the set now. Any thread. */
int allowlist_size(struct allowlist *al);

/* Stops the informers (joins their threads) and frees everything. NULL allowed. */
void allowlist_free(struct allowlist *al);

/* ---- pure parts, for the agent's flags and for tests ---- */

/* "--inference-pool NS/NAME" → ns (a DNS-1123 label) and name (a DNS-1123 subdomain). 0, or
 * -EINVAL for another shape, -ENOSPC when a part does not fit. */
int allowlist_parse_pool_ref(const char *ref, char *ns, size_t nslen, char *name, size_t namelen);

enum allowlist_host_kind {
    ALLOWLIST_HOST_IP = 1,   /* out holds the canonical address */
    ALLOWLIST_HOST_NAME = 2, /* out holds the name in lower case */
};

/* The form in which host is looked up: an ALLOWLIST_HOST_* kind with out filled, or -EINVAL for a
 * host that is refused (see the top of this file), -ENOSPC when out is too small (256 bytes
 * always suffice). */
int allowlist_normalize_host(const char *host, char *out, size_t outlen);

#endif /* TANDEM_AGENT_ALLOWLIST_H */
