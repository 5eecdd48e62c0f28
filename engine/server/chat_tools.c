/*
 * Chat tools: `tools`, `tool_choice` and `parallel_tool_calls` read and checked as vLLM's
 * ChatCompletionRequest does (same messages), and the two choices that force a call turned into
 * structured output, as vLLM does:
 *   "required"  a JSON array (at least one item; one at most without parallel_tool_calls) of
 *               {"name": one of the tools, "parameters": that tool's parameters schema}
 *   named       the named tool's parameters schema (the answer is the call's arguments)
 * "auto" is decided by the server (it needs --enable-auto-tool-choice and a --tool-call-parser);
 * "none" leaves the output alone. The tools reach the chat template either way, as in vLLM.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/openai.h"
#include "lib/json.h"

static const char correct_usage[] =
    "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";

/* Checks tools[i] = {"type": "function", "function": {"name", "description"?, "parameters"?}}. */
static int check_tool(struct json_object *t, size_t i, struct openai_error *err)
{
    char param[64];
    struct json_object *type, *fn, *name, *params;
    snprintf(param, sizeof param, "tools[%zu]", i);
    if (json_object_get_type(t) != json_type_object) {
        openai_error_set(err, 400, param, "'%s': input should be an object", param);
        return -EINVAL;
    }
    if (json_object_object_get_ex(t, "type", &type) && type &&
        (json_object_get_type(type) != json_type_string ||
         strcmp(json_object_get_string(type), "function") != 0)) {
        openai_error_set(err, 400, param, "'%s.type': input should be 'function'", param);
        return -EINVAL;
    }
    if (!json_object_object_get_ex(t, "function", &fn) ||
        json_object_get_type(fn) != json_type_object) {
        openai_error_set(err, 400, param, "'%s.function': field required (an object)", param);
        return -EINVAL;
    }
    if (!json_object_object_get_ex(fn, "name", &name) ||
        json_object_get_type(name) != json_type_string) {
        openai_error_set(err, 400, param, "'%s.function.name': field required (a string)", param);
        return -EINVAL;
    }
    if (json_object_object_get_ex(fn, "parameters", &params) && params &&
        json_object_get_type(params) != json_type_object) {
        openai_error_set(err, 400, param, "'%s.function.parameters': input should be an object",
                         param);
        return -EINVAL;
    }
    return 0;
}

static const char *tool_name(struct json_object *t)
{
    struct json_object *fn, *name;
    json_object_object_get_ex(t, "function", &fn);
    json_object_object_get_ex(fn, "name", &name);
    return json_object_get_string(name);
}

/* tool_choice as vLLM's check_tool_usage reads it. */
static int parse_choice(struct openai_request *req, struct json_object *tc,
                        struct openai_error *err)
{
    if (json_object_get_type(tc) == json_type_string) {
        const char *s = json_object_get_string(tc);
        if (strcmp(s, "none") == 0) {
            req->tool_choice = OPENAI_TOOL_NONE;
            return 0;
        }
        if (strcmp(s, "auto") == 0 || strcmp(s, "required") == 0) {
            req->tool_choice = s[0] == 'a' ? OPENAI_TOOL_AUTO : OPENAI_TOOL_REQUIRED;
            return 0;
        }
        openai_error_set(err, 400, "tool_choice",
                         "Invalid value for `tool_choice`: %.60s! Only named tools, \"none\", "
                         "\"auto\" or \"required\" are supported.",
                         s);
        return -EINVAL;
    }
    if (json_object_get_type(tc) != json_type_object) {
        openai_error_set(err, 400, "tool_choice",
                         "Invalid value for `tool_choice`: %s! Only named tools, \"none\", "
                         "\"auto\" or \"required\" are supported.",
                         json_type_label(tc));
        return -EINVAL;
    }
    struct json_object *fn, *name;
    if (!json_object_object_get_ex(tc, "function", &fn) ||
        json_object_get_type(fn) != json_type_object) {
        openai_error_set(
            err, 400, "tool_choice.function",
            "'tool_choice.function': Invalid value for `function` in `tool_choice`! %s",
            correct_usage);
        return -EINVAL;
    }
    if (!json_object_object_get_ex(fn, "name", &name)) {
        openai_error_set(err, 400, "tool_choice.function.name",
                         "'tool_choice.function.name': Expected field `name` in `function` in "
                         "`tool_choice`! %s",
                         correct_usage);
        return -EINVAL;
    }
    if (json_object_get_type(name) != json_type_string || json_object_get_string_len(name) == 0) {
        openai_error_set(err, 400, "tool_choice.function.name",
                         "'tool_choice.function.name': Invalid `name` in `function` in "
                         "`tool_choice`! %s",
                         correct_usage);
        return -EINVAL;
    }
    req->tool_choice = OPENAI_TOOL_NAMED;
    req->tool_name = json_object_get_string(name);
    return 0;
}

/* A tool's parameters schema ({"type": "object", "properties": {}} when it has none), deep
 * copied, with its $defs moved into defs (vLLM's get_tool_schema_defs: one $defs for all). */
static int tool_params(struct json_object *tool, struct json_object *defs, struct json_object **out,
                       struct openai_error *err)
{
    struct json_object *fn, *params = NULL;
    json_object_object_get_ex(tool, "function", &fn);
    json_object_object_get_ex(fn, "parameters", &params);
    struct json_object *copy = NULL;
    if (params) {
        if (json_object_deep_copy(params, &copy, NULL) != 0) {
            return -ENOMEM;
        }
    } else {
        copy = json_object_new_object();
        if (!copy) {
            return -ENOMEM;
        }
        json_object_object_add(copy, "type", json_object_new_string("object"));
        json_object_object_add(copy, "properties", json_object_new_object());
    }
    struct json_object *d;
    if (json_object_object_get_ex(copy, "$defs", &d) && json_object_is_type(d, json_type_object)) {
        json_object_object_foreach(d, k, v)
        {
            struct json_object *old;
            if (json_object_object_get_ex(defs, k, &old) && !json_object_equal(old, v)) {
                openai_error_set(err, 400, "tools",
                                 "Tool definition '%s' has multiple schemas, which is not "
                                 "supported.",
                                 k);
                json_object_put(copy);
                return -EINVAL;
            }
            json_object_object_add(defs, k, json_object_get(v));
        }
        json_object_object_del(copy, "$defs");
    }
    *out = copy;
    return 0;
}

/* The structured-output schema of tool_choice "required" or a named tool (text into req->guide). */
static int tools_guide(struct openai_request *req, struct openai_error *err)
{
    struct json_object *defs = json_object_new_object();
    struct json_object *schema = NULL;
    int rc = defs ? 0 : -ENOMEM;
    size_t n = json_object_array_length(req->tools);
    if (rc == 0 && req->tool_choice == OPENAI_TOOL_NAMED) {
        for (size_t i = 0; i < n; i++) {
            struct json_object *t = json_object_array_get_idx(req->tools, i);
            if (strcmp(tool_name(t), req->tool_name) == 0) {
                rc = tool_params(t, defs, &schema, err);
                break;
            }
        }
    } else if (rc == 0) {
        struct json_object *any = json_object_new_array();
        rc = any ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            struct json_object *t = json_object_array_get_idx(req->tools, i);
            struct json_object *params = NULL, *one = json_object_new_object();
            struct json_object *props = json_object_new_object();
            struct json_object *name = json_object_new_object();
            struct json_object *en = json_object_new_array();
            struct json_object *required = json_object_new_array();
            rc = one && props && name && en && required ? tool_params(t, defs, &params, err)
                                                        : -ENOMEM;
            if (rc == 0) {
                json_object_array_add(en, json_object_new_string(tool_name(t)));
                json_object_object_add(name, "type", json_object_new_string("string"));
                json_object_object_add(name, "enum", en);
                json_object_object_add(props, "name", name);
                json_object_object_add(props, "parameters", params);
                json_object_array_add(required, json_object_new_string("name"));
                json_object_array_add(required, json_object_new_string("parameters"));
                json_object_object_add(one, "type", json_object_new_string("object"));
                json_object_object_add(one, "properties", props);
                json_object_object_add(one, "required", required);
                json_object_object_add(one, "additionalProperties", json_object_new_boolean(0));
                json_object_array_add(any, one);
            } else {
                json_object_put(one);
                json_object_put(props);
                json_object_put(name);
                json_object_put(en);
                json_object_put(required);
            }
        }
        if (rc == 0) {
            struct json_object *items = json_object_new_object();
            schema = json_object_new_object();
            if (!items || !schema) {
                json_object_put(items);
                rc = -ENOMEM;
            } else {
                json_object_object_add(items, "anyOf", any);
                any = NULL;
                json_object_object_add(schema, "type", json_object_new_string("array"));
                json_object_object_add(schema, "minItems", json_object_new_int(1));
                if (!req->parallel_tool_calls) {
                    json_object_object_add(schema, "maxItems", json_object_new_int(1));
                }
                json_object_object_add(schema, "items", items);
            }
        }
        json_object_put(any);
    }
    if (rc == 0 && json_object_object_length(defs) > 0) {
        json_object_object_add(schema, "$defs", json_object_get(defs));
    }
    if (rc == 0) {
        const char *text = json_object_to_json_string_ext(
            schema, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        size_t len = strlen(text);
        req->guide.text = malloc(len + 1);
        if (!req->guide.text) {
            rc = -ENOMEM;
        } else {
            memcpy(req->guide.text, text, len + 1);
            req->guide.text_len = len;
            req->guide.kind = OPENAI_GUIDE_JSON;
            snprintf(req->guide.param, sizeof req->guide.param, "tool_choice");
        }
    }
    json_object_put(schema);
    json_object_put(defs);
    if (rc == -ENOMEM) {
        openai_error_set(err, 500, "", "out of memory");
    }
    return rc;
}

int openai_parse_tools(struct openai_request *req, struct openai_error *err)
{
    struct json_object *tools = NULL, *tc = NULL, *ptc = NULL;
    req->parallel_tool_calls = 1;
    if (json_object_object_get_ex(req->root, "parallel_tool_calls", &ptc) && ptc) {
        if (json_object_get_type(ptc) != json_type_boolean) {
            openai_error_set(err, 400, "parallel_tool_calls",
                             "'parallel_tool_calls': input should be a valid boolean");
            return -EINVAL;
        }
        req->parallel_tool_calls = json_object_get_boolean(ptc);
    }
    json_object_object_get_ex(req->root, "tools", &tools);
    json_object_object_get_ex(req->root, "tool_choice", &tc);
    if (tools) {
        if (json_object_get_type(tools) != json_type_array) {
            openai_error_set(err, 400, "tools", "'tools': input should be an array, got %s",
                             json_type_label(tools));
            return -EINVAL;
        }
        if (json_object_array_length(tools) == 0) {
            openai_error_set(err, 400, "tools",
                             "`tools` must not be an empty array. Either provide at least one "
                             "tool or omit the field entirely.");
            return -EINVAL;
        }
        for (size_t i = 0; i < json_object_array_length(tools); i++) {
            if (check_tool(json_object_array_get_idx(tools, i), i, err) != 0) {
                return -EINVAL;
            }
        }
        req->tools = tools;
    }
    /* no tool_choice: "auto" with tools, "none" without (vLLM) */
    req->tool_choice = tools ? OPENAI_TOOL_AUTO : OPENAI_TOOL_NONE;
    if (tc && parse_choice(req, tc, err) != 0) {
        return -EINVAL;
    }
    if (req->tool_choice == OPENAI_TOOL_NONE) {
        return 0;
    }
    if (!tools) {
        openai_error_set(err, 400, "tool_choice", "When using `tool_choice`, `tools` must be set.");
        return -EINVAL;
    }
    if (req->tool_choice == OPENAI_TOOL_NAMED) {
        int found = 0;
        for (size_t i = 0; i < json_object_array_length(tools) && !found; i++) {
            found = strcmp(tool_name(json_object_array_get_idx(tools, i)), req->tool_name) == 0;
        }
        if (!found) {
            openai_error_set(err, 400, "tool_choice",
                             "The tool specified in `tool_choice` does not match any of the "
                             "specified `tools`");
            return -EINVAL;
        }
    }
    if (req->tool_choice == OPENAI_TOOL_AUTO) {
        return 0;
    }
    if (req->guide.kind != OPENAI_GUIDE_NONE) {
        openai_error_set(err, 400, "tool_choice",
                         "'tool_choice': You can only either use constraints for structured "
                         "outputs or tools, not both.");
        return -EINVAL;
    }
    return tools_guide(req, err);
}
