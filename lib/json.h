/*
 * JSON for Tandem: a strict parser that builds json-c objects, typed getters addressed by dotted
 * paths whose error messages name the field, and a serializer into a bounded struct buf. YAML
 * documents (lib/yaml.h) are converted to the same json-c objects, so configs, kubeconfigs,
 * Kubernetes objects and OpenAI request bodies are all read one way.
 *
 * Ownership: json_parse returns a new reference (release with json_object_put). Getters return
 * borrowed pointers (objects and strings) that live as long as the root they came from; take a
 * reference with json_object_get to keep one longer.
 *
 * Paths: "spec.template.spec.containers[0].name"; a path may start with an index ("[2].name"),
 * and "" is the root itself. Keys containing '.', '[' or ']' are not addressable by path (use
 * json_object_object_get_ex). A malformed path is a programming error and is treated as absent.
 *
 * Type labels used in messages: "null", "boolean", "integer", "number" (non-integer), "string",
 * "object", "array".
 */
#ifndef TANDEM_LIB_JSON_H
#define TANDEM_LIB_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "lib/buf.h"
#include "lib/common.h"

/* Nesting limit of json_parse (objects + arrays). */
#define JSON_MAX_DEPTH 64

/* Memory bound of json_parse: the json-c tree it builds is charged at the sizes json-c allocates
 * (an object's 16-entry hash table alone is about 700 bytes, so "[{},{},...]" would cost 250
 * times its size; compact Kubernetes objects cost about 15 times, tokenizer.json files 5 to 13),
 * and a parse whose tree would exceed JSON_PARSE_FACTOR times the input plus
 * JSON_PARSE_SLACK bytes fails with "JSON too dense ..." before it allocates more. */
#define JSON_PARSE_FACTOR 64
#define JSON_PARSE_SLACK  ((size_t)1 << 20)

/*
 * Strict RFC 8259 parse of exactly one JSON value (any type at the top) from len bytes (data need
 * not be NUL-terminated). Rejected, with "line L column C: ..." in err: syntax errors, truncated
 * input, trailing non-whitespace, raw NUL bytes or control characters in strings, invalid UTF-8,
 * lone surrogates, "\u0000" inside object keys, duplicate object keys, nesting deeper than
 * JSON_MAX_DEPTH, numbers that overflow a double, a tree above the memory bound (JSON_PARSE_*).
 * Integers that fit int64 become json_type_int, larger integers and numbers with a fraction or
 * exponent become json_type_double. Returns a new reference, or NULL. The JSON value null is NULL
 * in json-c, like an error: err is set to "" on success and to a message on error; json_parse_one
 * tells them apart by its return value.
 */
struct json_object *json_parse(const char *data, size_t len, char *err, size_t errlen);

/* Like json_parse: 0 with *out set (NULL for the JSON value null), or -EINVAL/-ENOMEM. */
int json_parse_one(const char *data, size_t len, struct json_object **out, char *err,
                   size_t errlen);

/* The value at path (borrowed), or NULL when absent (a JSON null value is returned as NULL too). */
struct json_object *json_get(struct json_object *root, const char *path);

/*
 * Typed getters. 0 on success (out set); -ENOENT when the field is missing or null (err
 * "spec.replicas: required field is missing"); -EINVAL when it has the wrong type (err
 * "spec.replicas: expected integer, got string") or is out of range for the C type. Integers
 * accept integral doubles within range; doubles accept integers. Strings are borrowed.
 */
int json_get_string(struct json_object *root, const char *path, const char **out, char *err,
                    size_t errlen);
int json_get_int64(struct json_object *root, const char *path, int64_t *out, char *err,
                   size_t errlen);
int json_get_int(struct json_object *root, const char *path, int *out, char *err, size_t errlen);
int json_get_double(struct json_object *root, const char *path, double *out, char *err,
                    size_t errlen);
int json_get_bool(struct json_object *root, const char *path, int *out, char *err, size_t errlen);
int json_get_object(struct json_object *root, const char *path, struct json_object **out, char *err,
                    size_t errlen);
int json_get_array(struct json_object *root, const char *path, struct json_object **out, char *err,
                   size_t errlen);

/* Optional variants: like json_get_*, but a missing (or null) field sets *out = def and returns 0.
 * A present field of the wrong type is still -EINVAL. */
int json_opt_string(struct json_object *root, const char *path, const char *def, const char **out,
                    char *err, size_t errlen);
int json_opt_int64(struct json_object *root, const char *path, int64_t def, int64_t *out, char *err,
                   size_t errlen);
int json_opt_int(struct json_object *root, const char *path, int def, int *out, char *err,
                 size_t errlen);
int json_opt_double(struct json_object *root, const char *path, double def, double *out, char *err,
                    size_t errlen);
int json_opt_bool(struct json_object *root, const char *path, int def, int *out, char *err,
                  size_t errlen);
int json_opt_object(struct json_object *root, const char *path, struct json_object *def,
                    struct json_object **out, char *err, size_t errlen);
int json_opt_array(struct json_object *root, const char *path, struct json_object *def,
                   struct json_object **out, char *err, size_t errlen);

/*
 * Appends o (NULL → "null") as JSON to out: compact, or with pretty != 0 two-space indented with
 * one member per line. Strings are escaped per RFC 8259 ('/' is not escaped); doubles use the
 * shortest representation that round-trips and always look like a float ("3.0"). Returns 0,
 * -EINVAL for NaN/Inf (not representable in JSON) or nesting deeper than 1000, -ENOSPC/-ENOMEM
 * from the buffer. On error out may hold a partial document and its sticky failure is set
 * (buf_error), so the builder that called it can check once at the end.
 */
int json_to_buf(struct json_object *o, int pretty, struct buf *out);

/* One of the type labels above; "null" for NULL. */
const char *json_type_label(struct json_object *o);

#endif /* TANDEM_LIB_JSON_H */
