/*
 * Parsing and validation of InferencePool / InferenceModel objects (see spec.h). Every check
 * reports the full field path, so a condition message can say exactly what to fix. Parsing
 * continues after an error, to report every problem at once.
 */
#include "operator/controller/spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/json.h"
#include "lib/kube/validate.h"
#include "operator/controller/eppconfig.h"

/* ---- errors ---- */

void spec_errors_init(struct spec_errors *errs)
{
    memset(errs, 0, sizeof(*errs));
}

void spec_errors_add(struct spec_errors *errs, const char *field, const char *fmt, ...)
{
    if (!errs) {
        return;
    }
    if (errs->n >= SPEC_MAX_ERRORS) {
        errs->dropped++;
        return;
    }
    struct spec_error *e = &errs->e[errs->n++];
    snprintf(e->field, sizeof(e->field), "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

int spec_errors_has(const struct spec_errors *errs, const char *field)
{
    for (int i = 0; errs && i < errs->n; i++) {
        if (strcmp(errs->e[i].field, field) == 0) {
            return 1;
        }
    }
    return 0;
}

size_t spec_errors_format(const struct spec_errors *errs, char *out, size_t outlen)
{
    size_t need = 0;
    if (outlen > 0) {
        out[0] = '\0';
    }
    for (int i = 0; i < errs->n; i++) {
        int w = snprintf(outlen > need ? out + need : NULL, outlen > need ? outlen - need : 0,
                         "%s%s%s%s", i ? "; " : "", errs->e[i].field,
                         errs->e[i].field[0] ? ": " : "", errs->e[i].message);
        if (w > 0) {
            need += (size_t)w;
        }
    }
    if (errs->dropped > 0) {
        int w = snprintf(outlen > need ? out + need : NULL, outlen > need ? outlen - need : 0,
                         " (and %d more)", errs->dropped);
        if (w > 0) {
            need += (size_t)w;
        }
    }
    return need;
}

/* ---- names ---- */

static const char *const role_labels[] = {"prefill", "decode", "both"};
static const char *const deploy_types[] = {"Unified", "Disaggregated", "MultiNode", "DaemonSet"};
static const char *const model_formats[] = {"gguf", "safetensors"};
static const char *const criticalities[] = {"Critical", "Standard", "Sheddable"};
static const char *const routing_types[] = {"Dynamic", "RoundRobin"};
static const char *const kv_dtypes[] = {"auto", "float32",  "float16", "bfloat16",
                                        "fp8",  "fp8_e4m3", "fp8_e5m2"};
static const char *const connector_types[] = {"nixlv2"};
static const char *const selector_ops[] = {"In", "NotIn", "Exists", "DoesNotExist"};
static const char *const toleration_ops[] = {"Equal", "Exists"};
static const char *const taint_effects[] = {"NoSchedule", "PreferNoSchedule", "NoExecute"};

const char *spec_role_label(enum spec_role role)
{
    return (unsigned)role < ARRAY_SIZE(role_labels) ? role_labels[role] : "unknown";
}

const char *spec_deploy_type_name(enum spec_deploy_type type)
{
    return (unsigned)type < ARRAY_SIZE(deploy_types) ? deploy_types[type] : "unknown";
}

const char *spec_model_format_name(enum spec_model_format format)
{
    return (unsigned)format < ARRAY_SIZE(model_formats) ? model_formats[format] : "unknown";
}

const char *spec_criticality_name(enum spec_criticality c)
{
    return (unsigned)c < ARRAY_SIZE(criticalities) ? criticalities[c] : "unknown";
}

/* ---- the parse context: current field path and the error list ---- */

struct ctx {
    struct spec_errors *errs;
    char path[160];
    size_t len;
    int failed; /* errors added through this context */
};

static void ctx_init(struct ctx *c, struct spec_errors *errs)
{
    c->errs = errs;
    c->path[0] = '\0';
    c->len = 0;
    c->failed = 0;
}

/* Appends ".key" (or "key" at the root); returns the previous length for ctx_pop. */
static size_t ctx_push(struct ctx *c, const char *key)
{
    size_t old = c->len;
    int w = snprintf(c->path + c->len, sizeof(c->path) - c->len, "%s%s", c->len ? "." : "", key);
    if (w > 0) {
        c->len += (size_t)w;
        if (c->len >= sizeof(c->path)) {
            c->len = sizeof(c->path) - 1;
        }
    }
    return old;
}

static size_t ctx_push_index(struct ctx *c, size_t i)
{
    size_t old = c->len;
    int w = snprintf(c->path + c->len, sizeof(c->path) - c->len, "[%zu]", i);
    if (w > 0) {
        c->len += (size_t)w;
        if (c->len >= sizeof(c->path)) {
            c->len = sizeof(c->path) - 1;
        }
    }
    return old;
}

static void ctx_pop(struct ctx *c, size_t old)
{
    c->len = old;
    c->path[old] = '\0';
}

/* Adds an error for field path.key (key NULL: the current path). */
static void TANDEM_PRINTF(3, 4) ctx_err(struct ctx *c, const char *key, const char *fmt, ...)
{
    char field[sizeof(c->path) + 64];
    if (key) {
        snprintf(field, sizeof(field), "%s%s%s", c->path, c->len ? "." : "", key);
    } else {
        snprintf(field, sizeof(field), "%s", c->path);
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    spec_errors_add(c->errs, field, "%s", msg);
    c->failed++;
}

/* Member of o, or NULL when o is not an object or the member is absent or null. */
static struct json_object *member(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v)) {
        return NULL;
    }
    return v;
}

/* Object member: 0 with *out (NULL when absent), -EINVAL on a wrong type. */
static int get_object(struct ctx *c, struct json_object *o, const char *key,
                      struct json_object **out)
{
    struct json_object *v = member(o, key);
    *out = NULL;
    if (!v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_object)) {
        ctx_err(c, key, "expected object, got %s", json_type_label(v));
        return -EINVAL;
    }
    *out = v;
    return 0;
}

static int get_array(struct ctx *c, struct json_object *o, const char *key,
                     struct json_object **out)
{
    struct json_object *v = member(o, key);
    *out = NULL;
    if (!v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_array)) {
        ctx_err(c, key, "expected array, got %s", json_type_label(v));
        return -EINVAL;
    }
    *out = v;
    return 0;
}

/* String member; def when absent. */
static int get_string(struct ctx *c, struct json_object *o, const char *key, const char *def,
                      const char **out)
{
    struct json_object *v = member(o, key);
    *out = def;
    if (!v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_string)) {
        ctx_err(c, key, "expected string, got %s", json_type_label(v));
        return -EINVAL;
    }
    *out = json_object_get_string(v);
    return 0;
}

/* An integer from a JSON value (integral doubles accepted): 0, or -EINVAL. */
static int as_int64(struct json_object *v, int64_t *out)
{
    if (json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
        return 0;
    }
    if (json_object_is_type(v, json_type_double)) {
        double d = json_object_get_double(v);
        if (isfinite(d) && d == floor(d) && d >= -9.2e18 && d <= 9.2e18) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return -EINVAL;
}

/* Integer member in [min, max]; def when absent. *out is def on error. */
static int get_int64(struct ctx *c, struct json_object *o, const char *key, int64_t def,
                     int64_t min, int64_t max, int64_t *out)
{
    struct json_object *v = member(o, key);
    *out = def;
    if (!v) {
        return 0;
    }
    int64_t x;
    if (as_int64(v, &x) != 0) {
        ctx_err(c, key, "expected integer, got %s", json_type_label(v));
        return -EINVAL;
    }
    if (x < min) {
        ctx_err(c, key, "must be >= %lld", (long long)min);
        return -EINVAL;
    }
    if (x > max) {
        ctx_err(c, key, "must be <= %lld", (long long)max);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

static int get_int(struct ctx *c, struct json_object *o, const char *key, int def, int min, int max,
                   int *out)
{
    int64_t x;
    int rc = get_int64(c, o, key, def, min, max, &x);
    *out = (int)x;
    return rc;
}

static int get_bool(struct ctx *c, struct json_object *o, const char *key, int def, int *out)
{
    struct json_object *v = member(o, key);
    *out = def;
    if (!v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_boolean)) {
        ctx_err(c, key, "expected boolean, got %s", json_type_label(v));
        return -EINVAL;
    }
    *out = json_object_get_boolean(v) ? 1 : 0;
    return 0;
}

/* Number member in [min, max] (min exclusive when excl_min). */
static int get_double(struct ctx *c, struct json_object *o, const char *key, double min,
                      int excl_min, double max, struct spec_opt_double *out)
{
    struct json_object *v = member(o, key);
    out->set = 0;
    out->value = 0;
    if (!v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int)) {
        ctx_err(c, key, "expected number, got %s", json_type_label(v));
        return -EINVAL;
    }
    double d = json_object_get_double(v);
    if (!isfinite(d)) {
        ctx_err(c, key, "must be a finite number");
        return -EINVAL;
    }
    if (excl_min ? d <= min : d < min) {
        ctx_err(c, key, "must be %s %g", excl_min ? ">" : ">=", min);
        return -EINVAL;
    }
    if (d > max) {
        ctx_err(c, key, "must be <= %g", max);
        return -EINVAL;
    }
    out->set = 1;
    out->value = d;
    return 0;
}

/* Enumerated string member; *out = index of the value, or def when absent. */
static int get_enum(struct ctx *c, struct json_object *o, const char *key,
                    const char *const *values, size_t n, int def, int *out)
{
    const char *s;
    *out = def;
    if (get_string(c, o, key, NULL, &s) != 0) {
        return -EINVAL;
    }
    if (!s) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, values[i]) == 0) {
            *out = (int)i;
            return 0;
        }
    }
    char list[256];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < n && used < sizeof(list); i++) {
        int w = snprintf(list + used, sizeof(list) - used, "%s\"%s\"", i ? ", " : "", values[i]);
        if (w > 0) {
            used += (size_t)w;
        }
    }
    ctx_err(c, key, "unsupported value \"%.64s\": supported values: %s", s, list);
    return -EINVAL;
}

/* ---- shared Kubernetes types ---- */

/* An object of string → string whose keys are label keys (and values label values when
 * label_values). */
static void check_string_map(struct ctx *c, struct json_object *map, int label_values,
                             size_t max_entries)
{
    size_t count = 0;
    json_object_object_foreach(map, k, v)
    {
        count++;
        if (!kube_valid_label_key(k)) {
            ctx_err(c, k,
                    "invalid label key (a DNS subdomain prefix and '/' are optional; the "
                    "name is at most 63 alphanumerics, '-', '_' or '.')");
        }
        if (!v || !json_object_is_type(v, json_type_string)) {
            ctx_err(c, k, "expected string, got %s", json_type_label(v));
        } else if (label_values && !kube_valid_label_value(json_object_get_string(v))) {
            ctx_err(c, k,
                    "invalid label value \"%.64s\" (at most 63 alphanumerics, '-', '_' or "
                    "'.', starting and ending with an alphanumeric)",
                    json_object_get_string(v));
        }
    }
    if (count > max_entries) {
        ctx_err(c, NULL, "must have at most %zu entries", max_entries);
    }
}

/* A LabelSelector member. With require_terms, a selector without any term is an error (it would
 * select every pod). */
static void parse_selector(struct ctx *c, struct json_object *o, const char *key,
                           struct spec_selector *out, int *present, int require_terms)
{
    struct json_object *sel;
    int before = c->failed;
    memset(out, 0, sizeof(*out));
    if (present) {
        *present = 0;
    }
    if (get_object(c, o, key, &sel) != 0 || !sel) {
        return;
    }
    if (present) {
        *present = 1;
    }
    size_t old = ctx_push(c, key);
    struct json_object *labels, *exprs;
    if (get_object(c, sel, "matchLabels", &labels) == 0 && labels) {
        size_t o2 = ctx_push(c, "matchLabels");
        check_string_map(c, labels, 1, 64);
        ctx_pop(c, o2);
        out->match_labels = labels;
    }
    if (get_array(c, sel, "matchExpressions", &exprs) == 0 && exprs) {
        size_t o2 = ctx_push(c, "matchExpressions");
        size_t n = json_object_array_length(exprs);
        if (n > 16) {
            ctx_err(c, NULL, "must have at most 16 items");
        }
        int ok = 1;
        for (size_t i = 0; i < n; i++) {
            struct json_object *e = json_object_array_get_idx(exprs, i);
            size_t o3 = ctx_push_index(c, i);
            int item_before = c->failed;
            if (!e || !json_object_is_type(e, json_type_object)) {
                ctx_err(c, NULL, "expected object, got %s", json_type_label(e));
                ctx_pop(c, o3);
                ok = 0;
                continue;
            }
            const char *k;
            int op;
            struct json_object *values;
            get_string(c, e, "key", NULL, &k);
            if (!member(e, "key")) {
                ctx_err(c, "key", "required field is missing");
            } else if (k && !kube_valid_label_key(k)) {
                ctx_err(c, "key", "invalid label key \"%.64s\"", k);
            }
            if (!member(e, "operator")) {
                ctx_err(c, "operator", "required field is missing");
            }
            get_enum(c, e, "operator", selector_ops, ARRAY_SIZE(selector_ops), -1, &op);
            get_array(c, e, "values", &values);
            size_t nv = values ? json_object_array_length(values) : 0;
            for (size_t j = 0; j < nv; j++) {
                struct json_object *v = json_object_array_get_idx(values, j);
                if (!v || !json_object_is_type(v, json_type_string) ||
                    !kube_valid_label_value(json_object_get_string(v))) {
                    size_t o4 = ctx_push(c, "values");
                    size_t o5 = ctx_push_index(c, j);
                    ctx_err(c, NULL, "must be a valid label value");
                    ctx_pop(c, o5);
                    ctx_pop(c, o4);
                }
            }
            if ((op == 0 || op == 1) && nv == 0) {
                ctx_err(c, "values", "must be non-empty when operator is %s", selector_ops[op]);
            } else if ((op == 2 || op == 3) && nv > 0) {
                ctx_err(c, "values", "must be empty when operator is %s", selector_ops[op]);
            }
            if (c->failed != item_before) {
                ok = 0;
            }
            ctx_pop(c, o3);
        }
        ctx_pop(c, o2);
        if (ok) {
            out->match_expressions = exprs;
        }
    }
    size_t terms = (out->match_labels ? (size_t)json_object_object_length(out->match_labels) : 0) +
                   (out->match_expressions ? json_object_array_length(out->match_expressions) : 0);
    if (require_terms && terms == 0 && c->failed == before) {
        ctx_err(c, NULL,
                "must have matchLabels or matchExpressions (an empty selector selects every pod)");
    }
    ctx_pop(c, old);
}

static int str_in_array(struct json_object *arr, const char *s)
{
    size_t n = arr ? json_object_array_length(arr) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *v = json_object_array_get_idx(arr, i);
        if (v && json_object_is_type(v, json_type_string) &&
            strcmp(json_object_get_string(v), s) == 0) {
            return 1;
        }
    }
    return 0;
}

static const char *label_of(struct json_object *labels, const char *key)
{
    struct json_object *v = member(labels, key);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

int spec_selector_matches(const struct spec_selector *sel, struct json_object *labels)
{
    if (sel->match_labels) {
        json_object_object_foreach(sel->match_labels, k, v)
        {
            const char *have = label_of(labels, k);
            if (!have || !v || strcmp(have, json_object_get_string(v)) != 0) {
                return 0;
            }
        }
    }
    size_t n = sel->match_expressions ? json_object_array_length(sel->match_expressions) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(sel->match_expressions, i);
        const char *key = json_object_get_string(member(e, "key"));
        const char *op = json_object_get_string(member(e, "operator"));
        struct json_object *values = member(e, "values");
        if (!key || !op) {
            return 0;
        }
        const char *have = label_of(labels, key);
        if (strcmp(op, "In") == 0) {
            if (!have || !str_in_array(values, have)) {
                return 0;
            }
        } else if (strcmp(op, "NotIn") == 0) {
            if (have && str_in_array(values, have)) {
                return 0;
            }
        } else if (strcmp(op, "Exists") == 0) {
            if (!have) {
                return 0;
            }
        } else if (strcmp(op, "DoesNotExist") == 0) {
            if (have) {
                return 0;
            }
        } else {
            return 0;
        }
    }
    return 1;
}

static int set_label(struct json_object *labels, const char *key, const char *value)
{
    struct json_object *s = json_object_new_string(value);
    if (!s) {
        return -ENOMEM;
    }
    if (json_object_object_add(labels, key, s) != 0) {
        json_object_put(s);
        return -ENOMEM;
    }
    return 0;
}

int spec_selector_synthesize(const struct spec_selector *sel, struct json_object *labels)
{
    if (sel->match_labels) {
        json_object_object_foreach(sel->match_labels, k, v)
        {
            if (!member(labels, k) && v && set_label(labels, k, json_object_get_string(v)) != 0) {
                return -ENOMEM;
            }
        }
    }
    size_t n = sel->match_expressions ? json_object_array_length(sel->match_expressions) : 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(sel->match_expressions, i);
        const char *key = json_object_get_string(member(e, "key"));
        const char *op = json_object_get_string(member(e, "operator"));
        struct json_object *values = member(e, "values");
        if (!key || !op || member(labels, key)) {
            continue;
        }
        const char *value = NULL;
        if (strcmp(op, "In") == 0 && values && json_object_array_length(values) > 0) {
            value = json_object_get_string(json_object_array_get_idx(values, 0));
        } else if (strcmp(op, "Exists") == 0) {
            value = "";
        }
        if (value && set_label(labels, key, value) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

/* nvidia.com/gpu in resources.limits: the count, or -1 when absent or not a whole number. */
static long long gpu_limit(struct json_object *res)
{
    struct json_object *q = member(member(res, "limits"), "nvidia.com/gpu");
    long double v = -1;
    if (q && json_object_is_type(q, json_type_int)) {
        v = (long double)json_object_get_int64(q);
    } else if (q && json_object_is_type(q, json_type_string) &&
               kube_parse_quantity(json_object_get_string(q), &v) != 0) {
        v = -1;
    }
    return v >= 0 && v == (long long)v ? (long long)v : -1;
}

/* The engine needs one GPU per tensor-parallel rank: a pod limited to fewer cannot start its
 * ranks (the CPU backend's ranks need none, so no limit is no error). */
static void check_gpu_limits(struct ctx *c, const struct spec_model *m)
{
    const int tp = spec_model_tp_size(m);
    struct {
        const char *key;
        struct json_object *res;
    } all[] = {{"resources", m->resources},
               {"deployment.prefillWorkers.resources", m->deployment.prefill.resources},
               {"deployment.decodeWorkers.resources", m->deployment.decode.resources},
               {"deployment.unifiedWorkers.resources", m->deployment.unified.resources},
               {"deployment.daemonSet.resources", m->deployment.daemon.resources}};
    for (size_t i = 0; i < ARRAY_SIZE(all); i++) {
        long long g = gpu_limit(all[i].res);
        if (g >= 0 && g < tp) {
            ctx_err(c, all[i].key,
                    "limits nvidia.com/gpu %lld is fewer than the tensor parallel size %d: the "
                    "engine runs one rank per GPU",
                    g, tp);
        }
    }
}

/* A core/v1 ResourceRequirements: limits/requests maps of resource name → quantity. */
static void parse_resources(struct ctx *c, struct json_object *o, const char *key,
                            struct json_object **out)
{
    struct json_object *res;
    *out = NULL;
    if (get_object(c, o, key, &res) != 0 || !res) {
        return;
    }
    size_t old = ctx_push(c, key);
    int before = c->failed;
    static const char *const parts[] = {"limits", "requests"};
    for (size_t p = 0; p < ARRAY_SIZE(parts); p++) {
        struct json_object *map;
        if (get_object(c, res, parts[p], &map) != 0 || !map) {
            continue;
        }
        size_t o2 = ctx_push(c, parts[p]);
        json_object_object_foreach(map, name, q)
        {
            if (!kube_valid_label_key(name)) {
                ctx_err(c, name, "invalid resource name");
            }
            long double value = 0;
            if (q && json_object_is_type(q, json_type_string)) {
                if (kube_parse_quantity(json_object_get_string(q), &value) != 0) {
                    ctx_err(c, name, "invalid quantity \"%.64s\" (e.g. 500m, 2, 4Gi)",
                            json_object_get_string(q));
                    continue;
                }
            } else if (q && json_object_is_type(q, json_type_int)) {
                value = (long double)json_object_get_int64(q);
            } else {
                ctx_err(c, name, "expected quantity (string or integer), got %s",
                        json_type_label(q));
                continue;
            }
            if (value < 0) {
                ctx_err(c, name, "must be >= 0");
            }
        }
        ctx_pop(c, o2);
    }
    /* requests may not exceed limits (the API server rejects such a pod template). */
    struct json_object *limits = member(res, "limits"), *requests = member(res, "requests");
    if (c->failed == before && limits && requests) {
        json_object_object_foreach(requests, name, q)
        {
            struct json_object *lim = member(limits, name);
            long double rv = 0, lv = 0;
            if (!lim) {
                continue;
            }
            if (json_object_is_type(q, json_type_string)) {
                kube_parse_quantity(json_object_get_string(q), &rv);
            } else {
                rv = (long double)json_object_get_int64(q);
            }
            if (json_object_is_type(lim, json_type_string)) {
                kube_parse_quantity(json_object_get_string(lim), &lv);
            } else {
                lv = (long double)json_object_get_int64(lim);
            }
            if (rv > lv) {
                size_t o2 = ctx_push(c, "requests");
                ctx_err(c, name, "must be less than or equal to the %s limit", name);
                ctx_pop(c, o2);
            }
        }
    }
    if (c->failed == before) {
        *out = res;
    }
    ctx_pop(c, old);
}

static void parse_tolerations(struct ctx *c, struct json_object *o, const char *key,
                              struct json_object **out)
{
    struct json_object *arr;
    *out = NULL;
    if (get_array(c, o, key, &arr) != 0 || !arr) {
        return;
    }
    size_t old = ctx_push(c, key);
    int before = c->failed;
    size_t n = json_object_array_length(arr);
    if (n > 32) {
        ctx_err(c, NULL, "must have at most 32 items");
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *t = json_object_array_get_idx(arr, i);
        size_t o2 = ctx_push_index(c, i);
        if (!t || !json_object_is_type(t, json_type_object)) {
            ctx_err(c, NULL, "expected object, got %s", json_type_label(t));
            ctx_pop(c, o2);
            continue;
        }
        const char *k, *value;
        int op, effect;
        int64_t secs;
        get_string(c, t, "key", "", &k);
        get_string(c, t, "value", "", &value);
        get_enum(c, t, "operator", toleration_ops, ARRAY_SIZE(toleration_ops), 0, &op);
        get_enum(c, t, "effect", taint_effects, ARRAY_SIZE(taint_effects), -1, &effect);
        get_int64(c, t, "tolerationSeconds", 0, INT64_MIN, INT64_MAX, &secs);
        if (k && k[0] && !kube_valid_label_key(k)) {
            ctx_err(c, "key", "invalid key \"%.64s\"", k);
        }
        if (k && !k[0] && op != 1) {
            ctx_err(c, "operator", "must be Exists when key is empty");
        }
        if (op == 1 && value && value[0]) {
            ctx_err(c, "value", "must be empty when operator is Exists");
        }
        if (value && !kube_valid_label_value(value)) {
            ctx_err(c, "value", "invalid value \"%.64s\"", value);
        }
        if (member(t, "tolerationSeconds") && effect != 2) {
            ctx_err(c, "effect", "must be NoExecute when tolerationSeconds is set");
        }
        ctx_pop(c, o2);
    }
    if (c->failed == before) {
        *out = arr;
    }
    ctx_pop(c, old);
}

static void parse_node_selector(struct ctx *c, struct json_object *o, const char *key,
                                struct json_object **out)
{
    struct json_object *map;
    *out = NULL;
    if (get_object(c, o, key, &map) != 0 || !map) {
        return;
    }
    size_t old = ctx_push(c, key);
    int before = c->failed;
    check_string_map(c, map, 1, 64);
    if (c->failed == before) {
        *out = map;
    }
    ctx_pop(c, old);
}

/* metadata.name/namespace/uid/generation. */
static void parse_metadata(struct ctx *c, struct json_object *obj, const char **name,
                           const char **ns, const char **uid, int64_t *generation)
{
    struct json_object *meta;
    size_t old = ctx_push(c, "metadata");
    *name = "";
    *ns = "default";
    *uid = "";
    *generation = 0;
    get_object(c, obj, "metadata", &meta);
    if (!meta) {
        ctx_err(c, NULL, "required field is missing");
        ctx_pop(c, old);
        return;
    }
    get_string(c, meta, "name", "", name);
    get_string(c, meta, "namespace", "default", ns);
    get_string(c, meta, "uid", "", uid);
    get_int64(c, meta, "generation", 0, 0, INT64_MAX, generation);
    if (!member(meta, "name")) {
        ctx_err(c, "name", "required field is missing");
    } else if (!(*name)[0]) {
        ctx_err(c, "name", "must not be empty");
    }
    if ((*ns)[0] == '\0') {
        *ns = "default";
    } else if (!kube_valid_dns_label(*ns)) {
        ctx_err(c, "namespace", "must be a DNS-1123 label");
    }
    ctx_pop(c, old);
}

/* ---- InferencePool ---- */

static void parse_routing(struct ctx *c, struct json_object *spec, struct spec_pool *p)
{
    struct json_object *rp, *epc, *lb, *weights;
    int type;
    p->routing.type = ROUTING_DYNAMIC;
    p->routing.scheduler_profile = "default";
    p->routing.cm_key = "config.yaml";
    p->routing.w_cache_hit = 3;
    p->routing.w_load = 2;
    p->routing.w_latency = 2;
    if (get_object(c, spec, "routingPolicy", &rp) != 0 || !rp) {
        return;
    }
    size_t old = ctx_push(c, "routingPolicy");
    get_enum(c, rp, "type", routing_types, ARRAY_SIZE(routing_types), 0, &type);
    p->routing.type = (enum spec_routing_type)type;
    get_string(c, rp, "schedulerProfile", "default", &p->routing.scheduler_profile);
    p->routing.has_scheduler_profile = member(rp, "schedulerProfile") != NULL;
    if (p->routing.scheduler_profile && (!p->routing.scheduler_profile[0] ||
                                         !kube_valid_label_value(p->routing.scheduler_profile))) {
        ctx_err(c, "schedulerProfile",
                "must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an "
                "alphanumeric");
    }

    get_object(c, rp, "endpointPickerConfig", &epc);
    if (epc) {
        size_t o2 = ctx_push(c, "endpointPickerConfig");
        struct json_object *inl = member(epc, "inline");
        struct json_object *ref;
        get_object(c, epc, "configMapRef", &ref);
        if (inl) {
            if (json_object_is_type(inl, json_type_object)) {
                p->routing.inline_obj = inl;
            } else if (json_object_is_type(inl, json_type_string)) {
                p->routing.inline_text = json_object_get_string(inl);
            } else {
                ctx_err(c, "inline", "expected object or string (YAML), got %s",
                        json_type_label(inl));
            }
        }
        if (ref) {
            size_t o3 = ctx_push(c, "configMapRef");
            get_string(c, ref, "name", NULL, &p->routing.cm_name);
            get_string(c, ref, "key", "config.yaml", &p->routing.cm_key);
            if (!p->routing.cm_name) {
                ctx_err(c, "name", "required field is missing");
            } else if (!kube_valid_dns_subdomain(p->routing.cm_name)) {
                ctx_err(c, "name", "must be a DNS subdomain (a ConfigMap name)");
                p->routing.cm_name = NULL;
            }
            const char *k = p->routing.cm_key;
            if (k && (!k[0] || strlen(k) > 253 ||
                      strspn(k, "abcdefghijklmnopqrstuvwxyz"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                "0123456789-._") != strlen(k) ||
                      strcmp(k, ".") == 0 || strcmp(k, "..") == 0)) {
                ctx_err(c, "key", "must be a ConfigMap key (alphanumerics, '-', '_' or '.')");
            }
            ctx_pop(c, o3);
        }
        if (inl && ref) {
            ctx_err(c, NULL, "set either inline or configMapRef, not both");
        } else if (!inl && !ref) {
            ctx_err(c, NULL, "set inline or configMapRef");
        }
        ctx_pop(c, o2);
    }

    get_object(c, rp, "loadBalancing", &lb);
    if (lb) {
        size_t o2 = ctx_push(c, "loadBalancing");
        get_object(c, lb, "weights", &weights);
        if (weights) {
            size_t o3 = ctx_push(c, "weights");
            p->routing.has_weights = 1;
            get_int(c, weights, "cacheHit", 3, 0, 100, &p->routing.w_cache_hit);
            get_int(c, weights, "load", 2, 0, 100, &p->routing.w_load);
            get_int(c, weights, "latency", 2, 0, 100, &p->routing.w_latency);
            if (p->routing.type == ROUTING_DYNAMIC && p->routing.w_cache_hit == 0 &&
                p->routing.w_load == 0 && p->routing.w_latency == 0) {
                ctx_err(c, NULL, "at least one weight must be > 0");
            }
            ctx_pop(c, o3);
        }
        ctx_pop(c, o2);
    }
    if (epc && lb) {
        ctx_err(c, "loadBalancing",
                "cannot be combined with endpointPickerConfig (set the weights in that config)");
    }
    if (p->routing.type == ROUTING_ROUND_ROBIN) {
        if (epc) {
            ctx_err(c, "type", "RoundRobin cannot be combined with endpointPickerConfig");
        }
        if (lb) {
            ctx_err(c, "type", "RoundRobin does not score pods: remove loadBalancing");
        }
    }
    ctx_pop(c, old);
}

static void parse_disaggregation(struct ctx *c, struct json_object *spec, struct spec_pool *p)
{
    struct json_object *d, *conn;
    p->disagg.threshold = 512;
    p->disagg.connector_type = "nixlv2";
    if (get_object(c, spec, "disaggregation", &d) != 0 || !d) {
        return;
    }
    size_t old = ctx_push(c, "disaggregation");
    get_bool(c, d, "enabled", 0, &p->disagg.enabled);
    parse_selector(c, d, "prefillSelector", &p->disagg.prefill_selector,
                   &p->disagg.has_prefill_selector, 1);
    parse_selector(c, d, "decodeSelector", &p->disagg.decode_selector,
                   &p->disagg.has_decode_selector, 1);
    get_int64(c, d, "threshold", 512, 0, 1048576, &p->disagg.threshold);
    get_object(c, d, "connector", &conn);
    if (conn) {
        size_t o2 = ctx_push(c, "connector");
        int type;
        get_enum(c, conn, "type", connector_types, ARRAY_SIZE(connector_types), 0, &type);
        p->disagg.connector_type = connector_types[type];
        get_object(c, conn, "config", &p->disagg.connector_config);
        ctx_pop(c, o2);
    }
    ctx_pop(c, old);
}

static void parse_health(struct ctx *c, struct json_object *spec, struct spec_pool *p)
{
    struct json_object *h;
    p->health.endpoint = "/health";
    p->health.interval_s = 5;
    p->health.timeout_s = 2;
    p->health.success_threshold = 1;
    p->health.failure_threshold = 3;
    if (get_object(c, spec, "healthCheck", &h) != 0 || !h) {
        return;
    }
    size_t old = ctx_push(c, "healthCheck");
    get_string(c, h, "endpoint", "/health", &p->health.endpoint);
    const char *ep = p->health.endpoint;
    int bad = !ep || ep[0] != '/' || strlen(ep) > 1024;
    for (const char *q = ep; !bad && *q; q++) {
        if ((unsigned char)*q <= ' ' || *q == 0x7f) {
            bad = 1;
        }
    }
    if (bad) {
        ctx_err(c, "endpoint", "must be an absolute HTTP path without spaces (e.g. /health)");
        p->health.endpoint = "/health";
    }
    get_int(c, h, "intervalSeconds", 5, 1, 3600, &p->health.interval_s);
    get_int(c, h, "timeoutSeconds", 2, 1, 3600, &p->health.timeout_s);
    get_int(c, h, "successThreshold", 1, 1, 100, &p->health.success_threshold);
    get_int(c, h, "failureThreshold", 3, 1, 100, &p->health.failure_threshold);
    ctx_pop(c, old);
}

static void parse_autoscaling(struct ctx *c, struct json_object *spec, struct spec_pool *p)
{
    struct json_object *a;
    if (get_object(c, spec, "autoscaling", &a) != 0 || !a) {
        return;
    }
    size_t old = ctx_push(c, "autoscaling");
    p->autoscaling.enabled = 1;
    get_int(c, a, "minReplicas", 1, 1, 10000, &p->autoscaling.min_replicas);
    if (!member(a, "maxReplicas")) {
        ctx_err(c, "maxReplicas", "required field is missing");
    }
    get_int(c, a, "maxReplicas", 1, 1, 10000, &p->autoscaling.max_replicas);
    if (member(a, "maxReplicas") && p->autoscaling.max_replicas < p->autoscaling.min_replicas) {
        ctx_err(c, "maxReplicas", "must be >= minReplicas (%d)", p->autoscaling.min_replicas);
    }
    get_int(c, a, "targetQueueDepth", 0, 1, 100000, &p->autoscaling.target_queue_depth);
    get_int(c, a, "targetKVCacheUtilization", 0, 1, 100, &p->autoscaling.target_kv_util);
    get_int(c, a, "targetCPUUtilization", 0, 1, 100, &p->autoscaling.target_cpu_util);
    if (!member(a, "targetQueueDepth") && !member(a, "targetKVCacheUtilization") &&
        !member(a, "targetCPUUtilization")) {
        ctx_err(c, NULL,
                "set at least one of targetQueueDepth, targetKVCacheUtilization, "
                "targetCPUUtilization");
    }
    ctx_pop(c, old);
}

static void parse_epp(struct ctx *c, struct json_object *spec, struct spec_pool *p)
{
    struct json_object *e;
    p->epp.replicas = 1;
    if (get_object(c, spec, "epp", &e) != 0 || !e) {
        return;
    }
    size_t old = ctx_push(c, "epp");
    get_int(c, e, "replicas", 1, 0, 100, &p->epp.replicas);
    get_string(c, e, "image", NULL, &p->epp.image);
    if (p->epp.image &&
        (!p->epp.image[0] || strlen(p->epp.image) > 1024 || strpbrk(p->epp.image, " \t\r\n"))) {
        ctx_err(c, "image", "must be a non-empty image reference without spaces");
        p->epp.image = NULL;
    }
    parse_resources(c, e, "resources", &p->epp.resources);
    ctx_pop(c, old);
}

int spec_pool_parse(struct json_object *obj, struct spec_pool *out, struct spec_errors *errs)
{
    struct ctx c;
    memset(out, 0, sizeof(*out));
    ctx_init(&c, errs);
    out->obj = obj ? json_object_get(obj) : NULL;
    out->name = "";
    out->ns = "default";
    out->uid = "";
    out->target_port = 8000;
    out->routing.scheduler_profile = "default";
    out->routing.cm_key = "config.yaml";
    out->disagg.connector_type = "nixlv2";
    out->health.endpoint = "/health";
    if (!obj || !json_object_is_type(obj, json_type_object)) {
        ctx_err(&c, NULL, "expected an InferencePool object, got %s", json_type_label(obj));
        return -EINVAL;
    }
    parse_metadata(&c, obj, &out->name, &out->ns, &out->uid, &out->generation);
    if (out->name[0] &&
        (strlen(out->name) > SPEC_POOL_NAME_MAX || !kube_valid_dns1035_label(out->name))) {
        ctx_err(&c, "metadata.name",
                "must be a DNS-1035 label of at most %d characters (the EPP Service "
                "\"<name>-epp\" is named after it)",
                SPEC_POOL_NAME_MAX);
    }

    struct json_object *spec;
    get_object(&c, obj, "spec", &spec);
    if (!spec) {
        if (!member(obj, "spec")) {
            ctx_err(&c, "spec", "required field is missing");
        }
        return -EINVAL;
    }
    size_t old = ctx_push(&c, "spec");
    int sel_present;
    parse_selector(&c, spec, "selector", &out->selector, &sel_present, 1);
    if (!sel_present && !member(spec, "selector")) {
        ctx_err(&c, "selector", "required field is missing");
    }
    get_int(&c, spec, "targetPort", 8000, 1, 65535, &out->target_port);
    if (out->target_port == SPEC_ENGINE_PORT || out->target_port == SPEC_KV_EVENTS_PORT ||
        out->target_port == SPEC_KV_REPLAY_PORT || out->target_port == SPEC_KV_TRANSFER_PORT) {
        ctx_err(&c, "targetPort",
                "%d is used inside the pod by the agent (engine 8200, KV events 5557/5558, KV "
                "transfer 5600)",
                out->target_port);
    }
    parse_routing(&c, spec, out);
    parse_disaggregation(&c, spec, out);
    parse_health(&c, spec, out);
    parse_autoscaling(&c, spec, out);
    parse_epp(&c, spec, out);

    if (out->disagg.enabled && out->routing.type == ROUTING_DYNAMIC && !out->routing.inline_obj &&
        !out->routing.inline_text && !out->routing.cm_name) {
        if (out->routing.w_cache_hit == 0 && out->disagg.threshold > 0) {
            ctx_err(&c, "routingPolicy.loadBalancing.weights.cacheHit",
                    "must be > 0 when disaggregation.threshold > 0 (the prefill decision reads "
                    "the prefix-cache scorer)");
        }
        if (out->routing.has_scheduler_profile &&
            strcmp(out->routing.scheduler_profile, "prefill") == 0) {
            ctx_err(&c, "routingPolicy.schedulerProfile",
                    "must not be \"prefill\" when disaggregation is enabled (it names the "
                    "decode profile)");
        }
    }
    if (out->routing.type == ROUTING_ROUND_ROBIN && out->disagg.enabled) {
        ctx_err(&c, "routingPolicy.type",
                "RoundRobin cannot be used with disaggregation (the prefill decision needs "
                "prefix-cache scoring); use Dynamic");
    }
    /* The EPP's own pods must never be picked as model servers. */
    if (sel_present && (out->selector.match_labels || out->selector.match_expressions)) {
        struct json_object *epp_labels = spec_epp_pod_labels(out);
        if (!epp_labels) {
            ctx_pop(&c, old);
            return -ENOMEM;
        }
        if (spec_selector_matches(&out->selector, epp_labels)) {
            ctx_err(&c, "selector",
                    "also selects the pool's EPP pods; add a label of the model servers (e.g. "
                    "app: <name>)");
        }
        json_object_put(epp_labels);
    }
    ctx_pop(&c, old);

    /* An inline EndpointPickerConfig is validated now, so a bad one never reaches the EPP. */
    if (c.failed == 0 && (out->routing.inline_obj || out->routing.inline_text)) {
        int rc = eppconfig_check_inline(out, errs);
        if (rc == -ENOMEM) {
            return rc;
        }
        if (rc != 0) {
            c.failed++;
        }
    }
    return c.failed ? -EINVAL : 0;
}

void spec_pool_free(struct spec_pool *pool)
{
    if (pool->obj) {
        json_object_put(pool->obj);
    }
    memset(pool, 0, sizeof(*pool));
}

struct json_object *spec_epp_pod_labels(const struct spec_pool *pool)
{
    struct json_object *labels = json_object_new_object();
    if (!labels || set_label(labels, LABEL_NAME, "tandem-epp") != 0 ||
        set_label(labels, LABEL_COMPONENT, "endpoint-picker") != 0 ||
        set_label(labels, LABEL_MANAGED_BY, MANAGED_BY_OPERATOR) != 0 ||
        set_label(labels, LABEL_POOL, pool->name) != 0) {
        json_object_put(labels);
        return NULL;
    }
    return labels;
}

/* ---- InferenceModel ---- */

static int has_dotdot_segment(const char *path)
{
    const char *p = path;
    while (*p) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if ((len == 2 && p[0] == '.' && p[1] == '.') || (len == 1 && p[0] == '.')) {
            return 1;
        }
        if (!end) {
            break;
        }
        p = end + 1;
    }
    return 0;
}

static char *dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* The last segment of path (without trailing '/'), copied ("" when there is none); NULL on OOM. */
static char *last_segment(const char *path, size_t len)
{
    while (len > 0 && path[len - 1] == '/') {
        len--;
    }
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') {
        start--;
    }
    return dup_range(path + start, len - start);
}

static int valid_file_name(const char *s)
{
    if (!s || !s[0] || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strlen(s) > 255) {
        return 0;
    }
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._+") ==
           strlen(s);
}

/* Splits modelSource.storageUri into the volume it becomes. -ENOMEM or 0 (errors added). */
static int parse_storage_uri(struct ctx *c, struct spec_model *m)
{
    const char *uri = m->source.uri;
    const char *field = "storageUri";
    for (const char *q = uri; *q; q++) {
        if ((unsigned char)*q <= ' ' || *q == 0x7f) {
            ctx_err(c, field, "must not contain spaces or control characters");
            return 0;
        }
    }
    if (strlen(uri) > 2048) {
        ctx_err(c, field, "must be at most 2048 characters");
        return 0;
    }
    if (strncmp(uri, "file://", 7) == 0) {
        const char *path = uri + 7;
        m->source.kind = SOURCE_FILE;
        if (path[0] != '/') {
            ctx_err(c, field, "file:// needs an absolute path (file:///path/to/model)");
            return 0;
        }
        if (strpbrk(path, "?#") || has_dotdot_segment(path + 1)) {
            ctx_err(c, field, "file:// path must not contain '.', '..', '?' or '#'");
            return 0;
        }
        size_t len = strlen(path);
        while (len > 1 && path[len - 1] == '/') {
            len--;
        }
        m->source.host_path = dup_range(path, len);
        if (!m->source.host_path) {
            return -ENOMEM;
        }
        m->source.file_name = last_segment(path, len);
    } else if (strncmp(uri, "pvc://", 6) == 0) {
        const char *rest = uri + 6;
        const char *slash = strchr(rest, '/');
        size_t clen = slash ? (size_t)(slash - rest) : strlen(rest);
        m->source.kind = SOURCE_PVC;
        m->source.claim = dup_range(rest, clen);
        if (!m->source.claim) {
            return -ENOMEM;
        }
        if (!kube_valid_dns_subdomain(m->source.claim)) {
            ctx_err(c, field, "pvc://<claim>[/path]: \"%.64s\" is not a valid claim name",
                    m->source.claim);
            return 0;
        }
        const char *sub = slash ? slash + 1 : "";
        size_t slen = strlen(sub);
        while (slen > 0 && sub[slen - 1] == '/') {
            slen--;
        }
        m->source.sub_path = dup_range(sub, slen);
        if (!m->source.sub_path) {
            return -ENOMEM;
        }
        if (strpbrk(m->source.sub_path, "?#") || m->source.sub_path[0] == '/' ||
            strstr(m->source.sub_path, "//") || has_dotdot_segment(m->source.sub_path)) {
            ctx_err(c, field, "pvc:// path must be relative, without '.', '..', '//', '?' or '#'");
            return 0;
        }
        /* The whole claim is mounted as a directory named after the claim. */
        m->source.file_name = slen ? last_segment(m->source.sub_path, slen) : dup_range(rest, clen);
    } else if (strncmp(uri, "hf://", 5) == 0) {
        const char *rest = uri + 5;
        m->source.kind = SOURCE_HF;
        const char *s1 = strchr(rest, '/');
        if (!s1 || s1 == rest || !s1[1] || s1[1] == '/' || strpbrk(rest, "?#") ||
            has_dotdot_segment(rest)) {
            ctx_err(c, field, "hf:// needs hf://<org>/<repo>[/<file>]");
            return 0;
        }
        size_t len = strlen(rest);
        m->source.file_name = last_segment(rest, len);
    } else if (strncmp(uri, "http://", 7) == 0 || strncmp(uri, "https://", 8) == 0) {
        const char *rest = uri + (uri[4] == 's' ? 8 : 7);
        m->source.kind = SOURCE_HTTP;
        const char *slash = strchr(rest, '/');
        if (!slash || slash == rest) {
            ctx_err(c, field, "http(s):// needs a host and a path to the model file");
            return 0;
        }
        size_t plen = strcspn(slash, "?#");
        if (slash[plen - 1] == '/') {
            ctx_err(c, field, "http(s):// needs a host and a path to the model file");
            return 0;
        }
        m->source.file_name = last_segment(slash, plen);
    } else {
        ctx_err(c, field, "unsupported scheme: use file://, pvc://, hf://, http:// or https://");
        return 0;
    }
    if (!m->source.file_name) {
        return -ENOMEM;
    }
    if (!valid_file_name(m->source.file_name)) {
        ctx_err(c, field,
                "the last path segment must be a file or directory name (letters, digits, "
                "'-', '_', '.', '+')");
    }
    return 0;
}

static int parse_int_or_percent(struct ctx *c, struct json_object *o, const char *key,
                                struct spec_int_or_percent *out)
{
    struct json_object *v = member(o, key);
    if (!v) {
        return 0;
    }
    int64_t x;
    if (as_int64(v, &x) == 0) {
        if (x < 0 || x > 10000) {
            ctx_err(c, key, "must be between 0 and 10000");
            return -EINVAL;
        }
        out->is_percent = 0;
        out->value = (int)x;
        return 0;
    }
    if (json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        size_t n = strlen(s);
        int pct = 0;
        int ok = n >= 2 && n <= 4 && s[n - 1] == '%';
        for (size_t i = 0; ok && i + 1 < n; i++) {
            ok = s[i] >= '0' && s[i] <= '9';
            pct = pct * 10 + (s[i] - '0');
        }
        if (ok && pct <= 100 && !(n > 2 && s[0] == '0')) {
            out->is_percent = 1;
            out->value = pct;
            return 0;
        }
        ctx_err(c, key, "must be an integer or a percentage from 0%% to 100%%");
        return -EINVAL;
    }
    ctx_err(c, key, "expected integer or string, got %s", json_type_label(v));
    return -EINVAL;
}

static void parse_workers(struct ctx *c, struct json_object *dep, const char *key,
                          struct spec_workers *w)
{
    struct json_object *o;
    w->replicas = 1;
    if (get_object(c, dep, key, &o) != 0 || !o) {
        return;
    }
    w->present = 1;
    size_t old = ctx_push(c, key);
    get_int(c, o, "replicas", 1, 0, 10000, &w->replicas);
    parse_node_selector(c, o, "nodeSelector", &w->node_selector);
    parse_tolerations(c, o, "tolerations", &w->tolerations);
    parse_resources(c, o, "resources", &w->resources);
    ctx_pop(c, old);
}

/* deployment.daemonSet: the workers block of type DaemonSet, without replicas: a DaemonSet runs
 * one pod on each node its nodeSelector picks, so a replicas field is refused rather than ignored
 * (the CRD schema has none; this catches servers that do not prune). */
static void parse_daemon_set(struct ctx *c, struct json_object *dep, struct spec_workers *w)
{
    struct json_object *o;
    w->replicas = 0;
    if (get_object(c, dep, "daemonSet", &o) != 0 || !o) {
        return;
    }
    w->present = 1;
    size_t old = ctx_push(c, "daemonSet");
    if (member(o, "replicas")) {
        ctx_err(c, "replicas",
                "not allowed: a DaemonSet runs one pod on each node its nodeSelector picks");
    }
    parse_node_selector(c, o, "nodeSelector", &w->node_selector);
    parse_tolerations(c, o, "tolerations", &w->tolerations);
    parse_resources(c, o, "resources", &w->resources);
    ctx_pop(c, old);
}

static void parse_runtime(struct ctx *c, struct json_object *spec, struct spec_model *m)
{
    struct json_object *rt, *cfg;
    m->runtime.block_size = 16;
    m->runtime.kv_cache_dtype = "auto";
    m->runtime.enable_chunked_prefill = 1;
    if (get_object(c, spec, "runtime", &rt) != 0 || !rt) {
        return;
    }
    size_t old = ctx_push(c, "runtime");
    get_string(c, rt, "image", NULL, &m->runtime.image);
    if (m->runtime.image && (!m->runtime.image[0] || strlen(m->runtime.image) > 1024 ||
                             strpbrk(m->runtime.image, " \t\r\n"))) {
        ctx_err(c, "image", "must be a non-empty image reference without spaces");
        m->runtime.image = NULL;
    }
    get_object(c, rt, "config", &cfg);
    if (cfg) {
        size_t o2 = ctx_push(c, "config");
        int dtype, bs;
        struct spec_opt_double gmu;
        get_int(c, cfg, "maxModelLen", 0, 1, 16777216, &m->runtime.max_model_len);
        get_int(c, cfg, "maxNumSeqs", 0, 1, 65536, &m->runtime.max_num_seqs);
        get_int(c, cfg, "maxNumBatchedTokens", 0, 1, 16777216, &m->runtime.max_num_batched_tokens);
        get_int(c, cfg, "blockSize", 16, 1, 1024, &bs);
        if (bs != 8 && bs != 16 && bs != 32 && bs != 64 && bs != 128) {
            ctx_err(c, "blockSize", "must be one of 8, 16, 32, 64, 128");
            bs = 16;
        }
        m->runtime.block_size = bs;
        get_enum(c, cfg, "kvCacheDtype", kv_dtypes, ARRAY_SIZE(kv_dtypes), 0, &dtype);
        m->runtime.kv_cache_dtype = kv_dtypes[dtype];
        get_int(c, cfg, "tensorParallelSize", 0, 1, 64, &m->runtime.tensor_parallel_size);
        get_double(c, cfg, "gpuMemoryUtilization", 0, 1, 1, &gmu);
        m->runtime.gpu_memory_utilization = gmu.set ? gmu.value : 0;
        get_bool(c, cfg, "enableChunkedPrefill", 1, &m->runtime.enable_chunked_prefill);

        int mbt = m->runtime.max_num_batched_tokens, mml = m->runtime.max_model_len;
        if (mbt && mml && mbt < mml && !m->runtime.enable_chunked_prefill) {
            ctx_err(c, "maxNumBatchedTokens",
                    "must be >= maxModelLen (%d) unless enableChunkedPrefill is true (a prompt "
                    "of maxModelLen tokens could never be scheduled)",
                    mml);
        }
        if (mbt && m->runtime.max_num_seqs && mbt < m->runtime.max_num_seqs) {
            ctx_err(c, "maxNumBatchedTokens", "must be >= maxNumSeqs (%d)",
                    m->runtime.max_num_seqs);
        }
        ctx_pop(c, o2);
    }
    ctx_pop(c, old);
}

static void parse_targets(struct ctx *c, struct json_object *spec, struct spec_model *m)
{
    struct json_object *arr;
    if (get_array(c, spec, "targetModels", &arr) != 0 || !arr) {
        return;
    }
    size_t old = ctx_push(c, "targetModels");
    size_t n = json_object_array_length(arr);
    if (n > SPEC_MAX_TARGET_MODELS) {
        ctx_err(c, NULL, "must have at most %d items", SPEC_MAX_TARGET_MODELS);
        n = SPEC_MAX_TARGET_MODELS;
    }
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *t = json_object_array_get_idx(arr, i);
        size_t o2 = ctx_push_index(c, i);
        if (!t || !json_object_is_type(t, json_type_object)) {
            ctx_err(c, NULL, "expected object, got %s", json_type_label(t));
            ctx_pop(c, o2);
            continue;
        }
        const char *name;
        int weight;
        get_string(c, t, "name", NULL, &name);
        get_int(c, t, "weight", 1, 0, 1000000, &weight);
        if (!name) {
            if (!member(t, "name")) {
                ctx_err(c, "name", "required field is missing");
            }
        } else if (!name[0] || strlen(name) > 253) {
            ctx_err(c, "name", "must be 1-253 characters");
        } else {
            for (int j = 0; j < m->n_targets; j++) {
                if (strcmp(m->targets[j].name, name) == 0) {
                    ctx_err(c, "name", "duplicate target model \"%.64s\"", name);
                }
            }
            m->targets[m->n_targets].name = name;
            m->targets[m->n_targets].weight = weight;
            m->n_targets++;
        }
        sum += weight;
        ctx_pop(c, o2);
    }
    if (n > 0 && sum == 0) {
        ctx_err(c, NULL, "the weights must not all be 0");
    }
    ctx_pop(c, old);
}

static void parse_params(struct ctx *c, struct json_object *spec, struct spec_model *m)
{
    struct json_object *p;
    if (get_object(c, spec, "inferenceParams", &p) != 0 || !p) {
        return;
    }
    size_t old = ctx_push(c, "inferenceParams");
    get_double(c, p, "temperature", 0, 0, 2, &m->params.temperature);
    get_double(c, p, "topP", 0, 1, 1, &m->params.top_p);
    get_double(c, p, "minP", 0, 0, 1, &m->params.min_p);
    get_double(c, p, "repetitionPenalty", 0, 1, 10, &m->params.repetition_penalty);
    m->params.top_k_set =
        get_int(c, p, "topK", 0, -1, 1000000, &m->params.top_k) == 0 && member(p, "topK");
    if (m->params.top_k_set && m->params.top_k == 0) {
        ctx_err(c, "topK", "must be -1 (disabled) or >= 1");
        m->params.top_k_set = 0;
    }
    get_int(c, p, "maxTokens", 0, 1, 16777216, &m->params.max_tokens);
    ctx_pop(c, old);
}

static void parse_deployment(struct ctx *c, struct json_object *spec, struct spec_model *m)
{
    struct json_object *d, *tp, *ro;
    int type;
    m->deployment.type = DEPLOY_UNIFIED;
    m->deployment.tp_size = 1;
    m->deployment.nodes_per_replica = 1;
    m->deployment.max_surge = (struct spec_int_or_percent){1, 25};
    m->deployment.max_unavailable = (struct spec_int_or_percent){1, 25};
    m->deployment.prefill.replicas = 1;
    m->deployment.decode.replicas = 1;
    m->deployment.unified.replicas = 1;
    if (get_object(c, spec, "deployment", &d) != 0 || !d) {
        return;
    }
    size_t old = ctx_push(c, "deployment");
    get_enum(c, d, "type", deploy_types, ARRAY_SIZE(deploy_types), 0, &type);
    m->deployment.type = (enum spec_deploy_type)type;
    parse_workers(c, d, "prefillWorkers", &m->deployment.prefill);
    parse_workers(c, d, "decodeWorkers", &m->deployment.decode);
    parse_workers(c, d, "unifiedWorkers", &m->deployment.unified);
    parse_daemon_set(c, d, &m->deployment.daemon);
    get_object(c, d, "tensorParallelism", &tp);
    if (tp) {
        size_t o2 = ctx_push(c, "tensorParallelism");
        get_int(c, tp, "size", 1, 1, 64, &m->deployment.tp_size);
        get_int(c, tp, "nodesPerReplica", 1, 1, 64, &m->deployment.nodes_per_replica);
        ctx_pop(c, o2);
    }
    get_object(c, d, "rollout", &ro);
    if (ro) {
        size_t o2 = ctx_push(c, "rollout");
        parse_int_or_percent(c, ro, "maxSurge", &m->deployment.max_surge);
        parse_int_or_percent(c, ro, "maxUnavailable", &m->deployment.max_unavailable);
        if (m->deployment.max_surge.value == 0 && m->deployment.max_unavailable.value == 0) {
            ctx_err(c, "maxUnavailable", "may not be 0 when maxSurge is 0");
        }
        ctx_pop(c, o2);
    }

    switch (m->deployment.type) {
    case DEPLOY_DISAGGREGATED:
        if (!m->deployment.prefill.present) {
            ctx_err(c, "prefillWorkers", "required when type is Disaggregated");
        }
        if (!m->deployment.decode.present) {
            ctx_err(c, "decodeWorkers", "required when type is Disaggregated");
        }
        if (m->deployment.unified.present) {
            ctx_err(c, "unifiedWorkers", "only valid when type is Unified");
        }
        break;
    case DEPLOY_UNIFIED:
        if (m->deployment.prefill.present) {
            ctx_err(c, "prefillWorkers", "only valid when type is Disaggregated");
        }
        if (m->deployment.decode.present) {
            ctx_err(c, "decodeWorkers", "only valid when type is Disaggregated");
        }
        break;
    case DEPLOY_DAEMONSET:
        if (m->deployment.prefill.present) {
            ctx_err(c, "prefillWorkers", "only valid when type is Disaggregated");
        }
        if (m->deployment.decode.present) {
            ctx_err(c, "decodeWorkers", "only valid when type is Disaggregated");
        }
        if (m->deployment.unified.present) {
            ctx_err(c, "unifiedWorkers",
                    "only valid when type is Unified (a DaemonSet has no replicas; place it "
                    "with daemonSet.nodeSelector)");
        }
        break;
    case DEPLOY_MULTINODE:
        break;
    }
    if (m->deployment.daemon.present && m->deployment.type != DEPLOY_DAEMONSET) {
        ctx_err(c, "daemonSet", "only valid when type is DaemonSet");
    }
    if (m->deployment.nodes_per_replica > 1 && m->deployment.type != DEPLOY_MULTINODE) {
        ctx_err(c, "tensorParallelism.nodesPerReplica",
                "more than 1 node per replica needs type MultiNode");
    }
    ctx_pop(c, old);
}

int spec_model_parse(struct json_object *obj, struct spec_model *out, struct spec_errors *errs)
{
    struct ctx c;
    memset(out, 0, sizeof(*out));
    ctx_init(&c, errs);
    out->obj = obj ? json_object_get(obj) : NULL;
    out->name = "";
    out->ns = "default";
    out->uid = "";
    out->pool_group = SPEC_GROUP;
    out->pool_kind = SPEC_POOL_KIND;
    out->criticality = CRITICALITY_STANDARD;
    out->runtime.block_size = 16;
    out->runtime.kv_cache_dtype = "auto";
    out->runtime.enable_chunked_prefill = 1;
    out->deployment.tp_size = 1;
    out->deployment.nodes_per_replica = 1;
    out->deployment.max_surge = (struct spec_int_or_percent){1, 25};
    out->deployment.max_unavailable = (struct spec_int_or_percent){1, 25};
    if (!obj || !json_object_is_type(obj, json_type_object)) {
        ctx_err(&c, NULL, "expected an InferenceModel object, got %s", json_type_label(obj));
        return -EINVAL;
    }
    parse_metadata(&c, obj, &out->name, &out->ns, &out->uid, &out->generation);
    if (out->name[0] &&
        (strlen(out->name) > SPEC_MODEL_NAME_MAX || !kube_valid_dns_subdomain(out->name) ||
         !kube_valid_label_value(out->name))) {
        ctx_err(&c, "metadata.name",
                "must be a DNS subdomain of at most %d characters (it is the %s label value)",
                SPEC_MODEL_NAME_MAX, LABEL_MODEL);
    }
    struct json_object *spec;
    get_object(&c, obj, "spec", &spec);
    if (!spec) {
        if (!member(obj, "spec")) {
            ctx_err(&c, "spec", "required field is missing");
        }
        return -EINVAL;
    }
    size_t old = ctx_push(&c, "spec");

    struct json_object *ref;
    get_object(&c, spec, "poolRef", &ref);
    if (!ref) {
        if (!member(spec, "poolRef")) {
            ctx_err(&c, "poolRef", "required field is missing");
        }
    } else {
        size_t o2 = ctx_push(&c, "poolRef");
        static const char *const groups[] = {SPEC_GROUP};
        static const char *const kinds[] = {SPEC_POOL_KIND};
        int ignored;
        get_string(&c, ref, "name", NULL, &out->pool_name);
        get_enum(&c, ref, "group", groups, 1, 0, &ignored);
        get_enum(&c, ref, "kind", kinds, 1, 0, &ignored);
        if (!out->pool_name) {
            if (!member(ref, "name")) {
                ctx_err(&c, "name", "required field is missing");
            }
        } else if (!kube_valid_dns_subdomain(out->pool_name)) {
            ctx_err(&c, "name", "must be a DNS subdomain (an InferencePool name)");
        }
        ctx_pop(&c, o2);
    }

    get_string(&c, spec, "modelName", NULL, &out->model_name);
    if (!out->model_name) {
        if (!member(spec, "modelName")) {
            ctx_err(&c, "modelName", "required field is missing");
        }
    } else {
        size_t n = strlen(out->model_name);
        int ctl = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)out->model_name[i];
            if (ch < 0x20 || ch == 0x7f) {
                ctl = 1;
            }
        }
        if (n == 0 || n > 253) {
            ctx_err(&c, "modelName", "must be 1-253 characters");
        } else if (ctl) {
            ctx_err(&c, "modelName", "must not contain control characters");
        }
    }

    struct json_object *src;
    get_object(&c, spec, "modelSource", &src);
    if (!src) {
        if (!member(spec, "modelSource")) {
            ctx_err(&c, "modelSource", "required field is missing");
        }
    } else {
        size_t o2 = ctx_push(&c, "modelSource");
        get_string(&c, src, "storageUri", NULL, &out->source.uri);
        if (!out->source.uri) {
            if (!member(src, "storageUri")) {
                ctx_err(&c, "storageUri", "required field is missing");
            }
        } else if (parse_storage_uri(&c, out) != 0) {
            ctx_pop(&c, o2);
            ctx_pop(&c, old);
            return -ENOMEM;
        }
        ctx_pop(&c, o2);
    }

    int fmt = -1;
    get_enum(&c, spec, "modelFormat", model_formats, ARRAY_SIZE(model_formats), -1, &fmt);
    const char *fname = out->source.file_name;
    size_t fl = fname ? strlen(fname) : 0;
    int is_gguf_file = fl > 5 && strcasecmp(fname + fl - 5, ".gguf") == 0;
    if (fmt < 0) {
        out->format = is_gguf_file ? FORMAT_GGUF : FORMAT_SAFETENSORS;
    } else {
        out->format = (enum spec_model_format)fmt;
        if (out->format == FORMAT_SAFETENSORS && is_gguf_file) {
            ctx_err(&c, "modelFormat", "safetensors does not match the .gguf file in storageUri");
        }
    }

    parse_runtime(&c, spec, out);
    parse_resources(&c, spec, "resources", &out->resources);
    int crit;
    get_enum(&c, spec, "criticality", criticalities, ARRAY_SIZE(criticalities),
             CRITICALITY_STANDARD, &crit);
    out->criticality = (enum spec_criticality)crit;
    parse_targets(&c, spec, out);
    parse_params(&c, spec, out);
    parse_deployment(&c, spec, out);

    check_gpu_limits(&c, out);
    if (out->runtime.tensor_parallel_size &&
        member(member(spec, "deployment"), "tensorParallelism") &&
        out->runtime.tensor_parallel_size != out->deployment.tp_size) {
        ctx_err(&c, "runtime.config.tensorParallelSize",
                "%d disagrees with deployment.tensorParallelism.size (%d); set one of them",
                out->runtime.tensor_parallel_size, out->deployment.tp_size);
    }
    ctx_pop(&c, old);

    if (c.failed) {
        if (out->deployment.type == DEPLOY_MULTINODE) {
            spec_errors_add(errs, "spec.deployment.type", "MultiNode is not supported yet");
        }
        return -EINVAL;
    }
    if (out->deployment.type == DEPLOY_MULTINODE) {
        spec_errors_add(errs, "spec.deployment.type",
                        "MultiNode is not supported yet; use Disaggregated, Unified or DaemonSet");
        return -ENOTSUP;
    }
    return 0;
}

void spec_model_free(struct spec_model *model)
{
    if (model->obj) {
        json_object_put(model->obj);
    }
    free(model->source.host_path);
    free(model->source.claim);
    free(model->source.sub_path);
    free(model->source.file_name);
    memset(model, 0, sizeof(*model));
}

int spec_model_tp_size(const struct spec_model *model)
{
    return model->runtime.tensor_parallel_size ? model->runtime.tensor_parallel_size
                                               : model->deployment.tp_size;
}

int spec_model_roles(const struct spec_model *model, enum spec_role roles[3])
{
    switch (model->deployment.type) {
    case DEPLOY_DISAGGREGATED:
        roles[0] = ROLE_PREFILL;
        roles[1] = ROLE_DECODE;
        return 2;
    case DEPLOY_UNIFIED:
    case DEPLOY_DAEMONSET:
        roles[0] = ROLE_BOTH;
        return 1;
    case DEPLOY_MULTINODE:
        break;
    }
    return 0;
}

const struct spec_workers *spec_model_workers(const struct spec_model *model, enum spec_role role)
{
    switch (role) {
    case ROLE_PREFILL:
        return &model->deployment.prefill;
    case ROLE_DECODE:
        return &model->deployment.decode;
    case ROLE_BOTH:
        break;
    }
    return model->deployment.type == DEPLOY_DAEMONSET ? &model->deployment.daemon
                                                      : &model->deployment.unified;
}

struct json_object *spec_pod_labels(const struct spec_pool *pool, const struct spec_model *model,
                                    enum spec_role role)
{
    struct json_object *labels = json_object_new_object();
    if (!labels) {
        return NULL;
    }
    /* The operator's own labels first (they win), then what the selectors need. */
    if (set_label(labels, LABEL_ROLE, spec_role_label(role)) != 0 ||
        set_label(labels, LABEL_POOL, pool->name) != 0 ||
        set_label(labels, LABEL_MODEL, model->name) != 0 ||
        set_label(labels, LABEL_MANAGED_BY, MANAGED_BY_OPERATOR) != 0 ||
        set_label(labels, LABEL_NAME, "tandem-agent") != 0 ||
        set_label(labels, LABEL_ENGINE_TYPE, "vllm") != 0) {
        goto err_free;
    }
    if (role == ROLE_PREFILL && pool->disagg.has_prefill_selector &&
        spec_selector_synthesize(&pool->disagg.prefill_selector, labels) != 0) {
        goto err_free;
    }
    if (role != ROLE_PREFILL && pool->disagg.has_decode_selector &&
        spec_selector_synthesize(&pool->disagg.decode_selector, labels) != 0) {
        goto err_free;
    }
    if (spec_selector_synthesize(&pool->selector, labels) != 0) {
        goto err_free;
    }
    return labels;
err_free:
    json_object_put(labels);
    return NULL;
}

/* The default decode selector (llm-d's decode-filter): role decode or both, or no role label. */
static int default_decode_match(struct json_object *labels)
{
    const char *role = label_of(labels, LABEL_ROLE);
    return !role || strcmp(role, "decode") == 0 || strcmp(role, "both") == 0;
}

/* The default prefill selector (llm-d's prefill-filter): role prefill. */
static int default_prefill_match(struct json_object *labels)
{
    const char *role = label_of(labels, LABEL_ROLE);
    return role && strcmp(role, "prefill") == 0;
}

static int prefill_match(const struct spec_pool *pool, struct json_object *labels)
{
    return pool->disagg.has_prefill_selector
               ? spec_selector_matches(&pool->disagg.prefill_selector, labels)
               : default_prefill_match(labels);
}

static int decode_match(const struct spec_pool *pool, struct json_object *labels)
{
    return pool->disagg.has_decode_selector
               ? spec_selector_matches(&pool->disagg.decode_selector, labels)
               : default_decode_match(labels);
}

int spec_model_check_pool(const struct spec_pool *pool, const struct spec_model *model,
                          struct spec_errors *errs)
{
    int failed = 0;
    char field[128];
    if (strcmp(pool->ns, model->ns) != 0) {
        spec_errors_add(errs, "spec.poolRef.name", "InferencePool %s is in namespace %s, not %s",
                        pool->name, pool->ns, model->ns);
        return -EINVAL;
    }
    if (model->deployment.type == DEPLOY_DISAGGREGATED && !pool->disagg.enabled) {
        spec_errors_add(errs, "spec.deployment.type",
                        "Disaggregated needs spec.disaggregation.enabled: true on InferencePool %s",
                        pool->name);
        failed = 1;
    }
    if (pool->disagg.enabled && spec_model_tp_size(model) > 1) {
        spec_errors_add(errs, "spec.deployment.tensorParallelism.size",
                        "%d: the P/D KV transfer of InferencePool %s (spec.disaggregation) moves "
                        "one KV pool per layer, and a tensor-parallel engine has one per rank; "
                        "use size 1 in a disaggregated pool",
                        spec_model_tp_size(model), pool->name);
        failed = 1;
    }
    enum spec_role roles[3];
    int n = spec_model_roles(model, roles);
    for (int i = 0; i < n; i++) {
        struct json_object *labels = spec_pod_labels(pool, model, roles[i]);
        if (!labels) {
            return -ENOMEM;
        }
        const char *role = spec_role_label(roles[i]);
        if (!spec_selector_matches(&pool->selector, labels)) {
            snprintf(field, sizeof(field), "InferencePool %s spec.selector", pool->name);
            spec_errors_add(errs, field,
                            "the %s pods of this model cannot satisfy it (use matchLabels, In or "
                            "Exists, and no expression on the operator's labels)",
                            role);
            failed = 1;
        }
        if (pool->disagg.enabled) {
            int is_prefill = roles[i] == ROLE_PREFILL;
            int pm = prefill_match(pool, labels), dm = decode_match(pool, labels);
            snprintf(field, sizeof(field), "InferencePool %s spec.disaggregation.%s", pool->name,
                     is_prefill ? "prefillSelector" : "decodeSelector");
            if (is_prefill ? !pm : !dm) {
                spec_errors_add(errs, field, "does not select this model's %s pods", role);
                failed = 1;
            }
            if (is_prefill ? dm : pm) {
                snprintf(field, sizeof(field), "InferencePool %s spec.disaggregation.%s",
                         pool->name, is_prefill ? "decodeSelector" : "prefillSelector");
                spec_errors_add(errs, field, "also selects this model's %s pods", role);
                failed = 1;
            }
        }
        json_object_put(labels);
    }
    return failed ? -EINVAL : 0;
}
