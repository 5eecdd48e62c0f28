/*
 * The KV-event subscriber and the KV-block index (see app_internal.h), on when some scheduling
 * profile uses precise-prefix-cache-scorer: every endpoint that enters the pool is subscribed to
 * (its address is its id in the index), every one that leaves is purged. Also the router's view
 * of the index and the kv_cache_manager_* metrics.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"
#include "operator/epp/app_internal.h"
#include "operator/epp/kv/kvindex.h"
#include "operator/epp/kv/kvsub.h"
#include "operator/epp/sched/sched.h"

#define MAX_MATCH 4096

struct app_kv {
    struct kvidx *index;
    struct kvsub *sub;
    int port, replay_port;
    struct kvsub_pod_stats last; /* sums at the last tick, for the counters */
    struct metric *g_total, *g_unique, *g_pods, *g_synced;
    struct metric *c_stored, *c_removed, *c_cleared, *c_errors, *c_gaps, *c_replays;
};

static void kv_metrics(struct app_kv *kv, struct metrics_registry *reg)
{
    const char *type = "type";
    kv->g_total = app_gauge(reg, "kv_cache_manager_total_blocks", "(block, pod) entries indexed");
    kv->g_unique = app_gauge(reg, "kv_cache_manager_unique_blocks", "Distinct blocks indexed");
    kv->g_pods = app_gauge(reg, "kv_cache_manager_pods_tracked", "Pods with blocks in the index");
    kv->g_synced = app_gauge(reg, "tandem_epp_kv_streams_synced",
                             "Pods whose KV-event stream is joined and caught up");
    struct metric_family *f =
        metrics_counter_new(reg, "kv_cache_manager_events_received_total",
                            "KV events applied to the index, by type", 1, &type);
    if (f) {
        kv->c_stored = metrics_child(f, (const char *const[]){"BlockStored"});
        kv->c_removed = metrics_child(f, (const char *const[]){"BlockRemoved"});
        kv->c_cleared = metrics_child(f, (const char *const[]){"AllBlocksCleared"});
    }
    f = metrics_counter_new(reg, "tandem_epp_kv_stream_problems_total",
                            "KV-event stream problems, by kind", 1, (const char *const[]){"kind"});
    if (f) {
        kv->c_errors = metrics_child(f, (const char *const[]){"decode_error"});
        kv->c_gaps = metrics_child(f, (const char *const[]){"gap"});
        kv->c_replays = metrics_child(f, (const char *const[]){"replay_failure"});
    }
}

int app_kv_start(struct epp_app *a)
{
    const struct epp_sched_needs *need = epp_sched_needs(a->sched);
    char err[256] = "";
    if (!need->precise) {
        return 0;
    }
    struct app_kv *kv = calloc(1, sizeof(*kv));
    if (!kv) {
        return -1;
    }
    a->kv = kv;
    struct kvidx_tier_weight tiers[] = {{"gpu", need->gpu_weight}, {"cpu", need->cpu_weight}};
    struct kvidx_config ic = {
        .size = need->index_size > 0 ? (uint64_t)need->index_size : 0,
        .pod_cache_size = need->pod_cache_size > 0 ? (uint32_t)need->pod_cache_size : 0,
        .tiers = tiers,
        .n_tiers = 2,
    };
    kv->index = kvidx_new(&ic, err, sizeof err);
    if (!kv->index) {
        log_error("precise-prefix-cache-scorer: %s", err);
        return -1;
    }
    struct kvsub_config sc = {.index = kv->index, .topic_filter = need->topic_filter};
    kv->sub = kvsub_start(&sc, err, sizeof err);
    if (!kv->sub) {
        log_error("KV events: %s", err);
        return -1;
    }
    kv->port = a->f->kv_events_port;
    kv->replay_port = a->f->kv_replay_port ? a->f->kv_replay_port : -1;
    kv_metrics(kv, a->reg);
    log_info("precise prefix scoring: KV events from each pod's port %d (replay %d)", kv->port,
             a->f->kv_replay_port);
    return 0;
}

struct kvidx *app_kv_index(struct epp_app *a)
{
    return a->kv ? a->kv->index : NULL;
}

void app_kv_add(struct epp_app *a, const struct epp_endpoint *ep)
{
    if (!a->kv || !a->kv->sub || a->kv->port == 0) {
        return;
    }
    int rc = kvsub_add_pod(a->kv->sub, ep->addr, ep->ip, a->kv->port, a->kv->replay_port);
    if (rc != 0 && rc != -EEXIST) {
        log_warn("KV events of %s: cannot subscribe (%s)", ep->addr, strerror(-rc));
    }
}

void app_kv_remove(struct epp_app *a, const struct epp_endpoint *ep)
{
    if (a->kv && a->kv->sub) {
        kvsub_remove_pod(a->kv->sub, ep->addr); /* purges it from the index */
    } else if (a->kv && a->kv->index) {
        kvidx_purge_pod(a->kv->index, ep->addr);
    }
}

bool app_kv_synced(struct epp_app *a, char *why, size_t whylen)
{
    if (!a->kv || !a->kv->sub) {
        return true;
    }
    /* every endpoint's stream joined (or its join replay tried and failed: a publisher without
     * a replay socket is followed from its next batch) */
    for (size_t i = 0; i < epp_ds_count(a->ds); i++) {
        struct epp_endpoint *ep = epp_ds_at(a->ds, i);
        struct kvsub_pod_stats st;
        if (!ep->ready || kvsub_pod_stats(a->kv->sub, ep->addr, &st) != 0) {
            continue;
        }
        if (!st.synced && (st.replaying || st.replay_failures == 0)) {
            snprintf(why, whylen, "the KV events of %s are not synced yet", ep->addr);
            return false;
        }
    }
    return true;
}

static void inc_delta(struct metric *m, uint64_t now, uint64_t before)
{
    if (m && now > before) {
        metric_inc(m, (double)(now - before));
    }
}

void app_kv_tick(struct epp_app *a)
{
    struct app_kv *kv = a->kv;
    if (!kv || !kv->sub) {
        return;
    }
    struct kvidx_stats is;
    struct kvsub_pod_stats sum;
    size_t n_pods = 0, n_synced = 0;
    kvidx_stats(kv->index, &is);
    kvsub_stats(kv->sub, &sum, &n_pods, &n_synced);
    metric_set(kv->g_total, (double)is.entries);
    metric_set(kv->g_unique, (double)is.keys);
    metric_set(kv->g_pods, (double)is.pods);
    metric_set(kv->g_synced, (double)n_synced);
    /* sums drop when a pod leaves; counters only take what grew */
    inc_delta(kv->c_stored, sum.blocks_stored, kv->last.blocks_stored);
    inc_delta(kv->c_removed, sum.blocks_removed, kv->last.blocks_removed);
    inc_delta(kv->c_cleared, sum.clears, kv->last.clears);
    inc_delta(kv->c_errors, sum.decode_errors, kv->last.decode_errors);
    inc_delta(kv->c_gaps, sum.gaps, kv->last.gaps);
    inc_delta(kv->c_replays, sum.replay_failures, kv->last.replay_failures);
    kv->last = sum;
}

void app_kv_stop(struct epp_app *a)
{
    if (a->kv) {
        kvsub_stop(a->kv->sub);
        a->kv->sub = NULL;
    }
}

void app_kv_free(struct epp_app *a)
{
    if (a->kv) {
        kvsub_stop(a->kv->sub);
        kvidx_free(a->kv->index);
        free(a->kv);
        a->kv = NULL;
        a->router.index = NULL;
    }
}

/* ---- the router's view of the index ---- */

void router_index_match(struct epp_router *r, const uint64_t *keys, int32_t n_keys,
                        struct epp_endpoint **eps, int n, struct epp_prefix_match *pm)
{
    const char *pods[MAX_MATCH];
    if (!r->index || n > MAX_MATCH) {
        return;
    }
    for (int i = 0; i < n; i++) {
        pods[i] = eps[i]->addr;
    }
    kvidx_score(r->index, keys, (size_t)n_keys, pods, (size_t)n, pm);
}

void router_index_stats(struct epp_router *r, struct router_index_stats *out)
{
    struct kvidx_stats st = {0};
    if (r->index) {
        kvidx_stats(r->index, &st);
    }
    out->entries = st.entries;
    out->keys = st.keys;
    out->pods = st.pods;
}

uint64_t router_index_pod_blocks(struct epp_router *r, const char *addr)
{
    struct kvidx_pod_info info;
    return r->index && kvidx_pod(r->index, addr, &info) == 1 ? info.entries : 0;
}
