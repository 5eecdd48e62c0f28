/*
 * The EPP's HTTP port (9090): /metrics, /healthz (liveness), /readyz (the pool's watches have
 * synced and every ready endpoint's KV-event stream is connected: an active-active replica is
 * ready when its index is), and the KV-cache manager API of llm-d's seed description:
 *   POST /api/v1/score           {model, prompt | messages | prompt_token_ids, candidate_pods?}
 *                                → per-pod {cache_hit_rate, blocks_present, blocks_total, score}
 *                                  and a recommendation
 *   GET  /api/v1/cache/state     totals of the KV-block index
 *   GET  /api/v1/cache/pod/{id}  one pod's blocks (id: its address "ip:port" or its name)
 */
#ifndef TANDEM_OPERATOR_EPP_API_H
#define TANDEM_OPERATOR_EPP_API_H

#include <stdbool.h>

#include <uv.h>

#include "lib/http_server.h"
#include "lib/metrics.h"
#include "operator/epp/datastore.h"
#include "operator/epp/router.h"

struct epp_api;

/* Whether the EPP is ready to serve (called at each /readyz). */
typedef bool (*epp_ready_fn)(void *ud, char *why, size_t whylen);

struct epp_api_config {
    const char *host;
    int port;
    struct metrics_registry *reg;
    epp_ready_fn ready;
    void *ready_ud;
};

struct epp_api *epp_api_new(uv_loop_t *loop, struct epp_router *r, struct epp_ds *ds,
                            const struct epp_api_config *c, char *err, size_t errlen);
int epp_api_start(struct epp_api *a, char *err, size_t errlen);
void epp_api_shutdown(struct epp_api *a, void (*done)(void *ud), void *ud);

#endif
