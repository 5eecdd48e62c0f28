/*
 * tandem-render-chat: renders the conversations of a cases file with a tokenizer's chat template
 * through chat_template_render, printing one JSON line per case in the format of
 * engine/reference/render_chat.mjs, so the two can be compared line by line
 * (engine/template/tests/vs_lenml.sh).
 *
 *   tandem-render-chat --config tokenizer_config.json --cases conversations.json --name NAME
 *                      [--chat-template VALUE]
 *
 * The cases file: {"date_string": "...", "now_epoch": N, "cases": [{"name", "messages",
 * "add_generation_prompt", "tools"?}]}; date_string, now_epoch (as JINJA_NOW_VAR) and tools
 * (none when absent, as Hugging Face passes it) are passed to the template, and so are the
 * members of the config's "tandem_template_vars" object (a test fixture's extra variables, as a
 * request's chat_template_kwargs would pass them: firefunction's `functions`). A config without
 * chat_template falls back to the built-in chatml template, as the server does; --chat-template
 * overrides it (file, inline template or built-in name).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/chat_template.h"
#include "lib/json.h"
#include "lib/version.h"

static struct json_object *load_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tandem-render-chat: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct buf b;
    buf_init(&b, 64u << 20);
    char chunk[65536];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        rc = buf_append(&b, chunk, n);
    }
    fclose(f);
    char err[256] = "";
    struct json_object *o = rc ? NULL : json_parse(b.data ? b.data : "", b.len, err, sizeof(err));
    if (!o) {
        fprintf(stderr, "tandem-render-chat: %s: %s\n", path, rc ? "too large" : err);
    }
    buf_free(&b);
    return o;
}

static int emit(const char *name, const char *case_name, int rc, const char *text, size_t len,
                const char *err)
{
    struct json_object *line = json_object_new_object();
    if (!line) {
        return -ENOMEM;
    }
    json_object_object_add(line, "tokenizer", json_object_new_string(name));
    json_object_object_add(line, "case", json_object_new_string(case_name));
    json_object_object_add(line, "ok", json_object_new_boolean(rc == 0));
    if (rc == 0) {
        json_object_object_add(line, "text", json_object_new_string_len(text, (int)len));
    } else {
        json_object_object_add(line, "raised", json_object_new_boolean(rc == JINJA_ERAISED));
        json_object_object_add(line, "error", json_object_new_string(err));
    }
    struct buf b;
    buf_init(&b, 64u << 20);
    int wrc = json_to_buf(line, 0, &b);
    if (!wrc) {
        printf("%s\n", buf_cstr(&b));
    }
    buf_free(&b);
    json_object_put(line);
    return wrc;
}

int main(int argc, char **argv)
{
    const char *config_path = NULL, *cases_path = NULL, *name = "model", *override = NULL;
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tandem-render-chat %s\n", TANDEM_VERSION);
        return 0;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--config") == 0) {
            config_path = argv[i + 1];
        } else if (strcmp(argv[i], "--cases") == 0) {
            cases_path = argv[i + 1];
        } else if (strcmp(argv[i], "--name") == 0) {
            name = argv[i + 1];
        } else if (strcmp(argv[i], "--chat-template") == 0) {
            override = argv[i + 1];
        } else {
            fprintf(stderr, "tandem-render-chat: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (!cases_path || (!config_path && !override) || argc % 2 == 0) {
        fprintf(stderr, "usage: tandem-render-chat --config tokenizer_config.json --cases "
                        "conversations.json [--name NAME] [--chat-template VALUE]\n");
        return 2;
    }
    int status = 1;
    char err[1024] = "";
    char *override_src = NULL;
    struct json_object *cfg = config_path ? load_json(config_path) : NULL;
    struct json_object *cases = load_json(cases_path);
    struct json_object *extra = json_object_new_object();
    if ((config_path && !cfg) || !cases || !extra) {
        goto out;
    }
    const char *src = NULL, *bos = NULL, *eos = NULL;
    if (override) {
        if (chat_template_resolve_arg(override, &override_src, err, sizeof(err)) != 0) {
            fprintf(stderr, "tandem-render-chat: %s\n", err);
            goto out;
        }
        src = override_src;
    } else {
        int rc = chat_template_from_config(cfg, NULL, &src, err, sizeof(err));
        if (rc == -EINVAL) {
            fprintf(stderr, "tandem-render-chat: %s: %s\n", config_path, err);
            goto out;
        }
    }
    if (chat_template_config_token(cfg, "bos_token", &bos, err, sizeof(err)) != 0 ||
        chat_template_config_token(cfg, "eos_token", &eos, err, sizeof(err)) != 0) {
        fprintf(stderr, "tandem-render-chat: %s: %s\n", config_path, err);
        goto out;
    }
    struct json_object *vars = json_get(cfg, "tandem_template_vars");
    if (json_object_is_type(vars, json_type_object)) {
        json_object_object_foreach(vars, key, val)
        {
            json_object_object_add(extra, key, val ? json_object_get(val) : NULL);
        }
    }
    struct json_object *v = json_get(cases, "date_string");
    if (v) {
        json_object_object_add(extra, "date_string", json_object_get(v));
    }
    v = json_get(cases, "now_epoch");
    if (v) {
        json_object_object_add(extra, JINJA_NOW_VAR, json_object_get(v));
    }
    struct json_object *list = json_get(cases, "cases");
    if (!json_object_is_type(list, json_type_array)) {
        fprintf(stderr, "tandem-render-chat: %s: cases: expected array\n", cases_path);
        goto out;
    }
    status = 0;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        struct json_object *c = json_object_array_get_idx(list, i);
        const char *case_name = NULL;
        int agp = 0;
        struct json_object *messages = NULL;
        if (json_get_string(c, "name", &case_name, err, sizeof(err)) != 0 ||
            json_opt_bool(c, "add_generation_prompt", 0, &agp, err, sizeof(err)) != 0 ||
            json_get_array(c, "messages", &messages, err, sizeof(err)) != 0) {
            fprintf(stderr, "tandem-render-chat: cases[%zu]: %s\n", i, err);
            status = 1;
            break;
        }
        struct json_object *tools = json_get(c, "tools");
        json_object_object_add(extra, "tools", tools ? json_object_get(tools) : NULL);
        char *text = NULL;
        size_t len = 0;
        err[0] = '\0';
        int rc = chat_template_render(src, messages, agp != 0, bos, eos, extra, &text, &len, err,
                                      sizeof(err));
        if (emit(name, case_name, rc, text, len, err) != 0) {
            status = 1;
        }
        free(text);
    }
out:
    free(override_src);
    json_object_put(extra);
    json_object_put(cases);
    json_object_put(cfg);
    return status;
}
