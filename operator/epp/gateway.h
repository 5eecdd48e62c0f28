/*
 * Gateway mode: the EPP itself proxies OpenAI requests on :8080, so a pool works without Envoy.
 * Each request is routed once (router.h), sent to the chosen decode endpoint's sidecar with
 * x-prefiller-host-port when P/D applies, and its answer streamed back unbuffered. A connection
 * failure before the answer starts tries the next endpoint the scheduler ranked; an endpoint that
 * keeps failing is ejected for a while (router.c). Debug headers on the answer: x-request-id,
 * x-selected-pod, x-decode-pod, x-prefill-pod, x-cache-hit, x-cache-prefix-length,
 * x-scheduling-time-ms, x-session-token, and the sidecar's timing headers passed through.
 */
#ifndef TANDEM_OPERATOR_EPP_GATEWAY_H
#define TANDEM_OPERATOR_EPP_GATEWAY_H

#include <stddef.h>

#include <uv.h>

#include "lib/http_server.h"
#include "operator/epp/router.h"

struct epp_gateway;
struct tracer;

struct epp_gateway_config {
    const char *host;         /* bind address */
    int port;                 /* 8080 */
    size_t max_body;          /* request body limit */
    long upstream_timeout_ms; /* 0: none (streams may be long) */
    struct metrics_registry *reg;
    struct tracer *tracer; /* request spans (docs/tracing.md); NULL: tracing off */
};

struct epp_gateway *epp_gateway_new(uv_loop_t *loop, struct epp_router *r, struct epp_ds *ds,
                                    const struct epp_gateway_config *c, char *err, size_t errlen);
int epp_gateway_start(struct epp_gateway *g, char *err, size_t errlen);
int epp_gateway_port(const struct epp_gateway *g);
/* Drains the server (deadline_ms for requests in flight), then frees; done runs after. */
/* The decision's attributes on a span (the gateway's and ext-proc's "schedule"): pods, P/D, cache
 * hit and prefix length, target model; an ERROR status when it answers itself. */
struct span;
void epp_trace_decision(struct span *sched, const struct epp_decision *d);

void epp_gateway_shutdown(struct epp_gateway *g, uint64_t deadline_ms, void (*done)(void *ud),
                          void *ud);

#endif
