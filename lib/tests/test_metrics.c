/* Unit tests for lib/metrics: registry, exposition output (byte-exact), concurrency, and the
 * text-format parser (including malformed scrapes). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/metrics.h"

static void test_format_double_like_go(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *want; /* strconv.FormatFloat(v, 'g', -1, 64) */
    } cases[] = {
        {0, "0"},
        {-0.0, "-0"},
        {1, "1"},
        {-2.5, "-2.5"},
        {0.1, "0.1"},
        {0.005, "0.005"},
        {10, "10"},
        {100000, "100000"},
        {123456, "123456"},
        {999999, "999999"},
        {1e6, "1e+06"},
        {1234567, "1.234567e+06"},
        {3e10, "3e+10"},
        {0.0001, "0.0001"},
        {0.00001, "1e-05"},
        {1.5e-7, "1.5e-07"},
        {1e21, "1e+21"},
        {1e100, "1e+100"},
        {0.30000000000000004, "0.30000000000000004"},
        {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {123.456, "123.456"},
        {-0.000123, "-0.000123"},
        {18446744073709551616.0, "1.8446744073709552e+19"},
    };
    char out[40];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = metrics_format_double(cases[i].v, out, sizeof(out));
        if (strcmp(out, cases[i].want) != 0) {
            fail_msg("%.17g: got %s want %s", cases[i].v, out, cases[i].want);
        }
        assert_int_equal(n, strlen(out));
    }
    metrics_format_double(NAN, out, sizeof(out));
    assert_string_equal(out, "NaN");
    metrics_format_double(INFINITY, out, sizeof(out));
    assert_string_equal(out, "+Inf");
    metrics_format_double(-INFINITY, out, sizeof(out));
    assert_string_equal(out, "-Inf");
}

static char *render(struct metrics_registry *r)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(metrics_render(r, &b), 0);
    return buf_detach(&b, NULL);
}

static void test_render_exact(void **state)
{
    (void)state;
    struct metrics_registry *r = metrics_registry_new();
    assert_non_null(r);
    const char *labels[] = {"pod", "role"};
    struct metric_family *req = metrics_counter_new(
        r, "tandem_requests_total", "Requests routed.\nPer pod \\ role.", 2, labels);
    struct metric_family *load = metrics_gauge_new(r, "tandem_queue_depth", NULL, 0, NULL);
    const double buckets[] = {0.1, 0.5, 2.5};
    const char *h_labels[] = {"model"};
    struct metric_family *lat = metrics_histogram_new(
        r, "tandem_ttft_seconds", "Time to first token.", 1, h_labels, buckets, 3);
    struct metric_family *unused = metrics_gauge_new(r, "tandem_unused", "No series yet.", 0, NULL);
    assert_non_null(req);
    assert_non_null(load);
    assert_non_null(lat);
    assert_non_null(unused);

    /* Created out of order: output is sorted by label values. */
    const char *v2[] = {"engine-1", "decode"};
    const char *v1[] = {"engine-0", "prefill"};
    const char *v3[] = {"engine-0", "decode"};
    const char *odd[] = {"a\"b\\c\nd", "x"};
    metric_inc(metrics_child(req, v2), 3);
    metric_inc(metrics_child(req, v1), 1);
    metric_inc(metrics_child(req, v1), 1.5);
    metric_inc(metrics_child(req, v3), 0);
    metric_inc(metrics_child(req, odd), 1);
    assert_ptr_equal(metrics_child(req, v1), metrics_child(req, v1)); /* stable */

    struct metric *depth = metrics_child(load, NULL);
    metric_set(depth, 5);
    metric_inc(depth, -7);

    const char *m[] = {"llama"};
    struct metric *h = metrics_child(lat, m);
    metric_observe(h, 0.05);
    metric_observe(h, 0.1); /* upper bounds are inclusive */
    metric_observe(h, 0.3);
    metric_observe(h, 100);
    assert_true(metric_value(h) == 4);
    assert_true(metric_sum(h) == 100.45);

    char *out = render(r);
    const char *want = "# HELP tandem_requests_total Requests routed.\\nPer pod \\\\ role.\n"
                       "# TYPE tandem_requests_total counter\n"
                       "tandem_requests_total{pod=\"a\\\"b\\\\c\\nd\",role=\"x\"} 1\n"
                       "tandem_requests_total{pod=\"engine-0\",role=\"decode\"} 0\n"
                       "tandem_requests_total{pod=\"engine-0\",role=\"prefill\"} 2.5\n"
                       "tandem_requests_total{pod=\"engine-1\",role=\"decode\"} 3\n"
                       "# TYPE tandem_queue_depth gauge\n"
                       "tandem_queue_depth -2\n"
                       "# HELP tandem_ttft_seconds Time to first token.\n"
                       "# TYPE tandem_ttft_seconds histogram\n"
                       "tandem_ttft_seconds_bucket{model=\"llama\",le=\"0.1\"} 2\n"
                       "tandem_ttft_seconds_bucket{model=\"llama\",le=\"0.5\"} 3\n"
                       "tandem_ttft_seconds_bucket{model=\"llama\",le=\"2.5\"} 3\n"
                       "tandem_ttft_seconds_bucket{model=\"llama\",le=\"+Inf\"} 4\n"
                       "tandem_ttft_seconds_sum{model=\"llama\"} 100.45\n"
                       "tandem_ttft_seconds_count{model=\"llama\"} 4\n"
                       "# HELP tandem_unused No series yet.\n"
                       "# TYPE tandem_unused gauge\n";
    assert_string_equal(out, want);
    free(out);
    metrics_registry_free(r);
    metrics_registry_free(NULL);
}

static void test_counter_and_gauge_semantics(void **state)
{
    (void)state;
    struct metrics_registry *r = metrics_registry_new();
    struct metric *c = metrics_child(metrics_counter_new(r, "c_total", "c", 0, NULL), NULL);
    struct metric *g = metrics_child(metrics_gauge_new(r, "g", "g", 0, NULL), NULL);
    metric_inc(c, 2);
    metric_inc(c, -1);  /* ignored: counters never go down */
    metric_inc(c, NAN); /* ignored */
    assert_true(metric_value(c) == 2);
    metric_set(c, 10); /* mirroring an external counter */
    assert_true(metric_value(c) == 10);
    metric_inc(g, -1.5);
    assert_true(metric_value(g) == -1.5);
    metric_set(g, INFINITY);
    char *out = render(r);
    assert_non_null(strstr(out, "\ng +Inf\n"));
    free(out);
    metric_set(g, NAN);
    out = render(r);
    assert_non_null(strstr(out, "\ng NaN\n"));
    free(out);
    metrics_registry_free(r);
}

static void test_registration_rules(void **state)
{
    (void)state;
    struct metrics_registry *r = metrics_registry_new();
    const char *ok[] = {"pod"};
    const char *dup[] = {"pod", "pod"};
    const char *reserved[] = {"__name"};
    const char *bad[] = {"9lives"};
    const char *colon[] = {"a:b"};
    const char *le[] = {"le"};
    const char *null_name[] = {NULL};
    assert_non_null(metrics_counter_new(r, "ok_total", NULL, 1, ok));
    assert_non_null(metrics_gauge_new(r, "ns:sub_system:name", NULL, 0, NULL));
    assert_non_null(metrics_gauge_new(r, "_underscore", NULL, 0, NULL));
    assert_null(metrics_gauge_new(r, "ok_total", NULL, 0, NULL)); /* duplicate name */
    assert_null(metrics_gauge_new(r, "", NULL, 0, NULL));
    assert_null(metrics_gauge_new(r, NULL, NULL, 0, NULL));
    assert_null(metrics_gauge_new(r, "1abc", NULL, 0, NULL));
    assert_null(metrics_gauge_new(r, "has-dash", NULL, 0, NULL));
    assert_null(metrics_gauge_new(r, "has space", NULL, 0, NULL));
    assert_null(metrics_gauge_new(r, "utf8_\xc3\xa9", NULL, 0, NULL));
    assert_null(metrics_gauge_new(r, "g1", NULL, 2, dup));
    assert_null(metrics_gauge_new(r, "g2", NULL, 1, reserved));
    assert_null(metrics_gauge_new(r, "g3", NULL, 1, bad));
    assert_null(metrics_gauge_new(r, "g4", NULL, 1, colon));
    assert_null(metrics_gauge_new(r, "g5", NULL, 1, null_name));
    assert_null(metrics_gauge_new(r, "g6", NULL, 1, NULL));
    assert_null(metrics_gauge_new(r, "g7", NULL, METRICS_MAX_LABELS + 1, ok));
    assert_non_null(metrics_gauge_new(r, "g8", NULL, 1, le)); /* le is fine outside histograms */
    assert_null(metrics_histogram_new(r, "h1", NULL, 1, le, NULL, 0));
    const double unsorted[] = {1, 0.5};
    const double repeated[] = {1, 1};
    const double nan_bucket[] = {NAN};
    const double with_inf[] = {1, 2, INFINITY};
    assert_null(metrics_histogram_new(r, "h2", NULL, 0, NULL, unsorted, 2));
    assert_null(metrics_histogram_new(r, "h3", NULL, 0, NULL, repeated, 2));
    assert_null(metrics_histogram_new(r, "h4", NULL, 0, NULL, nan_bucket, 1));
    struct metric_family *h5 = metrics_histogram_new(r, "h5", NULL, 0, NULL, with_inf, 3);
    assert_non_null(h5);
    struct metric_family *h6 = metrics_histogram_new(r, "h6", NULL, 0, NULL, NULL, 0);
    assert_non_null(h6);
    metric_observe(metrics_child(h5, NULL), 1.5);
    metric_observe(metrics_child(h6, NULL), 0.2);
    char *out = render(r);
    /* The explicit +Inf is not doubled. */
    assert_non_null(strstr(out, "h5_bucket{le=\"2\"} 1\nh5_bucket{le=\"+Inf\"} 1\nh5_sum 1.5\n"));
    /* Default buckets. */
    assert_non_null(strstr(out, "h6_bucket{le=\"0.005\"} 0\n"));
    assert_non_null(strstr(out, "h6_bucket{le=\"0.25\"} 1\n"));
    assert_non_null(strstr(out, "h6_bucket{le=\"10\"} 1\n"));
    free(out);
    /* A series needs every label value. */
    struct metric_family *f = metrics_counter_new(r, "lv_total", NULL, 1, ok);
    const char *missing[] = {NULL};
    const char *bad_utf8[] = {"caf\xc3"};
    assert_null(metrics_child(f, missing));
    assert_null(metrics_child(f, NULL));
    assert_null(metrics_child(f, bad_utf8));
    assert_null(metrics_gauge_new(r, "bad_help", "\xff", 0, NULL));
    metrics_registry_free(r);
}

static void test_render_cap(void **state)
{
    (void)state;
    struct metrics_registry *r = metrics_registry_new();
    struct metric_family *f = metrics_gauge_new(r, "g", "help text", 0, NULL);
    metric_set(metrics_child(f, NULL), 1);
    struct buf b;
    buf_init(&b, 10);
    assert_int_equal(metrics_render(r, &b), -ENOSPC);
    buf_free(&b);
    metrics_registry_free(r);
}

#define THREADS 4
#define ROUNDS  20000

struct worker_arg {
    struct metric_family *counter;
    struct metric_family *hist;
    int id;
};

static void *worker(void *p)
{
    const struct worker_arg *a = p;
    char id[16];
    snprintf(id, sizeof(id), "w%d", a->id % 2);
    const char *values[] = {id};
    struct metric *shared = metrics_child(a->counter, values);
    struct metric *h = metrics_child(a->hist, NULL);
    for (int i = 0; i < ROUNDS; i++) {
        metric_inc(shared, 1);
        metric_observe(h, (i % 4) * 0.5); /* 0, 0.5, 1, 1.5 */
        if (i % 1000 == 0) {
            char name[32];
            snprintf(name, sizeof(name), "t%d-%d", a->id, i);
            const char *v[] = {name};
            metric_inc(metrics_child(a->counter, v), 1);
        }
    }
    return NULL;
}

static void test_concurrent_updates(void **state)
{
    (void)state;
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"worker"};
    const double buckets[] = {0.75};
    struct worker_arg args[THREADS];
    pthread_t t[THREADS];
    struct metric_family *counter = metrics_counter_new(r, "ops_total", NULL, 1, labels);
    struct metric_family *hist = metrics_histogram_new(r, "op_size", NULL, 0, NULL, buckets, 1);
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct worker_arg){counter, hist, i};
        assert_int_equal(pthread_create(&t[i], NULL, worker, &args[i]), 0);
    }
    /* Render while writers run: must not crash or tear. */
    for (int i = 0; i < 20; i++) {
        free(render(r));
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    const char *w0[] = {"w0"}, *w1[] = {"w1"};
    assert_true(metric_value(metrics_child(counter, w0)) == 2.0 * ROUNDS);
    assert_true(metric_value(metrics_child(counter, w1)) == 2.0 * ROUNDS);
    struct metric *h = metrics_child(hist, NULL);
    assert_true(metric_value(h) == (double)THREADS * ROUNDS);
    assert_true(metric_sum(h) == THREADS * 3.0 * ROUNDS / 4.0); /* 0 + .5 + 1 + 1.5 per 4 */
    char *out = render(r);
    char want[128];
    snprintf(want, sizeof(want), "op_size_bucket{le=\"0.75\"} %d\n", THREADS * ROUNDS / 2);
    assert_non_null(strstr(out, want));
    /* 2 shared series + THREADS * ROUNDS / 1000 one-off series, all present. */
    size_t lines = 0;
    for (const char *p = out; (p = strstr(p, "ops_total{")) != NULL; p++) {
        lines++;
    }
    assert_int_equal(lines, 2 + THREADS * ROUNDS / 1000);
    free(out);
    metrics_registry_free(r);
}

/* ---- parser ---- */

struct sample {
    char name[64];
    size_t nlabels;
    char labels[256]; /* "k=v;k=v" */
    double value;
};

struct collected {
    struct sample s[64];
    size_t n;
    size_t stop_after; /* 0 = never */
};

static int collect(void *ud, const char *name, size_t nlabels, const char *const *label_names,
                   const char *const *label_values, double value)
{
    struct collected *c = ud;
    if (c->stop_after && c->n == c->stop_after) {
        return 42;
    }
    assert_true(c->n < 64);
    struct sample *s = &c->s[c->n++];
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->nlabels = nlabels;
    s->labels[0] = '\0';
    for (size_t i = 0; i < nlabels; i++) {
        size_t used = strlen(s->labels);
        snprintf(s->labels + used, sizeof(s->labels) - used, "%s%s=%s", i ? ";" : "",
                 label_names[i], label_values[i]);
    }
    s->value = value;
    return 0;
}

static const char *vllm_scrape =
    "# HELP vllm:num_requests_running Number of requests currently running on GPU.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 3.0\n"
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.0\n"
    "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
    "# TYPE vllm:gpu_cache_usage_perc gauge\n"
    "vllm:gpu_cache_usage_perc{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.4217\n"
    "# TYPE vllm:time_to_first_token_seconds histogram\n"
    "vllm:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"m\"} 0.0\n"
    "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 1.2e+03\n"
    "vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 17.25 1700000000000\n"
    "vllm:time_to_first_token_seconds_count{model_name=\"m\",} 1200\r\n"
    "\n"
    "   # indented comment\n"
    "# some other comment with { and \"\n"
    "weird_values{a=\"1\"} NaN\n"
    "weird_values{a=\"2\"} +Inf\n"
    "weird_values{a=\"3\"} -Inf -5\n"
    "escaped { path = \"C:\\\\dir\\\\\" , quote=\"say \\\"hi\\\"\",nl=\"a\\nb\", empty=\"\" }\t7\n"
    "no_labels 1e-3";

static void test_parse_scrape(void **state)
{
    (void)state;
    struct collected c = {0};
    char err[256];
    assert_int_equal(
        metrics_parse_text(vllm_scrape, strlen(vllm_scrape), collect, &c, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_int_equal(c.n, 12);
    assert_string_equal(c.s[0].name, "vllm:num_requests_running");
    assert_string_equal(c.s[0].labels, "model_name=meta-llama/Llama-3.1-8B-Instruct");
    assert_true(c.s[0].value == 3.0);
    assert_true(c.s[2].value == 0.4217);
    assert_string_equal(c.s[4].labels, "le=+Inf;model_name=m");
    assert_true(c.s[4].value == 1200);
    assert_string_equal(c.s[5].name, "vllm:time_to_first_token_seconds_sum");
    assert_true(c.s[5].value == 17.25);
    assert_int_equal(c.s[6].nlabels, 1); /* trailing comma */
    assert_true(c.s[6].value == 1200);
    assert_true(isnan(c.s[7].value));
    assert_true(isinf(c.s[8].value) && c.s[8].value > 0);
    assert_true(isinf(c.s[9].value) && c.s[9].value < 0);
    assert_string_equal(c.s[10].name, "escaped");
    assert_int_equal(c.s[10].nlabels, 4);
    assert_string_equal(c.s[10].labels, "path=C:\\dir\\;quote=say \"hi\";nl=a\nb;empty=");
    assert_true(c.s[10].value == 7);
    assert_string_equal(c.s[11].name, "no_labels");
    assert_true(c.s[11].value == 0.001);

    /* Empty input, NULL callback. */
    assert_int_equal(metrics_parse_text("", 0, collect, &c, err, sizeof(err)), 0);
    assert_int_equal(metrics_parse_text(NULL, 0, NULL, NULL, err, sizeof(err)), 0);
    assert_int_equal(
        metrics_parse_text(vllm_scrape, strlen(vllm_scrape), NULL, NULL, err, sizeof(err)), 0);
}

static void test_parse_callback_stops(void **state)
{
    (void)state;
    struct collected c = {0};
    c.stop_after = 2;
    char err[64];
    assert_int_equal(
        metrics_parse_text(vllm_scrape, strlen(vllm_scrape), collect, &c, err, sizeof(err)), 42);
    assert_int_equal(c.n, 2);
}

static void parse_bad_len(const char *text, size_t len, const char *want)
{
    struct collected c = {0};
    char err[256] = "";
    int rc = metrics_parse_text(text, len, collect, &c, err, sizeof(err));
    if (rc != -EINVAL) {
        fail_msg("parse should fail (%d) with \"%s\": %.*s", rc, want, (int)len, text);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    }
}

static void parse_bad(const char *text, const char *want)
{
    parse_bad_len(text, strlen(text), want);
}

static void test_parse_malformed(void **state)
{
    (void)state;
    parse_bad("ok 1\nbad-name 1\n", "line 2: expected a blank before the value of \"bad\"");
    parse_bad("{a=\"b\"} 1", "line 1: invalid metric name");
    parse_bad("9x 1", "line 1: invalid metric name");
    parse_bad("m", "line 1: expected a blank before the value of \"m\"");
    parse_bad("m ", "line 1: missing sample value");
    parse_bad("m abc", "line 1: invalid sample value \"abc\"");
    parse_bad("m 1.5.5", "invalid sample value \"1.5.5\"");
    parse_bad("m 1e999", "invalid sample value \"1e999\"");
    parse_bad("m nan(0x1)", "invalid sample value");
    parse_bad("m 1 2 3", "line 1: unexpected text after the timestamp of \"m\"");
    parse_bad("m 1 12.5", "line 1: invalid timestamp \"12.5\"");
    parse_bad("m 1 99999999999999999999999", "invalid timestamp");
    parse_bad("m{a=\"b\" 1", "line 1: expected ',' or '}' after label \"a\"");
    parse_bad("m{a=\"b} 1", "line 1: unterminated value of label \"a\"");
    parse_bad("m{a=b} 1", "line 1: expected '\"' to start the value of label \"a\"");
    parse_bad("m{a} 1", "line 1: expected '=' after label \"a\"");
    parse_bad("m{,} 1", "line 1: invalid label name in \"m\"");
    parse_bad("m{1a=\"x\"} 1", "invalid label name");
    parse_bad("m{a=\"x\",a=\"y\"} 1", "line 1: duplicate label \"a\"");
    parse_bad("m{a=\"\\t\"} 1", "line 1: invalid escape \"\\t\" in value of label \"a\"");
    parse_bad("m{a=\"x\\", "unterminated value of label \"a\"");
    parse_bad("m{", "invalid label name");
    parse_bad("m{}1", "expected a blank before the value");
    parse_bad("# TYPE m gauges\n", "line 1: invalid TYPE \"gauges\" for \"m\"");
    parse_bad("# TYPE m\n", "line 1: invalid TYPE \"\" for \"m\"");
    parse_bad("# TYPE m counter extra\n", "invalid TYPE");
    parse_bad("# TYPE 1m counter\n", "line 1: invalid metric name in TYPE line");
    parse_bad("# HELP\n", "invalid metric name in HELP line");
    parse_bad("# HELP m bad \\t escape\n", "line 1: invalid escape in HELP text of \"m\"");
    parse_bad("# HELP m trailing \\", "invalid escape in HELP text");
    /* NUL bytes and invalid UTF-8, with the line number. */
    parse_bad_len("a 1\nb{l=\"x\0y\"} 2\n", 17, "line 2: NUL byte at column 7");
    parse_bad("a 1\nb 2\nc{l=\"\xff\"} 3\n", "line 3: invalid UTF-8 at column 6");
    parse_bad("c{l=\"\xed\xa0\x80\"} 3\n", "invalid UTF-8");
    parse_bad("# HELP m \xc3\n", "invalid UTF-8");
    /* Too many labels. */
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(buf_appends(&b, "m{"), 0);
    for (int i = 0; i < 65; i++) {
        assert_int_equal(buf_appendf(&b, "l%d=\"v\",", i), 0);
    }
    assert_int_equal(buf_appends(&b, "} 1\n"), 0);
    parse_bad(buf_cstr(&b), "line 1: more than 64 labels");
    buf_free(&b);
    /* A line over 64 KiB. */
    size_t n = 70000;
    char *huge = malloc(n + 1);
    assert_non_null(huge);
    memset(huge, 'a', n);
    huge[n] = '\0';
    parse_bad(huge, "line 1: line longer than 65536 bytes");
    free(huge);
}

static void test_parse_truncations(void **state)
{
    (void)state;
    /* Every prefix either parses or fails with a line-numbered message; never crashes. */
    size_t len = strlen(vllm_scrape);
    for (size_t n = 0; n <= len; n++) {
        struct collected c = {0};
        char err[256] = "";
        int rc = metrics_parse_text(vllm_scrape, n, collect, &c, err, sizeof(err));
        if (rc != 0) {
            assert_int_equal(rc, -EINVAL);
            assert_int_equal(strncmp(err, "line ", 5), 0);
        }
    }
}

static void test_render_parse_round_trip(void **state)
{
    (void)state;
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"path"};
    struct metric_family *f = metrics_counter_new(r, "rt_total", "Round \\ trip\nhelp", 1, labels);
    const char *v[] = {"quote \" backslash \\ newline \n unicode \xc3\xa9"};
    metric_inc(metrics_child(f, v), 12345678);
    struct metric_family *h = metrics_histogram_new(r, "rt_hist", NULL, 1, labels, NULL, 0);
    metric_observe(metrics_child(h, v), 0.7);
    char *out = render(r);
    struct collected c = {0};
    char err[256];
    assert_int_equal(metrics_parse_text(out, strlen(out), collect, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n, 1 + 12 + 2);
    assert_string_equal(c.s[0].name, "rt_total");
    char want[256];
    snprintf(want, sizeof(want), "path=%s", v[0]);
    assert_string_equal(c.s[0].labels, want);
    assert_true(c.s[0].value == 12345678);
    assert_string_equal(c.s[13].name, "rt_hist_sum");
    assert_true(c.s[13].value == 0.7);
    free(out);
    metrics_registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_double_like_go),
        cmocka_unit_test(test_render_exact),
        cmocka_unit_test(test_counter_and_gauge_semantics),
        cmocka_unit_test(test_registration_rules),
        cmocka_unit_test(test_render_cap),
        cmocka_unit_test(test_concurrent_updates),
        cmocka_unit_test(test_parse_scrape),
        cmocka_unit_test(test_parse_callback_stops),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test(test_parse_truncations),
        cmocka_unit_test(test_render_parse_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
