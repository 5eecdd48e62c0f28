/*
 * Unit tests for operator/controller/eppconfig: generated EndpointPickerConfigs (parsed back from
 * their YAML and checked plugin by plugin), inline config validation with errors naming the
 * field, rendering, and the YAML emitter's round trip through lib/yaml.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/buf.h"
#include "lib/json.h"
#include "lib/yaml.h"
#include "operator/controller/eppconfig.h"
#include "operator/controller/spec.h"

static struct json_object *yaml_obj(const char *text)
{
    char err[256];
    struct json_object *o = NULL;
    if (yaml_parse_one(text, strlen(text), &o, err, sizeof(err)) != 0 || !o) {
        fail_msg("bad YAML (%s):\n%s", err, text);
    }
    return o;
}

static void dump_errors(const struct spec_errors *errs)
{
    char text[4096];
    spec_errors_format(errs, text, sizeof(text));
    print_message("errors: %s\n", text);
}

static void assert_error(const struct spec_errors *errs, const char *field, const char *msg)
{
    for (int i = 0; i < errs->n; i++) {
        if (strcmp(errs->e[i].field, field) == 0 && strstr(errs->e[i].message, msg)) {
            return;
        }
    }
    dump_errors(errs);
    fail_msg("expected error \"%s: ...%s...\"", field, msg);
}

/* Parses a pool from YAML; it must be valid. */
static struct json_object *pool_from(const char *yaml, struct spec_pool *pool)
{
    struct json_object *o = yaml_obj(yaml);
    struct spec_errors errs;
    spec_errors_init(&errs);
    if (spec_pool_parse(o, pool, &errs) != 0) {
        dump_errors(&errs);
        fail_msg("pool invalid:\n%s", yaml);
    }
    return o;
}

/* Renders the pool's config, parses the YAML back and validates it; returns the document. */
static struct json_object *render_parse(const struct spec_pool *pool, int need_pd)
{
    struct buf b;
    struct spec_errors errs;
    buf_init(&b, EPPCONFIG_MAX_TEXT);
    spec_errors_init(&errs);
    assert_int_equal(eppconfig_render(pool, &b, &errs), 0);
    struct json_object *doc = NULL;
    int rc = eppconfig_parse(b.data, b.len, "config", NULL, need_pd, &doc, &errs);
    if (rc != 0) {
        dump_errors(&errs);
        fail_msg("rendered config does not validate:\n%s", buf_cstr(&b));
    }
    /* The YAML is exactly the generated object. */
    struct json_object *gen = eppconfig_generate(pool);
    assert_non_null(gen);
    assert_true(json_object_equal(gen, doc));
    json_object_put(gen);
    buf_free(&b);
    return doc;
}

/* The plugin named name, or NULL. */
static struct json_object *plugin(struct json_object *cfg, const char *name)
{
    struct json_object *plugins = json_get(cfg, "plugins");
    for (size_t i = 0; i < json_object_array_length(plugins); i++) {
        struct json_object *p = json_object_array_get_idx(plugins, i);
        if (strcmp(json_object_get_string(json_get(p, "name")), name) == 0) {
            return p;
        }
    }
    return NULL;
}

static struct json_object *profile(struct json_object *cfg, const char *name)
{
    struct json_object *profiles = json_get(cfg, "schedulingProfiles");
    for (size_t i = 0; i < json_object_array_length(profiles); i++) {
        struct json_object *p = json_object_array_get_idx(profiles, i);
        if (strcmp(json_object_get_string(json_get(p, "name")), name) == 0) {
            return p;
        }
    }
    return NULL;
}

/* Weight of pluginRef ref in a profile: -1 when referenced without weight, -2 when absent. */
static int ref_weight(struct json_object *prof, const char *ref)
{
    struct json_object *refs = json_get(prof, "plugins");
    for (size_t i = 0; i < json_object_array_length(refs); i++) {
        struct json_object *r = json_object_array_get_idx(refs, i);
        if (strcmp(json_object_get_string(json_get(r, "pluginRef")), ref) == 0) {
            struct json_object *w = json_get(r, "weight");
            return w ? json_object_get_int(w) : -1;
        }
    }
    return -2;
}

#define POOL(spec) "{metadata: {name: p}, spec: {selector: {matchLabels: {app: p}}, " spec "}}"

static void test_generate_default(void **state)
{
    (void)state;
    struct spec_pool pool;
    struct json_object *o = pool_from(POOL(""), &pool);
    struct json_object *cfg = render_parse(&pool, 0);
    assert_string_equal(json_object_get_string(json_get(cfg, "apiVersion")), "llm-d.ai/v1alpha1");
    assert_string_equal(json_object_get_string(json_get(cfg, "kind")), "EndpointPickerConfig");
    assert_int_equal(json_object_array_length(json_get(cfg, "plugins")), 6);
    assert_int_equal(json_object_array_length(json_get(cfg, "schedulingProfiles")), 1);
    /* The Gateway API Inference Extension default profile: prefix 3, queue 2, kv-cache 2. */
    struct json_object *prof = profile(cfg, "default");
    assert_non_null(prof);
    assert_int_equal(ref_weight(prof, "precise-prefix-cache-scorer"), 3);
    assert_int_equal(ref_weight(prof, "queue-scorer"), 2);
    assert_int_equal(ref_weight(prof, "kv-cache-utilization-scorer"), 2);
    assert_int_equal(ref_weight(prof, "decode-filter"), -1);
    assert_int_equal(ref_weight(prof, "max-score-picker"), -1);
    assert_non_null(plugin(cfg, "single-profile-handler"));
    assert_string_equal(json_object_get_string(json_get(plugin(cfg, "decode-filter"), "type")),
                        "decode-filter");
    assert_null(plugin(cfg, "pd-profile-handler"));
    json_object_put(cfg);
    spec_pool_free(&pool);
    json_object_put(o);
}

static void test_generate_weights(void **state)
{
    (void)state;
    struct spec_pool pool;
    struct json_object *o = pool_from(
        POOL("routingPolicy: {schedulerProfile: fast, loadBalancing: {weights: {cacheHit: 0, load: "
             "7}}}"),
        &pool);
    struct json_object *cfg = render_parse(&pool, 0);
    struct json_object *prof = profile(cfg, "fast");
    assert_non_null(prof);
    assert_int_equal(ref_weight(prof, "precise-prefix-cache-scorer"), -2); /* weight 0: left out */
    assert_null(plugin(cfg, "precise-prefix-cache-scorer"));
    assert_int_equal(ref_weight(prof, "queue-scorer"), 7);
    assert_int_equal(ref_weight(prof, "kv-cache-utilization-scorer"), 2); /* default */
    json_object_put(cfg);
    spec_pool_free(&pool);
    json_object_put(o);
}

static void test_generate_round_robin(void **state)
{
    (void)state;
    struct spec_pool pool;
    struct json_object *o = pool_from(POOL("routingPolicy: {type: RoundRobin}"), &pool);
    struct json_object *cfg = render_parse(&pool, 0);
    struct json_object *prof = profile(cfg, "default");
    assert_int_equal(json_object_array_length(json_get(prof, "plugins")), 2);
    assert_int_equal(ref_weight(prof, "random-picker"), -1);
    assert_int_equal(ref_weight(prof, "decode-filter"), -1);
    assert_null(plugin(cfg, "queue-scorer"));
    assert_null(plugin(cfg, "max-score-picker"));
    json_object_put(cfg);
    spec_pool_free(&pool);
    json_object_put(o);
}

static void test_generate_disaggregated(void **state)
{
    (void)state;
    struct spec_pool pool;
    struct json_object *o =
        pool_from(POOL("disaggregation: {enabled: true, threshold: 256}"), &pool);
    struct json_object *cfg = render_parse(&pool, 1);
    struct json_object *pd = plugin(cfg, "pd-profile-handler");
    assert_non_null(pd);
    assert_int_equal(json_object_get_int(json_get(pd, "parameters.threshold")), 256);
    assert_string_equal(json_object_get_string(json_get(pd, "parameters.prefillProfile")),
                        "prefill");
    assert_string_equal(json_object_get_string(json_get(pd, "parameters.decodeProfile")), "decode");
    assert_string_equal(json_object_get_string(json_get(pd, "parameters.prefixPluginName")),
                        "precise-prefix-cache-scorer");
    struct json_object *prefill = profile(cfg, "prefill"), *decode = profile(cfg, "decode");
    assert_non_null(prefill);
    assert_non_null(decode);
    assert_int_equal(ref_weight(prefill, "prefill-filter"), -1);
    assert_int_equal(ref_weight(prefill, "decode-filter"), -2);
    assert_int_equal(ref_weight(decode, "decode-filter"), -1);
    assert_int_equal(ref_weight(decode, "prefill-filter"), -2);
    assert_int_equal(ref_weight(decode, "precise-prefix-cache-scorer"), 3);
    assert_int_equal(ref_weight(prefill, "queue-scorer"), 2);
    assert_int_equal(ref_weight(decode, "max-score-picker"), -1);
    assert_null(plugin(cfg, "single-profile-handler"));
    json_object_put(cfg);
    spec_pool_free(&pool);
    json_object_put(o);

    /* Custom selectors become label-selector-filters; schedulerProfile names the decode one. */
    o = pool_from(POOL("routingPolicy: {schedulerProfile: main}, disaggregation: {enabled: true, "
                       "prefillSelector: {matchLabels: {stage: p}}, decodeSelector: "
                       "{matchExpressions: [{key: stage, operator: In, values: [d]}]}}"),
                  &pool);
    cfg = render_parse(&pool, 1);
    struct json_object *pp = plugin(cfg, "prefill-pods"), *dp = plugin(cfg, "decode-pods");
    assert_non_null(pp);
    assert_non_null(dp);
    assert_string_equal(json_object_get_string(json_get(pp, "type")), "label-selector-filter");
    assert_string_equal(json_object_get_string(json_get(pp, "parameters.matchLabels.stage")), "p");
    assert_string_equal(
        json_object_get_string(json_get(dp, "parameters.matchExpressions[0].values[0]")), "d");
    assert_non_null(profile(cfg, "main"));
    assert_null(profile(cfg, "decode"));
    assert_int_equal(ref_weight(profile(cfg, "main"), "decode-pods"), -1);
    assert_string_equal(json_object_get_string(json_get(plugin(cfg, "pd-profile-handler"),
                                                        "parameters.decodeProfile")),
                        "main");
    json_object_put(cfg);
    spec_pool_free(&pool);
    json_object_put(o);
}

static void test_render_inline_and_ref(void **state)
{
    (void)state;
    struct spec_pool pool;
    struct buf b;
    struct spec_errors errs;
    static const char text[] = "# mine\napiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
                               "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: "
                               "default\n  plugins:\n  - pluginRef: queue-scorer\n    weight: 1.5";
    struct json_object *o = yaml_obj(POOL("routingPolicy: {endpointPickerConfig: {}}"));
    struct json_object *inl = json_object_new_string(text);
    json_object_object_add(
        json_object_object_get(json_get(o, "spec.routingPolicy"), "endpointPickerConfig"), "inline",
        inl);
    spec_errors_init(&errs);
    assert_int_equal(spec_pool_parse(o, &pool, &errs), 0);
    buf_init(&b, EPPCONFIG_MAX_TEXT);
    assert_int_equal(eppconfig_render(&pool, &b, &errs), 0);
    /* verbatim, comments included, with a final newline added */
    assert_int_equal(strncmp(buf_cstr(&b), text, strlen(text)), 0);
    assert_int_equal(b.len, strlen(text) + 1);
    buf_free(&b);
    spec_pool_free(&pool);
    json_object_put(o);

    /* An inline object is written as YAML. */
    o = yaml_obj(
        POOL("routingPolicy: {endpointPickerConfig: {inline: {apiVersion: "
             "llm-d.ai/v1alpha1, kind: EndpointPickerConfig, featureGates: [x], plugins: "
             "[{name: q, type: queue-scorer, parameters: {}}], schedulingProfiles: [{name: "
             "default, plugins: [{pluginRef: q, weight: 2}]}]}}}"));
    spec_errors_init(&errs);
    assert_int_equal(spec_pool_parse(o, &pool, &errs), 0);
    buf_init(&b, EPPCONFIG_MAX_TEXT);
    assert_int_equal(eppconfig_render(&pool, &b, &errs), 0);
    struct json_object *back = yaml_obj(buf_cstr(&b));
    assert_true(json_object_equal(back, pool.routing.inline_obj));
    json_object_put(back);
    buf_free(&b);
    spec_pool_free(&pool);
    json_object_put(o);

    /* configMapRef: nothing to render. */
    o = pool_from(POOL("routingPolicy: {endpointPickerConfig: {configMapRef: {name: c}}}"), &pool);
    buf_init(&b, EPPCONFIG_MAX_TEXT);
    assert_int_equal(eppconfig_render(&pool, &b, &errs), -ENOENT);
    assert_int_equal(b.len, 0);
    buf_free(&b);
    spec_pool_free(&pool);
    json_object_put(o);

    /* The generated file says where it comes from. */
    o = pool_from(POOL(""), &pool);
    buf_init(&b, EPPCONFIG_MAX_TEXT);
    assert_int_equal(eppconfig_render(&pool, &b, &errs), 0);
    assert_non_null(strstr(buf_cstr(&b), "# Generated by tandem-operator from InferencePool "
                                         "default/p"));
    buf_free(&b);
    spec_pool_free(&pool);
    json_object_put(o);
}

#define CFG_HEAD "{apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, "

static void expect_invalid(const char *yaml, const char *primary, int need_pd, const char *field,
                           const char *msg)
{
    struct spec_errors errs;
    spec_errors_init(&errs);
    struct json_object *out = (struct json_object *)1;
    int rc = eppconfig_parse(yaml, strlen(yaml), "cfg", primary, need_pd, &out, &errs);
    if (rc != -EINVAL) {
        dump_errors(&errs);
        fail_msg("config accepted (%d):\n%s", rc, yaml);
    }
    assert_null(out);
    assert_error(&errs, field, msg);
}

static void test_validate(void **state)
{
    (void)state;
    expect_invalid("plugins: [", NULL, 0, "cfg", "invalid YAML: line");
    expect_invalid("[1, 2]", NULL, 0, "cfg", "expected an EndpointPickerConfig object");
    expect_invalid("{kind: EndpointPickerConfig, plugins: [{type: queue-scorer}], "
                   "schedulingProfiles: [{name: d, plugins: [{pluginRef: queue-scorer}]}]}",
                   NULL, 0, "cfg.apiVersion", "must be llm-d.ai/v1alpha1");
    expect_invalid("{apiVersion: v1, kind: Pod, plugins: [{type: queue-scorer}], "
                   "schedulingProfiles: [{name: d, plugins: []}]}",
                   NULL, 0, "cfg.kind", "must be EndpointPickerConfig");
    expect_invalid(CFG_HEAD "schedulingProfiles: [{name: d, plugins: []}]}", NULL, 0, "cfg.plugins",
                   "required field is missing");
    expect_invalid(CFG_HEAD "plugins: [], schedulingProfiles: [{name: d, plugins: []}]}", NULL, 0,
                   "cfg.plugins", "must not be empty");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}]}", NULL, 0, "cfg.schedulingProfiles",
                   "required field is missing");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: []}", NULL, 0,
                   "cfg.schedulingProfiles", "must not be empty");
    expect_invalid(CFG_HEAD "plugins: [{name: a}], schedulingProfiles: [{name: d, plugins: "
                            "[]}]}",
                   NULL, 0, "cfg.plugins[0].type", "required field is missing");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}, {type: fancy-scorer}], "
                            "schedulingProfiles: [{name: d, plugins: []}]}",
                   NULL, 0, "cfg.plugins[1].type", "unknown plugin type \"fancy-scorer\"");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}, {type: queue-scorer}], "
                            "schedulingProfiles: [{name: d, plugins: []}]}",
                   NULL, 0, "cfg.plugins[1].name", "duplicate plugin name \"queue-scorer\"");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer, parameters: [1]}], "
                            "schedulingProfiles: [{name: d, plugins: []}]}",
                   NULL, 0, "cfg.plugins[0].parameters", "expected object, got array");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer, name: ''}], schedulingProfiles: "
                            "[{name: d, plugins: []}]}",
                   NULL, 0, "cfg.plugins[0].name", "non-empty string");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d, "
                            "plugins: [{pluginRef: kv-cache-utilization-scorer}]}]}",
                   NULL, 0, "cfg.schedulingProfiles[0].plugins[0].pluginRef",
                   "no plugin named \"kv-cache-utilization-scorer\"");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d, "
                            "plugins: [{pluginRef: queue-scorer, weight: -1}]}]}",
                   NULL, 0, "cfg.schedulingProfiles[0].plugins[0].weight", "must be a number >= 0");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d, "
                            "plugins: [{weight: 1}]}]}",
                   NULL, 0, "cfg.schedulingProfiles[0].plugins[0].pluginRef",
                   "required field is missing");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{plugins: "
                            "[]}]}",
                   NULL, 0, "cfg.schedulingProfiles[0].name", "required field is missing");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d, "
                            "plugins: []}, {name: d, plugins: []}]}",
                   NULL, 0, "cfg.schedulingProfiles[1].name", "duplicate profile name \"d\"");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: a, "
                            "plugins: []}, {name: b, plugins: []}]}",
                   NULL, 0, "cfg.plugins", "need a profile handler");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d}]}",
                   NULL, 0, "cfg.schedulingProfiles[0].plugins", "required field is missing");
    expect_invalid(CFG_HEAD "plugins: [{type: pd-profile-handler}], schedulingProfiles: [{name: "
                            "decode, plugins: []}, {name: pre, plugins: []}]}",
                   NULL, 1, "cfg.plugins[0].parameters.prefillProfile",
                   "no scheduling profile named \"prefill\"");
    expect_invalid(CFG_HEAD "plugins: [{type: pd-profile-handler, parameters: {decodeProfile: "
                            "dec, threshold: -3}}], schedulingProfiles: [{name: prefill, plugins: "
                            "[]}, {name: decode, plugins: []}]}",
                   NULL, 1, "cfg.plugins[0].parameters.decodeProfile",
                   "no scheduling profile named \"dec\"");
    expect_invalid(CFG_HEAD "plugins: [{type: pd-profile-handler, parameters: {threshold: -3}}], "
                            "schedulingProfiles: [{name: prefill, plugins: []}, {name: decode, "
                            "plugins: []}]}",
                   NULL, 1, "cfg.plugins[0].parameters.threshold", "integer >= 0");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d, "
                            "plugins: []}]}",
                   NULL, 1, "cfg.plugins", "disaggregation is enabled");
    expect_invalid(CFG_HEAD "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d, "
                            "plugins: []}]}",
                   "main", 0, "cfg.schedulingProfiles", "no profile named \"main\"");
    expect_invalid(CFG_HEAD "featureGates: x, plugins: [{type: queue-scorer}], "
                            "schedulingProfiles: [{name: d, plugins: []}]}",
                   NULL, 0, "cfg.featureGates", "list of strings");

    /* Accepted: the legacy apiVersion, llm-d's P/D sample shape, plugin name defaults. */
    static const char *const ok[] = {
        "{apiVersion: inference.networking.x-k8s.io/v1alpha1, kind: EndpointPickerConfig, "
        "plugins: [{type: queue-scorer}], schedulingProfiles: [{name: d, plugins: [{pluginRef: "
        "queue-scorer}]}]}",
        CFG_HEAD "plugins: [{type: prefill-filter}, {type: decode-filter}, {type: "
                 "prefix-cache-scorer}, {type: queue-scorer}, {type: max-score-picker}, {type: "
                 "prefix-based-pd-decider, name: pd-decider, parameters: {nonCachedTokens: 16}}, "
                 "{type: disagg-profile-handler}], schedulingProfiles: [{name: prefill, plugins: "
                 "[{pluginRef: prefill-filter}, {pluginRef: prefix-cache-scorer, weight: 2.0}, "
                 "{pluginRef: queue-scorer, weight: 1}, {pluginRef: max-score-picker}]}, {name: "
                 "decode, plugins: [{pluginRef: decode-filter}, {pluginRef: max-score-picker}]}]}",
    };
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        struct spec_errors errs;
        struct json_object *doc = NULL;
        spec_errors_init(&errs);
        int rc = eppconfig_parse(ok[i], strlen(ok[i]), "cfg", NULL, (int)i, &doc, &errs);
        if (rc != 0) {
            dump_errors(&errs);
            fail_msg("rejected: %s", ok[i]);
        }
        assert_non_null(doc);
        json_object_put(doc);
    }
    assert_true(eppconfig_type_known("precise-prefix-cache-scorer"));
    assert_true(eppconfig_type_known("session-affinity-scorer"));
    assert_false(eppconfig_type_known("Queue-Scorer"));
    assert_false(eppconfig_type_known(""));

    /* Too large a text. */
    struct spec_errors errs;
    spec_errors_init(&errs);
    char *big = calloc(1, EPPCONFIG_MAX_TEXT + 2);
    assert_non_null(big);
    memset(big, ' ', EPPCONFIG_MAX_TEXT + 1);
    assert_int_equal(eppconfig_parse(big, EPPCONFIG_MAX_TEXT + 1, "cfg", NULL, 0, NULL, &errs),
                     -EINVAL);
    assert_error(&errs, "cfg", "at most");
    free(big);
}

/* to_yaml output reads back (lib/yaml) as an equal value. */
static void round_trip(struct json_object *v)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(eppconfig_to_yaml(v, &b), 0);
    char err[256];
    struct json_object *back = NULL;
    if (yaml_parse_one(b.data, b.len, &back, err, sizeof(err)) != 0) {
        fail_msg("emitted YAML does not parse (%s):\n%s", err, buf_cstr(&b));
    }
    if (!json_object_equal(v, back)) {
        fail_msg("round trip differs:\n%s\nfrom %s", buf_cstr(&b), json_object_to_json_string(v));
    }
    json_object_put(back);
    buf_free(&b);
}

static void test_yaml_round_trip(void **state)
{
    (void)state;
    static const char *const strings[] = {
        "plain",
        "",
        "yes",
        "No",
        "on",
        "OFF",
        "y",
        "n",
        "true",
        "null",
        "~",
        "8000",
        "1e3",
        "0x1F",
        "0755",
        ".inf",
        "-x",
        "- x",
        "a: b",
        "a #b",
        "#c",
        " lead",
        "trail ",
        "@x",
        "*x",
        "&x",
        "!x",
        "%x",
        "`x`",
        "|",
        ">",
        "'q'",
        "\"dq\"",
        "{a}",
        "[a]",
        "a,b",
        "?",
        "line\nbreak",
        "tab\there",
        "back\\slash",
        "\x01\x7f",
        "é ü 漢字",
        "\xc2\x85nel",
        "\xe2\x80\xa8ls",
        "\357\273\277bom",
        "llm-d.ai/v1alpha1",
        "/health",
        "_x",
        "a.b-c_d",
        "=",
        "<<",
    };
    for (size_t i = 0; i < ARRAY_SIZE(strings); i++) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, strings[i], json_object_new_string(strings[i]));
        json_object_object_add(o, "list", json_object_new_array());
        json_object_array_add(json_object_object_get(o, "list"),
                              json_object_new_string(strings[i]));
        round_trip(o);
        json_object_put(o);
    }
    static const char *const docs[] = {
        "{a: 1, b: -2, c: 0.5, d: 1.0e+300, e: true, f: false, g: null, h: {}, i: [], j: [[1, 2], "
        "[], [[3]]], k: [{x: 1, y: [a, {z: {}}]}, {}], l: 9223372036854775807}",
        "[1, [2, [3, {a: [4]}]], {}, [], null, '']",
        "{nested: {deeper: {deepest: [{k: v}, {k2: [v2, v3]}]}}}",
    };
    for (size_t i = 0; i < ARRAY_SIZE(docs); i++) {
        struct json_object *o = yaml_obj(docs[i]);
        round_trip(o);
        json_object_put(o);
    }
    struct json_object *s = json_object_new_string("only");
    round_trip(s);
    json_object_put(s);

    /* NaN cannot be written. */
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "x", json_object_new_double(NAN));
    struct buf b;
    buf_init(&b, 1024);
    assert_int_equal(eppconfig_to_yaml(o, &b), -EINVAL);
    buf_free(&b);
    json_object_put(o);

    /* Too deep. */
    struct json_object *deep = json_object_new_array(), *cur = deep;
    for (int i = 0; i < 80; i++) {
        struct json_object *next = json_object_new_array();
        json_object_array_add(cur, json_object_new_int(i));
        json_object_array_add(cur, next);
        cur = next;
    }
    buf_init(&b, 1 << 20);
    assert_int_equal(eppconfig_to_yaml(deep, &b), -EINVAL);
    buf_free(&b);
    json_object_put(deep);

    /* A full buffer reports -ENOSPC. */
    struct spec_pool pool;
    o = pool_from(POOL(""), &pool);
    buf_init(&b, 64);
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(eppconfig_render(&pool, &b, &errs), -ENOSPC);
    buf_free(&b);
    spec_pool_free(&pool);
    json_object_put(o);
}

/* The exact layout for an ordinary config: block style, two-space indent, sequences under a key
 * at the key's indent (libyaml's style), empty containers inline, strings quoted only when needed.
 */
static void test_yaml_format(void **state)
{
    (void)state;
    struct json_object *o = yaml_obj(
        "{apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig, featureGates: [], plugins: "
        "[{name: q, type: queue-scorer, parameters: {}}, {type: pd-profile-handler, parameters: "
        "{threshold: 100, ratio: 0.25, on: true}}], schedulingProfiles: [{name: default, plugins: "
        "[{pluginRef: q, weight: 2.5}]}], nested: [[1, 'on'], [], null, ' x', 'a: b']}");
    static const char want[] = "apiVersion: llm-d.ai/v1alpha1\n"
                               "kind: EndpointPickerConfig\n"
                               "featureGates: []\n"
                               "plugins:\n"
                               "- name: q\n"
                               "  type: queue-scorer\n"
                               "  parameters: {}\n"
                               "- type: pd-profile-handler\n"
                               "  parameters:\n"
                               "    threshold: 100\n"
                               "    ratio: 0.25\n"
                               "    \"true\": true\n"
                               "schedulingProfiles:\n"
                               "- name: default\n"
                               "  plugins:\n"
                               "  - pluginRef: q\n"
                               "    weight: 2.5\n"
                               "nested:\n"
                               "- - 1\n"
                               "  - \"on\"\n"
                               "- []\n"
                               "- null\n"
                               "- \" x\"\n"
                               "- \"a: b\"\n";
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(eppconfig_to_yaml(o, &b), 0);
    assert_string_equal(buf_cstr(&b), want);
    buf_free(&b);
    round_trip(o);
    json_object_put(o);
}

static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/*
 * Issue 16: a mapping key past YAML's 1,024-character limit for implicit keys was written as an
 * implicit key, and reading the ConfigMap back failed. Long keys are written as explicit "? key".
 */
static void test_yaml_long_keys(void **state)
{
    (void)state;
    static const size_t lengths[] = {1024, 1025, 1100, 5000};
    for (size_t i = 0; i < ARRAY_SIZE(lengths); i++) {
        char *plain = repeat('k', lengths[i]);
        char *quoted = repeat('q', lengths[i]);
        quoted[1] = ':'; /* "q: q #qqq...": needs quotes */
        quoted[2] = ' ';
        quoted[4] = ' ';
        quoted[5] = '#';
        struct json_object *o = json_object_new_object();
        struct json_object *inner = json_object_new_object();
        struct json_object *list = json_object_new_array();
        json_object_object_add(inner, plain, json_object_new_int(1));
        json_object_array_add(list, json_object_new_string(quoted));
        json_object_object_add(inner, "list", list);
        json_object_object_add(o, plain, json_object_new_string("scalar"));
        json_object_object_add(o, quoted, inner);
        round_trip(o);
        struct buf b;
        buf_init(&b, 1 << 20);
        assert_int_equal(eppconfig_to_yaml(o, &b), 0);
        assert_non_null(strstr(buf_cstr(&b), "? kkkk"));
        buf_free(&b);
        json_object_put(o);
        free(plain);
        free(quoted);
    }

    /* More output than libyaml buffers at once (16 KiB): written in several pieces. */
    struct json_object *big = json_object_new_object();
    for (int i = 0; i < 40; i++) {
        char *k = repeat((char)('a' + i % 26), 1100);
        k[0] = (char)('A' + i / 26);
        json_object_object_add(big, k, json_object_new_int(i));
        free(k);
    }
    round_trip(big);
    json_object_put(big);

    /* Through the operator's path: an inline config with a long parameter name renders to a
     * ConfigMap text that eppconfig_parse reads back as the same object. */
    char *k = repeat('p', 1100);
    struct json_object *o = yaml_obj(POOL("routingPolicy: {endpointPickerConfig: {inline: "
                                          "{apiVersion: llm-d.ai/v1alpha1, kind: "
                                          "EndpointPickerConfig, plugins: [{name: q, type: "
                                          "queue-scorer, parameters: {}}], schedulingProfiles: "
                                          "[{name: default, plugins: [{pluginRef: q}]}]}}}"));
    struct json_object *params =
        json_get(o, "spec.routingPolicy.endpointPickerConfig.inline.plugins[0].parameters");
    assert_non_null(params);
    json_object_object_add(params, k, json_object_new_string("long"));
    struct spec_pool pool;
    struct spec_errors errs;
    spec_errors_init(&errs);
    assert_int_equal(spec_pool_parse(o, &pool, &errs), 0);
    struct buf b;
    buf_init(&b, EPPCONFIG_MAX_TEXT);
    assert_int_equal(eppconfig_render(&pool, &b, &errs), 0);
    struct json_object *back = NULL;
    if (eppconfig_parse(b.data, b.len, "config", NULL, 0, &back, &errs) != 0) {
        dump_errors(&errs);
        fail_msg("rendered config does not parse:\n%s", buf_cstr(&b));
    }
    assert_true(json_object_equal(back, pool.routing.inline_obj));
    json_object_put(back);
    buf_free(&b);
    spec_pool_free(&pool);
    json_object_put(o);
    free(k);
}

/* Strings that read as other types, or need quoting or escapes, as keys, values and items. */
static void test_yaml_strings(void **state)
{
    (void)state;
    static const char *const strings[] = {
        "True",
        "FALSE",
        "Null",
        "NULL",
        "Yes",
        "ON",
        "0o17",
        "0b101",
        "+1",
        "-1",
        "1_000",
        ".5",
        "1.",
        "+.inf",
        ".NaN",
        "-.INF",
        "2001-12-14",
        "0x10",
        "1e3",
        "12:30",
        "0",
        "-0",
        "  ",
        " both ",
        "multi\nline\ntext\n",
        "\n",
        "\r\n",
        "cr\rhere",
        "quote\"s and 'single'",
        "colon: space",
        "key:",
        "a:b",
        "# comment",
        "x #y",
        "-",
        "--",
        "---",
        "...",
        "- item",
        "? q",
        ": v",
        "!!str x",
        "!x y",
        "&a",
        "*a",
        "%YAML",
        "@",
        "`",
        "{",
        "}",
        "[",
        "]",
        ",",
        "|-\n",
        ">+",
        "\\",
        "\\n",
        "漢字",
        "emoji \xf0\x9f\x98\x80",
        "\x1b[0m",
        "\x7f",
        "\t",
        "\xc2\xa0nbsp",
        "\xef\xbf\xbe",
        "\xc2\x80-c1",
        "\xe2\x80\xa9ps",
        "inf",
        "nan",
        "e3",
        "x\x01\x02\x1f",
    };
    for (size_t i = 0; i < ARRAY_SIZE(strings); i++) {
        struct json_object *o = json_object_new_object();
        struct json_object *list = json_object_new_array();
        json_object_object_add(o, strings[i], json_object_new_string(strings[i]));
        json_object_array_add(list, json_object_new_string(strings[i]));
        json_object_array_add(list, json_object_new_string(""));
        json_object_object_add(o, "list", list);
        round_trip(o);
        round_trip(list);
        json_object_put(o);
    }
    /* A long line with spaces is not folded (it would read back the same, but be harder to
     * read and diff). */
    char *words = repeat('w', 400);
    for (size_t i = 4; i < 400; i += 5) {
        words[i] = ' ';
    }
    struct json_object *long_text = json_object_new_string(words);
    round_trip(long_text);
    struct buf text;
    buf_init(&text, 1 << 20);
    assert_int_equal(eppconfig_to_yaml(long_text, &text), 0);
    assert_ptr_equal(strchr(buf_cstr(&text), '\n'), buf_cstr(&text) + text.len - 1);
    buf_free(&text);
    json_object_put(long_text);
    free(words);

    /* All the control characters, and a NUL inside a value. */
    char ctl[33];
    for (int i = 0; i < 32; i++) {
        ctl[i] = (char)(i + 1);
    }
    ctl[32] = '\0';
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, ctl, json_object_new_string(ctl));
    json_object_object_add(o, "nul", json_object_new_string_len("a\0b", 3));
    round_trip(o);
    json_object_put(o);

    /* Numbers keep their type and value. */
    o = yaml_obj("{a: 0.1, b: 1.0e-300, c: 5.0e-324, d: 1.7976931348623157e+308, e: -0.0, f: "
                 "1.0, g: 123456789012345678, h: -9223372036854775808, i: 18446744073709551615, "
                 "j: 3.141592653589793}");
    round_trip(o);
    json_object_put(o);

    /* Text that is not UTF-8 cannot be written, and nothing is. */
    struct buf b;
    buf_init(&b, 1024);
    o = json_object_new_object();
    json_object_object_add(o, "ok", json_object_new_string("fine"));
    json_object_object_add(o, "bad", json_object_new_string("\xff\xfe"));
    assert_int_equal(eppconfig_to_yaml(o, &b), -EINVAL);
    assert_int_equal(b.len, 0);
    assert_int_equal(buf_error(&b), 0);
    json_object_put(o);
    o = json_object_new_object();
    json_object_object_add(o, "\xc0\xaf", json_object_new_string("overlong key"));
    assert_int_equal(eppconfig_to_yaml(o, &b), -EINVAL);
    assert_int_equal(b.len, 0);
    json_object_put(o);
    buf_free(&b);
}

/* Builds depth + 1 nested non-empty containers (the root is depth 0), alternating mappings and
 * sequences, with an empty mapping and a scalar in the innermost. */
static struct json_object *nested(int depth)
{
    struct json_object *root = json_object_new_object(), *cur = root;
    for (int i = 1; i <= depth; i++) {
        struct json_object *next = i % 2 ? json_object_new_array() : json_object_new_object();
        if (json_object_is_type(cur, json_type_object)) {
            json_object_object_add(cur, "x", json_object_new_int(i));
            json_object_object_add(cur, i % 3 ? "next" : "a: b", next);
        } else {
            json_object_array_add(cur, json_object_new_string("on"));
            json_object_array_add(cur, next);
        }
        cur = next;
    }
    if (json_object_is_type(cur, json_type_object)) {
        json_object_object_add(cur, "leaf", json_object_new_object());
    } else {
        json_object_array_add(cur, json_object_new_object());
    }
    return root;
}

static void test_yaml_depth_limit(void **state)
{
    (void)state;
    struct json_object *o = nested(64); /* the deepest allowed */
    round_trip(o);
    json_object_put(o);

    o = nested(65);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(eppconfig_to_yaml(o, &b), -EINVAL);
    assert_int_equal(b.len, 0);
    buf_free(&b);
    json_object_put(o);

    /* NaN and infinity anywhere leave the buffer as it was. */
    o = nested(10);
    json_object_object_add(o, "inf", json_object_new_double(-INFINITY));
    buf_init(&b, 1 << 20);
    assert_int_equal(buf_appends(&b, "keep\n"), 0);
    assert_int_equal(eppconfig_to_yaml(o, &b), -EINVAL);
    assert_string_equal(buf_cstr(&b), "keep\n");
    assert_int_equal(buf_error(&b), 0);
    buf_free(&b);
    json_object_put(o);

    /* A buffer too small for the document: -ENOSPC, and the failure is sticky. */
    struct spec_pool pool;
    o = pool_from(POOL(""), &pool);
    struct json_object *cfg = eppconfig_generate(&pool);
    buf_init(&b, 100);
    assert_int_equal(eppconfig_to_yaml(cfg, &b), -ENOSPC);
    assert_int_equal(buf_error(&b), -ENOSPC);
    buf_free(&b);
    json_object_put(cfg);
    spec_pool_free(&pool);
    json_object_put(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_default),      cmocka_unit_test(test_generate_weights),
        cmocka_unit_test(test_generate_round_robin),  cmocka_unit_test(test_generate_disaggregated),
        cmocka_unit_test(test_render_inline_and_ref), cmocka_unit_test(test_validate),
        cmocka_unit_test(test_yaml_round_trip),       cmocka_unit_test(test_yaml_format),
        cmocka_unit_test(test_yaml_long_keys),        cmocka_unit_test(test_yaml_strings),
        cmocka_unit_test(test_yaml_depth_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
