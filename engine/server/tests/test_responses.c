/* Tests of engine/server/responses.h: /v1/responses bodies turned into the chat request they
 * stand for (messages, sampling, structured output, tools) and their errors with the Responses
 * field names; the ResponsesResponse body (vLLM's field order, nulls and defaults, incomplete,
 * logprobs, function calls); the SSE events of a streamed answer (types, sequence numbers, item
 * ids, the final response); and builders against a buffer too small. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/server/responses.h"
#include "lib/json.h"

static struct json_object *parse_json(const char *s, size_t len)
{
    char err[256];
    struct json_object *o = json_parse(s, len, err, sizeof err);
    if (!o) {
        fail_msg("not valid JSON (%s): %.*s", err, (int)len, s);
    }
    return o;
}

static const char *str_at(struct json_object *o, const char *path)
{
    const char *s = NULL;
    char err[128];
    if (json_get_string(o, path, &s, err, sizeof err) != 0) {
        fail_msg("%s", err);
    }
    return s;
}

static int64_t int_at(struct json_object *o, const char *path)
{
    int64_t v = 0;
    char err[128];
    if (json_get_int64(o, path, &v, err, sizeof err) != 0) {
        fail_msg("%s", err);
    }
    return v;
}

static size_t len_at(struct json_object *o, const char *path)
{
    struct json_object *a = json_get(o, path);
    assert_non_null(a);
    assert_int_equal(json_object_get_type(a), json_type_array);
    return json_object_array_length(a);
}

/* Parses body; the request and its chat twin are released by done(). */
struct parsed {
    struct responses_request *rr;
    struct openai_request req;
    struct openai_error err;
    int rc;
};

static void parse(struct parsed *p, const char *body, int auto_tools)
{
    memset(p, 0, sizeof *p);
    p->rc = responses_parse(body, strlen(body), auto_tools, &p->rr, &p->req, &p->err);
    if (p->rc == 0) {
        assert_non_null(p->rr);
        assert_int_equal(p->req.kind, OPENAI_CHAT);
    } else {
        assert_null(p->rr);
    }
}

static void done(struct parsed *p)
{
    if (p->rc == 0) {
        openai_request_deinit(&p->req);
        responses_request_free(p->rr);
    }
}

/* The request must fail with status and param, and its message hold needle. */
static void expect_error(const char *body, int status, const char *param, const char *needle)
{
    struct parsed p;
    parse(&p, body, 0);
    if (p.rc == 0) {
        done(&p);
        fail_msg("accepted: %s", body);
    }
    assert_int_equal(p.err.status, status);
    assert_string_equal(p.err.param, param);
    if (!strstr(p.err.message, needle)) {
        fail_msg("message '%s' lacks '%s'", p.err.message, needle);
    }
}

static void test_string_input(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p,
          "{\"model\":\"tiny\",\"input\":\"Hi there\",\"instructions\":\"Be brief.\","
          "\"max_output_tokens\":7,\"temperature\":0,\"top_p\":0.5,\"top_k\":3,"
          "\"metadata\":{\"k\":\"v\"},\"user\":\"u1\",\"priority\":2,\"cache_salt\":\"salt\","
          "\"skip_special_tokens\":false,\"stream\":true,\"store\":false,\"seed\":5,"
          "\"logit_bias\":{\"5\":1.5},\"unknown_field\":[1,2]}",
          0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.n_messages, 2);
    assert_string_equal(p.req.messages[0].role, "system");
    assert_string_equal(p.req.messages[0].content, "Be brief.");
    assert_string_equal(p.req.messages[1].role, "user");
    assert_string_equal(p.req.messages[1].content, "Hi there");
    assert_string_equal(p.req.model, "tiny");
    assert_true(p.req.max_tokens_set);
    assert_int_equal(p.req.max_tokens, 7);
    assert_true(p.req.sampling.temperature == 0.0f);
    assert_true(p.req.sampling.top_p == 0.5f);
    assert_int_equal(p.req.sampling.top_k, 3);
    assert_int_equal(p.req.priority, 2);
    assert_string_equal(p.req.cache_salt, "salt");
    assert_int_equal(p.req.skip_special_tokens, 0);
    assert_int_equal(p.req.stream, 1);
    assert_int_equal(p.req.n_bias, 1);
    assert_int_equal(p.req.logprobs, -1);
    assert_int_equal(p.req.add_generation_prompt, 1);
    assert_int_equal(p.req.tool_choice, OPENAI_TOOL_NONE);
    assert_string_equal(p.rr->instructions, "Be brief.");
    assert_string_equal(p.rr->user, "u1");
    assert_int_equal(p.rr->store, 0);
    assert_int_equal(p.rr->has_temperature, 1);
    done(&p);
}

static void test_item_input(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p,
          "{\"input\":["
          "{\"role\":\"developer\",\"content\":\"dev\"},"
          "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
          "\"text\":\"a\"},{\"type\":\"input_text\",\"text\":\"b\"}]},"
          "{\"type\":\"message\",\"role\":\"assistant\",\"id\":\"msg_1\",\"status\":\"completed\","
          "\"content\":[{\"type\":\"output_text\",\"text\":\"reply\",\"annotations\":[]}]},"
          "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
          "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"42\"},"
          "{\"role\":\"user\",\"content\":\"next\"}]}",
          0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.n_messages, 5);
    assert_string_equal(p.req.messages[0].role, "developer");
    assert_string_equal(p.req.messages[1].role, "user");
    assert_string_equal(p.req.messages[1].content, "a\nb");
    /* the call joins the assistant message before it (vLLM's merge) */
    assert_string_equal(p.req.messages[2].role, "assistant");
    assert_string_equal(p.req.messages[2].content, "reply");
    assert_non_null(p.req.messages[2].tool_calls);
    assert_int_equal(json_object_array_length(p.req.messages[2].tool_calls), 1);
    assert_string_equal(p.req.messages[3].role, "tool");
    assert_string_equal(p.req.messages[3].content, "42");
    assert_string_equal(p.req.messages[3].tool_call_id, "c1");
    assert_string_equal(p.req.messages[4].content, "next");
    done(&p);

    /* a call with no assistant message before it opens one, whose content a later assistant
     * message fills */
    parse(&p,
          "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
          "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
          "{\"role\":\"assistant\",\"content\":\"then\"}]}",
          0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.n_messages, 2);
    assert_string_equal(p.req.messages[1].content, "then");
    assert_non_null(p.req.messages[1].tool_calls);
    done(&p);

    /* a reasoning item: the assistant turn's reasoning, its message's content after it */
    parse(&p,
          "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"type\":\"reasoning\","
          "\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
          "\"text\":\"think\"}]},{\"role\":\"assistant\",\"content\":\"a\"},"
          "{\"role\":\"user\",\"content\":\"more\"}]}",
          0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.n_messages, 3);
    assert_string_equal(p.req.messages[1].role, "assistant");
    assert_string_equal(p.req.messages[1].reasoning, "think");
    assert_string_equal(p.req.messages[1].content, "a");
    done(&p);

    /* an unfinished assistant message last: continue it (vLLM's partial completion) */
    parse(&p,
          "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"type\":\"message\","
          "\"role\":\"assistant\",\"status\":\"incomplete\",\"content\":\"The answer is\"}]}",
          0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.continue_final_message, 1);
    assert_int_equal(p.req.add_generation_prompt, 0);
    done(&p);
}

static void test_logprobs_and_format(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "{\"input\":\"x\",\"include\":[\"message.output_text.logprobs\"],\"top_logprobs\":3}",
          0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.logprobs, 3);
    assert_int_equal(p.rr->include_logprobs, 1);
    assert_int_equal(p.rr->top_logprobs, 3);
    done(&p);
    /* top_logprobs without include: no logprobs (vLLM) */
    parse(&p, "{\"input\":\"x\",\"top_logprobs\":3}", 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.logprobs, -1);
    done(&p);
    parse(&p,
          "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\","
          "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
          "\"required\":[\"a\"]},\"strict\":true}}}",
          0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.guide.kind, OPENAI_GUIDE_JSON);
    done(&p);
    parse(&p, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}}}", 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.guide.kind, OPENAI_GUIDE_NONE);
    done(&p);
    parse(&p, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"low\"},\"truncation\":\"auto\"}", 0);
    assert_int_equal(p.rc, 0);
    assert_non_null(p.req.chat_template_kwargs);
    assert_int_equal(p.req.truncate_prompt_tokens, -1);
    done(&p);
}

static void test_tools(void **state)
{
    (void)state;
    static const char tools[] =
        "\"tools\":[{\"type\":\"web_search_preview\"},{\"type\":\"function\",\"name\":\"get\","
        "\"description\":\"d\",\"parameters\":{\"type\":\"object\",\"properties\":{\"c\":"
        "{\"type\":\"string\"}},\"required\":[\"c\"]},\"strict\":true}]";
    char body[1024];
    struct parsed p;
    snprintf(body, sizeof body, "{\"input\":\"x\",%s}", tools);
    /* "auto" without a tool-call parser: the output stays text (vLLM without a parser) */
    parse(&p, body, 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.tool_choice, OPENAI_TOOL_NONE);
    assert_non_null(p.req.tools);
    assert_int_equal(json_object_array_length(p.req.tools), 1); /* the function tool only */
    assert_string_equal(str_at(p.req.tools, "[0].function.name"), "get");
    assert_string_equal(str_at(p.req.tools, "[0].type"), "function");
    done(&p);
    parse(&p, body, 1);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.tool_choice, OPENAI_TOOL_AUTO);
    done(&p);
    snprintf(body, sizeof body,
             "{\"input\":\"x\",%s,\"tool_choice\":{\"type\":\"function\",\"name\":\"get\"}}",
             tools);
    parse(&p, body, 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.tool_choice, OPENAI_TOOL_NAMED);
    assert_string_equal(p.req.tool_name, "get");
    done(&p);
    snprintf(body, sizeof body,
             "{\"input\":\"x\",%s,\"tool_choice\":\"required\",\"parallel_tool_calls\":false}",
             tools);
    parse(&p, body, 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.tool_choice, OPENAI_TOOL_REQUIRED);
    assert_int_equal(p.rr->parallel_tool_calls, 0);
    done(&p);
    /* tool_choice without function tools: nothing to call (vLLM does not check it) */
    parse(&p, "{\"input\":\"x\",\"tool_choice\":\"required\"}", 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.req.tool_choice, OPENAI_TOOL_NONE);
    done(&p);
    snprintf(body, sizeof body,
             "{\"input\":\"x\",%s,\"tool_choice\":{\"type\":\"function\",\"name\":\"nope\"}}",
             tools);
    expect_error(body, 400, "tool_choice", "does not match any of the specified `tools`");
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("{\"model\":\"x\"}", 400, "input", "'input' is required");
    expect_error("{\"input\":3}", 400, "input", "a string or an array");
    expect_error("[1]", 400, "", "must be a JSON object");
    expect_error("{\"input\":", 400, "", "invalid JSON body");
    expect_error("{\"input\":\"x\",\"max_output_tokens\":0}", 400, "max_output_tokens",
                 "'max_output_tokens' must be at least 1");
    expect_error("{\"input\":\"x\",\"temperature\":\"hot\"}", 400, "temperature", "number");
    expect_error("{\"input\":\"x\",\"include\":[\"message.output_text.logprobs\"],"
                 "\"top_logprobs\":25}",
                 400, "top_logprobs", "25");
    expect_error("{\"input\":\"x\",\"include\":[\"bogus\"]}", 400, "include", "include[0]");
    expect_error("{\"input\":\"x\",\"prompt\":{\"id\":\"p\"}}", 400, "prompt",
                 "prompt template is not supported");
    expect_error("{\"input\":\"x\",\"background\":true,\"store\":false}", 400, "background",
                 "background can only be used when `store` is true");
    expect_error("{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", 400, "input[0]",
                 "'item_reference' is not supported");
    expect_error("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
                 "\"image_url\":\"u\"}]}]}",
                 400, "input[0].content[0]", "'input_image' is not supported");
    expect_error("{\"input\":[{\"role\":\"bot\",\"content\":\"x\"}]}", 400, "input[0].role",
                 "'user', 'system', 'developer' or 'assistant'");
    expect_error("{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}]}", 400,
                 "input[0].arguments", "is required");
    expect_error("{\"input\":[]}", 400, "input", "'input' cannot be empty");
    expect_error("{\"input\":\"x\",\"service_tier\":\"gold\"}", 400, "service_tier", "'auto'");
    expect_error("{\"input\":\"x\",\"truncation\":\"left\"}", 400, "truncation", "'auto'");
    expect_error("{\"input\":\"x\",\"metadata\":{\"k\":1}}", 400, "metadata", "metadata.k");
    expect_error("{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", 400, "tools[0].name",
                 "is required");
    expect_error("{\"input\":\"x\",\"tool_choice\":\"sometimes\"}", 400, "tool_choice",
                 "'none', 'auto', 'required'");
    expect_error(
        "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\"}}}", 400,
        "text.format.schema", "is required");
    expect_error("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", 400,
                 "text.format.type", "'json_schema'");
    expect_error("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}},"
                 "\"structured_outputs\":{\"regex\":\"a\"}}",
                 400, "", "Cannot specify both structured_outputs and text.format");
    expect_error("{\"input\":\"x\",\"request_id\":\"a b\"}", 400, "request_id", "request_id");
    expect_error("{\"input\":\"x\",\"cache_salt\":\"\"}", 400, "cache_salt", "non-empty");
    /* vLLM: NotImplementedError, 501 */
    struct parsed p;
    parse(&p, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}", 0);
    assert_int_equal(p.rc, -EINVAL);
    assert_int_equal(p.err.status, 501);
    assert_string_equal(p.err.type, "NotImplementedError");
    assert_string_equal(p.err.message, "json_object is not supported");
}

static void test_check(void **state)
{
    (void)state;
    struct parsed p;
    struct openai_error err;
    parse(&p, "{\"input\":\"x\",\"background\":true}", 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(responses_check(p.rr, &err), -EINVAL);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.type, "invalid_request_error");
    assert_string_equal(err.param, "background");
    assert_non_null(strstr(err.message, "VLLM_ENABLE_RESPONSES_API_STORE=1"));
    done(&p);
    parse(&p, "{\"input\":\"x\",\"previous_response_id\":\"resp_123\"}", 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(responses_check(p.rr, &err), -EINVAL);
    assert_int_equal(err.status, 404);
    assert_string_equal(err.type, "invalid_request_error");
    assert_string_equal(err.param, "response_id");
    assert_string_equal(err.message, "Response with id 'resp_123' not found.");
    done(&p);
    parse(&p, "{\"input\":\"x\",\"store\":true}", 0);
    assert_int_equal(responses_check(p.rr, &err), 0);
    done(&p);
}

static void test_fix_error(void **state)
{
    (void)state;
    struct openai_error err;
    openai_error_set(&err, 400, "max_completion_tokens",
                     "'max_completion_tokens' must be at least 1, got 0.");
    responses_fix_error(&err);
    assert_string_equal(err.param, "max_output_tokens");
    assert_string_equal(err.message, "'max_output_tokens' must be at least 1, got 0.");
    openai_error_set(&err, 400, "messages",
                     "This model's maximum context length is 8 tokens. However, your request has "
                     "9 input tokens. Please reduce the length of the input messages.");
    responses_fix_error(&err);
    assert_string_equal(err.param, "input");
    assert_non_null(strstr(err.message, "the input messages."));
    openai_error_set(&err, 400, "response_format.json_schema.schema",
                     "'response_format.json_schema.schema': bad");
    responses_fix_error(&err);
    assert_string_equal(err.param, "text.format.schema");
    assert_string_equal(err.message, "'text.format.schema': bad");
    openai_error_set(&err, 400, "tools[1].function.parameters", "'tools[1].function.parameters'");
    responses_fix_error(&err);
    assert_string_equal(err.param, "tools[1].parameters");
}

static const struct openai_top_logprob tops[] = {{.text = "Hi", .text_len = 2, .logprob = -0.25f},
                                                 {.text = "Yo", .text_len = 2, .logprob = -2.0f}};
static const struct openai_token_logprob lps[] = {
    {.text = "Hi", .text_len = 2, .logprob = -0.25f, .top = tops, .n_top = 2},
    {.text = "!", .text_len = 1, .logprob = -1e9f, .top = NULL, .n_top = 0},
};

static void base_result(struct responses_result *res, const struct openai_usage *u)
{
    memset(res, 0, sizeof *res);
    res->id = "resp_abc";
    res->model = "tiny";
    res->created_at = 1700000000;
    res->finish = OPENAI_FINISH_STOP;
    res->temperature = 0.7f;
    res->top_p = 1.0f;
    res->max_output_tokens = 16;
    res->usage = u;
}

static void test_build(void **state)
{
    (void)state;
    static const char *const order[] = {
        "id",
        "created_at",
        "incomplete_details",
        "instructions",
        "metadata",
        "model",
        "object",
        "output",
        "parallel_tool_calls",
        "temperature",
        "tool_choice",
        "tools",
        "top_p",
        "background",
        "max_output_tokens",
        "max_tool_calls",
        "previous_response_id",
        "prompt",
        "reasoning",
        "service_tier",
        "status",
        "text",
        "top_logprobs",
        "truncation",
        "usage",
        "user",
        "input_messages",
        "output_messages",
    };
    struct parsed p;
    parse(&p,
          "{\"input\":\"x\",\"instructions\":\"I\",\"metadata\":{\"k\":\"v\"},"
          "\"include\":[\"message.output_text.logprobs\"],\"top_logprobs\":2,"
          "\"reasoning\":{\"effort\":\"low\"},\"max_tool_calls\":3}",
          0);
    assert_int_equal(p.rc, 0);
    const struct openai_usage u = {.prompt_tokens = 9, .completion_tokens = 2, .cached_tokens = 4};
    struct responses_result res;
    base_result(&res, &u);
    res.text = "Hi!";
    res.text_len = 3;
    res.logprobs = lps;
    res.n_logprobs = 2;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(responses_build(p.rr, &res, &b), 0);
    struct json_object *o = parse_json(b.data, b.len);
    size_t k = 0;
    json_object_object_foreach(o, key, val)
    {
        (void)val;
        assert_true(k < sizeof order / sizeof order[0]);
        assert_string_equal(key, order[k]);
        k++;
    }
    assert_int_equal(k, sizeof order / sizeof order[0]);
    assert_string_equal(str_at(o, "id"), "resp_abc");
    assert_string_equal(str_at(o, "object"), "response");
    assert_string_equal(str_at(o, "status"), "completed");
    assert_null(json_get(o, "incomplete_details"));
    assert_string_equal(str_at(o, "instructions"), "I");
    assert_string_equal(str_at(o, "metadata.k"), "v");
    assert_string_equal(str_at(o, "tool_choice"), "auto");
    assert_int_equal(len_at(o, "tools"), 0);
    assert_int_equal(int_at(o, "max_output_tokens"), 16);
    assert_int_equal(int_at(o, "max_tool_calls"), 3);
    assert_int_equal(int_at(o, "top_logprobs"), 2);
    assert_string_equal(str_at(o, "service_tier"), "auto");
    assert_string_equal(str_at(o, "truncation"), "disabled");
    assert_string_equal(str_at(o, "reasoning.effort"), "low");
    assert_null(json_get(o, "text"));
    assert_null(json_get(o, "user"));
    assert_null(json_get(o, "previous_response_id"));
    assert_int_equal(len_at(o, "output"), 1);
    assert_string_equal(str_at(o, "output[0].type"), "message");
    assert_string_equal(str_at(o, "output[0].role"), "assistant");
    assert_string_equal(str_at(o, "output[0].status"), "completed");
    assert_int_equal(strncmp(str_at(o, "output[0].id"), "msg_", 4), 0);
    assert_int_equal(strlen(str_at(o, "output[0].id")), 36);
    assert_string_equal(str_at(o, "output[0].content[0].type"), "output_text");
    assert_string_equal(str_at(o, "output[0].content[0].text"), "Hi!");
    assert_int_equal(len_at(o, "output[0].content[0].annotations"), 0);
    assert_int_equal(len_at(o, "output[0].content[0].logprobs"), 2);
    assert_string_equal(str_at(o, "output[0].content[0].logprobs[0].token"), "Hi");
    assert_int_equal(int_at(o, "output[0].content[0].logprobs[0].bytes[0]"), 'H');
    assert_string_equal(str_at(o, "output[0].content[0].logprobs[0].top_logprobs[1].token"), "Yo");
    assert_int_equal(len_at(o, "output[0].content[0].logprobs[1].top_logprobs"), 0);
    assert_int_equal(int_at(o, "usage.input_tokens"), 9);
    assert_int_equal(int_at(o, "usage.input_tokens_details.cached_tokens"), 4);
    assert_int_equal(int_at(o, "usage.output_tokens"), 2);
    assert_int_equal(int_at(o, "usage.output_tokens_details.reasoning_tokens"), 0);
    assert_int_equal(int_at(o, "usage.total_tokens"), 11);
    /* floats as Python writes them; -inf-like logprobs clamped as vLLM does */
    assert_non_null(strstr(b.data, "\"temperature\":0.7,"));
    assert_non_null(strstr(b.data, "\"top_p\":1.0,"));
    assert_non_null(strstr(b.data, "\"logprob\":-9999.0"));
    assert_non_null(strstr(b.data, "\"background\":false"));
    json_object_put(o);
    done(&p);

    /* max_output_tokens reached: incomplete; no text: a message without content (vLLM's
     * fallback); the request's own temperature repeated as written */
    parse(&p,
          "{\"input\":\"x\",\"temperature\":0.123456789012,\"text\":{\"format\":"
          "{\"type\":\"text\"}},\"user\":\"me\",\"parallel_tool_calls\":false}",
          0);
    assert_int_equal(p.rc, 0);
    base_result(&res, &u);
    res.finish = OPENAI_FINISH_LENGTH;
    res.text = "";
    buf_reset(&b);
    assert_int_equal(responses_build(p.rr, &res, &b), 0);
    o = parse_json(b.data, b.len);
    assert_string_equal(str_at(o, "status"), "incomplete");
    assert_string_equal(str_at(o, "incomplete_details.reason"), "max_output_tokens");
    assert_int_equal(len_at(o, "output[0].content"), 0);
    assert_string_equal(str_at(o, "text.format.type"), "text");
    assert_string_equal(str_at(o, "user"), "me");
    assert_null(json_get(o, "top_logprobs"));
    assert_non_null(strstr(b.data, "\"temperature\":0.123456789012,"));
    assert_non_null(strstr(b.data, "\"parallel_tool_calls\":false"));
    json_object_put(o);
    done(&p);

    /* tool calls: function_call items after the message; no message without text */
    parse(&p,
          "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],"
          "\"tool_choice\":\"required\"}",
          0);
    assert_int_equal(p.rc, 0);
    struct tool_call calls[2] = {{.id = "chatcmpl-tool-1",
                                  .name = "f",
                                  .name_len = 1,
                                  .arguments = "{\"a\": 1}",
                                  .arguments_len = 8},
                                 {.id = "chatcmpl-tool-2",
                                  .name = "f",
                                  .name_len = 1,
                                  .arguments = "{}",
                                  .arguments_len = 2}};
    base_result(&res, &u);
    res.tool_mode = 1;
    res.text = "";
    res.calls = calls;
    res.n_calls = 2;
    buf_reset(&b);
    assert_int_equal(responses_build(p.rr, &res, &b), 0);
    o = parse_json(b.data, b.len);
    assert_int_equal(len_at(o, "output"), 2);
    assert_string_equal(str_at(o, "output[0].type"), "function_call");
    assert_string_equal(str_at(o, "output[0].call_id"), "chatcmpl-tool-1");
    assert_string_equal(str_at(o, "output[0].name"), "f");
    assert_string_equal(str_at(o, "output[0].arguments"), "{\"a\": 1}");
    assert_string_equal(str_at(o, "output[0].status"), "completed");
    assert_int_equal(strncmp(str_at(o, "output[1].id"), "fc_", 3), 0);
    assert_string_equal(str_at(o, "tool_choice"), "required");
    assert_string_equal(str_at(o, "tools[0].name"), "f");
    json_object_put(o);
    res.text = "Let me check.";
    res.text_len = strlen(res.text);
    buf_reset(&b);
    assert_int_equal(responses_build(p.rr, &res, &b), 0);
    o = parse_json(b.data, b.len);
    assert_int_equal(len_at(o, "output"), 3);
    assert_string_equal(str_at(o, "output[0].content[0].text"), "Let me check.");
    assert_null(json_get(o, "output[0].content[0].logprobs"));
    json_object_put(o);
    done(&p);
    buf_free(&b);
}

/* The events of an SSE stream: "event: T\ndata: J\n\n" each, T equal to J's type and the
 * sequence numbers 0, 1, ...; returns them (free with json_object_put) and their count. */
static size_t read_events(const struct buf *b, struct json_object **evs, size_t max)
{
    size_t n = 0;
    const char *p = b->data ? b->data : "";
    while (*p) {
        assert_int_equal(strncmp(p, "event: ", 7), 0);
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        char type[80];
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        assert_int_equal(strncmp(nl + 1, "data: ", 6), 0);
        const char *data = nl + 7, *end = strstr(data, "\n\n");
        assert_non_null(end);
        assert_true(n < max);
        evs[n] = parse_json(data, (size_t)(end - data));
        assert_string_equal(str_at(evs[n], "type"), type);
        assert_int_equal(int_at(evs[n], "sequence_number"), (int64_t)n);
        n++;
        p = end + 2;
    }
    return n;
}

static void test_stream(void **state)
{
    (void)state;
    static const char *const types[] = {
        "response.created",           "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done",  "response.content_part.done",
        "response.output_item.done",  "response.completed",
    };
    struct parsed p;
    parse(&p,
          "{\"input\":\"x\",\"stream\":true,\"include\":[\"message.output_text.logprobs\"],"
          "\"top_logprobs\":2}",
          0);
    assert_int_equal(p.rc, 0);
    struct responses_result res;
    base_result(&res, NULL);
    res.finish = OPENAI_FINISH_NONE;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(responses_stream_begin(p.rr, &res, &b), 0);
    assert_int_equal(responses_stream_delta(p.rr, "Hi", 2, &lps[0], 1, NULL, 0, &b), 0);
    assert_int_equal(responses_stream_delta(p.rr, "", 0, NULL, 0, NULL, 0, &b), 0); /* nothing */
    assert_int_equal(responses_stream_delta(p.rr, "!", 1, &lps[1], 1, NULL, 0, &b), 0);
    const struct openai_usage u = {.prompt_tokens = 5, .completion_tokens = 2};
    base_result(&res, &u);
    res.finish = OPENAI_FINISH_LENGTH;
    assert_int_equal(responses_stream_end(p.rr, &res, &b), 0);
    assert_null(strstr(b.data, "[DONE]"));
    struct json_object *evs[32] = {NULL};
    size_t n = read_events(&b, evs, 32);
    assert_int_equal(n, sizeof types / sizeof types[0]);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(str_at(evs[i], "type"), types[i]);
    }
    assert_string_equal(str_at(evs[0], "response.status"), "in_progress");
    assert_int_equal(len_at(evs[0], "response.output"), 0);
    assert_null(json_get(evs[0], "response.usage"));
    const char *item_id = str_at(evs[2], "item.id");
    assert_string_equal(str_at(evs[2], "item.status"), "in_progress");
    assert_int_equal(len_at(evs[2], "item.content"), 0);
    assert_int_equal(int_at(evs[2], "output_index"), 0);
    assert_string_equal(str_at(evs[3], "item_id"), item_id);
    assert_string_equal(str_at(evs[3], "part.text"), "");
    assert_string_equal(str_at(evs[4], "delta"), "Hi");
    assert_string_equal(str_at(evs[4], "item_id"), item_id);
    assert_int_equal(int_at(evs[4], "content_index"), 0);
    assert_string_equal(str_at(evs[4], "logprobs[0].token"), "Hi");
    assert_string_equal(str_at(evs[4], "logprobs[0].top_logprobs[0].token"), "Hi");
    assert_null(json_get(evs[4], "logprobs[0].bytes")); /* the delta form has no bytes */
    assert_string_equal(str_at(evs[5], "delta"), "!");
    assert_string_equal(str_at(evs[6], "text"), "Hi!");
    assert_string_equal(str_at(evs[7], "part.text"), "Hi!");
    assert_string_equal(str_at(evs[8], "item.content[0].text"), "Hi!");
    assert_string_equal(str_at(evs[8], "item.status"), "completed");
    assert_string_equal(str_at(evs[9], "response.status"), "incomplete");
    assert_string_equal(str_at(evs[9], "response.output[0].id"), item_id);
    assert_string_equal(str_at(evs[9], "response.output[0].content[0].text"), "Hi!");
    assert_int_equal(len_at(evs[9], "response.output[0].content[0].logprobs"), 2);
    assert_int_equal(int_at(evs[9], "response.usage.total_tokens"), 7);
    for (size_t i = 0; i < n; i++) {
        json_object_put(evs[i]);
    }
    done(&p);

    /* nothing generated: created, in_progress, completed with vLLM's empty message */
    parse(&p, "{\"input\":\"x\",\"stream\":true}", 0);
    buf_reset(&b);
    base_result(&res, &u);
    assert_int_equal(responses_stream_begin(p.rr, &res, &b), 0);
    assert_int_equal(responses_stream_end(p.rr, &res, &b), 0);
    n = read_events(&b, evs, 32);
    assert_int_equal(n, 3);
    assert_int_equal(len_at(evs[2], "response.output"), 1);
    assert_int_equal(len_at(evs[2], "response.output[0].content"), 0);
    for (size_t i = 0; i < n; i++) {
        json_object_put(evs[i]);
    }
    done(&p);
    /* a failure after the start: an error event */
    parse(&p, "{\"input\":\"x\",\"stream\":true}", 0);
    buf_reset(&b);
    assert_int_equal(responses_stream_error(p.rr, "boom", &b), 0);
    n = read_events(&b, evs, 32);
    assert_int_equal(n, 1);
    json_object_put(evs[0]);
    assert_non_null(strstr(b.data, "event: error\ndata: {\"code\":\"server_error\","
                                   "\"message\":\"boom\",\"param\":null,\"sequence_number\":0"));
    done(&p);
    buf_free(&b);
}

static void test_stream_calls(void **state)
{
    (void)state;
    static const char *const types[] = {
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    };
    struct parsed p;
    parse(&p,
          "{\"input\":\"x\",\"stream\":true,\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}",
          1);
    assert_int_equal(p.rc, 0);
    struct tool_delta_call c[4];
    memset(c, 0, sizeof c);
    for (size_t i = 0; i < 4; i++) {
        buf_init(&c[i].arguments, 1 << 10);
    }
    snprintf(c[0].id, sizeof c[0].id, "chatcmpl-tool-a");
    c[0].name = "f";
    c[0].name_len = 1;
    buf_appends(&c[1].arguments, "{\"x\": ");
    buf_appends(&c[2].arguments, "1}");
    c[3].index = 1; /* a second call, no arguments */
    snprintf(c[3].id, sizeof c[3].id, "chatcmpl-tool-b");
    c[3].name = "g";
    c[3].name_len = 1;
    struct responses_result res;
    base_result(&res, NULL);
    res.tool_mode = 1;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(responses_stream_delta(p.rr, "Sure.", 5, NULL, 0, c, 1, &b), 0);
    assert_int_equal(responses_stream_delta(p.rr, "", 0, NULL, 0, c + 1, 2, &b), 0);
    assert_int_equal(responses_stream_delta(p.rr, "", 0, NULL, 0, c + 3, 1, &b), 0);
    assert_int_equal(responses_stream_end(p.rr, &res, &b), 0);
    struct json_object *evs[32] = {NULL};
    size_t n = read_events(&b, evs, 32);
    assert_int_equal(n, sizeof types / sizeof types[0]);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(str_at(evs[i], "type"), types[i]);
    }
    assert_string_equal(str_at(evs[6], "item.type"), "function_call");
    assert_string_equal(str_at(evs[6], "item.call_id"), "chatcmpl-tool-a");
    assert_string_equal(str_at(evs[6], "item.arguments"), "");
    assert_int_equal(int_at(evs[6], "output_index"), 1);
    assert_string_equal(str_at(evs[9], "arguments"), "{\"x\": 1}");
    assert_string_equal(str_at(evs[9], "name"), "f");
    assert_string_equal(str_at(evs[10], "item.arguments"), "{\"x\": 1}");
    assert_int_equal(int_at(evs[11], "output_index"), 2);
    assert_string_equal(str_at(evs[12], "item.name"), "g");
    assert_int_equal(len_at(evs[13], "response.output"), 3);
    assert_string_equal(str_at(evs[13], "response.output[0].content[0].text"), "Sure.");
    assert_null(json_get(evs[13], "response.output[0].content[0].logprobs"));
    assert_string_equal(str_at(evs[13], "response.output[1].arguments"), "{\"x\": 1}");
    assert_string_equal(str_at(evs[13], "response.output[2].name"), "g");
    for (size_t i = 0; i < n; i++) {
        json_object_put(evs[i]);
    }
    for (size_t i = 0; i < 4; i++) {
        buf_free(&c[i].arguments);
    }
    buf_free(&b);
    done(&p);
}

/* Every builder fails cleanly (the buffer's sticky -ENOSPC) when its output does not fit. */
static void test_capped_buffer(void **state)
{
    (void)state;
    struct parsed p;
    parse(&p, "{\"input\":\"x\",\"metadata\":{\"k\":\"v\"}}", 0);
    assert_int_equal(p.rc, 0);
    struct responses_result res;
    base_result(&res, NULL);
    res.text = "Hello";
    res.text_len = 5;
    for (size_t cap = 0; cap < 1400; cap += 37) {
        struct buf b;
        buf_init(&b, cap);
        int rc = responses_build(p.rr, &res, &b);
        assert_true(rc == 0 || rc == -ENOSPC);
        if (rc == 0) {
            json_object_put(parse_json(b.data, b.len));
        }
        buf_free(&b);
        buf_init(&b, cap);
        rc = responses_stream_begin(p.rr, &res, &b);
        assert_true(rc == 0 || rc == -ENOSPC);
        buf_free(&b);
    }
    done(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_input),
        cmocka_unit_test(test_item_input),
        cmocka_unit_test(test_logprobs_and_format),
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_fix_error),
        cmocka_unit_test(test_build),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_stream_calls),
        cmocka_unit_test(test_capped_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
