/*
 * Fuzz target for lib/yaml: parse a stream (all documents, and as a single document), walk every
 * node with the json getters, serialize each document to JSON, and parse that back with the strict
 * JSON parser: whatever the YAML reader builds must be valid JSON (NaN/Inf aside, which JSON cannot
 * hold, and nesting past the JSON parser's depth limit).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"
#include "lib/yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_yaml: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Walks the tree; returns its depth and notes non-finite numbers. */
static int walk(struct json_object *doc, struct json_object *node, int *non_finite, size_t *nodes)
{
    char err[128];
    const char *s;
    double d;
    int b;
    int depth = 0;
    (*nodes)++;
    switch (json_object_get_type(node)) {
    case json_type_object: {
        json_object_object_foreach(node, key, val)
        {
            int sub = walk(doc, val, non_finite, nodes);
            depth = sub > depth ? sub : depth;
            /* Single-segment paths from the document root are addressable. */
            if (node == doc && *key && !strpbrk(key, ".[]")) {
                CHECK(json_get(doc, key) == val);
                json_opt_string(doc, key, "", &s, err, sizeof(err));
                json_opt_bool(doc, key, 0, &b, err, sizeof(err));
            }
        }
        return depth + 1;
    }
    case json_type_array: {
        size_t n = json_object_array_length(node);
        for (size_t i = 0; i < n; i++) {
            int sub = walk(doc, json_object_array_get_idx(node, i), non_finite, nodes);
            depth = sub > depth ? sub : depth;
        }
        return depth + 1;
    }
    case json_type_double:
        d = json_object_get_double(node);
        if (!isfinite(d)) {
            *non_finite = 1;
        }
        return 0;
    case json_type_string:
        CHECK(json_object_get_string(node) != NULL);
        return 0;
    default:
        return 0;
    }
}

/* Returns 1 when the document holds NaN or Inf. */
static int check_document(struct json_object *doc)
{
    int non_finite = 0;
    size_t nodes = 0;
    int depth = walk(doc, doc, &non_finite, &nodes);
    CHECK(depth <= YAML_MAX_DEPTH);
    struct buf b;
    buf_init(&b, 1 << 26);
    int rc = json_to_buf(doc, 0, &b);
    if (non_finite) {
        CHECK(rc == -EINVAL);
    } else {
        CHECK(rc == 0);
        if (depth <= JSON_MAX_DEPTH) {
            char err[256];
            struct json_object *back = NULL;
            rc = json_parse_one(buf_cstr(&b), b.len, &back, err, sizeof(err));
            /* aliases can expand a document into JSON denser than json_parse's memory bound
             * (JSON_PARSE_FACTOR): refusing that is the parser doing its job */
            if (rc != 0 && !strstr(err, "JSON too dense")) {
                fprintf(stderr, "fuzz_yaml: JSON of a YAML document does not parse: %s\n%s\n", err,
                        buf_cstr(&b));
                abort();
            }
            json_object_put(back);
        }
    }
    buf_free(&b);
    return non_finite;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct json_object *docs = NULL;
    int rc = yaml_parse_all((const char *)data, size, &docs, err, sizeof(err));
    int non_finite = 0;
    if (rc != 0) {
        CHECK(rc == -EINVAL && docs == NULL);
        CHECK(strncmp(err, "line ", 5) == 0);
    } else {
        size_t n = json_object_array_length(docs);
        for (size_t i = 0; i < n; i++) {
            struct json_object *doc = json_object_array_get_idx(docs, i);
            CHECK(doc != NULL); /* null documents are skipped */
            non_finite |= check_document(doc);
        }
    }
    struct json_object *one = NULL;
    int rc1 = yaml_parse_one((const char *)data, size, &one, err, sizeof(err));
    if (rc == 0) {
        /* The single-document reader agrees with the stream reader. */
        size_t n = json_object_array_length(docs);
        CHECK((n <= 1) == (rc1 == 0));
        if (n == 0) {
            CHECK(one == NULL);
        } else if (n == 1 && !non_finite) {
            CHECK(json_object_equal(one, json_object_array_get_idx(docs, 0)));
        }
    }
    json_object_put(one);
    json_object_put(docs);
    return 0;
}
