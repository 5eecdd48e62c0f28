/*
 * Unit tests for the pure half of operator/controller/apply: apply_decide (create / update /
 * nothing / not ours) and apply_merge (what is PUT), on the desired objects the builders make for
 * the example custom resources (tests/data/crs.json) and those objects as an API server returned
 * them (tests/data/live.json): the merge always satisfies desired_needs_update, keeps what the
 * server and other actors set (resourceVersion, status, defaults, an HPA's replicas, foreign
 * labels and annotations, other owner references) and replaces what the operator owns.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"
#include "lib/yaml.h"
#include "operator/controller/apply.h"
#include "operator/controller/desired.h"
#include "operator/controller/spec.h"
#include "operator/controller/status.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail_msg("cannot open %s", path);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    data[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return data;
}

/* The items of a List file (a new reference). */
static struct json_object *load_items(const char *path)
{
    size_t len;
    char *text = slurp(path, &len);
    char err[256];
    struct json_object *doc = yaml_parse(text, len, err, sizeof(err));
    free(text);
    if (!doc) {
        fail_msg("%s: %s", path, err);
    }
    struct json_object *items = json_object_get(json_get(doc, "items"));
    json_object_put(doc);
    assert_non_null(items);
    return items;
}

static struct json_object *find(struct json_object *items, const char *kind, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(items); i++) {
        struct json_object *d = json_object_array_get_idx(items, i);
        const char *k = NULL, *n = NULL;
        json_get_string(d, "kind", &k, NULL, 0);
        json_get_string(d, "metadata.name", &n, NULL, 0);
        if (k && n && strcmp(k, kind) == 0 && strcmp(n, name) == 0) {
            return d;
        }
    }
    return NULL;
}

static struct json_object *copy(struct json_object *o)
{
    struct json_object *c = NULL;
    assert_int_equal(json_object_deep_copy(o, &c, NULL), 0);
    return c;
}

static const char *str(struct json_object *o, const char *path)
{
    const char *s = NULL;
    return json_get_string(o, path, &s, NULL, 0) == 0 ? s : NULL;
}

struct fixture {
    struct json_object *crs, *live, *desired; /* desired: every object for every CR */
};

static struct fixture fx;

static void add_all(struct json_object *dst, struct json_object *src)
{
    for (size_t i = 0; i < json_object_array_length(src); i++) {
        json_object_array_add(dst, json_object_get(json_object_array_get_idx(src, i)));
    }
}

static int setup(void **state)
{
    (void)state;
    fx.crs = load_items("data/crs.json");
    fx.live = load_items("data/live.json");
    fx.desired = json_object_new_array();
    for (size_t i = 0; i < json_object_array_length(fx.crs); i++) {
        struct json_object *o = json_object_array_get_idx(fx.crs, i);
        if (strcmp(str(o, "kind"), SPEC_POOL_KIND) != 0) {
            continue;
        }
        struct spec_pool pool;
        struct spec_errors errs;
        spec_errors_init(&errs);
        if (spec_pool_parse(o, &pool, &errs) != 0) {
            spec_pool_free(&pool);
            continue;
        }
        struct json_object *objs = NULL;
        if (desired_pool_objects(&pool, NULL, &objs, &errs) == 0) {
            add_all(fx.desired, objs);
            json_object_put(objs);
        }
        for (size_t j = 0; j < json_object_array_length(fx.crs); j++) {
            struct json_object *m = json_object_array_get_idx(fx.crs, j);
            const char *ref = str(m, "spec.poolRef.name");
            if (strcmp(str(m, "kind"), SPEC_MODEL_KIND) != 0 || !ref ||
                strcmp(ref, pool.name) != 0) {
                continue;
            }
            struct spec_model model;
            if (spec_model_parse(m, &model, &errs) == 0 &&
                desired_model_objects(&pool, &model, NULL, &objs) == 0) {
                add_all(fx.desired, objs);
                json_object_put(objs);
            }
            spec_model_free(&model);
        }
        spec_pool_free(&pool);
    }
    return json_object_array_length(fx.desired) > 20 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_object_put(fx.crs);
    json_object_put(fx.live);
    json_object_put(fx.desired);
    return 0;
}

/* ---- decide ---- */

static void test_decide_basic(void **state)
{
    (void)state;
    struct json_object *d = find(fx.desired, "Deployment", "llama-1b-decode");
    assert_non_null(d);
    assert_int_equal(apply_decide(NULL, d), APPLY_CREATE);

    /* the desired object itself as live (plus server fields): nothing to do */
    struct json_object *live = copy(d);
    json_object_object_add(json_get(live, "metadata"), "resourceVersion",
                           json_object_new_string("17"));
    json_object_object_add(live, "status", json_object_new_object());
    assert_int_equal(apply_decide(live, d), APPLY_NONE);

    /* an owned field differs */
    json_object_object_add(json_get(live, "spec.template.spec.containers[0]"), "image",
                           json_object_new_string("other:1"));
    assert_int_equal(apply_decide(live, d), APPLY_UPDATE);

    /* being deleted: leave it, its deletion brings the owner back */
    json_object_object_add(json_get(live, "metadata"), "deletionTimestamp",
                           json_object_new_string("2024-01-01T00:00:00Z"));
    assert_int_equal(apply_decide(live, d), APPLY_NONE);
    json_object_put(live);

    /* controlled by another owner: never taken over */
    live = copy(d);
    json_object_object_add(json_get(live, "metadata.ownerReferences[0]"), "uid",
                           json_object_new_string("someone-else"));
    assert_int_equal(apply_decide(live, d), APPLY_CONFLICT);
    /* a non-controller reference is fine (adoption keeps it) */
    json_object_object_add(json_get(live, "metadata.ownerReferences[0]"), "controller",
                           json_object_new_boolean(0));
    assert_int_equal(apply_decide(live, d), APPLY_UPDATE);
    /* no owner at all: adopt */
    json_object_object_del(json_get(live, "metadata"), "ownerReferences");
    assert_int_equal(apply_decide(live, d), APPLY_UPDATE);
    json_object_put(live);
}

/* For every object of live.json: the decision matches desired_needs_update, and the merge keeps
 * the server's fields while satisfying desired. */
static void test_merge_fixtures(void **state)
{
    (void)state;
    size_t checked = 0;
    for (size_t i = 0; i < json_object_array_length(fx.live); i++) {
        struct json_object *live = json_object_array_get_idx(fx.live, i);
        struct json_object *d = find(fx.desired, str(live, "kind"), str(live, "metadata.name"));
        if (!d) {
            continue;
        }
        checked++;
        enum apply_action a = apply_decide(live, d);
        assert_int_equal(a, desired_needs_update(live, d) ? APPLY_UPDATE : APPLY_NONE);

        /* edit an owned label so an update is needed; the merge must repair it */
        struct json_object *edited = copy(live);
        json_object_object_add(json_get(edited, "metadata.labels"), LABEL_MANAGED_BY,
                               json_object_new_string("someone"));
        assert_int_equal(apply_decide(edited, d), APPLY_UPDATE);
        struct json_object *m = apply_merge(edited, d);
        assert_non_null(m);
        assert_false(desired_needs_update(m, d));
        assert_string_equal(str(m, "metadata.resourceVersion"),
                            str(live, "metadata.resourceVersion"));
        assert_string_equal(str(m, "metadata.uid"), str(live, "metadata.uid"));
        assert_false(status_differs(json_get(live, "status"), json_get(m, "status")));
        /* nothing the server set on spec that desired does not mention is lost */
        struct json_object *lspec = json_get(live, "spec");
        if (lspec && json_object_is_type(lspec, json_type_object)) {
            json_object_object_foreach(lspec, k, v)
            {
                (void)v;
                struct json_object *mv = NULL;
                assert_true(json_object_object_get_ex(json_get(m, "spec"), k, &mv));
            }
        }
        json_object_put(m);
        json_object_put(edited);
    }
    assert_true(checked >= 30);
}

/* The HPA owns spec.replicas of autoscaled Deployments: the merge leaves it alone. */
static void test_merge_keeps_hpa_replicas(void **state)
{
    (void)state;
    struct json_object *d = find(fx.desired, "Deployment", "scaled-model-decode");
    struct json_object *live0 = find(fx.live, "Deployment", "scaled-model-decode");
    assert_non_null(d);
    assert_non_null(live0);
    assert_null(json_get(d, "spec.replicas")); /* pool has autoscaling */
    struct json_object *live = copy(live0);
    json_object_object_add(json_get(live, "spec"), "replicas", json_object_new_int(7));
    assert_int_equal(apply_decide(live, d),
                     desired_needs_update(live0, d) ? APPLY_UPDATE : APPLY_NONE);
    /* also a rollout restart annotation and a foreign label, both kept */
    struct json_object *tmeta = json_get(live, "spec.template.metadata");
    struct json_object *ann = json_get(tmeta, "annotations");
    json_object_object_add(ann, "kubectl.kubernetes.io/restartedAt",
                           json_object_new_string("2024-01-01T00:00:00Z"));
    json_object_object_add(json_get(live, "metadata.labels"), "team", json_object_new_string("ml"));
    json_object_object_add(json_get(live, "spec.template.spec.containers[0]"), "image",
                           json_object_new_string("old:0"));
    assert_int_equal(apply_decide(live, d), APPLY_UPDATE);
    struct json_object *m = apply_merge(live, d);
    assert_non_null(m);
    int64_t replicas = 0;
    assert_int_equal(json_get_int64(m, "spec.replicas", &replicas, NULL, 0), 0);
    assert_int_equal(replicas, 7);
    assert_string_equal(str(m, "spec.template.spec.containers[0].image"),
                        str(d, "spec.template.spec.containers[0].image"));
    struct json_object *mann = json_get(m, "spec.template.metadata.annotations"), *v = NULL;
    assert_true(json_object_object_get_ex(mann, "kubectl.kubernetes.io/restartedAt", &v));
    assert_true(json_object_object_get_ex(json_get(m, "metadata.labels"), "team", &v));
    assert_false(desired_needs_update(m, d));
    json_object_put(m);
    json_object_put(live);
}

/* Maps the operator owns whole are replaced; ConfigMap data loses keys it does not want. */
static void test_merge_replaces_owned_maps(void **state)
{
    (void)state;
    struct json_object *d = find(fx.desired, "ConfigMap", "llama-pd-epp-config");
    struct json_object *live = copy(find(fx.live, "ConfigMap", "llama-pd-epp-config"));
    json_object_object_add(json_get(live, "data"), "stray", json_object_new_string("x"));
    assert_int_equal(apply_decide(live, d), APPLY_UPDATE);
    struct json_object *m = apply_merge(live, d);
    assert_false(json_object_object_get_ex(json_get(m, "data"), "stray", NULL));
    assert_false(desired_needs_update(m, d));
    json_object_put(m);
    json_object_put(live);

    d = find(fx.desired, "Deployment", "llama-1b-prefill");
    live = copy(find(fx.live, "Deployment", "llama-1b-prefill"));
    struct json_object *ns = json_object_new_object();
    json_object_object_add(ns, "zone", json_object_new_string("a"));
    json_object_object_add(json_get(live, "spec.template.spec"), "nodeSelector", ns);
    assert_int_equal(apply_decide(live, d), APPLY_UPDATE);
    m = apply_merge(live, d);
    struct json_object *mns = json_get(m, "spec.template.spec.nodeSelector");
    assert_true(!mns || json_object_object_length(mns) == 0);
    assert_false(desired_needs_update(m, d));
    json_object_put(m);
    json_object_put(live);
}

/* Owner references: other references are kept, the operator's is set (adoption). */
static void test_merge_owner_refs(void **state)
{
    (void)state;
    struct json_object *d = find(fx.desired, "Service", "qwen-epp");
    struct json_object *live = copy(find(fx.live, "Service", "qwen-epp"));
    struct json_object *refs = json_object_new_array(), *other = json_object_new_object();
    json_object_object_add(other, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(other, "kind", json_object_new_string("ConfigMap"));
    json_object_object_add(other, "name", json_object_new_string("anchor"));
    json_object_object_add(other, "uid", json_object_new_string("u-anchor"));
    json_object_array_add(refs, other);
    json_object_object_add(json_get(live, "metadata"), "ownerReferences", refs);
    json_object_object_del(json_get(live, "metadata"), "labels");
    assert_int_equal(apply_decide(live, d), APPLY_UPDATE);
    struct json_object *m = apply_merge(live, d);
    struct json_object *mrefs = json_get(m, "metadata.ownerReferences");
    assert_int_equal(json_object_array_length(mrefs), 2);
    assert_string_equal(str(m, "metadata.ownerReferences[0].uid"), "u-anchor");
    assert_string_equal(str(m, "metadata.ownerReferences[1].uid"),
                        str(d, "metadata.ownerReferences[0].uid"));
    struct json_object *mv = NULL;
    assert_true(json_object_object_get_ex(json_get(m, "metadata.labels"), LABEL_MANAGED_BY, &mv));
    assert_string_equal(json_object_get_string(mv), MANAGED_BY_OPERATOR);
    assert_false(desired_needs_update(m, d));
    json_object_put(m);
    json_object_put(live);
    assert_null(apply_merge(NULL, d));
    assert_true(reconcile_is_stale(KUBE_ECONFLICT));
    assert_true(reconcile_is_stale(KUBE_EEXISTS));
    assert_false(reconcile_is_stale(KUBE_EINVALID));
    struct reconcile_result res = {0};
    assert_int_equal(reconcile_requeue_stale(KUBE_EINVALID, &res), KUBE_EINVALID);
    assert_int_equal(reconcile_requeue_stale(0, &res), 0);
    assert_int_equal(res.requeue, 0);
    assert_int_equal(reconcile_requeue_stale(KUBE_ECONFLICT, &res), 0);
    assert_int_equal(res.requeue, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide_basic),
        cmocka_unit_test(test_merge_fixtures),
        cmocka_unit_test(test_merge_keeps_hpa_replicas),
        cmocka_unit_test(test_merge_replaces_owned_maps),
        cmocka_unit_test(test_merge_owner_refs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
