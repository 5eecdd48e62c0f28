/*
 * Unit tests for the filters, scorers and pickers against hand-computed cases, the approximate
 * prefix index, the session token and the saturation detector.
 */
#include <errno.h>
#include <math.h>

#include "lib/clock.h"
#include "operator/epp/sched/tests/sched_test.h"

#define ALL_PLUGINS                                                                                \
    "- type: queue-scorer\n- type: kv-cache-utilization-scorer\n"                                  \
    "- type: load-aware-scorer\n- {type: load-aware-scorer, name: la10, parameters: {threshold: "  \
    "10}}\n- type: active-request-scorer\n- type: running-requests-size-scorer\n"                  \
    "- type: token-load-scorer\n- type: lora-affinity-scorer\n- type: session-affinity-scorer\n"   \
    "- type: precise-prefix-cache-scorer\n"

static struct epp_sched *all_scorers(void)
{
    return load_ok(HDR "plugins:\n" ALL_PLUGINS);
}

static void assert_scores(const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++) {
        if (fabs(got[i] - want[i]) > 1e-9) {
            fail_msg("score[%d] = %g, want %g", i, got[i], want[i]);
        }
    }
}

static void test_load_scorers(void **state)
{
    (void)state;
    struct epp_sched *s = all_scorers();
    struct fixture f;
    struct epp_request r = {.model = "m"};
    double out[16];
    fixture_init(&f, 3);
    f.eps[0].m.waiting = 0, f.eps[1].m.waiting = 5, f.eps[2].m.waiting = 10;
    score_all(s, "queue-scorer", &f, &r, out);
    assert_scores(out, (double[]){1, 0.5, 0}, 3);
    score_all(s, "load-aware-scorer", &f, &r, out); /* threshold 128 */
    assert_scores(out, (double[]){0.5, 0.5 * (1 - 5.0 / 128), 0.5 * (1 - 10.0 / 128)}, 3);
    f.eps[2].m.waiting = 200;
    score_all(s, "la10", &f, &r, out);
    assert_scores(out, (double[]){0.5, 0.25, 0}, 3);
    f.eps[0].m.waiting = f.eps[1].m.waiting = f.eps[2].m.waiting = 3;
    score_all(s, "queue-scorer", &f, &r, out); /* all equal ⇒ 1 */
    assert_scores(out, (double[]){1, 1, 1}, 3);
    f.eps[0].m.kv_usage = 0.25, f.eps[1].m.kv_usage = 1, f.eps[2].m.kv_usage = 0;
    score_all(s, "kv-cache-utilization-scorer", &f, &r, out);
    assert_scores(out, (double[]){0.75, 0, 1}, 3);
    f.eps[0].m.running = 2, f.eps[1].m.running = 4, f.eps[2].m.running = 10;
    score_all(s, "running-requests-size-scorer", &f, &r, out);
    assert_scores(out, (double[]){1, 0.75, 0}, 3);
    f.eps[0].active_requests = 0, f.eps[1].active_requests = 2, f.eps[2].active_requests = 4;
    score_all(s, "active-request-scorer", &f, &r, out);
    assert_scores(out, (double[]){1, 0.5, 0}, 3);
    f.eps[0].active_tokens = 0, f.eps[1].active_tokens = 2097152;
    f.eps[2].active_tokens = 9000000;
    score_all(s, "token-load-scorer", &f, &r, out);
    assert_scores(out, (double[]){1, 0.5, 0}, 3);
    epp_sched_free(s);
}

static void test_lora_session_precise(void **state)
{
    (void)state;
    struct epp_sched *s = all_scorers();
    struct fixture f;
    double out[16];
    fixture_init(&f, 4);
    f.eps[0].m.running_loras = "a,sql", f.eps[0].m.max_lora = 2;
    f.eps[1].m.running_loras = "a", f.eps[1].m.max_lora = 4;
    f.eps[2].m.running_loras = "a,b", f.eps[2].m.waiting_loras = "sql", f.eps[2].m.max_lora = 3;
    f.eps[3].m.running_loras = "a,b", f.eps[3].m.max_lora = 2;
    struct epp_request r = {.model = "sql", .lora = "sql"};
    score_all(s, "lora-affinity-scorer", &f, &r, out);
    assert_scores(out, (double[]){1.0, 0.8, 0.6, 0.0}, 4);

    char tok[EPP_SESSION_TOKEN_MAX];
    assert_int_equal(epp_session_token(&f.eps[1], tok, sizeof(tok)), 12);
    assert_string_equal(tok, "bnMvcG9kLTE="); /* base64("ns/pod-1") */
    assert_int_equal(epp_session_token(&f.eps[1], tok, 8), -ENOSPC);
    epp_session_token(&f.eps[2], tok, sizeof(tok));
    r.session_token = tok;
    score_all(s, "session-affinity-scorer", &f, &r, out);
    assert_scores(out, (double[]){0, 0, 1, 0}, 4);
    r.session_token = "garbage";
    score_all(s, "session-affinity-scorer", &f, &r, out);
    assert_scores(out, (double[]){0, 0, 0, 0}, 4);

    /* Precise: min-max over endpoints with a hit; no hit 0; a single hit 1. */
    f.pm[0].precise_score = 0, f.pm[1].precise_score = 2, f.pm[2].precise_score = 4;
    f.pm[3].precise_score = 3;
    score_all(s, "precise-prefix-cache-scorer", &f, &r, out);
    assert_scores(out, (double[]){0, 0, 1, 0.5}, 4);
    f.pm[1].precise_score = f.pm[2].precise_score = 0;
    score_all(s, "precise-prefix-cache-scorer", &f, &r, out);
    assert_scores(out, (double[]){0, 0, 0, 1}, 4);
    epp_sched_free(s);
}

static void test_role_filters(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(HDR "plugins:\n- type: decode-filter\n- type: prefill-filter\n"
                                      "- type: encode-filter\n");
    struct fixture f;
    struct epp_request r = {0};
    int kept[16];
    fixture_init(&f, 10);
    for (int i = 0; i < 10; i++) {
        f.eps[i].role = (enum epp_role)i; /* UNSET .. OTHER */
    }
    int n = filter_all(s, "decode-filter", &f, &r, kept);
    assert_int_equal(n, 5);
    int want_d[] = {EPP_ROLE_UNSET, EPP_ROLE_DECODE, EPP_ROLE_BOTH, EPP_ROLE_PREFILL_DECODE,
                    EPP_ROLE_ENCODE_PREFILL_DECODE};
    for (int i = 0; i < n; i++) {
        assert_int_equal(kept[i], want_d[i]);
    }
    n = filter_all(s, "prefill-filter", &f, &r, kept);
    int want_p[] = {EPP_ROLE_PREFILL, EPP_ROLE_BOTH, EPP_ROLE_PREFILL_DECODE,
                    EPP_ROLE_ENCODE_PREFILL, EPP_ROLE_ENCODE_PREFILL_DECODE};
    assert_int_equal(n, 5);
    for (int i = 0; i < n; i++) {
        assert_int_equal(kept[i], want_p[i]);
    }
    assert_int_equal(filter_all(s, "encode-filter", &f, &r, kept), 3);
    epp_sched_free(s);
}

static void test_label_filters(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(
        HDR "plugins:\n"
            "- {type: label-selector-filter, name: ml, parameters: {matchLabels: {tier: a}}}\n"
            "- {type: by-label-selector, name: in, parameters: {matchExpressions: [{key: zone, "
            "operator: In, values: [x, w]}]}}\n"
            "- {type: by-label, name: notin, parameters: {matchExpressions: [{key: zone, "
            "operator: NotIn, values: [x]}]}}\n"
            "- {type: label-selector-filter, name: ex, parameters: {matchExpressions: [{key: "
            "gpu, operator: Exists}]}}\n"
            "- {type: label-selector-filter, name: dne, parameters: {matchExpressions: [{key: "
            "gpu, operator: DoesNotExist}]}}\n"
            "- {type: by-label, name: v03, parameters: {label: zone, validValues: [w], "
            "allowsNoLabel: true}}\n");
    struct fixture f;
    struct epp_request r = {0};
    int kept[16];
    fixture_init(&f, 4);
    fixture_labels(&f, 0, "{tier: a, zone: x, gpu: h100}");
    fixture_labels(&f, 1, "{tier: b, zone: w}");
    fixture_labels(&f, 2, "{tier: a}");
    fixture_labels(&f, 3, "{}");
    static const struct {
        const char *name;
        int n, first;
    } cases[] = {{"ml", 2, 0}, {"in", 2, 0},  {"notin", 3, 1},
                 {"ex", 1, 0}, {"dne", 3, 1}, {"v03", 3, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int n = filter_all(s, cases[i].name, &f, &r, kept);
        assert_int_equal(n, cases[i].n);
        assert_int_equal(kept[0], cases[i].first);
    }
    epp_sched_free(s);
    fixture_free(&f);
}

/* Schedules with the given config n times; counts how often each endpoint is the primary. */
static void count_picks(struct epp_sched *s, struct fixture *f, const struct epp_request *r,
                        int runs, int *count)
{
    struct epp_sched_result res;
    memset(count, 0, (size_t)f->n * sizeof(*count));
    for (int i = 0; i < runs; i++) {
        assert_int_equal(epp_schedule(s, r, f->ptrs, f->pm, f->n, &res), 0);
        count[res.targets[0] - f->eps]++;
    }
}

static void test_max_score_picker(void **state)
{
    (void)state;
    struct epp_sched *s =
        load_ok(ONE_PROFILE("- type: queue-scorer\n", "  - pluginRef: queue-scorer\n"));
    struct fixture f;
    struct epp_request r = {.model = "m"};
    struct epp_sched_result res;
    int count[16];
    fixture_init(&f, 3);
    f.eps[0].m.waiting = 4, f.eps[1].m.waiting = 0, f.eps[2].m.waiting = 8;
    assert_int_equal(epp_schedule(s, &r, f.ptrs, NULL, 3, &res), 0);
    assert_int_equal(res.n_targets, 3);
    assert_int_equal(res.n_picked, 1);
    assert_ptr_equal(res.targets[0], &f.eps[1]);
    assert_ptr_equal(res.targets[1], &f.eps[0]);
    assert_ptr_equal(res.targets[2], &f.eps[2]);
    /* Ties broken at random: both tied endpoints win sometimes, the worse one never. */
    f.eps[0].m.waiting = 0;
    count_picks(s, &f, &r, 200, count);
    assert_true(count[0] > 40 && count[1] > 40);
    assert_int_equal(count[2], 0);
    epp_sched_free(s);
    s = load_ok(ONE_PROFILE("- type: queue-scorer\n- {type: max-score-picker, parameters: "
                            "{maxNumOfEndpoints: 2}}\n",
                            "  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n"));
    assert_int_equal(epp_schedule(s, &r, f.ptrs, NULL, 3, &res), 0);
    assert_int_equal(res.n_picked, 2);
    assert_ptr_equal(res.targets[2], &f.eps[2]);
    epp_sched_free(s);
}

static void test_random_pickers(void **state)
{
    (void)state;
    struct epp_sched *s =
        load_ok(ONE_PROFILE("- type: kv-cache-utilization-scorer\n- type: random-picker\n",
                            "  - pluginRef: kv-cache-utilization-scorer\n"
                            "  - pluginRef: random-picker\n"));
    struct fixture f;
    struct epp_request r = {.model = "m"};
    int count[16];
    fixture_init(&f, 3);
    f.eps[0].m.kv_usage = 0.9;
    count_picks(s, &f, &r, 300, count);
    for (int i = 0; i < 3; i++) {
        assert_true(count[i] > 50); /* uniform: 100 each expected */
    }
    epp_sched_free(s);
    /* Weighted: scores 0.25 and 0.75 ⇒ the second first 3/4 of the time (A-Res). */
    s = load_ok(ONE_PROFILE("- type: kv-cache-utilization-scorer\n- type: weighted-random-picker\n",
                            "  - pluginRef: kv-cache-utilization-scorer\n"
                            "  - pluginRef: weighted-random-picker\n"));
    fixture_init(&f, 2);
    f.eps[0].m.kv_usage = 0.75, f.eps[1].m.kv_usage = 0.25;
    count_picks(s, &f, &r, 4000, count);
    double share = count[1] / 4000.0;
    assert_true(share > 0.70 && share < 0.80);
    /* All-zero scores: uniform. */
    f.eps[0].m.kv_usage = f.eps[1].m.kv_usage = 1;
    count_picks(s, &f, &r, 400, count);
    assert_true(count[0] > 140 && count[1] > 140);
    epp_sched_free(s);
}

static void test_eligibility_and_subset(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(NULL);
    struct fixture f;
    struct epp_sched_result res;
    fixture_init(&f, 4);
    const char *subset[] = {"10.0.0.3:8000", "10.0.0.9:8000"};
    struct epp_request r = {.model = "m", .subset = subset, .n_subset = 2};
    for (int i = 0; i < 20; i++) {
        assert_int_equal(epp_schedule(s, &r, f.ptrs, NULL, 4, &res), 0);
        assert_int_equal(res.n_targets, 1);
        assert_ptr_equal(res.targets[0], &f.eps[2]);
    }
    f.eps[2].ready = false;
    assert_int_equal(epp_schedule(s, &r, f.ptrs, NULL, 4, &res), 503);
    assert_non_null(strstr(res.reason, "default"));
    r.n_subset = 0;
    f.eps[0].ejected_until_ms = tandem_now_ms() + 60000;
    f.eps[1].ready = false;
    for (int i = 0; i < 20; i++) {
        assert_int_equal(epp_schedule(s, &r, f.ptrs, NULL, 4, &res), 0);
        assert_ptr_equal(res.targets[0], &f.eps[3]);
    }
    assert_int_equal(epp_schedule(s, &r, f.ptrs, NULL, 0, &res), 503);
    epp_sched_free(s);
}

#define PREFIX_CFG(params)                                                                         \
    ONE_PROFILE("- {type: prefix-cache-scorer, parameters: " params "}\n",                         \
                "  - pluginRef: prefix-cache-scorer\n")

static void test_prefix_scorer(void **state)
{
    (void)state;
    /* Blocks of 1 token = 4 characters; three blocks; GIE's matching. */
    struct epp_sched *s = load_ok(PREFIX_CFG("{blockSizeTokens: 1, autoTune: false}"));
    struct fixture f;
    double out[16];
    fixture_init(&f, 3);
    struct epp_request r = {.model = "m", .prefix_text = "aaaabbbbcccc", .prefix_len = 12};
    struct epp_sched_result res = {.n_targets = 1, .targets = {&f.eps[0]}, .prefill = &f.eps[1]};
    score_all(s, "prefix-cache-scorer", &f, &r, out);
    assert_scores(out, (double[]){0, 0, 0}, 3);
    epp_sched_pre_request(s, &r, &res); /* primary and prefill endpoint record it */
    score_all(s, "prefix-cache-scorer", &f, &r, out);
    assert_scores(out, (double[]){1, 1, 0}, 3);
    struct epp_request r2 = {.model = "m", .prefix_text = "aaaabbbbzzzzdddd", .prefix_len = 16};
    score_all(s, "prefix-cache-scorer", &f, &r2, out);
    assert_scores(out, (double[]){0.5, 0.5, 0}, 3);
    struct epp_request r3 = {.model = "other", .prefix_text = "aaaabbbbcccc", .prefix_len = 12};
    score_all(s, "prefix-cache-scorer", &f, &r3, out); /* the model seeds the chain */
    assert_scores(out, (double[]){0, 0, 0}, 3);
    struct epp_request r4 = {.model = "m", .prefix_text = "aaab", .prefix_len = 3};
    score_all(s, "prefix-cache-scorer", &f, &r4, out); /* no full block */
    assert_scores(out, (double[]){0, 0, 0}, 3);
    epp_sched_endpoint_removed(s, &f.eps[0]);
    score_all(s, "prefix-cache-scorer", &f, &r, out);
    assert_scores(out, (double[]){0, 1, 0}, 3);
    epp_sched_free(s);
}

static void test_prefix_lru_and_limits(void **state)
{
    (void)state;
    struct epp_sched *s =
        load_ok(PREFIX_CFG("{blockSizeTokens: 1, autoTune: false, lruCapacityPerServer: 2}"));
    struct fixture f;
    double out[16];
    fixture_init(&f, 2);
    struct epp_request r = {.model = "m", .prefix_text = "aaaabbbbcccc", .prefix_len = 12};
    struct epp_sched_result res = {.n_targets = 1, .targets = {&f.eps[0]}};
    epp_sched_pre_request(s, &r, &res);
    /* Capacity 2: the first block's hash was evicted, so the chain breaks at once. */
    score_all(s, "prefix-cache-scorer", &f, &r, out);
    assert_scores(out, (double[]){0, 0}, 2);
    epp_sched_free(s);

    s = load_ok(PREFIX_CFG("{hashBlockSize: 4, maxPrefixBlocksToMatch: 2}"));
    epp_sched_pre_request(s, &r, &res);
    struct epp_request r2 = {.model = "m", .prefix_text = "aaaabbbbzzzz", .prefix_len = 12};
    score_all(s, "prefix-cache-scorer", &f, &r2, out); /* only 2 blocks counted: both hit */
    assert_scores(out, (double[]){1, 0}, 2);
    epp_sched_free(s);

    /* autoTune: the server's block size (2 tokens = 8 characters). */
    s = load_ok(PREFIX_CFG("{blockSizeTokens: 1}"));
    f.eps[0].m.block_size = f.eps[1].m.block_size = 2;
    epp_sched_pre_request(s, &r, &res);
    struct epp_request r3 = {.model = "m", .prefix_text = "aaaabbbbzzzzzzzz", .prefix_len = 16};
    score_all(s, "prefix-cache-scorer", &f, &r3, out);
    assert_scores(out, (double[]){0.5, 0}, 2);
    epp_sched_free(s);
}

static void test_prefix_affinity_filter(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(
        HDR "plugins:\n- {type: prefix-cache-scorer, parameters: {blockSizeTokens: 1, autoTune: "
            "false}}\n- {type: prefix-cache-affinity-filter, parameters: {affinityThreshold: "
            "0.6}}\n");
    struct fixture f;
    int kept[16];
    fixture_init(&f, 3);
    struct epp_request r = {.model = "m", .prefix_text = "aaaabbbbcccc", .prefix_len = 12};
    assert_int_equal(filter_all(s, "prefix-cache-affinity-filter", &f, &r, kept), 3);
    struct epp_sched_result res = {.n_targets = 1, .targets = {&f.eps[1]}};
    epp_sched_pre_request(s, &r, &res);
    assert_int_equal(filter_all(s, "prefix-cache-affinity-filter", &f, &r, kept), 1);
    assert_int_equal(kept[0], 1);
    epp_sched_free(s);
}

static void test_saturation(void **state)
{
    (void)state;
    struct epp_sched *s = load_ok(NULL);
    struct fixture f;
    int64_t now = 100000;
    fixture_init(&f, 2);
    for (int i = 0; i < 2; i++) {
        f.eps[i].m.updated_ms = now - 50;
        f.eps[i].m.waiting = 6;
    }
    assert_true(epp_sched_saturated(s, f.ptrs, 2, now));
    f.eps[1].m.waiting = 5, f.eps[1].m.kv_usage = 0.8;
    assert_false(epp_sched_saturated(s, f.ptrs, 2, now));
    f.eps[1].m.kv_usage = 0.81;
    assert_true(epp_sched_saturated(s, f.ptrs, 2, now));
    f.eps[1].m.kv_usage = 0.1, f.eps[1].m.updated_ms = now - 201; /* stale metrics */
    assert_true(epp_sched_saturated(s, f.ptrs, 2, now));
    f.eps[1].m.updated_ms = now, f.eps[1].stale = true;
    assert_true(epp_sched_saturated(s, f.ptrs, 2, now));
    assert_true(epp_sched_saturated(s, f.ptrs, 0, now));
    epp_sched_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_scorers),
        cmocka_unit_test(test_lora_session_precise),
        cmocka_unit_test(test_role_filters),
        cmocka_unit_test(test_label_filters),
        cmocka_unit_test(test_max_score_picker),
        cmocka_unit_test(test_random_pickers),
        cmocka_unit_test(test_eligibility_and_subset),
        cmocka_unit_test(test_prefix_scorer),
        cmocka_unit_test(test_prefix_lru_and_limits),
        cmocka_unit_test(test_prefix_affinity_filter),
        cmocka_unit_test(test_saturation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
