/*
 * Inside the scheduling framework: the plugin table, profiles and the per-call cycle the plugins
 * see. Only the files of operator/epp/sched include this.
 */
#ifndef TANDEM_OPERATOR_EPP_SCHED_INTERNAL_H
#define TANDEM_OPERATOR_EPP_SCHED_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "lib/metrics.h"
#include "operator/epp/sched/sched.h"

enum plugin_kind {
    PK_FILTER = 1,
    PK_SCORER = 2,
    PK_PICKER = 4,
    PK_HANDLER = 8,
    PK_DECIDER = 16,
    PK_PREREQ = 32,     /* header writers: the gateway acts on the result */
    PK_SATURATION = 64, /* saturation detectors */
    PK_OTHER = 128,     /* data layer, parsers, flow control: configured here, run elsewhere */
};

struct plugin;

/* One scheduling call: the request, the endpoints and what the producers found. */
struct cycle {
    struct epp_sched *s;
    const struct epp_request *r;
    struct epp_endpoint *const *eps;
    const struct epp_prefix_match *pm; /* may be NULL */
    int n;
    uint64_t seq;   /* tells a plugin's per-call cache from a stale one */
    int64_t now_ms; /* tandem_now_ms() at the start of the call */
};

struct plugin_ops {
    const char *type;
    unsigned kind;
    /* Reads parameters (may be NULL); err names the parameter. 0 or -EINVAL/-ENOMEM. */
    int (*create)(struct plugin *p, struct json_object *params, char *err, size_t errlen);
    void (*destroy)(struct plugin *p);
    /* Compacts cand (indexes into c->eps) to the endpoints that pass; returns how many. */
    int (*filter)(struct plugin *p, struct cycle *c, int *cand, int n);
    /* out[i] in [0, 1] for cand[i]. */
    void (*score)(struct plugin *p, struct cycle *c, const int *cand, int n, double *out);
    /* Reorders cand best first by score (parallel); returns how many are picked. */
    int (*pick)(struct plugin *p, struct cycle *c, int *cand, double *score, int n);
    /* Profile handlers: runs the profiles into out. */
    void (*run)(struct plugin *p, struct cycle *c, struct epp_sched_result *out);
    /* Deciders: whether to disaggregate given the uncached prompt tokens. */
    bool (*decide)(struct plugin *p, const struct cycle *c, int64_t uncached);
    /* Handler load-time check of the profiles it names. */
    int (*check)(struct plugin *p, char *err, size_t errlen);
    void (*pre_request)(struct plugin *p, const struct epp_request *r,
                        const struct epp_endpoint *ep);
    void (*removed)(struct plugin *p, const struct epp_endpoint *ep);
};

struct plugin {
    char *name;
    const struct plugin_ops *ops;
    void *state;
    struct epp_sched *s;
    struct metric *duration; /* plugin_duration_seconds for its extension point */
};

struct profile_scorer {
    struct plugin *p;
    double weight;
};

struct profile {
    char *name;
    int n_filters, n_scorers;
    struct plugin **filters;
    struct profile_scorer *scorers;
    struct plugin *picker;
};

struct saturation {
    double queue_depth; /* queueDepthThreshold */
    double kv_util;     /* kvCacheUtilThreshold */
    int64_t stale_ms;   /* metricsStalenessThreshold */
};

struct epp_sched {
    int n_plugins, n_profiles;
    struct plugin **plugins;
    struct profile *profiles;
    struct plugin *handler;
    struct plugin *approx; /* the first prefix-cache-scorer, for estimates without block keys */
    struct saturation sat;
    struct epp_sched_needs needs;
    uint64_t rng;
    uint64_t seq;
    struct metric_family *f_plugin, *f_e2e, *f_attempts, *f_pd;
    struct metric *m_e2e, *m_ok, *m_fail, *m_decode_only, *m_pd;
};

/* The plugin table (plugins.c). */
const struct plugin_ops *sched_plugin_ops(const char *type);
/* An llm-d type this scheduler knows of but does not implement. */
bool sched_plugin_unsupported(const char *type);

/* Parameter readers: err reads "parameters.<key>: ...". 0 or -EINVAL. */
int param_int(struct json_object *params, const char *key, int64_t def, int64_t min, int64_t max,
              int64_t *out, char *err, size_t errlen);
int param_double(struct json_object *params, const char *key, double def, double min, double max,
                 double *out, char *err, size_t errlen);
int param_bool(struct json_object *params, const char *key, bool def, bool *out, char *err,
               size_t errlen);
int param_string(struct json_object *params, const char *key, const char *def, const char **out,
                 char *err, size_t errlen);
/* A Go duration ("200ms", "1m30s") or a number of seconds, as ms. */
int param_duration(struct json_object *params, const char *key, int64_t def_ms, int64_t *out,
                   char *err, size_t errlen);

/* The loader (config.c): NULL text loads GIE's default config. */
int sched_load_text(struct epp_sched *s, const char *text, size_t len, char *err, size_t errlen);
void sched_unload(struct epp_sched *s);

/* Profiles and the framework (sched.c). */
struct profile *sched_profile(struct epp_sched *s, const char *name);
int sched_run_profile(struct cycle *c, struct profile *pr, struct epp_profile_result *res);
uint64_t sched_rand(struct epp_sched *s);
double sched_rand01(struct epp_sched *s);
void sched_shuffle(struct epp_sched *s, int *cand, int n);
/* Uncached prompt tokens of the request on endpoint i: precise match when the request has block
 * keys, else the approximate one of prefix (or s->approx when NULL). */
int64_t sched_uncached_tokens(struct cycle *c, int i, struct plugin *prefix);
/* Records a P/D decision in the metrics. */
void sched_count_pd(struct epp_sched *s, bool disaggregated);

/* The approximate prefix scorer's match for endpoint i in this cycle (prefix.c). */
int32_t prefix_matched_blocks(struct plugin *p, struct cycle *c, int i, int32_t *total,
                              int32_t *block_tokens);
bool prefix_is_approx(const struct plugin *p);

/* The precise scorer's parameters (precise.c). */
void precise_fill_needs(const struct plugin *p, struct epp_sched_needs *needs);

#endif /* TANDEM_OPERATOR_EPP_SCHED_INTERNAL_H */
