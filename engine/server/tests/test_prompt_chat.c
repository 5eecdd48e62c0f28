/*
 * prompt_render_chat (prompt.c): what a chat request hands its template, as vLLM's
 * build_chat_params and chat_utils do: reasoning_effort and documents as variables of their
 * names over chat_template_kwargs, enable_thinking = reasoning_effort != "none" unless the
 * client's chat_template_kwargs set it, and an assistant message's reasoning (or its deprecated
 * reasoning_content) under both names, other roles' dropped. Requests go through
 * openai_parse_chat and carry their own chat_template, so no tokenizer is needed.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/server/prompt.h"

/* The variables under test, rendered; an undefined one renders as nothing (Jinja2). */
#define TEMPLATE                                                                                   \
    "{% for m in messages %}[{{ m.role }}|{{ m.content }}|{{ m.reasoning }}|"                      \
    "{{ m.reasoning_content }}]{% endfor %}"                                                       \
    " effort={{ reasoning_effort }} think={{ enable_thinking }} x={{ x }} docs="                   \
    "{% for d in documents %}{{ d.title }}:{{ d.text }};{% endfor %}"

/* Renders body (a chat request whose fields follow the "chat_template") into out. */
static void render(const char *fields, char *out, size_t outlen)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"chat_template\":\"%s\",%s}", TEMPLATE, fields);
    struct openai_request o;
    struct openai_error err;
    memset(&err, 0, sizeof err);
    if (openai_parse_chat(body, strlen(body), &o, &err) != 0) {
        fail_msg("%s: %s", body, err.message);
    }
    struct prompt_ctx pc = {.bos_token = "", .eos_token = ""};
    char *text = NULL;
    size_t len = 0;
    if (prompt_render_chat(&pc, &o, &text, &len, &err) != 0) {
        fail_msg("%s: %s", body, err.message);
    }
    snprintf(out, outlen, "%s", text);
    free(text);
    openai_request_deinit(&o);
}

#define USER "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]"

static void test_reasoning_effort(void **state)
{
    (void)state;
    char out[1024];
    render(USER ",\"reasoning_effort\":\"low\"", out, sizeof out);
    assert_string_equal(out, "[user|q||] effort=low think=True x= docs=");
    render(USER ",\"reasoning_effort\":\"none\"", out, sizeof out);
    assert_string_equal(out, "[user|q||] effort=none think=False x= docs=");
    /* the client's enable_thinking wins; reasoning_effort wins over the kwargs' own */
    render(USER ",\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"enable_thinking\":"
                "false,\"reasoning_effort\":\"low\",\"x\":1}",
           out, sizeof out);
    assert_string_equal(out, "[user|q||] effort=high think=False x=1 docs=");
    /* without the field: the kwargs as given, no enable_thinking added */
    render(USER ",\"chat_template_kwargs\":{\"reasoning_effort\":\"medium\"}", out, sizeof out);
    assert_string_equal(out, "[user|q||] effort=medium think= x= docs=");
    render(USER, out, sizeof out);
    assert_string_equal(out, "[user|q||] effort= think= x= docs=");
}

static void test_documents(void **state)
{
    (void)state;
    char out[1024];
    render(USER ",\"documents\":[{\"title\":\"A\",\"text\":\"one\"},{\"title\":\"B\","
                "\"text\":\"two\"}],\"chat_template_kwargs\":{\"documents\":[]}",
           out, sizeof out);
    assert_string_equal(out, "[user|q||] effort= think= x= docs=A:one;B:two;");
}

static void test_message_reasoning(void **state)
{
    (void)state;
    char out[1024];
    render("\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"reasoning\":\"no\"},"
           "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"r1\"},"
           "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning\":\"r2\"},"
           "{\"role\":\"assistant\",\"content\":\"c\"}]",
           out, sizeof out);
    assert_string_equal(out, "[user|q||][assistant|a|r1|r1][assistant|b|r2|r2][assistant|c||]"
                             " effort= think= x= docs=");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasoning_effort),
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_message_reasoning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
