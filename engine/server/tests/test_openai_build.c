/* Golden tests of the bodies built by engine/server/openai.h: each is parsed back with the strict
 * lib/json parser and its fields checked (names, types, values, nulls), including logprobs,
 * streaming chunks, SSE framing, errors, /v1/models, /tokenize, /detokenize and UTF-8 repair;
 * and every builder against a buffer too small for its body. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/server/openai.h"
#include "lib/json.h"

static struct json_object *parse_back(const struct buf *b)
{
    char err[256];
    struct json_object *o = json_parse(buf_cstr(b), b->len, err, sizeof(err));
    if (!o) {
        fail_msg("built body is not valid JSON (%s): %s", err, buf_cstr(b));
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

static int64_t int_at(struct json_object *o, const char *path)
{
    int64_t v = 0;
    char err[128];
    if (json_get_int64(o, path, &v, err, sizeof(err)) != 0) {
        fail_msg("%s", err);
    }
    return v;
}

static double num_at(struct json_object *o, const char *path)
{
    double v = 0;
    char err[128];
    if (json_get_double(o, path, &v, err, sizeof(err)) != 0) {
        fail_msg("%s", err);
    }
    return v;
}

static void assert_null_at(struct json_object *o, const char *path)
{
    struct json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, path, &v) || strchr(path, '.') || strchr(path, '['));
    assert_null(json_get(o, path));
}

static size_t len_at(struct json_object *o, const char *path)
{
    struct json_object *a = json_get(o, path);
    assert_non_null(a);
    assert_int_equal(json_object_get_type(a), json_type_array);
    return json_object_array_length(a);
}

static const struct openai_top_logprob tops1[] = {{"Hi", 2, -0.1f, 17}, {"Hello", 5, -2.5f, 40}};
static const struct openai_top_logprob tops2[] = {{"!", 1, -0.01f, 3}, {"\xff", 1, -5.0f, 255}};
static const struct openai_token_logprob lps[] = {
    {"Hello", 5, -2.5f, tops1, 2, 40, 0}, /* sampled token not the top one */
    {"!", 1, -0.01f, tops2, 2, 3, 0},
};

static void test_completion_body(void **state)
{
    (void)state;
    struct json_object *kv = json_object_new_object();
    json_object_object_add(kv, "remote_block_ids", json_object_new_array());
    struct openai_meta meta = {
        .id = "cmpl-abc", .model = "tiny", .created = 1700000000, .kv_transfer_params = kv};
    struct openai_choice ch[2];
    memset(ch, 0, sizeof(ch));
    ch[0].index = 0;
    ch[0].text = "Hello!";
    ch[0].text_len = 6;
    ch[0].finish = OPENAI_FINISH_STOP;
    ch[0].stop_str = "\n";
    ch[0].logprobs = lps;
    ch[0].n_logprobs = 2;
    ch[0].text_offset = 10;
    ch[1].index = 1;
    ch[1].text = "x\"y\\z\n\x01";
    ch[1].text_len = 8;
    ch[1].finish = OPENAI_FINISH_LENGTH;
    struct openai_usage usage = {7, 3, 0};
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(openai_build_completion(&meta, ch, 2, &usage, &b), 0);
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "id"), "cmpl-abc");
    assert_string_equal(str_at(o, "object"), "text_completion");
    assert_int_equal(int_at(o, "created"), 1700000000);
    assert_string_equal(str_at(o, "model"), "tiny");
    assert_int_equal(len_at(o, "choices"), 2);
    assert_int_equal(int_at(o, "choices[0].index"), 0);
    assert_string_equal(str_at(o, "choices[0].text"), "Hello!");
    assert_string_equal(str_at(o, "choices[0].finish_reason"), "stop");
    assert_string_equal(str_at(o, "choices[0].stop_reason"), "\n");
    assert_null_at(o, "choices[0].prompt_logprobs");
    assert_int_equal(int_at(o, "choices[0].logprobs.text_offset[0]"), 10);
    assert_int_equal(int_at(o, "choices[0].logprobs.text_offset[1]"), 15);
    assert_float_equal(num_at(o, "choices[0].logprobs.token_logprobs[0]"), -2.5, 1e-6);
    assert_string_equal(str_at(o, "choices[0].logprobs.tokens[1]"), "!");
    /* top_logprobs: dicts keyed by token text */
    struct json_object *t0 = json_get(o, "choices[0].logprobs.top_logprobs[0]");
    assert_int_equal(json_object_object_length(t0), 2);
    assert_float_equal(num_at(t0, "Hi"), -0.1, 1e-6);
    assert_float_equal(num_at(t0, "Hello"), -2.5, 1e-6);
    struct json_object *t1 = json_get(o, "choices[0].logprobs.top_logprobs[1]");
    assert_int_equal(json_object_object_length(t1), 2);
    assert_float_equal(num_at(t1, "\xef\xbf\xbd"), -5.0, 1e-6); /* invalid byte → U+FFFD key */
    assert_string_equal(str_at(o, "choices[1].text"), "x\"y\\z\n\x01");
    assert_string_equal(str_at(o, "choices[1].finish_reason"), "length");
    assert_null_at(o, "choices[1].logprobs");
    assert_null(json_get(o, "choices[1].stop_reason"));
    assert_int_equal(int_at(o, "usage.prompt_tokens"), 7);
    assert_int_equal(int_at(o, "usage.completion_tokens"), 3);
    assert_int_equal(int_at(o, "usage.total_tokens"), 10);
    assert_null(json_get(o, "usage.prompt_tokens_details"));
    assert_int_equal(len_at(o, "kv_transfer_params.remote_block_ids"), 0);
    json_object_put(o);

    /* stop token id as stop_reason, cached tokens, no kv params, abort */
    buf_reset(&b);
    meta.kv_transfer_params = NULL;
    ch[0].stop_str = NULL;
    ch[0].has_stop_token = 1;
    ch[0].stop_token = 128009;
    ch[0].logprobs = NULL;
    ch[0].finish = OPENAI_FINISH_ABORT;
    usage.cached_tokens = 16;
    assert_int_equal(openai_build_completion(&meta, ch, 1, &usage, &b), 0);
    o = parse_back(&b);
    assert_int_equal(int_at(o, "choices[0].stop_reason"), 128009);
    assert_string_equal(str_at(o, "choices[0].finish_reason"), "abort");
    assert_int_equal(int_at(o, "usage.prompt_tokens_details.cached_tokens"), 16);
    assert_null_at(o, "kv_transfer_params");
    json_object_put(o);
    json_object_put(kv);
    buf_free(&b);
}

static void test_chat_body(void **state)
{
    (void)state;
    struct openai_meta meta = {
        .id = "chatcmpl-1", .model = "tiny", .created = 5, .kv_transfer_params = NULL};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.text = "Hello!";
    ch.text_len = 6;
    ch.finish = OPENAI_FINISH_STOP;
    ch.logprobs = lps;
    ch.n_logprobs = 2;
    struct openai_usage usage = {4, 2, 0};
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(openai_build_chat(&meta, &ch, 1, &usage, &b), 0);
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "object"), "chat.completion");
    assert_string_equal(str_at(o, "choices[0].message.role"), "assistant");
    assert_string_equal(str_at(o, "choices[0].message.content"), "Hello!");
    assert_null(json_get(o, "choices[0].message.reasoning_content"));
    assert_int_equal(len_at(o, "choices[0].message.tool_calls"), 0);
    assert_string_equal(str_at(o, "choices[0].finish_reason"), "stop");
    assert_null(json_get(o, "choices[0].stop_reason"));
    assert_int_equal(len_at(o, "choices[0].logprobs.content"), 2);
    assert_string_equal(str_at(o, "choices[0].logprobs.content[0].token"), "Hello");
    assert_float_equal(num_at(o, "choices[0].logprobs.content[0].logprob"), -2.5, 1e-6);
    assert_int_equal(len_at(o, "choices[0].logprobs.content[0].bytes"), 5);
    assert_int_equal(int_at(o, "choices[0].logprobs.content[0].bytes[0]"), 'H');
    assert_int_equal(len_at(o, "choices[0].logprobs.content[1].top_logprobs"), 2);
    assert_string_equal(str_at(o, "choices[0].logprobs.content[1].top_logprobs[1].token"),
                        "\xef\xbf\xbd");
    assert_int_equal(int_at(o, "choices[0].logprobs.content[1].top_logprobs[1].bytes[0]"), 255);
    assert_int_equal(int_at(o, "usage.total_tokens"), 6);
    assert_null_at(o, "prompt_logprobs");
    json_object_put(o);
    buf_free(&b);
}

/* return_token_ids and return_tokens_as_token_ids: vLLM's fields where it writes them, nothing
 * new without them. */
static void test_token_ids(void **state)
{
    (void)state;
    static const int32_t gen[] = {40, 3};
    static const int32_t prompt[] = {5, 6, 7};
    struct openai_meta meta = {.id = "cmpl-t", .model = "tiny", .created = 5};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.text = "Hello!";
    ch.text_len = 6;
    ch.finish = OPENAI_FINISH_STOP;
    ch.stop_str = "\n";
    ch.logprobs = lps;
    ch.n_logprobs = 2;
    ch.text_offset = 10;
    ch.token_ids = gen;
    ch.n_token_ids = 2;
    ch.prompt_token_ids = prompt;
    ch.n_prompt_token_ids = 3;
    struct openai_usage usage = {3, 2, 0};
    struct buf b;
    buf_init(&b, 1 << 20);
    /* flags off: today's bodies, no id fields */
    assert_int_equal(openai_build_completion(&meta, &ch, 1, &usage, &b), 0);
    assert_null(strstr(buf_cstr(&b), "token_ids"));
    assert_non_null(strstr(buf_cstr(&b), "\"tokens\":[\"Hello\",\"!\"]"));
    buf_reset(&b);
    assert_int_equal(openai_build_completion_chunk(&meta, &ch, 1, NULL, &b), 0);
    assert_null(strstr(buf_cstr(&b), "token_ids"));
    buf_reset(&b);
    assert_int_equal(openai_build_chat(&meta, &ch, 1, &usage, &b), 0);
    assert_null(strstr(buf_cstr(&b), "token_ids"));
    assert_null(strstr(buf_cstr(&b), "token_id:"));
    buf_reset(&b);
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 1, NULL, &b), 0);
    assert_null(strstr(buf_cstr(&b), "token_ids"));
    buf_reset(&b);

    /* completions: vLLM's CompletionResponseChoice order; names "token_id:{id}", offsets
     * advancing by the names */
    meta.return_token_ids = 1;
    meta.tokens_as_ids = 1;
    assert_int_equal(openai_build_completion(&meta, &ch, 1, &usage, &b), 0);
    assert_non_null(strstr(buf_cstr(&b), "\"stop_reason\":\"\\n\",\"token_ids\":[40,3],"
                                         "\"prompt_logprobs\":null,\"prompt_token_ids\":[5,6,7]}"));
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "choices[0].logprobs.tokens[0]"), "token_id:40");
    assert_string_equal(str_at(o, "choices[0].logprobs.tokens[1]"), "token_id:3");
    assert_int_equal(int_at(o, "choices[0].logprobs.text_offset[1]"), 10 + 11);
    struct json_object *t0 = json_get(o, "choices[0].logprobs.top_logprobs[0]");
    assert_int_equal(json_object_object_length(t0), 2);
    assert_float_equal(num_at(t0, "token_id:17"), -0.1, 1e-6);
    assert_float_equal(num_at(t0, "token_id:40"), -2.5, 1e-6);
    assert_float_equal(num_at(o, "choices[0].logprobs.top_logprobs[1].token_id:255"), -5.0, 1e-6);
    json_object_put(o);
    buf_reset(&b);
    /* completion chunks: the prompt's ids in a choice's first chunk, null after; delta ids */
    ch.n_token_ids = 1;
    assert_int_equal(openai_build_completion_chunk(&meta, &ch, 1, NULL, &b), 0);
    assert_non_null(strstr(buf_cstr(&b), "\"stop_reason\":\"\\n\",\"prompt_token_ids\":[5,6,7],"
                                         "\"token_ids\":[40]}]}"));
    buf_reset(&b);
    ch.prompt_token_ids = NULL;
    ch.token_ids = NULL;
    ch.n_token_ids = 0;
    ch.logprobs = NULL;
    assert_int_equal(openai_build_completion_chunk(&meta, &ch, 1, NULL, &b), 0);
    assert_non_null(strstr(buf_cstr(&b), "\"prompt_token_ids\":null,\"token_ids\":[]}]}"));
    buf_reset(&b);

    /* chat: token_ids on the choice, prompt_token_ids on the response (vLLM's
     * ChatCompletionResponse); a sampled token's bytes are its text's, a top entry's its name's */
    ch.token_ids = gen;
    ch.n_token_ids = 2;
    ch.logprobs = lps;
    meta.prompt_token_ids = prompt;
    meta.n_prompt_token_ids = 3;
    assert_int_equal(openai_build_chat(&meta, &ch, 1, &usage, &b), 0);
    assert_non_null(strstr(buf_cstr(&b), "\"stop_reason\":\"\\n\",\"token_ids\":[40,3]}]"));
    assert_non_null(strstr(buf_cstr(&b), "\"prompt_logprobs\":null,\"prompt_token_ids\":[5,6,7],"
                                         "\"kv_transfer_params\":null}"));
    o = parse_back(&b);
    assert_string_equal(str_at(o, "choices[0].logprobs.content[0].token"), "token_id:40");
    assert_int_equal(len_at(o, "choices[0].logprobs.content[0].bytes"), 5); /* "Hello" */
    assert_int_equal(int_at(o, "choices[0].logprobs.content[0].bytes[0]"), 'H');
    assert_string_equal(str_at(o, "choices[0].logprobs.content[0].top_logprobs[0].token"),
                        "token_id:17");
    assert_int_equal(len_at(o, "choices[0].logprobs.content[0].top_logprobs[0].bytes"), 11);
    assert_int_equal(int_at(o, "choices[0].logprobs.content[0].top_logprobs[0].bytes[0]"), 't');
    assert_string_equal(str_at(o, "choices[0].logprobs.content[1].token"), "token_id:3");
    json_object_put(o);
    buf_reset(&b);
    /* chat chunks: the role chunk ends with the prompt's ids, the others carry their ids */
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 1, NULL, &b), 0);
    assert_non_null(
        strstr(buf_cstr(&b), "\"stop_reason\":\"\\n\"}],\"prompt_token_ids\":[5,6,7]}"));
    buf_reset(&b);
    ch.n_token_ids = 1;
    ch.text_len = 0;
    ch.finish = OPENAI_FINISH_NONE;
    ch.stop_str = NULL;
    ch.delta_empty = 1;
    ch.logprobs = NULL;
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 0, NULL, &b), 0);
    assert_non_null(strstr(buf_cstr(&b), "\"delta\":{},\"logprobs\":null,\"finish_reason\":null,"
                                         "\"stop_reason\":null,\"token_ids\":[40]}]}"));
    buf_free(&b);
}

/* Tool calls: the message's tool_calls, null content, finish "tool_calls"; a chunk's delta
 * carries only the entries (and content when there is some). */
static void test_tool_calls(void **state)
{
    (void)state;
    static const char calls[] = "[{\"id\":\"chatcmpl-tool-1\",\"type\":\"function\","
                                "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]";
    struct openai_meta meta = {
        .id = "chatcmpl-1", .model = "tiny", .created = 5, .kv_transfer_params = NULL};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.finish = OPENAI_FINISH_TOOL_CALLS;
    ch.content_null = 1;
    ch.tool_calls_json = calls;
    ch.tool_calls_json_len = strlen(calls);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(openai_build_chat(&meta, &ch, 1, NULL, &b), 0);
    struct json_object *o = parse_back(&b);
    assert_null_at(o, "choices[0].message.content");
    assert_int_equal(len_at(o, "choices[0].message.tool_calls"), 1);
    assert_string_equal(str_at(o, "choices[0].message.tool_calls[0].function.name"), "f");
    assert_string_equal(str_at(o, "choices[0].finish_reason"), "tool_calls");
    json_object_put(o);
    buf_reset(&b);
    static const char delta[] = "[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\"}}]";
    ch.tool_calls_json = delta;
    ch.tool_calls_json_len = strlen(delta);
    ch.finish = OPENAI_FINISH_NONE;
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 0, NULL, &b), 0);
    o = parse_back(&b);
    assert_null(json_get(o, "choices[0].delta.content"));
    assert_string_equal(str_at(o, "choices[0].delta.tool_calls[0].function.arguments"), "{\"a");
    json_object_put(o);
    buf_reset(&b);
    ch.text = "so: ";
    ch.text_len = 4;
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 0, NULL, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "choices[0].delta.content"), "so: ");
    assert_int_equal(len_at(o, "choices[0].delta.tool_calls"), 1);
    json_object_put(o);
    buf_free(&b);
}

static void test_stream_chunks(void **state)
{
    (void)state;
    struct openai_meta meta = {
        .id = "chatcmpl-2", .model = "tiny", .created = 5, .kv_transfer_params = NULL};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    struct buf b, sse;
    buf_init(&b, 1 << 20);
    buf_init(&sse, 1 << 20);
    /* first chat chunk: role delta */
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 1, NULL, &b), 0);
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "object"), "chat.completion.chunk");
    assert_string_equal(str_at(o, "choices[0].delta.role"), "assistant");
    assert_string_equal(str_at(o, "choices[0].delta.content"), "");
    assert_null(json_get(o, "choices[0].finish_reason"));
    assert_null(json_get(o, "usage"));
    json_object_put(o);
    assert_int_equal(openai_sse_data(&sse, b.data, b.len), 0);
    /* content delta with continuous usage */
    buf_reset(&b);
    ch.text = "Hel";
    ch.text_len = 3;
    struct openai_usage u = {4, 1, 0};
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 0, &u, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "choices[0].delta.content"), "Hel");
    assert_null(json_get(o, "choices[0].delta.role"));
    assert_int_equal(int_at(o, "usage.completion_tokens"), 1);
    json_object_put(o);
    /* final: empty delta and finish_reason */
    buf_reset(&b);
    ch.text = NULL;
    ch.text_len = 0;
    ch.finish = OPENAI_FINISH_LENGTH;
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 0, NULL, &b), 0);
    o = parse_back(&b);
    assert_int_equal(json_object_object_length(json_get(o, "choices[0].delta")), 0);
    assert_string_equal(str_at(o, "choices[0].finish_reason"), "length");
    json_object_put(o);
    /* usage-only chunk */
    buf_reset(&b);
    u.completion_tokens = 9;
    assert_int_equal(openai_build_usage_chunk(&meta, OPENAI_CHAT, &u, &b), 0);
    o = parse_back(&b);
    assert_int_equal(len_at(o, "choices"), 0);
    assert_int_equal(int_at(o, "usage.total_tokens"), 13);
    assert_string_equal(str_at(o, "object"), "chat.completion.chunk");
    json_object_put(o);
    /* completion chunk */
    buf_reset(&b);
    meta.id = "cmpl-3";
    ch.text = "abc";
    ch.text_len = 3;
    ch.finish = OPENAI_FINISH_NONE;
    ch.index = 2;
    assert_int_equal(openai_build_completion_chunk(&meta, &ch, 1, NULL, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "object"), "text_completion");
    assert_int_equal(int_at(o, "choices[0].index"), 2);
    assert_string_equal(str_at(o, "choices[0].text"), "abc");
    assert_null(json_get(o, "choices[0].logprobs"));
    assert_null(json_get(o, "choices[0].finish_reason"));
    json_object_put(o);
    buf_reset(&b);
    assert_int_equal(openai_build_usage_chunk(&meta, OPENAI_COMPLETION, &u, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "object"), "text_completion");
    json_object_put(o);
    /* in-stream error and the SSE framing */
    buf_reset(&b);
    struct openai_error err = {0};
    openai_error_set(&err, 400, "prompt", "'prompt' is too long: %d tokens", 9000);
    assert_int_equal(openai_error_body(&err, &b), 0);
    assert_int_equal(openai_sse_data(&sse, b.data, b.len), 0);
    assert_int_equal(openai_sse_done(&sse), 0);
    const char *s = buf_cstr(&sse);
    assert_true(strncmp(s, "data: {\"id\":\"chatcmpl-2\"", 24) == 0);
    assert_non_null(strstr(s, "}\n\ndata: {\"error\":{"));
    size_t sl = strlen(s);
    assert_true(sl > 14 && strcmp(s + sl - 14, "data: [DONE]\n\n") == 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "error.message"), "'prompt' is too long: 9000 tokens");
    assert_string_equal(str_at(o, "error.type"), "BadRequestError");
    assert_string_equal(str_at(o, "error.param"), "prompt");
    assert_int_equal(int_at(o, "error.code"), 400);
    json_object_put(o);
    buf_reset(&b);
    openai_error_set(&err, 404, NULL, "The model `x` does not exist.");
    assert_int_equal(openai_error_body(&err, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "error.type"), "NotFoundError");
    assert_null(json_get(o, "error.param"));
    assert_int_equal(int_at(o, "error.code"), 404);
    json_object_put(o);
    buf_free(&b);
    buf_free(&sse);
}

static void test_misc_bodies(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(openai_build_models("tiny", "/models/tiny.gguf", 42, 2048, NULL, NULL, 0, &b),
                     0);
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "object"), "list");
    assert_string_equal(str_at(o, "data[0].id"), "tiny");
    assert_string_equal(str_at(o, "data[0].object"), "model");
    assert_string_equal(str_at(o, "data[0].owned_by"), "vllm");
    assert_string_equal(str_at(o, "data[0].root"), "/models/tiny.gguf");
    assert_null(json_get(o, "data[0].parent"));
    assert_int_equal(int_at(o, "data[0].max_model_len"), 2048);
    assert_int_equal(int_at(o, "data[0].created"), 42);
    assert_int_equal(len_at(o, "data[0].permission"), 1);
    assert_int_equal(len_at(o, "data"), 1);
    json_object_put(o);

    /* LoRA adapters follow the base model, as vLLM lists them */
    buf_reset(&b);
    const char *names[] = {"sql", "chat"}, *roots[] = {"/a/sql.gguf", "/a/chat"};
    assert_int_equal(
        openai_build_models("tiny", "/models/tiny.gguf", 42, 2048, names, roots, 2, &b), 0);
    o = parse_back(&b);
    assert_int_equal(len_at(o, "data"), 3);
    assert_string_equal(str_at(o, "data[1].id"), "sql");
    assert_string_equal(str_at(o, "data[1].root"), "/a/sql.gguf");
    assert_string_equal(str_at(o, "data[1].parent"), "tiny");
    assert_null_at(o, "data[1].max_model_len");
    assert_string_equal(str_at(o, "data[2].id"), "chat");
    assert_int_equal(len_at(o, "data[2].permission"), 1);
    json_object_put(o);

    buf_reset(&b);
    int32_t toks[] = {1, 15043, 3186};
    assert_int_equal(openai_build_tokenize(toks, 3, 4096, NULL, NULL, &b), 0);
    o = parse_back(&b);
    assert_int_equal(int_at(o, "count"), 3);
    assert_int_equal(int_at(o, "max_model_len"), 4096);
    assert_int_equal(int_at(o, "tokens[1]"), 15043);
    assert_null_at(o, "token_strs");
    json_object_put(o);
    buf_reset(&b);
    const char *strs[] = {"<s>", "\xe2\x96\x81Hello", "\xc3"};
    assert_int_equal(openai_build_tokenize(toks, 3, 4096, strs, NULL, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "token_strs[1]"), "\xe2\x96\x81Hello");
    assert_string_equal(str_at(o, "token_strs[2]"), "\xef\xbf\xbd");
    json_object_put(o);

    buf_reset(&b);
    assert_int_equal(openai_build_detokenize("a\xf0\x9f\x98\x80 \xed\xa0\x80z\x00q", 12, &b), 0);
    o = parse_back(&b);
    const char *p = str_at(o, "prompt");
    /* emoji kept; the 3 bytes of a UTF-16 surrogate → 3 × U+FFFD; NUL → \u0000 */
    assert_memory_equal(p, "a\xf0\x9f\x98\x80 \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz\0q", 18);
    json_object_put(o);

    char id[64];
    char id2[64];
    openai_make_id(id, sizeof(id), "cmpl-");
    openai_make_id(id2, sizeof(id2), "cmpl-");
    assert_int_equal(strlen(id), 5 + 32);
    assert_true(strncmp(id, "cmpl-", 5) == 0);
    assert_true(strspn(id + 5, "0123456789abcdef") == 32);
    assert_string_not_equal(id, id2);
    char small[8];
    openai_make_id(small, sizeof(small), "cmpl-");
    assert_string_equal(small, "");

    /* a bounded buffer: -ENOSPC, never an overflow */
    struct buf tiny;
    buf_init(&tiny, 16);
    assert_int_equal(openai_build_detokenize("0123456789abcdefghij", 20, &tiny), -ENOSPC);
    buf_free(&tiny);
    buf_free(&b);
}

static void test_float_format(void **state)
{
    (void)state;
    static const struct openai_top_logprob none[1] = {{"a", 1, 0.0f, 1}};
    struct openai_token_logprob lp[2] = {{"a", 1, -INFINITY, none, 0, 1, 0},
                                         {"b", 1, -3.0f, none, 1, 2, 0}};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.text = "ab";
    ch.text_len = 2;
    ch.logprobs = lp;
    ch.n_logprobs = 2;
    struct openai_meta meta = {.id = "x", .model = "m", .created = 0, .kv_transfer_params = NULL};
    struct buf b;
    buf_init(&b, 1 << 16);
    assert_int_equal(openai_build_chat(&meta, &ch, 1, NULL, &b), 0);
    struct json_object *o = parse_back(&b);
    assert_float_equal(num_at(o, "choices[0].logprobs.content[0].logprob"), -9999.0, 0);
    assert_int_equal(json_object_get_type(json_get(o, "choices[0].logprobs.content[1].logprob")),
                     json_type_double); /* "-3.0", not "-3" */
    assert_null_at(o, "usage");
    json_object_put(o);
    buf_free(&b);
}

/* Each builder at every cap below its body's length: the cap's -ENOSPC comes back, and what the
 * buffer holds is a prefix of the whole body (sticky failure: no later, smaller append slips in
 * after a failed one and leaves a hole). At the exact length the body is whole. */
typedef int (*build_fn)(struct buf *out);

static struct json_object *cap_kv;

static const struct openai_prompt_logprob cap_pos[] = {{40, "x\"", 2, -INFINITY, 4, tops1, 2}};
static const struct openai_prompt_logprobs cap_plp = {cap_pos, 1};

static int cap_completion(struct buf *out)
{
    struct openai_meta meta = {
        .id = "cmpl-cap", .model = "tiny", .created = 7, .kv_transfer_params = cap_kv};
    struct openai_choice ch[2];
    memset(ch, 0, sizeof(ch));
    ch[0].text = "Hello \"world\"\n";
    ch[0].text_len = 14;
    ch[0].finish = OPENAI_FINISH_STOP;
    ch[0].stop_str = "!";
    ch[0].logprobs = lps;
    ch[0].n_logprobs = 2;
    ch[1].index = 1;
    ch[1].finish = OPENAI_FINISH_LENGTH;
    ch[1].prompt_logprobs = &cap_plp;
    struct openai_usage usage = {5, 2, 1};
    return openai_build_completion(&meta, ch, 2, &usage, out);
}

static int cap_chat(struct buf *out)
{
    struct openai_meta meta = {
        .id = "chatcmpl-cap", .model = "tiny", .created = 7, .kv_transfer_params = cap_kv};
    meta.prompt_logprobs = &cap_plp;
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.text = "\xc3\xa9t\xc3";
    ch.text_len = 4;
    ch.finish = OPENAI_FINISH_STOP;
    ch.has_stop_token = 1;
    ch.stop_token = 2;
    ch.logprobs = lps;
    ch.n_logprobs = 2;
    struct openai_usage usage = {5, 2, 0};
    return openai_build_chat(&meta, &ch, 1, &usage, out);
}

static int cap_chat_chunk(struct buf *out)
{
    struct openai_meta meta = {
        .id = "chatcmpl-cap", .model = "tiny", .created = 7, .kv_transfer_params = NULL};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.text = "lo";
    ch.text_len = 2;
    ch.logprobs = lps;
    ch.n_logprobs = 1;
    struct openai_usage usage = {5, 1, 0};
    return openai_build_chat_chunk(&meta, &ch, 1, 0, &usage, out);
}

static int cap_completion_chunk(struct buf *out)
{
    struct openai_meta meta = {
        .id = "cmpl-cap", .model = "tiny", .created = 7, .kv_transfer_params = NULL};
    struct openai_choice ch;
    memset(&ch, 0, sizeof(ch));
    ch.text = "lo";
    ch.text_len = 2;
    ch.logprobs = lps;
    ch.n_logprobs = 2;
    ch.finish = OPENAI_FINISH_ABORT;
    struct openai_usage usage = {5, 1, 3};
    return openai_build_completion_chunk(&meta, &ch, 1, &usage, out);
}

static int cap_usage_chunk(struct buf *out)
{
    struct openai_meta meta = {
        .id = "cmpl-cap", .model = "tiny", .created = 7, .kv_transfer_params = NULL};
    struct openai_usage usage = {5, 1, 3};
    return openai_build_usage_chunk(&meta, OPENAI_CHAT, &usage, out);
}

static int cap_tokenize(struct buf *out)
{
    int32_t toks[] = {1, 15043, 3186};
    const char *strs[] = {"<s>", "\xe2\x96\x81Hello", "\xc3"};
    return openai_build_tokenize(toks, 3, 4096, strs, NULL, out);
}

static int cap_detokenize(struct buf *out)
{
    return openai_build_detokenize("a\"b\x01\xff", 5, out);
}

static int cap_sse(struct buf *out)
{
    return openai_sse_data(out, "{\"a\":1}", 7);
}

static void test_capped_buffer(void **state)
{
    (void)state;
    cap_kv = json_object_new_object();
    json_object_object_add(cap_kv, "remote_block_ids", json_object_new_array());
    static const build_fn builders[] = {cap_completion,       cap_chat,        cap_chat_chunk,
                                        cap_completion_chunk, cap_usage_chunk, cap_tokenize,
                                        cap_detokenize,       cap_sse};
    for (size_t k = 0; k < sizeof(builders) / sizeof(builders[0]); k++) {
        struct buf whole;
        buf_init(&whole, 1 << 20);
        assert_int_equal(builders[k](&whole), 0);
        assert_true(whole.len > 0);
        for (size_t cap = 0; cap <= whole.len; cap++) {
            struct buf b;
            buf_init(&b, cap);
            int rc = builders[k](&b);
            if (cap == whole.len) {
                assert_int_equal(rc, 0);
                assert_int_equal(b.len, whole.len);
            } else {
                assert_int_equal(rc, -ENOSPC);
                assert_int_equal(buf_error(&b), -ENOSPC);
                assert_true(b.len < whole.len);
            }
            if (b.len > 0) {
                assert_memory_equal(b.data, whole.data, b.len);
            }
            buf_free(&b);
        }
        buf_free(&whole);
    }
    /* an SSE frame is all or nothing: a frame that does not fit leaves the buffer as it was */
    struct buf b;
    buf_init(&b, 19); /* room for one frame and most of a second */
    assert_int_equal(openai_sse_data(&b, "{}", 2), 0);
    assert_int_equal(openai_sse_data(&b, "{}", 2), -ENOSPC);
    assert_string_equal(buf_cstr(&b), "data: {}\n\n");
    buf_free(&b);
    json_object_put(cap_kv);
}

/* vLLM's prompt_logprobs (a completion choice's, the chat response's) and an echo's logprobs
 * over the prompt: dict key order, ranks, the prompt's first position null, -inf clamped, offsets
 * in characters. */
static const struct openai_top_logprob ptops1[] = {{"a", 1, -0.5f, 20}, {"b", 1, -1.0f, 21}};
static const struct openai_top_logprob ptops2[] = {
    {"c", 1, -0.1f, 30}, {"b", 1, -0.2f, 21}, {"\xff", 1, -INFINITY, 31}};
static const struct openai_prompt_logprob ppos[] = {
    {11, "\xc3\xa9t\xc3\xa9", 5, -1.5f, 3, ptops1, 2}, /* not among its tops */
    {21, "b", 1, -0.25f, 5, ptops2, 3},                /* its top entry's value and rank */
    {40, "x", 1, -INFINITY, 100, NULL, 0},             /* prompt_logprobs 0: itself only */
};

static void test_prompt_logprobs(void **state)
{
    (void)state;
    const struct openai_prompt_logprobs plp = {ppos, 3};
    const char *want =
        "\"prompt_logprobs\":[null,"
        "{\"11\":{\"logprob\":-1.5,\"rank\":3,\"decoded_token\":\"\xc3\xa9t\xc3\xa9\"},"
        "\"20\":{\"logprob\":-0.5,\"rank\":1,\"decoded_token\":\"a\"},"
        "\"21\":{\"logprob\":-1.0,\"rank\":2,\"decoded_token\":\"b\"}},"
        "{\"21\":{\"logprob\":-0.2,\"rank\":2,\"decoded_token\":\"b\"},"
        "\"30\":{\"logprob\":-0.1,\"rank\":1,\"decoded_token\":\"c\"},"
        "\"31\":{\"logprob\":-9999.0,\"rank\":3,\"decoded_token\":\"\xef\xbf\xbd\"}},"
        "{\"40\":{\"logprob\":-9999.0,\"rank\":100,\"decoded_token\":\"x\"}}]";
    struct openai_meta meta = {.id = "cmpl-p", .model = "tiny", .created = 5};
    struct openai_choice ch[2];
    memset(ch, 0, sizeof(ch));
    ch[0].text = "hi";
    ch[0].text_len = 2;
    ch[0].finish = OPENAI_FINISH_LENGTH;
    ch[0].prompt_logprobs = &plp;
    ch[1] = ch[0];
    ch[1].index = 1;
    const struct openai_prompt_logprobs one = {NULL, 0}; /* a one-token prompt */
    ch[1].prompt_logprobs = &one;
    struct openai_usage usage = {4, 1, 0};
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(openai_build_completion(&meta, ch, 2, &usage, &b), 0);
    const char *body = buf_cstr(&b);
    const char *at = strstr(body, want);
    assert_non_null(at);
    assert_true(at < strstr(body, "{\"index\":1")); /* the first choice's */
    assert_non_null(strstr(body, "\"stop_reason\":null,\"prompt_logprobs\":[null]}]"));
    struct json_object *o = parse_back(&b);
    assert_null_at(o, "choices[0].prompt_logprobs[0]");
    assert_int_equal(len_at(o, "choices[0].prompt_logprobs"), 4);
    assert_int_equal(int_at(o, "choices[0].prompt_logprobs[2].21.rank"), 2);
    json_object_put(o);
    /* with return_token_ids: between token_ids and prompt_token_ids */
    buf_reset(&b);
    meta.return_token_ids = 1;
    assert_int_equal(openai_build_completion(&meta, ch, 1, &usage, &b), 0);
    assert_non_null(strstr(buf_cstr(&b), "\"token_ids\":[],\"prompt_logprobs\":[null,{\"11\":"));
    assert_non_null(strstr(buf_cstr(&b), "}}],\"prompt_token_ids\":[]}]"));
    meta.return_token_ids = 0;
    /* streamed chunks have none (vLLM's CompletionResponseStreamChoice) */
    buf_reset(&b);
    assert_int_equal(openai_build_completion_chunk(&meta, ch, 1, NULL, &b), 0);
    assert_null(strstr(buf_cstr(&b), "prompt_logprobs"));
    /* chat: the response's, after usage */
    buf_reset(&b);
    meta.prompt_logprobs = &plp;
    ch[0].prompt_logprobs = NULL;
    assert_int_equal(openai_build_chat(&meta, ch, 1, &usage, &b), 0);
    at = strstr(buf_cstr(&b), want);
    assert_non_null(at);
    assert_true(at > strstr(buf_cstr(&b), "\"usage\":"));
    assert_non_null(strstr(buf_cstr(&b),
                           "{\"40\":{\"logprob\":-9999.0,\"rank\":100,"
                           "\"decoded_token\":\"x\"}}],\"kv_transfer_params\":null}"));
    json_object_put(parse_back(&b));
    buf_reset(&b);

    /* an echo's completions logprobs: the prompt's first token null, the token first in each
     * dict, a name met again keeping its first place and taking the later value (a Python dict),
     * offsets in characters from 0 */
    static const struct openai_top_logprob gtops[] = {{"c", 1, -0.1f, 30}, {"c", 1, -3.0f, 32}};
    const struct openai_token_logprob echo[] = {
        {"<s>", 3, 0.0f, NULL, 0, 1, 1},
        {"\xc3\xa9t\xc3\xa9", 5, -1.5f, ptops1, 2, 11, 0},
        {"b", 1, -0.25f, ptops2, 3, 21, 0}, /* its top entry gives its value */
        {"c", 1, -0.1f, gtops, 2, 30, 0},   /* generated */
    };
    memset(ch, 0, sizeof(ch));
    ch[0].text = "<s>\xc3\xa9t\xc3\xa9"
                 "bc";
    ch[0].text_len = 10;
    ch[0].logprobs = echo;
    ch[0].n_logprobs = 4;
    meta.prompt_logprobs = NULL;
    assert_int_equal(openai_build_completion(&meta, ch, 1, &usage, &b), 0);
    assert_non_null(
        strstr(buf_cstr(&b),
               "\"logprobs\":{\"text_offset\":[0,3,6,7],\"token_logprobs\":[null,-1.5,-0.2,-0.1],"
               "\"tokens\":[\"<s>\",\"\xc3\xa9t\xc3\xa9\",\"b\",\"c\"],\"top_logprobs\":[null,"
               "{\"\xc3\xa9t\xc3\xa9\":-1.5,\"a\":-0.5,\"b\":-1.0},"
               "{\"b\":-0.2,\"c\":-0.1,\"\xef\xbf\xbd\":-9999.0},{\"c\":-3.0}]}"));
    json_object_put(parse_back(&b));
    buf_reset(&b);
    /* return_tokens_as_token_ids: names, and offsets advancing by them */
    meta.tokens_as_ids = 1;
    assert_int_equal(openai_build_completion(&meta, ch, 1, &usage, &b), 0);
    assert_non_null(strstr(
        buf_cstr(&b),
        "\"logprobs\":{\"text_offset\":[0,10,21,32],\"token_logprobs\":[null,-1.5,-0.2,-0.1],"
        "\"tokens\":[\"token_id:1\",\"token_id:11\",\"token_id:21\",\"token_id:30\"],"
        "\"top_logprobs\":[null,{\"token_id:11\":-1.5,\"token_id:20\":-0.5,\"token_id:21\":-1.0},"
        "{\"token_id:21\":-0.2,\"token_id:30\":-0.1,\"token_id:31\":-9999.0},"
        "{\"token_id:30\":-0.1,\"token_id:32\":-3.0}]}"));
    buf_free(&b);

    /* characters as Python's len() counts them on the written string */
    assert_int_equal(openai_text_chars("", 0), 0);
    assert_int_equal(openai_text_chars("abc", 3), 3);
    assert_int_equal(openai_text_chars("\xc3\xa9t\xc3\xa9", 5), 3);
    assert_int_equal(openai_text_chars("a\xe2\x82\xac"
                                       "b",
                                       5),
                     3);
    assert_int_equal(openai_text_chars("\xff", 1), 1);
    assert_int_equal(openai_text_chars("\xe2\x82", 2), 2); /* two U+FFFD */
    assert_int_equal(openai_text_chars("\xf0\x9f\x98\x80", 4), 1);
}

/* repetition_detection's finish: "repetition" with stop_reason "repetition_detected", in full
 * bodies and chunks of both kinds; return_prompt_text's prompt_text in the full chat body and
 * the role chunks only. */
static void test_repetition_and_prompt_text(void **state)
{
    (void)state;
    struct openai_meta meta = {.id = "cmpl-r", .model = "tiny", .created = 1};
    struct openai_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.text = "abab";
    ch.text_len = 4;
    ch.finish = OPENAI_FINISH_REPETITION;
    ch.stop_token = 7; /* never the stop_reason of a repetition */
    ch.has_stop_token = 1;
    struct openai_usage u = {3, 4, 0};
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int kind = 0; kind < 4; kind++) {
        buf_reset(&b);
        const int rc = kind == 0   ? openai_build_completion(&meta, &ch, 1, &u, &b)
                       : kind == 1 ? openai_build_chat(&meta, &ch, 1, &u, &b)
                       : kind == 2 ? openai_build_completion_chunk(&meta, &ch, 1, NULL, &b)
                                   : openai_build_chat_chunk(&meta, &ch, 1, 0, NULL, &b);
        assert_int_equal(rc, 0);
        struct json_object *o = parse_back(&b);
        assert_string_equal(str_at(o, "choices[0].finish_reason"), "repetition");
        assert_string_equal(str_at(o, "choices[0].stop_reason"), "repetition_detected");
        assert_null(json_get(o, "prompt_text"));
        json_object_put(o);
    }

    meta.prompt_text = "<|user|>hi\n<|assistant|>";
    meta.prompt_text_len = strlen(meta.prompt_text);
    ch.finish = OPENAI_FINISH_STOP;
    ch.has_stop_token = 0;
    buf_reset(&b);
    assert_int_equal(openai_build_chat(&meta, &ch, 1, &u, &b), 0);
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "prompt_text"), "<|user|>hi\n<|assistant|>");
    assert_non_null(strstr(b.data, "\"prompt_logprobs\":null,\"prompt_text\":")); /* vLLM's order */
    json_object_put(o);
    buf_reset(&b);
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 1, NULL, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "prompt_text"), "<|user|>hi\n<|assistant|>");
    assert_string_equal(str_at(o, "choices[0].delta.role"), "assistant");
    json_object_put(o);
    buf_reset(&b);
    assert_int_equal(openai_build_chat_chunk(&meta, &ch, 1, 0, NULL, &b), 0);
    o = parse_back(&b);
    assert_null(json_get(o, "prompt_text"));
    json_object_put(o);
    buf_free(&b);
}

static uint32_t encode1(float f, enum openai_embed_dtype dtype, enum openai_endianness endian)
{
    const struct openai_embed_format fmt = {OPENAI_EMBED_BASE64, dtype, endian};
    uint8_t out[4] = {0};
    openai_embed_encode(&f, 1, &fmt, out);
    uint32_t v = 0;
    for (size_t i = 0; i < openai_embed_dtype_size(dtype); i++) { /* read back little endian */
        v |= (uint32_t)out[i] << (8 * i);
    }
    return v;
}

static float f32_from(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* embed_dtype conversions against known bit patterns (torch's rounding: nearest even; c10's fp8
 * conversions with their NaN rules), byte orders, and the base64 / bytes bodies. */
static void test_embed_encodings(void **state)
{
    (void)state;
    const enum openai_endianness le = OPENAI_ENDIAN_LITTLE;
    static const struct {
        float f;
        uint32_t f16, bf16, e4m3, e5m2;
    } cases[] = {
        {1.0f, 0x3c00, 0x3f80, 0x38, 0x3c},        {-2.0f, 0xc000, 0xc000, 0xc0, 0xc0},
        {0.1f, 0x2e66, 0x3dcd, 0x1d, 0x2e},        {-0.1f, 0xae66, 0xbdcd, 0x9d, 0xae},
        {0.0f, 0x0000, 0x0000, 0x00, 0x00},        {-0.0f, 0x8000, 0x8000, 0x80, 0x80},
        {3.14159274f, 0x4248, 0x4049, 0x45, 0x42}, {448.0f, 0x5f00, 0x43e0, 0x7e, 0x5f},
        {57344.0f, 0x7b00, 0x4760, 0x7f, 0x7b},    {65504.0f, 0x7bff, 0x4780, 0x7f, 0x7c},
        {1.0f / 3.0f, 0x3555, 0x3eab, 0x2b, 0x35},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const float f = cases[i].f;
        if (encode1(f, OPENAI_DTYPE_FLOAT16, le) != cases[i].f16 ||
            encode1(f, OPENAI_DTYPE_BFLOAT16, le) != cases[i].bf16 ||
            encode1(f, OPENAI_DTYPE_FP8_E4M3, le) != cases[i].e4m3 ||
            encode1(f, OPENAI_DTYPE_FP8_E5M2, le) != cases[i].e5m2) {
            fail_msg("%g: f16 %04x bf16 %04x e4m3 %02x e5m2 %02x", (double)f,
                     encode1(f, OPENAI_DTYPE_FLOAT16, le), encode1(f, OPENAI_DTYPE_BFLOAT16, le),
                     encode1(f, OPENAI_DTYPE_FP8_E4M3, le), encode1(f, OPENAI_DTYPE_FP8_E5M2, le));
        }
    }
    /* float16: ties to even, subnormals, overflow, NaN */
    assert_int_equal(encode1(1.0f + 0x1p-11f, OPENAI_DTYPE_FLOAT16, le), 0x3c00);
    assert_int_equal(encode1(1.0f + 0x3p-11f, OPENAI_DTYPE_FLOAT16, le), 0x3c02);
    assert_int_equal(encode1(0x1p-24f, OPENAI_DTYPE_FLOAT16, le), 0x0001);
    assert_int_equal(encode1(0x1p-25f, OPENAI_DTYPE_FLOAT16, le), 0x0000);
    assert_int_equal(encode1(0x1.8p-25f, OPENAI_DTYPE_FLOAT16, le), 0x0001);
    assert_int_equal(encode1(0x1.ff8p-15f, OPENAI_DTYPE_FLOAT16, le), 0x03ff); /* 1023 × 2^-24 */
    assert_int_equal(encode1(0x1.ffcp-15f, OPENAI_DTYPE_FLOAT16, le), 0x0400); /* rounds up */
    assert_int_equal(encode1(65519.0f, OPENAI_DTYPE_FLOAT16, le), 0x7bff);
    assert_int_equal(encode1(65520.0f, OPENAI_DTYPE_FLOAT16, le), 0x7c00);
    assert_int_equal(encode1(-INFINITY, OPENAI_DTYPE_FLOAT16, le), 0xfc00);
    assert_int_equal(encode1(NAN, OPENAI_DTYPE_FLOAT16, le), 0x7e00);
    /* bfloat16: ties to even, overflow to infinity, NaN 0x7fc0 */
    assert_int_equal(encode1(1.0f + 0x1p-8f, OPENAI_DTYPE_BFLOAT16, le), 0x3f80);
    assert_int_equal(encode1(1.0f + 0x3p-8f, OPENAI_DTYPE_BFLOAT16, le), 0x3f82);
    assert_int_equal(encode1(f32_from(0x7f7fffff), OPENAI_DTYPE_BFLOAT16, le), 0x7f80);
    assert_int_equal(encode1(-NAN, OPENAI_DTYPE_BFLOAT16, le), 0x7fc0);
    /* float8_e4m3fn: subnormals (2^-9 units), 464 rounds to 448, 470 and up are NaN */
    assert_int_equal(encode1(0x1p-9f, OPENAI_DTYPE_FP8_E4M3, le), 0x01);
    assert_int_equal(encode1(0x1p-10f, OPENAI_DTYPE_FP8_E4M3, le), 0x00); /* tie: even */
    assert_int_equal(encode1(0x3p-10f, OPENAI_DTYPE_FP8_E4M3, le), 0x02); /* tie: even */
    assert_int_equal(encode1(0x7p-9f, OPENAI_DTYPE_FP8_E4M3, le), 0x07);
    assert_int_equal(encode1(464.0f, OPENAI_DTYPE_FP8_E4M3, le), 0x7e);
    assert_int_equal(encode1(470.0f, OPENAI_DTYPE_FP8_E4M3, le), 0x7f);
    assert_int_equal(encode1(-480.0f, OPENAI_DTYPE_FP8_E4M3, le), 0xff);
    assert_int_equal(encode1(INFINITY, OPENAI_DTYPE_FP8_E4M3, le), 0x7f);
    /* float8_e5m2: subnormals (2^-16 units), 61440 ties up to infinity, NaN */
    assert_int_equal(encode1(0x1p-16f, OPENAI_DTYPE_FP8_E5M2, le), 0x01);
    assert_int_equal(encode1(0x3p-17f, OPENAI_DTYPE_FP8_E5M2, le), 0x02);
    assert_int_equal(encode1(61439.0f, OPENAI_DTYPE_FP8_E5M2, le), 0x7b);
    assert_int_equal(encode1(61440.0f, OPENAI_DTYPE_FP8_E5M2, le), 0x7c);
    assert_int_equal(encode1(-INFINITY, OPENAI_DTYPE_FP8_E5M2, le), 0xfc);
    assert_int_equal(encode1(NAN, OPENAI_DTYPE_FP8_E5M2, le), 0x7f);
    /* float32 as is; byte orders (this host is little endian) */
    assert_int_equal(encode1(1.0f, OPENAI_DTYPE_FLOAT32, le), 0x3f800000);
    assert_int_equal(encode1(1.0f, OPENAI_DTYPE_FLOAT32, OPENAI_ENDIAN_BIG), 0x0000803f);
    assert_int_equal(encode1(1.0f, OPENAI_DTYPE_FLOAT32, OPENAI_ENDIAN_NATIVE), 0x3f800000);
    assert_int_equal(encode1(1.0f, OPENAI_DTYPE_BFLOAT16, OPENAI_ENDIAN_BIG), 0x803f);
    assert_int_equal(encode1(1.0f, OPENAI_DTYPE_FP8_E4M3, OPENAI_ENDIAN_BIG), 0x38);

    /* base64 of float16 [1, -2] big endian: 3c 00 c0 00 */
    const float v[] = {1.0f, -2.0f};
    const float *vecs[] = {v, v};
    struct openai_meta meta = {.id = "embd-1", .model = "m\xc3\xa9", .created = 9};
    struct openai_usage u = {6, 0, 0};
    struct openai_embed_format fmt = {OPENAI_EMBED_BASE64, OPENAI_DTYPE_FLOAT16, OPENAI_ENDIAN_BIG};
    struct buf b, md;
    buf_init(&b, 1 << 20);
    buf_init(&md, 1 << 20);
    assert_int_equal(openai_build_embeddings_fmt(&meta, vecs, 2, 2, &fmt, &u, &b), 0);
    struct json_object *o = parse_back(&b);
    assert_string_equal(str_at(o, "data[0].embedding"), "PADAAA==");
    assert_string_equal(str_at(o, "data[1].embedding"), "PADAAA==");
    assert_int_equal(int_at(o, "usage.prompt_tokens"), 6);
    json_object_put(o);
    /* the former builder: float32 little endian */
    buf_reset(&b);
    assert_int_equal(openai_build_embeddings(&meta, vecs, 1, 2, 1, &u, &b), 0);
    o = parse_back(&b);
    assert_string_equal(str_at(o, "data[0].embedding"), "AACAPwAAAMA=");
    json_object_put(o);
    /* bytes: the vectors back to back, the metadata as Python's json.dumps writes it */
    fmt.encoding = OPENAI_EMBED_BYTES;
    fmt.dtype = OPENAI_DTYPE_BFLOAT16;
    fmt.endian = OPENAI_ENDIAN_LITTLE;
    buf_reset(&b);
    assert_int_equal(openai_build_embeddings_bytes(&meta, vecs, 2, 2, &fmt, &u, &b, &md), 0);
    static const uint8_t want[] = {0x80, 0x3f, 0x00, 0xc0, 0x80, 0x3f, 0x00, 0xc0};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    assert_string_equal(
        md.data, "{\"id\": \"embd-1\", \"created\": 9, \"model\": \"m\\u00e9\", \"data\": "
                 "[{\"index\": 0, \"embed_dtype\": \"bfloat16\", \"endianness\": \"little\", "
                 "\"start\": 0, \"end\": 4, \"shape\": [2]}, {\"index\": 1, \"embed_dtype\": "
                 "\"bfloat16\", \"endianness\": \"little\", \"start\": 4, \"end\": 8, \"shape\": "
                 "[2]}], \"usage\": {\"prompt_tokens\": 6, \"total_tokens\": 6}}");
    /* bytes_only: no metadata */
    fmt.encoding = OPENAI_EMBED_BYTES_ONLY;
    fmt.dtype = OPENAI_DTYPE_FP8_E4M3;
    buf_reset(&b);
    buf_reset(&md);
    assert_int_equal(openai_build_embeddings_bytes(&meta, vecs, 1, 2, &fmt, &u, &b, &md), 0);
    assert_int_equal(b.len, 2);
    assert_int_equal((uint8_t)b.data[0], 0x38);
    assert_int_equal((uint8_t)b.data[1], 0xc0);
    assert_int_equal(md.len, 0);
    buf_free(&b);
    buf_free(&md);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_body), cmocka_unit_test(test_chat_body),
        cmocka_unit_test(test_stream_chunks),   cmocka_unit_test(test_misc_bodies),
        cmocka_unit_test(test_float_format),    cmocka_unit_test(test_capped_buffer),
        cmocka_unit_test(test_tool_calls),      cmocka_unit_test(test_token_ids),
        cmocka_unit_test(test_prompt_logprobs), cmocka_unit_test(test_repetition_and_prompt_text),
        cmocka_unit_test(test_embed_encodings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
