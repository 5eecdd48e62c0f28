/* Tests of engine/server/tool_parser.h: vLLM's hermes, llama3_json and mistral tool-call parsers.
 * Each case of the tables is parsed whole and streamed (in one feed, a byte at a time, and in
 * random splits), and both must give the expected calls (ids from a counter) and content; the
 * expectations are what vLLM's extract_tool_calls and serving layer return for the same text.
 * Then the JSON rules (Python's json.loads / json.dumps), hold-back of markers, calls kept after
 * a late failure, repeated keys, default ids, the JSON writers and argument errors. */
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/server/tool_parser.h"
#include "lib/json.h"

#define MAX_CALLS 8

struct want_call {
    const char *name;
    const char *args;
};

struct tcase {
    enum tool_parser_kind kind;
    int args_token; /* mistral: the name{args} form */
    const char *text;
    const char *content;        /* the message content; NULL: null */
    const char *stream_content; /* what the stream sends as content; NULL: same as content */
    int tools_called;
    struct want_call calls[MAX_CALLS];
};

static void counter_id(void *ctx, enum tool_parser_kind kind, char *out)
{
    int *n = ctx;
    (void)kind;
    snprintf(out, TOOL_CALL_ID_MAX + 1, "call-%d", (*n)++);
}

static size_t n_want(const struct tcase *c)
{
    size_t n = 0;
    while (n < MAX_CALLS && c->calls[n].name) {
        n++;
    }
    return n;
}

static void parser_for(const struct tcase *c, struct tool_parser *p, int *counter)
{
    tool_parser_init(p, c->kind);
    p->mistral_args_token = c->args_token;
    p->make_id = counter_id;
    p->make_id_ctx = counter;
    *counter = 0;
}

static void check_whole(const struct tcase *c)
{
    struct tool_parser p;
    int counter;
    parser_for(c, &p, &counter);
    struct tool_result r;
    char err[128];
    assert_int_equal(tool_parse_complete(&p, c->text, strlen(c->text), &r, err, sizeof(err)), 0);
    assert_int_equal(r.tools_called, c->tools_called);
    if (c->content) {
        assert_non_null(r.content);
        assert_int_equal(r.content_len, strlen(c->content));
        assert_memory_equal(r.content, c->content, r.content_len);
    } else if (r.content) {
        fail_msg("content should be null, is \"%s\" (text %s)", r.content, c->text);
    }
    size_t n = n_want(c);
    assert_int_equal(r.n_calls, n);
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "call-%zu", i);
        assert_string_equal(r.calls[i].id, id);
        assert_string_equal(r.calls[i].name, c->calls[i].name);
        assert_string_equal(r.calls[i].arguments, c->calls[i].args);
        assert_int_equal(r.calls[i].arguments_len, strlen(c->calls[i].args));
    }
    tool_result_free(&r);
}

/* What a stream sent, put together, with the rules of its shape checked on the way. */
struct collected {
    struct buf content;
    size_t n;
    char ids[MAX_CALLS][TOOL_CALL_ID_MAX + 1];
    struct buf names[MAX_CALLS];
    struct buf args[MAX_CALLS];
};

static void collected_init(struct collected *c)
{
    memset(c, 0, sizeof(*c));
    buf_init(&c->content, 1 << 20);
    for (size_t i = 0; i < MAX_CALLS; i++) {
        buf_init(&c->names[i], 1 << 20);
        buf_init(&c->args[i], 1 << 20);
    }
}

static void collected_free(struct collected *c)
{
    buf_free(&c->content);
    for (size_t i = 0; i < MAX_CALLS; i++) {
        buf_free(&c->names[i]);
        buf_free(&c->args[i]);
    }
}

static void collect(struct collected *c, struct tool_delta *d)
{
    if (d->content.len) {
        assert_int_equal(c->n, 0); /* content never follows a call */
        assert_int_equal(buf_append(&c->content, d->content.data, d->content.len), 0);
    }
    for (size_t i = 0; i < d->n_calls; i++) {
        const struct tool_delta_call *e = &d->calls[i];
        if (e->name) {
            assert_int_equal(e->index, c->n); /* calls come in order, each once */
            assert_true(c->n < MAX_CALLS);
            snprintf(c->ids[c->n], sizeof(c->ids[0]), "%s", e->id);
            assert_int_equal(buf_append(&c->names[c->n], e->name, e->name_len), 0);
            assert_int_equal(e->arguments.len, 0);
            c->n++;
        } else {
            assert_true(c->n > 0 && e->index == c->n - 1); /* fragments of the last call */
            assert_true(e->arguments.len > 0);
            assert_int_equal(buf_append(&c->args[e->index], e->arguments.data, e->arguments.len),
                             0);
        }
    }
    tool_delta_reset(d);
}

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* Streams text split at the given mode: 0 one feed, 1 a byte at a time, else random pieces of
 * up to 7 bytes seeded by mode. */
static void stream_text(const struct tool_parser *p, const char *text, size_t len, uint64_t mode,
                        struct collected *out, int *exact)
{
    struct tool_stream *s;
    assert_int_equal(tool_stream_new(p, &s), 0);
    struct tool_delta d;
    tool_delta_init(&d);
    uint64_t seed = mode;
    size_t i = 0;
    while (i < len) {
        size_t step = mode == 0 ? len : mode == 1 ? 1 : 1 + rng_next(&seed) % 7;
        if (step > len - i) {
            step = len - i;
        }
        assert_int_equal(tool_stream_feed(s, text + i, step, &d), 0);
        collect(out, &d);
        i += step;
    }
    assert_int_equal(tool_stream_finish(s, &d), 0);
    collect(out, &d);
    assert_int_equal(tool_stream_calls(s), out->n);
    *exact = tool_stream_exact(s);
    assert_int_equal(tool_stream_feed(s, "x", 1, &d), -EINVAL);
    tool_delta_free(&d);
    tool_stream_free(s);
}

static void check_stream(const struct tcase *c, uint64_t mode)
{
    struct tool_parser p;
    int counter, exact;
    parser_for(c, &p, &counter);
    struct collected got;
    collected_init(&got);
    stream_text(&p, c->text, strlen(c->text), mode, &got, &exact);
    assert_int_equal(exact, 1);
    const char *want = c->stream_content ? c->stream_content : c->content ? c->content : "";
    if (got.content.len != strlen(want) ||
        memcmp(buf_cstr(&got.content), want, got.content.len) != 0) {
        fail_msg("mode %d: streamed content \"%s\", want \"%s\" (text %s)", (int)mode,
                 buf_cstr(&got.content), want, c->text);
    }
    size_t n = n_want(c);
    assert_int_equal(got.n, n);
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "call-%zu", i);
        assert_string_equal(got.ids[i], id);
        assert_string_equal(buf_cstr(&got.names[i]), c->calls[i].name);
        assert_string_equal(buf_cstr(&got.args[i]), c->calls[i].args);
    }
    collected_free(&got);
}

static void check_cases(const struct tcase *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        check_whole(&cases[i]);
        for (uint64_t mode = 0; mode < 40; mode++) {
            check_stream(&cases[i], mode);
        }
    }
}

/* ---- hermes ---- */

static const struct tcase hermes_cases[] = {
    {TOOL_PARSER_HERMES, 0, "Just text, no tools.", "Just text, no tools.", NULL, 0, {{0}}},
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
     "\"celsius\"}}\n</tool_call>",
     NULL,
     NULL,
     1,
     {{"get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}},
    /* Qwen3: text before is content; whitespace only becomes null (streamed as it is) */
    {TOOL_PARSER_HERMES,
     0,
     "Let me check.\n<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[1,2.50,true,"
     "null]}}\n</tool_call>",
     "Let me check.\n",
     NULL,
     1,
     {{"f", "{\"a\": 1, \"b\": [1, 2.5, true, null]}"}}},
    {TOOL_PARSER_HERMES,
     0,
     "\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
     NULL,
     "\n\n",
     1,
     {{"f", "{}"}}},
    /* parallel calls; text between and after blocks is dropped */
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{"
     "\"arguments\": {\"y\": \"z\"}, \"name\": \"b\"}\n</tool_call>\nbye",
     NULL,
     NULL,
     1,
     {{"a", "{\"x\": 1}"}, {"b", "{\"y\": \"z\"}"}}},
    /* the last block may lack its end tag */
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"</tool\"}}",
     NULL,
     NULL,
     1,
     {{"f", "{\"q\": \"</tool\"}"}}},
    /* arguments given as a string stay a JSON string (vLLM main: json.dumps of the str) */
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
     NULL,
     NULL,
     1,
     {{"f", "\"{\\\"a\\\": 1}\""}}},
    /* unicode: escapes decoded (surrogate pairs joined), written raw; control characters
     * escaped as json.dumps does */
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Z\\u00fcrich\", \"e\": "
     "\"\\ud83d\\ude00\", \"jp\": \"東京\", \"c\": \"\\u0001\\/\\t\"}}</tool_call>",
     NULL,
     NULL,
     1,
     {{"f", "{\"city\": \"Zürich\", \"e\": \"😀\", \"jp\": \"東京\", \"c\": \"\\u0001/\\t\"}"}}},
    /* not tool calls: all content */
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>\n{\"name\": \"f\" \"arguments\": {\"a\": 1}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"f\" \"arguments\": {\"a\": 1}}\n</tool_call>",
     NULL,
     0,
     {{0}}},
    {TOOL_PARSER_HERMES,
     0,
     "Hi <tool_call>{\"name\": \"f\"}</tool_call>",
     "Hi <tool_call>{\"name\": \"f\"}</tool_call>",
     NULL,
     0,
     {{0}}},
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
     "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
     NULL,
     0,
     {{0}}},
    {TOOL_PARSER_HERMES,
     0,
     "<tool_call>[1, 2]</tool_call> and <tool_",
     "<tool_call>[1, 2]</tool_call> and <tool_",
     NULL,
     0,
     {{0}}},
    {TOOL_PARSER_HERMES, 0, "a <tool_ b", "a <tool_ b", NULL, 0, {{0}}},
};

/* Streams text byte by byte and checks the calls' names and the content. */
static void expect_stream(const struct tool_parser *p, const char *text, const char *content,
                          const char *const *names, size_t n)
{
    struct collected got;
    collected_init(&got);
    int exact;
    stream_text(p, text, strlen(text), 1, &got, &exact);
    assert_string_equal(buf_cstr(&got.content), content);
    assert_int_equal(got.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(buf_cstr(&got.names[i]), names[i]);
    }
    collected_free(&got);
}

static const char *const name_f[] = {"f"};

static void test_hermes(void **state)
{
    (void)state;
    check_cases(hermes_cases, ARRAY_SIZE(hermes_cases));

    /* malformed after the arguments' key: the name went out already and stays */
    static const struct tcase late = {
        TOOL_PARSER_HERMES,
        0,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
        NULL,
        0,
        {{0}}};
    check_whole(&late);
    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_HERMES);
    expect_stream(&p, late.text, "", name_f, 1);

    /* json.loads wants only whitespace after the object: the call went out already */
    static const struct tcase trailing = {
        TOOL_PARSER_HERMES,
        0,
        "<tool_call>{\"name\": \"f\", \"arguments\": {}} trailing</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {}} trailing</tool_call>",
        NULL,
        0,
        {{0}}};
    check_whole(&trailing);
    expect_stream(&p, trailing.text, "", name_f, 1);
}

/* ---- llama3_json ---- */

static const struct tcase llama_cases[] = {
    {TOOL_PARSER_LLAMA3_JSON, 0, "Hello there", "Hello there", NULL, 0, {{0}}},
    {TOOL_PARSER_LLAMA3_JSON,
     0,
     "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     NULL,
     NULL,
     1,
     {{"get_weather", "{\"city\": \"Paris\"}"}}},
    {TOOL_PARSER_LLAMA3_JSON,
     0,
     "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"n\": -0}}",
     NULL,
     NULL,
     1,
     {{"a", "{}"}, {"b", "{\"n\": 0}"}}},
    /* "arguments" wins over "parameters" */
    {TOOL_PARSER_LLAMA3_JSON,
     0,
     "{\"name\": \"a\", \"arguments\": [1], \"parameters\": [2]}",
     NULL,
     NULL,
     1,
     {{"a", "[1]"}}},
    {TOOL_PARSER_LLAMA3_JSON, 0, "{not json", "{not json", NULL, 0, {{0}}},
    {TOOL_PARSER_LLAMA3_JSON, 0, "<|python_tag|>", "<|python_tag|>", NULL, 0, {{0}}},
    {TOOL_PARSER_LLAMA3_JSON, 0, "<|python_ta", "<|python_ta", NULL, 0, {{0}}},
};

static void test_llama(void **state)
{
    (void)state;
    check_cases(llama_cases, ARRAY_SIZE(llama_cases));

    /* text before the JSON: calls when whole, content when streamed (as vLLM streams it) */
    static const struct tcase before = {TOOL_PARSER_LLAMA3_JSON,
                                        0,
                                        "Sure: {\"name\": \"f\", \"parameters\": {}}",
                                        NULL,
                                        NULL,
                                        1,
                                        {{"f", "{}"}}};
    check_whole(&before);
    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_LLAMA3_JSON);
    expect_stream(&p, before.text, before.text, NULL, 0);

    /* the first call goes out before the second object shows it was not tool calls */
    static const struct tcase late = {TOOL_PARSER_LLAMA3_JSON,
                                      0,
                                      "{\"name\": \"f\", \"parameters\": {}}; {\"oops\": 1}",
                                      "{\"name\": \"f\", \"parameters\": {}}; {\"oops\": 1}",
                                      NULL,
                                      0,
                                      {{0}}};
    check_whole(&late);
    expect_stream(&p, late.text, "", name_f, 1);

    /* a '{' right after an object is skipped, the one inside it is not (and is no call) */
    static const struct tcase skip = {
        TOOL_PARSER_LLAMA3_JSON,
        0,
        "{\"name\": \"f\", \"parameters\": {}}{\"name\": \"b\", \"parameters\": {}}",
        "{\"name\": \"f\", \"parameters\": {}}{\"name\": \"b\", \"parameters\": {}}",
        NULL,
        0,
        {{0}}};
    check_whole(&skip);
    expect_stream(&p, skip.text, "", name_f, 1);
}

/* ---- mistral ---- */

static const struct tcase mistral_cases[] = {
    {TOOL_PARSER_MISTRAL,
     0,
     "[TOOL_CALLS][{\"name\": \"add\", \"arguments\":{\"a\": 3.5, \"b\": 4}}]",
     NULL,
     NULL,
     1,
     {{"add", "{\"a\": 3.5, \"b\": 4}"}}},
    {TOOL_PARSER_MISTRAL,
     0,
     "Hello[TOOL_CALLS] [{\"name\": \"add\", \"arguments\":{\"a\": 1}}, {\"arguments\": {\"c\": "
     "\"d\"}, \"name\": \"w\"}]\nextra trailing data",
     "Hello",
     NULL,
     1,
     {{"add", "{\"a\": 1}"}, {"w", "{\"c\": \"d\"}"}}},
    /* arguments default to {} */
    {TOOL_PARSER_MISTRAL, 0, "[TOOL_CALLS]\u00a0[{\"name\": \"f\"}]", NULL, NULL, 1, {{"f", "{}"}}},
    /* junk before the array: vLLM's regex fallback (first "[{" to the last "}]") */
    {TOOL_PARSER_MISTRAL,
     0,
     "[TOOL_CALLS]  junk [{\"name\": \"add\", \"arguments\":{\"a\": 1, \"b\": 2}}] trail",
     NULL,
     NULL,
     1,
     {{"add", "{\"a\": 1, \"b\": 2}"}}},
    {TOOL_PARSER_MISTRAL,
     0,
     "[TOOL_CALLS] not json at all",
     "[TOOL_CALLS] not json at all",
     NULL,
     0,
     {{0}}},
    /* an empty list: tool calls, none of them */
    {TOOL_PARSER_MISTRAL, 0, "ok [TOOL_CALLS] []", "ok ", NULL, 1, {{0}}},
    /* two markers in the array form: vLLM raises; content here */
    {TOOL_PARSER_MISTRAL,
     0,
     "[TOOL_CALLS][{\"name\": \"a\"[TOOL_CALLS]}]",
     "[TOOL_CALLS][{\"name\": \"a\"[TOOL_CALLS]}]",
     NULL,
     0,
     {{0}}},
    {TOOL_PARSER_MISTRAL, 0, "[TOOL_CALL", "[TOOL_CALL", NULL, 0, {{0}}},
    /* name{args} form (tokenizer with [ARGS]): raw argument text */
    {TOOL_PARSER_MISTRAL,
     1,
     "[TOOL_CALLS]add{\"a\": 3.5, \"b\": 4}[TOOL_CALLS]multiply{\"a\": 3, \"b\": 6}",
     NULL,
     NULL,
     1,
     {{"add", "{\"a\": 3.5, \"b\": 4}"}, {"multiply", "{\"a\": 3, \"b\": 6}"}}},
    {TOOL_PARSER_MISTRAL,
     1,
     "[TOOL_CALLS]get_weather[ARGS]{\"city\":\"Paris\"}",
     NULL,
     NULL,
     1,
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {TOOL_PARSER_MISTRAL,
     1,
     "hi{hi[TOOL_CALLS]bash{\"command\": \"ls\"",
     "hi{hi",
     NULL,
     1,
     {{"bash", "{\"command\": \"ls\""}}},
    {TOOL_PARSER_MISTRAL, 1, "[TOOL_CALLS]toolname_no_args", NULL, NULL, 1, {{0}}},
};

static void test_mistral(void **state)
{
    (void)state;
    check_cases(mistral_cases, ARRAY_SIZE(mistral_cases));

    /* the second marker comes after the first call went out */
    static const struct tcase late = {
        TOOL_PARSER_MISTRAL,
        0,
        "[TOOL_CALLS][{\"name\": \"f\"}][TOOL_CALLS][{\"name\": \"b\"}]",
        "[TOOL_CALLS][{\"name\": \"f\"}][TOOL_CALLS][{\"name\": \"b\"}]",
        NULL,
        0,
        {{0}}};
    check_whole(&late);
    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_MISTRAL);
    expect_stream(&p, late.text, "", name_f, 1);
}

/* ---- JSON as Python reads and writes it ---- */

/* The arguments of a hermes call whose arguments are json_text; NULL when it is no call. */
static char *hermes_args(const char *json_text)
{
    struct buf text;
    buf_init(&text, 1 << 20);
    buf_appendf(&text, "<tool_call>{\"name\": \"f\", \"arguments\": %s}</tool_call>", json_text);
    assert_int_equal(buf_error(&text), 0);
    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_HERMES);
    struct tool_result r;
    assert_int_equal(tool_parse_complete(&p, text.data, text.len, &r, NULL, 0), 0);
    char *args = r.n_calls ? strdup(r.calls[0].arguments) : NULL;
    tool_result_free(&r);
    buf_free(&text);
    return args;
}

static void expect_args(const char *json_text, const char *want)
{
    char *got = hermes_args(json_text);
    char shown[256];
    snprintf(shown, sizeof(shown), "%s", got ? got : "(no call)");
    int ok = want ? got && strcmp(got, want) == 0 : got == NULL;
    free(got);
    if (!ok) {
        fail_msg("%s gave %s, want %s", json_text, shown, want ? want : "(no call)");
    }
}

static void test_json_rules(void **state)
{
    (void)state;
    /* numbers: ints as written, floats as repr() */
    expect_args("[1e5, 1E+5, 1e16, 1e15, 0.0001, 0.00001, 2.5e-7, 1.0, 12.50, -0.0]",
                "[100000.0, 100000.0, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 2.5e-07, 1.0, "
                "12.5, -0.0]");
    expect_args("[0.1, 0.30000000000000004, 5e-324, 1.7976931348623157e308, 1e400, -1e400]",
                "[0.1, 0.30000000000000004, 5e-324, 1.7976931348623157e+308, Infinity, "
                "-Infinity]");
    expect_args("[123456789012345678901234567890, -0, 9007199254740993.0]",
                "[123456789012345678901234567890, 0, 9007199254740992.0]");
    expect_args("[NaN, Infinity, -Infinity, true, false, null]",
                "[NaN, Infinity, -Infinity, true, false, null]");
    /* repeated key: first place, last value */
    expect_args("{\"a\": 1, \"b\": 2, \"a\": {\"c\": 3, \"c\": 4}}",
                "{\"a\": {\"c\": 4}, \"b\": 2}");
    /* strings: lone surrogates kept (as escapes), raw DEL kept */
    expect_args("\"\\ud800x\\udc00\\ud83d\"", "\"\\ud800x\\udc00\\ud83d\"");
    expect_args("\"a\x7f\"", "\"a\x7f\"");
    expect_args("{ \"k\" :\n [ ] , \"l\":{}}", "{\"k\": [], \"l\": {}}");
    /* what json.loads refuses */
    expect_args("[1, 2,]", NULL);
    expect_args("{\"a\": 1,}", NULL);
    expect_args("\"raw\ttab\"", NULL);
    expect_args("[01]", NULL);
    expect_args("[1.]", NULL);
    expect_args("[.5]", NULL);
    expect_args("[+1]", NULL);
    expect_args("'single'", NULL);
    expect_args("\"\\x41\"", NULL);
    expect_args("{\"a\" 1}", NULL);
    expect_args("[nul]", NULL);
    /* integers of more than 4300 digits (Python's limit) */
    char big[4400];
    memset(big, '7', 4301);
    big[4301] = '\0';
    expect_args(big, NULL);
    big[4300] = '\0';
    char *ok = hermes_args(big);
    assert_non_null(ok);
    assert_int_equal(strlen(ok), 4300);
    free(ok);
    /* nesting: the call object and TOOL_JSON_MAX_DEPTH - 1 arrays fit, one more does not */
    char deep[2 * TOOL_JSON_MAX_DEPTH + 1];
    size_t k = TOOL_JSON_MAX_DEPTH;
    memset(deep, '[', k);
    memset(deep + k, ']', k);
    deep[2 * k] = '\0';
    expect_args(deep, NULL);
    k--;
    memset(deep, '[', k);
    memset(deep + k, ']', k);
    deep[2 * k] = '\0';
    char *d = hermes_args(deep);
    assert_non_null(d);
    free(d);
}

/* ---- streaming details ---- */

static int feed_str(struct tool_stream *s, const char *text, struct tool_delta *d)
{
    return tool_stream_feed(s, text, strlen(text), d);
}

static void test_hold_back(void **state)
{
    (void)state;
    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_HERMES);
    struct tool_stream *s;
    assert_int_equal(tool_stream_new(&p, &s), 0);
    struct tool_delta d;
    tool_delta_init(&d);
    assert_int_equal(feed_str(s, "Hello <tool_", &d), 0);
    assert_string_equal(buf_cstr(&d.content), "Hello ");
    tool_delta_reset(&d);
    assert_int_equal(feed_str(s, "x", &d), 0);
    assert_string_equal(buf_cstr(&d.content), "<tool_x");
    tool_delta_reset(&d);
    assert_int_equal(feed_str(s, " <tool_call>{\"name\": \"f\", \"argu", &d), 0);
    assert_string_equal(buf_cstr(&d.content), " ");
    assert_int_equal(d.n_calls, 0); /* the name waits for the arguments' key */
    tool_delta_reset(&d);
    assert_int_equal(feed_str(s, "ments\": {\"s\": \"abc", &d), 0);
    assert_int_equal(d.n_calls, 2);
    assert_string_equal(d.calls[0].name, "f");
    assert_true(strncmp(d.calls[0].id, "chatcmpl-tool-", 14) == 0);
    assert_int_equal(strlen(d.calls[0].id), 14 + 32);
    for (size_t i = 14; i < 46; i++) {
        assert_true(isxdigit((unsigned char)d.calls[0].id[i]) && !isupper(d.calls[0].id[i]));
    }
    assert_string_equal(buf_cstr(&d.calls[1].arguments), "{\"s\": \"abc"); /* string streamed */
    tool_delta_reset(&d);
    assert_int_equal(feed_str(s, "\"}}\n</tool_call>", &d), 0);
    assert_string_equal(buf_cstr(&d.calls[0].arguments), "\"}");
    tool_delta_reset(&d);
    assert_int_equal(tool_stream_finish(s, &d), 0);
    assert_int_equal(d.n_calls, 0);
    assert_int_equal(d.content.len, 0);
    assert_int_equal(tool_stream_calls(s), 1);
    tool_delta_free(&d);
    tool_stream_free(s);
}

/* A call that went out stays when a later block shows the output was not tool calls. */
static void test_late_failure(void **state)
{
    (void)state;
    const char *text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
                       "<tool_call>{bad}</tool_call>\n"
                       "<tool_call>{\"name\": \"c\", \"arguments\": {\"k\": 1}}</tool_call>";
    struct tool_parser p;
    int counter = 0;
    tool_parser_init(&p, TOOL_PARSER_HERMES);
    p.make_id = counter_id;
    p.make_id_ctx = &counter;
    struct tool_result r;
    assert_int_equal(tool_parse_complete(&p, text, strlen(text), &r, NULL, 0), 0);
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, text);
    tool_result_free(&r);
    struct collected got;
    collected_init(&got);
    int exact;
    stream_text(&p, text, strlen(text), 1, &got, &exact);
    assert_int_equal(got.n, 2); /* the bad block is lost, the next one is read */
    assert_string_equal(buf_cstr(&got.names[0]), "a");
    assert_string_equal(buf_cstr(&got.names[1]), "c");
    assert_string_equal(buf_cstr(&got.args[1]), "{\"k\": 1}");
    assert_int_equal(got.content.len, 0);
    collected_free(&got);
}

static void test_repeated_keys(void **state)
{
    (void)state;
    const char *text =
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1, \"a\": 2}}</tool_call>";
    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_HERMES);
    struct tool_result r;
    assert_int_equal(tool_parse_complete(&p, text, strlen(text), &r, NULL, 0), 0);
    assert_string_equal(r.calls[0].arguments, "{\"a\": 2}");
    tool_result_free(&r);
    struct collected got;
    collected_init(&got);
    int exact;
    stream_text(&p, text, strlen(text), 1, &got, &exact);
    assert_int_equal(exact, 0);
    assert_string_equal(buf_cstr(&got.args[0]), "{\"a\": 1, \"a\": 2}"); /* reads back the same */
    collected_free(&got);
}

static void test_default_ids(void **state)
{
    (void)state;
    const char *text = "[TOOL_CALLS][{\"name\": \"a\"}, {\"name\": \"b\"}]";
    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_MISTRAL);
    struct tool_result r;
    assert_int_equal(tool_parse_complete(&p, text, strlen(text), &r, NULL, 0), 0);
    assert_int_equal(r.n_calls, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(strlen(r.calls[i].id), 9);
        for (size_t k = 0; k < 9; k++) {
            assert_true(isalnum((unsigned char)r.calls[i].id[k]));
        }
    }
    assert_string_not_equal(r.calls[0].id, r.calls[1].id);
    tool_result_free(&r);
}

/* ---- JSON writers ---- */

static struct json_object *parse_back(const struct buf *b)
{
    char err[256];
    struct json_object *o = json_parse(buf_cstr(b), b->len, err, sizeof(err));
    if (!o) {
        fail_msg("not valid JSON (%s): %s", err, buf_cstr(b));
    }
    return o;
}

static const char *str_at(struct json_object *o, const char *path)
{
    const char *s = NULL;
    char err[128];
    if (json_get_string(o, path, &s, err, sizeof(err)) != 0) {
        fail_msg("%s", err);
    }
    return s;
}

static void test_json_writers(void **state)
{
    (void)state;
    const char *text =
        "<tool_call>{\"name\": \"f\\\"q\", \"arguments\": {\"s\": \"é\\n\"}}</tool_call>";
    struct tool_parser p;
    int counter = 0;
    tool_parser_init(&p, TOOL_PARSER_HERMES);
    p.make_id = counter_id;
    p.make_id_ctx = &counter;
    struct tool_result r;
    assert_int_equal(tool_parse_complete(&p, text, strlen(text), &r, NULL, 0), 0);
    struct buf b;
    buf_init(&b, 1 << 16);
    assert_int_equal(tool_calls_json(r.calls, r.n_calls, &b), 0);
    assert_string_equal(buf_cstr(&b), "[{\"id\":\"call-0\",\"type\":\"function\",\"function\":{"
                                      "\"name\":\"f\\\"q\",\"arguments\":\"{\\\"s\\\": "
                                      "\\\"é\\\\n\\\"}\"}}]");
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "[0].function.arguments"), "{\"s\": \"é\\n\"}");
    json_object_put(o);
    tool_result_free(&r);

    struct tool_stream *s;
    counter = 0;
    assert_int_equal(tool_stream_new(&p, &s), 0);
    struct tool_delta d;
    tool_delta_init(&d);
    assert_int_equal(tool_stream_feed(s, text, strlen(text), &d), 0);
    buf_reset(&b);
    assert_int_equal(tool_delta_json(&d, &b), 0);
    assert_string_equal(
        buf_cstr(&b),
        "[{\"id\":\"call-0\",\"type\":\"function\",\"index\":0,\"function\":{"
        "\"name\":\"f\\\"q\"}},{\"index\":0,\"function\":{\"arguments\":\"{\\\"s\\\": "
        "\\\"é\\\\n\\\"}\"}}]");
    o = parse_back(&b);
    assert_string_equal(str_at(o, "[1].function.arguments"), "{\"s\": \"é\\n\"}");
    json_object_put(o);
    tool_delta_reset(&d);
    buf_reset(&b);
    assert_int_equal(tool_delta_json(&d, &b), 0);
    assert_string_equal(buf_cstr(&b), "[]");
    assert_int_equal(tool_stream_finish(s, &d), 0);
    tool_delta_free(&d);
    tool_stream_free(s);

    struct buf tiny; /* a buffer too small: the sticky failure comes back */
    buf_init(&tiny, 8);
    struct tool_call c = {"id", "name", 4, "{}", 2};
    assert_int_equal(tool_calls_json(&c, 1, &tiny), -ENOSPC);
    buf_free(&tiny);
    buf_free(&b);
}

/* ---- names and arguments ---- */

static void test_api(void **state)
{
    (void)state;
    enum tool_parser_kind k = TOOL_PARSER_NONE;
    assert_int_equal(tool_parser_kind_from_name("hermes", &k), 0);
    assert_int_equal(k, TOOL_PARSER_HERMES);
    assert_int_equal(tool_parser_kind_from_name("llama3_json", &k), 0);
    assert_int_equal(k, TOOL_PARSER_LLAMA3_JSON);
    assert_int_equal(tool_parser_kind_from_name("llama4_json", &k), 0);
    assert_int_equal(k, TOOL_PARSER_LLAMA3_JSON);
    assert_int_equal(tool_parser_kind_from_name("mistral", &k), 0);
    assert_int_equal(k, TOOL_PARSER_MISTRAL);
    assert_int_equal(tool_parser_kind_from_name("pythonic", &k), -EINVAL);
    assert_int_equal(tool_parser_kind_from_name(NULL, &k), -EINVAL);
    assert_int_equal(k, TOOL_PARSER_MISTRAL);

    struct tool_parser p;
    tool_parser_init(&p, TOOL_PARSER_NONE);
    struct tool_result r;
    char err[64];
    assert_int_equal(tool_parse_complete(&p, NULL, 3, &r, err, sizeof(err)), -EINVAL);
    assert_true(strlen(err) > 0);
    assert_int_equal(tool_parse_complete(&p, "<tool_call>", 11, &r, NULL, 0), 0);
    assert_int_equal(r.tools_called, 0);
    assert_string_equal(r.content, "<tool_call>");
    tool_result_free(&r);
    assert_int_equal(tool_parse_complete(&p, NULL, 0, &r, NULL, 0), 0);
    assert_string_equal(r.content, "");
    tool_result_free(&r);

    struct tool_stream *s;
    assert_int_equal(tool_stream_new(NULL, &s), -EINVAL);
    assert_int_equal(tool_stream_new(&p, &s), 0);
    struct tool_delta d;
    tool_delta_init(&d);
    assert_int_equal(feed_str(s, "<tool_call>", &d), 0);
    assert_string_equal(buf_cstr(&d.content), "<tool_call>");
    assert_int_equal(tool_stream_feed(s, NULL, 1, &d), -EINVAL);
    assert_int_equal(tool_stream_finish(s, &d), 0);
    assert_int_equal(tool_stream_finish(s, &d), -EINVAL);
    tool_delta_free(&d);
    tool_stream_free(s);
    tool_stream_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_mistral),       cmocka_unit_test(test_json_rules),
        cmocka_unit_test(test_hold_back),     cmocka_unit_test(test_late_failure),
        cmocka_unit_test(test_repeated_keys), cmocka_unit_test(test_default_ids),
        cmocka_unit_test(test_json_writers),  cmocka_unit_test(test_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
