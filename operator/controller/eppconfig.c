/*
 * EndpointPickerConfig generation, validation and YAML output (see eppconfig.h). The plugin
 * catalogue below is llm-d's (llm-d-inference-scheduler / llm-d Router and the Gateway API
 * Inference Extension EPP); an unknown type is a validation error so a typo never reaches the EPP.
 */
#include "operator/controller/eppconfig.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "lib/err.h"
#include "lib/json.h"
#include "lib/yaml.h"

static const char *const known_types[] = {
    /* filters */
    "decode-filter",
    "prefill-filter",
    "encode-filter",
    "by-label",
    "by-label-selector",
    "label-selector-filter",
    "prefix-cache-affinity-filter",
    "slo-headroom-tier-filter",
    "context-length-aware",
    /* scorers */
    "prefix-cache-scorer",
    "precise-prefix-cache-scorer",
    "load-aware-scorer",
    "active-request-scorer",
    "session-affinity-scorer",
    "kv-cache-utilization-scorer",
    "queue-scorer",
    "lora-affinity-scorer",
    "running-requests-size-scorer",
    "token-load-scorer",
    "no-hit-lru-scorer",
    "latency-scorer",
    "predicted-latency-scorer",
    /* pickers */
    "max-score-picker",
    "random-picker",
    "weighted-random-picker",
    /* profile handlers and P/D deciders */
    "single-profile-handler",
    "pd-profile-handler",
    "disagg-profile-handler",
    "data-parallel-profile-handler",
    "prefix-based-pd-decider",
    "always-disagg-pd-decider",
    "always-disagg-multimodal-decider",
    /* request control */
    "prefill-header-handler",
    "disagg-headers-handler",
    "token-producer",
    "tokenizer",
    "approx-prefix-cache-producer",
    "inflight-load-producer",
    "predicted-latency-producer",
    "request-attribute-reporter",
    "probabilistic-admitter",
    "latency-slo-admitter",
    /* data layer */
    "metrics-data-source",
    "core-metrics-extractor",
    "k8s-notification-source",
    "endpoint-notification-source",
    "models-data-extractor",
    /* flow control and saturation */
    "utilization-detector",
    "concurrency-detector",
    "global-strict-fairness-policy",
    "round-robin-fairness-policy",
    "fcfs-ordering-policy",
    "edf-ordering-policy",
    "slo-deadline-ordering-policy",
    "static-usage-limit-policy",
    "eviction-sheddable-filter",
    "eviction-priority-then-time-ordering",
    /* parsers */
    "openai-parser",
    "passthrough-parser",
    "vllmgrpc-parser",
    "vertexai-parser",
};

int eppconfig_type_known(const char *type)
{
    for (size_t i = 0; i < ARRAY_SIZE(known_types); i++) {
        if (strcmp(type, known_types[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int is_profile_handler(const char *type)
{
    size_t n = strlen(type);
    static const char suffix[] = "-profile-handler";
    return n >= sizeof(suffix) - 1 && strcmp(type + n - (sizeof(suffix) - 1), suffix) == 0;
}

/* ---- building json-c values without leaking on OOM ---- */

/* Adds v to o under key, taking ownership of v (also on failure). Returns 0 or -ENOMEM. */
static int put(struct json_object *o, const char *key, struct json_object *v)
{
    if (!v) {
        return -ENOMEM;
    }
    if (json_object_object_add(o, key, v) != 0) {
        json_object_put(v);
        return -ENOMEM;
    }
    return 0;
}

static int push(struct json_object *a, struct json_object *v)
{
    if (!v) {
        return -ENOMEM;
    }
    if (json_object_array_add(a, v) != 0) {
        json_object_put(v);
        return -ENOMEM;
    }
    return 0;
}

/* A {name, type[, parameters]} plugin entry; parameters is consumed. */
static int add_plugin(struct json_object *plugins, const char *name, const char *type,
                      struct json_object *parameters)
{
    struct json_object *p = json_object_new_object();
    if (!p || put(p, "name", json_object_new_string(name)) != 0 ||
        put(p, "type", json_object_new_string(type)) != 0) {
        json_object_put(parameters);
        json_object_put(p);
        return -ENOMEM;
    }
    if (parameters && put(p, "parameters", parameters) != 0) {
        json_object_put(p);
        return -ENOMEM;
    }
    return push(plugins, p);
}

/* A {pluginRef[, weight]} profile entry (weight < 0: none). */
static int add_ref(struct json_object *refs, const char *name, int weight)
{
    struct json_object *r = json_object_new_object();
    if (!r || put(r, "pluginRef", json_object_new_string(name)) != 0 ||
        (weight >= 0 && put(r, "weight", json_object_new_int(weight)) != 0)) {
        json_object_put(r);
        return -ENOMEM;
    }
    return push(refs, r);
}

/* A label-selector-filter's parameters: a copy of the selector. */
static struct json_object *selector_params(const struct spec_selector *sel)
{
    struct json_object *p = json_object_new_object();
    struct json_object *copy = NULL;
    if (!p) {
        return NULL;
    }
    if (sel->match_labels) {
        if (json_object_deep_copy(sel->match_labels, &copy, NULL) != 0 ||
            put(p, "matchLabels", copy) != 0) {
            goto err;
        }
    }
    copy = NULL;
    if (sel->match_expressions) {
        if (json_object_deep_copy(sel->match_expressions, &copy, NULL) != 0 ||
            put(p, "matchExpressions", copy) != 0) {
            goto err;
        }
    }
    return p;
err:
    json_object_put(p);
    return NULL;
}

struct scorer {
    const char *type;
    int weight;
};

/* One scheduling profile: filter (may be NULL), the scorers with weight > 0, the picker. */
static struct json_object *make_profile(const char *name, const char *filter,
                                        const struct scorer *scorers, size_t n, const char *picker)
{
    struct json_object *prof = json_object_new_object();
    struct json_object *refs = json_object_new_array();
    if (!prof || !refs) {
        goto err;
    }
    if (filter && add_ref(refs, filter, -1) != 0) {
        goto err;
    }
    for (size_t i = 0; i < n; i++) {
        if (scorers[i].weight > 0 && add_ref(refs, scorers[i].type, scorers[i].weight) != 0) {
            goto err;
        }
    }
    if (add_ref(refs, picker, -1) != 0) {
        goto err;
    }
    if (put(prof, "name", json_object_new_string(name)) != 0) {
        goto err;
    }
    struct json_object *tmp = refs;
    refs = NULL;
    if (put(prof, "plugins", tmp) != 0) {
        goto err;
    }
    return prof;
err:
    json_object_put(refs);
    json_object_put(prof);
    return NULL;
}

struct json_object *eppconfig_generate(const struct spec_pool *pool)
{
    struct json_object *cfg = json_object_new_object();
    struct json_object *plugins = json_object_new_array();
    struct json_object *profiles = json_object_new_array();
    if (!cfg || !plugins || !profiles) {
        goto err;
    }
    /* Tandem's agents publish KV events, so the cache-hit weight goes to the precise scorer */
    const struct scorer scorers[] = {
        {"precise-prefix-cache-scorer", pool->routing.w_cache_hit},
        {"queue-scorer", pool->routing.w_load},
        {"kv-cache-utilization-scorer", pool->routing.w_latency},
    };
    int dynamic = pool->routing.type == ROUTING_DYNAMIC;
    const char *picker = dynamic ? "max-score-picker" : "random-picker";
    size_t nscorers = dynamic ? ARRAY_SIZE(scorers) : 0;

    if (pool->disagg.enabled) {
        const char *pname = "prefill-filter", *dname = "decode-filter";
        int rc;
        if (pool->disagg.has_prefill_selector) {
            pname = "prefill-pods";
            struct json_object *params = selector_params(&pool->disagg.prefill_selector);
            if (!params) {
                goto err;
            }
            rc = add_plugin(plugins, pname, "label-selector-filter", params);
        } else {
            rc = add_plugin(plugins, pname, "prefill-filter", NULL);
        }
        if (rc != 0) {
            goto err;
        }
        if (pool->disagg.has_decode_selector) {
            dname = "decode-pods";
            struct json_object *params = selector_params(&pool->disagg.decode_selector);
            if (!params) {
                goto err;
            }
            rc = add_plugin(plugins, dname, "label-selector-filter", params);
        } else {
            rc = add_plugin(plugins, dname, "decode-filter", NULL);
        }
        if (rc != 0) {
            goto err;
        }
        for (size_t i = 0; i < nscorers; i++) {
            if (scorers[i].weight > 0 &&
                add_plugin(plugins, scorers[i].type, scorers[i].type, NULL) != 0) {
                goto err;
            }
        }
        if (add_plugin(plugins, picker, picker, NULL) != 0) {
            goto err;
        }
        const char *decode_profile =
            pool->routing.has_scheduler_profile ? pool->routing.scheduler_profile : "decode";
        struct json_object *params = json_object_new_object();
        if (!params || put(params, "threshold", json_object_new_int64(pool->disagg.threshold)) ||
            put(params, "prefixPluginName",
                json_object_new_string("precise-prefix-cache-scorer")) ||
            put(params, "prefillProfile", json_object_new_string("prefill")) ||
            put(params, "decodeProfile", json_object_new_string(decode_profile))) {
            json_object_put(params);
            goto err;
        }
        if (add_plugin(plugins, "pd-profile-handler", "pd-profile-handler", params) != 0) {
            goto err;
        }
        if (push(profiles, make_profile("prefill", pname, scorers, nscorers, picker)) != 0 ||
            push(profiles, make_profile(decode_profile, dname, scorers, nscorers, picker)) != 0) {
            goto err;
        }
    } else {
        if (add_plugin(plugins, "decode-filter", "decode-filter", NULL) != 0) {
            goto err;
        }
        for (size_t i = 0; i < nscorers; i++) {
            if (scorers[i].weight > 0 &&
                add_plugin(plugins, scorers[i].type, scorers[i].type, NULL) != 0) {
                goto err;
            }
        }
        if (add_plugin(plugins, picker, picker, NULL) != 0 ||
            add_plugin(plugins, "single-profile-handler", "single-profile-handler", NULL) != 0) {
            goto err;
        }
        if (push(profiles, make_profile(pool->routing.scheduler_profile, "decode-filter", scorers,
                                        nscorers, picker)) != 0) {
            goto err;
        }
    }
    if (put(cfg, "apiVersion", json_object_new_string(EPPCONFIG_API_VERSION)) != 0 ||
        put(cfg, "kind", json_object_new_string(EPPCONFIG_KIND)) != 0) {
        goto err;
    }
    struct json_object *tmp = plugins;
    plugins = NULL;
    if (put(cfg, "plugins", tmp) != 0) {
        goto err;
    }
    tmp = profiles;
    profiles = NULL;
    if (put(cfg, "schedulingProfiles", tmp) != 0) {
        goto err;
    }
    return cfg;
err:
    json_object_put(plugins);
    json_object_put(profiles);
    json_object_put(cfg);
    return NULL;
}

/* ---- validation ---- */

static struct json_object *member(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v)) {
        return NULL;
    }
    return v;
}

/* field + "." + suffix into buf (field paths of error messages are cut at the buffer size). */
static const char *fieldf(char *buf, size_t n, const char *field, const char *suffix)
{
    tandem_set_err(buf, n, "%s%s%s", field, field[0] ? "." : "", suffix);
    return buf;
}

static int names_contain(struct json_object *arr, const char *name)
{
    size_t n = json_object_array_length(arr);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(json_object_get_string(json_object_array_get_idx(arr, i)), name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Adds name to a json array of strings; -ENOMEM. */
static int names_add(struct json_object *arr, const char *name)
{
    return push(arr, json_object_new_string(name));
}

static int validate_plugins(struct json_object *plugins, const char *field,
                            struct json_object *names, int *has_handler, int *has_pd,
                            struct json_object *pd_profiles, struct spec_errors *errs)
{
    char f[224];
    int failed = 0;
    size_t n = json_object_array_length(plugins);
    if (n == 0) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "plugins"), "must not be empty");
        return -EINVAL;
    }
    if (n > EPPCONFIG_MAX_PLUGINS) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "plugins"), "must have at most %d items",
                        EPPCONFIG_MAX_PLUGINS);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *p = json_object_array_get_idx(plugins, i);
        char base[200];
        tandem_set_err(base, sizeof(base), "%s%splugins[%zu]", field, field[0] ? "." : "", i);
        if (!p || !json_object_is_type(p, json_type_object)) {
            spec_errors_add(errs, base, "expected object, got %s", json_type_label(p));
            failed = 1;
            continue;
        }
        struct json_object *type = member(p, "type"), *name = member(p, "name");
        struct json_object *params = member(p, "parameters");
        const char *tname = NULL;
        if (!type) {
            spec_errors_add(errs, fieldf(f, sizeof(f), base, "type"), "required field is missing");
            failed = 1;
        } else if (!json_object_is_type(type, json_type_string)) {
            spec_errors_add(errs, fieldf(f, sizeof(f), base, "type"), "expected string, got %s",
                            json_type_label(type));
            failed = 1;
        } else {
            tname = json_object_get_string(type);
            if (!eppconfig_type_known(tname)) {
                spec_errors_add(errs, fieldf(f, sizeof(f), base, "type"),
                                "unknown plugin type \"%.64s\"", tname);
                failed = 1;
            }
        }
        const char *pname = tname;
        if (name) {
            if (!json_object_is_type(name, json_type_string) || !json_object_get_string(name)[0]) {
                spec_errors_add(errs, fieldf(f, sizeof(f), base, "name"),
                                "must be a non-empty string");
                failed = 1;
                pname = NULL;
            } else {
                pname = json_object_get_string(name);
            }
        }
        if (params && !json_object_is_type(params, json_type_object)) {
            spec_errors_add(errs, fieldf(f, sizeof(f), base, "parameters"),
                            "expected object, got %s", json_type_label(params));
            failed = 1;
            params = NULL;
        }
        if (pname) {
            if (names_contain(names, pname)) {
                spec_errors_add(errs, fieldf(f, sizeof(f), base, "name"),
                                "duplicate plugin name \"%.64s\"", pname);
                failed = 1;
            } else if (names_add(names, pname) != 0) {
                return -ENOMEM;
            }
        }
        if (tname && is_profile_handler(tname) && strcmp(tname, "single-profile-handler") != 0) {
            *has_handler = 1;
        }
        if (tname && (strcmp(tname, "pd-profile-handler") == 0 ||
                      strcmp(tname, "disagg-profile-handler") == 0)) {
            *has_pd = 1;
        }
        if (tname && strcmp(tname, "pd-profile-handler") == 0) {
            /* The profiles it runs must exist: remember them with the field that names them. */
            static const struct {
                const char *key, *def;
            } refs[] = {{"decodeProfile", "decode"}, {"prefillProfile", "prefill"}};
            for (size_t r = 0; r < ARRAY_SIZE(refs); r++) {
                struct json_object *v = member(params, refs[r].key);
                const char *prof = refs[r].def;
                char pf[224];
                tandem_set_err(pf, sizeof(pf), "%s.parameters.%s", base, refs[r].key);
                if (v && !json_object_is_type(v, json_type_string)) {
                    spec_errors_add(errs, pf, "expected string, got %s", json_type_label(v));
                    failed = 1;
                    continue;
                }
                if (v) {
                    prof = json_object_get_string(v);
                }
                struct json_object *pair = json_object_new_array();
                if (!pair) {
                    return -ENOMEM;
                }
                if (names_add(pair, prof) != 0 || names_add(pair, pf) != 0) {
                    json_object_put(pair);
                    return -ENOMEM;
                }
                if (push(pd_profiles, pair) != 0) {
                    return -ENOMEM;
                }
            }
            struct json_object *thr = member(params, "threshold");
            if (thr &&
                (!json_object_is_type(thr, json_type_int) || json_object_get_int64(thr) < 0)) {
                char pf[224];
                tandem_set_err(pf, sizeof(pf), "%s.parameters.threshold", base);
                spec_errors_add(errs, pf, "must be an integer >= 0");
                failed = 1;
            }
        }
    }
    return failed ? -EINVAL : 0;
}

static int validate_profiles(struct json_object *profiles, const char *field,
                             struct json_object *plugin_names, struct json_object *profile_names,
                             struct spec_errors *errs)
{
    char f[224];
    int failed = 0;
    size_t n = json_object_array_length(profiles);
    if (n == 0) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "schedulingProfiles"),
                        "must not be empty");
        return -EINVAL;
    }
    if (n > EPPCONFIG_MAX_PROFILES) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "schedulingProfiles"),
                        "must have at most %d items", EPPCONFIG_MAX_PROFILES);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *p = json_object_array_get_idx(profiles, i);
        char base[200];
        tandem_set_err(base, sizeof(base), "%s%sschedulingProfiles[%zu]", field,
                       field[0] ? "." : "", i);
        if (!p || !json_object_is_type(p, json_type_object)) {
            spec_errors_add(errs, base, "expected object, got %s", json_type_label(p));
            failed = 1;
            continue;
        }
        struct json_object *name = member(p, "name"), *refs = member(p, "plugins");
        if (!name || !json_object_is_type(name, json_type_string) ||
            !json_object_get_string(name)[0]) {
            spec_errors_add(errs, fieldf(f, sizeof(f), base, "name"),
                            name ? "must be a non-empty string" : "required field is missing");
            failed = 1;
        } else if (names_contain(profile_names, json_object_get_string(name))) {
            spec_errors_add(errs, fieldf(f, sizeof(f), base, "name"),
                            "duplicate profile name \"%.64s\"", json_object_get_string(name));
            failed = 1;
        } else if (names_add(profile_names, json_object_get_string(name)) != 0) {
            return -ENOMEM;
        }
        if (!refs) {
            spec_errors_add(errs, fieldf(f, sizeof(f), base, "plugins"),
                            "required field is missing");
            failed = 1;
            continue;
        }
        if (!json_object_is_type(refs, json_type_array)) {
            spec_errors_add(errs, fieldf(f, sizeof(f), base, "plugins"), "expected array, got %s",
                            json_type_label(refs));
            failed = 1;
            continue;
        }
        size_t nr = json_object_array_length(refs);
        for (size_t j = 0; j < nr; j++) {
            struct json_object *r = json_object_array_get_idx(refs, j);
            char rf[224];
            tandem_set_err(rf, sizeof(rf), "%s.plugins[%zu]", base, j);
            if (!r || !json_object_is_type(r, json_type_object)) {
                spec_errors_add(errs, rf, "expected object, got %s", json_type_label(r));
                failed = 1;
                continue;
            }
            struct json_object *ref = member(r, "pluginRef"), *w = member(r, "weight");
            if (!ref || !json_object_is_type(ref, json_type_string)) {
                spec_errors_add(errs, fieldf(f, sizeof(f), rf, "pluginRef"),
                                ref ? "expected string" : "required field is missing");
                failed = 1;
            } else if (!names_contain(plugin_names, json_object_get_string(ref))) {
                spec_errors_add(errs, fieldf(f, sizeof(f), rf, "pluginRef"),
                                "no plugin named \"%.64s\"", json_object_get_string(ref));
                failed = 1;
            }
            if (w && ((!json_object_is_type(w, json_type_int) &&
                       !json_object_is_type(w, json_type_double)) ||
                      !isfinite(json_object_get_double(w)) || json_object_get_double(w) < 0)) {
                spec_errors_add(errs, fieldf(f, sizeof(f), rf, "weight"), "must be a number >= 0");
                failed = 1;
            }
        }
    }
    return failed ? -EINVAL : 0;
}

int eppconfig_validate(struct json_object *cfg, const char *field, const char *primary_profile,
                       int need_pd, struct spec_errors *errs)
{
    char f[224];
    if (!field) {
        field = "";
    }
    if (!cfg || !json_object_is_type(cfg, json_type_object)) {
        spec_errors_add(errs, field, "expected an EndpointPickerConfig object, got %s",
                        json_type_label(cfg));
        return -EINVAL;
    }
    int failed = 0;
    struct json_object *api = member(cfg, "apiVersion"), *kind = member(cfg, "kind");
    const char *api_s =
        api && json_object_is_type(api, json_type_string) ? json_object_get_string(api) : NULL;
    if (!api_s || (strcmp(api_s, EPPCONFIG_API_VERSION) != 0 &&
                   strcmp(api_s, EPPCONFIG_API_VERSION_LEGACY) != 0)) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "apiVersion"),
                        "must be %s (or the older %s)", EPPCONFIG_API_VERSION,
                        EPPCONFIG_API_VERSION_LEGACY);
        failed = 1;
    }
    if (!kind || !json_object_is_type(kind, json_type_string) ||
        strcmp(json_object_get_string(kind), EPPCONFIG_KIND) != 0) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "kind"), "must be %s", EPPCONFIG_KIND);
        failed = 1;
    }
    struct json_object *gates = member(cfg, "featureGates");
    if (gates) {
        int ok = json_object_is_type(gates, json_type_array);
        for (size_t i = 0; ok && i < json_object_array_length(gates); i++) {
            ok = json_object_is_type(json_object_array_get_idx(gates, i), json_type_string);
        }
        if (!ok) {
            spec_errors_add(errs, fieldf(f, sizeof(f), field, "featureGates"),
                            "must be a list of strings");
            failed = 1;
        }
    }

    struct json_object *plugins = member(cfg, "plugins"),
                       *profiles = member(cfg, "schedulingProfiles");
    struct json_object *plugin_names = json_object_new_array();
    struct json_object *profile_names = json_object_new_array();
    struct json_object *pd_profiles = json_object_new_array();
    int rc = 0, has_handler = 0, has_pd = 0, plugins_ok = 0;
    if (!plugin_names || !profile_names || !pd_profiles) {
        rc = -ENOMEM;
        goto out;
    }
    if (!plugins || !json_object_is_type(plugins, json_type_array)) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "plugins"),
                        plugins ? "expected array" : "required field is missing");
        failed = 1;
    } else {
        rc = validate_plugins(plugins, field, plugin_names, &has_handler, &has_pd, pd_profiles,
                              errs);
        if (rc == -ENOMEM) {
            goto out;
        }
        failed |= rc != 0;
        plugins_ok = rc == 0;
        rc = 0;
    }
    if (!profiles || !json_object_is_type(profiles, json_type_array)) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "schedulingProfiles"),
                        profiles ? "expected array" : "required field is missing");
        failed = 1;
    } else {
        rc = validate_profiles(profiles, field, plugin_names, profile_names, errs);
        if (rc == -ENOMEM) {
            goto out;
        }
        failed |= rc != 0;
        rc = 0;
        if (json_object_array_length(profiles) > 1 && plugins_ok && !has_handler) {
            spec_errors_add(errs, fieldf(f, sizeof(f), field, "plugins"),
                            "several schedulingProfiles need a profile handler plugin (e.g. "
                            "pd-profile-handler)");
            failed = 1;
        }
        for (size_t i = 0; i < json_object_array_length(pd_profiles); i++) {
            struct json_object *pair = json_object_array_get_idx(pd_profiles, i);
            const char *prof = json_object_get_string(json_object_array_get_idx(pair, 0));
            if (!names_contain(profile_names, prof)) {
                spec_errors_add(errs, json_object_get_string(json_object_array_get_idx(pair, 1)),
                                "no scheduling profile named \"%.64s\"", prof);
                failed = 1;
            }
        }
        if (primary_profile && !names_contain(profile_names, primary_profile)) {
            spec_errors_add(errs, fieldf(f, sizeof(f), field, "schedulingProfiles"),
                            "has no profile named \"%.64s\" (spec.routingPolicy.schedulerProfile)",
                            primary_profile);
            failed = 1;
        }
    }
    if (need_pd && plugins_ok && !has_pd) {
        spec_errors_add(errs, fieldf(f, sizeof(f), field, "plugins"),
                        "disaggregation is enabled: add a pd-profile-handler (or "
                        "disagg-profile-handler) with prefill and decode profiles");
        failed = 1;
    }
out:
    json_object_put(plugin_names);
    json_object_put(profile_names);
    json_object_put(pd_profiles);
    if (rc != 0) {
        return rc;
    }
    return failed ? -EINVAL : 0;
}

int eppconfig_parse(const char *text, size_t len, const char *field, const char *primary_profile,
                    int need_pd, struct json_object **out, struct spec_errors *errs)
{
    char err[256];
    struct json_object *doc = NULL;
    if (out) {
        *out = NULL;
    }
    if (!field) {
        field = "";
    }
    if (len > EPPCONFIG_MAX_TEXT) {
        spec_errors_add(errs, field, "must be at most %u bytes", EPPCONFIG_MAX_TEXT);
        return -EINVAL;
    }
    int rc = yaml_parse_one(text, len, &doc, err, sizeof(err));
    if (rc == -ENOMEM) {
        return rc;
    }
    if (rc != 0) {
        spec_errors_add(errs, field, "invalid YAML: %s", err);
        return -EINVAL;
    }
    rc = eppconfig_validate(doc, field, primary_profile, need_pd, errs);
    if (rc == 0 && out) {
        *out = doc;
        return 0;
    }
    json_object_put(doc);
    return rc;
}

int eppconfig_check_inline(const struct spec_pool *pool, struct spec_errors *errs)
{
    static const char field[] = "spec.routingPolicy.endpointPickerConfig.inline";
    const char *primary =
        pool->routing.has_scheduler_profile ? pool->routing.scheduler_profile : NULL;
    if (pool->routing.inline_obj) {
        return eppconfig_validate(pool->routing.inline_obj, field, primary, pool->disagg.enabled,
                                  errs);
    }
    if (pool->routing.inline_text) {
        return eppconfig_parse(pool->routing.inline_text, strlen(pool->routing.inline_text), field,
                               primary, pool->disagg.enabled, NULL, errs);
    }
    return 0;
}

int eppconfig_render(const struct spec_pool *pool, struct buf *out, struct spec_errors *errs)
{
    int rc;
    if (pool->routing.cm_name) {
        return -ENOENT;
    }
    if (pool->routing.inline_obj || pool->routing.inline_text) {
        rc = eppconfig_check_inline(pool, errs);
        if (rc != 0) {
            return rc;
        }
        if (pool->routing.inline_text) {
            size_t n = strlen(pool->routing.inline_text);
            rc = buf_append(out, pool->routing.inline_text, n);
            if (rc == 0 && (n == 0 || pool->routing.inline_text[n - 1] != '\n')) {
                rc = buf_appends(out, "\n");
            }
            return rc;
        }
        return eppconfig_to_yaml(pool->routing.inline_obj, out);
    }
    struct json_object *cfg = eppconfig_generate(pool);
    if (!cfg) {
        return -ENOMEM;
    }
    rc = buf_appendf(out,
                     "# Generated by tandem-operator from InferencePool %s/%s; change the pool's "
                     "routingPolicy, not this file.\n",
                     pool->ns, pool->name);
    if (rc == 0) {
        rc = eppconfig_to_yaml(cfg, out);
    }
    json_object_put(cfg);
    return rc;
}

/* ---- YAML output ---- */

/*
 * libyaml's emitter does the layout (block style, two-space indent, keys over 128 characters or
 * spanning lines written as explicit "? key" entries, escapes in double-quoted scalars); this file
 * only decides each scalar's style so that lib/yaml (and go-yaml) reads it back as the same json
 * type. The tree is checked before anything is emitted, so -EINVAL leaves out untouched.
 */

#define YAML_EMIT_MAX_DEPTH 64

/* A string that lib/yaml (and go-yaml) would read back as the same string when written plain. */
static int plain_safe(const char *s)
{
    static const char *const reserved[] = {"y",   "n",    "yes",   "no",  "on",
                                           "off", "true", "false", "null"};
    if (!s[0] || !(isalpha((unsigned char)s[0]) || s[0] == '/' || s[0] == '_')) {
        return 0;
    }
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (!isalnum(ch) && ch != '_' && ch != '.' && ch != '/' && ch != '-') {
            return 0;
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(reserved); i++) {
        if (strcasecmp(s, reserved[i]) == 0) {
            return 0;
        }
    }
    return 1;
}

static int utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    while (len > 0) {
        size_t n = tandem_utf8_seq_len(p, len);
        if (n == 0) {
            return 0;
        }
        p += n;
        len -= n;
    }
    return 1;
}

static int container_empty(struct json_object *v)
{
    if (json_object_is_type(v, json_type_object)) {
        return json_object_object_length(v) == 0;
    }
    return json_object_array_length(v) == 0;
}

/*
 * -EINVAL when v holds what YAML cannot carry: NaN or infinity, text that is not UTF-8, or a
 * non-empty container nested deeper than YAML_EMIT_MAX_DEPTH (the root is depth 0).
 */
static int check_tree(struct json_object *v, int depth)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
    case json_type_boolean:
    case json_type_int:
        return 0;
    case json_type_double:
        return isfinite(json_object_get_double(v)) ? 0 : -EINVAL;
    case json_type_string:
        return utf8_valid(json_object_get_string(v), (size_t)json_object_get_string_len(v))
                   ? 0
                   : -EINVAL;
    case json_type_object: {
        if (container_empty(v)) {
            return 0;
        }
        if (depth > YAML_EMIT_MAX_DEPTH) {
            return -EINVAL;
        }
        json_object_object_foreach(v, k, member_value)
        {
            int rc = utf8_valid(k, strlen(k)) ? check_tree(member_value, depth + 1) : -EINVAL;
            if (rc) {
                return rc;
            }
        }
        return 0;
    }
    case json_type_array:
        if (container_empty(v)) {
            return 0;
        }
        if (depth > YAML_EMIT_MAX_DEPTH) {
            return -EINVAL;
        }
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            int rc = check_tree(json_object_array_get_idx(v, i), depth + 1);
            if (rc) {
                return rc;
            }
        }
        return 0;
    }
    return -EINVAL;
}

struct emitter {
    yaml_emitter_t yaml;
    struct buf *out;
};

static int write_out(void *data, unsigned char *bytes, size_t size)
{
    return buf_append(data, bytes, size) == 0;
}

/* Hands ev to the emitter (which owns it from here); 0 or the failure as a code. */
static int emit_event(struct emitter *e, yaml_event_t *ev)
{
    if (yaml_emitter_emit(&e->yaml, ev)) {
        return 0;
    }
    switch (e->yaml.error) {
    case YAML_WRITER_ERROR:
        return buf_error(e->out) ? buf_error(e->out) : -ENOSPC;
    case YAML_MEMORY_ERROR:
        return -ENOMEM;
    default:
        return -EINVAL; /* events out of order: a bug here, reported rather than asserted */
    }
}

/* A string is plain when that reads back as the same string, otherwise double-quoted. */
static int emit_string(struct emitter *e, const char *s, size_t len)
{
    yaml_event_t ev;
    int plain = strlen(s) == len && plain_safe(s);
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (const yaml_char_t *)s, (int)len, plain, 1,
                                      plain ? YAML_PLAIN_SCALAR_STYLE
                                            : YAML_DOUBLE_QUOTED_SCALAR_STYLE)) {
        return -ENOMEM; /* (the text is UTF-8: check_tree) */
    }
    return emit_event(e, &ev);
}

/* null, a bool or a number: plain, so it reads back as the same type. */
static int emit_plain(struct emitter *e, const char *text, size_t len)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (const yaml_char_t *)text, (int)len, 1, 0,
                                      YAML_PLAIN_SCALAR_STYLE)) {
        return -ENOMEM;
    }
    return emit_event(e, &ev);
}

static int emit_node(struct emitter *e, struct json_object *v)
{
    yaml_event_t ev;
    int rc = 0;
    switch (json_object_get_type(v)) {
    case json_type_null:
        return emit_plain(e, "null", 4);
    case json_type_boolean:
        return json_object_get_boolean(v) ? emit_plain(e, "true", 4) : emit_plain(e, "false", 5);
    case json_type_int: /* json_to_buf prints integers kept as uint64 too, and doubles */
    case json_type_double: {
        struct buf num; /* shortest text that round-trips; "3.0" for a double */
        buf_init(&num, 64);
        rc = json_to_buf(v, 0, &num);
        if (rc == 0) {
            rc = emit_plain(e, num.data, num.len);
        }
        buf_free(&num);
        return rc;
    }
    case json_type_string:
        return emit_string(e, json_object_get_string(v), (size_t)json_object_get_string_len(v));
    case json_type_object: {
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE)) {
            return -ENOMEM;
        }
        if ((rc = emit_event(e, &ev))) {
            return rc;
        }
        json_object_object_foreach(v, k, member_value)
        {
            if ((rc = emit_string(e, k, strlen(k))) || (rc = emit_node(e, member_value))) {
                return rc;
            }
        }
        yaml_mapping_end_event_initialize(&ev);
        return emit_event(e, &ev);
    }
    case json_type_array:
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE)) {
            return -ENOMEM;
        }
        if ((rc = emit_event(e, &ev))) {
            return rc;
        }
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            if ((rc = emit_node(e, json_object_array_get_idx(v, i)))) {
                return rc;
            }
        }
        yaml_sequence_end_event_initialize(&ev);
        return emit_event(e, &ev);
    }
    return -EINVAL;
}

int eppconfig_to_yaml(struct json_object *o, struct buf *out)
{
    int rc = check_tree(o, 0);
    if (rc) {
        return rc;
    }
    struct emitter e = {.out = out};
    if (!yaml_emitter_initialize(&e.yaml)) {
        return -ENOMEM;
    }
    yaml_emitter_set_output(&e.yaml, write_out, out);
    yaml_emitter_set_encoding(&e.yaml, YAML_UTF8_ENCODING);
    yaml_emitter_set_unicode(&e.yaml, 1); /* non-ASCII text as is, not as \u escapes */
    yaml_emitter_set_indent(&e.yaml, 2);
    yaml_emitter_set_width(&e.yaml, -1); /* no line folding */
    yaml_emitter_set_break(&e.yaml, YAML_LN_BREAK);
    yaml_event_t ev;
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    if ((rc = emit_event(&e, &ev))) {
        goto out;
    }
    if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1)) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = emit_event(&e, &ev)) || (rc = emit_node(&e, o))) {
        goto out;
    }
    yaml_document_end_event_initialize(&ev, 1);
    if ((rc = emit_event(&e, &ev))) {
        goto out;
    }
    yaml_stream_end_event_initialize(&ev);
    rc = emit_event(&e, &ev);
out:
    yaml_emitter_delete(&e.yaml);
    return rc;
}
