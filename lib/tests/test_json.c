/* Unit tests for lib/json: strict parsing (and its error messages), path getters, serializer. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"

static struct json_object *parse_ok(const char *text)
{
    char err[256] = "unset";
    struct json_object *o = NULL;
    int rc = json_parse_one(text, strlen(text), &o, err, sizeof(err));
    if (rc != 0) {
        fail_msg("parse of %s failed: %s", text, err);
    }
    assert_string_equal(err, "");
    return o;
}

/* Parses len bytes, expects failure with a message containing want. */
static void parse_bad_len(const char *text, size_t len, const char *want)
{
    char err[256] = "";
    struct json_object *o = NULL;
    int rc = json_parse_one(text, len, &o, err, sizeof(err));
    if (rc != -EINVAL || o != NULL) {
        fail_msg("parse of \"%.*s\" should fail with \"%s\"", (int)len, text, want);
    }
    if (!strstr(err, want)) {
        fail_msg("parse of \"%.*s\": error \"%s\" lacks \"%s\"", (int)len, text, err, want);
    }
    assert_null(json_parse(text, len, NULL, 0)); /* no error buffer is fine too */
}

static void parse_bad(const char *text, const char *want)
{
    parse_bad_len(text, strlen(text), want);
}

static char *to_string(struct json_object *o, int pretty)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(json_to_buf(o, pretty, &b), 0);
    return buf_detach(&b, NULL);
}

static void test_parse_values(void **state)
{
    (void)state;
    struct json_object *o =
        parse_ok(" {\"a\": [1, -2, 3.5, 1e2, true, false, null, \"s\"], \"b\": {}, \"c\": []}\n");
    assert_true(json_object_is_type(o, json_type_object));
    struct json_object *a = json_get(o, "a");
    assert_int_equal(json_object_array_length(a), 8);
    assert_string_equal(json_type_label(json_object_array_get_idx(a, 0)), "integer");
    assert_int_equal(json_object_get_int64(json_object_array_get_idx(a, 1)), -2);
    assert_string_equal(json_type_label(json_object_array_get_idx(a, 2)), "number");
    assert_string_equal(json_type_label(json_object_array_get_idx(a, 3)), "number");
    assert_true(json_object_get_double(json_object_array_get_idx(a, 3)) == 100.0);
    assert_string_equal(json_type_label(json_object_array_get_idx(a, 4)), "boolean");
    assert_null(json_object_array_get_idx(a, 6));
    assert_string_equal(json_type_label(json_object_array_get_idx(a, 6)), "null");
    assert_string_equal(json_object_get_string(json_object_array_get_idx(a, 7)), "s");
    json_object_put(o);

    /* Scalars at the top level. */
    o = parse_ok("\"top\"");
    assert_string_equal(json_object_get_string(o), "top");
    json_object_put(o);
    o = parse_ok("  -0 ");
    assert_int_equal(json_object_get_int64(o), 0);
    json_object_put(o);
    assert_null(parse_ok("null"));
    char err[64] = "x";
    assert_null(json_parse("null", 4, err, sizeof(err)));
    assert_string_equal(err, ""); /* null is not an error */
}

static void test_parse_strings(void **state)
{
    (void)state;
    struct json_object *o =
        parse_ok("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u00e9 \\u20AC \\ud83d\\ude00 \xc3\xa9\"");
    assert_string_equal(json_object_get_string(o),
                        "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xc3\xa9");
    json_object_put(o);
    /* \u0000 is allowed in a value (kept with its length), not in a key. */
    o = parse_ok("\"a\\u0000b\"");
    assert_int_equal(json_object_get_string_len(o), 3);
    assert_memory_equal(json_object_get_string(o), "a\0b", 3);
    json_object_put(o);
    parse_bad("{\"a\\u0000b\": 1}", "key contains \\u0000");
}

static void test_parse_numbers(void **state)
{
    (void)state;
    struct json_object *o = parse_ok("[9223372036854775807, -9223372036854775808, "
                                     "9223372036854775808, 99999999999999999999999, 1e-400, "
                                     "0.5e+1, 1E3]");
    assert_int_equal(json_object_get_int64(json_object_array_get_idx(o, 0)), INT64_MAX);
    assert_int_equal(json_object_get_int64(json_object_array_get_idx(o, 1)), INT64_MIN);
    /* Integers past int64 become doubles. */
    assert_string_equal(json_type_label(json_object_array_get_idx(o, 2)), "number");
    assert_true(json_object_get_double(json_object_array_get_idx(o, 2)) == 9223372036854775808.0);
    assert_string_equal(json_type_label(json_object_array_get_idx(o, 3)), "number");
    assert_true(json_object_get_double(json_object_array_get_idx(o, 4)) == 0.0); /* underflow */
    assert_true(json_object_get_double(json_object_array_get_idx(o, 5)) == 5.0);
    assert_true(json_object_get_double(json_object_array_get_idx(o, 6)) == 1000.0);
    json_object_put(o);

    parse_bad("1e400", "out of range");
    parse_bad("-1e400", "out of range");
    parse_bad("[1, 2e999999999999]", "line 1 column 5: number 2e999999999999 out of range");
    parse_bad("01", "leading zero");
    parse_bad("-", "expected a digit");
    parse_bad("1.", "expected a digit after '.'");
    parse_bad(".5", "unexpected character '.'");
    parse_bad("1e", "expected a digit in the exponent");
    parse_bad("+1", "unexpected character '+'");
    parse_bad("0x10", "trailing character 'x'");
    parse_bad("NaN", "unexpected character 'N'");
    parse_bad("Infinity", "unexpected character 'I'");
    parse_bad("-Infinity", "expected a digit");
}

static void test_parse_malformed(void **state)
{
    (void)state;
    parse_bad("", "line 1 column 1: unexpected end of input");
    parse_bad("   \n  ", "line 2 column 3: unexpected end of input");
    parse_bad("{\"a\": 1", "expected ',' or '}' in object, got end of input");
    parse_bad("{\"a\": ", "unexpected end of input");
    parse_bad("{\"a\"", "expected ':' after key \"a\", got end of input");
    parse_bad("{\"a", "unterminated string");
    parse_bad("\"abc\\", "unterminated string");
    parse_bad("[1, 2", "expected ',' or ']' in array, got end of input");
    parse_bad("[1,]", "unexpected character ']'");
    parse_bad("{\"a\": 1,}", "expected a string key, got character '}'");
    parse_bad("{'a': 1}", "expected a string key, got character '''");
    parse_bad("{a: 1}", "expected a string key, got character 'a'");
    parse_bad("[1 2]", "expected ',' or ']' in array, got character '2'");
    parse_bad("{\"a\" 1}", "expected ':' after key \"a\", got character '1'");
    parse_bad("tru", "invalid literal (expected true)");
    parse_bad("nul", "invalid literal (expected null)");
    parse_bad("[true false]", "got character 'f'");
    parse_bad("{} {}", "line 1 column 4: trailing character '{' after the JSON value");
    parse_bad("1 2", "trailing character '2'");
    parse_bad("{\"a\":1}\n\nx", "line 3 column 1: trailing character 'x'");
    parse_bad("// comment\n1", "unexpected character '/'");
    parse_bad("\"tab\there\"", "unescaped control character 0x09 in string");
    parse_bad("\"line\nbreak\"", "unescaped control character 0x0a");
    parse_bad("\"\\x41\"", "invalid escape in string");
    parse_bad("\"\\u12\"", "invalid \\u escape");
    parse_bad("\"\\uZZZZ\"", "invalid \\u escape");
    parse_bad("\"\\ud800\"", "lone high surrogate \\ud800");
    parse_bad("\"\\ud800\\u0041\"", "lone high surrogate");
    parse_bad("\"\\udc00\"", "lone low surrogate \\udc00");
    parse_bad("\xef\xbb\xbf{}", "unexpected byte 0xef"); /* BOM */
}

/* "[{},{},...]" costs json-c about 250 times its size: refused past JSON_PARSE_FACTOR x size +
 * JSON_PARSE_SLACK, while ordinary JSON of the same size parses. */
static void test_parse_too_dense(void **state)
{
    (void)state;
    size_t n = 200000; /* 600 KB of empty objects: ~150 MB of json-c objects */
    struct buf b;
    buf_init(&b, 1u << 24);
    buf_appends(&b, "[");
    for (size_t i = 0; i < n; i++) {
        buf_appends(&b, i ? ",{}" : "{}");
    }
    buf_appends(&b, "]");
    assert_false(buf_error(&b));
    char err[256] = "";
    assert_null(json_parse(b.data, b.len, err, sizeof(err)));
    assert_non_null(strstr(err, "JSON too dense: holding it would take more than"));
    assert_non_null(strstr(err, "(64 times its 600001 bytes plus 1024 KiB)"));
    buf_reset(&b);
    /* the same size of ordinary values parses */
    buf_appends(&b, "[");
    for (size_t i = 0; i < n / 4; i++) {
        buf_appends(&b, i ? ",\"abcdefghij\"" : "\"abcdefghij\"");
    }
    buf_appends(&b, "]");
    struct json_object *o = json_parse(b.data, b.len, err, sizeof(err));
    assert_non_null(o);
    assert_int_equal(json_object_array_length(o), n / 4);
    json_object_put(o);
    /* small dense documents fit in the slack */
    o = json_parse("[{},{},[],[[]]]", 15, err, sizeof(err));
    assert_non_null(o);
    json_object_put(o);
    buf_free(&b);
}

static void test_parse_nul_bytes(void **state)
{
    (void)state;
    parse_bad_len("\"a\0b\"", 5, "NUL byte in string");
    parse_bad_len("{\"a\": 1}\0", 9, "trailing NUL byte");
    parse_bad_len("\0", 1, "unexpected NUL byte");
    parse_bad_len("[1,\0]", 5, "unexpected NUL byte");
    /* Length is honoured: bytes after len are not read (a NUL-free prefix parses). */
    struct json_object *o = NULL;
    char err[128];
    assert_int_equal(json_parse_one("[1]garbage", 3, &o, err, sizeof(err)), 0);
    assert_int_equal(json_object_array_length(o), 1);
    json_object_put(o);
}

static void test_parse_invalid_utf8(void **state)
{
    (void)state;
    parse_bad("\"\xff\"", "invalid UTF-8 in string");
    parse_bad("\"\xc0\xaf\"", "invalid UTF-8");         /* overlong '/' */
    parse_bad("\"\xe0\x80\xaf\"", "invalid UTF-8");     /* overlong 3-byte */
    parse_bad("\"\xed\xa0\x80\"", "invalid UTF-8");     /* encoded surrogate */
    parse_bad("\"\xf4\x90\x80\x80\"", "invalid UTF-8"); /* past U+10FFFF */
    parse_bad("\"\x80\"", "invalid UTF-8");             /* stray continuation */
    parse_bad("\"\xe2\x82\"", "invalid UTF-8");         /* truncated sequence */
    parse_bad("{\"k\xfe\": 1}", "line 1 column 4: invalid UTF-8");
    struct json_object *o = parse_ok("\"\xf4\x8f\xbf\xbf \xef\xbf\xbf\""); /* max code points */
    json_object_put(o);
}

static void test_parse_duplicate_keys(void **state)
{
    (void)state;
    parse_bad("{\"a\": 1, \"b\": 2, \"a\": 3}", "line 1 column 18: duplicate key \"a\"");
    parse_bad("{\"x\": {\"y\": 1, \"y\": null}}", "duplicate key \"y\"");
    parse_bad("{\"a\": null, \"a\": null}", "duplicate key \"a\"");
    /* Same key in different objects is fine. */
    struct json_object *o = parse_ok("[{\"a\": 1}, {\"a\": 2}]");
    json_object_put(o);
}

static char *nested(int depth, int close)
{
    char *s = malloc((size_t)depth * 2 + 1);
    assert_non_null(s);
    for (int i = 0; i < depth; i++) {
        s[i] = '[';
        s[depth + i] = ']';
    }
    s[close ? depth * 2 : depth] = '\0';
    return s;
}

static void test_parse_depth(void **state)
{
    (void)state;
    char *ok = nested(JSON_MAX_DEPTH, 1);
    struct json_object *o = parse_ok(ok);
    assert_non_null(o);
    json_object_put(o);
    free(ok);
    char *deep = nested(JSON_MAX_DEPTH + 1, 1);
    parse_bad(deep, "line 1 column 65: nesting deeper than 64");
    free(deep);
    /* A huge unclosed nest fails fast on depth, not on stack. */
    char *bomb = nested(1000000, 0);
    parse_bad(bomb, "nesting deeper than 64");
    free(bomb);
    /* Objects count too: 65 nested objects. */
    char objs[65 * 6 + 65 + 1];
    size_t n = 0;
    for (int i = 0; i < 65; i++) {
        memcpy(objs + n, "{\"a\":", 5);
        n += 5;
    }
    objs[n++] = '1';
    for (int i = 0; i < 65; i++) {
        objs[n++] = '}';
    }
    objs[n] = '\0';
    parse_bad(objs, "line 1 column 321: nesting deeper than 64");
}

static const char *pod =
    "{\"apiVersion\": \"v1\", \"kind\": \"Pod\",\n"
    " \"metadata\": {\"name\": \"engine-0\", \"labels\": {\"app.kubernetes.io/name\": "
    "\"tandem\"}},\n"
    " \"spec\": {\"replicas\": 3, \"ratio\": 0.75, \"big\": 3000000000, \"whole\": 2.0,\n"
    "  \"half\": 2.5, \"enabled\": true, \"nothing\": null, \"huge\": 1e300,\n"
    "  \"containers\": [{\"name\": \"engine\", \"ports\": [{\"containerPort\": 8000}]},\n"
    "                 {\"name\": \"sidecar\"}]}}";

static void test_get_paths(void **state)
{
    (void)state;
    struct json_object *o = parse_ok(pod);
    char err[256];
    const char *s;
    assert_int_equal(json_get_string(o, "spec.containers[0].name", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "engine");
    assert_int_equal(json_get_string(o, "spec.containers[1].name", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "sidecar");
    int port;
    assert_int_equal(
        json_get_int(o, "spec.containers[0].ports[0].containerPort", &port, err, sizeof(err)), 0);
    assert_int_equal(port, 8000);
    assert_ptr_equal(json_get(o, ""), o);
    assert_ptr_equal(json_get(o, NULL), o);
    assert_non_null(json_get(o, "metadata.labels"));
    /* Keys with dots are reachable through json-c directly, not by path. */
    assert_null(json_get(o, "metadata.labels.app.kubernetes.io/name"));
    struct json_object *labels = json_get(o, "metadata.labels"), *v;
    assert_true(json_object_object_get_ex(labels, "app.kubernetes.io/name", &v));
    /* Absent or malformed paths. */
    assert_null(json_get(o, "spec.containers[2]"));
    assert_null(json_get(o, "spec.containers[99999999999999999999]"));
    assert_null(json_get(o, "spec.containers[x]"));
    assert_null(json_get(o, "spec.containers[0"));
    assert_null(json_get(o, "spec..replicas"));
    assert_null(json_get(o, "spec.replicas."));
    assert_null(json_get(o, ".spec"));
    assert_null(json_get(o, "spec.nothing"));
    assert_null(json_get(NULL, "a"));
    json_object_put(o);

    o = parse_ok("[[1, 2], {\"a\": [true]}]");
    assert_int_equal(json_object_get_int(json_get(o, "[0][1]")), 2);
    assert_true(json_object_get_boolean(json_get(o, "[1].a[0]")));
    json_object_put(o);
}

static void test_get_errors_name_the_field(void **state)
{
    (void)state;
    struct json_object *o = parse_ok(pod);
    char err[256];
    int i;
    int64_t i64;
    double d;
    int b;
    const char *s;
    struct json_object *child;

    assert_int_equal(json_get_int(o, "spec.missing", &i, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "spec.missing: required field is missing");
    assert_int_equal(json_get_int(o, "spec.nothing", &i, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "spec.nothing: required field is missing");
    assert_int_equal(json_get_int(o, "kind", &i, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "kind: expected integer, got string");
    assert_int_equal(json_get_string(o, "spec.replicas", &s, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.replicas: expected string, got integer");
    assert_int_equal(json_get_int(o, "spec.big", &i, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.big: 3000000000 is out of range for a 32-bit integer");
    assert_int_equal(json_get_int64(o, "spec.big", &i64, err, sizeof(err)), 0);
    assert_int_equal(i64, 3000000000LL);
    assert_int_equal(json_get_int(o, "spec.whole", &i, err, sizeof(err)), 0);
    assert_int_equal(i, 2);
    assert_int_equal(json_get_int(o, "spec.half", &i, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.half: expected integer, got number");
    assert_int_equal(json_get_int64(o, "spec.huge", &i64, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.huge: 1e+300 is out of range");
    assert_int_equal(json_get_double(o, "spec.replicas", &d, err, sizeof(err)), 0);
    assert_true(d == 3.0);
    assert_int_equal(json_get_double(o, "spec.ratio", &d, err, sizeof(err)), 0);
    assert_true(d == 0.75);
    assert_int_equal(json_get_double(o, "spec.enabled", &d, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.enabled: expected number, got boolean");
    assert_int_equal(json_get_bool(o, "spec.enabled", &b, err, sizeof(err)), 0);
    assert_int_equal(b, 1);
    assert_int_equal(json_get_bool(o, "spec.replicas", &b, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.replicas: expected boolean, got integer");
    assert_int_equal(json_get_object(o, "spec.containers", &child, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.containers: expected object, got array");
    assert_int_equal(json_get_array(o, "spec.containers", &child, err, sizeof(err)), 0);
    assert_int_equal(json_object_array_length(child), 2);
    assert_int_equal(json_get_array(o, "metadata", &child, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "metadata: expected array, got object");
    assert_int_equal(json_get_object(o, "metadata", &child, err, sizeof(err)), 0);
    /* A parent of the wrong type is named, not reported as missing. */
    assert_int_equal(json_get_string(o, "kind.name", &s, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "kind: expected object, got string");
    assert_int_equal(json_get_string(o, "spec.replicas[0]", &s, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.replicas: expected array, got integer");
    assert_int_equal(json_get_string(o, "spec.containers.name", &s, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "spec.containers: expected object, got array");
    assert_int_equal(json_get_string(o, "[0]", &s, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "[0]: expected array at the top level, got object");
    /* Small or absent error buffers are fine. */
    char tiny[5];
    assert_int_equal(json_get_int(o, "spec.missing", &i, tiny, sizeof(tiny)), -ENOENT);
    assert_string_equal(tiny, "spec");
    assert_int_equal(json_get_int(o, "spec.missing", &i, NULL, 0), -ENOENT);
    json_object_put(o);

    /* Integers past int64 (json-c uint64) are out of range, but fine as doubles. */
    struct json_object *big = json_object_new_object();
    json_object_object_add(big, "u", json_object_new_uint64(UINT64_MAX));
    assert_int_equal(json_get_int64(big, "u", &i64, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "u: 18446744073709551615 is out of range");
    assert_int_equal(json_get_double(big, "u", &d, err, sizeof(err)), 0);
    assert_true(d == 18446744073709551615.0);
    json_object_put(big);
}

static void test_opt_getters(void **state)
{
    (void)state;
    struct json_object *o = parse_ok(pod);
    char err[256];
    int i = 0;
    int64_t i64 = 0;
    double d = 0;
    int b = 0;
    const char *s = NULL;
    struct json_object *child = NULL, *def = json_object_new_array();
    assert_int_equal(json_opt_int(o, "spec.absent", 7, &i, err, sizeof(err)), 0);
    assert_int_equal(i, 7);
    assert_int_equal(json_opt_int(o, "spec.nothing", 8, &i, err, sizeof(err)), 0);
    assert_int_equal(i, 8);
    assert_int_equal(json_opt_int(o, "spec.replicas", 7, &i, err, sizeof(err)), 0);
    assert_int_equal(i, 3);
    assert_int_equal(json_opt_int(o, "kind", 7, &i, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "kind: expected integer, got string");
    assert_int_equal(json_opt_int64(o, "x.y.z", -1, &i64, err, sizeof(err)), 0);
    assert_int_equal(i64, -1);
    assert_int_equal(json_opt_double(o, "spec.absent", 0.5, &d, err, sizeof(err)), 0);
    assert_true(d == 0.5);
    assert_int_equal(json_opt_bool(o, "spec.absent", 1, &b, err, sizeof(err)), 0);
    assert_int_equal(b, 1);
    assert_int_equal(json_opt_bool(o, "spec.enabled", 0, &b, err, sizeof(err)), 0);
    assert_int_equal(b, 1);
    assert_int_equal(json_opt_string(o, "spec.absent", "dflt", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "dflt");
    assert_int_equal(json_opt_string(o, "kind", "dflt", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "Pod");
    assert_int_equal(json_opt_array(o, "spec.absent", def, &child, err, sizeof(err)), 0);
    assert_ptr_equal(child, def);
    assert_int_equal(json_opt_object(o, "spec.absent", NULL, &child, err, sizeof(err)), 0);
    assert_null(child);
    assert_int_equal(json_opt_object(o, "kind", NULL, &child, err, sizeof(err)), -EINVAL);
    /* A wrong-typed parent is still an error for optional fields. */
    assert_int_equal(json_opt_int(o, "kind.x", 1, &i, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "kind: expected object, got string");
    json_object_put(def);
    json_object_put(o);
}

static void test_serialize(void **state)
{
    (void)state;
    struct json_object *o = parse_ok(
        "{\"s\": \"a\\\"b\\\\c\\n\\u0001/\xc3\xa9\", \"i\": -5, \"d\": 2.0, \"f\": 0.1, "
        "\"e\": 1e300, \"t\": true, \"n\": null, \"a\": [], \"o\": {}, \"x\": [1, {\"y\": 2}]}");
    char *s = to_string(o, 0);
    assert_string_equal(s, "{\"s\":\"a\\\"b\\\\c\\n\\u0001/\xc3\xa9\",\"i\":-5,\"d\":2.0,"
                           "\"f\":0.1,\"e\":1e+300,\"t\":true,\"n\":null,\"a\":[],\"o\":{},"
                           "\"x\":[1,{\"y\":2}]}");
    free(s);
    s = to_string(o, 1);
    assert_string_equal(s, "{\n  \"s\": \"a\\\"b\\\\c\\n\\u0001/\xc3\xa9\",\n  \"i\": -5,\n"
                           "  \"d\": 2.0,\n  \"f\": 0.1,\n  \"e\": 1e+300,\n  \"t\": true,\n"
                           "  \"n\": null,\n  \"a\": [],\n  \"o\": {},\n  \"x\": [\n    1,\n"
                           "    {\n      \"y\": 2\n    }\n  ]\n}");
    /* Round trip: the pretty output parses back to an equal object. */
    struct json_object *back = parse_ok(s);
    assert_true(json_object_equal(o, back));
    json_object_put(back);
    free(s);
    json_object_put(o);

    /* Shortest round-trip doubles. */
    o = parse_ok("[0.30000000000000004, 123456.789, -0.0, 5e-324, 1.7976931348623157e308]");
    s = to_string(o, 0);
    assert_string_equal(s, "[0.30000000000000004,123456.789,-0.0,5e-324,"
                           "1.7976931348623157e+308]");
    back = parse_ok(s);
    assert_true(json_object_equal(o, back));
    json_object_put(back);
    free(s);
    json_object_put(o);

    /* NULL is null; uint64 is printed in full; strings with NULs keep them escaped. */
    s = to_string(NULL, 0);
    assert_string_equal(s, "null");
    free(s);
    o = json_object_new_array();
    json_object_array_add(o, json_object_new_uint64(UINT64_MAX));
    json_object_array_add(o, json_object_new_string_len("a\0b", 3));
    json_object_array_add(o, json_object_new_string("bad \xff utf8"));
    s = to_string(o, 0);
    assert_string_equal(s, "[18446744073709551615,\"a\\u0000b\",\"bad \\ufffd utf8\"]");
    free(s);
    json_object_put(o);
}

static void test_serialize_errors(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1024);
    struct json_object *o = json_object_new_double(NAN);
    assert_int_equal(json_to_buf(o, 0, &b), -EINVAL);
    json_object_put(o);
    o = json_object_new_double(INFINITY);
    assert_int_equal(json_to_buf(o, 0, &b), -EINVAL);
    json_object_put(o);
    buf_free(&b);

    /* A value JSON cannot hold, half-way through a document: the partial output is refused like
     * an append failure, so a builder that checks buf_error once cannot send "[1,". */
    buf_init(&b, 1024);
    o = json_object_new_array();
    json_object_array_add(o, json_object_new_int(1));
    json_object_array_add(o, json_object_new_double(NAN));
    assert_int_equal(json_to_buf(o, 0, &b), -EINVAL);
    assert_int_equal(buf_error(&b), -EINVAL);
    assert_int_equal(buf_appends(&b, "]"), -EINVAL);
    json_object_put(o);
    buf_free(&b);

    buf_init(&b, 8);
    o = parse_ok("{\"key\": \"a long value\"}");
    assert_int_equal(json_to_buf(o, 0, &b), -ENOSPC);
    json_object_put(o);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_values),
        cmocka_unit_test(test_parse_strings),
        cmocka_unit_test(test_parse_numbers),
        cmocka_unit_test(test_parse_too_dense),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test(test_parse_nul_bytes),
        cmocka_unit_test(test_parse_invalid_utf8),
        cmocka_unit_test(test_parse_duplicate_keys),
        cmocka_unit_test(test_parse_depth),
        cmocka_unit_test(test_get_paths),
        cmocka_unit_test(test_get_errors_name_the_field),
        cmocka_unit_test(test_opt_getters),
        cmocka_unit_test(test_serialize),
        cmocka_unit_test(test_serialize_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
