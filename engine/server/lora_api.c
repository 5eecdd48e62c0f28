/*
 * LoRA adapter management requests (lora_api.h).
 */
#include "engine/server/lora_api.h"

#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/err.h"
#include "lib/json.h"

int lora_module_parse(const char *spec, char **name, char **path, char *err, size_t errlen)
{
    *name = *path = NULL;
    const char *n = NULL, *p = NULL;
    size_t nlen = 0;
    struct json_object *o = NULL;
    if (spec[0] == '{') {
        char jerr[256], e[256] = "";
        const char *base = NULL;
        o = json_parse(spec, strlen(spec), jerr, sizeof jerr);
        if (!o || !json_object_is_type(o, json_type_object)) {
            json_object_put(o);
            return tandem_fail(err, errlen, -EINVAL, "'%s': %s", spec,
                               o ? "expected a JSON object" : jerr);
        }
        if (json_get_string(o, "name", &n, e, sizeof e) != 0 ||
            json_get_string(o, "path", &p, e, sizeof e) != 0 ||
            json_opt_string(o, "base_model_name", NULL, &base, e, sizeof e) != 0) {
            json_object_put(o);
            return tandem_fail(err, errlen, -EINVAL, "'%s': %s", spec, e);
        }
        nlen = strlen(n);
    } else {
        const char *eq = strchr(spec, '=');
        if (!eq) {
            return tandem_fail(err, errlen, -EINVAL, "'%s': expected name=path or a JSON object",
                               spec);
        }
        n = spec;
        nlen = (size_t)(eq - spec);
        p = eq + 1;
    }
    int rc = 0;
    if (nlen == 0 || !p[0]) {
        rc = tandem_fail(err, errlen, -EINVAL, "'%s': the name and the path must not be empty",
                         spec);
    } else if (!(*name = strndup(n, nlen)) || !(*path = strdup(p))) {
        free(*name);
        *name = NULL;
        rc = tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    json_object_put(o);
    return rc;
}

bool lora_runtime_updating_allowed(void)
{
    const char *v = getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
    if (!v) {
        return false;
    }
    while (isspace((unsigned char)*v)) {
        v++;
    }
    size_t len = strlen(v);
    while (len > 0 && isspace((unsigned char)v[len - 1])) {
        len--;
    }
    return (len == 1 && v[0] == '1') || (len == 4 && strncasecmp(v, "true", 4) == 0);
}

/* The body's JSON object, or a 400. */
static struct json_object *body_object(const char *body, size_t len, struct openai_error *err)
{
    char jerr[256];
    struct json_object *o = json_parse(body ? body : "", len, jerr, sizeof jerr);
    if (!o || !json_object_is_type(o, json_type_object)) {
        openai_error_set(err, 400, NULL, "%s", o ? "the body must be a JSON object" : jerr);
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* A string field that may be absent or null; a 400 for another type. */
static int opt_string(struct json_object *o, const char *key, const char **out,
                      struct openai_error *err)
{
    char e[256];
    if (json_opt_string(o, key, NULL, out, e, sizeof e) != 0) {
        openai_error_set(err, 400, key, "%s", e);
        return -1;
    }
    return 0;
}

int lora_api_load(lora_registry *r, const char *body, size_t len, char *msg, size_t msglen,
                  struct openai_error *err)
{
    struct json_object *o = body_object(body, len, err);
    if (!o) {
        return -1;
    }
    const char *name = NULL, *path = NULL;
    int rc = -1;
    if (opt_string(o, "lora_name", &name, err) != 0 ||
        opt_string(o, "lora_path", &path, err) != 0) {
        goto out;
    }
    if (!name || !name[0] || !path || !path[0]) {
        openai_error_set(err, 400, NULL, "Both 'lora_name' and 'lora_path' must be provided.");
        goto out;
    }
    char e[1024];
    int lrc = lora_registry_load(r, name, path, e, sizeof e);
    if (lrc != 0) {
        openai_error_set(err, lrc == -ENOENT ? 404 : lrc == -ENOMEM ? 500 : 400, NULL, "%s", e);
        goto out;
    }
    snprintf(msg, msglen, "Success: LoRA adapter '%s' added successfully.", name);
    rc = 0;
out:
    json_object_put(o);
    return rc;
}

int lora_api_unload(lora_registry *r, const char *body, size_t len, char *msg, size_t msglen,
                    struct openai_error *err)
{
    struct json_object *o = body_object(body, len, err);
    if (!o) {
        return -1;
    }
    const char *name = NULL;
    int rc = -1;
    if (opt_string(o, "lora_name", &name, err) != 0) {
        goto out;
    }
    if (!name && !json_get(o, "lora_int_id")) {
        openai_error_set(err, 400, NULL,
                         "either 'lora_name' and 'lora_int_id' needs to be provided.");
        goto out;
    }
    if (!name || lora_registry_unload(r, name) != 0) {
        openai_error_set(err, 404, NULL, "The lora adapter '%s' cannot be found.",
                         name ? name : "None");
        goto out;
    }
    snprintf(msg, msglen, "Success: LoRA adapter '%s' removed successfully.", name);
    rc = 0;
out:
    json_object_put(o);
    return rc;
}
