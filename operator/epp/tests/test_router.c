/*
 * Tests of the EPP's request path (operator/epp/router.h) without sockets: a datastore of
 * endpoints with metrics, InferenceModels, and the scheduler. Model mapping (404, the oldest
 * model, targetModels split by weight over 2,000 decisions, LoRA targets, the body rewrite),
 * criticality (Sheddable gets 429 only when the pool is saturated, Critical is routed), bad
 * bodies (400), no endpoint (503), the subset hint, ejection after repeated failures, the
 * in-flight accounting and the session token.
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

#include "lib/clock.h"
#include "lib/json.h"
#include "operator/epp/datastore.h"
#include "operator/epp/router_internal.h"
#include "operator/epp/sched/sched.h"

struct fx {
    struct epp_ds *ds;
    struct epp_router r;
};

/* Endpoints 10.0.0.1-3 (model label "base"), 10.0.0.4 ("other"), all decode, fresh metrics. */
static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    f->ds = epp_ds_new(NULL);
    f->r.ds = f->ds;
    f->r.sched = epp_sched_new(NULL, 0, NULL, NULL, 0);
    f->r.rng = 42;
    assert_non_null(f->r.sched);
    for (int i = 0; i < 4; i++) {
        char ip[32], name[16];
        snprintf(ip, sizeof ip, "10.0.0.%d", i + 1);
        snprintf(name, sizeof name, "pod-%d", i);
        struct epp_pod p = {.ns = "ns",
                            .name = name,
                            .ip = ip,
                            .port = 8000,
                            .ready = true,
                            .model = i < 3 ? "base" : "other"};
        assert_int_equal(epp_ds_upsert(f->ds, &p), 0);
        struct epp_endpoint *ep = epp_ds_at(f->ds, (size_t)i);
        ep->m.valid = true;
        ep->m.updated_ms = tandem_now_ms();
        ep->stale = false;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    epp_ds_free(f->ds);
    epp_sched_free(f->r.sched);
    free(f);
    return 0;
}

static void add_model(struct fx *f, const char *name, const char *model_name,
                      enum epp_criticality crit, int64_t created)
{
    struct epp_model m = {.name = (char *)name,
                          .model_name = (char *)model_name,
                          .criticality = crit,
                          .created = created};
    assert_int_equal(epp_ds_model_upsert(f->ds, &m), 0);
}

static int route(struct fx *f, const char *body, struct epp_decision *d)
{
    struct epp_route_in in = {.path = "/v1/completions", .body = body, .body_len = strlen(body)};
    assert_int_equal(epp_route(&f->r, &in, d), 0);
    return d->status;
}

static void test_models(void **state)
{
    struct fx *f = *state;
    struct epp_decision d;
    /* no InferenceModels: any name, any pod, no rewrite */
    assert_int_equal(route(f, "{\"model\":\"whatever\",\"prompt\":\"hi\"}", &d), 0);
    assert_null(d.body);
    epp_decision_free(&d);
    add_model(f, "base", "chat", EPP_CRIT_STANDARD, 100);
    add_model(f, "other", "code", EPP_CRIT_STANDARD, 100);
    /* an unknown model is vLLM's 404 */
    assert_int_equal(route(f, "{\"model\":\"nope\",\"prompt\":\"hi\"}", &d), 404);
    assert_non_null(strstr(d.message, "The model `nope` does not exist."));
    epp_decision_free(&d);
    /* a model's pods only */
    for (int i = 0; i < 20; i++) {
        assert_int_equal(route(f, "{\"model\":\"code\",\"prompt\":\"hi\"}", &d), 0);
        assert_string_equal(d.targets[0]->name, "pod-3");
        assert_string_equal(d.model, "code");
        epp_decision_free(&d);
        assert_int_equal(route(f, "{\"model\":\"chat\",\"prompt\":\"hi\"}", &d), 0);
        assert_string_not_equal(d.targets[0]->name, "pod-3");
        epp_decision_free(&d);
    }
    /* bad bodies */
    assert_int_equal(route(f, "{\"model\":", &d), 400);
    assert_non_null(strstr(d.message, "JSON object"));
    epp_decision_free(&d);
    assert_int_equal(route(f, "[1,2]", &d), 400);
    epp_decision_free(&d);
}

static void test_target_models_split(void **state)
{
    struct fx *f = *state;
    add_model(f, "other", "code", EPP_CRIT_STANDARD, 100);
    struct epp_model m = {.name = "base", .model_name = "chat", .n_targets = 2};
    m.targets[0].name = "code"; /* another InferenceModel's pods */
    m.targets[0].weight = 30;
    m.targets[1].name = "chat-lora"; /* an adapter of the same pods */
    m.targets[1].weight = 70;
    assert_int_equal(epp_ds_model_upsert(f->ds, &m), 0);
    /* the requested name survives the body's rewrite (it labels the request metric) */
    struct metrics_registry *reg = metrics_registry_new();
    const char *labels[] = {"model_name", "target_model_name"};
    f->r.f_requests = metrics_counter_new(reg, "inference_objective_request_total", "h", 2, labels);
    int code = 0, lora = 0;
    for (int i = 0; i < 2000; i++) {
        struct epp_decision d;
        assert_int_equal(route(f, "{\"model\":\"chat\",\"prompt\":\"hi\"}", &d), 0);
        assert_non_null(d.body); /* the model is rewritten */
        struct json_object *o = json_parse(d.body, d.body_len, NULL, 0);
        const char *model = json_object_get_string(json_get(o, "model"));
        assert_string_equal(model, d.model);
        if (strcmp(model, "code") == 0) {
            code++;
            assert_string_equal(d.targets[0]->name, "pod-3");
        } else {
            assert_string_equal(model, "chat-lora");
            assert_string_not_equal(d.targets[0]->name, "pod-3");
            lora++;
        }
        json_object_put(o);
        epp_decision_free(&d);
    }
    /* 30/70 within ±5 % */
    assert_in_range(code, 600 - 100, 600 + 100);
    assert_int_equal(code + lora, 2000);
    const char *lv[] = {"chat", "code"};
    assert_true(metric_value(metrics_child(f->r.f_requests, lv)) == code);
    lv[1] = "chat-lora";
    assert_true(metric_value(metrics_child(f->r.f_requests, lv)) == lora);
    f->r.f_requests = NULL;
    metrics_registry_free(reg);
}

static void test_criticality(void **state)
{
    struct fx *f = *state;
    add_model(f, "base", "chat", EPP_CRIT_SHEDDABLE, 100);
    add_model(f, "other", "code", EPP_CRIT_CRITICAL, 100);
    struct epp_decision d;
    assert_int_equal(route(f, "{\"model\":\"chat\",\"prompt\":\"hi\"}", &d), 0);
    epp_decision_free(&d);
    /* saturate every pod: queues past the detector's threshold (5) */
    for (size_t i = 0; i < epp_ds_count(f->ds); i++) {
        epp_ds_at(f->ds, i)->m.waiting = 9;
    }
    assert_int_equal(route(f, "{\"model\":\"chat\",\"prompt\":\"hi\"}", &d), 429);
    assert_true(d.sheddable);
    epp_decision_free(&d);
    assert_int_equal(route(f, "{\"model\":\"code\",\"prompt\":\"hi\"}", &d), 0);
    epp_decision_free(&d);
}

static void test_no_endpoint_and_subset(void **state)
{
    struct fx *f = *state;
    struct epp_decision d;
    const char *subset[] = {"10.0.0.2:8000"};
    const char *body = "{\"model\":\"m\",\"prompt\":\"hi\"}";
    struct epp_route_in in = {.path = "/v1/completions",
                              .body = body,
                              .body_len = strlen(body),
                              .subset = subset,
                              .n_subset = 1};
    for (int i = 0; i < 10; i++) {
        assert_int_equal(epp_route(&f->r, &in, &d), 0);
        assert_int_equal(d.status, 0);
        assert_string_equal(d.targets[0]->addr, "10.0.0.2:8000");
        epp_decision_free(&d);
    }
    const char *gone[] = {"10.9.9.9:8000"};
    in.subset = gone;
    assert_int_equal(epp_route(&f->r, &in, &d), 0);
    assert_int_equal(d.status, 503);
    epp_decision_free(&d);
    for (size_t i = 0; i < epp_ds_count(f->ds); i++) {
        epp_ds_at(f->ds, i)->ready = false;
    }
    assert_int_equal(route(f, body, &d), 503);
    assert_non_null(strstr(d.message, "no ready model server"));
    epp_decision_free(&d);
}

static void test_accounting_and_ejection(void **state)
{
    struct fx *f = *state;
    struct epp_decision d;
    assert_int_equal(route(f, "{\"model\":\"m\",\"prompt\":\"a prompt of some length\"}", &d), 0);
    struct epp_endpoint *ep = d.targets[0];
    uint64_t id = ep->id;
    epp_route_started(&f->r, &d, ep);
    assert_int_equal(ep->active_requests, 1);
    assert_true(ep->active_tokens == d.prompt_tokens);
    epp_route_finished(&f->r, &d, id, true);
    assert_int_equal(ep->active_requests, 0);
    assert_true(ep->active_tokens == 0);
    epp_decision_free(&d);
    /* three connection failures in a row take it out of rotation */
    epp_route_failed(&f->r, id);
    epp_route_failed(&f->r, id);
    assert_true(ep->ejected_until_ms == 0);
    epp_route_failed(&f->r, id);
    assert_true(ep->ejected_until_ms > tandem_now_ms());
    for (int i = 0; i < 10; i++) {
        assert_int_equal(route(f, "{\"model\":\"m\",\"prompt\":\"x\"}", &d), 0);
        assert_true(d.targets[0]->id != id);
        for (int k = 0; k < d.n_targets; k++) {
            assert_true(d.target_ids[k] != id);
        }
        epp_decision_free(&d);
    }
    /* an endpoint that left the pool is not found */
    assert_ptr_equal(epp_router_endpoint(&f->r, id), ep);
    epp_ds_remove(f->ds, "ns", ep->name);
    assert_null(epp_router_endpoint(&f->r, id));
}

static void test_session_token(void **state)
{
    struct fx *f = *state;
    char tok[64];
    assert_int_equal(epp_router_session_token(epp_ds_at(f->ds, 0), tok, sizeof tok), 0);
    assert_string_equal(tok, "bnMvcG9kLTA="); /* base64("ns/pod-0") */
    char sched_tok[64];
    assert_true(epp_session_token(epp_ds_at(f->ds, 0), sched_tok, sizeof sched_tok) > 0);
    assert_string_equal(tok, sched_tok); /* the scorer reads what the gateway writes */
    assert_int_equal(epp_router_session_token(epp_ds_at(f->ds, 0), tok, 8), -ENOSPC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_models, setup, teardown),
        cmocka_unit_test_setup_teardown(test_target_models_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_criticality, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_endpoint_and_subset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_accounting_and_ejection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_token, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
