/*
 * The pool's status.metrics (tandem.dev pools): every STATUS_PERIOD_MS the EPP averages what it
 * scraped from the ready pods (vllm:kv_cache_usage_perc, vllm:num_requests_waiting,
 * vllm:num_requests_running) and, when it moved, merge-patches status.metrics of the pool on a
 * libuv worker thread (the client call blocks). Only status.metrics is sent, so the operator's
 * status (conditions, pod counts) is left as it is; every replica computes the same averages.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/kube/client.h"
#include "lib/kube/poolwatch.h"
#include "lib/log.h"
#include "operator/epp/app_internal.h"

#define STATUS_PERIOD_MS 10000
#define MIN_CHANGE       0.005 /* smaller moves are not written */

struct status_patch {
    uv_work_t work;
    struct epp_app *a;
    char body[256];
    int rc;
    char err[512];
};

static void patch_work(uv_work_t *w)
{
    struct status_patch *p = w->data;
    struct epp_app *a = p->a;
    struct kube_patch_options o = {.subresource = "status"};
    struct kube_error ke = {0};
    p->rc = kube_patch(a->kc, kube_pool_resource(a->f->pool_group), a->f->pool_ns, a->f->pool_name,
                       KUBE_PATCH_MERGE, p->body, strlen(p->body), &o, NULL, &ke);
    if (p->rc != 0) {
        snprintf(p->err, sizeof p->err, "%s", ke.message);
    }
}

static void patch_done(uv_work_t *w, int status)
{
    struct status_patch *p = w->data;
    struct epp_app *a = p->a;
    a->status_in_flight = false;
    if (status != 0 || p->rc != 0) {
        a->status_written = false; /* try again next period */
        log_warn("pool %s/%s: cannot write status.metrics: %s", a->f->pool_ns, a->f->pool_name,
                 p->err[0] ? p->err : "cancelled");
    }
    free(p);
}

static void on_status_tick(uv_timer_t *t)
{
    struct epp_app *a = t->data;
    double now[3];
    if (app_pool_averages(a, true, now) == 0 || a->status_in_flight) {
        return;
    }
    if (a->status_written && fabs(now[0] - a->status_last[0]) < MIN_CHANGE &&
        fabs(now[1] - a->status_last[1]) < MIN_CHANGE &&
        fabs(now[2] - a->status_last[2]) < MIN_CHANGE) {
        return;
    }
    struct status_patch *p = calloc(1, sizeof(*p));
    if (!p) {
        return;
    }
    p->a = a;
    p->work.data = p;
    snprintf(p->body, sizeof p->body,
             "{\"status\":{\"metrics\":{\"kvCacheUtilization\":%.4f,\"queueDepth\":%.4f,"
             "\"requestsRunning\":%.4f}}}",
             now[0], now[1], now[2]);
    if (uv_queue_work(&a->loop, &p->work, patch_work, patch_done) != 0) {
        free(p);
        return;
    }
    memcpy(a->status_last, now, sizeof now);
    a->status_written = true;
    a->status_in_flight = true;
}

void app_status_start(struct epp_app *a)
{
    if (a->static_mode || !a->kc || strcmp(a->f->pool_group, KUBE_POOL_DEFAULT_GROUP) != 0) {
        return; /* GIE's pools have no status.metrics */
    }
    uv_timer_init(&a->loop, &a->status_timer);
    a->status_timer.data = a;
    uv_timer_start(&a->status_timer, on_status_tick, 2000, STATUS_PERIOD_MS);
}
