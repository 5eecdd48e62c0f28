/*
 * The framework: runs a profile (filters → weighted scorers → picker) over the endpoints that may
 * take the request, lets the profile handler assemble the result, and keeps the scheduler's
 * metrics (GIE's inference_extension_* and llm-d's P/D decision counter).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "operator/epp/sched/plugins.h"

/* GIE's scheduler latency buckets (seconds). */
static const double duration_buckets[] = {0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01,
                                          0.02,   0.05,   0.1,    0.2,   0.5,   1.0};
#define N_BUCKETS (sizeof(duration_buckets) / sizeof(duration_buckets[0]))

static void register_metrics(struct epp_sched *s, struct metrics_registry *reg)
{
    static const char *const plugin_labels[] = {"extension_point", "plugin_type", "plugin_name"};
    static const char *const status_label[] = {"status"};
    static const char *const decision_label[] = {"decision_type"};
    s->f_plugin = metrics_histogram_new(reg, "inference_extension_plugin_duration_seconds",
                                        "Plugin processing latency distribution in seconds.", 3,
                                        plugin_labels, duration_buckets, N_BUCKETS);
    s->f_e2e = metrics_histogram_new(reg, "inference_extension_scheduler_e2e_duration_seconds",
                                     "End-to-end scheduling latency distribution in seconds.", 0,
                                     NULL, duration_buckets, N_BUCKETS);
    s->f_attempts = metrics_counter_new(reg, "inference_extension_scheduler_attempts_total",
                                        "Total number of scheduling attempts.", 1, status_label);
    s->f_pd =
        metrics_counter_new(reg, "llm_d_inference_scheduler_pd_decision_total",
                            "Total number of P/D disaggregation decisions.", 1, decision_label);
}

static void bind_series(struct epp_sched *s)
{
    const char *ok[] = {"success"}, *bad[] = {"failure"};
    const char *dec[] = {"decode-only"}, *pd[] = {"prefill-decode"};
    s->m_e2e = s->f_e2e ? metrics_child(s->f_e2e, NULL) : NULL;
    s->m_ok = s->f_attempts ? metrics_child(s->f_attempts, ok) : NULL;
    s->m_fail = s->f_attempts ? metrics_child(s->f_attempts, bad) : NULL;
    s->m_decode_only = s->f_pd ? metrics_child(s->f_pd, dec) : NULL;
    s->m_pd = s->f_pd ? metrics_child(s->f_pd, pd) : NULL;
}

static struct epp_sched *sched_create(const struct epp_sched *prev, struct metrics_registry *reg,
                                      const char *yaml, size_t len, char *err, size_t errlen)
{
    struct epp_sched *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (prev) {
        s->f_plugin = prev->f_plugin;
        s->f_e2e = prev->f_e2e;
        s->f_attempts = prev->f_attempts;
        s->f_pd = prev->f_pd;
    } else if (reg) {
        register_metrics(s, reg);
    }
    bind_series(s);
    epp_sched_seed(s, (uint64_t)tandem_now_ns() ^ (uint64_t)(uintptr_t)s);
    if (err && errlen) {
        *err = '\0';
    }
    if (sched_load_text(s, yaml, len, err, errlen) != 0) {
        epp_sched_free(s);
        return NULL;
    }
    return s;
}

struct epp_sched *epp_sched_new(const char *yaml, size_t len, struct metrics_registry *reg,
                                char *err, size_t errlen)
{
    return sched_create(NULL, reg, yaml, len, err, errlen);
}

struct epp_sched *epp_sched_new_like(const struct epp_sched *prev, const char *yaml, size_t len,
                                     char *err, size_t errlen)
{
    return sched_create(prev, NULL, yaml, len, err, errlen);
}

void epp_sched_free(struct epp_sched *s)
{
    if (s) {
        sched_unload(s);
        free(s);
    }
}

void epp_sched_seed(struct epp_sched *s, uint64_t seed)
{
    s->rng = seed;
}

/* splitmix64: small, fast and seedable; nothing here needs cryptographic randomness. */
uint64_t sched_rand(struct epp_sched *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sched_rand01(struct epp_sched *s)
{
    return (double)(sched_rand(s) >> 11) * 0x1.0p-53;
}

struct profile *sched_profile(struct epp_sched *s, const char *name)
{
    for (int i = 0; name && i < s->n_profiles; i++) {
        if (strcmp(s->profiles[i].name, name) == 0) {
            return &s->profiles[i];
        }
    }
    return NULL;
}

static void observe_since(struct metric *m, int64_t t0)
{
    if (m) {
        metric_observe(m, (double)(tandem_now_ns() - t0) / 1e9);
    }
}

static bool in_subset(const struct epp_request *r, const struct epp_endpoint *ep)
{
    for (int i = 0; i < r->n_subset; i++) {
        if (r->subset[i] && strcmp(r->subset[i], ep->addr) == 0) {
            return true;
        }
    }
    return r->n_subset <= 0;
}

static int eligible(const struct cycle *c, int *cand)
{
    int k = 0;
    for (int i = 0; i < c->n; i++) {
        const struct epp_endpoint *ep = c->eps[i];
        if (ep->ready && ep->ejected_until_ms <= c->now_ms && in_subset(c->r, ep)) {
            cand[k++] = i;
        }
    }
    return k;
}

static void add_scores(struct cycle *c, const struct profile *pr, const int *cand, int n,
                       double *score, double *tmp)
{
    memset(score, 0, (size_t)n * sizeof(*score));
    for (int j = 0; j < pr->n_scorers; j++) {
        struct plugin *p = pr->scorers[j].p;
        int64_t t0 = tandem_now_ns();
        p->ops->score(p, c, cand, n, tmp);
        observe_since(p->duration, t0);
        for (int i = 0; i < n; i++) {
            score[i] += pr->scorers[j].weight * tmp[i];
        }
    }
}

static int run_filters(struct cycle *c, const struct profile *pr, int *cand, int n)
{
    for (int j = 0; j < pr->n_filters && n > 0; j++) {
        struct plugin *p = pr->filters[j];
        int64_t t0 = tandem_now_ns();
        n = p->ops->filter(p, c, cand, n);
        observe_since(p->duration, t0);
    }
    return n;
}

int sched_run_profile(struct cycle *c, struct profile *pr, struct epp_profile_result *res)
{
    size_t sz = c->n > 0 ? (size_t)c->n : 1;
    int *cand = malloc(sz * sizeof(*cand));
    double *score = malloc(sz * sizeof(*score)), *tmp = malloc(sz * sizeof(*tmp));
    memset(res, 0, sizeof(*res));
    res->profile = pr->name;
    res->status = 503;
    int n = cand && score && tmp ? eligible(c, cand) : 0;
    n = run_filters(c, pr, cand, n);
    if (n > 0) {
        add_scores(c, pr, cand, n, score, tmp);
        int64_t t0 = tandem_now_ns();
        res->n_picked = pr->picker->ops->pick(pr->picker, c, cand, score, n);
        observe_since(pr->picker->duration, t0);
        res->n_targets = n < EPP_SCHED_MAX_TARGETS ? n : EPP_SCHED_MAX_TARGETS;
        memcpy(res->targets, cand, (size_t)res->n_targets * sizeof(*cand));
        res->status = 0;
    }
    free(cand);
    free(score);
    free(tmp);
    return res->status == 0 ? 0 : -1;
}

int64_t sched_uncached_tokens(struct cycle *c, int i, struct plugin *prefix)
{
    const struct epp_request *r = c->r;
    int64_t prompt = r->prompt_tokens > 0 ? r->prompt_tokens : (int64_t)(r->prefix_len / 4);
    int64_t cached = 0;
    if (r->n_block_keys > 0 && c->pm) {
        int32_t bs = r->block_size > 0 ? r->block_size : c->s->needs.block_size;
        cached = (int64_t)c->pm[i].precise_blocks * bs;
    } else if ((prefix = prefix ? prefix : c->s->approx)) {
        int32_t total = 0, bt = 0;
        cached = (int64_t)prefix_matched_blocks(prefix, c, i, &total, &bt) * bt;
    }
    return prompt > cached ? prompt - cached : 0;
}

void sched_count_pd(struct epp_sched *s, bool disaggregated)
{
    struct metric *m = disaggregated ? s->m_pd : s->m_decode_only;
    if (m) {
        metric_inc(m, 1);
    }
}

static const struct epp_profile_result *profile_result(const struct epp_sched_result *out,
                                                       const char *name)
{
    for (int i = 0; i < out->n_profiles; i++) {
        if (out->profiles[i].profile == name) {
            return &out->profiles[i];
        }
    }
    return NULL;
}

/* The primary targets and the primary's prefix hit. */
static void finish(struct cycle *c, struct epp_sched_result *out)
{
    const struct epp_profile_result *res = profile_result(out, out->primary_profile);
    for (int i = 0; i < res->n_targets; i++) {
        out->targets[i] = c->eps[res->targets[i]];
    }
    out->n_targets = res->n_targets;
    out->n_picked = res->n_picked;
    int p = res->targets[0];
    if (c->r->n_block_keys > 0 && c->pm) {
        out->hit_blocks = c->pm[p].precise_blocks;
        out->total_blocks = c->r->n_block_keys;
    } else if (c->s->approx) {
        int32_t bt = 0;
        out->hit_blocks = prefix_matched_blocks(c->s->approx, c, p, &out->total_blocks, &bt);
    }
    out->hit_ratio = out->total_blocks > 0 ? (double)out->hit_blocks / out->total_blocks : 0.0;
}

int epp_schedule(struct epp_sched *s, const struct epp_request *r, struct epp_endpoint *const *eps,
                 const struct epp_prefix_match *pm, int n, struct epp_sched_result *out)
{
    int64_t t0 = tandem_now_ns();
    struct cycle c = {s, r, eps, pm, n > 0 ? n : 0, ++s->seq, tandem_now_ms()};
    memset(out, 0, sizeof(*out));
    out->uncached_tokens = -1;
    s->handler->ops->run(s->handler, &c, out);
    observe_since(s->handler->duration, t0);
    if (out->status == 0) {
        finish(&c, out);
    }
    observe_since(s->m_e2e, t0);
    struct metric *m = out->status == 0 ? s->m_ok : s->m_fail;
    if (m) {
        metric_inc(m, 1);
    }
    return out->status;
}

void epp_sched_pre_request(struct epp_sched *s, const struct epp_request *r,
                           const struct epp_sched_result *res)
{
    if (res->status != 0 || res->n_targets == 0) {
        return;
    }
    for (int i = 0; i < s->n_plugins; i++) {
        struct plugin *p = s->plugins[i];
        if (p->ops->pre_request) {
            p->ops->pre_request(p, r, res->targets[0]);
            if (res->prefill && res->prefill != res->targets[0]) {
                p->ops->pre_request(p, r, res->prefill);
            }
        }
    }
}

void epp_sched_endpoint_removed(struct epp_sched *s, const struct epp_endpoint *ep)
{
    for (int i = 0; i < s->n_plugins; i++) {
        if (s->plugins[i]->ops->removed) {
            s->plugins[i]->ops->removed(s->plugins[i], ep);
        }
    }
}

bool epp_sched_saturated(const struct epp_sched *s, struct epp_endpoint *const *eps, int n,
                         int64_t now_ms)
{
    for (int i = 0; i < n; i++) {
        const struct epp_endpoint *ep = eps[i];
        if (!ep->ready || ep->stale || !ep->m.valid ||
            now_ms - ep->m.updated_ms > s->sat.stale_ms) {
            continue;
        }
        if (ep->m.waiting <= s->sat.queue_depth && ep->m.kv_usage <= s->sat.kv_util) {
            return false;
        }
    }
    return true;
}

const struct epp_sched_needs *epp_sched_needs(const struct epp_sched *s)
{
    return &s->needs;
}
