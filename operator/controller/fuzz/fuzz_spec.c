/*
 * Fuzz target for the operator's spec handling: bytes → YAML stream → every document parsed and
 * validated as an InferencePool and as an InferenceModel → for valid ones the EPP config and the
 * desired objects are built. Invariants checked: parse results are 0/-EINVAL/-ENOTSUP with errors
 * exactly when invalid, every error names a field, generated configs validate and survive the
 * YAML round trip, operator pod labels satisfy the pool selector, and a desired object never
 * needs an update against itself.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/json.h"
#include "lib/yaml.h"
#include "operator/controller/desired.h"
#include "operator/controller/eppconfig.h"
#include "operator/controller/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_spec: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_DOCS 8

static void check_errors(int rc, const struct spec_errors *errs)
{
    CHECK(rc == 0 || rc == -EINVAL || rc == -ENOTSUP);
    CHECK((rc == 0) == (errs->n == 0));
    for (int i = 0; i < errs->n; i++) {
        CHECK(errs->e[i].message[0] != '\0');
    }
    char text[512];
    size_t need = spec_errors_format(errs, text, sizeof(text));
    CHECK(strlen(text) == (need < sizeof(text) ? need : sizeof(text) - 1));
}

/* Every built object is unchanged against itself. */
static void check_objects(struct json_object *objs)
{
    for (size_t i = 0; i < json_object_array_length(objs); i++) {
        struct json_object *o = json_object_array_get_idx(objs, i);
        CHECK(o != NULL);
        CHECK(desired_needs_update(o, o) == 0);
        CHECK(json_get(o, "metadata.ownerReferences[0].uid") != NULL);
    }
}

static void check_pool(struct spec_pool *pool)
{
    struct spec_errors errs;
    spec_errors_init(&errs);
    if (!pool->routing.inline_obj && !pool->routing.inline_text && !pool->routing.cm_name) {
        struct json_object *cfg = eppconfig_generate(pool);
        CHECK(cfg != NULL);
        CHECK(eppconfig_validate(cfg, "", NULL, pool->disagg.enabled, &errs) == 0);
        struct buf b;
        buf_init(&b, EPPCONFIG_MAX_TEXT);
        CHECK(eppconfig_to_yaml(cfg, &b) == 0);
        char err[256];
        struct json_object *back = NULL;
        CHECK(yaml_parse_one(b.data, b.len, &back, err, sizeof(err)) == 0);
        CHECK(json_object_equal(cfg, back));
        json_object_put(back);
        buf_free(&b);
        json_object_put(cfg);
    }
    struct json_object *objs = NULL;
    int rc = desired_pool_objects(pool, NULL, &objs, &errs);
    CHECK(rc == 0);
    check_objects(objs);
    json_object_put(objs);
}

static void check_pair(struct spec_pool *pool, struct spec_model *model)
{
    struct spec_errors errs;
    spec_errors_init(&errs);
    int rc = spec_model_check_pool(pool, model, &errs);
    CHECK(rc == 0 || rc == -EINVAL);
    CHECK((rc == 0) == (errs.n == 0));
    if (rc != 0) {
        return;
    }
    enum spec_role roles[3];
    int n = spec_model_roles(model, roles);
    for (int i = 0; i < n; i++) {
        struct json_object *labels = spec_pod_labels(pool, model, roles[i]);
        CHECK(labels && spec_selector_matches(&pool->selector, labels));
        json_object_put(labels);
    }
    struct json_object *objs = NULL;
    CHECK(desired_model_objects(pool, model, NULL, &objs) == 0);
    check_objects(objs);
    json_object_put(objs);
}

/* The YAML emitter reads back as the same value (documents without NaN/Inf, nesting in bounds). */
static void check_yaml_round_trip(struct json_object *doc)
{
    struct buf b;
    buf_init(&b, 1 << 22);
    int rc = eppconfig_to_yaml(doc, &b);
    if (rc == 0) {
        char err[256];
        struct json_object *back = NULL;
        rc = yaml_parse_one(b.data, b.len, &back, err, sizeof(err));
        if (rc != 0 || !json_object_equal(doc, back)) {
            fprintf(stderr, "fuzz_spec: YAML round trip failed (%s):\n%s\n", err, buf_cstr(&b));
            abort();
        }
        json_object_put(back);
    }
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct json_object *docs = NULL;
    if (yaml_parse_all((const char *)data, size, &docs, err, sizeof(err)) != 0) {
        return 0;
    }
    size_t n = json_object_array_length(docs);
    if (n > MAX_DOCS) {
        n = MAX_DOCS;
    }
    struct spec_pool pools[MAX_DOCS];
    struct spec_model models[MAX_DOCS];
    int pool_ok[MAX_DOCS] = {0}, model_ok[MAX_DOCS] = {0};
    for (size_t i = 0; i < n; i++) {
        struct json_object *doc = json_object_array_get_idx(docs, i);
        struct spec_errors errs;

        spec_errors_init(&errs);
        int rc = spec_pool_parse(doc, &pools[i], &errs);
        CHECK(rc != -ENOTSUP);
        check_errors(rc, &errs);
        pool_ok[i] = rc == 0;
        if (pool_ok[i]) {
            check_pool(&pools[i]);
        }

        spec_errors_init(&errs);
        rc = spec_model_parse(doc, &models[i], &errs);
        check_errors(rc, &errs);
        if (rc == -ENOTSUP) {
            CHECK(errs.n == 1 && strcmp(errs.e[0].field, "spec.deployment.type") == 0);
        }
        model_ok[i] = rc == 0;

        check_yaml_round_trip(doc);
    }
    for (size_t m = 0; m < n; m++) {
        for (size_t p = 0; model_ok[m] && p < n; p++) {
            if (pool_ok[p] && strcmp(pools[p].name, models[m].pool_name) == 0) {
                check_pair(&pools[p], &models[m]);
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        spec_pool_free(&pools[i]);
        spec_model_free(&models[i]);
    }
    json_object_put(docs);
    return 0;
}
