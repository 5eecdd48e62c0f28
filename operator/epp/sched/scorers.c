/*
 * Load and affinity scorers (GIE v1.5.0 and llm-d scorer math, reference §1.9 and §2.3). Every
 * score is in [0, 1]; the profile weighs and sums them.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "operator/epp/sched/plugins.h"

/* (max − v)/(max − min) over the candidates; all equal ⇒ 1. */
static void min_max_low_is_best(const double *v, int n, double *out)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
    }
    for (int i = 0; i < n; i++) {
        out[i] = hi == lo ? 1.0 : (hi - v[i]) / (hi - lo);
    }
}

static void queue_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    (void)p;
    for (int i = 0; i < n; i++) {
        out[i] = c->eps[cand[i]]->m.waiting;
    }
    min_max_low_is_best(out, n, out);
}

static void running_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    (void)p;
    for (int i = 0; i < n; i++) {
        out[i] = c->eps[cand[i]]->m.running;
    }
    min_max_low_is_best(out, n, out);
}

static void kv_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    (void)p;
    for (int i = 0; i < n; i++) {
        out[i] = fmin(1.0, fmax(0.0, 1.0 - c->eps[cand[i]]->m.kv_usage));
    }
}

const struct plugin_ops scorer_queue_ops = {
    .type = "queue-scorer", .kind = PK_SCORER, .score = queue_score};
const struct plugin_ops scorer_running_ops = {
    .type = "running-requests-size-scorer", .kind = PK_SCORER, .score = running_score};
const struct plugin_ops scorer_kv_ops = {
    .type = "kv-cache-utilization-scorer", .kind = PK_SCORER, .score = kv_score};

/* One number kept per plugin instance. */
struct num_param {
    double a, b;
    int64_t ms;
};

static int num_new(struct plugin *p, struct num_param **out)
{
    *out = calloc(1, sizeof(**out));
    p->state = *out;
    return *out ? 0 : -ENOMEM;
}

static void num_destroy(struct plugin *p)
{
    free(p->state);
}

/* load-aware-scorer: empty queue 0.5; else 0.5·(1 − min(q, threshold)/threshold). */
static int load_aware_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct num_param *np;
    int64_t thr;
    if (num_new(p, &np) != 0) {
        return -ENOMEM;
    }
    if (param_int(params, "threshold", 128, 1, INT32_MAX, &thr, err, errlen) != 0) {
        return -EINVAL;
    }
    np->a = (double)thr;
    return 0;
}

static void load_aware_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    double thr = ((struct num_param *)p->state)->a;
    for (int i = 0; i < n; i++) {
        double q = c->eps[cand[i]]->m.waiting;
        out[i] = q <= 0 ? 0.5 : 0.5 * (1.0 - fmin(q, thr) / thr);
    }
}

const struct plugin_ops scorer_load_aware_ops = {.type = "load-aware-scorer",
                                                 .kind = PK_SCORER,
                                                 .create = load_aware_create,
                                                 .destroy = num_destroy,
                                                 .score = load_aware_score};

/* active-request-scorer: (max − count)/max over the EPP's own in-flight requests, idle endpoints
 * (count ≤ idleThreshold) 1.0, busy ones scaled by maxBusyScore. requestTimeout (v0.3) is the
 * data layer's business: in-flight counts are exact here. */
static int active_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct num_param *np;
    int64_t idle;
    if (num_new(p, &np) != 0) {
        return -ENOMEM;
    }
    if (param_int(params, "idleThreshold", 0, 0, INT32_MAX, &idle, err, errlen) != 0 ||
        param_double(params, "maxBusyScore", 1.0, 0, 1, &np->b, err, errlen) != 0 ||
        param_duration(params, "requestTimeout", 120000, &np->ms, err, errlen) != 0) {
        return -EINVAL;
    }
    np->a = (double)idle;
    return 0;
}

static void active_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    const struct num_param *np = p->state;
    double max = 0;
    for (int i = 0; i < n; i++) {
        max = fmax(max, c->eps[cand[i]]->active_requests);
    }
    for (int i = 0; i < n; i++) {
        double cnt = c->eps[cand[i]]->active_requests;
        out[i] = cnt <= np->a || max <= 0 ? 1.0 : np->b * (max - cnt) / max;
    }
}

const struct plugin_ops scorer_active_request_ops = {.type = "active-request-scorer",
                                                     .kind = PK_SCORER,
                                                     .create = active_create,
                                                     .destroy = num_destroy,
                                                     .score = active_score};

/* token-load-scorer: 1 − min(1, in-flight tokens / queueThresholdTokens). */
static int token_load_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct num_param *np;
    int64_t thr;
    if (num_new(p, &np) != 0) {
        return -ENOMEM;
    }
    if (param_int(params, "queueThresholdTokens", 4194304, 1, INT64_MAX / 2, &thr, err, errlen) !=
        0) {
        return -EINVAL;
    }
    np->a = (double)thr;
    return 0;
}

static void token_load_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    double thr = ((struct num_param *)p->state)->a;
    for (int i = 0; i < n; i++) {
        out[i] = 1.0 - fmin(1.0, (double)c->eps[cand[i]]->active_tokens / thr);
    }
}

const struct plugin_ops scorer_token_load_ops = {.type = "token-load-scorer",
                                                 .kind = PK_SCORER,
                                                 .create = token_load_create,
                                                 .destroy = num_destroy,
                                                 .score = token_load_score};

/* lora-affinity-scorer: 1.0 adapter running, 0.8 a free slot, 0.6 adapter waiting, else 0. */
static bool in_csv(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *s = list; s && *s;) {
        const char *end = strchr(s, ',');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n == len && memcmp(s, name, len) == 0) {
            return true;
        }
        s = end ? end + 1 : NULL;
    }
    return false;
}

static int csv_count(const char *list)
{
    int n = list && *list ? 1 : 0;
    for (const char *s = list; s && *s; s++) {
        n += *s == ',';
    }
    return n;
}

static void lora_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    (void)p;
    const char *adapter = c->r->lora ? c->r->lora : c->r->model;
    for (int i = 0; i < n; i++) {
        const struct epp_metrics *m = &c->eps[cand[i]]->m;
        bool active = adapter && in_csv(m->running_loras, adapter);
        bool waiting = adapter && in_csv(m->waiting_loras, adapter);
        bool room = csv_count(m->running_loras) + csv_count(m->waiting_loras) < m->max_lora;
        out[i] = active ? 1.0 : room ? 0.8 : waiting ? 0.6 : 0.0;
    }
}

const struct plugin_ops scorer_lora_ops = {
    .type = "lora-affinity-scorer", .kind = PK_SCORER, .score = lora_score};

int epp_session_token(const struct epp_endpoint *ep, char *out, size_t outlen)
{
    char nn[EPP_SESSION_TOKEN_MAX];
    int len = snprintf(nn, sizeof(nn), "%s/%s", ep->ns ? ep->ns : "", ep->name ? ep->name : "");
    if (len < 0 || (size_t)len >= sizeof(nn) || outlen < 4 * (((size_t)len + 2) / 3) + 1) {
        return -ENOSPC;
    }
    return EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)nn, len);
}

/* session-affinity-scorer: the endpoint the request's x-session-token names scores 1. */
static void session_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    (void)p;
    const char *tok = c->r->session_token;
    char mine[EPP_SESSION_TOKEN_MAX];
    for (int i = 0; i < n; i++) {
        int len = tok ? epp_session_token(c->eps[cand[i]], mine, sizeof(mine)) : -1;
        out[i] = len > 0 && strcmp(mine, tok) == 0 ? 1.0 : 0.0;
    }
}

const struct plugin_ops scorer_session_ops = {
    .type = "session-affinity-scorer", .kind = PK_SCORER, .score = session_score};
