/*
 * /v1/responses (see responses.h): the request turned into the chat body vLLM renders for it, and
 * the ResponsesResponse body and SSE events built from what the chat path generated.
 */
#include "engine/server/responses.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"

#define RESPONSES_MAX_TEXT ((size_t)64 << 20) /* bytes of one streamed item's text */

/* ---- parsing ---- */

/* A member of obj: 1 present (*v NULL for JSON null), 0 absent. */
static int member(struct json_object *obj, const char *key, struct json_object **v)
{
    *v = NULL;
    return json_object_object_get_ex(obj, key, v) ? 1 : 0;
}

static int bad(struct openai_error *err, const char *param, const char *fmt, ...)
    TANDEM_PRINTF(3, 4);
static int bad(struct openai_error *err, const char *param, const char *fmt, ...)
{
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): clang 14 false positive */
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    openai_error_set(err, 400, param, "%s", msg);
    return -EINVAL;
}

static int oom(struct openai_error *err)
{
    openai_error_set(err, 500, NULL, "out of memory");
    return -ENOMEM;
}

/* obj[key] as a string (absent or null: *out untouched). */
static int opt_str(struct json_object *obj, const char *key, const char *param, const char **out,
                   struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_string)) {
        return bad(err, param, "'%s': input should be a valid string, got %s", param,
                   json_type_label(v));
    }
    *out = json_object_get_string(v);
    return 0;
}

static int opt_bool(struct json_object *obj, const char *key, int *out, struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_boolean)) {
        return bad(err, key, "'%s': input should be a valid boolean, got %s", key,
                   json_type_label(v));
    }
    *out = json_object_get_boolean(v) ? 1 : 0;
    return 0;
}

/* An integer (3.0 allowed, as pydantic's lax int); *present 0 when absent or null. */
static int opt_int(struct json_object *obj, const char *key, int64_t *out, int *present,
                   struct openai_error *err)
{
    struct json_object *v;
    *present = 0;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
    } else if (json_object_is_type(v, json_type_double) &&
               json_object_get_double(v) == floor(json_object_get_double(v)) &&
               fabs(json_object_get_double(v)) < 9e18) {
        *out = (int64_t)json_object_get_double(v);
    } else {
        return bad(err, key, "'%s': input should be a valid integer, got %s", key,
                   json_type_label(v));
    }
    *present = 1;
    return 0;
}

static int opt_obj(struct json_object *obj, const char *key, const char *param,
                   struct json_object **out, struct openai_error *err)
{
    struct json_object *v;
    if (!member(obj, key, &v) || !v) {
        return 0;
    }
    if (!json_object_is_type(v, json_type_object)) {
        return bad(err, param, "'%s': input should be an object, got %s", param,
                   json_type_label(v));
    }
    *out = v;
    return 0;
}

/* The request's own number (the answer repeats it as written). */
static void raw_number(struct json_object *root, const char *key, int *has, double *out)
{
    struct json_object *v;
    if (member(root, key, &v) && v &&
        (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int))) {
        *has = 1;
        *out = json_object_get_double(v);
    }
}

static int one_of(const char *s, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, set[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int check_include(struct responses_request *rr, struct openai_error *err)
{
    static const char *const known[] = {
        "code_interpreter_call.outputs", "computer_call_output.output.image_url",
        "file_search_call.results",      "message.input_image.image_url",
        "message.output_text.logprobs",  "reasoning.encrypted_content",
    };
    struct json_object *inc;
    if (!member(rr->root, "include", &inc) || !inc) {
        return 0;
    }
    if (!json_object_is_type(inc, json_type_array)) {
        return bad(err, "include", "'include': input should be an array, got %s",
                   json_type_label(inc));
    }
    for (size_t i = 0; i < json_object_array_length(inc); i++) {
        struct json_object *e = json_object_array_get_idx(inc, i);
        if (!json_object_is_type(e, json_type_string) ||
            !one_of(json_object_get_string(e), known, ARRAY_SIZE(known))) {
            return bad(err, "include",
                       "'include[%zu]': input should be 'code_interpreter_call.outputs', "
                       "'computer_call_output.output.image_url', 'file_search_call.results', "
                       "'message.input_image.image_url', 'message.output_text.logprobs' or "
                       "'reasoning.encrypted_content'",
                       i);
        }
        if (strcmp(json_object_get_string(e), "message.output_text.logprobs") == 0) {
            rr->include_logprobs = 1;
        }
    }
    return 0;
}

static int check_metadata(struct responses_request *rr, struct openai_error *err)
{
    int rc = opt_obj(rr->root, "metadata", "metadata", &rr->metadata, err);
    if (rc != 0 || !rr->metadata) {
        return rc;
    }
    json_object_object_foreach(rr->metadata, key, val)
    {
        if (!json_object_is_type(val, json_type_string)) {
            return bad(err, "metadata", "'metadata.%.60s': input should be a valid string, got %s",
                       key, json_type_label(val));
        }
    }
    return 0;
}

/* tools: objects with a type; a function tool has a name, parameters an object. */
static int check_tools(struct responses_request *rr, size_t *n_functions, struct openai_error *err)
{
    struct json_object *tools;
    *n_functions = 0;
    if (!member(rr->root, "tools", &tools) || !tools) {
        return 0;
    }
    if (!json_object_is_type(tools, json_type_array)) {
        return bad(err, "tools", "'tools': input should be an array, got %s",
                   json_type_label(tools));
    }
    rr->tools = tools;
    for (size_t i = 0; i < json_object_array_length(tools); i++) {
        struct json_object *t = json_object_array_get_idx(tools, i), *v;
        char param[48];
        const char *type = NULL, *name = NULL;
        snprintf(param, sizeof param, "tools[%zu]", i);
        if (!json_object_is_type(t, json_type_object)) {
            return bad(err, param, "'%s': input should be an object, got %s", param,
                       json_type_label(t));
        }
        snprintf(param, sizeof param, "tools[%zu].type", i);
        int rc = opt_str(t, "type", param, &type, err);
        if (rc != 0) {
            return rc;
        }
        if (!type) {
            return bad(err, param, "'%s' is required", param);
        }
        if (strcmp(type, "function") != 0) {
            continue; /* hosted tools: no tool server here, as vLLM without one */
        }
        snprintf(param, sizeof param, "tools[%zu].name", i);
        if ((rc = opt_str(t, "name", param, &name, err)) != 0) {
            return rc;
        }
        if (!name) {
            return bad(err, param, "'%s' is required", param);
        }
        snprintf(param, sizeof param, "tools[%zu].parameters", i);
        if (member(t, "parameters", &v) && v && !json_object_is_type(v, json_type_object)) {
            return bad(err, param, "'%s': input should be an object, got %s", param,
                       json_type_label(v));
        }
        snprintf(param, sizeof param, "tools[%zu].description", i);
        const char *desc = NULL;
        if ((rc = opt_str(t, "description", param, &desc, err)) != 0) {
            return rc;
        }
        if (member(t, "strict", &v) && v && !json_object_is_type(v, json_type_boolean)) {
            snprintf(param, sizeof param, "tools[%zu].strict", i);
            return bad(err, param, "'%s': input should be a valid boolean, got %s", param,
                       json_type_label(v));
        }
        (*n_functions)++;
    }
    return 0;
}

static int check_tool_choice(struct responses_request *rr, struct openai_error *err)
{
    struct json_object *tc;
    if (!member(rr->root, "tool_choice", &tc) || !tc) {
        return 0;
    }
    if (json_object_is_type(tc, json_type_string)) {
        static const char *const modes[] = {"none", "auto", "required"};
        if (!one_of(json_object_get_string(tc), modes, ARRAY_SIZE(modes))) {
            return bad(err, "tool_choice",
                       "'tool_choice': input should be 'none', 'auto', 'required' or an object, "
                       "got '%.60s'",
                       json_object_get_string(tc));
        }
    } else if (json_object_is_type(tc, json_type_object)) {
        const char *type = NULL, *name = NULL;
        int rc = opt_str(tc, "type", "tool_choice.type", &type, err);
        if (rc != 0) {
            return rc;
        }
        if (!type) {
            return bad(err, "tool_choice.type", "'tool_choice.type' is required");
        }
        if (strcmp(type, "function") == 0) {
            if ((rc = opt_str(tc, "name", "tool_choice.name", &name, err)) != 0) {
                return rc;
            }
            if (!name) {
                return bad(err, "tool_choice.name", "'tool_choice.name' is required");
            }
        }
    } else {
        return bad(err, "tool_choice",
                   "'tool_choice': input should be a string or an object, got %s",
                   json_type_label(tc));
    }
    rr->tool_choice = tc;
    return 0;
}

/* text.format: {type: text | json_schema (name, schema) | json_object}; vLLM answers
 * json_object with NotImplementedError (501). */
static int check_text(struct responses_request *rr, struct json_object **format,
                      struct openai_error *err)
{
    int rc = opt_obj(rr->root, "text", "text", &rr->text, err);
    *format = NULL;
    if (rc != 0 || !rr->text ||
        (rc = opt_obj(rr->text, "format", "text.format", format, err)) != 0 || !*format) {
        return rc;
    }
    const char *type = NULL, *name = NULL;
    if ((rc = opt_str(*format, "type", "text.format.type", &type, err)) != 0) {
        return rc;
    }
    if (!type) {
        return bad(err, "text.format.type", "'text.format.type' is required");
    }
    if (strcmp(type, "json_object") == 0) {
        openai_error_set(err, 501, NULL, "json_object is not supported");
        snprintf(err->type, sizeof err->type, "NotImplementedError");
        return -EINVAL;
    }
    if (strcmp(type, "text") == 0) {
        return 0;
    }
    if (strcmp(type, "json_schema") != 0) {
        return bad(err, "text.format.type",
                   "'text.format.type': input should be 'text', 'json_schema' or 'json_object', "
                   "got '%.60s'",
                   type);
    }
    struct json_object *schema = NULL;
    if ((rc = opt_str(*format, "name", "text.format.name", &name, err)) != 0 ||
        (rc = opt_obj(*format, "schema", "text.format.schema", &schema, err)) != 0) {
        return rc;
    }
    if (!name) {
        return bad(err, "text.format.name", "'text.format.name' is required");
    }
    if (!schema) {
        return bad(err, "text.format.schema", "'text.format.schema' is required");
    }
    return 0;
}

/* The answer's id from the body's request_id (vLLM uses it as given; here it also names the
 * engine request and log lines, so it is kept to a safe alphabet). */
static int check_request_id(struct responses_request *rr, struct openai_error *err)
{
    int rc = opt_str(rr->root, "request_id", "request_id", &rr->request_id, err);
    if (rc != 0 || !rr->request_id) {
        return rc;
    }
    size_t n = strlen(rr->request_id);
    if (n == 0 || n > RESPONSES_MAX_REQUEST_ID ||
        strspn(rr->request_id,
               "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_.:") != n) {
        return bad(err, "request_id",
                   "'request_id': 1 to %d characters of letters, digits, '-', '_', '.' and ':'",
                   RESPONSES_MAX_REQUEST_ID);
    }
    return 0;
}

/* The fields the answer echoes, and the checks pydantic makes on them. */
static int read_fields(struct responses_request *rr, struct json_object **format, size_t *n_fn,
                       struct openai_error *err)
{
    struct json_object *root = rr->root, *v;
    int64_t i64;
    int present, rc;
    if (member(root, "prompt", &v) && v) {
        return bad(err, "prompt", "prompt template is not supported");
    }
    if ((rc = opt_bool(root, "store", &rr->store, err)) != 0 ||
        (rc = opt_bool(root, "background", &rr->background, err)) != 0) {
        return rc;
    }
    if (rr->background && !rr->store) {
        return bad(err, "background", "background can only be used when `store` is true");
    }
    if (!member(root, "input", &v) || !v) {
        return bad(err, "input", "'input' is required");
    }
    if (!json_object_is_type(v, json_type_string) && !json_object_is_type(v, json_type_array)) {
        return bad(err, "input", "'input': input should be a string or an array of items, got %s",
                   json_type_label(v));
    }
    if ((rc = opt_str(root, "instructions", "instructions", &rr->instructions, err)) != 0 ||
        (rc = check_metadata(rr, err)) != 0 || (rc = check_include(rr, err)) != 0 ||
        (rc = opt_int(root, "top_logprobs", &i64, &present, err)) != 0) {
        return rc;
    }
    if (member(root, "top_logprobs", &v) && !v) {
        rr->top_logprobs = -1; /* null: no logprobs even when included (vLLM) */
    }
    if ((rc = check_text(rr, format, err)) != 0 ||
        (rc = opt_obj(root, "reasoning", "reasoning", &rr->reasoning, err)) != 0 ||
        (rc = check_tools(rr, n_fn, err)) != 0 || (rc = check_tool_choice(rr, err)) != 0 ||
        (rc = opt_bool(root, "parallel_tool_calls", &rr->parallel_tool_calls, err)) != 0 ||
        (rc = opt_str(root, "previous_response_id", "previous_response_id",
                      &rr->previous_response_id, err)) != 0 ||
        (rc = opt_str(root, "user", "user", &rr->user, err)) != 0 ||
        (rc = opt_int(root, "max_tool_calls", &rr->max_tool_calls, &rr->has_max_tool_calls, err)) !=
            0 ||
        (rc = check_request_id(rr, err)) != 0) {
        return rc;
    }
    if (rr->reasoning) {
        const char *effort = NULL;
        if ((rc = opt_str(rr->reasoning, "effort", "reasoning.effort", &effort, err)) != 0) {
            return rc;
        }
    }
    if (member(root, "service_tier", &v)) {
        static const char *const tiers[] = {"auto", "default", "flex", "scale", "priority"};
        if (!v || !json_object_is_type(v, json_type_string) ||
            !one_of(json_object_get_string(v), tiers, ARRAY_SIZE(tiers))) {
            return bad(err, "service_tier",
                       "'service_tier': input should be 'auto', 'default', 'flex', 'scale' or "
                       "'priority'");
        }
        rr->service_tier = json_object_get_string(v);
    }
    if (member(root, "truncation", &v) && v) {
        static const char *const modes[] = {"auto", "disabled"};
        if (!json_object_is_type(v, json_type_string) ||
            !one_of(json_object_get_string(v), modes, ARRAY_SIZE(modes))) {
            return bad(err, "truncation", "'truncation': input should be 'auto' or 'disabled'");
        }
        rr->truncation = json_object_get_string(v);
    }
    raw_number(root, "temperature", &rr->has_temperature, &rr->temperature);
    raw_number(root, "top_p", &rr->has_top_p, &rr->top_p);
    return 0;
}

/* ---- input items → chat messages (vLLM's construct_input_messages) ---- */

/* The last message of msgs when it is an assistant's, else NULL. */
static struct json_object *prev_assistant(struct json_object *msgs)
{
    size_t n = json_object_array_length(msgs);
    struct json_object *m = n ? json_object_array_get_idx(msgs, n - 1) : NULL, *role;
    if (m && json_object_object_get_ex(m, "role", &role) &&
        strcmp(json_object_get_string(role), "assistant") == 0) {
        return m;
    }
    return NULL;
}

/* A user / system / developer message's content: a string, or input_text parts (chat text
 * parts, joined with "\n" by the chat parser, as vLLM's string content format). */
static int user_content(struct json_object *c, size_t i, struct json_object **out,
                        struct openai_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "input[%zu].content", i);
    if (json_object_is_type(c, json_type_string)) {
        *out = json_object_get(c);
        return 0;
    }
    if (!json_object_is_type(c, json_type_array)) {
        return bad(err, param,
                   "'%s': input should be a string or an array of content parts, got %s", param,
                   json_type_label(c));
    }
    struct json_object *parts = json_object_new_array();
    if (!parts) {
        return oom(err);
    }
    for (size_t j = 0; j < json_object_array_length(c); j++) {
        struct json_object *p = json_object_array_get_idx(c, j), *t;
        const char *type = NULL, *text = NULL;
        snprintf(param, sizeof param, "input[%zu].content[%zu]", i, j);
        int rc = 0;
        if (!json_object_is_type(p, json_type_object)) {
            rc = bad(err, param, "'%s': input should be an object, got %s", param,
                     json_type_label(p));
        } else if ((rc = opt_str(p, "type", param, &type, err)) == 0 &&
                   (!type || (strcmp(type, "input_text") != 0 && strcmp(type, "text") != 0))) {
            rc = bad(err, param,
                     "'%s': content part type '%.40s' is not supported (only 'input_text')", param,
                     type ? type : "null");
        } else if (rc == 0 && (rc = opt_str(p, "text", param, &text, err)) == 0 && !text) {
            rc = bad(err, param, "'%s.text' is required", param);
        }
        struct json_object *part = rc == 0 ? json_object_new_object() : NULL;
        if (rc == 0 &&
            (!part || !(t = json_object_new_string(text)) ||
             json_object_object_add(part, "type", json_object_new_string("text")) ||
             json_object_object_add(part, "text", t) || json_object_array_add(parts, part))) {
            json_object_put(part);
            rc = oom(err);
        }
        if (rc != 0) {
            json_object_put(parts);
            return rc;
        }
    }
    *out = parts;
    return 0;
}

/* An assistant message's text: the string, or the first part's text (vLLM's rule). */
static const char *assistant_text(struct json_object *c)
{
    struct json_object *first, *t;
    if (c && json_object_is_type(c, json_type_string)) {
        return json_object_get_string(c);
    }
    if (c && json_object_is_type(c, json_type_array) && json_object_array_length(c) > 0) {
        first = json_object_array_get_idx(c, 0);
        if (json_object_is_type(first, json_type_object) &&
            json_object_object_get_ex(first, "text", &t) &&
            json_object_is_type(t, json_type_string)) {
            return json_object_get_string(t);
        }
    }
    return "";
}

/* Adds key: value to m (value's reference taken). -ENOMEM when out of memory. */
static int put_member(struct json_object *m, const char *key, struct json_object *value)
{
    if (!value) {
        return -ENOMEM;
    }
    if (json_object_object_add(m, key, value) != 0) {
        json_object_put(value);
        return -ENOMEM;
    }
    return 0;
}

/* A new {"role": role} message appended to msgs (NULL when out of memory). */
static struct json_object *new_message(struct json_object *msgs, const char *role)
{
    struct json_object *m = json_object_new_object();
    if (!m || put_member(m, "role", json_object_new_string(role)) != 0 ||
        json_object_array_add(msgs, m) != 0) {
        json_object_put(m);
        return NULL;
    }
    return m;
}

/* A message item: {"role", "content", "type"?: "message", "status"?}. */
static int message_item(struct json_object *item, size_t i, struct json_object *msgs,
                        struct openai_error *err)
{
    static const char *const roles[] = {"user", "system", "developer", "assistant"};
    char param[48];
    const char *role = NULL;
    struct json_object *c = NULL, *m;
    snprintf(param, sizeof param, "input[%zu].role", i);
    int rc = opt_str(item, "role", param, &role, err);
    if (rc != 0) {
        return rc;
    }
    if (!role || !one_of(role, roles, ARRAY_SIZE(roles))) {
        return bad(err, param, "'%s': input should be 'user', 'system', 'developer' or 'assistant'",
                   param);
    }
    snprintf(param, sizeof param, "input[%zu].content", i);
    if (!member(item, "content", &c) || !c) {
        return bad(err, param, "'%s' is required", param);
    }
    if (strcmp(role, "assistant") == 0) {
        if (!json_object_is_type(c, json_type_string) && !json_object_is_type(c, json_type_array)) {
            return bad(err, param,
                       "'%s': input should be a string or an array of content parts, got %s", param,
                       json_type_label(c));
        }
        struct json_object *prev = prev_assistant(msgs), *pc = NULL;
        if (prev && (!member(prev, "content", &pc) || !pc)) {
            /* vLLM fills the content of an assistant message that has none (tool calls) */
            return put_member(prev, "content", json_object_new_string(assistant_text(c))) ? oom(err)
                                                                                          : 0;
        }
        m = new_message(msgs, "assistant");
        if (!m || put_member(m, "content", json_object_new_string(assistant_text(c))) != 0) {
            return oom(err);
        }
        return 0;
    }
    struct json_object *content = NULL;
    if ((rc = user_content(c, i, &content, err)) != 0) {
        return rc;
    }
    m = new_message(msgs, role);
    if (!m || put_member(m, "content", content) != 0) {
        if (!m) {
            json_object_put(content);
        }
        return oom(err);
    }
    return 0;
}

/* {"type": "function_call", "call_id", "name", "arguments"}: a tool call of the previous
 * assistant message, or of a new one. */
static int function_call_item(struct json_object *item, size_t i, struct json_object *msgs,
                              struct openai_error *err)
{
    static const char *const keys[] = {"call_id", "name", "arguments"};
    const char *vals[3] = {NULL, NULL, NULL};
    char param[64];
    for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
        snprintf(param, sizeof param, "input[%zu].%s", i, keys[k]);
        int rc = opt_str(item, keys[k], param, &vals[k], err);
        if (rc != 0) {
            return rc;
        }
        if (!vals[k]) {
            return bad(err, param, "'%s' is required", param);
        }
    }
    struct json_object *call = json_object_new_object(), *fn = json_object_new_object();
    if (!call || !fn || put_member(fn, "name", json_object_new_string(vals[1])) != 0 ||
        put_member(fn, "arguments", json_object_new_string(vals[2])) != 0 ||
        put_member(call, "id", json_object_new_string(vals[0])) != 0 ||
        put_member(call, "type", json_object_new_string("function")) != 0) {
        json_object_put(call);
        json_object_put(fn);
        return oom(err);
    }
    if (put_member(call, "function", fn) != 0) {
        json_object_put(call);
        return oom(err);
    }
    struct json_object *m = prev_assistant(msgs), *calls = NULL;
    if (!m) {
        m = new_message(msgs, "assistant");
    }
    if (m && (!member(m, "tool_calls", &calls) || !calls)) {
        calls = json_object_new_array();
        if (put_member(m, "tool_calls", calls) != 0) {
            calls = NULL;
        }
    }
    if (!m || !calls || json_object_array_add(calls, call) != 0) {
        json_object_put(call);
        return oom(err);
    }
    return 0;
}

/* {"type": "function_call_output", "call_id", "output"}: a tool message. */
static int function_output_item(struct json_object *item, size_t i, struct json_object *msgs,
                                struct openai_error *err)
{
    const char *call_id = NULL, *output = NULL;
    char param[64], param2[64];
    snprintf(param, sizeof param, "input[%zu].call_id", i);
    snprintf(param2, sizeof param2, "input[%zu].output", i);
    int rc = opt_str(item, "call_id", param, &call_id, err);
    if (rc == 0) {
        rc = opt_str(item, "output", param2, &output, err);
    }
    if (rc != 0) {
        return rc;
    }
    if (!call_id || !output) {
        return bad(err, call_id ? param2 : param, "'%s' is required", call_id ? param2 : param);
    }
    struct json_object *m = new_message(msgs, "tool");
    if (!m || put_member(m, "content", json_object_new_string(output)) != 0 ||
        put_member(m, "tool_call_id", json_object_new_string(call_id)) != 0) {
        return oom(err);
    }
    return 0;
}

/* {"type": "reasoning", "content"|"summary": [{"text"}]}: an assistant turn's reasoning. */
static int reasoning_item(struct json_object *item, struct json_object *msgs,
                          struct openai_error *err)
{
    struct json_object *list = NULL, *first, *t;
    const char *text = "";
    if ((member(item, "content", &list) && list) || (member(item, "summary", &list) && list)) {
        if (json_object_is_type(list, json_type_array) && json_object_array_length(list) > 0 &&
            (first = json_object_array_get_idx(list, 0)) &&
            json_object_object_get_ex(first, "text", &t) &&
            json_object_is_type(t, json_type_string)) {
            text = json_object_get_string(t);
        }
    }
    struct json_object *m = prev_assistant(msgs), *r;
    if (m && !(member(m, "reasoning", &r) && r)) {
        return put_member(m, "reasoning", json_object_new_string(text)) ? oom(err) : 0;
    }
    m = new_message(msgs, "assistant");
    if (!m || put_member(m, "reasoning", json_object_new_string(text)) != 0) {
        return oom(err);
    }
    return 0;
}

/* vLLM's should_continue_final_message: the last item is a message or reasoning item whose
 * status is in_progress or incomplete. */
static int continues_last(struct json_object *input)
{
    size_t n = json_object_array_length(input);
    struct json_object *last = n ? json_object_array_get_idx(input, n - 1) : NULL, *v;
    if (!last || !json_object_is_type(last, json_type_object)) {
        return 0;
    }
    const char *type =
        json_object_object_get_ex(last, "type", &v) && v ? json_object_get_string(v) : "message";
    if (strcmp(type, "message") != 0 && strcmp(type, "reasoning") != 0) {
        return 0;
    }
    const char *status = json_object_object_get_ex(last, "status", &v) && v &&
                                 json_object_is_type(v, json_type_string)
                             ? json_object_get_string(v)
                             : "";
    return strcmp(status, "in_progress") == 0 || strcmp(status, "incomplete") == 0;
}

static int build_messages(const struct responses_request *rr, struct json_object *chat,
                          struct openai_error *err)
{
    struct json_object *msgs = json_object_new_array(), *input, *m;
    if (!msgs || put_member(chat, "messages", msgs) != 0) {
        return oom(err);
    }
    if (rr->instructions && rr->instructions[0]) {
        m = new_message(msgs, "system");
        if (!m || put_member(m, "content", json_object_new_string(rr->instructions)) != 0) {
            return oom(err);
        }
    }
    json_object_object_get_ex(rr->root, "input", &input);
    if (json_object_is_type(input, json_type_string)) {
        m = new_message(msgs, "user");
        return !m || put_member(m, "content", json_object_get(input)) != 0 ? oom(err) : 0;
    }
    for (size_t i = 0; i < json_object_array_length(input); i++) {
        struct json_object *item = json_object_array_get_idx(input, i), *t;
        char param[48];
        snprintf(param, sizeof param, "input[%zu]", i);
        if (!json_object_is_type(item, json_type_object)) {
            return bad(err, param, "'%s': input should be an object, got %s", param,
                       json_type_label(item));
        }
        const char *type = "message";
        if (member(item, "type", &t) && t) {
            if (!json_object_is_type(t, json_type_string)) {
                return bad(err, param, "'%s.type': input should be a valid string, got %s", param,
                           json_type_label(t));
            }
            type = json_object_get_string(t);
        }
        int rc;
        if (strcmp(type, "message") == 0) {
            rc = message_item(item, i, msgs, err);
        } else if (strcmp(type, "function_call") == 0) {
            rc = function_call_item(item, i, msgs, err);
        } else if (strcmp(type, "function_call_output") == 0) {
            rc = function_output_item(item, i, msgs, err);
        } else if (strcmp(type, "reasoning") == 0) {
            rc = reasoning_item(item, msgs, err);
        } else {
            rc = bad(err, param, "'%s': input item type '%.40s' is not supported", param, type);
        }
        if (rc != 0) {
            return rc;
        }
    }
    if (continues_last(input) &&
        (put_member(chat, "add_generation_prompt", json_object_new_boolean(0)) != 0 ||
         put_member(chat, "continue_final_message", json_object_new_boolean(1)) != 0)) {
        return oom(err);
    }
    return 0;
}

/* ---- the rest of the chat body ---- */

/* Responses function tools as chat tools: {"type": "function", "function": {name, description,
 * parameters, strict}} (vLLM's convert_tool_responses_to_completions_format). */
static struct json_object *chat_tools(struct json_object *tools)
{
    static const char *const keys[] = {"name", "description", "parameters", "strict"};
    struct json_object *out = json_object_new_array();
    for (size_t i = 0; out && i < json_object_array_length(tools); i++) {
        struct json_object *t = json_object_array_get_idx(tools, i), *type, *v;
        json_object_object_get_ex(t, "type", &type);
        if (strcmp(json_object_get_string(type), "function") != 0) {
            continue;
        }
        struct json_object *fn = json_object_new_object(), *ct = json_object_new_object();
        int rc = fn && ct ? 0 : -ENOMEM;
        for (size_t k = 0; rc == 0 && k < ARRAY_SIZE(keys); k++) {
            if (member(t, keys[k], &v) && v) {
                rc = put_member(fn, keys[k], json_object_get(v));
            }
        }
        if (rc == 0 && put_member(ct, "type", json_object_new_string("function")) == 0 &&
            put_member(ct, "function", fn) == 0) {
            fn = NULL;
            rc = json_object_array_add(out, ct) == 0 ? 0 : -ENOMEM;
            ct = rc == 0 ? NULL : ct;
        } else {
            rc = -ENOMEM;
        }
        json_object_put(fn);
        json_object_put(ct);
        if (rc != 0) {
            json_object_put(out);
            return NULL;
        }
    }
    return out;
}

/* tool_choice for the chat body: "auto" becomes "none" when the server parses no calls (vLLM's
 * output is then the text), a function choice the chat's named form; other objects (hosted
 * tools, allowed_tools) are "auto". */
static struct json_object *chat_tool_choice(struct json_object *tc, int auto_tools)
{
    const char *mode = "auto";
    struct json_object *type, *name;
    if (tc && json_object_is_type(tc, json_type_string)) {
        mode = json_object_get_string(tc);
    } else if (tc && json_object_object_get_ex(tc, "type", &type) &&
               strcmp(json_object_get_string(type), "function") == 0 &&
               json_object_object_get_ex(tc, "name", &name)) {
        struct json_object *o = json_object_new_object(), *fn = json_object_new_object();
        if (!o || !fn || put_member(fn, "name", json_object_get(name)) != 0 ||
            put_member(o, "type", json_object_new_string("function")) != 0) {
            json_object_put(o);
            json_object_put(fn);
            return NULL;
        }
        if (put_member(o, "function", fn) != 0) {
            json_object_put(o);
            return NULL;
        }
        return o;
    }
    if (strcmp(mode, "auto") == 0 && !auto_tools) {
        mode = "none";
    }
    return json_object_new_string(mode);
}

/* text.format json_schema → response_format {"type": "json_schema", "json_schema": {name,
 * schema, strict}}. */
static struct json_object *chat_response_format(struct json_object *format)
{
    struct json_object *rf = json_object_new_object(), *js = json_object_new_object(), *v;
    static const char *const keys[] = {"name", "description", "schema", "strict"};
    int rc = rf && js ? put_member(rf, "type", json_object_new_string("json_schema")) : -ENOMEM;
    for (size_t k = 0; rc == 0 && k < ARRAY_SIZE(keys); k++) {
        if (member(format, keys[k], &v) && v) {
            rc = put_member(js, keys[k], json_object_get(v));
        }
    }
    if (rc == 0 && put_member(rf, "json_schema", js) == 0) {
        return rf;
    }
    json_object_put(js);
    json_object_put(rf);
    return NULL;
}

static int build_fields(const struct responses_request *rr, struct json_object *format, size_t n_fn,
                        int auto_tools, struct json_object *chat, struct openai_error *err)
{
    /* what ResponsesRequest shares with the chat request, read by the chat parser as it is */
    static const char *const same[] = {
        "model",
        "temperature",
        "top_p",
        "top_k",
        "logit_bias",
        "priority",
        "cache_salt",
        "skip_special_tokens",
        "user",
        "seed",
        "stop",
        "repetition_penalty",
        "ignore_eos",
        "stream",
        "include_stop_str_in_output",
        "structured_outputs",
        "parallel_tool_calls",
    };
    struct json_object *root = rr->root, *v, *so;
    for (size_t i = 0; i < ARRAY_SIZE(same); i++) {
        if (member(root, same[i], &v) && v && put_member(chat, same[i], json_object_get(v)) != 0) {
            return oom(err);
        }
    }
    if (member(root, "max_output_tokens", &v) && v &&
        put_member(chat, "max_completion_tokens", json_object_get(v)) != 0) {
        return oom(err);
    }
    /* the chat check gives the range errors (0 to 20) */
    if (rr->include_logprobs && rr->top_logprobs != -1 &&
        (put_member(chat, "logprobs", json_object_new_boolean(1)) != 0 ||
         (member(root, "top_logprobs", &v) && v &&
          put_member(chat, "top_logprobs", json_object_get(v)) != 0))) {
        return oom(err);
    }
    if (format && member(root, "structured_outputs", &so) && so) {
        return bad(err, NULL, "Cannot specify both structured_outputs and text.format");
    }
    struct json_object *type;
    if (format && json_object_object_get_ex(format, "type", &type) &&
        strcmp(json_object_get_string(type), "json_schema") == 0 &&
        put_member(chat, "response_format", chat_response_format(format)) != 0) {
        return oom(err);
    }
    if (rr->truncation && strcmp(rr->truncation, "auto") == 0 &&
        put_member(chat, "truncate_prompt_tokens", json_object_new_int(-1)) != 0) {
        return oom(err);
    }
    struct json_object *effort;
    if (rr->reasoning && json_object_object_get_ex(rr->reasoning, "effort", &effort) && effort) {
        struct json_object *kw = json_object_new_object();
        if (!kw || put_member(kw, "reasoning_effort", json_object_get(effort)) != 0) {
            json_object_put(kw);
            return oom(err);
        }
        if (put_member(chat, "chat_template_kwargs", kw) != 0) {
            return oom(err);
        }
    }
    if (n_fn > 0 &&
        (put_member(chat, "tools", chat_tools(rr->tools)) != 0 ||
         put_member(chat, "tool_choice", chat_tool_choice(rr->tool_choice, auto_tools)) != 0)) {
        return oom(err);
    }
    return 0;
}

int responses_parse(const char *body, size_t len, int auto_tools, struct responses_request **out,
                    struct openai_request *req, struct openai_error *err)
{
    char perr[256];
    struct json_object *chat = NULL, *format = NULL;
    size_t n_fn = 0;
    struct buf text;
    *out = NULL;
    memset(req, 0, sizeof *req);
    buf_init(&text, len * 2 + ((size_t)1 << 20));
    struct responses_request *rr = calloc(1, sizeof *rr);
    if (!rr) {
        return oom(err);
    }
    rr->store = 1;
    rr->parallel_tool_calls = 1;
    rr->service_tier = "auto";
    rr->truncation = "disabled";
    buf_init(&rr->st.text, RESPONSES_MAX_TEXT);
    buf_init(&rr->st.lps, RESPONSES_MAX_TEXT);
    buf_init(&rr->st.items, RESPONSES_MAX_TEXT * 2);
    int rc = json_parse_one(body, len, &rr->root, perr, sizeof perr);
    if (rc != 0) {
        rc = rc == -ENOMEM ? oom(err) : bad(err, NULL, "invalid JSON body: %s", perr);
        goto fail;
    }
    if (!rr->root || !json_object_is_type(rr->root, json_type_object)) {
        rc = bad(err, NULL, "the request body must be a JSON object, got %s",
                 json_type_label(rr->root));
        goto fail;
    }
    if ((rc = read_fields(rr, &format, &n_fn, err)) != 0) {
        goto fail;
    }
    chat = json_object_new_object();
    if (!chat) {
        rc = oom(err);
        goto fail;
    }
    if ((rc = build_messages(rr, chat, err)) != 0 ||
        (rc = build_fields(rr, format, n_fn, auto_tools, chat, err)) != 0) {
        goto fail;
    }
    if (json_to_buf(chat, 0, &text) != 0) {
        rc = oom(err);
        goto fail;
    }
    rc = openai_parse_chat(text.data, text.len, req, err);
    if (rc != 0) {
        responses_fix_error(err);
        goto fail;
    }
    if (rr->include_logprobs && rr->top_logprobs != -1) {
        rr->top_logprobs = req->logprobs; /* validated: 0 to OPENAI_MAX_LOGPROBS */
    }
    json_object_put(chat);
    buf_free(&text);
    *out = rr;
    return 0;
fail:
    json_object_put(chat);
    buf_free(&text);
    responses_request_free(rr);
    memset(req, 0, sizeof *req);
    return rc;
}

void responses_request_free(struct responses_request *rr)
{
    if (!rr) {
        return;
    }
    buf_free(&rr->st.text);
    buf_free(&rr->st.lps);
    buf_free(&rr->st.items);
    free(rr->st.call_name);
    json_object_put(rr->root);
    free(rr);
}

int responses_check(const struct responses_request *rr, struct openai_error *err)
{
    if (rr->store && rr->background) {
        openai_error_set(err, 400, "background",
                         "This vLLM engine does not support `store=True` and therefore does not "
                         "support the background mode. To enable these features, set the "
                         "environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when launching "
                         "the vLLM server.");
        snprintf(err->type, sizeof err->type, "invalid_request_error");
        return -EINVAL;
    }
    if (rr->previous_response_id) {
        openai_error_set(err, 404, "response_id", "Response with id '%.200s' not found.",
                         rr->previous_response_id);
        snprintf(err->type, sizeof err->type, "invalid_request_error");
        return -EINVAL;
    }
    return 0;
}

/* Replaces every from in s (size bytes) with to, as far as it fits. */
static void replace_all(char *s, size_t size, const char *from, const char *to)
{
    char tmp[sizeof((struct openai_error *)0)->message];
    const size_t fl = strlen(from), tl = strlen(to);
    size_t o = 0;
    for (const char *p = s; *p && o + 1 < sizeof tmp;) {
        if (strncmp(p, from, fl) == 0 && o + tl + 1 < sizeof tmp) {
            memcpy(tmp + o, to, tl);
            o += tl;
            p += fl;
        } else {
            tmp[o++] = *p++;
        }
    }
    tmp[o] = '\0';
    snprintf(s, size, "%s", tmp);
}

void responses_fix_error(struct openai_error *err)
{
    static const char *const renames[][2] = {
        {"response_format.json_schema", "text.format"},
        {"response_format", "text.format"},
        {"max_completion_tokens", "max_output_tokens"},
        {"tool_choice.function", "tool_choice"},
        {"].function", "]"},
        {"'messages", "'input"},
        {"messages[", "input["},
        {"truncate_prompt_tokens", "truncation"},
        {"chat_template_kwargs", "reasoning"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(renames); i++) {
        replace_all(err->param, sizeof err->param, renames[i][0], renames[i][1]);
        replace_all(err->message, sizeof err->message, renames[i][0], renames[i][1]);
    }
    if (strncmp(err->param, "messages", 8) == 0) { /* "messages..." → "input..." (shorter) */
        memmove(err->param + 5, err->param + 8, strlen(err->param + 8) + 1);
        memcpy(err->param, "input", 5);
    }
}

/* ---- building ---- */

/* A logprob: below -9999 (or NaN) written -9999.0, as vLLM clamps it. */
static void put_logprob(struct buf *out, float lp)
{
    openai_put_repr_float(out, isnan(lp) || lp < -9999.0f ? -9999.0 : (double)lp, 1);
}

static void put_str(struct buf *out, const char *s)
{
    if (s) {
        openai_json_string(out, s, strlen(s));
    } else {
        buf_appends(out, "null");
    }
}

/* ResponseOutputText.Logprob: {"token","bytes","logprob","top_logprobs":[{"token","bytes",
 * "logprob"}]} (full bodies); compact: the delta event's {"token","logprob","top_logprobs":
 * [{"token","logprob"}]}. */
static void put_token_logprob(struct buf *out, const struct openai_token_logprob *t, int compact)
{
    buf_appends(out, "{\"token\":");
    openai_json_string(out, t->text, t->text_len);
    if (!compact) {
        buf_appends(out, ",\"bytes\":");
        openai_put_bytes(out, t->text, t->text_len);
    }
    buf_appends(out, ",\"logprob\":");
    put_logprob(out, t->logprob);
    buf_appends(out, ",\"top_logprobs\":[");
    for (size_t j = 0; j < t->n_top; j++) {
        buf_appends(out, j ? ",{\"token\":" : "{\"token\":");
        openai_json_string(out, t->top[j].text, t->top[j].text_len);
        if (!compact) {
            buf_appends(out, ",\"bytes\":");
            openai_put_bytes(out, t->top[j].text, t->top[j].text_len);
        }
        buf_appends(out, ",\"logprob\":");
        put_logprob(out, t->top[j].logprob);
        buf_appends(out, "}");
    }
    buf_appends(out, "]}");
}

/* Whether the answer's output_text carries logprobs (include, and top_logprobs not null). */
static int wants_logprobs(const struct responses_request *rr)
{
    return rr->include_logprobs && rr->top_logprobs >= 0;
}

/* An output_text part: {"annotations": [], "text", "type": "output_text", "logprobs"}; lps is the
 * logprobs list's inside (NULL: null). */
static void put_text_part(struct buf *out, const char *text, size_t len, const char *lps,
                          size_t lps_len)
{
    buf_appends(out, "{\"annotations\":[],\"text\":");
    openai_json_string(out, text ? text : "", text ? len : 0);
    buf_appends(out, ",\"type\":\"output_text\",\"logprobs\":");
    if (lps) {
        buf_appends(out, "[");
        buf_append(out, lps, lps_len);
        buf_appends(out, "]");
    } else {
        buf_appends(out, "null");
    }
    buf_appends(out, "}");
}

/* A message item (ResponseOutputMessage); part: the content's one part, or NULL for []. */
static void put_message_item(struct buf *out, const char *id, const char *part, size_t part_len,
                             const char *status)
{
    buf_appends(out, "{\"id\":");
    put_str(out, id);
    buf_appends(out, ",\"content\":[");
    if (part) {
        buf_append(out, part, part_len);
    }
    buf_appendf(out, "],\"role\":\"assistant\",\"status\":\"%s\",\"type\":\"message\"}", status);
}

/* A function call item (ResponseFunctionToolCall). */
static void put_call_item(struct buf *out, const char *id, const char *call_id, const char *name,
                          size_t name_len, const char *args, size_t args_len, const char *status)
{
    buf_appends(out, "{\"arguments\":");
    openai_json_string(out, args ? args : "", args ? args_len : 0);
    buf_appends(out, ",\"call_id\":");
    put_str(out, call_id);
    buf_appends(out, ",\"name\":");
    openai_json_string(out, name, name_len);
    buf_appends(out, ",\"type\":\"function_call\",\"id\":");
    put_str(out, id);
    buf_appendf(out, ",\"status\":\"%s\"}", status);
}

static void put_usage(struct buf *out, const struct openai_usage *u)
{
    if (!u) {
        buf_appends(out, "null");
        return;
    }
    buf_appendf(
        out,
        "{\"input_tokens\":%" PRId64 ",\"input_tokens_details\":{\"cached_tokens\":%" PRId64
        ",\"input_tokens_per_turn\":[],\"cached_tokens_per_turn\":[]},\"output_tokens\":%" PRId64
        ",\"output_tokens_details\":{\"reasoning_tokens\":0,\"tool_output_tokens\":0,"
        "\"output_tokens_per_turn\":[],\"tool_output_tokens_per_turn\":[]},"
        "\"total_tokens\":%" PRId64 "}",
        u->prompt_tokens, u->cached_tokens, u->completion_tokens,
        u->prompt_tokens + u->completion_tokens);
}

/* The ResponsesResponse object (vLLM's field order) around output, the items' JSON. */
static void put_response(struct buf *out, const struct responses_request *rr,
                         const struct responses_result *res, const char *output, size_t output_len)
{
    const char *status = res->finish == OPENAI_FINISH_NONE     ? "in_progress"
                         : res->finish == OPENAI_FINISH_LENGTH ? "incomplete"
                                                               : "completed";
    buf_appends(out, "{\"id\":");
    put_str(out, res->id);
    buf_appendf(
        out,
        ",\"created_at\":%" PRId64 ",\"incomplete_details\":%s,\"instructions\":", res->created_at,
        res->finish == OPENAI_FINISH_LENGTH ? "{\"reason\":\"max_output_tokens\"}" : "null");
    put_str(out, rr->instructions);
    buf_appends(out, ",\"metadata\":");
    json_to_buf(rr->metadata, 0, out);
    buf_appends(out, ",\"model\":");
    put_str(out, res->model);
    buf_appends(out, ",\"object\":\"response\",\"output\":[");
    if (output) {
        buf_append(out, output, output_len);
    }
    buf_appendf(out, "],\"parallel_tool_calls\":%s,\"temperature\":",
                rr->parallel_tool_calls ? "true" : "false");
    openai_put_repr_float(out, rr->has_temperature ? rr->temperature : res->temperature,
                          !rr->has_temperature);
    buf_appends(out, ",\"tool_choice\":");
    if (rr->tool_choice) {
        json_to_buf(rr->tool_choice, 0, out);
    } else {
        buf_appends(out, "\"auto\"");
    }
    buf_appends(out, ",\"tools\":");
    if (rr->tools) {
        json_to_buf(rr->tools, 0, out);
    } else {
        buf_appends(out, "[]");
    }
    buf_appends(out, ",\"top_p\":");
    openai_put_repr_float(out, rr->has_top_p ? rr->top_p : res->top_p, !rr->has_top_p);
    buf_appendf(out, ",\"background\":false,\"max_output_tokens\":%" PRId64 ",\"max_tool_calls\":",
                res->max_output_tokens);
    if (rr->has_max_tool_calls) {
        buf_appendf(out, "%" PRId64, rr->max_tool_calls);
    } else {
        buf_appends(out, "null");
    }
    buf_appends(out, ",\"previous_response_id\":");
    put_str(out, rr->previous_response_id);
    buf_appends(out, ",\"prompt\":null,\"reasoning\":");
    json_to_buf(rr->reasoning, 0, out);
    buf_appends(out, ",\"service_tier\":");
    put_str(out, rr->service_tier);
    buf_appendf(out, ",\"status\":\"%s\",\"text\":", status);
    json_to_buf(rr->text, 0, out);
    buf_appends(out, ",\"top_logprobs\":");
    if (wants_logprobs(rr)) {
        buf_appendf(out, "%d", rr->top_logprobs);
    } else {
        buf_appends(out, "null");
    }
    buf_appends(out, ",\"truncation\":");
    put_str(out, rr->truncation);
    buf_appends(out, ",\"usage\":");
    put_usage(out, res->usage);
    buf_appends(out, ",\"user\":");
    put_str(out, rr->user);
    buf_appends(out, ",\"input_messages\":null,\"output_messages\":null}");
}

/* The output items of a whole answer: the message (always without tool parsing, vLLM's fallback;
 * with it only when there is text), then the calls. */
static int put_output(struct buf *items, const struct responses_request *rr,
                      const struct responses_result *res)
{
    struct buf lps, part;
    char id[RESPONSES_ITEM_ID_MAX];
    buf_init(&lps, RESPONSES_MAX_TEXT);
    buf_init(&part, RESPONSES_MAX_TEXT * 2);
    const int has_text = res->text && res->text_len > 0;
    if (!res->tool_mode || has_text) {
        for (size_t i = 0; wants_logprobs(rr) && i < res->n_logprobs; i++) {
            buf_appends(&lps, i ? "," : "");
            put_token_logprob(&lps, &res->logprobs[i], 0);
        }
        if (has_text) {
            put_text_part(&part, res->text, res->text_len,
                          wants_logprobs(rr) ? (lps.data ? lps.data : "") : NULL, lps.len);
        }
        openai_make_id(id, sizeof id, "msg_");
        put_message_item(items, id, has_text ? part.data : NULL, part.len, "completed");
    }
    for (size_t i = 0; i < res->n_calls; i++) {
        const struct tool_call *c = &res->calls[i];
        buf_appends(items, items->len ? "," : "");
        openai_make_id(id, sizeof id, "fc_");
        put_call_item(items, id, c->id, c->name, c->name_len, c->arguments, c->arguments_len,
                      "completed");
    }
    int rc = buf_error(&lps) ? buf_error(&lps) : buf_error(&part);
    buf_free(&lps);
    buf_free(&part);
    return rc ? rc : buf_error(items);
}

int responses_build(const struct responses_request *rr, const struct responses_result *res,
                    struct buf *out)
{
    struct buf items;
    buf_init(&items, out->max);
    int rc = put_output(&items, rr, res);
    if (rc == 0) {
        put_response(out, rr, res, items.data, items.len);
        rc = buf_error(out);
    }
    buf_free(&items);
    return rc;
}

/* ---- streaming ---- */

/* "event: <type>\ndata: " then the event's JSON up to its sequence_number, which ev_end adds
 * (with the type, and for text.done the text between them). */
static void ev_begin(struct buf *out, const char *type)
{
    buf_appendf(out, "event: %s\ndata: ", type);
}

static void ev_seq(struct responses_stream *st, struct buf *out)
{
    buf_appendf(out, ",\"sequence_number\":%" PRId64, st->seq++);
}

static void ev_end(struct responses_stream *st, struct buf *out, const char *type)
{
    ev_seq(st, out);
    buf_appendf(out, ",\"type\":\"%s\"}\n\n", type);
}

static void open_message(struct responses_stream *st, struct buf *out)
{
    st->state = RESPONSES_OPEN_MESSAGE;
    openai_make_id(st->item_id, sizeof st->item_id, "msg_");
    buf_reset(&st->text);
    buf_reset(&st->lps);
    ev_begin(out, "response.output_item.added");
    buf_appends(out, "{\"item\":");
    put_message_item(out, st->item_id, NULL, 0, "in_progress");
    buf_appendf(out, ",\"output_index\":%d", st->output_index);
    ev_end(st, out, "response.output_item.added");
    ev_begin(out, "response.content_part.added");
    buf_appends(out, "{\"content_index\":0,\"item_id\":");
    put_str(out, st->item_id);
    buf_appendf(out, ",\"output_index\":%d,\"part\":", st->output_index);
    buf_appends(out, "{\"annotations\":[],\"text\":\"\",\"type\":\"output_text\",\"logprobs\":[]}");
    ev_end(st, out, "response.content_part.added");
}

static void open_call(struct responses_stream *st, const struct tool_delta_call *c, struct buf *out)
{
    st->state = RESPONSES_OPEN_CALL;
    openai_make_id(st->item_id, sizeof st->item_id, "fc_");
    if (c->id[0]) {
        snprintf(st->call_id, sizeof st->call_id, "%s", c->id);
    } else {
        openai_make_id(st->call_id, sizeof st->call_id, "call_");
    }
    free(st->call_name);
    st->call_name = malloc(c->name_len + 1);
    if (!st->call_name) {
        buf_set_error(out, -ENOMEM);
        st->call_name_len = 0;
        return;
    }
    memcpy(st->call_name, c->name, c->name_len);
    st->call_name[c->name_len] = '\0';
    st->call_name_len = c->name_len;
    st->call_index = c->index;
    st->call_args_sent = 0;
    buf_reset(&st->text);
    ev_begin(out, "response.output_item.added");
    buf_appends(out, "{\"item\":");
    put_call_item(out, st->item_id, st->call_id, st->call_name, st->call_name_len, "", 0,
                  "in_progress");
    buf_appendf(out, ",\"output_index\":%d", st->output_index);
    ev_end(st, out, "response.output_item.added");
}

/* The open item's done events; the item joins st->items in its final form. */
static void close_current(struct responses_request *rr, struct buf *out)
{
    struct responses_stream *st = &rr->st;
    const char *text = st->text.data ? st->text.data : "";
    struct buf part;
    buf_init(&part, RESPONSES_MAX_TEXT * 2);
    if (st->state == RESPONSES_OPEN_MESSAGE) {
        ev_begin(out, "response.output_text.done");
        buf_appends(out, "{\"content_index\":0,\"item_id\":");
        put_str(out, st->item_id);
        buf_appendf(out, ",\"logprobs\":[],\"output_index\":%d", st->output_index);
        ev_seq(st, out);
        buf_appends(out, ",\"text\":");
        openai_json_string(out, text, st->text.len);
        buf_appends(out, ",\"type\":\"response.output_text.done\"}\n\n");
        /* the events' part has no logprobs (vLLM's ResponseOutputText without them) */
        put_text_part(&part, text, st->text.len, NULL, 0);
        ev_begin(out, "response.content_part.done");
        buf_appends(out, "{\"content_index\":0,\"item_id\":");
        put_str(out, st->item_id);
        buf_appendf(out, ",\"output_index\":%d,\"part\":", st->output_index);
        buf_append(out, part.data ? part.data : "null", part.len);
        ev_end(st, out, "response.content_part.done");
        ev_begin(out, "response.output_item.done");
        buf_appends(out, "{\"item\":");
        put_message_item(out, st->item_id, part.data, part.len, "completed");
        buf_appendf(out, ",\"output_index\":%d", st->output_index);
        ev_end(st, out, "response.output_item.done");
        /* the final output: the part with the message's logprobs when included */
        buf_reset(&part);
        put_text_part(&part, text, st->text.len,
                      wants_logprobs(rr) ? (st->lps.data ? st->lps.data : "") : NULL, st->lps.len);
        buf_appends(&st->items, st->n_items ? "," : "");
        put_message_item(&st->items, st->item_id, part.data, part.len, "completed");
    } else if (st->state == RESPONSES_OPEN_CALL) {
        if (st->call_args_sent) {
            ev_begin(out, "response.function_call_arguments.done");
            buf_appends(out, "{\"arguments\":");
            openai_json_string(out, text, st->text.len);
            buf_appends(out, ",\"item_id\":");
            put_str(out, st->item_id);
            buf_appends(out, ",\"name\":");
            openai_json_string(out, st->call_name, st->call_name_len);
            buf_appendf(out, ",\"output_index\":%d", st->output_index);
            ev_end(st, out, "response.function_call_arguments.done");
        }
        ev_begin(out, "response.output_item.done");
        buf_appends(out, "{\"item\":");
        put_call_item(out, st->item_id, st->call_id, st->call_name, st->call_name_len, text,
                      st->text.len, "completed");
        buf_appendf(out, ",\"output_index\":%d", st->output_index);
        ev_end(st, out, "response.output_item.done");
        buf_appends(&st->items, st->n_items ? "," : "");
        put_call_item(&st->items, st->item_id, st->call_id, st->call_name, st->call_name_len, text,
                      st->text.len, "completed");
    }
    if (st->state != RESPONSES_OPEN_NONE) {
        st->output_index++;
        st->n_items++;
        st->state = RESPONSES_OPEN_NONE;
    }
    if (buf_error(&part)) {
        buf_set_error(out, buf_error(&part));
    }
    buf_free(&part);
}

/* out's error, else the stream state's own (its buffers' caps). */
static int stream_error(const struct responses_stream *st, const struct buf *out)
{
    return buf_error(out)         ? buf_error(out)
           : buf_error(&st->text) ? buf_error(&st->text)
           : buf_error(&st->lps)  ? buf_error(&st->lps)
                                  : buf_error(&st->items);
}

int responses_stream_begin(struct responses_request *rr, const struct responses_result *res,
                           struct buf *out)
{
    static const char *const types[] = {"response.created", "response.in_progress"};
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        ev_begin(out, types[i]);
        buf_appends(out, "{\"response\":");
        put_response(out, rr, res, NULL, 0);
        ev_end(&rr->st, out, types[i]);
    }
    return stream_error(&rr->st, out);
}

int responses_stream_delta(struct responses_request *rr, const char *text, size_t len,
                           const struct openai_token_logprob *lps, size_t n_lps,
                           const struct tool_delta_call *calls, size_t n_calls, struct buf *out)
{
    struct responses_stream *st = &rr->st;
    if (len > 0) {
        if (st->state != RESPONSES_OPEN_MESSAGE) {
            close_current(rr, out);
            open_message(st, out);
        }
        ev_begin(out, "response.output_text.delta");
        buf_appends(out, "{\"content_index\":0,\"delta\":");
        openai_json_string(out, text, len);
        buf_appends(out, ",\"item_id\":");
        put_str(out, st->item_id);
        buf_appends(out, ",\"logprobs\":[");
        for (size_t i = 0; lps && wants_logprobs(rr) && i < n_lps; i++) {
            buf_appends(out, i ? "," : "");
            put_token_logprob(out, &lps[i], 1);
        }
        buf_appendf(out, "],\"output_index\":%d", st->output_index);
        ev_end(st, out, "response.output_text.delta");
        buf_append(&st->text, text, len);
        for (size_t i = 0; lps && wants_logprobs(rr) && i < n_lps; i++) {
            buf_appends(&st->lps, st->lps.len ? "," : "");
            put_token_logprob(&st->lps, &lps[i], 0);
        }
    }
    for (size_t i = 0; i < n_calls; i++) {
        const struct tool_delta_call *c = &calls[i];
        if (c->name) {
            close_current(rr, out);
            open_call(st, c, out);
        } else if (st->state != RESPONSES_OPEN_CALL || c->index != st->call_index) {
            continue; /* a fragment of no open call */
        }
        if (c->arguments.len > 0) {
            ev_begin(out, "response.function_call_arguments.delta");
            buf_appends(out, "{\"delta\":");
            openai_json_string(out, c->arguments.data, c->arguments.len);
            buf_appends(out, ",\"item_id\":");
            put_str(out, st->item_id);
            buf_appendf(out, ",\"output_index\":%d", st->output_index);
            ev_end(st, out, "response.function_call_arguments.delta");
            buf_append(&st->text, c->arguments.data, c->arguments.len);
            st->call_args_sent = 1;
        }
    }
    return stream_error(st, out);
}

int responses_stream_end(struct responses_request *rr, const struct responses_result *res,
                         struct buf *out)
{
    struct responses_stream *st = &rr->st;
    close_current(rr, out);
    if (st->n_items == 0 && !res->tool_mode) {
        char id[RESPONSES_ITEM_ID_MAX];
        openai_make_id(id, sizeof id, "msg_");
        put_message_item(&st->items, id, NULL, 0, "completed");
        st->n_items = 1;
    }
    ev_begin(out, "response.completed");
    buf_appends(out, "{\"response\":");
    put_response(out, rr, res, st->items.data, st->items.len);
    ev_end(st, out, "response.completed");
    return stream_error(st, out);
}

int responses_stream_error(struct responses_request *rr, const char *message, struct buf *out)
{
    ev_begin(out, "error");
    buf_appends(out, "{\"code\":\"server_error\",\"message\":");
    put_str(out, message);
    buf_appends(out, ",\"param\":null");
    ev_end(&rr->st, out, "error");
    return buf_error(out);
}
