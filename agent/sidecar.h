/*
 * The P/D sidecar: the pod's serving port (8000), speaking llm-d's pd-sidecar protocol with the
 * NIXL v2 connector (docs/agent.md, "The sidecar").
 *
 *   POST /v1/completions, /v1/chat/completions
 *     no x-prefiller-host-port header → local mode: the request goes to the own engine as is;
 *     with it → prefill leg: the body with stream false, no stream_options, max_tokens and
 *       max_completion_tokens 1 and kv_transfer_params {do_remote_decode: true, do_remote_prefill:
 *       false, remote_*: null} goes to that host (buffered); then the decode leg: the original
 *       body plus the prefiller's kv_transfer_params goes to the own engine, and its answer
 *       (SSE included) streams back unbuffered.
 *     A prefill leg that fails with a 5xx, a transport error or a timeout, or answers 2xx without
 *     kv_transfer_params, is answered by a local prefill (logged, counted, and named in the
 *     response header x-tandem-pd-fallback); a 4xx (400-451) is the client's answer.
 *   everything else (GET /v1/models, /health, /tokenize, ...) → reverse proxy to the own engine;
 *   /metrics is the agent's registry (llmd_sidecar_* and the engine's vllm:* families).
 *
 * x-request-id is kept, or created (a UUID) and sent on both legs. x-request-timeout (seconds, or
 * with a unit: 500ms, 30s, 2m) bounds the whole request. Responses of P/D requests carry
 * x-tandem-prefill-host (the prefiller) and x-tandem-decode-host (this pod).
 *
 * The engine legs (local mode, the decode leg, the reverse proxy) run in-process when the
 * config names the engine's server: the request itself is handed to its handlers, so the answer
 * is the engine port's by construction and no second HTTP exchange is made (x-request-timeout is
 * then a timer that ends the request: 504 before the answer starts, a cut stream after).
 *
 * Threading: the loop's thread only.
 */
#ifndef TANDEM_AGENT_SIDECAR_H
#define TANDEM_AGENT_SIDECAR_H

#include <stdbool.h>

#include <uv.h>

#include "lib/http_server.h"
#include "lib/metrics.h"

/* SSRF check of a prefill target's host (an IP literal or name, without the port): true when the
 * sidecar may connect to it. */
typedef bool (*sidecar_allow_fn)(void *ud, const char *host);

struct sidecar_config {
    const char *engine_url; /* the own engine, "http://127.0.0.1:8200" */
    /* The own engine's server in this process (same loop): engine legs go to its handlers
     * in-process (http_server_dispatch) instead of over HTTP to engine_url. NULL: HTTP. */
    struct http_server *engine_srv;
    const char *self_host; /* this pod's address as x-tandem-decode-host names it ("ip:port") */
    const char *connector; /* "nixlv2" (the only one), NULL → nixlv2 */
    /* SSRF protection: NULL allow → every prefill target is allowed. */
    sidecar_allow_fn allow;
    void *allow_ud;
    bool prefiller_use_tls;      /* prefill legs over https:// (certificates verified) */
    bool prefiller_insecure_tls; /* skip that verification (an explicit flag only) */
    long prefill_timeout_ms;     /* prefill leg bound when the request sets no x-request-timeout;
                                    0 → 60000 */
    struct metrics_registry *metrics; /* llmd_sidecar_* families are registered here */
    struct tracer *tracer; /* spans of generation requests (docs/tracing.md); NULL: off */
};

struct sidecar;

/* Registers the routes on srv (both must outlive the sidecar). NULL + err on failure. */
struct sidecar *sidecar_new(uv_loop_t *loop, struct http_server *srv,
                            const struct sidecar_config *cfg, char *err, size_t errlen);

/* Requests in flight (either leg). */
int sidecar_in_flight(const struct sidecar *s);

/* Refreshes the allowlist-size gauge (llmd_sidecar_allowlist_size). */
void sidecar_set_allowlist_size(struct sidecar *s, int n);

/* x-request-timeout: "30" (seconds), "1.5s", "500ms", "2m" → milliseconds. 0 or -EINVAL. */
int sidecar_parse_timeout(const char *v, long *ms_out);

/* x-prefiller-host-port ("ip:port", "[v6]:port", "name:port"; a comma list: the first) or the
 * legacy x-prefiller-url ("http://ip:port"): host_port gets "host:port" as given, host the host
 * alone (brackets removed). 0 or -EINVAL. */
int sidecar_parse_prefiller(const char *v, char *host_port, size_t hplen, char *host, size_t hlen);

/* Frees the sidecar: call after srv drained (no request left); upstream requests still running
 * are cancelled. */
void sidecar_free(struct sidecar *s);

#endif
