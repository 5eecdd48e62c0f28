/*
 * JSON schemas to GBNF: the front end for vLLM's guided_json and response_format
 * {"type":"json_schema"} / {"type":"json_object"}. The grammar it writes (compiled by
 * engine/grammar/grammar.h) generates only JSON documents that validate against the schema; where
 * a keyword cannot be expressed exactly the schema is refused, never loosened.
 *
 * Supported (draft 2020-12, with the draft-04..2019 spellings noted):
 *   - true / {} (any JSON value), false is refused (nothing validates);
 *   - type: a name or an array of names; without type, the kinds that the other keywords
 *     describe (properties: object, items: array, minLength: string, minimum: number, ...)
 *     or any value when there are none;
 *   - enum, const (compact JSON of each value, filtered by type);
 *   - objects: properties (in schema order), required, additionalProperties (false, true or a
 *     schema; absent means false when "properties" is present, as xgrammar's strict mode that
 *     vLLM uses, and any members when it is not: {"type":"object"} is any object), extra
 *     members come after the declared ones and never reuse a declared name; minProperties and
 *     maxProperties only when every sentence satisfies them anyway;
 *   - arrays: items (a schema, or an array as in draft-04 with additionalItems), prefixItems,
 *     minItems, maxItems, uniqueItems:false (with prefixItems and no items, nothing follows the
 *     tuple: strict mode again);
 *   - strings: minLength, maxLength (code points), pattern (regex.h; unanchored unless it starts
 *     with ^ / ends with $), format date, time, date-time, uuid, email, ipv4 (format is ignored
 *     for schemas that cannot be strings);
 *   - numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft-04
 *     booleans): bounded integers as exact digit ranges of at most 15 digits (an open end stops
 *     there); bounded numbers as integers and fixed-point decimals of at most 6 fraction digits
 *     and 15 significant digits (no exponent);
 *   - anyOf and oneOf as alternations (oneOf is treated as anyOf: a document matching two
 *     branches is generated anyway), allOf of one schema;
 *   - $ref to "#", "#/$defs/NAME" and "#/definitions/NAME" (recursion allowed, as long as some
 *     JSON is read before a schema reaches itself again), $defs and definitions as containers;
 *   - annotations, ignored: title, description, default, examples, $schema, $id, $comment,
 *     deprecated, readOnly, writeOnly.
 * Every other keyword is refused (-EINVAL naming it and its JSON pointer), as are: a sibling
 * keyword next to $ref, anyOf, oneOf or allOf (other than annotations and $defs); enum or const
 * next to keywords other than type; allOf of several schemas; multipleOf, uniqueItems:true,
 * contains, patternProperties, not, if/then/else and the rest of the assertion vocabulary;
 * pattern or format together with minLength/maxLength; unknown formats; bounds with no number
 * inside them; a $ref cycle that reads nothing (left recursion); counts above
 * JSON_SCHEMA_MAX_COUNT and nesting deeper than JSON_SCHEMA_MAX_DEPTH (-E2BIG).
 *
 * Whitespace: a value may be followed by `space` (nothing, one blank, or a newline and up to 20
 * blanks or tabs), as llama.cpp's converter allows; the root may therefore end in whitespace.
 * Limits of the generated language (it is a subset of the schema's): numbers have at most 16
 * integral digits and 2 exponent digits, strings never hold a \u escape of a surrogate (so
 * characters outside the BMP are written raw), and keys of extra members are written canonically
 * (escapes only where JSON requires them) and never hold U+0000. A grammar cannot forbid a repeated
 * key among the extra members that additionalProperties allows.
 *
 * Rule names: "root" is the start; the shared rules are space, value, object, array, string,
 * char, number, integer, integral-part, decimal-part, boolean, null, key and key-char (written
 * only when used); the rest are derived from where their schema is ("root-address-street",
 * "root-address-street-kv", "root-rest-2", "def-Node", ...). No rule is left-recursive and no
 * repetition applies to something that may match nothing.
 */
#ifndef TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_H
#define TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_H

#include <stddef.h>

#include "lib/buf.h"

#define JSON_SCHEMA_MAX_DEPTH 64    /* nesting of subschemas */
#define JSON_SCHEMA_MAX_COUNT 10000 /* largest minLength/maxLength/minItems/maxItems */

/*
 * Converts a JSON schema (JSON text schema[0..len)) into a complete GBNF grammar whose start rule
 * is "root" and appends it to out; every sentence of the grammar is a JSON document that
 * validates against the schema. Returns 0, -EINVAL (bad JSON, or a schema that is refused; the
 * message names the keyword and its JSON pointer, e.g. "unsupported JSON schema keyword
 * 'multipleOf' at /properties/age"), -E2BIG (the grammar would pass out's cap or a limit above),
 * -ENOMEM. On failure out may hold part of a grammar (and its sticky error may be set).
 */
int json_schema_to_gbnf(const char *schema, size_t len, struct buf *out, char *err, size_t errlen);

/* Appends the grammar of vLLM's response_format {"type":"json_object"}: any JSON object (the root
 * is an object, its members any JSON values). 0, -E2BIG (out's cap), -ENOMEM. */
int json_object_gbnf(struct buf *out);

#endif /* TANDEM_ENGINE_GRAMMAR_JSON_SCHEMA_H */
