/*
 * The parts of tandem-epp's process (app.c) and the optional pieces it drives: the KV-event
 * subscriber and index (app_kv.c) and the ext-proc server (app_extproc.c).
 */
#ifndef TANDEM_OPERATOR_EPP_APP_INTERNAL_H
#define TANDEM_OPERATOR_EPP_APP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "lib/metrics.h"
#include "operator/epp/flags.h"
#include "operator/epp/router_internal.h"

struct epp_app {
    uv_loop_t loop;
    const struct epp_flags *f;
    struct metrics_registry *reg;
    struct epp_ds *ds;
    struct epp_sched *sched;
    struct epp_keyring *keyring;
    struct epp_router router;
    struct epp_scraper *scraper;
    struct epp_gateway *gw;
    struct epp_api *api;
    struct kube_client *kc;
    struct epp_pool *pool;
    struct shutdown *signals;
    uv_timer_t tick;
    bool static_mode; /* --endpoints */
    int draining;     /* parts still draining after a signal */
    struct metric *g_ready, *g_avg_kv, *g_avg_queue, *g_avg_running;
    /* status.metrics of the pool (app_status.c) */
    uv_timer_t status_timer;
    bool status_written, status_in_flight;
    double status_last[3];
    struct app_kv *kv;
    struct app_extproc *xp;
    struct otlp_exporter *otlp; /* request traces; NULL: off (docs/tracing.md) */
};

/* A metric without labels (NULL on failure). */
struct metric *app_gauge(struct metrics_registry *reg, const char *name, const char *help);
/* Means of kv_usage, waiting and running over the ready endpoints with metrics (fresh ones only
 * when fresh_only) into avg; returns how many there are. */
int app_pool_averages(struct epp_app *a, bool fresh_only, double avg[3]);

/* The KV-event subscriber and index, when the scheduler has a precise prefix scorer. */
int app_kv_start(struct epp_app *a);
struct kvidx *app_kv_index(struct epp_app *a); /* NULL when off */
/* Refreshes the KV metrics (the periodic tick). */
void app_kv_tick(struct epp_app *a);
void app_kv_add(struct epp_app *a, const struct epp_endpoint *ep);
void app_kv_remove(struct epp_app *a, const struct epp_endpoint *ep);
bool app_kv_synced(struct epp_app *a, char *why, size_t whylen);
void app_kv_stop(struct epp_app *a);
void app_kv_free(struct epp_app *a);

/* Writes the pool's status.metrics periodically (tandem.dev pools). */
void app_status_start(struct epp_app *a);

/* Envoy ext-proc on --grpc-port (0: off). */
int app_extproc_start(struct epp_app *a);
void app_extproc_stop(struct epp_app *a);
/* Readiness of the ext-proc health services (readiness, the ExternalProcessor service). */
void app_extproc_ready(struct epp_app *a, bool ready);

#endif
