/*
 * Fuzz target for engine/server/responses.h: the bytes as a /v1/responses body, parsed with and
 * without a tool-call parser. Each parse either succeeds with a consistent chat request (at least
 * one message, every message with a role) or fails with a 400/404/500/501 error that has a
 * message; an accepted request is then answered whole and streamed (texts and a tool call made
 * of the request's own bytes), and every body and SSE event must be valid JSON, the events framed
 * "event: <type>\ndata: <json>\n\n" with sequence numbers 0, 1, ... Any crash, leak or failed
 * check aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/responses.h"
#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_responses_request: check failed: %s (line %d)\n", #cond,         \
                    __LINE__);                                                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_json(const char *s, size_t len)
{
    char err[256];
    struct json_object *o = json_parse(s, len, err, sizeof err);
    if (!o) {
        fprintf(stderr, "invalid JSON built (%s): %.*s\n", err, (int)len, s);
        abort();
    }
    json_object_put(o);
}

/* Every event of b: framed, valid JSON, numbered from *seq on. */
static void check_events(const struct buf *b, int64_t *seq)
{
    const char *p = b->data ? b->data : "";
    while (*p) {
        CHECK(strncmp(p, "event: ", 7) == 0);
        const char *nl = strchr(p, '\n');
        CHECK(nl && strncmp(nl + 1, "data: ", 6) == 0);
        const char *data = nl + 7, *end = strstr(data, "\n\n");
        CHECK(end);
        check_json(data, (size_t)(end - data));
        char want[48];
        snprintf(want, sizeof want, "\"sequence_number\":%lld", (long long)(*seq)++);
        const char *at = strstr(data, want);
        CHECK(at && at < end);
        p = end + 2;
    }
}

static void check_error(int rc, const struct openai_error *err)
{
    CHECK(rc == -EINVAL || rc == -ENOMEM);
    CHECK(err->status == 400 || err->status == 404 || err->status == 500 || err->status == 501);
    CHECK(err->message[0] != '\0');
    struct buf b;
    buf_init(&b, 1 << 16);
    CHECK(openai_error_body(err, &b) == 0);
    check_json(b.data, b.len);
    buf_free(&b);
}

static void answer(struct responses_request *rr, const struct openai_request *req, int tool_mode)
{
    const char *text = req->messages[req->n_messages - 1].content;
    size_t len = req->messages[req->n_messages - 1].content_len;
    if (!text) {
        text = "";
        len = 0;
    }
    const struct openai_top_logprob top = {.text = text, .text_len = len, .logprob = -1.5f};
    const struct openai_token_logprob lp = {
        .text = text, .text_len = len, .logprob = -0.5f, .top = &top, .n_top = 1};
    struct tool_call call = {.id = "chatcmpl-tool-0",
                             .name = (char *)text,
                             .name_len = len,
                             .arguments = (char *)text,
                             .arguments_len = len};
    const struct openai_usage u = {.prompt_tokens = 3, .completion_tokens = 2, .cached_tokens = 1};
    struct responses_result res = {.id = "resp_x",
                                   .model = req->model ? req->model : "m",
                                   .created_at = 1,
                                   .finish = OPENAI_FINISH_LENGTH,
                                   .temperature = req->sampling.temperature,
                                   .top_p = req->sampling.top_p,
                                   .max_output_tokens = 4,
                                   .usage = &u,
                                   .text = text,
                                   .text_len = len,
                                   .logprobs = &lp,
                                   .n_logprobs = 1,
                                   .calls = &call,
                                   .n_calls = 1,
                                   .tool_mode = tool_mode};
    struct buf b;
    buf_init(&b, 1 << 24);
    CHECK(responses_build(rr, &res, &b) == 0);
    check_json(b.data, b.len);
    buf_reset(&b);
    int64_t seq = 0;
    res.finish = OPENAI_FINISH_NONE;
    res.usage = NULL;
    CHECK(responses_stream_begin(rr, &res, &b) == 0);
    struct tool_delta_call dc[2];
    memset(dc, 0, sizeof dc);
    dc[0].name = (char *)text;
    dc[0].name_len = len;
    buf_init(&dc[0].arguments, 1 << 24);
    buf_init(&dc[1].arguments, 1 << 24);
    buf_append(&dc[1].arguments, text, len);
    CHECK(responses_stream_delta(rr, text, len, &lp, 1, NULL, 0, &b) == 0);
    CHECK(responses_stream_delta(rr, "", 0, NULL, 0, dc, 2, &b) == 0);
    CHECK(responses_stream_delta(rr, text, len, NULL, 0, NULL, 0, &b) == 0);
    res.finish = OPENAI_FINISH_STOP;
    res.usage = &u;
    CHECK(responses_stream_end(rr, &res, &b) == 0);
    CHECK(responses_stream_error(rr, text, &b) == 0);
    check_events(&b, &seq);
    buf_free(&dc[0].arguments);
    buf_free(&dc[1].arguments);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int auto_tools = 0; auto_tools < 2; auto_tools++) {
        struct responses_request *rr = NULL;
        struct openai_request req;
        struct openai_error err;
        int rc = responses_parse((const char *)data, size, auto_tools, &rr, &req, &err);
        if (rc != 0) {
            CHECK(rr == NULL);
            check_error(rc, &err);
            continue;
        }
        CHECK(rr && req.kind == OPENAI_CHAT && req.root && req.n_messages > 0);
        for (size_t i = 0; i < req.n_messages; i++) {
            CHECK(req.messages[i].role != NULL);
        }
        CHECK(req.logprobs >= -1 && req.logprobs <= OPENAI_MAX_LOGPROBS);
        CHECK(!rr->include_logprobs || rr->top_logprobs == -1 || rr->top_logprobs == req.logprobs);
        CHECK(auto_tools || req.tool_choice != OPENAI_TOOL_AUTO);
        rc = responses_check(rr, &err);
        if (rc != 0) {
            check_error(rc, &err);
        }
        answer(rr, &req, req.tool_choice != OPENAI_TOOL_NONE);
        openai_request_deinit(&req);
        responses_request_free(rr);
    }
    return 0;
}
