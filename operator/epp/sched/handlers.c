/*
 * Profile handlers (which profiles run, and what the result is), P/D deciders, the header-writing
 * pre-request plugins and the saturation detector.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "operator/epp/sched/plugins.h"

/* single-profile-handler: the one profile is the result. */
static void single_run(struct plugin *p, struct cycle *c, struct epp_sched_result *out)
{
    (void)p;
    struct profile *pr = &c->s->profiles[0];
    struct epp_profile_result *res = &out->profiles[out->n_profiles++];
    out->primary_profile = pr->name;
    if (sched_run_profile(c, pr, res) != 0) {
        out->status = 503;
        snprintf(out->reason, sizeof(out->reason), "no endpoint passed the filters of profile %s",
                 pr->name);
    }
}

static int single_check(struct plugin *p, char *err, size_t errlen)
{
    if (p->s->n_profiles != 1) {
        snprintf(err, errlen, "%s needs exactly one scheduling profile, the config has %d",
                 p->ops->type, p->s->n_profiles);
        return -EINVAL;
    }
    return 0;
}

const struct plugin_ops handler_single_ops = {
    .type = "single-profile-handler", .kind = PK_HANDLER, .run = single_run, .check = single_check};

/* The decode-first P/D handlers: pd-profile-handler (v0.3, a threshold) and
 * disagg-profile-handler (HEAD, a decider plugin). */
struct pd {
    int64_t threshold;
    int64_t hash_block_size; /* v0.3; the prefix plugin's own block size is what counts here */
    int64_t primary_port;
    const char *decode, *prefill, *encode, *prefix_name, *decider_name;
    struct plugin *prefix, *decider;
    struct json_object *params; /* keeps the strings above */
};

static int pd_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct pd *pd = calloc(1, sizeof(*pd));
    if (!pd) {
        return -ENOMEM;
    }
    p->state = pd;
    pd->params = json_object_get(params);
    if (param_int(params, "threshold", 0, 0, INT32_MAX, &pd->threshold, err, errlen) != 0 ||
        param_int(params, "hashBlockSize", 64, 1, 1 << 20, &pd->hash_block_size, err, errlen) !=
            0 ||
        param_int(params, "primaryPort", 0, 0, 65535, &pd->primary_port, err, errlen) != 0 ||
        param_string(params, "decodeProfile", "decode", &pd->decode, err, errlen) != 0 ||
        param_string(params, "prefillProfile", "prefill", &pd->prefill, err, errlen) != 0 ||
        param_string(params, "prefixPluginName", "prefix-cache-scorer", &pd->prefix_name, err,
                     errlen) != 0 ||
        param_string(params, "deciderPluginName", NULL, &pd->decider_name, err, errlen) != 0) {
        return -EINVAL;
    }
    return 0;
}

static int disagg_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct pd *pd = calloc(1, sizeof(*pd));
    if (!pd) {
        return -ENOMEM;
    }
    p->state = pd;
    pd->params = json_object_get(params);
    pd->prefix_name = "prefix-cache-scorer";
    if (param_string(params, "profiles.decode", "decode", &pd->decode, err, errlen) != 0 ||
        param_string(params, "profiles.prefill", "prefill", &pd->prefill, err, errlen) != 0 ||
        param_string(params, "profiles.encode", NULL, &pd->encode, err, errlen) != 0 ||
        param_string(params, "deciders.prefill", NULL, &pd->decider_name, err, errlen) != 0) {
        return -EINVAL;
    }
    return 0;
}

static void pd_destroy(struct plugin *p)
{
    struct pd *pd = p->state;
    if (pd) {
        json_object_put(pd->params);
        free(pd);
    }
}

static struct plugin *plugin_named(struct epp_sched *s, const char *name)
{
    for (int i = 0; name && i < s->n_plugins; i++) {
        if (strcmp(s->plugins[i]->name, name) == 0) {
            return s->plugins[i];
        }
    }
    return NULL;
}

static int pd_check(struct plugin *p, char *err, size_t errlen)
{
    struct pd *pd = p->state;
    const char *need[] = {pd->decode, pd->prefill, pd->encode};
    for (size_t i = 0; i < 3; i++) {
        if (need[i] && !sched_profile(p->s, need[i])) {
            snprintf(err, errlen, "%s profile \"%s\" is not in schedulingProfiles",
                     i == 0   ? "decode"
                     : i == 1 ? "prefill"
                              : "encode",
                     need[i]);
            return -EINVAL;
        }
    }
    /* The generated configs name prefix-cache-scorer even when its weight left it out: then the
     * estimate uses the precise match only (or none). */
    pd->prefix = plugin_named(p->s, pd->prefix_name);
    if (pd->prefix && !prefix_is_approx(pd->prefix)) {
        pd->prefix = NULL;
    }
    if (pd->decider_name) {
        pd->decider = plugin_named(p->s, pd->decider_name);
        if (!pd->decider || !(pd->decider->ops->kind & PK_DECIDER)) {
            snprintf(err, errlen, "decider \"%s\" is not a P/D decider plugin", pd->decider_name);
            return -EINVAL;
        }
    }
    return 0;
}

static bool pd_wants_prefill(const struct plugin *p, struct cycle *c, int64_t uncached)
{
    const struct pd *pd = p->state;
    if (pd->decider) {
        return pd->decider->ops->decide(pd->decider, c, uncached);
    }
    if (p->ops == &handler_disagg_ops) {
        return false; /* no prefill decider configured: never disaggregate */
    }
    return pd->threshold == 0 || uncached >= pd->threshold;
}

static void pd_run(struct plugin *p, struct cycle *c, struct epp_sched_result *out)
{
    struct pd *pd = p->state;
    struct profile *dec = sched_profile(c->s, pd->decode);
    struct epp_profile_result *res = &out->profiles[out->n_profiles++];
    out->primary_profile = dec->name;
    if (sched_run_profile(c, dec, res) != 0) {
        out->status = 503;
        snprintf(out->reason, sizeof(out->reason), "failed to find available decode workers");
        return;
    }
    out->uncached_tokens = sched_uncached_tokens(c, res->targets[0], pd->prefix);
    if (pd_wants_prefill(p, c, out->uncached_tokens)) {
        struct epp_profile_result *pres = &out->profiles[out->n_profiles++];
        if (sched_run_profile(c, sched_profile(c->s, pd->prefill), pres) == 0) {
            out->prefill = c->eps[pres->targets[0]];
            out->disaggregated = true;
        }
    }
    sched_count_pd(c->s, out->disaggregated);
}

const struct plugin_ops handler_pd_ops = {.type = "pd-profile-handler",
                                          .kind = PK_HANDLER,
                                          .create = pd_create,
                                          .destroy = pd_destroy,
                                          .run = pd_run,
                                          .check = pd_check};
const struct plugin_ops handler_disagg_ops = {.type = "disagg-profile-handler",
                                              .kind = PK_HANDLER,
                                              .create = disagg_create,
                                              .destroy = pd_destroy,
                                              .run = pd_run,
                                              .check = pd_check};

/* prefix-based-pd-decider: disaggregate iff uncached tokens ≥ nonCachedTokens (0: never). */
static int decider_prefix_create(struct plugin *p, struct json_object *params, char *err,
                                 size_t errlen)
{
    int64_t *n = malloc(sizeof(*n));
    p->state = n;
    if (!n) {
        return -ENOMEM;
    }
    return param_int(params, "nonCachedTokens", 0, 0, INT32_MAX, n, err, errlen);
}

static void free_state(struct plugin *p)
{
    free(p->state);
}

static bool decider_prefix_decide(struct plugin *p, const struct cycle *c, int64_t uncached)
{
    (void)c;
    int64_t n = *(int64_t *)p->state;
    return n > 0 && uncached >= n;
}

static bool decider_always_decide(struct plugin *p, const struct cycle *c, int64_t uncached)
{
    (void)p;
    (void)c;
    (void)uncached;
    return true;
}

const struct plugin_ops decider_prefix_ops = {.type = "prefix-based-pd-decider",
                                              .kind = PK_DECIDER,
                                              .create = decider_prefix_create,
                                              .destroy = free_state,
                                              .decide = decider_prefix_decide};
const struct plugin_ops decider_always_ops = {
    .type = "always-disagg-pd-decider", .kind = PK_DECIDER, .decide = decider_always_decide};

/* The header writers: the gateway sets x-prefiller-host-port from epp_sched_result.prefill (and
 * clears a client's value), so loading them only checks their parameters. */
static int prereq_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    const char *prof = NULL;
    (void)p;
    return param_string(params, "prefillProfile", "prefill", &prof, err, errlen);
}

const struct plugin_ops prereq_prefill_header_ops = {
    .type = "prefill-header-handler", .kind = PK_PREREQ, .create = prereq_create};
const struct plugin_ops prereq_disagg_headers_ops = {
    .type = "disagg-headers-handler", .kind = PK_PREREQ, .create = prereq_create};

int saturation_params(struct json_object *params, struct saturation *sat, char *err, size_t errlen)
{
    int64_t qd = 0;
    if (param_int(params, "queueDepthThreshold", 5, 0, INT32_MAX, &qd, err, errlen) != 0 ||
        param_double(params, "kvCacheUtilThreshold", 0.8, 0, 1, &sat->kv_util, err, errlen) != 0 ||
        param_duration(params, "metricsStalenessThreshold", 200, &sat->stale_ms, err, errlen) !=
            0) {
        return -EINVAL;
    }
    sat->queue_depth = (double)qd;
    return 0;
}

static int utilization_create(struct plugin *p, struct json_object *params, char *err,
                              size_t errlen)
{
    struct saturation *sat = calloc(1, sizeof(*sat));
    p->state = sat;
    return sat ? saturation_params(params, sat, err, errlen) : -ENOMEM;
}

const struct plugin_ops saturation_utilization_ops = {.type = "utilization-detector",
                                                      .kind = PK_SATURATION,
                                                      .create = utilization_create,
                                                      .destroy = free_state};
