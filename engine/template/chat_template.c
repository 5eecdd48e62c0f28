/*
 * Chat templates on top of the Jinja interpreter: built-in fallbacks, the --chat-template
 * override, tokenizer_config.json fields, message normalisation and the render context.
 */
#include "engine/template/chat_template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/buf.h"
#include "lib/err.h"

struct chat_template {
    jinja_template *tmpl;
    char *bos; /* "" when none */
    char *eos;
};

/* ChatML (Qwen, Yi, many fine-tunes); content that is not a string renders as "". */
static const char CHATML[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + "
    "(message['content'] if message['content'] is string else '') + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/* The Llama 2 chat template as published with meta-llama/Llama-2-7b-chat-hf. */
static const char LLAMA2[] =
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}"
    "{% set system_message = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = '' %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 %}{% set content = system_message + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + content | trim + ' ' + eos_token }}"
    "{% endif %}"
    "{% endfor %}";

const char *chat_template_builtin(const char *name)
{
    if (!name) {
        return NULL;
    }
    if (strcmp(name, "chatml") == 0) {
        return CHATML;
    }
    if (strcmp(name, "llama2") == 0) {
        return LLAMA2;
    }
    return NULL;
}

struct chat_template *chat_template_new(const char *template_src, const char *bos_token,
                                        const char *eos_token, char *err, size_t errlen)
{
    const char *src = template_src ? template_src : CHATML;
    char jerr[256] = "";
    struct chat_template *ct = calloc(1, sizeof(*ct));
    if (!ct) {
        goto err_oom;
    }
    ct->bos = strdup(bos_token ? bos_token : "");
    ct->eos = strdup(eos_token ? eos_token : "");
    if (!ct->bos || !ct->eos) {
        goto err_free;
    }
    ct->tmpl = jinja_compile(src, strlen(src), jerr, sizeof(jerr));
    if (!ct->tmpl) {
        tandem_set_err(err, errlen, "chat template: %s", jerr);
        chat_template_free(ct);
        return NULL;
    }
    return ct;

err_free:
    chat_template_free(ct);
err_oom:
    tandem_set_err(err, errlen, "out of memory");
    return NULL;
}

void chat_template_free(struct chat_template *ct)
{
    if (!ct) {
        return;
    }
    jinja_free(ct->tmpl);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}

/* Joins the text parts of a content array; -EINVAL naming the part otherwise. */
static int join_parts(struct json_object *parts, size_t msg_idx, struct json_object **out,
                      char *err, size_t errlen)
{
    struct buf b;
    buf_init(&b, JINJA_MAX_SOURCE * 16);
    size_t n = json_object_array_length(parts);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        struct json_object *part = json_object_array_get_idx(parts, i);
        struct json_object *type = NULL, *text = NULL;
        if (!json_object_is_type(part, json_type_object) ||
            !json_object_object_get_ex(part, "type", &type) ||
            !json_object_is_type(type, json_type_string)) {
            rc = tandem_fail(err, errlen, -EINVAL,
                             "messages[%zu].content[%zu]: expected an object with a type", msg_idx,
                             i);
            break;
        }
        if (strcmp(json_object_get_string(type), "text") != 0) {
            rc = tandem_fail(err, errlen, -EINVAL,
                             "messages[%zu].content[%zu].type: unsupported part type '%s'", msg_idx,
                             i, json_object_get_string(type));
            break;
        }
        if (!json_object_object_get_ex(part, "text", &text) ||
            !json_object_is_type(text, json_type_string)) {
            rc = tandem_fail(err, errlen, -EINVAL,
                             "messages[%zu].content[%zu].text: expected string", msg_idx, i);
            break;
        }
        if (i > 0) {
            rc = buf_append(&b, "\n", 1);
        }
        if (!rc) {
            rc = buf_append(&b, json_object_get_string(text),
                            (size_t)json_object_get_string_len(text));
        }
        if (rc) {
            tandem_set_err(err, errlen, "messages[%zu].content: %s", msg_idx,
                           rc == -ENOSPC ? "too long" : "out of memory");
            rc = rc == -ENOSPC ? -E2BIG : -ENOMEM;
        }
    }
    if (!rc) {
        *out = json_object_new_string_len(b.data ? b.data : "", (int)b.len);
        if (!*out) {
            rc = tandem_fail(err, errlen, -ENOMEM, "out of memory");
        }
    }
    buf_free(&b);
    return rc;
}

/* A copy of messages (sharing unchanged members) with content parts joined. */
static int normalise_messages(struct json_object *messages, struct json_object **out, char *err,
                              size_t errlen)
{
    if (!json_object_is_type(messages, json_type_array)) {
        return tandem_fail(err, errlen, -EINVAL, "messages: expected array");
    }
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        goto err_oom;
    }
    size_t n = json_object_array_length(messages);
    for (size_t i = 0; i < n; i++) {
        struct json_object *m = json_object_array_get_idx(messages, i);
        struct json_object *role = NULL, *content = NULL, *copy = NULL;
        if (!json_object_is_type(m, json_type_object)) {
            tandem_set_err(err, errlen, "messages[%zu]: expected object", i);
            goto err_inval;
        }
        if (!json_object_object_get_ex(m, "role", &role) ||
            !json_object_is_type(role, json_type_string)) {
            tandem_set_err(err, errlen, "messages[%zu].role: %s", i,
                           role ? "expected string" : "required field is missing");
            goto err_inval;
        }
        if (json_object_object_get_ex(m, "content", &content) &&
            json_object_is_type(content, json_type_array)) {
            struct json_object *joined = NULL;
            int rc = join_parts(content, i, &joined, err, errlen);
            if (rc) {
                json_object_put(arr);
                return rc;
            }
            copy = json_object_new_object();
            if (!copy) {
                json_object_put(joined);
                goto err_free;
            }
            json_object_object_foreach(m, key, val)
            {
                if (strcmp(key, "content") == 0) {
                    continue;
                }
                if (json_object_object_add(copy, key, val ? json_object_get(val) : NULL) != 0) {
                    json_object_put(joined);
                    json_object_put(copy);
                    goto err_free;
                }
            }
            if (json_object_object_add(copy, "content", joined) != 0) {
                json_object_put(joined);
                json_object_put(copy);
                goto err_free;
            }
        } else if (content && !json_object_is_type(content, json_type_string)) {
            tandem_set_err(err, errlen, "messages[%zu].content: expected string, array or null", i);
            goto err_inval;
        } else {
            copy = json_object_get(m);
        }
        if (json_object_array_add(arr, copy) != 0) {
            json_object_put(copy);
            goto err_free;
        }
    }
    *out = arr;
    return 0;

err_inval:
    json_object_put(arr);
    return -EINVAL;
err_free:
    json_object_put(arr);
err_oom:
    return tandem_fail(err, errlen, -ENOMEM, "out of memory");
}

static int ctx_add(struct json_object *ctx, const char *key, struct json_object *val)
{
    if (json_object_object_add(ctx, key, val) != 0) {
        json_object_put(val);
        return -ENOMEM;
    }
    return 0;
}

int chat_template_apply(const struct chat_template *ct, struct json_object *messages,
                        bool add_generation_prompt, struct json_object *extra_vars, char **out,
                        size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    if (len) {
        *len = 0;
    }
    if (extra_vars && !json_object_is_type(extra_vars, json_type_object)) {
        return tandem_fail(err, errlen, -EINVAL, "chat template variables: expected object");
    }
    struct json_object *norm = NULL;
    int rc = normalise_messages(messages, &norm, err, errlen);
    if (rc) {
        return rc;
    }
    struct json_object *ctx = json_object_new_object();
    if (!ctx) {
        json_object_put(norm);
        return tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    if (extra_vars) {
        json_object_object_foreach(extra_vars, key, val)
        {
            if (strcmp(key, "chat_template_kwargs") == 0 &&
                json_object_is_type(val, json_type_object)) {
                json_object_object_foreach(val, k2, v2)
                {
                    rc = ctx_add(ctx, k2, v2 ? json_object_get(v2) : NULL);
                    if (rc) {
                        break;
                    }
                }
            } else {
                rc = ctx_add(ctx, key, val ? json_object_get(val) : NULL);
            }
            if (rc) {
                break;
            }
        }
    }
    if (!rc) {
        rc = ctx_add(ctx, "messages", norm);
    } else {
        json_object_put(norm);
    }
    if (!rc) {
        rc = ctx_add(ctx, "add_generation_prompt", json_object_new_boolean(add_generation_prompt));
    }
    if (!rc) {
        rc = ctx_add(ctx, "bos_token", json_object_new_string(ct->bos));
    }
    if (!rc) {
        rc = ctx_add(ctx, "eos_token", json_object_new_string(ct->eos));
    }
    if (rc) {
        json_object_put(ctx);
        return tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    rc = jinja_render(ct->tmpl, ctx, out, len, err, errlen);
    json_object_put(ctx);
    return rc;
}

int chat_template_render(const char *template_src, struct json_object *messages,
                         bool add_generation_prompt, const char *bos_token, const char *eos_token,
                         struct json_object *extra_vars, char **out, size_t *len, char *err,
                         size_t errlen)
{
    *out = NULL;
    struct chat_template *ct = chat_template_new(template_src, bos_token, eos_token, err, errlen);
    if (!ct) {
        return strstr(err ? err : "", "out of memory") ? -ENOMEM : -EINVAL;
    }
    int rc =
        chat_template_apply(ct, messages, add_generation_prompt, extra_vars, out, len, err, errlen);
    chat_template_free(ct);
    return rc;
}

int chat_template_resolve_arg(const char *value, char **src, char *err, size_t errlen)
{
    *src = NULL;
    struct stat st;
    if (value && stat(value, &st) == 0 && S_ISREG(st.st_mode)) {
        if (st.st_size > (off_t)JINJA_MAX_SOURCE) {
            return tandem_fail(err, errlen, -E2BIG, "--chat-template %s: file larger than %u bytes",
                               value, (unsigned)JINJA_MAX_SOURCE);
        }
        FILE *f = fopen(value, "rb");
        if (!f) {
            return tandem_fail(err, errlen, -EIO, "--chat-template %s: %s", value, strerror(errno));
        }
        char *text = malloc((size_t)st.st_size + 1);
        if (!text) {
            fclose(f);
            return tandem_fail(err, errlen, -ENOMEM, "out of memory");
        }
        size_t n = fread(text, 1, (size_t)st.st_size, f);
        bool bad = ferror(f) != 0;
        fclose(f);
        if (bad) {
            free(text);
            return tandem_fail(err, errlen, -EIO, "--chat-template %s: read error", value);
        }
        text[n] = '\0';
        *src = text;
        return 0;
    }
    const char *text = NULL;
    if (value && (strstr(value, "{{") || strstr(value, "{%"))) {
        text = value;
    } else {
        text = chat_template_builtin(value);
    }
    if (!text) {
        tandem_set_err(
            err, errlen,
            "--chat-template %s: not a file, a template (no '{{' or '{%%') or a built-in "
            "name (chatml, llama2)",
            value ? value : "(null)");
        return -ENOENT;
    }
    *src = strdup(text);
    if (!*src) {
        return tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    return 0;
}

int chat_template_from_config(struct json_object *cfg, const char *name, const char **src,
                              char *err, size_t errlen)
{
    struct json_object *ct = NULL;
    *src = NULL;
    if (!cfg || !json_object_object_get_ex(cfg, "chat_template", &ct) || !ct) {
        return tandem_fail(err, errlen, -ENOENT, "chat_template: not set");
    }
    if (json_object_is_type(ct, json_type_string)) {
        *src = json_object_get_string(ct);
        return 0;
    }
    if (!json_object_is_type(ct, json_type_array)) {
        return tandem_fail(err, errlen, -EINVAL, "chat_template: expected string or array");
    }
    const char *want = name ? name : "default";
    size_t n = json_object_array_length(ct);
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(ct, i), *nm = NULL, *tp = NULL;
        if (!json_object_is_type(e, json_type_object) ||
            !json_object_object_get_ex(e, "name", &nm) ||
            !json_object_object_get_ex(e, "template", &tp) ||
            !json_object_is_type(nm, json_type_string) ||
            !json_object_is_type(tp, json_type_string)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "chat_template[%zu]: expected {name: string, template: string}", i);
        }
        if (strcmp(json_object_get_string(nm), want) == 0) {
            *src = json_object_get_string(tp);
            return 0;
        }
    }
    return tandem_fail(err, errlen, -ENOENT, "chat_template: no template named '%s'", want);
}

int chat_template_config_token(struct json_object *cfg, const char *field, const char **out,
                               char *err, size_t errlen)
{
    struct json_object *v = NULL;
    *out = NULL;
    if (!cfg || !json_object_object_get_ex(cfg, field, &v) || !v) {
        return 0;
    }
    if (json_object_is_type(v, json_type_object)) {
        struct json_object *content = NULL;
        if (!json_object_object_get_ex(v, "content", &content) ||
            !json_object_is_type(content, json_type_string)) {
            return tandem_fail(err, errlen, -EINVAL, "%s.content: expected string", field);
        }
        v = content;
    }
    if (!json_object_is_type(v, json_type_string)) {
        return tandem_fail(err, errlen, -EINVAL, "%s: expected string or {content: string}", field);
    }
    *out = json_object_get_string(v);
    return 0;
}
