/*
 * The EndpointPickerConfig loader (reference §2.2): plugins are created by type, profiles resolve
 * their pluginRefs, and GIE's defaults fill the gaps (a single-profile-handler when there is no
 * handler, a max-score-picker in a profile without a picker, weight 1 for a scorer without one,
 * GIE's default config when there is no config at all). Errors name the field and the plugin.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "lib/log.h"
#include "lib/yaml.h"
#include "operator/epp/sched/plugins.h"

#define API_VERSION        "llm-d.ai/v1alpha1"
#define API_VERSION_LEGACY "inference.networking.x-k8s.io/v1alpha1"
#define MAX_PLUGINS        256

/* GIE v1.5.0 pkg/epp/config/loader/defaults.go (the data-layer plugins are the EPP's own). */
static const char default_config[] = "apiVersion: llm-d.ai/v1alpha1\n"
                                     "kind: EndpointPickerConfig\n"
                                     "plugins:\n"
                                     "- type: queue-scorer\n"
                                     "- type: kv-cache-utilization-scorer\n"
                                     "- type: prefix-cache-scorer\n"
                                     "schedulingProfiles:\n"
                                     "- name: default\n"
                                     "  plugins:\n"
                                     "  - pluginRef: queue-scorer\n"
                                     "    weight: 2\n"
                                     "  - pluginRef: kv-cache-utilization-scorer\n"
                                     "    weight: 2\n"
                                     "  - pluginRef: prefix-cache-scorer\n"
                                     "    weight: 3\n";

static int fail(char *err, size_t errlen, const char *fmt, const char *a, const char *b)
{
    snprintf(err, errlen, fmt, a, b);
    return -EINVAL;
}

/* Rejects keys outside allowed (NULL-terminated), naming the object at field. */
static int only_keys(struct json_object *o, const char *field, const char *const *allowed,
                     char *err, size_t errlen)
{
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], k) != 0) {
            i++;
        }
        if (!allowed[i]) {
            return fail(err, errlen, "%s: unknown field \"%s\"", field, k);
        }
    }
    return 0;
}

static const char *extension_point(unsigned kind)
{
    switch (kind) {
    case PK_FILTER:
        return "Filter";
    case PK_SCORER:
        return "Scorer";
    case PK_PICKER:
        return "Picker";
    case PK_HANDLER:
        return "ProfileHandler";
    default:
        return NULL;
    }
}

static struct plugin *find_plugin(struct epp_sched *s, const char *name)
{
    for (int i = 0; i < s->n_plugins; i++) {
        if (strcmp(s->plugins[i]->name, name) == 0) {
            return s->plugins[i];
        }
    }
    return NULL;
}

static void plugin_free(struct plugin *p)
{
    if (p) {
        if (p->ops && p->ops->destroy) {
            p->ops->destroy(p);
        }
        free(p->name);
        free(p);
    }
}

/* Creates a plugin and appends it; err carries the parameter's message. */
static struct plugin *add_plugin(struct epp_sched *s, const char *name,
                                 const struct plugin_ops *ops, struct json_object *params,
                                 char *err, size_t errlen)
{
    struct plugin *p = calloc(1, sizeof(*p));
    struct plugin **grown =
        realloc(s->plugins, (size_t)(s->n_plugins + 1) * sizeof(struct plugin *));
    if (grown) {
        s->plugins = grown;
    }
    if (!p || !grown || !(p->name = strdup(name))) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->ops = ops;
    p->s = s;
    s->plugins[s->n_plugins++] = p; /* freed with s even when create fails */
    if (ops->create && ops->create(p, params, err, errlen) != 0) {
        return NULL;
    }
    const char *point = extension_point(ops->kind);
    if (s->f_plugin && point) {
        const char *labels[] = {point, ops->type, name};
        p->duration = metrics_child(s->f_plugin, labels);
    }
    return p;
}

static int load_plugin(struct epp_sched *s, struct json_object *o, size_t i, char *err,
                       size_t errlen)
{
    static const char *const keys[] = {"name", "type", "parameters", NULL};
    char field[48], msg[200];
    const char *type = NULL, *name = NULL;
    snprintf(field, sizeof(field), "plugins[%zu]", i);
    if (!json_object_is_type(o, json_type_object)) {
        return fail(err, errlen, "%s: expected an object%s", field, "");
    }
    if (only_keys(o, field, keys, err, errlen) != 0) {
        return -EINVAL;
    }
    if (json_get_string(o, "type", &type, msg, sizeof(msg)) != 0 || !*type) {
        return fail(err, errlen, "%s.type: %s", field, *msg ? msg : "must not be empty");
    }
    if (json_opt_string(o, "name", type, &name, msg, sizeof(msg)) != 0 || !*name) {
        return fail(err, errlen, "%s.name: %s", field, *msg ? msg : "must not be empty");
    }
    struct json_object *params = json_get(o, "parameters");
    if (params && !json_object_is_type(params, json_type_object)) {
        return fail(err, errlen, "%s (%s): parameters: expected an object", field, name);
    }
    const struct plugin_ops *ops = sched_plugin_ops(type);
    if (!ops && sched_plugin_unsupported(type)) {
        return fail(err, errlen, "%s.type: plugin type \"%s\" is not supported by tandem-epp",
                    field, type);
    }
    if (!ops) {
        return fail(err, errlen, "%s.type: unknown plugin type \"%s\"", field, type);
    }
    if (find_plugin(s, name)) {
        return fail(err, errlen, "%s.name: duplicate plugin name \"%s\"", field, name);
    }
    if (!add_plugin(s, name, ops, params, msg, sizeof(msg))) {
        snprintf(err, errlen, "%s: plugin \"%s\" (%s): %s", field, name, type, msg);
        return -EINVAL;
    }
    return 0;
}

static int load_plugins(struct epp_sched *s, struct json_object *doc, char *err, size_t errlen)
{
    struct json_object *arr = NULL;
    char msg[200];
    if (json_get_array(doc, "plugins", &arr, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -EINVAL;
    }
    size_t n = json_object_array_length(arr);
    if (n == 0 || n > MAX_PLUGINS) {
        return fail(err, errlen, "plugins: needs 1 to 256 plugins%s%s", "", "");
    }
    for (size_t i = 0; i < n; i++) {
        if (load_plugin(s, json_object_array_get_idx(arr, i), i, err, errlen) != 0) {
            return -EINVAL;
        }
    }
    return 0;
}

static int profile_add_ref(struct profile *pr, struct plugin *p, double weight, const char *field,
                           char *err, size_t errlen)
{
    unsigned k = p->ops->kind;
    if (k == PK_FILTER) {
        struct plugin **f =
            realloc(pr->filters, (size_t)(pr->n_filters + 1) * sizeof(struct plugin *));
        if (!f) {
            return -ENOMEM;
        }
        pr->filters = f;
        f[pr->n_filters++] = p;
    } else if (k == PK_SCORER) {
        struct profile_scorer *sc = realloc(pr->scorers, (size_t)(pr->n_scorers + 1) * sizeof(*sc));
        if (!sc) {
            return -ENOMEM;
        }
        pr->scorers = sc;
        sc[pr->n_scorers++] = (struct profile_scorer){p, weight};
    } else if (k == PK_PICKER) {
        if (pr->picker) {
            return fail(err, errlen, "%s: profile already has picker \"%s\"", field,
                        pr->picker->name);
        }
        pr->picker = p;
    } else if (k == PK_HANDLER || k == PK_DECIDER || k == PK_SATURATION) {
        return fail(err, errlen, "%s: plugin \"%s\" cannot be used in a scheduling profile", field,
                    p->name);
    }
    return 0;
}

static int load_ref(struct epp_sched *s, struct profile *pr, struct json_object *o,
                    const char *field, char *err, size_t errlen)
{
    static const char *const keys[] = {"pluginRef", "weight", NULL};
    const char *ref = NULL;
    double w = 1.0;
    char msg[200];
    if (!json_object_is_type(o, json_type_object)) {
        return fail(err, errlen, "%s: expected an object%s", field, "");
    }
    if (only_keys(o, field, keys, err, errlen) != 0) {
        return -EINVAL;
    }
    if (json_get_string(o, "pluginRef", &ref, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "%s: %s", field, msg);
    }
    if (param_double(o, "weight", 1.0, 0, 1e9, &w, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "%s: %s", field, msg + strlen("parameters."));
    }
    struct plugin *p = find_plugin(s, ref);
    if (!p) {
        return fail(err, errlen, "%s.pluginRef: no plugin named \"%s\"", field, ref);
    }
    return profile_add_ref(pr, p, w, field, err, errlen);
}

static int load_profile(struct epp_sched *s, struct json_object *o, size_t i, char *err,
                        size_t errlen)
{
    static const char *const keys[] = {"name", "plugins", NULL};
    char field[96], msg[200];
    const char *name = NULL;
    struct json_object *refs = NULL;
    struct profile *pr = &s->profiles[s->n_profiles];
    snprintf(field, sizeof(field), "schedulingProfiles[%zu]", i);
    if (!json_object_is_type(o, json_type_object)) {
        return fail(err, errlen, "%s: expected an object%s", field, "");
    }
    if (only_keys(o, field, keys, err, errlen) != 0) {
        return -EINVAL;
    }
    if (json_get_string(o, "name", &name, msg, sizeof(msg)) != 0 || !*name) {
        return fail(err, errlen, "%s.name: %s", field, "required, a non-empty string");
    }
    if (sched_profile(s, name)) {
        return fail(err, errlen, "%s.name: duplicate profile name \"%s\"", field, name);
    }
    if (json_get_array(o, "plugins", &refs, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "%s.plugins: %s", field, "required, a list of pluginRefs");
    }
    if (!(pr->name = strdup(name))) {
        return -ENOMEM;
    }
    s->n_profiles++;
    for (size_t j = 0; j < json_object_array_length(refs); j++) {
        char rf[128];
        snprintf(rf, sizeof(rf), "%s.plugins[%zu]", field, j);
        int rc = load_ref(s, pr, json_object_array_get_idx(refs, j), rf, err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* No schedulingProfiles: one profile "default" with every filter, scorer and picker. */
static int default_profile(struct epp_sched *s, char *err, size_t errlen)
{
    struct profile *pr = &s->profiles[0];
    if (!(pr->name = strdup("default"))) {
        return -ENOMEM;
    }
    s->n_profiles = 1;
    for (int i = 0; i < s->n_plugins; i++) {
        unsigned k = s->plugins[i]->ops->kind;
        if ((k == PK_FILTER || k == PK_SCORER || k == PK_PICKER) &&
            profile_add_ref(pr, s->plugins[i], 1.0, "schedulingProfiles", err, errlen) != 0) {
            return -EINVAL;
        }
    }
    return 0;
}

static int load_profiles(struct epp_sched *s, struct json_object *doc, char *err, size_t errlen)
{
    struct json_object *arr = json_get(doc, "schedulingProfiles");
    s->profiles = calloc(EPP_SCHED_MAX_PROFILES, sizeof(*s->profiles));
    if (!s->profiles) {
        return -ENOMEM;
    }
    if (!arr) {
        return default_profile(s, err, errlen);
    }
    size_t n = json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
    if (n == 0 || n > EPP_SCHED_MAX_PROFILES) {
        return fail(err, errlen, "schedulingProfiles: needs a list of 1 to 64 profiles%s%s", "",
                    "");
    }
    for (size_t i = 0; i < n; i++) {
        int rc = load_profile(s, json_object_array_get_idx(arr, i), i, err, errlen);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

/* Injects the plugin of type under its type name (or a derived one when that name is taken). */
static struct plugin *inject(struct epp_sched *s, const struct plugin_ops *ops, char *err,
                             size_t errlen)
{
    char name[96];
    snprintf(name, sizeof(name), "%s", ops->type);
    for (int i = 2; find_plugin(s, name); i++) {
        snprintf(name, sizeof(name), "%s-%d", ops->type, i);
    }
    return add_plugin(s, name, ops, NULL, err, errlen);
}

static int finish_profiles(struct epp_sched *s, char *err, size_t errlen)
{
    struct plugin *picker = NULL;
    for (int i = 0; i < s->n_profiles; i++) {
        if (!s->profiles[i].picker) {
            if (!picker && !(picker = inject(s, &picker_max_score_ops, err, errlen))) {
                return -ENOMEM;
            }
            s->profiles[i].picker = picker;
        }
    }
    for (int i = 0; i < s->n_plugins; i++) {
        if (s->plugins[i]->ops->kind != PK_HANDLER) {
            continue;
        }
        if (s->handler) {
            return fail(err, errlen, "plugins: two profile handlers, \"%s\" and \"%s\"",
                        s->handler->name, s->plugins[i]->name);
        }
        s->handler = s->plugins[i];
    }
    if (!s->handler && !(s->handler = inject(s, &handler_single_ops, err, errlen))) {
        return -ENOMEM;
    }
    char msg[200];
    if (s->handler->ops->check && s->handler->ops->check(s->handler, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "profile handler \"%s\": %s", s->handler->name, msg);
    }
    return 0;
}

static int load_saturation(struct epp_sched *s, struct json_object *doc, char *err, size_t errlen)
{
    struct json_object *sd = json_get(doc, "saturationDetector");
    const char *ref = NULL;
    char msg[200];
    struct plugin *det = NULL;
    for (int i = 0; !det && i < s->n_plugins; i++) {
        det = s->plugins[i]->ops->kind == PK_SATURATION ? s->plugins[i] : NULL;
    }
    if (sd && !json_object_is_type(sd, json_type_object)) {
        return fail(err, errlen, "saturationDetector: expected an object%s%s", "", "");
    }
    if (json_opt_string(sd, "pluginRef", NULL, &ref, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "saturationDetector.%s%s", msg, "");
    }
    if (ref) {
        det = find_plugin(s, ref);
        if (!det || det->ops->kind != PK_SATURATION) {
            return fail(err, errlen, "saturationDetector.pluginRef: \"%s\" is not a %s", ref,
                        "saturation detector plugin");
        }
    }
    if (det) {
        s->sat = *(struct saturation *)det->state;
        return 0;
    }
    /* GIE v1.0 wrote the utilization detector's thresholds in this section directly. */
    if (saturation_params(sd, &s->sat, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "saturationDetector.%s%s", msg + strlen("parameters."), "");
    }
    return 0;
}

static int check_sections(struct json_object *doc, char *err, size_t errlen)
{
    static const char *const objects[] = {"dataLayer", "flowControl", "parser",
                                          "saturationDetector"};
    struct json_object *fg = json_get(doc, "featureGates");
    for (size_t i = 0; i < sizeof(objects) / sizeof(objects[0]); i++) {
        struct json_object *o = json_get(doc, objects[i]);
        if (o && !json_object_is_type(o, json_type_object)) {
            return fail(err, errlen, "%s: expected an object%s", objects[i], "");
        }
    }
    if (fg && !json_object_is_type(fg, json_type_array)) {
        return fail(err, errlen, "featureGates: expected a list of strings%s%s", "", "");
    }
    for (size_t i = 0; fg && i < json_object_array_length(fg); i++) {
        if (!json_object_is_type(json_object_array_get_idx(fg, i), json_type_string)) {
            return fail(err, errlen, "featureGates: expected a list of strings%s%s", "", "");
        }
    }
    return 0;
}

static int check_header(struct json_object *doc, char *err, size_t errlen)
{
    static const char *const keys[] = {
        "apiVersion",         "kind",      "featureGates", "plugins", "schedulingProfiles",
        "saturationDetector", "dataLayer", "flowControl",  "parser",  NULL};
    const char *api = NULL, *kind = NULL;
    char msg[200];
    if (!json_object_is_type(doc, json_type_object)) {
        return fail(err, errlen, "the config must be a mapping, not %s%s", json_type_label(doc),
                    "");
    }
    if (only_keys(doc, "EndpointPickerConfig", keys, err, errlen) != 0) {
        return -EINVAL;
    }
    if (json_get_string(doc, "apiVersion", &api, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "%s%s", msg, "");
    }
    if (strcmp(api, API_VERSION_LEGACY) == 0) {
        log_warn("EndpointPickerConfig apiVersion %s is deprecated, use %s", api, API_VERSION);
    } else if (strcmp(api, API_VERSION) != 0) {
        return fail(err, errlen, "apiVersion: \"%s\" is not %s", api,
                    API_VERSION " (or " API_VERSION_LEGACY ")");
    }
    if (json_get_string(doc, "kind", &kind, msg, sizeof(msg)) != 0) {
        return fail(err, errlen, "%s%s", msg, "");
    }
    if (strcmp(kind, "EndpointPickerConfig") != 0) {
        return fail(err, errlen, "kind: \"%s\" is not %s", kind, "EndpointPickerConfig");
    }
    return check_sections(doc, err, errlen);
}

static void fill_needs(struct epp_sched *s)
{
    struct epp_sched_needs *nd = &s->needs;
    const struct plugin *precise = NULL;
    nd->block_size = 16;
    nd->hash_seed_text = "";
    nd->pd = s->handler->ops != &handler_single_ops;
    for (int i = 0; i < s->n_profiles; i++) {
        for (int j = 0; j < s->profiles[i].n_scorers; j++) {
            const struct plugin *p = s->profiles[i].scorers[j].p;
            precise = !precise && p->ops == &scorer_precise_ops ? p : precise;
            nd->approximate = nd->approximate || p->ops == &scorer_prefix_ops;
            nd->session_affinity = nd->session_affinity || p->ops == &scorer_session_ops;
        }
    }
    if (precise) {
        precise_fill_needs(precise, nd);
    }
    for (int i = 0; !s->approx && i < s->n_plugins; i++) {
        s->approx = prefix_is_approx(s->plugins[i]) ? s->plugins[i] : NULL;
    }
}

/* Loads doc into s (which holds only its metrics so far). */
static int sched_load(struct epp_sched *s, struct json_object *doc, char *err, size_t errlen)
{
    int rc = check_header(doc, err, errlen);
    if (rc == 0) {
        rc = load_plugins(s, doc, err, errlen);
    }
    if (rc == 0) {
        rc = load_profiles(s, doc, err, errlen);
    }
    if (rc == 0) {
        rc = finish_profiles(s, err, errlen);
    }
    if (rc == 0) {
        rc = load_saturation(s, doc, err, errlen);
    }
    if (rc == 0) {
        fill_needs(s);
    }
    if (rc == -ENOMEM && err && !*err) {
        snprintf(err, errlen, "out of memory");
    }
    return rc;
}

int sched_load_text(struct epp_sched *s, const char *text, size_t len, char *err, size_t errlen)
{
    struct json_object *doc = NULL;
    char msg[256];
    if (!text) {
        text = default_config;
        len = strlen(default_config);
    }
    if (yaml_parse_one(text, len, &doc, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "EndpointPickerConfig: %s", msg);
        return -EINVAL;
    }
    if (!doc) {
        snprintf(err, errlen, "EndpointPickerConfig: the document is empty");
        return -EINVAL;
    }
    int rc = sched_load(s, doc, err, errlen);
    json_object_put(doc);
    return rc;
}

void sched_unload(struct epp_sched *s)
{
    for (int i = 0; s->profiles && i < s->n_profiles; i++) {
        free(s->profiles[i].name);
        free(s->profiles[i].filters);
        free(s->profiles[i].scorers);
    }
    free(s->profiles);
    for (int i = 0; i < s->n_plugins; i++) {
        plugin_free(s->plugins[i]);
    }
    free(s->plugins);
}
