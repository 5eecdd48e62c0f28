/*
 * Fuzz target for lib/json: strict parse, then every node is visited through the path getters
 * (the value found by path must be the node itself, and exactly one typed getter must accept it),
 * then the tree is serialized compact and pretty and parsed back: it must be equal. A serializer
 * that emits something its own parser rejects, or that changes a value, aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_json: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Exercises the getters on path (which must lead to node). */
static void check_getters(struct json_object *root, const char *path, struct json_object *node)
{
    char err[1024]; /* paths are up to 512 bytes */
    const char *s;
    int64_t i64;
    int i;
    double d;
    int b;
    struct json_object *o;
    CHECK(json_get(root, path) == node);
    int ok = 0;
    ok += json_get_string(root, path, &s, err, sizeof(err)) == 0;
    ok += json_get_bool(root, path, &b, err, sizeof(err)) == 0;
    ok += json_get_object(root, path, &o, err, sizeof(err)) == 0;
    ok += json_get_array(root, path, &o, err, sizeof(err)) == 0;
    int num = json_get_double(root, path, &d, err, sizeof(err)) == 0;
    if (!node) {
        CHECK(ok == 0 && !num);
        CHECK(json_get_int64(root, path, &i64, err, sizeof(err)) == -ENOENT);
        CHECK(strstr(err, "required field is missing") != NULL);
        CHECK(json_opt_int(root, path, 7, &i, err, sizeof(err)) == 0 && i == 7);
        return;
    }
    CHECK(ok + num == 1);
    int rc = json_get_int64(root, path, &i64, err, sizeof(err));
    CHECK(rc == 0 || rc == -EINVAL);
    if (rc == 0) {
        CHECK(num);
        rc = json_get_int(root, path, &i, err, sizeof(err));
        CHECK(rc == 0 || (rc == -EINVAL && (i64 > INT32_MAX || i64 < INT32_MIN)));
    } else {
        CHECK(err[0] != '\0');
    }
    CHECK(json_opt_string(root, path, "d", &s, err, sizeof(err)) ==
          (json_object_is_type(node, json_type_string) ? 0 : -EINVAL));
}

/* Visits node at path (path is built only while keys are addressable). */
static void walk(struct json_object *root, struct json_object *node, char *path, size_t len,
                 size_t cap, int addressable)
{
    if (addressable) {
        check_getters(root, path, node);
    }
    if (json_object_is_type(node, json_type_object)) {
        json_object_object_foreach(node, key, val)
        {
            size_t klen = strlen(key);
            int ok = addressable && klen > 0 && !strpbrk(key, ".[]") && len + klen + 2 < cap;
            if (ok) {
                snprintf(path + len, cap - len, "%s%s", len ? "." : "", key);
            }
            walk(root, val, path, ok ? strlen(path) : len, cap, ok);
            path[len] = '\0';
        }
    } else if (json_object_is_type(node, json_type_array)) {
        size_t n = json_object_array_length(node);
        for (size_t i = 0; i < n; i++) {
            int ok = addressable && len + 24 < cap;
            if (ok) {
                snprintf(path + len, cap - len, "[%zu]", i);
            }
            walk(root, json_object_array_get_idx(node, i), path, ok ? strlen(path) : len, cap, ok);
            path[len] = '\0';
        }
    }
}

static void round_trip(struct json_object *root, int pretty)
{
    struct buf b;
    buf_init(&b, 1 << 24);
    CHECK(json_to_buf(root, pretty, &b) == 0);
    char err[256];
    struct json_object *back = NULL;
    int rc = json_parse_one(buf_cstr(&b), b.len, &back, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "fuzz_json: re-parse failed: %s\n%s\n", err, buf_cstr(&b));
        abort();
    }
    CHECK(json_object_equal(root, back));
    json_object_put(back);
    buf_free(&b);

    /* The same into a buffer too small for it: a clean -ENOSPC, never an overflow. */
    struct buf small;
    buf_init(&small, 16);
    rc = json_to_buf(root, pretty, &small);
    CHECK(rc == 0 || rc == -ENOSPC);
    CHECK(small.len <= 16);
    buf_free(&small);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct json_object *root = NULL;
    int rc = json_parse_one((const char *)data, size, &root, err, sizeof(err));
    if (rc != 0) {
        CHECK(rc == -EINVAL && root == NULL);
        CHECK(strncmp(err, "line ", 5) == 0);
        return 0;
    }
    char path[512] = "";
    walk(root, root, path, 0, sizeof(path), 1);
    round_trip(root, 0);
    round_trip(root, 1);
    json_object_put(root);
    return 0;
}
