/* Unit tests for the request side of engine/server/openai.h: every field's happy path and
 * defaults, and each validation error (status 400, the field in param and in the message). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/grammar/grammar.h"
#include "engine/server/openai.h"

static void parse_ok(enum openai_kind kind, const char *body, struct openai_request *req)
{
    struct openai_error err;
    memset(&err, 0, sizeof(err));
    int rc = kind == OPENAI_CHAT        ? openai_parse_chat(body, strlen(body), req, &err)
             : kind == OPENAI_EMBEDDING ? openai_parse_embedding(body, strlen(body), req, &err)
                                        : openai_parse_completion(body, strlen(body), req, &err);
    if (rc != 0) {
        fail_msg("parse of %s failed: %s (param %s)", body, err.message, err.param);
    }
}

static void test_completion_defaults(void **state)
{
    (void)state;
    struct openai_request r;
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"Hello\"}", &r);
    assert_int_equal(r.kind, OPENAI_COMPLETION);
    assert_null(r.model);
    assert_string_equal(r.prompt_text, "Hello");
    assert_int_equal(r.prompt_text_len, 5);
    assert_null(r.prompt_tokens);
    assert_true(r.max_tokens_set);
    assert_int_equal(r.max_tokens, 16);
    assert_int_equal(r.n, 1);
    assert_float_equal(r.sampling.temperature, 1.0, 0);
    assert_float_equal(r.sampling.top_p, 1.0, 0);
    assert_int_equal(r.sampling.top_k, 0);
    assert_float_equal(r.sampling.min_p, 0.0, 0);
    assert_float_equal(r.sampling.repetition_penalty, 1.0, 0);
    assert_float_equal(r.sampling.presence_penalty, 0.0, 0);
    assert_float_equal(r.sampling.frequency_penalty, 0.0, 0);
    assert_false(r.sampling.has_seed);
    assert_int_equal(r.sampling.logprobs, -1);
    assert_int_equal(r.logprobs, -1);
    assert_int_equal(r.sampling.min_tokens, 0);
    assert_false(r.sampling.ignore_eos);
    assert_false(r.stream);
    assert_false(r.include_usage);
    assert_false(r.echo);
    assert_int_equal(r.n_stop, 0);
    assert_int_equal(r.n_stop_token_ids, 0);
    assert_true(r.skip_special_tokens);
    assert_true(r.spaces_between_special_tokens);
    assert_true(r.add_special_tokens);
    assert_int_equal(r.priority, 0);
    assert_null(r.cache_salt);
    assert_null(r.kv_transfer_params);
    assert_int_equal(r.stream_interval, 1);
    assert_null(r.request_id);
    openai_request_deinit(&r);
    /* explicit null max_tokens: the default, 16 (vLLM's normalize_null_max_tokens) */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":null}", &r);
    assert_true(r.max_tokens_set);
    assert_int_equal(r.max_tokens, 16);
    openai_request_deinit(&r);
}

static void test_completion_all_fields(void **state)
{
    (void)state;
    const char *body =
        "{\"model\":\"m1\",\"prompt\":[1,2,3],\"max_tokens\":50,\"temperature\":0.5,"
        "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"n\":3,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true},"
        "\"stop\":[\"\\n\\n\",\"END\"],\"stop_token_ids\":[7,8],"
        "\"include_stop_str_in_output\":true,\"ignore_eos\":true,\"min_tokens\":4,"
        "\"seed\":-42,\"logprobs\":5,\"echo\":true,\"presence_penalty\":-1.5,"
        "\"frequency_penalty\":2,\"repetition_penalty\":1.2,\"priority\":-3,"
        "\"cache_salt\":\"salt\",\"kv_transfer_params\":{\"do_remote_decode\":true},"
        "\"user\":\"u1\",\"skip_special_tokens\":false,\"spaces_between_special_tokens\":false,"
        "\"add_special_tokens\":false,\"logit_bias\":{\"7\":2.5,\"-1\":-300,\" +09 \":1,\"9\":4},"
        "\"best_of\":1,\"use_beam_search\":false,\"bad_words\":[],\"prompt_logprobs\":null,"
        "\"response_format\":{\"type\":\"text\"},\"suffix\":null,\"unknown_field\":[1]}";
    struct openai_request r;
    parse_ok(OPENAI_COMPLETION, body, &r);
    assert_string_equal(r.model, "m1");
    assert_null(r.prompt_text);
    assert_int_equal(r.n_prompt_tokens, 3);
    assert_int_equal(r.prompt_tokens[2], 3);
    assert_int_equal(r.max_tokens, 50);
    assert_float_equal(r.sampling.temperature, 0.5, 1e-7);
    assert_float_equal(r.sampling.top_p, 0.9, 1e-7);
    assert_int_equal(r.sampling.top_k, 40);
    assert_float_equal(r.sampling.min_p, 0.05, 1e-7);
    assert_int_equal(r.n, 3);
    assert_true(r.stream);
    assert_true(r.include_usage);
    assert_true(r.continuous_usage_stats);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "\n\n");
    assert_string_equal(r.stop[1], "END");
    assert_int_equal(r.n_stop_token_ids, 2);
    assert_int_equal(r.sampling.n_stop_token_ids, 2);
    assert_int_equal(r.sampling.stop_token_ids[1], 8);
    assert_true(r.include_stop_str_in_output);
    assert_true(r.sampling.ignore_eos);
    assert_int_equal(r.sampling.min_tokens, 4);
    assert_true(r.sampling.has_seed);
    assert_true(r.sampling.seed == (uint64_t)-42);
    assert_int_equal(r.logprobs, 5);
    assert_int_equal(r.sampling.logprobs, 5);
    assert_true(r.echo);
    /* echo with logprobs: vLLM asks for the prompt's logprobs (prompt_logprobs null), also when
     * streamed (the stream check reads the field only) */
    assert_true(r.has_prompt_logprobs);
    assert_int_equal(r.prompt_logprobs, 5);
    assert_false(r.echo_only);
    assert_float_equal(r.sampling.presence_penalty, -1.5, 1e-7);
    assert_float_equal(r.sampling.frequency_penalty, 2.0, 1e-7);
    assert_float_equal(r.sampling.repetition_penalty, 1.2, 1e-6);
    assert_int_equal(r.priority, -3);
    assert_string_equal(r.cache_salt, "salt");
    assert_non_null(r.kv_transfer_params);
    assert_true(
        json_object_get_boolean(json_object_object_get(r.kv_transfer_params, "do_remote_decode")));
    assert_string_equal(r.user, "u1");
    assert_false(r.skip_special_tokens);
    assert_false(r.spaces_between_special_tokens);
    assert_false(r.add_special_tokens);
    /* logit_bias: ids parsed as int() reads them, biases clamped, a repeated id keeps the last */
    assert_int_equal(r.sampling.n_bias, 3);
    assert_int_equal(r.sampling.bias_ids[0], 7);
    assert_float_equal(r.sampling.bias_vals[0], 2.5, 0);
    assert_int_equal(r.sampling.bias_ids[1], -1);
    assert_float_equal(r.sampling.bias_vals[1], -100.0, 0);
    assert_int_equal(r.sampling.bias_ids[2], 9);
    assert_float_equal(r.sampling.bias_vals[2], 4.0, 0);
    openai_request_deinit(&r);
}

/* return_token_ids, return_tokens_as_token_ids and bad_words: read, not refused */
static void test_token_id_fields(void **state)
{
    (void)state;
    struct openai_request r;
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\"}", &r);
    assert_false(r.return_token_ids);
    assert_false(r.return_tokens_as_token_ids);
    assert_int_equal(r.n_bad_words, 0);
    assert_int_equal(r.sampling.n_bad_words, 0);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION,
             "{\"prompt\":\"x\",\"return_token_ids\":true,\"return_tokens_as_token_ids\":true,"
             "\"logprobs\":1,\"bad_words\":[\" dog\",\"cat\",\" dog\",\"a b\"]}",
             &r);
    assert_true(r.return_token_ids);
    assert_true(r.return_tokens_as_token_ids);
    assert_int_equal(r.n_bad_words, 3); /* deduplicated in order, as vLLM's dict.fromkeys */
    assert_string_equal(r.bad_words[0], " dog");
    assert_int_equal(r.bad_word_lens[0], 4);
    assert_string_equal(r.bad_words[1], "cat");
    assert_string_equal(r.bad_words[2], "a b");
    assert_int_equal(r.sampling.n_bad_words,
                     0); /* token sequences: the server's prompt_bad_words */
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"return_token_ids\":null,"
             "\"return_tokens_as_token_ids\":false,\"bad_words\":[]}",
             &r);
    assert_false(r.return_token_ids);
    assert_false(r.return_tokens_as_token_ids);
    assert_int_equal(r.n_bad_words, 0);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"return_token_ids\":true,"
             "\"bad_words\":[\"x\"]}",
             &r);
    assert_true(r.return_token_ids);
    assert_int_equal(r.n_bad_words, 1);
    openai_request_deinit(&r);
    /* a long list keeps OPENAI_MAX_BAD_WORDS + 1 words (enough for vLLM's "too many" 400);
     * an empty string anywhere is still the empty-string 400 */
    struct buf big;
    buf_init(&big, 1 << 20);
    buf_appends(&big, "{\"prompt\":\"x\",\"bad_words\":[");
    for (int i = 0; i < 1000; i++) {
        buf_appendf(&big, "%s\"w%d\"", i ? "," : "", i);
    }
    buf_appends(&big, "]}");
    parse_ok(OPENAI_COMPLETION, big.data, &r);
    assert_int_equal(r.n_bad_words, OPENAI_MAX_BAD_WORDS + 1);
    assert_string_equal(r.bad_words[OPENAI_MAX_BAD_WORDS], "w128");
    openai_request_deinit(&r);
    big.len -= 2;
    buf_appends(&big, ",\"\"]}");
    struct openai_error err;
    assert_int_equal(openai_parse_completion(big.data, big.len, &r, &err), -EINVAL);
    assert_non_null(strstr(err.message, "bad_words cannot contain an empty string"));
    buf_free(&big);
    /* vLLM's message for an empty word quotes the list as Python prints it */
    const char *b = "{\"prompt\":\"x\",\"bad_words\":[\"it's\",\"a\\\\b\\n\",\"\",\"it's\"]}";
    assert_int_equal(openai_parse_completion(b, strlen(b), &r, &err), -EINVAL);
    assert_string_equal(err.param, "bad_words");
    assert_string_equal(err.message, "bad_words cannot contain an empty string. Got "
                                     "bad_words=[\"it's\", 'a\\\\b\\n', '']");
}

static void test_completion_prompt_forms(void **state)
{
    (void)state;
    struct openai_request r;
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":[\"only one\"],\"stop\":\"x\"}", &r);
    assert_string_equal(r.prompt_text, "only one");
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "x");
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":[[5,6]],\"logprobs\":0}", &r);
    assert_int_equal(r.n_prompts, 1);
    assert_int_equal(r.n_prompt_tokens, 2);
    assert_int_equal(r.prompt_tokens[0], 5);
    assert_int_equal(r.logprobs, 0);
    openai_request_deinit(&r);
    /* several prompts: strings, or token arrays; the first selected */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":[\"a\",\"\",\"ccc\"],\"n\":2}", &r);
    assert_int_equal(r.n_prompts, 3);
    assert_string_equal(r.prompt_text, "a");
    openai_request_select_prompt(&r, 2);
    assert_string_equal(r.prompt_text, "ccc");
    assert_int_equal(r.prompt_text_len, 3);
    assert_null(r.prompt_tokens);
    openai_request_select_prompt(&r, 1);
    assert_int_equal(r.prompt_text_len, 0);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":[[1,2,3],[4]]}", &r);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.n_prompt_tokens, 3);
    openai_request_select_prompt(&r, 1);
    assert_null(r.prompt_text);
    assert_int_equal(r.n_prompt_tokens, 1);
    assert_int_equal(r.prompt_tokens[0], 4);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":0,\"top_k\":-1,\"seed\":1.0}",
             &r);
    assert_int_equal(r.prompt_text_len, 1);
    assert_float_equal(r.sampling.temperature, 0.0, 0);
    assert_int_equal(r.sampling.top_k, -1);
    assert_true(r.sampling.seed == 1);
    openai_request_deinit(&r);
}

static void test_chat_fields(void **state)
{
    (void)state;
    const char *body =
        "{\"model\":\"m\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"developer\",\"content\":\"dev\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}],\"name\":\"bob\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]},"
        "{\"role\":\"tool\",\"content\":\"42\",\"tool_call_id\":\"call1\"},"
        "{\"role\":\"user\",\"content\":\"\\u00e9t\\u00e9\"}],"
        "\"max_tokens\":10,\"max_completion_tokens\":20,\"logprobs\":true,\"top_logprobs\":3,"
        "\"add_generation_prompt\":false,\"continue_final_message\":true,"
        "\"chat_template\":\"{{ x }}\",\"chat_template_kwargs\":{\"enable_thinking\":false},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":"
        "\"none\","
        "\"parallel_tool_calls\":true,\"echo\":true}";
    struct openai_request r;
    parse_ok(OPENAI_CHAT, body, &r);
    assert_int_equal(r.kind, OPENAI_CHAT);
    assert_int_equal(r.n_messages, 6);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[0].content, "be brief");
    assert_string_equal(r.messages[1].role, "developer");
    assert_string_equal(r.messages[2].content, "a\nb");
    assert_int_equal(r.messages[2].content_len, 3);
    assert_string_equal(r.messages[2].name, "bob");
    assert_null(r.messages[3].content);
    assert_string_equal(r.messages[4].tool_call_id, "call1");
    assert_string_equal(r.messages[5].content, "\xc3\xa9t\xc3\xa9");
    assert_true(r.max_tokens_set);
    assert_int_equal(r.max_tokens, 20); /* max_completion_tokens wins */
    assert_int_equal(r.logprobs, 3);
    assert_int_equal(r.sampling.logprobs, 3);
    assert_false(r.add_generation_prompt);
    assert_true(r.continue_final_message);
    assert_string_equal(r.chat_template, "{{ x }}");
    assert_non_null(r.chat_template_kwargs);
    assert_false(r.add_special_tokens);
    assert_true(r.echo);
    openai_request_deinit(&r);

    parse_ok(OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
    assert_false(r.max_tokens_set); /* chat: context decides */
    assert_int_equal(r.logprobs, -1);
    assert_true(r.add_generation_prompt);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":7,"
             "\"logprobs\":true,\"top_logprobs\":0,\"tool_choice\":\"auto\",\"tools\":"
             "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
             &r);
    assert_int_equal(r.max_tokens, 7);
    assert_int_equal(r.logprobs, 0);
    assert_int_equal(r.tool_choice, OPENAI_TOOL_AUTO);
    assert_int_equal(r.guide.kind, OPENAI_GUIDE_NONE);
    assert_true(r.parallel_tool_calls);
    openai_request_deinit(&r);
    /* tools without tool_choice: "auto"; "required" and a named tool become a JSON schema */
    parse_ok(OPENAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":"
             "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
             &r);
    assert_int_equal(r.tool_choice, OPENAI_TOOL_AUTO);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":"
             "\"required\",\"parallel_tool_calls\":false,\"tools\":[{\"type\":\"function\","
             "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
             "\"properties\":{\"x\":{\"$ref\":\"#/$defs/X\"}},\"$defs\":{\"X\":"
             "{\"type\":\"integer\"}}}}}]}",
             &r);
    assert_int_equal(r.tool_choice, OPENAI_TOOL_REQUIRED);
    assert_int_equal(r.guide.kind, OPENAI_GUIDE_JSON);
    assert_string_equal(r.guide.param, "tool_choice");
    assert_non_null(strstr(r.guide.text, "\"maxItems\":1"));
    assert_non_null(strstr(r.guide.text, "\"$defs\":{\"X\""));
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":"
             "{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"tools\":["
             "{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\","
             "\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\"}}}]}",
             &r);
    assert_int_equal(r.tool_choice, OPENAI_TOOL_NAMED);
    assert_string_equal(r.tool_name, "g");
    assert_string_equal(r.guide.text, "{\"type\":\"object\"}");
    openai_request_deinit(&r);
}

struct bad_case {
    enum openai_kind kind;
    const char *body;
    const char *param; /* expected param; "" for none */
};

#define C   OPENAI_COMPLETION
#define H   OPENAI_CHAT
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const struct bad_case bad_cases[] = {
    {C, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature"},
    {C, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature"},
    {C, "{\"prompt\":\"x\",\"temperature\":true}", "temperature"},
    {C, "{\"prompt\":\"x\",\"top_p\":0}", "top_p"},
    {C, "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p"},
    {C, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k"},
    {C, "{\"prompt\":\"x\",\"top_k\":1.5}", "top_k"},
    {C, "{\"prompt\":\"x\",\"top_k\":1e12}", "top_k"},
    {C, "{\"prompt\":\"x\",\"min_p\":2}", "min_p"},
    {C, "{\"prompt\":\"x\",\"min_p\":-0.1}", "min_p"},
    {C, "{\"prompt\":\"x\",\"presence_penalty\":3}", "presence_penalty"},
    {C, "{\"prompt\":\"x\",\"frequency_penalty\":-2.5}", "frequency_penalty"},
    {C, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty"},
    {C, "{\"prompt\":\"x\",\"repetition_penalty\":\"1\"}", "repetition_penalty"},
    {C, "{\"prompt\":\"x\",\"n\":0}", "n"},
    {C, "{\"prompt\":\"x\",\"n\":\"2\"}", "n"},
    {C, "{\"prompt\":\"x\",\"n\":1000}", "n"},
    {C, "{\"prompt\":\"x\",\"seed\":\"x\"}", "seed"},
    {C, "{\"prompt\":\"x\",\"seed\":1.5}", "seed"},
    {C, "{\"prompt\":\"x\",\"seed\":1e30}", "seed"},
    {C, "{\"prompt\":\"x\",\"min_tokens\":-1}", "min_tokens"},
    {C, "{\"prompt\":\"x\",\"min_tokens\":20,\"max_tokens\":10}", "min_tokens"},
    {C, "{\"prompt\":\"x\",\"min_tokens\":20}", "min_tokens"}, /* default max_tokens 16 */
    {C, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens"},
    {C, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", "max_tokens"},
    {C, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream"},
    {C, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":[]}", "stream_options"},
    {C, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
     "stream_options.include_usage"},
    {C, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":\"\"}}",
     "stream_options.continuous_usage_stats"},
    {C, "{\"prompt\":\"x\",\"stop\":5}", "stop"},
    {C, "{\"prompt\":\"x\",\"stop\":[\"a\",1]}", "stop"},
    {C, "{\"prompt\":\"x\",\"stop_token_ids\":\"x\"}", "stop_token_ids"},
    {C, "{\"prompt\":\"x\",\"stop_token_ids\":[-1]}", "stop_token_ids"},
    {C, "{\"prompt\":\"x\",\"stop_token_ids\":[\"a\"]}", "stop_token_ids"},
    {C, "{\"prompt\":\"x\",\"ignore_eos\":1}", "ignore_eos"},
    {C, "{\"prompt\":\"x\",\"include_stop_str_in_output\":\"x\"}", "include_stop_str_in_output"},
    {C, "{\"prompt\":\"x\",\"echo\":1}", "echo"},
    {C, "{\"prompt\":\"x\",\"skip_special_tokens\":\"no\"}", "skip_special_tokens"},
    {C, "{\"prompt\":\"x\",\"spaces_between_special_tokens\":3}", "spaces_between_special_tokens"},
    {C, "{\"prompt\":\"x\",\"add_special_tokens\":0}", "add_special_tokens"},
    {C, "{\"prompt\":\"x\",\"priority\":1.5}", "priority"},
    {C, "{\"prompt\":\"x\",\"cache_salt\":\"\"}", "cache_salt"},
    {C, "{\"prompt\":\"x\",\"cache_salt\":5}", "cache_salt"},
    {C, "{\"prompt\":\"x\",\"kv_transfer_params\":[]}", "kv_transfer_params"},
    {C, "{\"prompt\":\"x\",\"user\":5}", "user"},
    {C, "{\"prompt\":\"x\",\"model\":5}", "model"},
    {C, "{\"prompt\":\"x\",\"logprobs\":-2}", "logprobs"},
    {C, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs"},
    {C, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs"},
    {C, "{}", "prompt"},
    {C, "{\"prompt\":null}", "prompt"},
    {C, "{\"prompt\":5}", "prompt"},
    {C, "{\"prompt\":[]}", "prompt"},
    {C, "{\"prompt\":[\"a\",[2]]}", "prompt"},
    {C, "{\"prompt\":[[1],\"b\"]}", "prompt"},
    {C, "{\"prompt\":[[1],[]]}", "prompt"},
    {C, "{\"prompt\":[[1],[-2]]}", "prompt"},
    {C, "{\"prompt\":[\"a\",5]}", "prompt"},
    {C, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"n\":128}", "prompt"},
    {C, "{\"prompt\":[\"a\",\"b\"],\"kv_transfer_params\":{}}", "kv_transfer_params"},
    {C, "{\"prompt\":[1,\"a\"]}", "prompt"},
    {C, "{\"prompt\":[-1]}", "prompt"},
    {C, "{\"prompt\":[3000000000]}", "prompt"},
    {C, "{\"prompt\":[[]]}", "prompt"},
    {C, "{\"prompt\":[{}]}", "prompt"},
    {C, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"a1\":2}}", "logit_bias"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"1.5\":2}}", "logit_bias"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"99999999999\":2}}", "logit_bias"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"\":2}}", "logit_bias"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"1\":\"2\"}}", "logit_bias"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":{\"1\":null}}", "logit_bias"},
    {C, "{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias"},
    {C, "{\"prompt\":\"x\",\"best_of\":2}", "best_of"},
    {C, "{\"prompt\":\"x\",\"best_of\":\"2\"}", "best_of"},
    {C, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"xml\"}}", "response_format"},
    {C, "{\"prompt\":\"x\",\"response_format\":\"json\"}", "response_format"},
    {C, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"structural_tag\"}}", "response_format"},
    {C,
     "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
     "\"x\"}}}",
     "response_format"},
    {C, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"},\"guided_regex\":\"a\"}",
     "guided_regex"},
    {C, "{\"prompt\":\"x\",\"prompt_embeds\":\"AAAA\"}", "prompt_embeds"},
    {C, "{\"prompt\":\"x\",\"guided_json\":5}", "guided_json"},
    {C, "{\"prompt\":\"x\",\"guided_json\":\"{not json\"}", "guided_json"},
    {C, "{\"prompt\":\"x\",\"guided_whitespace_pattern\":\" \"}", "guided_whitespace_pattern"},
    {C, "{\"prompt\":\"x\",\"guided_decoding_backend\":5}", "guided_decoding_backend"},
    {C, "{\"prompt\":\"x\",\"prompt_logprobs\":1,\"stream\":true}", "prompt_logprobs"},
    {C, "{\"prompt\":\"x\",\"prompt_logprobs\":-2}", "prompt_logprobs"},
    {C, "{\"prompt\":\"x\",\"prompt_logprobs\":\"2\"}", "prompt_logprobs"},
    {C, "{\"prompt\":\"x\",\"prompt_logprobs\":1.5}", "prompt_logprobs"},
    {C, "{\"prompt\":\"x\",\"max_tokens\":0,\"echo\":false}", "max_tokens"},
    {C, "{\"prompt\":\"x\",\"max_tokens\":-1,\"echo\":true}", "max_tokens"},
    {C, "{\"prompt\":\"x\",\"allowed_token_ids\":[]}", "allowed_token_ids"},
    {C, "{\"prompt\":\"x\",\"allowed_token_ids\":[-1]}", "allowed_token_ids"},
    {C, "{\"prompt\":\"x\",\"allowed_token_ids\":\"1\"}", "allowed_token_ids"},
    {C, "{\"prompt\":\"x\",\"truncation_side\":\"middle\"}", "truncation_side"},
    {C, "{\"prompt\":\"x\",\"guided_regex\":5}", "guided_regex"},
    {C, "{\"prompt\":\"x\",\"guided_grammar\":\"\"}", "guided_grammar"},
    {C, "{\"prompt\":\"x\",\"use_beam_search\":true}", "use_beam_search"},
    {H, "{" MSG ",\"guided_choice\":[]}", "guided_choice"},
    {H, "{" MSG ",\"guided_choice\":[\"a\",1]}", "guided_choice"},
    {H, "{" MSG ",\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"b\"]}}",
     "structured_outputs.choice"},
    {H, "{" MSG ",\"structured_outputs\":{}}", "structured_outputs"},
    {H, "{" MSG ",\"structured_outputs\":[]}", "structured_outputs"},
    {H, "{" MSG ",\"structured_outputs\":{\"foo\":1}}", "structured_outputs.foo"},
    {H, "{" MSG ",\"structured_outputs\":{\"json_object\":1}}", "structured_outputs.json_object"},
    {H, "{" MSG ",\"structured_outputs\":{\"structural_tag\":\"x\"}}",
     "structured_outputs.structural_tag"},
    {H, "{" MSG ",\"structured_outputs\":{\"regex\":\"a\",\"whitespace_pattern\":\" \"}}",
     "structured_outputs.whitespace_pattern"},
    {H, "{" MSG ",\"structured_outputs\":{\"json\":\"{}\"},\"guided_json\":{}}", "guided_json"},
    {H, "{" MSG ",\"truncate_prompt_tokens\":-2}", "truncate_prompt_tokens"},
    {H, "{" MSG ",\"truncate_prompt_tokens\":\"5\"}", "truncate_prompt_tokens"},
    {H, "{" MSG ",\"bad_words\":\"x\"}", "bad_words"},
    {H, "{" MSG ",\"bad_words\":null}", "bad_words"}, /* vLLM's list[str]: no None */
    {H, "{" MSG ",\"bad_words\":{}}", "bad_words"},
    {H, "{" MSG ",\"bad_words\":[\"a\",1]}", "bad_words"},
    {C, "{\"prompt\":\"x\",\"bad_words\":[\"a\",\"\"]}", "bad_words"},
    {C, "{\"prompt\":\"x\",\"bad_words\":5}", "bad_words"},
    {H, "{" MSG ",\"return_token_ids\":\"yes\"}", "return_token_ids"},
    {C, "{\"prompt\":\"x\",\"return_token_ids\":1}", "return_token_ids"},
    {H, "{" MSG ",\"return_tokens_as_token_ids\":1}", "return_tokens_as_token_ids"},
    {C, "{\"prompt\":\"x\",\"return_tokens_as_token_ids\":[]}", "return_tokens_as_token_ids"},
    {C, "{\"prompt\":\"x\",\"logprob_token_ids\":[1]}", "logprob_token_ids"},
    {H, "{" MSG ",\"prompt_logprobs\":-1,\"stream\":true}", "prompt_logprobs"},
    {H, "{" MSG ",\"prompt_logprobs\":true}", "prompt_logprobs"},
    {H, "{" MSG ",\"max_tokens\":0,\"echo\":true}", "max_tokens"},
    {C, "[1,2]", ""},
    {C, "null", ""},
    {C, "{\"prompt\":\"x\"", ""},
    {C, "{\"prompt\":\"x\",\"prompt\":\"y\"}", ""},
    {C, "", ""},
    {H, "{}", "messages"},
    {H, "{\"messages\":{}}", "messages"},
    {H, "{\"messages\":[]}", "messages"},
    {H, "{\"messages\":[5]}", "messages[0]"},
    {H, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role"},
    {H, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\",\"content\":5}]}",
     "messages[1].content"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content"},
    {H, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
     "messages[0].content[0].type"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "messages[0].content[0].text"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[5]}]}", "messages[0].content[0]"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":5}]}", "messages[0].name"},
    {H, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":5}]}",
     "messages[0].tool_call_id"},
    {H, "{" MSG ",\"logprobs\":1}", "logprobs"},
    {H, "{" MSG ",\"top_logprobs\":5}", "top_logprobs"},
    {H, "{" MSG ",\"logprobs\":true,\"top_logprobs\":-2}", "top_logprobs"},
    {H, "{" MSG ",\"top_logprobs\":-1}", "top_logprobs"},
    {H, "{" MSG ",\"max_completion_tokens\":0}", "max_completion_tokens"},
    {H, "{" MSG ",\"max_tokens\":-5}", "max_tokens"},
    {H, "{" MSG ",\"max_completion_tokens\":3,\"min_tokens\":4}", "min_tokens"},
    {H, "{" MSG ",\"tools\":[{\"type\":\"function\"}]}", "tools[0]"},
    {H, "{" MSG ",\"tools\":[]}", "tools"},
    {H,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":\"sometimes\"}",
     "tool_choice"},
    {H,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
     "tool_choice"},
    {H,
     "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":\"required\",\"guided_regex\":\"a\"}",
     "tool_choice"},
    {H, "{" MSG ",\"parallel_tool_calls\":1}", "parallel_tool_calls"},
    {H, "{" MSG ",\"tools\":\"x\"}", "tools"},
    {H, "{" MSG ",\"tool_choice\":\"required\"}", "tool_choice"},
    {H, "{" MSG ",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice.function"},
    {H, "{" MSG ",\"continue_final_message\":true}", "continue_final_message"},
    {H, "{" MSG ",\"add_generation_prompt\":\"x\"}", "add_generation_prompt"},
    {H, "{" MSG ",\"chat_template\":5}", "chat_template"},
    {H, "{" MSG ",\"chat_template_kwargs\":5}", "chat_template_kwargs"},
    {H, "{" MSG ",\"temperature\":-0.5}", "temperature"},
    {H, "{" MSG ",\"response_format\":{\"type\":\"json_schema\"}}", "response_format"},
};

/* The structured-output forms land in req.guide, and each turns into a grammar that compiles and
 * holds what it should. */
static void expect_guide(enum openai_kind kind, const char *body, enum openai_guide_kind gk,
                         const char *param, const char *yes, const char *no)
{
    struct openai_request r;
    struct openai_error err;
    memset(&err, 0, sizeof err);
    int rc = kind == OPENAI_CHAT ? openai_parse_chat(body, strlen(body), &r, &err)
                                 : openai_parse_completion(body, strlen(body), &r, &err);
    if (rc != 0) {
        fail_msg("%s: %s", body, err.message);
    }
    assert_int_equal(r.guide.kind, gk);
    assert_string_equal(r.guide.param, param);
    struct buf gbnf;
    buf_init(&gbnf, 1 << 20);
    assert_int_equal(openai_guide_gbnf(&r.guide, &gbnf, &err), 0);
    grammar *g = NULL;
    char msg[256];
    if (grammar_compile(gbnf.data, gbnf.len, NULL, &g, msg, sizeof msg) != 0) {
        fail_msg("%s: %s\n%s", body, msg, gbnf.data);
    }
    assert_int_equal(grammar_match(g, yes, strlen(yes)), 1);
    assert_int_equal(grammar_match(g, no, strlen(no)), 0);
    grammar_free(g);
    buf_free(&gbnf);
    openai_request_deinit(&r);
}

static void test_structured_forms(void **state)
{
    (void)state;
    expect_guide(C, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}",
                 OPENAI_GUIDE_JSON_OBJECT, "response_format", "{\"a\": [1, {}]}", "[1]");
    expect_guide(H,
                 "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                 "{\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\","
                 "\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}}",
                 OPENAI_GUIDE_JSON, "response_format", "{\"a\": 5}", "{\"a\": \"5\"}");
    expect_guide(H,
                 "{" MSG ",\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"boolean\\\"}\"}}",
                 OPENAI_GUIDE_JSON, "structured_outputs.json", "true", "1");
    expect_guide(C, "{\"prompt\":\"x\",\"guided_json\":{\"enum\":[\"a\",2]}}", OPENAI_GUIDE_JSON,
                 "guided_json", "2", "\"b\"");
    expect_guide(C, "{\"prompt\":\"x\",\"structured_outputs\":{\"regex\":\"[a-c]+\\\\d\"}}",
                 OPENAI_GUIDE_REGEX, "structured_outputs.regex", "abca7", "abd7");
    expect_guide(C, "{\"prompt\":\"x\",\"guided_regex\":\"(yes|no)\"}", OPENAI_GUIDE_REGEX,
                 "guided_regex", "no", "yesno");
    expect_guide(H, "{" MSG ",\"guided_choice\":[\"a \\\"b\\\"\",\"c\\\\d\",\"\\u00e9\"]}",
                 OPENAI_GUIDE_CHOICE, "guided_choice", "a \"b\"", "c");
    expect_guide(H, "{" MSG ",\"structured_outputs\":{\"choice\":[\"x\",\"\\u00e9\"]}}",
                 OPENAI_GUIDE_CHOICE, "structured_outputs.choice", "\xC3\xA9", "y");
    expect_guide(C,
                 "{\"prompt\":\"x\",\"structured_outputs\":{\"grammar\":\"root ::= [0-9]+ "
                 "\\\"!\\\"\",\"disable_fallback\":true}}",
                 OPENAI_GUIDE_GRAMMAR, "structured_outputs.grammar", "42!", "42");
    expect_guide(C,
                 "{\"prompt\":\"x\",\"guided_grammar\":\"root ::= "
                 "\\\"a\\\"\",\"guided_decoding_backend\":\"xgrammar\"}",
                 OPENAI_GUIDE_GRAMMAR, "guided_grammar", "a", "b");
    /* disable_any_whitespace: compact JSON only */
    expect_guide(H,
                 "{" MSG ",\"structured_outputs\":{\"json\":{\"type\":\"array\",\"items\":"
                 "{\"type\":\"integer\"}},\"disable_any_whitespace\":true}}",
                 OPENAI_GUIDE_JSON, "structured_outputs.json", "[1,2]", "[1, 2]");
    expect_guide(H,
                 "{" MSG ",\"structured_outputs\":{\"json_object\":true,"
                 "\"disable_any_whitespace\":true}}",
                 OPENAI_GUIDE_JSON_OBJECT, "structured_outputs.json_object", "{\"a\":1}",
                 "{\"a\": 1}");
    /* text and nulls ask for nothing */
    struct openai_request r;
    struct openai_error err;
    const char *plain = "{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\"},"
                        "\"guided_json\":null,\"structured_outputs\":null}";
    assert_int_equal(openai_parse_completion(plain, strlen(plain), &r, &err), 0);
    assert_int_equal(r.guide.kind, OPENAI_GUIDE_NONE);
    openai_request_deinit(&r);
    /* a schema that cannot be honoured is a 400 naming the field and the keyword */
    const char *bad = "{\"prompt\":\"x\",\"guided_json\":{\"type\":\"integer\","
                      "\"multipleOf\":3}}";
    assert_int_equal(openai_parse_completion(bad, strlen(bad), &r, &err), 0);
    struct buf gbnf;
    buf_init(&gbnf, 1 << 20);
    assert_int_equal(openai_guide_gbnf(&r.guide, &gbnf, &err), -EINVAL);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.param, "guided_json");
    assert_non_null(strstr(err.message, "multipleOf"));
    buf_free(&gbnf);
    openai_request_deinit(&r);
}

/* The 400 of body (parsed as kind): param and the message, word for word. */
static void expect_bad(enum openai_kind kind, const char *body, const char *param,
                       const char *message)
{
    struct openai_request r;
    struct openai_error err;
    memset(&err, 0, sizeof(err));
    int rc = kind == OPENAI_CHAT        ? openai_parse_chat(body, strlen(body), &r, &err)
             : kind == OPENAI_EMBEDDING ? openai_parse_embedding(body, strlen(body), &r, &err)
                                        : openai_parse_completion(body, strlen(body), &r, &err);
    if (rc != -EINVAL || err.status != 400 || strcmp(err.param, param) != 0 ||
        strcmp(err.message, message) != 0) {
        fail_msg("%s: rc %d status %d param '%s' message '%s'", body, rc, err.status, err.param,
                 err.message);
    }
}

/* prompt_logprobs: vLLM's check_logprobs messages, its derivation from echo (to_sampling_params),
 * the max_logprobs check against the vocabulary, and echo without generation */
static void test_prompt_logprobs(void **state)
{
    (void)state;
    struct openai_request r;
    struct openai_error err;
    memset(&err, 0, sizeof(err));
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\"}", &r);
    assert_false(r.has_prompt_logprobs);
    assert_int_equal(openai_resolve_prompt_logprobs(&r, 512, &err), 0);
    assert_false(r.has_prompt_logprobs);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":3}", &r);
    assert_true(r.has_prompt_logprobs);
    assert_int_equal(r.prompt_logprobs, 3);
    assert_int_equal(r.logprobs, -1);
    openai_request_deinit(&r);
    /* 0 (the prompt tokens' own entries) and 20 are fine, also 0 when streamed */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":0,\"stream\":true}", &r);
    assert_true(r.has_prompt_logprobs);
    assert_int_equal(r.prompt_logprobs, 0);
    assert_int_equal(openai_resolve_prompt_logprobs(&r, 512, &err), 0);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"prompt_logprobs\":20.0}", &r);
    assert_true(r.has_prompt_logprobs);
    assert_int_equal(r.prompt_logprobs, 20);
    assert_int_equal(openai_resolve_prompt_logprobs(&r, 512, &err), 0);
    assert_int_equal(r.prompt_logprobs, 20);
    openai_request_deinit(&r);
    /* above max_logprobs, and -1 (the vocabulary): vLLM's processor, once the vocabulary is
     * known; a vocabulary of at most 20 makes -1 fine */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":21}", &r);
    assert_int_equal(openai_resolve_prompt_logprobs(&r, 512, &err), -EINVAL);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.param, "prompt_logprobs");
    assert_string_equal(err.message,
                        "Requested prompt logprobs of 21, which is greater than max allowed: 20");
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"prompt_logprobs\":-1}", &r);
    assert_int_equal(r.prompt_logprobs, -1);
    assert_int_equal(openai_resolve_prompt_logprobs(&r, 151936, &err), -EINVAL);
    assert_string_equal(err.param, "prompt_logprobs");
    assert_string_equal(
        err.message, "Requested prompt logprobs of 151936, which is greater than max allowed: 20");
    assert_int_equal(openai_resolve_prompt_logprobs(&r, 16, &err), 0);
    assert_int_equal(r.prompt_logprobs, 16);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":4000000000}", &r);
    assert_int_equal(openai_resolve_prompt_logprobs(&r, 512, &err), -EINVAL);
    assert_string_equal(
        err.message,
        "Requested prompt logprobs of 4000000000, which is greater than max allowed: 20");
    openai_request_deinit(&r);
    /* check_logprobs, word for word */
    const char *stream = "`prompt_logprobs` are not available when `stream=True`.";
    const char *negative = "`prompt_logprobs` must be a positive value or -1.";
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stream\":true,\"prompt_logprobs\":2}",
               "prompt_logprobs", stream);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stream\":true,\"prompt_logprobs\":-1}",
               "prompt_logprobs", stream);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"stream\":true,\"prompt_logprobs\":1}", "prompt_logprobs",
               stream);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":-2}", "prompt_logprobs",
               negative);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"stream\":true,\"prompt_logprobs\":-5}", "prompt_logprobs",
               negative);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":\"1\"}", "prompt_logprobs",
               "`prompt_logprobs` must be an integer.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"prompt_logprobs\":[1]}", "prompt_logprobs",
               "`prompt_logprobs` must be an integer.");

    /* completions echo: prompt_logprobs = logprobs when unset (none without logprobs) */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", &r);
    assert_false(r.has_prompt_logprobs);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true,\"logprobs\":0}", &r);
    assert_true(r.has_prompt_logprobs);
    assert_int_equal(r.prompt_logprobs, 0);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION,
             "{\"prompt\":\"x\",\"echo\":true,\"logprobs\":2,\"prompt_logprobs\":7}", &r);
    assert_int_equal(r.prompt_logprobs, 7); /* the field wins */
    assert_int_equal(r.logprobs, 2);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":2}", &r);
    assert_false(r.has_prompt_logprobs);
    openai_request_deinit(&r);
    /* chat echo: prompt_logprobs = top_logprobs, whose default is 0 (logprobs or not) */
    parse_ok(OPENAI_CHAT, "{" MSG ",\"echo\":true}", &r);
    assert_true(r.has_prompt_logprobs);
    assert_int_equal(r.prompt_logprobs, 0);
    assert_int_equal(r.logprobs, -1);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"echo\":true,\"logprobs\":true,\"top_logprobs\":3}", &r);
    assert_int_equal(r.prompt_logprobs, 3);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"echo\":true,\"top_logprobs\":null}", &r);
    assert_false(r.has_prompt_logprobs);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"top_logprobs\":0}", &r);
    assert_false(r.has_prompt_logprobs);
    openai_request_deinit(&r);

    /* echo without generation: max_tokens 0 with echo is one token generated, not returned */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true,\"max_tokens\":0}", &r);
    assert_true(r.echo_only);
    assert_true(r.max_tokens_set);
    assert_int_equal(r.max_tokens, 1);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true,\"max_tokens\":1}", &r);
    assert_false(r.echo_only);
    openai_request_deinit(&r);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens",
               "'max_tokens' must be at least 1, got 0.");
}

/* The fields and checks aligned with vLLM's protocol.py / sampling_params.py: repetition_detection,
 * seed -1, thinking_token_budget, request_id, stream_interval, stream_options truthiness, cache
 * salts, empty stops and prompts, temperature's range, logprobs -1 and the resolve step. */
static void test_vllm_sampling_fields(void **state)
{
    (void)state;
    struct openai_request r;
    struct openai_error err;
    memset(&err, 0, sizeof err);
    parse_ok(OPENAI_COMPLETION,
             "{\"prompt\":\"x\",\"repetition_detection\":{\"max_pattern_size\":4,"
             "\"min_pattern_size\":2,\"min_count\":3},\"seed\":-1,\"stream_interval\":3,"
             "\"request_id\":\"req-1:A_b.c\",\"thinking_token_budget\":-1}",
             &r);
    assert_int_equal(r.sampling.rep_max_pattern, 4);
    assert_int_equal(r.sampling.rep_min_pattern, 2);
    assert_int_equal(r.sampling.rep_min_count, 3);
    assert_false(r.sampling.has_seed); /* vLLM: seed -1 is None */
    assert_int_equal(r.stream_interval, 3);
    assert_string_equal(r.request_id, "req-1:A_b.c");
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT,
             "{" MSG ",\"seed\":-2,\"thinking_token_budget\":null,\"repetition_detection\":null}",
             &r);
    assert_int_equal(r.sampling.rep_max_pattern, 0);
    assert_true(r.sampling.has_seed);
    assert_true(r.sampling.seed == (uint64_t)-2);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"repetition_detection\":{\"max_pattern_size\":2}}", &r);
    assert_int_equal(r.sampling.rep_max_pattern, 2); /* min_count 0: the engine's 400 */
    assert_int_equal(r.sampling.rep_min_count, 0);
    openai_request_deinit(&r);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"repetition_detection\":[4]}",
               "repetition_detection",
               "'repetition_detection': input should be an object, got array");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"repetition_detection\":{\"min_count\":\"3\"}}",
               "repetition_detection.min_count",
               "'repetition_detection.min_count': input should be a valid integer, got string");

    /* thinking_token_budget: vLLM's type check, then its 400 without a reasoning parser */
    const char *budget = "`thinking_token_budget` must be a non-negative integer or -1 for "
                         "unlimited.";
    const char *no_parser = "thinking_token_budget is set but reasoning_config is not configured. "
                            "Please set --reasoning-parser and/or --reasoning-config to use "
                            "thinking_token_budget.";
    expect_bad(OPENAI_CHAT, "{" MSG ",\"thinking_token_budget\":100}", "thinking_token_budget",
               no_parser);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"thinking_token_budget\":0}",
               "thinking_token_budget", no_parser);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"thinking_token_budget\":-2}", "thinking_token_budget",
               budget);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"thinking_token_budget\":5.0}", "thinking_token_budget",
               budget);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"thinking_token_budget\":true}", "thinking_token_budget",
               budget);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"thinking_token_budget\":\"5\"}", "thinking_token_budget",
               budget);

    /* request_id: a string; bounded here */
    expect_bad(OPENAI_CHAT, "{" MSG ",\"request_id\":null}", "request_id",
               "'request_id': input should be a valid string, got null");
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"request_id\":5}", "request_id",
               "'request_id': input should be a valid string, got integer");
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"request_id\":\"a b\"}", "request_id",
               "'request_id': at most 64 characters of [A-Za-z0-9._:-] are supported");
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"request_id\":\"\"}", &r);
    assert_string_equal(r.request_id, "");
    openai_request_deinit(&r);

    /* stream_interval: an integer >= 1 */
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stream_interval\":0}", "stream_interval",
               "'stream_interval': input should be greater than or equal to 1");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"stream_interval\":\"2\"}", "stream_interval",
               "'stream_interval': input should be a valid integer, got string");

    /* stream_options: vLLM tests its truthiness, so {} needs no stream */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":{}}", &r);
    assert_false(r.include_usage);
    openai_request_deinit(&r);
    const char *options = "Stream options can only be defined when `stream=True`.";
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
               "stream_options", options);
    expect_bad(OPENAI_CHAT,
               "{" MSG ",\"stream\":false,\"stream_options\":{\"include_usage\":false}}",
               "stream_options", options);

    /* cache_salt: vLLM's validate_cache_salt, characters counted as Python does */
    const char *salt = "Parameter 'cache_salt' must be at most 128 characters and must not "
                       "contain '@', '/', '\\\\', or NUL.";
    const char *empty = "Parameter 'cache_salt' must be a non-empty string if provided.";
    char body[1024];
    char many[800] = "";
    for (int i = 0; i < 128; i++) {
        strcat(many, "\\u00e9"); /* é: 2 bytes, 1 character */
    }
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"cache_salt\":\"%s\"}", many);
    parse_ok(OPENAI_COMPLETION, body, &r);
    assert_int_equal(strlen(r.cache_salt), 256);
    openai_request_deinit(&r);
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"cache_salt\":\"%sa\"}", many);
    expect_bad(OPENAI_COMPLETION, body, "cache_salt", salt);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"cache_salt\":\"a@b\"}", "cache_salt", salt);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"cache_salt\":\"a/b\"}", "cache_salt", salt);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"cache_salt\":\"a\\\\b\"}", "cache_salt", salt);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"cache_salt\":\"a\\u0000b\"}", "cache_salt", salt);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"cache_salt\":\"\"}", "cache_salt", empty);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"cache_salt\":7}", "cache_salt", empty);

    /* stop strings and prompts may not be empty */
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":\"\"}", "stop",
               "stop cannot contain an empty string.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"stop\":[\"a\",\"\"]}", "stop",
               "stop cannot contain an empty string.");
    const char *no_prompt = "Either prompt or prompt_embeds must be provided and non-empty.";
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"\"}", "prompt", no_prompt);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":null}", "prompt", no_prompt);
    expect_bad(OPENAI_COMPLETION, "{\"max_tokens\":3}", "prompt", no_prompt);

    /* temperature: [0, 2], the value as Python's repr writes a float */
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":2.5}", "temperature",
               "temperature must be in [0, 2], got 2.5.");
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":3}", "temperature",
               "temperature must be in [0, 2], got 3.0.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"temperature\":1e20}", "temperature",
               "temperature must be in [0, 2], got 1e+20.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"temperature\":2.0000001}", "temperature",
               "temperature must be in [0, 2], got 2.0000001.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"temperature\":-1}", "temperature",
               "temperature must be non-negative, got -1.0.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"temperature\":-0.00001}", "temperature",
               "temperature must be non-negative, got -1e-05.");
    parse_ok(OPENAI_CHAT, "{" MSG ",\"temperature\":2}", &r);
    assert_float_equal(r.sampling.temperature, 2.0, 0);
    openai_request_deinit(&r);

    /* resolve: greedy (temperature 0) takes n 1; (0, 0.01) becomes 0.01, which is not greedy */
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":0,\"n\":2}", &r);
    assert_int_equal(openai_resolve_sampling(&r, 512, &err), -EINVAL);
    assert_string_equal(err.param, "n");
    assert_string_equal(err.message, "n must be 1 when using greedy sampling, got 2.");
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":0.000001,\"n\":2}", &r);
    assert_int_equal(openai_resolve_sampling(&r, 512, &err), 0);
    assert_float_equal(r.sampling.temperature, 0.01, 1e-9);
    openai_request_deinit(&r);
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":0}", &r);
    assert_int_equal(openai_resolve_sampling(&r, 512, &err), 0);
    assert_float_equal(r.sampling.temperature, 0.0, 0);
    openai_request_deinit(&r);

    /* logprobs -1: the vocabulary, over max_logprobs but for a tiny one */
    const char *over = "Requested sample logprobs of 512, which is greater than max allowed: 20";
    parse_ok(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":-1}", &r);
    assert_true(r.logprobs_vocab);
    assert_int_equal(openai_resolve_sampling(&r, 512, &err), -EINVAL);
    assert_string_equal(err.param, "logprobs");
    assert_string_equal(err.message, over);
    assert_int_equal(openai_resolve_sampling(&r, 16, &err), 0);
    assert_int_equal(r.logprobs, 16);
    assert_int_equal(r.sampling.logprobs, 16);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":-1}", &r);
    assert_true(r.logprobs_vocab);
    assert_int_equal(openai_resolve_sampling(&r, 512, &err), -EINVAL);
    assert_string_equal(err.message, over);
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":null}", &r);
    assert_int_equal(r.logprobs, -1); /* vLLM: no logprobs with top_logprobs null */
    openai_request_deinit(&r);
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs",
               "Requested sample logprobs of 21, which is greater than max allowed: 20");
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":-3}", "logprobs",
               "`logprobs` must be a positive value or -1.");
    expect_bad(OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":\"2\"}", "logprobs",
               "`logprobs` must be an integer.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs",
               "Requested sample logprobs of 21, which is greater than max allowed: 20");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"top_logprobs\":-1}", "top_logprobs",
               "when using `top_logprobs`, `logprobs` must be set to true.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":-2}", "top_logprobs",
               "`top_logprobs` must be a positive value or -1.");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":\"1\"}", "top_logprobs",
               "`top_logprobs` must be an integer.");
}

/* Chat: reasoning_effort, documents, return_prompt_text and messages' reasoning. */
static void test_chat_reasoning_fields(void **state)
{
    (void)state;
    struct openai_request r;
    parse_ok(OPENAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"reasoning\":\"dropped\"},"
             "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"old name\"},"
             "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning\":\"new\","
             "\"reasoning_content\":5}],"
             "\"reasoning_effort\":\"xhigh\",\"documents\":[{\"title\":\"t\",\"text\":\"x\"},{}],"
             "\"return_prompt_text\":true}",
             &r);
    assert_string_equal(r.reasoning_effort, "xhigh");
    assert_non_null(r.documents);
    assert_int_equal(json_object_array_length(r.documents), 2);
    assert_true(r.return_prompt_text);
    assert_string_equal(r.messages[0].reasoning, "dropped"); /* the template drops it */
    assert_string_equal(r.messages[1].reasoning, "old name");
    assert_string_equal(r.messages[2].reasoning, "new"); /* reasoning_content not read then */
    openai_request_deinit(&r);
    parse_ok(OPENAI_CHAT, "{" MSG ",\"reasoning_effort\":null,\"documents\":null}", &r);
    assert_null(r.reasoning_effort);
    assert_null(r.documents);
    assert_false(r.return_prompt_text);
    openai_request_deinit(&r);
    expect_bad(OPENAI_CHAT, "{" MSG ",\"reasoning_effort\":\"extreme\"}", "reasoning_effort",
               "'reasoning_effort': input should be 'none', 'minimal', 'low', 'medium', 'high', "
               "'xhigh' or 'max'");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"reasoning_effort\":1}", "reasoning_effort",
               "'reasoning_effort': input should be a valid string, got integer");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"documents\":{}}", "documents",
               "'documents': input should be a valid list, got object");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"documents\":[\"x\"]}", "documents",
               "'documents[0]': input should be a valid dictionary, got string");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"documents\":[{\"a\":\"b\"},{\"n\":1}]}", "documents",
               "'documents[1].n': input should be a valid string, got integer");
    expect_bad(OPENAI_CHAT, "{" MSG ",\"return_prompt_text\":1}", "return_prompt_text",
               "'return_prompt_text': input should be a valid boolean, got integer");
    expect_bad(OPENAI_CHAT,
               "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning\":[]}]}",
               "messages[0].reasoning",
               "'messages[0].reasoning': input should be a valid string, got array");
    expect_bad(OPENAI_CHAT,
               "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\","
               "\"reasoning_content\":1}]}",
               "messages[0].reasoning_content",
               "'messages[0].reasoning_content': input should be a valid string, got integer");
}

/* /v1/embeddings: use_activation, the encodings, padding, truncation_side, cache_salt, and
 * vLLM's refusal of the removed normalize. */
static void test_embedding_fields(void **state)
{
    (void)state;
    struct openai_request r;
    parse_ok(OPENAI_EMBEDDING, "{\"input\":\"x\"}", &r);
    assert_int_equal(r.embed_normalize, -1);
    assert_int_equal(r.embed_fmt.encoding, OPENAI_EMBED_FLOAT);
    assert_int_equal(r.embed_fmt.dtype, OPENAI_DTYPE_FLOAT32);
    assert_int_equal(r.embed_fmt.endian, OPENAI_ENDIAN_NATIVE);
    assert_false(r.embed_base64);
    assert_false(r.truncate_right);
    openai_request_deinit(&r);
    parse_ok(OPENAI_EMBEDDING,
             "{\"input\":[\"a\",\"b\"],\"use_activation\":false,\"encoding_format\":\"base64\","
             "\"embed_dtype\":\"bfloat16\",\"endianness\":\"big\",\"padding\":\"do_not_pad\","
             "\"truncate_prompt_tokens\":3,\"truncation_side\":\"right\",\"cache_salt\":\"s\","
             "\"request_id\":\"r1\",\"task\":\"embed\"}",
             &r);
    assert_int_equal(r.embed_normalize, 0);
    assert_true(r.embed_base64);
    assert_int_equal(r.embed_fmt.encoding, OPENAI_EMBED_BASE64);
    assert_int_equal(r.embed_fmt.dtype, OPENAI_DTYPE_BFLOAT16);
    assert_int_equal(r.embed_fmt.endian, OPENAI_ENDIAN_BIG);
    assert_int_equal(r.truncate_prompt_tokens, 3);
    assert_true(r.truncate_right);
    assert_string_equal(r.cache_salt, "s");
    assert_string_equal(r.request_id, "r1");
    openai_request_deinit(&r);
    parse_ok(OPENAI_EMBEDDING,
             "{\"input\":\"x\",\"use_activation\":true,\"encoding_format\":\"bytes\","
             "\"embed_dtype\":\"fp8_e5m2\",\"endianness\":\"little\",\"padding\":null}",
             &r);
    assert_int_equal(r.embed_normalize, 1);
    assert_int_equal(r.embed_fmt.encoding, OPENAI_EMBED_BYTES);
    assert_int_equal(r.embed_fmt.dtype, OPENAI_DTYPE_FP8_E5M2);
    assert_int_equal(r.embed_fmt.endian, OPENAI_ENDIAN_LITTLE);
    openai_request_deinit(&r);
    parse_ok(OPENAI_EMBEDDING,
             "{\"input\":\"x\",\"use_activation\":null,"
             "\"encoding_format\":\"bytes_only\"}",
             &r);
    assert_int_equal(r.embed_normalize, -1);
    assert_int_equal(r.embed_fmt.encoding, OPENAI_EMBED_BYTES_ONLY);
    openai_request_deinit(&r);
    const char *normalize = "Parameter `normalize` was removed; use `use_activation` instead.";
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"normalize\":true}", "normalize", normalize);
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"normalize\":null}", "normalize", normalize);
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"task\":\"score\"}", "task",
               "`score` task was removed; use `classify` instead.");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"task\":\"encode\"}", "task",
               "`encode` task was removed; use `token_embed` or `token_classify` instead.");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"use_activation\":1}", "use_activation",
               "'use_activation': input should be a valid boolean, got integer");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"encoding_format\":\"int8\"}",
               "encoding_format",
               "'encoding_format': input should be 'float', 'base64', 'bytes' or 'bytes_only'");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"embed_dtype\":\"float64\"}", "embed_dtype",
               "'embed_dtype': input should be 'float32', 'float16', 'bfloat16', 'fp8_e4m3' or "
               "'fp8_e5m2'");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"endianness\":\"middle\"}", "endianness",
               "'endianness': input should be 'native', 'big' or 'little'");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"padding\":\"max_length\"}", "padding",
               "'padding': \"max_length\" is not supported by this server (\"do_not_pad\" is)");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"padding\":true}", "padding",
               "'padding': input should be a valid string, got boolean");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"truncation_side\":\"up\"}", "truncation_side",
               "'truncation_side': input should be 'left' or 'right'");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"cache_salt\":\"a@b\"}", "cache_salt",
               "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', "
               "'/', '\\\\', or NUL.");
    expect_bad(OPENAI_EMBEDDING, "{\"input\":\"x\",\"request_id\":[]}", "request_id",
               "'request_id': input should be a valid string, got array");
}

static void test_bad_requests(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *bc = &bad_cases[i];
        struct openai_request r;
        struct openai_error err;
        memset(&err, 0, sizeof(err));
        int rc = bc->kind == OPENAI_CHAT
                     ? openai_parse_chat(bc->body, strlen(bc->body), &r, &err)
                     : openai_parse_completion(bc->body, strlen(bc->body), &r, &err);
        if (rc != -EINVAL || err.status != 400 || strcmp(err.param, bc->param) != 0 ||
            strcmp(err.type, "BadRequestError") != 0 || !strstr(err.message, bc->param)) {
            fail_msg("case %zu %s: rc %d status %d param '%s' (want '%s') message '%s'", i,
                     bc->body, rc, err.status, err.param, bc->param, err.message);
        }
    }
}

static void test_limits(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1 << 20);
    /* 65 stop strings */
    assert_int_equal(buf_appends(&b, "{\"prompt\":\"x\",\"stop\":["), 0);
    for (int i = 0; i <= OPENAI_MAX_STOP; i++) {
        assert_int_equal(buf_appendf(&b, "%s\"s%d\"", i ? "," : "", i), 0);
    }
    assert_int_equal(buf_appends(&b, "]}"), 0);
    struct openai_request r;
    struct openai_error err;
    assert_int_equal(openai_parse_completion(b.data, b.len, &r, &err), -EINVAL);
    assert_string_equal(err.param, "stop");
    /* a 1025-byte stop string */
    buf_reset(&b);
    assert_int_equal(buf_appends(&b, "{\"prompt\":\"x\",\"stop\":\""), 0);
    for (int i = 0; i <= OPENAI_MAX_STOP_LEN; i++) {
        assert_int_equal(buf_appends(&b, "a"), 0);
    }
    assert_int_equal(buf_appends(&b, "\"}"), 0);
    assert_int_equal(openai_parse_completion(b.data, b.len, &r, &err), -EINVAL);
    assert_string_equal(err.param, "stop");
    /* too many stop_token_ids */
    buf_reset(&b);
    assert_int_equal(buf_appends(&b, "{\"prompt\":\"x\",\"stop_token_ids\":["), 0);
    for (int i = 0; i <= OPENAI_MAX_STOP_TOKENS; i++) {
        assert_int_equal(buf_appendf(&b, "%s%d", i ? "," : "", i), 0);
    }
    assert_int_equal(buf_appends(&b, "]}"), 0);
    assert_int_equal(openai_parse_completion(b.data, b.len, &r, &err), -EINVAL);
    assert_string_equal(err.param, "stop_token_ids");
    /* a long token prompt is fine */
    buf_reset(&b);
    assert_int_equal(buf_appends(&b, "{\"prompt\":["), 0);
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(buf_appendf(&b, "%s%d", i ? "," : "", i), 0);
    }
    assert_int_equal(buf_appends(&b, "]}"), 0);
    assert_int_equal(openai_parse_completion(b.data, b.len, &r, &err), 0);
    assert_int_equal(r.n_prompt_tokens, 5000);
    assert_int_equal(r.prompt_tokens[4999], 4999);
    openai_request_deinit(&r);
    buf_free(&b);
}

static void test_tokenize_detokenize(void **state)
{
    (void)state;
    struct openai_request r;
    struct openai_error err;
    int strs = 0;
    const char *b1 = "{\"model\":\"m\",\"prompt\":\"hi there\",\"add_special_tokens\":false,"
                     "\"return_token_strs\":true}";
    assert_int_equal(openai_parse_tokenize(b1, strlen(b1), &r, &strs, &err), 0);
    assert_int_equal(r.kind, OPENAI_COMPLETION);
    assert_string_equal(r.prompt_text, "hi there");
    assert_false(r.add_special_tokens);
    assert_true(strs);
    assert_string_equal(r.model, "m");
    openai_request_deinit(&r);
    const char *b2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                     "\"add_generation_prompt\":false}";
    assert_int_equal(openai_parse_tokenize(b2, strlen(b2), &r, &strs, &err), 0);
    assert_int_equal(r.kind, OPENAI_CHAT);
    assert_int_equal(r.n_messages, 1);
    assert_false(r.add_special_tokens);
    assert_false(r.add_generation_prompt);
    assert_false(strs);
    openai_request_deinit(&r);
    const char *b3 = "{\"prompt\":[1,2]}";
    assert_int_equal(openai_parse_tokenize(b3, strlen(b3), &r, &strs, &err), -EINVAL);
    assert_string_equal(err.param, "prompt");
    const char *b4 = "{\"prompt\":\"x\",\"return_token_strs\":1}";
    assert_int_equal(openai_parse_tokenize(b4, strlen(b4), &r, &strs, &err), -EINVAL);
    assert_string_equal(err.param, "return_token_strs");

    struct json_object *root;
    const char *model;
    int32_t *toks;
    size_t n;
    const char *d1 = "{\"model\":\"m\",\"tokens\":[1,2,300]}";
    assert_int_equal(openai_parse_detokenize(d1, strlen(d1), &root, &model, &toks, &n, &err), 0);
    assert_string_equal(model, "m");
    assert_int_equal(n, 3);
    assert_int_equal(toks[2], 300);
    free(toks);
    json_object_put(root);
    const char *bad[] = {"{}", "{\"tokens\":\"x\"}", "{\"tokens\":[1.5]}", "{\"tokens\":[-3]}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(
            openai_parse_detokenize(bad[i], strlen(bad[i]), &root, &model, &toks, &n, &err),
            -EINVAL);
        assert_string_equal(err.param, "tokens");
        assert_null(root);
        assert_null(toks);
    }
    const char *d2 = "{\"tokens\":[],\"model\":5}";
    assert_int_equal(openai_parse_detokenize(d2, strlen(d2), &root, &model, &toks, &n, &err),
                     -EINVAL);
    assert_string_equal(err.param, "model");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_defaults),
        cmocka_unit_test(test_completion_all_fields),
        cmocka_unit_test(test_completion_prompt_forms),
        cmocka_unit_test(test_token_id_fields),
        cmocka_unit_test(test_chat_fields),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_prompt_logprobs),
        cmocka_unit_test(test_structured_forms),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_tokenize_detokenize),
        cmocka_unit_test(test_vllm_sampling_fields),
        cmocka_unit_test(test_chat_reasoning_fields),
        cmocka_unit_test(test_embedding_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
