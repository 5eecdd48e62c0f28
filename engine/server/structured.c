/*
 * Structured output requests: vLLM's three ways of asking for constrained output, read into one
 * struct openai_guide, and that turned into a GBNF grammar (engine/grammar) for the engine.
 *
 *   response_format     {"type": "text" | "json_object" | "json_schema", "json_schema":
 *                       {"name", "description", "schema", "strict"}} (OpenAI's form)
 *   structured_outputs  {"json": schema object or JSON text, "regex", "choice": [...], "grammar",
 *                       "json_object": true, "disable_any_whitespace", "disable_fallback",
 *                       "disable_additional_properties"} (vLLM's current form)
 *   guided_json, guided_regex, guided_choice, guided_grammar (vLLM's earlier form, still sent by
 *                       many clients), with guided_decoding_backend accepted and ignored
 *
 * At most one constraint per request, as vLLM requires. Choices become alternatives of
 * literals; a regex must match the whole output; a grammar is GBNF (xgrammar's EBNF form).
 * Not supported, and a 400 naming the field: structural tags and custom whitespace patterns.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"
#include "engine/server/openai.h"
#include "lib/json.h"

#define STRUCTURED_MAX_CHOICES 4096

static const char *kind_label(enum openai_guide_kind k)
{
    switch (k) {
    case OPENAI_GUIDE_JSON:
        return "json";
    case OPENAI_GUIDE_JSON_OBJECT:
        return "json_object";
    case OPENAI_GUIDE_REGEX:
        return "regex";
    case OPENAI_GUIDE_CHOICE:
        return "choice";
    case OPENAI_GUIDE_GRAMMAR:
        return "grammar";
    default:
        return "none";
    }
}

static bool is_null(struct json_object *v)
{
    return v == NULL;
}

/* Records constraint kind from param; a second constraint is vLLM's 400. */
static int set_kind(struct openai_guide *g, enum openai_guide_kind kind, const char *param,
                    struct openai_error *err)
{
    if (g->kind != OPENAI_GUIDE_NONE) {
        openai_error_set(err, 400, param,
                         "You can only use one kind of structured outputs constraint but "
                         "multiple are specified: '%s' and '%s'",
                         g->param, param);
        return -EINVAL;
    }
    g->kind = kind;
    snprintf(g->param, sizeof g->param, "%s", param);
    return 0;
}

static int take_text(struct openai_guide *g, const char *s, size_t len)
{
    g->text = malloc(len + 1);
    if (!g->text) {
        return -ENOMEM;
    }
    memcpy(g->text, s, len);
    g->text[len] = '\0';
    g->text_len = len;
    return 0;
}

/* A JSON schema given as an object (or true) or as JSON text. */
static int take_schema(struct openai_guide *g, struct json_object *v, const char *param,
                       struct openai_error *err)
{
    enum json_type t = json_object_get_type(v);
    if (t == json_type_string) {
        const char *s = json_object_get_string(v);
        size_t len = (size_t)json_object_get_string_len(v);
        struct json_object *parsed = NULL;
        char msg[160];
        if (json_parse_one(s, len, &parsed, msg, sizeof msg) != 0) {
            openai_error_set(err, 400, param, "'%s': the schema is not valid JSON: %s", param, msg);
            return -EINVAL;
        }
        json_object_put(parsed);
        return take_text(g, s, len);
    }
    if (t != json_type_object && t != json_type_boolean) {
        openai_error_set(err, 400, param, "'%s': input should be a JSON schema, got %s", param,
                         json_type_label(v));
        return -EINVAL;
    }
    const char *s =
        json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    return take_text(g, s, strlen(s));
}

static int take_string(struct openai_guide *g, struct json_object *v, const char *param,
                       struct openai_error *err)
{
    if (json_object_get_type(v) != json_type_string) {
        openai_error_set(err, 400, param, "'%s': input should be a valid string, got %s", param,
                         json_type_label(v));
        return -EINVAL;
    }
    if (json_object_get_string_len(v) == 0) {
        openai_error_set(err, 400, param, "'%s' must not be empty", param);
        return -EINVAL;
    }
    return take_text(g, json_object_get_string(v), (size_t)json_object_get_string_len(v));
}

static int take_choice(struct openai_guide *g, struct json_object *v, const char *param,
                       struct openai_error *err)
{
    if (json_object_get_type(v) != json_type_array || json_object_array_length(v) == 0) {
        openai_error_set(err, 400, param, "'%s': input should be a non-empty list of strings",
                         param);
        return -EINVAL;
    }
    size_t n = json_object_array_length(v);
    if (n > STRUCTURED_MAX_CHOICES) {
        openai_error_set(err, 400, param, "'%s': at most %d choices", param,
                         STRUCTURED_MAX_CHOICES);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(v, i);
        if (json_object_get_type(c) != json_type_string) {
            openai_error_set(err, 400, param, "'%s[%zu]': input should be a valid string, got %s",
                             param, i, json_type_label(c));
            return -EINVAL;
        }
    }
    g->choices = v;
    return 0;
}

static int parse_response_format(struct openai_request *req, struct openai_guide *g,
                                 struct openai_error *err)
{
    struct json_object *rf, *v;
    if (!json_object_object_get_ex(req->root, "response_format", &rf) || is_null(rf)) {
        return 0;
    }
    if (json_object_get_type(rf) != json_type_object ||
        !json_object_object_get_ex(rf, "type", &v) || json_object_get_type(v) != json_type_string) {
        openai_error_set(err, 400, "response_format",
                         "'response_format': input should be an object with a string 'type'");
        return -EINVAL;
    }
    const char *type = json_object_get_string(v);
    if (strcmp(type, "text") == 0) {
        return 0;
    }
    if (strcmp(type, "json_object") == 0) {
        return set_kind(g, OPENAI_GUIDE_JSON_OBJECT, "response_format", err);
    }
    if (strcmp(type, "json_schema") == 0) {
        struct json_object *js, *schema = NULL;
        if (!json_object_object_get_ex(rf, "json_schema", &js) || is_null(js)) {
            openai_error_set(err, 400, "response_format",
                             "When response_format type is 'json_schema', the 'json_schema' "
                             "field must be provided.");
            return -EINVAL;
        }
        if (json_object_get_type(js) != json_type_object) {
            openai_error_set(err, 400, "response_format",
                             "'response_format.json_schema': input should be an object, got %s",
                             json_type_label(js));
            return -EINVAL;
        }
        if ((!json_object_object_get_ex(js, "schema", &schema) || is_null(schema)) &&
            (!json_object_object_get_ex(js, "json_schema", &schema) || is_null(schema))) {
            openai_error_set(err, 400, "response_format",
                             "'response_format.json_schema.schema' must be provided");
            return -EINVAL;
        }
        int rc = set_kind(g, OPENAI_GUIDE_JSON, "response_format", err);
        return rc ? rc : take_schema(g, schema, "response_format.json_schema.schema", err);
    }
    if (strcmp(type, "structural_tag") == 0) {
        openai_error_set(err, 400, "response_format",
                         "'response_format': type 'structural_tag' is not supported by this "
                         "server");
        return -EINVAL;
    }
    openai_error_set(err, 400, "response_format",
                     "'response_format.type': input should be 'text', 'json_object' or "
                     "'json_schema', got '%s'",
                     type);
    return -EINVAL;
}

static int parse_structured_outputs(struct openai_request *req, struct openai_guide *g,
                                    struct openai_error *err)
{
    struct json_object *so;
    if (!json_object_object_get_ex(req->root, "structured_outputs", &so) || is_null(so)) {
        return 0;
    }
    if (json_object_get_type(so) != json_type_object) {
        openai_error_set(err, 400, "structured_outputs",
                         "'structured_outputs': input should be an object, got %s",
                         json_type_label(so));
        return -EINVAL;
    }
    int n_set = 0;
    json_object_object_foreach(so, key, val)
    {
        char param[64];
        snprintf(param, sizeof param, "structured_outputs.%s", key);
        int rc = 0;
        bool constraint = true;
        if (is_null(val)) {
            continue;
        }
        if (strcmp(key, "json") == 0) {
            rc = set_kind(g, OPENAI_GUIDE_JSON, param, err);
            rc = rc ? rc : take_schema(g, val, param, err);
        } else if (strcmp(key, "regex") == 0) {
            rc = set_kind(g, OPENAI_GUIDE_REGEX, param, err);
            rc = rc ? rc : take_string(g, val, param, err);
        } else if (strcmp(key, "choice") == 0) {
            rc = set_kind(g, OPENAI_GUIDE_CHOICE, param, err);
            rc = rc ? rc : take_choice(g, val, param, err);
        } else if (strcmp(key, "grammar") == 0) {
            rc = set_kind(g, OPENAI_GUIDE_GRAMMAR, param, err);
            rc = rc ? rc : take_string(g, val, param, err);
        } else if (strcmp(key, "json_object") == 0) {
            if (json_object_get_type(val) != json_type_boolean) {
                openai_error_set(err, 400, param, "'%s': input should be a valid boolean", param);
                return -EINVAL;
            }
            constraint = json_object_get_boolean(val);
            rc = constraint ? set_kind(g, OPENAI_GUIDE_JSON_OBJECT, param, err) : 0;
        } else if (strcmp(key, "disable_any_whitespace") == 0 ||
                   strcmp(key, "disable_fallback") == 0 ||
                   strcmp(key, "disable_additional_properties") == 0) {
            constraint = false;
            if (json_object_get_type(val) != json_type_boolean) {
                openai_error_set(err, 400, param, "'%s': input should be a valid boolean", param);
                return -EINVAL;
            }
            if (strcmp(key, "disable_any_whitespace") == 0) {
                g->compact = json_object_get_boolean(val);
            }
            /* disable_additional_properties: already how schemas are read (additional
             * properties only where a schema allows them); disable_fallback: one backend */
        } else if (strcmp(key, "structural_tag") == 0 || strcmp(key, "whitespace_pattern") == 0) {
            openai_error_set(err, 400, param, "'%s' is not supported by this server", param);
            return -EINVAL;
        } else {
            openai_error_set(err, 400, param, "'%s': unknown field of structured_outputs", param);
            return -EINVAL;
        }
        if (rc != 0) {
            return rc;
        }
        n_set += constraint;
    }
    if (n_set == 0) {
        openai_error_set(err, 400, "structured_outputs",
                         "'structured_outputs': You must use one kind of structured outputs "
                         "constraint but none are specified");
        return -EINVAL;
    }
    return 0;
}

static int parse_guided(struct openai_request *req, struct openai_guide *g,
                        struct openai_error *err)
{
    struct json_object *v;
    if (json_object_object_get_ex(req->root, "guided_json", &v) && !is_null(v)) {
        int rc = set_kind(g, OPENAI_GUIDE_JSON, "guided_json", err);
        if (rc == 0) {
            rc = take_schema(g, v, "guided_json", err);
        }
        if (rc != 0) {
            return rc;
        }
    }
    if (json_object_object_get_ex(req->root, "guided_regex", &v) && !is_null(v)) {
        int rc = set_kind(g, OPENAI_GUIDE_REGEX, "guided_regex", err);
        if (rc == 0) {
            rc = take_string(g, v, "guided_regex", err);
        }
        if (rc != 0) {
            return rc;
        }
    }
    if (json_object_object_get_ex(req->root, "guided_choice", &v) && !is_null(v)) {
        int rc = set_kind(g, OPENAI_GUIDE_CHOICE, "guided_choice", err);
        if (rc == 0) {
            rc = take_choice(g, v, "guided_choice", err);
        }
        if (rc != 0) {
            return rc;
        }
    }
    if (json_object_object_get_ex(req->root, "guided_grammar", &v) && !is_null(v)) {
        int rc = set_kind(g, OPENAI_GUIDE_GRAMMAR, "guided_grammar", err);
        if (rc == 0) {
            rc = take_string(g, v, "guided_grammar", err);
        }
        if (rc != 0) {
            return rc;
        }
    }
    if (json_object_object_get_ex(req->root, "guided_whitespace_pattern", &v) && !is_null(v)) {
        openai_error_set(err, 400, "guided_whitespace_pattern",
                         "'guided_whitespace_pattern' is not supported by this server");
        return -EINVAL;
    }
    if (json_object_object_get_ex(req->root, "guided_decoding_backend", &v) && !is_null(v) &&
        json_object_get_type(v) != json_type_string) {
        openai_error_set(err, 400, "guided_decoding_backend",
                         "'guided_decoding_backend': input should be a valid string, got %s",
                         json_type_label(v));
        return -EINVAL;
    }
    return 0;
}

int openai_parse_structured(struct openai_request *req, struct openai_error *err)
{
    struct openai_guide *g = &req->guide;
    int rc = parse_response_format(req, g, err);
    if (rc == 0) {
        rc = parse_structured_outputs(req, g, err);
    }
    if (rc == 0) {
        rc = parse_guided(req, g, err);
    }
    if (rc == -ENOMEM) {
        openai_error_set(err, 500, "", "out of memory");
    }
    return rc;
}

void openai_guide_deinit(struct openai_guide *g)
{
    free(g->text);
    memset(g, 0, sizeof *g);
}

/* Appends s[0..len) as a GBNF string literal. */
static void gbnf_literal(struct buf *out, const char *s, size_t len)
{
    buf_appends(out, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            buf_appendf(out, "\\%c", c);
        } else if (c < 0x20 || c == 0x7F) {
            buf_appendf(out, "\\x%02X", c);
        } else {
            buf_append(out, &s[i], 1); /* UTF-8 passes through: the compiler reads it */
        }
    }
    buf_appends(out, "\"");
}

/* disable_any_whitespace: the JSON grammars' one whitespace rule (json_schema.h names it
 * `space`) becomes empty, so documents come out compact. */
static int compact_space(struct buf *out, size_t from)
{
    static const char rule[] = "space ::= ";
    for (size_t i = from; out->data && i + sizeof rule - 1 <= out->len; i++) {
        if ((i == from || out->data[i - 1] == '\n') &&
            memcmp(out->data + i, rule, sizeof rule - 1) == 0) {
            size_t body = i + sizeof rule - 1, end = body;
            while (end < out->len && out->data[end] != '\n') {
                end++;
            }
            struct buf copy;
            buf_init(&copy, out->max);
            buf_append(&copy, out->data, body);
            buf_appends(&copy, "\"\"");
            buf_append(&copy, out->data + end, out->len - end);
            int rc = buf_error(&copy);
            if (rc == 0) {
                buf_free(out);
                *out = copy;
            } else {
                buf_free(&copy);
            }
            return rc;
        }
    }
    return 0;
}

int openai_guide_gbnf(const struct openai_guide *g, struct buf *out, struct openai_error *err)
{
    size_t from = out->len;
    char msg[400] = "";
    int rc = 0;
    switch (g->kind) {
    case OPENAI_GUIDE_JSON:
        rc = json_schema_to_gbnf(g->text, g->text_len, out, msg, sizeof msg);
        if (rc == 0 && g->compact) {
            rc = compact_space(out, from);
        }
        break;
    case OPENAI_GUIDE_JSON_OBJECT:
        rc = json_object_gbnf(out);
        if (rc == 0 && g->compact) {
            rc = compact_space(out, from);
        }
        break;
    case OPENAI_GUIDE_REGEX:
        buf_appends(out, "root ::= ");
        rc = regex_to_gbnf(g->text, g->text_len, false, out, msg, sizeof msg);
        buf_appends(out, "\n");
        break;
    case OPENAI_GUIDE_CHOICE:
        buf_appends(out, "root ::= ");
        for (size_t i = 0; i < json_object_array_length(g->choices); i++) {
            struct json_object *c = json_object_array_get_idx(g->choices, i);
            if (i > 0) {
                buf_appends(out, " | ");
            }
            gbnf_literal(out, json_object_get_string(c), (size_t)json_object_get_string_len(c));
        }
        buf_appends(out, "\n");
        break;
    case OPENAI_GUIDE_GRAMMAR:
        buf_append(out, g->text, g->text_len);
        break;
    default:
        return 0;
    }
    if (rc == 0) {
        rc = buf_error(out);
    }
    if (rc == -ENOMEM) {
        openai_error_set(err, 500, "", "out of memory");
    } else if (rc != 0) {
        openai_error_set(err, 400, g->param, "'%s' (%s): %s", g->param, kind_label(g->kind),
                         msg[0] ? msg : "the constraint is too large");
    }
    return rc;
}
