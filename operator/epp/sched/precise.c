/*
 * precise-prefix-cache-scorer: llm-d's scorer backed by the KV-block index (llm-d-kv-cache). The
 * index lookup is the data producers' job (epp_prefix_match.precise_score, tier-weighted longest
 * run); here the scores are normalised as llm-d does: over the endpoints with a hit, min-max
 * (all equal ⇒ 1), endpoints without a hit 0. The parameters of both eras are read so the
 * integrator can build the index and the event subscriber from them (epp_sched_needs).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "operator/epp/sched/plugins.h"

struct precise {
    struct epp_sched_needs v;
    char *seed_text, *zmq, *topic;
};

/* A section at the top level (HEAD) or inside indexerConfig / kvCacheIndexerConfig (v0.3). */
static struct json_object *section(struct json_object *params, const char *name)
{
    static const char *const parents[] = {"indexerConfig", "kvCacheIndexerConfig"};
    struct json_object *o = json_get(params, name);
    for (size_t i = 0; !o && i < 2; i++) {
        o = json_get(json_get(params, parents[i]), name);
    }
    return o;
}

static int check_object(struct json_object *o, const char *name, char *err, size_t errlen)
{
    if (o && !json_object_is_type(o, json_type_object)) {
        snprintf(err, errlen, "parameters.%s: expected an object", name);
        return -EINVAL;
    }
    return 0;
}

static int read_seed(struct precise *pr, struct json_object *tp, char *err, size_t errlen)
{
    struct json_object *seed = json_get(tp, "hashSeed");
    char text[32];
    const char *s = "";
    if (seed && json_object_is_type(seed, json_type_string)) {
        s = json_object_get_string(seed);
    } else if (seed && json_object_is_type(seed, json_type_int)) {
        snprintf(text, sizeof(text), "%" PRId64, json_object_get_int64(seed));
        s = text;
    } else if (seed) {
        snprintf(err, errlen, "parameters.tokenProcessorConfig.hashSeed: expected a string");
        return -EINVAL;
    }
    pr->v.hash_seed = strtoull(s, NULL, 10);
    pr->seed_text = strdup(s);
    return pr->seed_text ? 0 : -ENOMEM;
}

static int read_tiers(struct precise *pr, struct json_object *params, char *err, size_t errlen)
{
    struct json_object *tiers = section(params, "kvCacheBackendConfigs");
    pr->v.gpu_weight = 1.0;
    pr->v.cpu_weight = 0.8;
    if (!tiers) {
        return 0;
    }
    if (!json_object_is_type(tiers, json_type_array)) {
        snprintf(err, errlen, "parameters.kvCacheBackendConfigs: expected a list");
        return -EINVAL;
    }
    for (size_t i = 0; i < json_object_array_length(tiers); i++) {
        struct json_object *t = json_object_array_get_idx(tiers, i);
        const char *name = NULL;
        double w = 0;
        char e[160];
        if (json_get_string(t, "name", &name, e, sizeof(e)) != 0 ||
            param_double(t, "weight", 1.0, 0, 1e6, &w, e, sizeof(e)) != 0) {
            snprintf(err, errlen, "parameters.kvCacheBackendConfigs[%zu]: %s", i, e);
            return -EINVAL;
        }
        if (strcasecmp(name, "gpu") == 0) {
            pr->v.gpu_weight = w;
        } else if (strcasecmp(name, "cpu") == 0) {
            pr->v.cpu_weight = w;
        }
    }
    return 0;
}

static int read_events(struct precise *pr, struct json_object *ev, char *err, size_t errlen)
{
    const char *zmq = NULL, *topic = NULL;
    int64_t conc = 0, port = 0;
    if (check_object(ev, "kvEventsConfig", err, errlen) != 0 ||
        check_object(json_get(ev, "podDiscoveryConfig"), "kvEventsConfig.podDiscoveryConfig", err,
                     errlen) != 0 ||
        param_string(ev, "zmqEndpoint", "tcp://*:5557", &zmq, err, errlen) != 0 ||
        param_string(ev, "topicFilter", "kv@", &topic, err, errlen) != 0 ||
        param_int(ev, "concurrency", 4, 1, 1024, &conc, err, errlen) != 0 ||
        param_bool(ev, "discoverPods", false, &pr->v.discover_pods, err, errlen) != 0 ||
        param_int(ev, "podDiscoveryConfig.socketPort", 5556, 1, 65535, &port, err, errlen) != 0) {
        return -EINVAL;
    }
    pr->v.concurrency = (int32_t)conc;
    pr->v.socket_port = (int32_t)port;
    pr->zmq = strdup(zmq);
    pr->topic = strdup(topic);
    return pr->zmq && pr->topic ? 0 : -ENOMEM;
}

static int precise_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct precise *pr = calloc(1, sizeof(*pr));
    struct json_object *tp = section(params, "tokenProcessorConfig");
    struct json_object *mem = json_get(section(params, "kvBlockIndexConfig"), "inMemoryConfig");
    int64_t bs = 0, size = 0, pcs = 0;
    if (!pr) {
        return -ENOMEM;
    }
    p->state = pr;
    if (check_object(tp, "tokenProcessorConfig", err, errlen) != 0 ||
        param_int(tp, "blockSize", 16, 1, 1 << 16, &bs, err, errlen) != 0 ||
        read_seed(pr, tp, err, errlen) != 0 ||
        check_object(mem, "kvBlockIndexConfig.inMemoryConfig", err, errlen) != 0 ||
        param_int(mem, "size", 100000000, 1, INT64_MAX / 2, &size, err, errlen) != 0 ||
        param_int(mem, "podCacheSize", 10, 1, 1 << 20, &pcs, err, errlen) != 0 ||
        read_tiers(pr, params, err, errlen) != 0 ||
        read_events(pr, json_get(params, "kvEventsConfig"), err, errlen) != 0 ||
        param_bool(params, "speculativeIndexing", false, &pr->v.speculative, err, errlen) != 0 ||
        param_duration(params, "speculativeTTL", 2000, &pr->v.speculative_ttl_ms, err, errlen) !=
            0) {
        return -EINVAL;
    }
    pr->v.block_size = (int32_t)bs;
    pr->v.index_size = size;
    pr->v.pod_cache_size = (int32_t)pcs;
    return 0;
}

static void precise_destroy(struct plugin *p)
{
    struct precise *pr = p->state;
    if (pr) {
        free(pr->seed_text);
        free(pr->zmq);
        free(pr->topic);
        free(pr);
    }
}

void precise_fill_needs(const struct plugin *p, struct epp_sched_needs *needs)
{
    const struct precise *pr = p->state;
    bool approx = needs->approximate, session = needs->session_affinity, pd = needs->pd;
    *needs = pr->v;
    needs->precise = true;
    needs->hash_seed_text = pr->seed_text;
    needs->zmq_endpoint = pr->zmq;
    needs->topic_filter = pr->topic;
    needs->approximate = approx;
    needs->session_affinity = session;
    needs->pd = pd;
}

static void precise_score(struct plugin *p, struct cycle *c, const int *cand, int n, double *out)
{
    (void)p;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; c->pm && i < n; i++) {
        double v = c->pm[cand[i]].precise_score;
        if (v > 0) {
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
    }
    for (int i = 0; i < n; i++) {
        double v = c->pm ? c->pm[cand[i]].precise_score : 0;
        out[i] = v <= 0 ? 0.0 : hi == lo ? 1.0 : (v - lo) / (hi - lo);
    }
}

const struct plugin_ops scorer_precise_ops = {.type = "precise-prefix-cache-scorer",
                                              .kind = PK_SCORER,
                                              .create = precise_create,
                                              .destroy = precise_destroy,
                                              .score = precise_score};
