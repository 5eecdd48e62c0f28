/*
 * YAML → json-c (libyaml underneath), so YAML configs, kubeconfigs and Kubernetes manifests are
 * read with the same getters as JSON (lib/json.h). Scalars resolve like sigs.k8s.io/yaml
 * (go-yaml v2, YAML 1.1-ish), for plain (unquoted) scalars only:
 *   null: "", ~, null, Null, NULL
 *   bool: y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF
 *   int:  decimal, 0x hex, 0o and 0NN octal, 0b binary, optional sign, '_' separators
 *         (beyond int64 → uint64 when it fits)
 *   float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, .inf -.inf +.inf .nan (any case
 *         variant go-yaml accepts)
 *   everything else (timestamps included) → string.
 * Quoted and block scalars are strings. Tags !!str !!int !!float !!bool !!null !!binary !!map
 * !!seq are honoured (a value that does not fit its tag is an error); other tags are ignored.
 * Anchors and aliases are expanded (deep copies) with a cap of YAML_MAX_ALIAS_NODES expanded nodes
 * per call (billion-laughs safe); merge keys "<<" (a mapping or a sequence of mappings; explicit
 * keys win, earlier merges win over later ones). Map keys must be scalars (ints and bools are
 * turned into their canonical text, e.g. "on" → "true"; null keys are rejected); duplicate keys
 * are an error. Nesting is limited to YAML_MAX_DEPTH. Errors read "line L column C: ...".
 *
 * Ownership: returned objects are new references (json_object_put them).
 */
#ifndef TANDEM_LIB_YAML_H
#define TANDEM_LIB_YAML_H

#include <stddef.h>

#include <json-c/json.h>

#include "lib/common.h"

#define YAML_MAX_DEPTH       128
#define YAML_MAX_ALIAS_NODES 100000

/*
 * Exactly one document. Documents that are empty or null are ignored, so "" and "---\n" give JSON
 * null, which json-c represents as NULL, the same value as an error: err is set to "" on success
 * and to a message on error, or use yaml_parse_one to tell them apart. A second non-empty document
 * is an error.
 */
struct json_object *yaml_parse(const char *data, size_t len, char *err, size_t errlen);

/*
 * All documents of a stream, as a new json array in *docs (empty and null documents skipped).
 * Returns 0, -EINVAL on malformed YAML (message in err), -ENOMEM.
 */
int yaml_parse_all(const char *data, size_t len, struct json_object **docs, char *err,
                   size_t errlen);

/*
 * Like yaml_parse, but tells "null document" from "error" by return value: 0 with *out set (NULL
 * for a null or empty document), or -EINVAL/-ENOMEM.
 */
int yaml_parse_one(const char *data, size_t len, struct json_object **out, char *err,
                   size_t errlen);

#endif /* TANDEM_LIB_YAML_H */
