/*
 * Fuzz target for engine/server/tool_parser.h: the input is a model's output, parsed whole and
 * streamed (in one feed, a byte at a time, and in random pieces seeded by the input's hash) by
 * every parser (hermes, llama3_json, mistral in its JSON-array and name{args} forms). Checks:
 *  - the whole result is coherent: no tool calls means no calls and the whole text as content;
 *    ids come from the generator in order; its tool_calls JSON is valid JSON;
 *  - a stream has the shape of one (content before calls, calls in order, first entry with id
 *    and name, fragments only for the last call, valid delta JSON), and every split gives the
 *    same content, calls and exactness;
 *  - stream and whole agree as tool_parser.h promises: same calls, ids and content when the text
 *    is tool calls and the stream is exact (content null when whole may be whitespace when
 *    streamed); the whole text as content when it is not and nothing was streamed; llama3_json
 *    text not starting with the tag or '{' is all content when streamed.
 * Any crash, leak or failed check aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/tool_parser.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tool_parser: check failed: %s (line %d)\n", #cond, __LINE__);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_LEN (1 << 16) /* longer inputs are cut: a byte-at-a-time stream per parser */

static void counter_id(void *ctx, enum tool_parser_kind kind, char *out)
{
    int *n = ctx;
    (void)kind;
    snprintf(out, TOOL_CALL_ID_MAX + 1, "id-%d", (*n)++);
}

static void check_valid_json(const struct buf *b)
{
    char err[256];
    CHECK(buf_error(b) == 0);
    struct json_object *o = json_parse(buf_cstr(b), b->len, err, sizeof(err));
    if (!o) {
        fprintf(stderr, "invalid JSON built (%s): %s\n", err, buf_cstr(b));
        abort();
    }
    json_object_put(o);
}

static int same(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* content.strip() == "" for ASCII and the common Unicode spaces the parsers produce. */
static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c >= 0x80)) {
            return 0;
        }
    }
    return 1;
}

/* One stream's output put together. */
struct streamed {
    struct buf content;
    size_t n;
    struct call {
        char id[TOOL_CALL_ID_MAX + 1];
        struct buf name, args;
    } * calls;
    int exact;
};

static void streamed_init(struct streamed *s)
{
    memset(s, 0, sizeof(*s));
    buf_init(&s->content, TOOL_TEXT_MAX);
}

static void streamed_free(struct streamed *s)
{
    for (size_t i = 0; i < s->n; i++) {
        buf_free(&s->calls[i].name);
        buf_free(&s->calls[i].args);
    }
    free(s->calls);
    buf_free(&s->content);
}

static void collect(struct streamed *s, struct tool_delta *d)
{
    struct buf j;
    buf_init(&j, TOOL_TEXT_MAX);
    CHECK(tool_delta_json(d, &j) == 0);
    check_valid_json(&j);
    buf_free(&j);
    if (d->content.len) {
        CHECK(s->n == 0);
        CHECK(buf_append(&s->content, d->content.data, d->content.len) == 0);
    }
    for (size_t i = 0; i < d->n_calls; i++) {
        const struct tool_delta_call *e = &d->calls[i];
        if (e->name) {
            CHECK(e->index == s->n && e->arguments.len == 0 && e->id[0] != '\0');
            struct call *c = realloc(s->calls, (s->n + 1) * sizeof(*c));
            CHECK(c != NULL);
            s->calls = c;
            c = &s->calls[s->n++];
            memcpy(c->id, e->id, sizeof(c->id));
            buf_init(&c->name, TOOL_TEXT_MAX);
            buf_init(&c->args, TOOL_TEXT_MAX);
            CHECK(buf_append(&c->name, e->name, e->name_len) == 0);
        } else {
            CHECK(s->n > 0 && e->index == s->n - 1 && e->id[0] == '\0');
            CHECK(e->arguments.len > 0);
            CHECK(buf_append(&s->calls[e->index].args, e->arguments.data, e->arguments.len) == 0);
        }
    }
    tool_delta_reset(d);
}

/* mode 0: one feed; 1: a byte at a time; else pieces of 1-16 bytes from seed mode. */
static void stream(const struct tool_parser *p, const char *text, size_t len, uint64_t mode,
                   struct streamed *out)
{
    struct tool_stream *s;
    CHECK(tool_stream_new(p, &s) == 0);
    struct tool_delta d;
    tool_delta_init(&d);
    uint64_t seed = mode;
    for (size_t i = 0; i < len;) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t step = mode == 0 ? len : mode == 1 ? 1 : 1 + (seed >> 33) % 16;
        step = step < len - i ? step : len - i;
        CHECK(tool_stream_feed(s, text + i, step, &d) == 0);
        collect(out, &d);
        i += step;
    }
    CHECK(tool_stream_finish(s, &d) == 0);
    collect(out, &d);
    CHECK(tool_stream_calls(s) == out->n);
    out->exact = tool_stream_exact(s);
    tool_delta_free(&d);
    tool_stream_free(s);
}

static void check_same_streams(const struct streamed *a, const struct streamed *b)
{
    CHECK(same(a->content.data, a->content.len, b->content.data, b->content.len));
    CHECK(a->n == b->n && a->exact == b->exact);
    for (size_t i = 0; i < a->n; i++) {
        CHECK(strcmp(a->calls[i].id, b->calls[i].id) == 0);
        CHECK(same(a->calls[i].name.data, a->calls[i].name.len, b->calls[i].name.data,
                   b->calls[i].name.len));
        CHECK(same(a->calls[i].args.data, a->calls[i].args.len, b->calls[i].args.data,
                   b->calls[i].args.len));
    }
}

static void check_whole(const struct tool_result *r, const char *text, size_t len)
{
    if (!r->tools_called) {
        CHECK(r->n_calls == 0 && r->content && same(r->content, r->content_len, text, len));
    }
    for (size_t i = 0; i < r->n_calls; i++) {
        char id[TOOL_CALL_ID_MAX + 1];
        snprintf(id, sizeof(id), "id-%zu", i);
        CHECK(strcmp(r->calls[i].id, id) == 0);
        CHECK(r->calls[i].name && r->calls[i].arguments);
    }
    struct buf j;
    buf_init(&j, TOOL_TEXT_MAX);
    CHECK(tool_calls_json(r->calls, r->n_calls, &j) == 0);
    check_valid_json(&j);
    buf_free(&j);
}

static void check_agree(const struct tool_parser *p, const struct tool_result *r,
                        const struct streamed *s, const char *text, size_t len)
{
    if (p->kind == TOOL_PARSER_LLAMA3_JSON && !(len && text[0] == '{') &&
        !(len >= 14 && memcmp(text, "<|python_tag|>", 14) == 0)) {
        CHECK(s->n == 0 && same(s->content.data, s->content.len, text, len));
        return;
    }
    if (!r->tools_called) {
        if (s->n == 0) {
            CHECK(same(s->content.data, s->content.len, text, len));
        }
        return;
    }
    if (!s->exact) {
        return;
    }
    CHECK(s->n == r->n_calls);
    for (size_t i = 0; i < s->n; i++) {
        CHECK(strcmp(s->calls[i].id, r->calls[i].id) == 0);
        CHECK(same(s->calls[i].name.data, s->calls[i].name.len, r->calls[i].name,
                   r->calls[i].name_len));
        CHECK(same(s->calls[i].args.data, s->calls[i].args.len, r->calls[i].arguments,
                   r->calls[i].arguments_len));
    }
    if (r->content) {
        CHECK(same(s->content.data, s->content.len, r->content, r->content_len));
    } else {
        CHECK(blank(s->content.data, s->content.len));
    }
}

static uint64_t hash(const uint8_t *data, size_t size)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < size; i++) {
        h = (h ^ data[i]) * 1099511628211ULL;
    }
    return h | 2; /* never 0 or 1: those are the other modes */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t len = size < MAX_LEN ? size : MAX_LEN;
    static const struct {
        enum tool_parser_kind kind;
        int args_token;
    } parsers[] = {{TOOL_PARSER_HERMES, 0},
                   {TOOL_PARSER_LLAMA3_JSON, 0},
                   {TOOL_PARSER_MISTRAL, 0},
                   {TOOL_PARSER_MISTRAL, 1}};
    for (size_t k = 0; k < sizeof(parsers) / sizeof(parsers[0]); k++) {
        int counter = 0;
        struct tool_parser p;
        tool_parser_init(&p, parsers[k].kind);
        p.mistral_args_token = parsers[k].args_token;
        p.make_id = counter_id;
        p.make_id_ctx = &counter;

        struct tool_result r;
        char err[128];
        CHECK(tool_parse_complete(&p, text, len, &r, err, sizeof(err)) == 0);
        check_whole(&r, text, len);

        const uint64_t modes[] = {0, 1, hash(data, len)};
        struct streamed s[3];
        for (size_t m = 0; m < 3; m++) {
            counter = 0;
            streamed_init(&s[m]);
            stream(&p, text, len, modes[m], &s[m]);
        }
        check_same_streams(&s[0], &s[1]);
        check_same_streams(&s[0], &s[2]);
        check_agree(&p, &r, &s[0], text, len);
        for (size_t m = 0; m < 3; m++) {
            streamed_free(&s[m]);
        }
        tool_result_free(&r);
    }
    return 0;
}
