/* Unit tests for lib/log: both formats, escaping, levels, rate limiting, concurrent writers. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/buf.h"
#include "lib/json.h"
#include "lib/log.h"

static int out_fd = -1;

/* Each test logs into a fresh temporary file. */
static int setup(void **state)
{
    (void)state;
    char path[] = "/tmp/tandem-test-log-XXXXXX";
    out_fd = mkstemp(path);
    if (out_fd < 0) {
        return -1;
    }
    unlink(path);
    log_set_fd(out_fd);
    log_set_rate_limit(10);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    log_set_fd(2);
    close(out_fd);
    out_fd = -1;
    return 0;
}

/* Everything logged so far (caller frees). */
static char *read_log(void)
{
    struct buf b;
    buf_init(&b, 16 << 20);
    char chunk[4096];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(out_fd, chunk, sizeof(chunk), off);
        assert_true(n >= 0);
        if (n == 0) {
            break;
        }
        assert_int_equal(buf_append(&b, chunk, (size_t)n), 0);
        off += n;
    }
    return buf_detach(&b, NULL);
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++) {
        n += *s == '\n';
    }
    return n;
}

static void test_text_format(void **state)
{
    (void)state;
    log_init("epp", LOGL_INFO, LOG_FORMAT_TEXT);
    int line = __LINE__ + 1;
    log_info("picked pod %s for %d tokens", "engine-0", 42);
    char *out = read_log();
    /* 2026-11-22T06:50:10.123Z INFO  epp test_log.c:NN message */
    assert_int_equal(strlen(out) > 25, 1);
    assert_int_equal(out[4], '-');
    assert_int_equal(out[7], '-');
    assert_int_equal(out[10], 'T');
    assert_int_equal(out[13], ':');
    assert_int_equal(out[16], ':');
    assert_int_equal(out[19], '.');
    assert_int_equal(out[23], 'Z');
    char expect[128];
    snprintf(expect, sizeof(expect), " INFO  epp test_log.c:%d picked pod engine-0 for 42 tokens\n",
             line);
    assert_string_equal(out + 24, expect);
    /* The timestamp is now (UTC), to within a minute. */
    struct tm tm = {0};
    assert_non_null(strptime(out, "%Y-%m-%dT%H:%M:%S", &tm));
    time_t logged = timegm(&tm);
    assert_true(llabs((long long)(logged - time(NULL))) < 60);
    free(out);
}

static void test_levels(void **state)
{
    (void)state;
    log_init("c", LOGL_WARN, LOG_FORMAT_TEXT);
    assert_false(log_enabled(LOGL_DEBUG));
    assert_false(log_enabled(LOGL_INFO));
    assert_true(log_enabled(LOGL_WARN));
    assert_true(log_enabled(LOGL_ERROR));
    log_debug("hidden debug");
    log_info("hidden info");
    log_warn("shown warn");
    log_error("shown error");
    char *out = read_log();
    assert_null(strstr(out, "hidden"));
    assert_non_null(strstr(out, " WARN  c "));
    assert_non_null(strstr(out, " ERROR c "));
    assert_int_equal(count_lines(out), 2);
    free(out);
    log_init("c", LOGL_DEBUG, LOG_FORMAT_TEXT);
    log_debug("now shown");
    out = read_log();
    assert_non_null(strstr(out, " DEBUG c test_log.c:"));
    free(out);
}

static void test_text_escapes_newlines(void **state)
{
    (void)state;
    log_init("c", LOGL_INFO, LOG_FORMAT_TEXT);
    log_info("two\nlines\tand\x01 bell");
    char *out = read_log();
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, "two\\nlines\\tand\\u0001 bell\n"));
    free(out);
}

static void test_json_format(void **state)
{
    (void)state;
    log_init("operator \"x\"", LOGL_DEBUG, LOG_FORMAT_JSON);
    int line = __LINE__ + 1;
    log_warn("quote \" backslash \\ newline \n bad utf8 \xff end");
    char *out = read_log();
    assert_int_equal(count_lines(out), 1);
    char err[256];
    struct json_object *o = json_parse(out, strlen(out), err, sizeof(err));
    assert_non_null(o);
    const char *s;
    assert_int_equal(json_get_string(o, "level", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "warn");
    assert_int_equal(json_get_string(o, "component", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "operator \"x\"");
    assert_int_equal(json_get_string(o, "msg", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "quote \" backslash \\ newline \n bad utf8 \xef\xbf\xbd end");
    assert_int_equal(json_get_string(o, "caller", &s, err, sizeof(err)), 0);
    char caller[64];
    snprintf(caller, sizeof(caller), "test_log.c:%d", line);
    assert_string_equal(s, caller);
    assert_int_equal(json_get_string(o, "ts", &s, err, sizeof(err)), 0);
    assert_int_equal(strlen(s), 24);
    assert_int_equal(s[23], 'Z');
    json_object_put(o);
    free(out);
}

static void test_long_message_is_cut_but_valid(void **state)
{
    (void)state;
    log_init("c", LOGL_INFO, LOG_FORMAT_JSON);
    char *big = malloc(20000);
    assert_non_null(big);
    memset(big, '"', 19999); /* every byte needs escaping */
    big[19999] = '\0';
    log_info("%s", big);
    free(big);
    char *out = read_log();
    assert_int_equal(count_lines(out), 1);
    char err[256];
    struct json_object *o = json_parse(out, strlen(out), err, sizeof(err));
    assert_non_null(o);
    const char *msg;
    assert_int_equal(json_get_string(o, "msg", &msg, err, sizeof(err)), 0);
    assert_true(strlen(msg) > 4000);
    assert_true(strlen(msg) < 8192);
    json_object_put(o);
    free(out);
}

static void test_rate_limit(void **state)
{
    (void)state;
    log_init("c", LOGL_INFO, LOG_FORMAT_TEXT);
    log_set_rate_limit(10);
    for (int i = 0; i < 25; i++) {
        log_info("flood %d", i); /* one call site */
    }
    log_info("other site"); /* a different line is not limited */
    char *out = read_log();
    assert_int_equal(count_lines(out), 11);
    assert_non_null(strstr(out, "flood 9\n"));
    assert_null(strstr(out, "flood 10\n"));
    free(out);
}

/* One call site, used across a window boundary: the next record reports what was dropped. */
static void flood_site(int i)
{
    log_info("site %d", i);
}

static void test_rate_limit_suppressed_note(void **state)
{
    (void)state;
    log_init("c", LOGL_INFO, LOG_FORMAT_TEXT);
    log_set_rate_limit(3);
    for (int i = 0; i < 8; i++) {
        flood_site(i);
    }
    usleep(1100 * 1000);
    flood_site(100);
    char *out = read_log();
    assert_int_equal(count_lines(out), 4);
    assert_non_null(strstr(out, "site 2\n"));
    assert_null(strstr(out, "site 3\n"));
    assert_non_null(strstr(out, "site 100 (suppressed 5 similar messages)\n"));
    free(out);
    /* Rate limiting off. */
    log_set_rate_limit(0);
    for (int i = 0; i < 50; i++) {
        flood_site(i);
    }
    out = read_log();
    assert_int_equal(count_lines(out), 54);
    free(out);
}

#define THREADS    4
#define PER_THREAD 300

static void *writer(void *arg)
{
    int id = *(const int *)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        log_info("thread %d record %d %s", id, i, "padding-padding-padding-padding-padding");
    }
    return NULL;
}

static void test_concurrent_lines_do_not_interleave(void **state)
{
    (void)state;
    log_init("c", LOGL_INFO, LOG_FORMAT_JSON);
    log_set_rate_limit(0);
    pthread_t t[THREADS];
    int ids[THREADS];
    for (int i = 0; i < THREADS; i++) {
        ids[i] = i;
        assert_int_equal(pthread_create(&t[i], NULL, writer, &ids[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    char *out = read_log();
    assert_int_equal(count_lines(out), THREADS * PER_THREAD);
    int seen[THREADS] = {0};
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char err[128];
        struct json_object *o = json_parse(line, strlen(line), err, sizeof(err));
        assert_non_null(o);
        const char *msg;
        assert_int_equal(json_get_string(o, "msg", &msg, err, sizeof(err)), 0);
        /* "thread <id> record <n> ..." */
        assert_int_equal(strncmp(msg, "thread ", 7), 0);
        char *end;
        long id = strtol(msg + 7, &end, 10);
        assert_int_equal(strncmp(end, " record ", 8), 0);
        long rec = strtol(end + 8, &end, 10);
        assert_int_equal(*end, ' ');
        assert_true(id >= 0 && id < THREADS);
        assert_int_equal(rec, seen[id]); /* per-thread order preserved */
        seen[id]++;
        json_object_put(o);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(seen[i], PER_THREAD);
    }
    free(out);
    log_set_rate_limit(10);
}

static void test_parse_level_format(void **state)
{
    (void)state;
    enum log_level l;
    enum log_format f;
    assert_int_equal(log_parse_level("debug", &l), 0);
    assert_int_equal(l, LOGL_DEBUG);
    assert_int_equal(log_parse_level("INFO", &l), 0);
    assert_int_equal(l, LOGL_INFO);
    assert_int_equal(log_parse_level("warn", &l), 0);
    assert_int_equal(l, LOGL_WARN);
    assert_int_equal(log_parse_level("Warning", &l), 0);
    assert_int_equal(l, LOGL_WARN);
    assert_int_equal(log_parse_level("error", &l), 0);
    assert_int_equal(l, LOGL_ERROR);
    assert_int_equal(log_parse_level("verbose", &l), -EINVAL);
    assert_int_equal(log_parse_level("", &l), -EINVAL);
    assert_int_equal(log_parse_level(NULL, &l), -EINVAL);
    assert_int_equal(log_parse_format("json", &f), 0);
    assert_int_equal(f, LOG_FORMAT_JSON);
    assert_int_equal(log_parse_format("TEXT", &f), 0);
    assert_int_equal(f, LOG_FORMAT_TEXT);
    assert_int_equal(log_parse_format("xml", &f), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_levels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_escapes_newlines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_message_is_cut_but_valid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_limit_suppressed_note, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_lines_do_not_interleave, setup, teardown),
        cmocka_unit_test(test_parse_level_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
