/*
 * Unit tests of the Server-Sent Events parser and writer (lib/sse.h): WHATWG field rules, line
 * endings split across chunks, bounds, sticky errors, and writer/parser round trips.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "lib/buf.h"
#include "lib/sse.h"

/* Events are serialised as "type|id|retry|data\x1e" so that whole streams compare as strings. */
struct collect {
    struct buf out;
    int events;
    int comments;
    struct buf comment_text;
    int stop_after; /* return -ECANCELED after this many events (0: never) */
};

static int on_event(void *ud, const struct sse_event *ev)
{
    struct collect *c = ud;
    c->events++;
    buf_appendf(&c->out, "%s|%s|%ld|", ev->type, ev->id, ev->retry_ms);
    buf_append(&c->out, ev->data, ev->data_len);
    buf_append(&c->out, "\x1e", 1);
    if (c->stop_after && c->events >= c->stop_after) {
        return -ECANCELED;
    }
    return 0;
}

static void on_comment(void *ud, const char *text, size_t len)
{
    struct collect *c = ud;
    c->comments++;
    buf_append(&c->comment_text, text, len);
    buf_append(&c->comment_text, "\n", 1);
}

static void collect_init(struct collect *c)
{
    memset(c, 0, sizeof(*c));
    buf_init(&c->out, 1 << 20);
    buf_init(&c->comment_text, 1 << 20);
}

static void collect_free(struct collect *c)
{
    buf_free(&c->out);
    buf_free(&c->comment_text);
}

/* Parses s fed in chunks of chunk bytes (0: all at once); returns the serialised events. */
static char *parse_chunked(const char *s, size_t len, size_t chunk, size_t max_event, int *rc_out)
{
    struct collect c;
    struct sse_parser p;
    collect_init(&c);
    sse_parser_init(&p, max_event, on_event, on_comment, &c);
    int rc = 0;
    if (chunk == 0) {
        rc = sse_parser_feed(&p, s, len, NULL, 0);
    } else {
        for (size_t i = 0; i < len && rc == 0; i += chunk) {
            size_t n = len - i < chunk ? len - i : chunk;
            rc = sse_parser_feed(&p, s + i, n, NULL, 0);
        }
    }
    if (rc == 0) {
        rc = sse_parser_finish(&p);
    }
    if (rc_out) {
        *rc_out = rc;
    }
    sse_parser_deinit(&p);
    char *out = buf_detach(&c.out, NULL);
    collect_free(&c);
    return out;
}

static char *parse(const char *s)
{
    return parse_chunked(s, strlen(s), 0, 0, NULL);
}

static void expect_parse(const char *input, const char *expected)
{
    /* the same result whatever the chunking */
    static const size_t chunks[] = {0, 1, 2, 3, 5, 7};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        int rc = 0;
        char *got = parse_chunked(input, strlen(input), chunks[i], 0, &rc);
        assert_int_equal(rc, 0);
        if (strcmp(got, expected) != 0) {
            fprintf(stderr, "input %s chunk %zu\n got: %s\nwant: %s\n", input, chunks[i], got,
                    expected);
        }
        assert_string_equal(got, expected);
        free(got);
    }
}

static void test_basic_event(void **state)
{
    (void)state;
    expect_parse("data: hello\n\n", "message||-1|hello\x1e");
    expect_parse("data:hello\n\n", "message||-1|hello\x1e");
    /* only one leading space is removed */
    expect_parse("data:  two\n\n", "message||-1| two\x1e");
    expect_parse("data: a\n\ndata: b\n\n", "message||-1|a\x1emessage||-1|b\x1e");
}

static void test_multiline_and_fields(void **state)
{
    (void)state;
    expect_parse("event: add\ndata: 1\ndata: 2\ndata\n\n", "add||-1|1\n2\n\x1e");
    /* event type is reset after each dispatch; id persists */
    expect_parse("id: 7\nevent: x\ndata: a\n\ndata: b\n\n", "x|7|-1|a\x1emessage|7|-1|b\x1e");
    /* an empty id resets it */
    expect_parse("id: 7\ndata: a\n\nid\ndata: b\n\n", "message|7|-1|a\x1emessage||-1|b\x1e");
    /* retry: digits only */
    expect_parse("retry: 1500\ndata: a\n\nretry: 15x\ndata: b\n\n",
                 "message||1500|a\x1emessage||-1|b\x1e");
    /* unknown fields are ignored, colon in the value is kept */
    expect_parse("foo: bar\ndata: a:b:c\n\n", "message||-1|a:b:c\x1e");
    /* a field name is case-sensitive */
    expect_parse("Data: no\ndata: yes\n\n", "message||-1|yes\x1e");
}

static void test_no_dispatch_without_data(void **state)
{
    (void)state;
    expect_parse("event: ping\n\n", "");
    expect_parse("\n\n\n", "");
    expect_parse("event: ping\n\ndata: x\n\n", "message||-1|x\x1e");
    /* "data" alone adds an empty line: dispatches an empty event */
    expect_parse("data\n\n", "message||-1|\x1e");
    expect_parse("data:\n\n", "message||-1|\x1e");
}

static void test_line_endings(void **state)
{
    (void)state;
    expect_parse("data: a\r\n\r\n", "message||-1|a\x1e");
    expect_parse("data: a\r\rdata: b\r\r", "message||-1|a\x1emessage||-1|b\x1e");
    expect_parse("data: a\rdata: b\n\r\n", "message||-1|a\nb\x1e");
    /* CR at the end of a chunk, LF at the start of the next: one line end (chunk size 1, 2, ...) */
    expect_parse("data: x\r\ndata: y\r\n\r\n", "message||-1|x\ny\x1e");
    /* LF LF after CR: CR LF is one end, the next LF a blank line */
    expect_parse("data: z\r\n\ndata: w\n\n", "message||-1|z\x1emessage||-1|w\x1e");
}

static void test_comments(void **state)
{
    (void)state;
    struct collect c;
    struct sse_parser p;
    collect_init(&c);
    sse_parser_init(&p, 0, on_event, on_comment, &c);
    const char *s = ": keep-alive\n:\ndata: x\n: between\n\n";
    assert_int_equal(sse_parser_feed(&p, s, strlen(s), NULL, 0), 0);
    assert_int_equal(c.events, 1);
    assert_int_equal(c.comments, 3);
    assert_string_equal(buf_cstr(&c.comment_text), " keep-alive\n\n between\n");
    assert_string_equal(buf_cstr(&c.out), "message||-1|x\x1e");
    sse_parser_deinit(&p);
    collect_free(&c);
}

static void test_bom_and_nul(void **state)
{
    (void)state;
    expect_parse("\xEF\xBB\xBF"
                 "data: a\n\n",
                 "message||-1|a\x1e");
    /* a BOM later in the stream is data */
    char *got = parse("data: a\n\n\xEF\xBB\xBF"
                      "data: b\n\n");
    /* the second line's field name is "\xEF\xBB\xBFdata": unknown, ignored */
    assert_string_equal(got, "message||-1|a\x1e");
    free(got);

    /* NUL inside data is kept (data_len counts it); id with NUL is ignored */
    const char in[] = "id: 1\ndata: a\0b\n\nid: x\0y\ndata: c\n\n";
    int rc;
    char *out = parse_chunked(in, sizeof(in) - 1, 0, 0, &rc);
    assert_int_equal(rc, 0);
    const char want[] = "message|1|-1|a\0b\x1emessage|1|-1|c\x1e";
    assert_memory_equal(out, want, sizeof(want) - 1);
    free(out);
}

static void test_eof_discards_partial(void **state)
{
    (void)state;
    expect_parse("data: complete\n\ndata: partial\n", "message||-1|complete\x1e");
    expect_parse("data: complete\n\ndata: partial", "message||-1|complete\x1e");
}

static void test_max_event(void **state)
{
    (void)state;
    struct collect c;
    struct sse_parser p;
    char err[128] = "";
    collect_init(&c);
    sse_parser_init(&p, 32, on_event, NULL, &c);
    /* within the bound */
    const char *ok = "data: 0123456789\n\n";
    assert_int_equal(sse_parser_feed(&p, ok, strlen(ok), err, sizeof(err)), 0);
    assert_int_equal(c.events, 1);
    /* many data lines adding up past 32 bytes */
    const char *big = "data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\n";
    assert_int_equal(sse_parser_feed(&p, big, strlen(big), err, sizeof(err)), -EMSGSIZE);
    assert_non_null(strstr(err, "exceeds 32 bytes"));
    /* sticky */
    assert_int_equal(sse_parser_feed(&p, ok, strlen(ok), NULL, 0), -EMSGSIZE);
    assert_int_equal(c.events, 1);
    /* reset clears it */
    sse_parser_reset(&p);
    assert_int_equal(sse_parser_feed(&p, ok, strlen(ok), NULL, 0), 0);
    assert_int_equal(c.events, 2);
    /* one unterminated line that never ends, fed in small pieces */
    sse_parser_reset(&p);
    int rc = 0;
    for (int i = 0; i < 100 && rc == 0; i++) {
        rc = sse_parser_feed(&p, "xxxx", 4, NULL, 0);
    }
    assert_int_equal(rc, -EMSGSIZE);
    sse_parser_deinit(&p);
    collect_free(&c);

    /* the bound does not depend on chunking: a line that just fits passes in any chunking */
    char line[64];
    snprintf(line, sizeof(line), "data:%.*s\n\n", 31, "0123456789012345678901234567890123");
    for (size_t chunk = 0; chunk < 6; chunk++) {
        char *got = parse_chunked(line, strlen(line), chunk, 37, &rc);
        assert_int_equal(rc, 0);
        assert_int_equal(strlen(got), strlen("message||-1|") + 31 + 1);
        free(got);
    }
}

static void test_callback_stops(void **state)
{
    (void)state;
    struct collect c;
    struct sse_parser p;
    collect_init(&c);
    c.stop_after = 2;
    sse_parser_init(&p, 0, on_event, NULL, &c);
    const char *s = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
    assert_int_equal(sse_parser_feed(&p, s, strlen(s), NULL, 0), -ECANCELED);
    assert_int_equal(c.events, 2);
    assert_int_equal(sse_parser_feed(&p, s, strlen(s), NULL, 0), -ECANCELED);
    assert_int_equal(c.events, 2);
    assert_int_equal(sse_parser_finish(&p), -ECANCELED);
    sse_parser_deinit(&p);
    collect_free(&c);
}

static void test_last_id_and_retry(void **state)
{
    (void)state;
    struct collect c;
    struct sse_parser p;
    collect_init(&c);
    sse_parser_init(&p, 0, on_event, NULL, &c);
    assert_string_equal(sse_parser_last_id(&p), "");
    assert_int_equal(sse_parser_retry(&p), -1);
    const char *s = "id: abc\nretry: 99999999999999999999999\n\n";
    assert_int_equal(sse_parser_feed(&p, s, strlen(s), NULL, 0), 0);
    assert_int_equal(c.events, 0);
    assert_string_equal(sse_parser_last_id(&p), "abc");
    assert_true(sse_parser_retry(&p) > 0); /* saturated, not wrapped */
    sse_parser_deinit(&p);
    collect_free(&c);
}

static void roundtrip(const char *type, const char *id, const char *data, size_t len,
                      const char *want_data)
{
    struct buf out;
    buf_init(&out, 1 << 16);
    assert_int_equal(sse_write_event(&out, type, id, data, len), 0);
    char *got = parse_chunked(out.data, out.len, 0, 0, NULL);
    char want[1024];
    snprintf(want, sizeof(want), "%s|%s|-1|%s\x1e", type ? type : "message", id ? id : "",
             want_data);
    assert_string_equal(got, want);
    free(got);
    buf_free(&out);
}

static void test_writer(void **state)
{
    (void)state;
    struct buf out;
    buf_init(&out, 1 << 16);
    assert_int_equal(sse_write_data(&out, "{\"x\":1}"), 0);
    assert_string_equal(buf_cstr(&out), "data: {\"x\":1}\n\n");
    buf_reset(&out);
    assert_int_equal(sse_write_data(&out, "[DONE]"), 0);
    assert_string_equal(buf_cstr(&out), "data: [DONE]\n\n");
    buf_reset(&out);
    assert_int_equal(sse_write_event(&out, "update", "42", "a\nb", 3), 0);
    assert_string_equal(buf_cstr(&out), "event: update\nid: 42\ndata: a\ndata: b\n\n");
    buf_reset(&out);
    assert_int_equal(sse_write_comment(&out, "ping"), 0);
    assert_int_equal(sse_write_retry(&out, 3000), 0);
    assert_string_equal(buf_cstr(&out), ": ping\nretry: 3000\n\n");
    /* invalid type / id / comment leave the buffer unchanged */
    size_t before = out.len;
    assert_int_equal(sse_write_event(&out, "a\nb", NULL, "x", 1), -EINVAL);
    assert_int_equal(sse_write_event(&out, NULL, "1\r", "x", 1), -EINVAL);
    assert_int_equal(sse_write_comment(&out, "two\nlines"), -EINVAL);
    assert_int_equal(sse_write_retry(&out, -1), -EINVAL);
    assert_int_equal(out.len, before);
    buf_free(&out);

    /* a full buffer: -ENOSPC and nothing appended */
    struct buf small;
    buf_init(&small, 10);
    assert_int_equal(sse_write_data(&small, "0123456789"), -ENOSPC);
    assert_int_equal(small.len, 0);
    buf_free(&small);

    roundtrip(NULL, NULL, "plain", 5, "plain");
    roundtrip("t", "9", "l1\nl2\r\nl3\rl4", 12, "l1\nl2\nl3\nl4");
    roundtrip(NULL, NULL, "trailing\n", 9, "trailing\n");
    roundtrip(NULL, NULL, "", 0, "");
    roundtrip(NULL, NULL, "\n\n", 2, "\n\n");
    roundtrip(NULL, NULL, " leading space", 14, " leading space");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_event),
        cmocka_unit_test(test_multiline_and_fields),
        cmocka_unit_test(test_no_dispatch_without_data),
        cmocka_unit_test(test_line_endings),
        cmocka_unit_test(test_comments),
        cmocka_unit_test(test_bom_and_nul),
        cmocka_unit_test(test_eof_discards_partial),
        cmocka_unit_test(test_max_event),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_last_id_and_retry),
        cmocka_unit_test(test_writer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
