/*
 * Unit tests for chat_template: the built-in chatml and llama2 fallbacks (expected strings from
 * Python Jinja2 rendering the same sources), message normalisation (content parts, errors naming
 * the message), the render context (bos/eos, add_generation_prompt, extra variables and
 * chat_template_kwargs), the --chat-template override resolution and tokenizer_config fields.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/template/chat_template.h"
#include "lib/json.h"

static struct json_object *parse(const char *text)
{
    char err[256];
    struct json_object *o = json_parse(text, strlen(text), err, sizeof(err));
    if (!o) {
        fail_msg("%s: %s", text, err);
    }
    return o;
}

static const char MSGS[] = "[{\"role\": \"system\", \"content\": \"Be nice.\"},"
                           " {\"role\": \"user\", \"content\": \"Hi  \"},"
                           " {\"role\": \"assistant\", \"content\": \" Hello\"},"
                           " {\"role\": \"user\", \"content\": \"Bye\"}]";

static void expect_chat(const char *src, const char *msgs_json, bool agp, const char *extra_json,
                        const char *want)
{
    struct json_object *msgs = parse(msgs_json);
    struct json_object *extra = extra_json ? parse(extra_json) : NULL;
    char err[512] = "";
    char *out = NULL;
    size_t len = 0;
    int rc =
        chat_template_render(src, msgs, agp, "<s>", "</s>", extra, &out, &len, err, sizeof(err));
    if (rc != 0) {
        fail_msg("render failed (%d): %s", rc, err);
    }
    assert_int_equal(len, strlen(want));
    assert_string_equal(out, want);
    free(out);
    json_object_put(msgs);
    json_object_put(extra);
}

static void expect_chat_error(const char *src, const char *msgs_json, int want_rc, const char *want)
{
    struct json_object *msgs = parse(msgs_json);
    char err[512] = "";
    char *out = (char *)1;
    int rc =
        chat_template_render(src, msgs, true, "<s>", "</s>", NULL, &out, NULL, err, sizeof(err));
    assert_int_equal(rc, want_rc);
    assert_null(out);
    if (!strstr(err, want)) {
        fail_msg("error [%s] lacks [%s]", err, want);
    }
    json_object_put(msgs);
}

static void test_builtin_chatml(void **state)
{
    (void)state;
    const char *chatml = chat_template_builtin("chatml");
    assert_non_null(chatml);
    expect_chat(chatml, MSGS, true, NULL,
                "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi  <|im_end|>\n"
                "<|im_start|>assistant\n Hello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                "<|im_start|>assistant\n");
    /* NULL template → chatml */
    expect_chat(NULL, "[{\"role\": \"user\", \"content\": \"Hi  \"}]", false, NULL,
                "<|im_start|>user\nHi  <|im_end|>\n");
    /* null content (assistant tool call) renders as empty */
    expect_chat(NULL, "[{\"role\": \"assistant\", \"content\": null}]", false, NULL,
                "<|im_start|>assistant\n<|im_end|>\n");
}

static void test_builtin_llama2(void **state)
{
    (void)state;
    const char *llama2 = chat_template_builtin("llama2");
    assert_non_null(llama2);
    assert_null(chat_template_builtin("nope"));
    assert_null(chat_template_builtin(NULL));
    expect_chat(llama2, MSGS, true, NULL,
                "<s>[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye "
                "[/INST]");
    expect_chat(llama2, "[{\"role\": \"user\", \"content\": \"Hi  \"}]", false, NULL,
                "<s>[INST] Hi [/INST]");
    expect_chat_error(llama2, "[{\"role\": \"assistant\", \"content\": \"x\"}]", JINJA_ERAISED,
                      "Conversation roles must alternate");
}

static void test_content_parts_normalised(void **state)
{
    (void)state;
    expect_chat("{{ messages[0].content }}|{{ messages[0].name }}",
                "[{\"role\": \"user\", \"name\": \"bob\", \"content\": [{\"type\": \"text\", "
                "\"text\": \"one\"}, {\"type\": \"text\", \"text\": \"two\"}]}]",
                false, NULL, "one\ntwo|bob");
    expect_chat("[{{ messages[0].content }}]", "[{\"role\": \"user\", \"content\": []}]", false,
                NULL, "[]");
    expect_chat_error(NULL,
                      "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\":"
                      " [{\"type\": \"image_url\", \"image_url\": {}}]}]",
                      -EINVAL, "messages[1].content[0].type: unsupported part type 'image_url'");
    expect_chat_error(NULL, "[{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]", -EINVAL,
                      "messages[0].content[0].text: expected string");
    expect_chat_error(NULL, "[{\"role\": \"user\", \"content\": [5]}]", -EINVAL,
                      "messages[0].content[0]: expected an object");
    expect_chat_error(NULL, "[{\"content\": \"x\"}]", -EINVAL,
                      "messages[0].role: required field is missing");
    expect_chat_error(NULL, "[{\"role\": 1}]", -EINVAL, "messages[0].role: expected string");
    expect_chat_error(NULL, "[{\"role\": \"user\", \"content\": 5}]", -EINVAL,
                      "messages[0].content: expected string, array or null");
    expect_chat_error(NULL, "[7]", -EINVAL, "messages[0]: expected object");
    expect_chat_error(NULL, "{}", -EINVAL, "messages: expected array");
}

static void test_context_variables(void **state)
{
    (void)state;
    expect_chat("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}{{ tools|length }}"
                "{{ enable_thinking }}{{ chat_template_kwargs is defined }}",
                "[]", true,
                "{\"tools\": [{\"type\": \"function\"}], "
                "\"chat_template_kwargs\": {\"enable_thinking\": false}}",
                "<s></s>True1FalseFalse");
    /* the caller's messages are not modified by normalisation */
    struct json_object *msgs =
        parse("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}]}]");
    char err[256];
    char *out = NULL;
    assert_int_equal(
        chat_template_render(NULL, msgs, false, NULL, NULL, NULL, &out, NULL, err, sizeof(err)), 0);
    free(out);
    assert_true(json_object_is_type(json_get(msgs, "[0].content"), json_type_array));
    json_object_put(msgs);
    struct json_object *not_obj = parse("[1]");
    msgs = parse("[]");
    assert_int_equal(
        chat_template_render(NULL, msgs, false, NULL, NULL, not_obj, &out, NULL, err, sizeof(err)),
        -EINVAL);
    json_object_put(not_obj);
    json_object_put(msgs);
}

static void test_compiled_template_reuse(void **state)
{
    (void)state;
    char err[256];
    struct chat_template *ct = chat_template_new("{{ x }}{% for m in messages %}{{ m.role }}"
                                                 "{% endfor %}",
                                                 "B", "E", err, sizeof(err));
    assert_non_null(ct);
    struct json_object *msgs = parse("[{\"role\": \"u\"}, {\"role\": \"a\"}]");
    struct json_object *extra = parse("{\"x\": 1}");
    for (int i = 0; i < 3; i++) {
        char *out = NULL;
        assert_int_equal(chat_template_apply(ct, msgs, false, extra, &out, NULL, err, sizeof(err)),
                         0);
        assert_string_equal(out, "1ua");
        free(out);
    }
    json_object_put(msgs);
    json_object_put(extra);
    chat_template_free(ct);
    chat_template_free(NULL);
    assert_null(chat_template_new("{% if %}", NULL, NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "chat template: line 1 column 7"));
}

static void test_resolve_override(void **state)
{
    (void)state;
    char err[256];
    char *src = NULL;
    /* a file */
    char path[] = "/tmp/tandem_tmpl_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char body[] = "{{ 'from file' }}";
    assert_int_equal(write(fd, body, sizeof(body) - 1), (ssize_t)(sizeof(body) - 1));
    close(fd);
    assert_int_equal(chat_template_resolve_arg(path, &src, err, sizeof(err)), 0);
    assert_string_equal(src, body);
    free(src);
    unlink(path);
    /* inline template text */
    assert_int_equal(
        chat_template_resolve_arg("{% for m in messages %}{% endfor %}", &src, err, sizeof(err)),
        0);
    assert_string_equal(src, "{% for m in messages %}{% endfor %}");
    free(src);
    assert_int_equal(chat_template_resolve_arg("x {{ y }}", &src, err, sizeof(err)), 0);
    free(src);
    /* built-in name */
    assert_int_equal(chat_template_resolve_arg("llama2", &src, err, sizeof(err)), 0);
    assert_string_equal(src, chat_template_builtin("llama2"));
    free(src);
    /* none of those */
    assert_int_equal(chat_template_resolve_arg("/no/such/file.jinja", &src, err, sizeof(err)),
                     -ENOENT);
    assert_null(src);
    assert_non_null(strstr(err, "/no/such/file.jinja"));
}

static void test_config_fields(void **state)
{
    (void)state;
    char err[256];
    const char *src = NULL, *tok = NULL;
    struct json_object *cfg = parse(
        "{\"chat_template\": \"{{ 1 }}\", \"bos_token\": \"<s>\", "
        "\"eos_token\": {\"__type\": \"AddedToken\", \"content\": \"</s>\"}, \"pad_token\": 5, "
        "\"unk_token\": null}");
    assert_int_equal(chat_template_from_config(cfg, NULL, &src, err, sizeof(err)), 0);
    assert_string_equal(src, "{{ 1 }}");
    assert_int_equal(chat_template_config_token(cfg, "bos_token", &tok, err, sizeof(err)), 0);
    assert_string_equal(tok, "<s>");
    assert_int_equal(chat_template_config_token(cfg, "eos_token", &tok, err, sizeof(err)), 0);
    assert_string_equal(tok, "</s>");
    assert_int_equal(chat_template_config_token(cfg, "unk_token", &tok, err, sizeof(err)), 0);
    assert_null(tok);
    assert_int_equal(chat_template_config_token(cfg, "missing", &tok, err, sizeof(err)), 0);
    assert_null(tok);
    assert_int_equal(chat_template_config_token(cfg, "pad_token", &tok, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "pad_token"));
    json_object_put(cfg);

    cfg = parse("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
                "{\"name\": \"default\", \"template\": \"D\"}]}");
    assert_int_equal(chat_template_from_config(cfg, NULL, &src, err, sizeof(err)), 0);
    assert_string_equal(src, "D");
    assert_int_equal(chat_template_from_config(cfg, "tool_use", &src, err, sizeof(err)), 0);
    assert_string_equal(src, "T");
    assert_int_equal(chat_template_from_config(cfg, "rag", &src, err, sizeof(err)), -ENOENT);
    json_object_put(cfg);

    cfg = parse("{\"chat_template\": [{\"name\": 1}]}");
    assert_int_equal(chat_template_from_config(cfg, NULL, &src, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "chat_template[0]"));
    json_object_put(cfg);
    cfg = parse("{\"chat_template\": null}");
    assert_int_equal(chat_template_from_config(cfg, NULL, &src, err, sizeof(err)), -ENOENT);
    json_object_put(cfg);
    cfg = parse("{\"chat_template\": 3}");
    assert_int_equal(chat_template_from_config(cfg, NULL, &src, err, sizeof(err)), -EINVAL);
    json_object_put(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_chatml),
        cmocka_unit_test(test_builtin_llama2),
        cmocka_unit_test(test_content_parts_normalised),
        cmocka_unit_test(test_context_variables),
        cmocka_unit_test(test_compiled_template_reuse),
        cmocka_unit_test(test_resolve_override),
        cmocka_unit_test(test_config_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
