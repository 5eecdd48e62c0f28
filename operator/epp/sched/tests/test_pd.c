/*
 * Unit tests for the P/D profile handlers: decode first, prefill only when the uncached prompt
 * tokens reach the threshold (precise match when the request has block keys, else the
 * approximate one), prefill failure → decode-only, and the HEAD deciders.
 */
#include "operator/epp/sched/tests/sched_test.h"

#define PD_PLUGINS                                                                                 \
    "- type: decode-filter\n- type: prefill-filter\n- type: queue-scorer\n"                        \
    "- {type: prefix-cache-scorer, parameters: {blockSizeTokens: 16, autoTune: false}}\n"
#define PD_PROFILES                                                                                \
    "schedulingProfiles:\n"                                                                        \
    "- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: queue-scorer}]\n"       \
    "- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}, "          \
    "{pluginRef: prefix-cache-scorer, weight: 3}]\n"

static const char pd_config[] =
    HDR "plugins:\n" PD_PLUGINS
        "- {type: pd-profile-handler, parameters: {threshold: 100, hashBlockSize: 64}}\n"
        "- type: prefill-header-handler\n" PD_PROFILES;

/* ep0 decode, ep1 prefill. */
static void pd_fixture(struct fixture *f)
{
    fixture_init(f, 2);
    f->eps[0].role = EPP_ROLE_DECODE;
    f->eps[1].role = EPP_ROLE_PREFILL;
}

static void test_pd_threshold(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(pd_config);
    struct fixture f;
    struct epp_sched_result res;
    pd_fixture(&f);
    assert_true(epp_sched_needs(s)->pd);
    struct epp_request r = {.model = "m", .prompt_tokens = 200};
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_true(res.disaggregated);
    assert_ptr_equal(res.targets[0], &f.eps[0]);
    assert_ptr_equal(res.prefill, &f.eps[1]);
    assert_int_equal(res.uncached_tokens, 200);
    assert_string_equal(res.primary_profile, "decode");
    assert_int_equal(res.n_profiles, 2);
    r.prompt_tokens = 99; /* below the threshold: decode only */
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_false(res.disaggregated);
    assert_null(res.prefill);
    assert_int_equal(res.n_profiles, 1);
    r.prompt_tokens = 100; /* at the threshold: P/D */
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_true(res.disaggregated);
    epp_sched_free(s);
}

static void test_pd_precise_estimate(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(pd_config);
    struct fixture f;
    struct epp_sched_result res;
    uint64_t keys[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    pd_fixture(&f);
    struct epp_request r = {.model = "m",
                            .prompt_tokens = 200,
                            .block_keys = keys,
                            .n_block_keys = 12,
                            .block_size = 16};
    f.pm[0].precise_blocks = 7; /* 112 cached, 88 uncached < 100 */
    f.pm[0].precise_score = 7;
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_false(res.disaggregated);
    assert_int_equal(res.uncached_tokens, 88);
    assert_int_equal(res.hit_blocks, 7);
    assert_int_equal(res.total_blocks, 12);
    assert_true(res.hit_ratio > 0.58 && res.hit_ratio < 0.59);
    f.pm[0].precise_blocks = 6; /* 104 uncached */
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_true(res.disaggregated);
    epp_sched_free(s);
}

static void test_pd_approx_estimate(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(pd_config);
    struct fixture f;
    struct epp_sched_result res;
    static char text[801];
    pd_fixture(&f);
    for (int i = 0; i < 800; i++) {
        text[i] = (char)('a' + i % 26);
    }
    struct epp_request r = {
        .model = "m", .prompt_tokens = 200, .prefix_text = text, .prefix_len = 800};
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_true(res.disaggregated);
    assert_int_equal(res.hit_blocks, 0);
    assert_int_equal(res.total_blocks, 12); /* 800 / 64 */
    epp_sched_pre_request(s, &r, &res);
    /* Now 12 blocks of 16 tokens are cached on the decode pod: 8 uncached < 100. */
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_false(res.disaggregated);
    assert_int_equal(res.uncached_tokens, 8);
    assert_int_equal(res.hit_blocks, 12);
    epp_sched_free(s);
}

static void test_pd_failures(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(pd_config);
    struct fixture f;
    struct epp_sched_result res;
    pd_fixture(&f);
    struct epp_request r = {.model = "m", .prompt_tokens = 500};
    f.eps[1].role = EPP_ROLE_DECODE; /* no prefill pod: decode-only */
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_false(res.disaggregated);
    assert_null(res.prefill);
    assert_int_equal(res.n_profiles, 2);
    assert_int_equal(res.profiles[1].status, 503);
    f.eps[0].role = f.eps[1].role = EPP_ROLE_PREFILL; /* no decode pod */
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 503);
    assert_string_equal(res.reason, "failed to find available decode workers");
    epp_sched_free(s);
    /* threshold 0: always P/D. */
    s = load_ok(HDR "plugins:\n" PD_PLUGINS "- type: pd-profile-handler\n" PD_PROFILES);
    pd_fixture(&f);
    r.prompt_tokens = 1;
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_true(res.disaggregated);
    epp_sched_free(s);
}

static void test_disagg_deciders(void **state)
{
    (void)state;
    static const struct {
        const char *decider;
        int64_t tokens;
        bool want;
    } cases[] = {
        {"{type: prefix-based-pd-decider, name: d, parameters: {nonCachedTokens: 16}}", 16, true},
        {"{type: prefix-based-pd-decider, name: d, parameters: {nonCachedTokens: 16}}", 15, false},
        {"{type: prefix-based-pd-decider, name: d}", 100000, false}, /* 0: never */
        {"{type: always-disagg-pd-decider, name: d}", 1, true},
    };
    struct fixture f;
    struct epp_sched_result res;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char yaml[2048];
        snprintf(
            yaml, sizeof(yaml),
            HDR
            "plugins:\n" PD_PLUGINS "- %s\n- {type: disagg-profile-handler, "
            "parameters: {deciders: {prefill: d}}}\n- type: disagg-headers-handler\n" PD_PROFILES,
            cases[i].decider);
        struct epp_sched *s = load_ok(yaml);
        pd_fixture(&f);
        struct epp_request r = {.model = "m", .prompt_tokens = cases[i].tokens};
        assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
        assert_int_equal(res.disaggregated, cases[i].want);
        epp_sched_free(s);
    }
    /* No prefill decider: never disaggregate. Custom profile names. */
    struct epp_sched *s = load_ok(
        HDR "plugins:\n- type: decode-filter\n- {type: disagg-profile-handler, parameters: "
            "{profiles: {decode: d, prefill: p}}}\nschedulingProfiles:\n- {name: d, plugins: "
            "[{pluginRef: decode-filter}]}\n- {name: p, plugins: []}\n");
    pd_fixture(&f);
    struct epp_request r = {.model = "m", .prompt_tokens = 5000};
    assert_int_equal(epp_schedule(s, &r, f.ptrs, f.pm, 2, &res), 0);
    assert_false(res.disaggregated);
    assert_string_equal(res.primary_profile, "d");
    epp_sched_free(s);
}

static void test_pd_metrics(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    char err[256];
    struct epp_sched *s = epp_sched_new(pd_config, strlen(pd_config), reg, err, sizeof(err));
    assert_non_null(s);
    struct fixture f;
    struct epp_sched_result res;
    pd_fixture(&f);
    struct epp_request r = {.model = "m", .prompt_tokens = 500};
    epp_schedule(s, &r, f.ptrs, f.pm, 2, &res);
    epp_schedule(s, &r, f.ptrs, f.pm, 2, &res);
    r.prompt_tokens = 5;
    epp_schedule(s, &r, f.ptrs, f.pm, 2, &res);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(metrics_render(reg, &b), 0);
    const char *t = buf_cstr(&b);
    assert_non_null(strstr(
        t, "llm_d_inference_scheduler_pd_decision_total{decision_type=\"prefill-decode\"} 2"));
    assert_non_null(
        strstr(t, "llm_d_inference_scheduler_pd_decision_total{decision_type=\"decode-only\"} 1"));
    assert_non_null(
        strstr(t, "extension_point=\"ProfileHandler\",plugin_type=\"pd-profile-handler\""));
    buf_free(&b);
    epp_sched_free(s);
    metrics_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pd_threshold),       cmocka_unit_test(test_pd_precise_estimate),
        cmocka_unit_test(test_pd_approx_estimate), cmocka_unit_test(test_pd_failures),
        cmocka_unit_test(test_disagg_deciders),    cmocka_unit_test(test_pd_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
