/*
 * Filters: the role filters of llm-d's P/D (label llm-d.ai/role) and Kubernetes label selectors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "operator/epp/sched/plugins.h"

/* Role sets at llm-d HEAD (pkg/epp/framework/plugins/.../filter/by_label.go). Unlabeled pods pass
 * the decode filter (a pool without P/D labels is all decode) but never the prefill filter. */
static bool is_decode(enum epp_role r)
{
    return r == EPP_ROLE_UNSET || r == EPP_ROLE_DECODE || r == EPP_ROLE_BOTH ||
           r == EPP_ROLE_PREFILL_DECODE || r == EPP_ROLE_ENCODE_PREFILL_DECODE;
}

static bool is_prefill(enum epp_role r)
{
    return r == EPP_ROLE_PREFILL || r == EPP_ROLE_ENCODE_PREFILL || r == EPP_ROLE_PREFILL_DECODE ||
           r == EPP_ROLE_BOTH || r == EPP_ROLE_ENCODE_PREFILL_DECODE;
}

static bool is_encode(enum epp_role r)
{
    return r == EPP_ROLE_ENCODE || r == EPP_ROLE_ENCODE_PREFILL ||
           r == EPP_ROLE_ENCODE_PREFILL_DECODE;
}

static int keep_if(struct cycle *c, int *cand, int n, bool (*pass)(enum epp_role))
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (pass(c->eps[cand[i]]->role)) {
            cand[k++] = cand[i];
        }
    }
    return k;
}

static int decode_filter(struct plugin *p, struct cycle *c, int *cand, int n)
{
    (void)p;
    return keep_if(c, cand, n, is_decode);
}

static int prefill_filter(struct plugin *p, struct cycle *c, int *cand, int n)
{
    (void)p;
    return keep_if(c, cand, n, is_prefill);
}

static int encode_filter(struct plugin *p, struct cycle *c, int *cand, int n)
{
    (void)p;
    return keep_if(c, cand, n, is_encode);
}

const struct plugin_ops filter_decode_ops = {
    .type = "decode-filter", .kind = PK_FILTER, .filter = decode_filter};
const struct plugin_ops filter_prefill_ops = {
    .type = "prefill-filter", .kind = PK_FILTER, .filter = prefill_filter};
const struct plugin_ops filter_encode_ops = {
    .type = "encode-filter", .kind = PK_FILTER, .filter = encode_filter};

/* A label selector, kept as the validated parameters (owned reference). */
struct selector {
    struct json_object *match_labels; /* may be NULL */
    struct json_object *exprs;        /* may be NULL */
    /* v0.3 by-label: label, validValues, allowsNoLabel */
    const char *label;
    struct json_object *valid_values;
    bool allows_no_label;
    struct json_object *params;
};

static int check_strings(struct json_object *arr, const char *field, char *err, size_t errlen)
{
    if (!json_object_is_type(arr, json_type_array)) {
        snprintf(err, errlen, "parameters.%s: expected a list of strings", field);
        return -EINVAL;
    }
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        if (!json_object_is_type(json_object_array_get_idx(arr, i), json_type_string)) {
            snprintf(err, errlen, "parameters.%s[%zu]: expected a string", field, i);
            return -EINVAL;
        }
    }
    return 0;
}

static int check_expr(struct json_object *e, size_t i, char *err, size_t errlen)
{
    char field[64];
    const char *key = NULL, *op = NULL;
    struct json_object *values = json_get(e, "values");
    snprintf(field, sizeof(field), "matchExpressions[%zu]", i);
    if (!json_object_is_type(e, json_type_object) || json_get_string(e, "key", &key, err, 0) != 0 ||
        !*key || json_get_string(e, "operator", &op, err, 0) != 0) {
        snprintf(err, errlen, "parameters.%s: needs a key and an operator", field);
        return -EINVAL;
    }
    bool set_op = strcmp(op, "In") == 0 || strcmp(op, "NotIn") == 0;
    bool exist_op = strcmp(op, "Exists") == 0 || strcmp(op, "DoesNotExist") == 0;
    if (!set_op && !exist_op) {
        snprintf(err, errlen,
                 "parameters.%s.operator: \"%s\" is not In, NotIn, Exists or DoesNotExist", field,
                 op);
        return -EINVAL;
    }
    if (values && !json_object_is_type(values, json_type_array)) {
        snprintf(err, errlen, "parameters.%s.values: expected a list of strings", field);
        return -EINVAL;
    }
    if (set_op && (!values || json_object_array_length(values) == 0)) {
        snprintf(err, errlen, "parameters.%s.values: required for operator %s", field, op);
        return -EINVAL;
    }
    if (exist_op && values && json_object_array_length(values) > 0) {
        snprintf(err, errlen, "parameters.%s.values: must be empty for operator %s", field, op);
        return -EINVAL;
    }
    snprintf(field, sizeof(field), "matchExpressions[%zu].values", i);
    return values ? check_strings(values, field, err, errlen) : 0;
}

static int check_selector(struct selector *sel, char *err, size_t errlen)
{
    if (sel->match_labels) {
        if (!json_object_is_type(sel->match_labels, json_type_object)) {
            snprintf(err, errlen, "parameters.matchLabels: expected an object");
            return -EINVAL;
        }
        json_object_object_foreach(sel->match_labels, k, v)
        {
            if (!json_object_is_type(v, json_type_string)) {
                snprintf(err, errlen, "parameters.matchLabels.%s: expected a string", k);
                return -EINVAL;
            }
        }
    }
    if (sel->exprs) {
        if (!json_object_is_type(sel->exprs, json_type_array)) {
            snprintf(err, errlen, "parameters.matchExpressions: expected a list");
            return -EINVAL;
        }
        for (size_t i = 0; i < json_object_array_length(sel->exprs); i++) {
            if (check_expr(json_object_array_get_idx(sel->exprs, i), i, err, errlen) != 0) {
                return -EINVAL;
            }
        }
    }
    return 0;
}

static int selector_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    struct selector *sel = calloc(1, sizeof(*sel));
    if (!sel) {
        return -ENOMEM;
    }
    p->state = sel;
    sel->params = json_object_get(params);
    sel->match_labels = json_get(params, "matchLabels");
    sel->exprs = json_get(params, "matchExpressions");
    sel->valid_values = json_get(params, "validValues");
    if (param_string(params, "label", NULL, &sel->label, err, errlen) != 0 ||
        param_bool(params, "allowsNoLabel", false, &sel->allows_no_label, err, errlen) != 0 ||
        (sel->valid_values && check_strings(sel->valid_values, "validValues", err, errlen) != 0)) {
        return -EINVAL;
    }
    if (sel->valid_values && !sel->label) {
        snprintf(err, errlen, "parameters.label: required with validValues");
        return -EINVAL;
    }
    return check_selector(sel, err, errlen);
}

static void selector_destroy(struct plugin *p)
{
    struct selector *sel = p->state;
    if (sel) {
        json_object_put(sel->params);
        free(sel);
    }
}

static bool in_list(struct json_object *arr, const char *v)
{
    for (size_t i = 0; v && i < json_object_array_length(arr); i++) {
        if (strcmp(json_object_get_string(json_object_array_get_idx(arr, i)), v) == 0) {
            return true;
        }
    }
    return false;
}

static const char *label_of(const struct epp_endpoint *ep, const char *key)
{
    struct json_object *v = NULL;
    if (!ep->labels || !json_object_object_get_ex(ep->labels, key, &v)) {
        return NULL;
    }
    return json_object_get_string(v);
}

static bool expr_matches(struct json_object *e, const struct epp_endpoint *ep)
{
    const char *key = json_object_get_string(json_get(e, "key"));
    const char *op = json_object_get_string(json_get(e, "operator"));
    const char *v = label_of(ep, key);
    if (strcmp(op, "Exists") == 0) {
        return v != NULL;
    }
    if (strcmp(op, "DoesNotExist") == 0) {
        return v == NULL;
    }
    bool in = in_list(json_get(e, "values"), v);
    return strcmp(op, "In") == 0 ? in : !in;
}

bool selector_matches(const struct plugin *p, const struct epp_endpoint *ep)
{
    const struct selector *sel = p->state;
    if (sel->label) {
        const char *v = label_of(ep, sel->label);
        if (!v) {
            return sel->allows_no_label;
        }
        if (sel->valid_values && !in_list(sel->valid_values, v)) {
            return false;
        }
    }
    if (sel->match_labels) {
        json_object_object_foreach(sel->match_labels, k, want)
        {
            const char *v = label_of(ep, k);
            if (!v || strcmp(v, json_object_get_string(want)) != 0) {
                return false;
            }
        }
    }
    for (size_t i = 0; sel->exprs && i < json_object_array_length(sel->exprs); i++) {
        if (!expr_matches(json_object_array_get_idx(sel->exprs, i), ep)) {
            return false;
        }
    }
    return true;
}

static int selector_filter(struct plugin *p, struct cycle *c, int *cand, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (selector_matches(p, c->eps[cand[i]])) {
            cand[k++] = cand[i];
        }
    }
    return k;
}

const struct plugin_ops filter_label_selector_ops = {.type = "label-selector-filter",
                                                     .kind = PK_FILTER,
                                                     .create = selector_create,
                                                     .destroy = selector_destroy,
                                                     .filter = selector_filter};
/* The older names of the same filter (by-label also reads v0.3's label/validValues). */
const struct plugin_ops filter_by_label_selector_ops = {.type = "by-label-selector",
                                                        .kind = PK_FILTER,
                                                        .create = selector_create,
                                                        .destroy = selector_destroy,
                                                        .filter = selector_filter};
const struct plugin_ops filter_by_label_ops = {.type = "by-label",
                                               .kind = PK_FILTER,
                                               .create = selector_create,
                                               .destroy = selector_destroy,
                                               .filter = selector_filter};
