/*
 * Every EndpointPickerConfig the operator generates (operator/controller/eppconfig.c) must load
 * here, with the handler, profiles and weights the operator meant.
 */
#include "lib/buf.h"
#include "operator/controller/eppconfig.h"
#include "operator/controller/spec.h"
#include "operator/epp/sched/tests/sched_test.h"

#define POOL(spec) "{metadata: {name: p}, spec: {selector: {matchLabels: {app: p}}, " spec "}}"

static const char *const pools[] = {
    POOL(""),
    POOL("routingPolicy: {loadBalancing: {weights: {cacheHit: 5, load: 1, latency: 0}}}"),
    POOL("routingPolicy: {schedulerProfile: fast, loadBalancing: {weights: {cacheHit: 0, load: "
         "7}}}"),
    POOL("routingPolicy: {type: RoundRobin}"),
    POOL("disaggregation: {enabled: true}"),
    POOL("disaggregation: {enabled: true, threshold: 256}"),
    POOL("routingPolicy: {loadBalancing: {weights: {cacheHit: 0}}}, disaggregation: {enabled: "
         "true, threshold: 0}"),
    POOL("routingPolicy: {schedulerProfile: main}, disaggregation: {enabled: true, "
         "prefillSelector: {matchLabels: {stage: p}}, decodeSelector: {matchExpressions: [{key: "
         "stage, operator: In, values: [d]}]}}"),
};

/* Renders the operator's config for the pool spec in yaml; the caller frees the buffer. */
static void render(const char *yaml, struct buf *out)
{
    char err[256];
    struct json_object *o = yaml_parse(yaml, strlen(yaml), err, sizeof(err));
    struct spec_pool pool;
    struct spec_errors errs;
    assert_non_null(o);
    spec_errors_init(&errs);
    assert_int_equal(spec_pool_parse(o, &pool, &errs), 0);
    buf_init(out, EPPCONFIG_MAX_TEXT);
    assert_int_equal(eppconfig_render(&pool, out, &errs), 0);
    spec_pool_free(&pool);
    json_object_put(o);
}

static void test_generated_configs_load(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++) {
        struct buf b;
        char err[512] = "";
        render(pools[i], &b);
        struct epp_sched *s = epp_sched_new(b.data, b.len, NULL, err, sizeof(err));
        if (!s) {
            fail_msg("pool %zu: generated config does not load: %s\n%s", i, err, buf_cstr(&b));
        }
        const struct epp_sched_needs *nd = epp_sched_needs(s);
        bool want_pd = strstr(pools[i], "disaggregation") != NULL;
        assert_int_equal(nd->pd, want_pd);
        /* Every profile schedules over two decode-capable endpoints and a prefill one. */
        struct fixture f;
        struct epp_sched_result res;
        fixture_init(&f, 3);
        f.eps[2].role = EPP_ROLE_PREFILL;
        for (int e = 0; e < 3; e++) {
            fixture_labels(&f, e, e == 2 ? "{stage: p}" : "{stage: d}");
        }
        struct epp_request r = {.model = "m", .prompt_tokens = 4096};
        assert_int_equal(epp_schedule(s, &r, f.ptrs, NULL, 3, &res), 0);
        assert_true(res.targets[0] != &f.eps[2]);
        if (want_pd) {
            assert_ptr_equal(res.prefill, &f.eps[2]);
        }
        fixture_free(&f);
        epp_sched_free(s);
        buf_free(&b);
    }
}

static void test_generated_weights(void **state)
{
    (void)state;
    struct buf b;
    render(pools[1], &b);
    struct epp_sched *s = load_ok(buf_cstr(&b));
    struct profile *pr = &s->profiles[0];
    assert_int_equal(pr->n_scorers, 2); /* latency 0: kv-cache scorer left out */
    for (int i = 0; i < pr->n_scorers; i++) {
        const char *t = pr->scorers[i].p->ops->type;
        double want = strcmp(t, "precise-prefix-cache-scorer") == 0 ? 5 : 1;
        assert_true(pr->scorers[i].weight == want);
    }
    epp_sched_free(s);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated_configs_load),
        cmocka_unit_test(test_generated_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
