/* Unit tests for lib/yaml: kube-style scalar resolution, anchors and merges, multi-document
 * streams, and malformed input (with the line and column in the message). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/json.h"
#include "lib/yaml.h"

static struct json_object *yaml_ok(const char *text)
{
    char err[256] = "unset";
    struct json_object *o = NULL;
    int rc = yaml_parse_one(text, strlen(text), &o, err, sizeof(err));
    if (rc != 0) {
        fail_msg("yaml parse failed: %s\n---\n%s", err, text);
    }
    assert_string_equal(err, "");
    return o;
}

static void yaml_bad_len(const char *text, size_t len, const char *want)
{
    char err[256] = "";
    struct json_object *o = NULL;
    int rc = yaml_parse_one(text, len, &o, err, sizeof(err));
    if (rc != -EINVAL || o) {
        fail_msg("yaml parse should fail with \"%s\":\n%.*s", want, (int)len, text);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\" for:\n%.*s", err, want, (int)len, text);
    }
    if (!strstr(want, "single YAML document")) {
        struct json_object *docs = (struct json_object *)0x1;
        assert_int_equal(yaml_parse_all(text, len, &docs, NULL, 0), -EINVAL);
        assert_null(docs);
    }
}

static void yaml_bad(const char *text, const char *want)
{
    yaml_bad_len(text, strlen(text), want);
}

/* Compact JSON of the YAML document; caller frees. */
static char *yaml_json(const char *text)
{
    struct json_object *o = yaml_ok(text);
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(json_to_buf(o, 0, &b), 0);
    json_object_put(o);
    return buf_detach(&b, NULL);
}

static void assert_yaml_json(const char *text, const char *want)
{
    char *got = yaml_json(text);
    if (strcmp(got, want) != 0) {
        fail_msg("yaml:\n%s\ngot:  %s\nwant: %s", text, got, want);
    }
    free(got);
}

static void test_scalar_resolution(void **state)
{
    (void)state;
    /* Booleans and nulls like go-yaml v2 (what kubectl and sigs.k8s.io/yaml do). */
    assert_yaml_json("[true, True, TRUE, yes, Yes, YES, on, On, ON, y, Y]",
                     "[true,true,true,true,true,true,true,true,true,true,true]");
    assert_yaml_json("[false, False, FALSE, no, No, NO, off, Off, OFF, n, N]",
                     "[false,false,false,false,false,false,false,false,false,false,false]");
    assert_yaml_json("[tRUE, yES, oN, nO, \"yes\", 'no', !!str on]",
                     "[\"tRUE\",\"yES\",\"oN\",\"nO\",\"yes\",\"no\",\"on\"]");
    assert_yaml_json("[~, null, Null, NULL, nULL, \"null\", '']",
                     "[null,null,null,null,\"nULL\",\"null\",\"\"]");
    assert_yaml_json("a:\nb: ~\nc: !!str\n", "{\"a\":null,\"b\":null,\"c\":\"\"}");
    /* Integers: decimal, hex, 0o and 0NN octal, binary, signs, underscores. */
    assert_yaml_json("[0, -0, +5, 42, 0x1F, 0X1f, -0x10, 0o17, 017, 0755, 0b101, 1_000_000, "
                     "9223372036854775807, -9223372036854775808]",
                     "[0,0,5,42,31,31,-16,15,15,493,5,1000000,9223372036854775807,"
                     "-9223372036854775808]");
    /* Past int64: uint64 when it fits, then float; 08 is not octal so it is a float. */
    assert_yaml_json("[9223372036854775808, 18446744073709551615, 18446744073709551616, "
                     "-9223372036854775809, 08, 0x, 0b2, 1__2]",
                     "[9223372036854775808,18446744073709551615,18446744073709551616.0,"
                     "-9223372036854775808.0,8.0,\"0x\",\"0b2\",12]");
    /* Floats. */
    assert_yaml_json("[1.5, -2.25, .5, -.5, 1., 1e3, 1.5E-3, +1.0e+2, 3.14_15]",
                     "[1.5,-2.25,0.5,-0.5,1.0,1000.0,0.0015,100.0,3.1415]");
    /* Not numbers: overflowing floats, versions, timestamps, hex floats, text. */
    assert_yaml_json("[1e400, 1.2.3, 2001-12-14, 2001-12-14t21:59:43.10-05:00, 0x1p3, 1e, "
                     "12:30, 1_, _1, \"42\", '3.5', v1]",
                     "[\"1e400\",\"1.2.3\",\"2001-12-14\",\"2001-12-14t21:59:43.10-05:00\","
                     "\"0x1p3\",\"1e\",\"12:30\",1,\"_1\",\"42\",\"3.5\",\"v1\"]");
    /* Non-finite floats parse (but JSON cannot hold them). */
    struct json_object *o = yaml_ok("[.inf, -.Inf, +.INF, .nan, .NaN]");
    assert_true(isinf(json_object_get_double(json_object_array_get_idx(o, 0))));
    assert_true(json_object_get_double(json_object_array_get_idx(o, 1)) < 0);
    assert_true(isinf(json_object_get_double(json_object_array_get_idx(o, 2))));
    assert_true(isnan(json_object_get_double(json_object_array_get_idx(o, 3))));
    assert_true(isnan(json_object_get_double(json_object_array_get_idx(o, 4))));
    json_object_put(o);
    /* Block scalars and quoting are strings. */
    assert_yaml_json(
        "a: |\n  line1\n  line2\nb: >\n  folded\n  text\nc: \"tab\\there\\u00e9\"\n"
        "d: 'it''s'\ne: \"\\0nul\"\n",
        "{\"a\":\"line1\\nline2\\n\",\"b\":\"folded text\\n\",\"c\":\"tab\\there\xc3\xa9\","
        "\"d\":\"it's\",\"e\":\"\\u0000nul\"}");
}

static void test_tags(void **state)
{
    (void)state;
    assert_yaml_json("[!!str 1, !!str true, !!str ~, !!int \"7\", !!int 0x10, !!float 3, "
                     "!!float \"2.5\", !!bool \"yes\", !!null ~, !!binary aGk=, ! 12, !custom 12, "
                     "!!timestamp 2001-01-01]",
                     "[\"1\",\"true\",\"~\",7,16,3.0,2.5,true,null,\"aGk=\",\"12\",12,"
                     "\"2001-01-01\"]");
    yaml_bad("a: !!int foo", "line 1 column 4: cannot decode \"foo\" as !!int");
    yaml_bad("a: !!int 1.5", "cannot decode \"1.5\" as !!int");
    yaml_bad("a: !!float abc", "cannot decode \"abc\" as !!float");
    yaml_bad("a: !!bool maybe", "cannot decode \"maybe\" as !!bool");
    yaml_bad("a: !!null x", "cannot decode \"x\" as !!null");
}

static const char *kubeconfig = "apiVersion: v1\n"
                                "kind: Config\n"
                                "clusters:\n"
                                "- cluster:\n"
                                "    certificate-authority-data: LS0tLS1CRUdJTi==\n"
                                "    server: https://127.0.0.1:6443\n"
                                "  name: kind-tandem\n"
                                "contexts:\n"
                                "- context:\n"
                                "    cluster: kind-tandem\n"
                                "    user: kind-tandem\n"
                                "    namespace: default\n"
                                "  name: kind-tandem\n"
                                "current-context: kind-tandem\n"
                                "preferences: {}\n"
                                "users:\n"
                                "- name: kind-tandem\n"
                                "  user:\n"
                                "    token: abc.def\n"
                                "    exec: null\n";

static void test_kubeconfig(void **state)
{
    (void)state;
    struct json_object *o = yaml_ok(kubeconfig);
    char err[256];
    const char *s;
    assert_int_equal(json_get_string(o, "current-context", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "kind-tandem");
    assert_int_equal(json_get_string(o, "clusters[0].cluster.server", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "https://127.0.0.1:6443");
    assert_int_equal(json_get_string(o, "users[0].user.token", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "abc.def");
    assert_int_equal(json_get_string(o, "contexts[0].context.namespace", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "default");
    struct json_object *prefs;
    assert_int_equal(json_get_object(o, "preferences", &prefs, err, sizeof(err)), 0);
    assert_int_equal(json_object_object_length(prefs), 0);
    assert_null(json_get(o, "users[0].user.exec"));
    assert_int_equal(json_get_string(o, "users[0].user.exec", &s, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "users[0].user.exec: required field is missing");
    json_object_put(o);
}

static void test_anchors_and_merges(void **state)
{
    (void)state;
    const char *text = "defaults: &defaults\n"
                       "  image: engine:v1\n"
                       "  resources: &res {gpu: 1, memory: 80Gi}\n"
                       "prefill:\n"
                       "  <<: *defaults\n"
                       "  role: prefill\n"
                       "  image: engine:v2\n"
                       "decode:\n"
                       "  <<: [*defaults, {role: decode, replicas: 4}]\n"
                       "  resources: *res\n"
                       "plain: *res\n"
                       "quoted:\n"
                       "  \"<<\": not a merge\n";
    struct json_object *o = yaml_ok(text);
    char err[256];
    const char *s;
    int n;
    /* Explicit keys win over merged ones, wherever they appear. */
    assert_int_equal(json_get_string(o, "prefill.image", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "engine:v2");
    assert_int_equal(json_get_string(o, "prefill.role", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "prefill");
    assert_int_equal(json_get_int(o, "prefill.resources.gpu", &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
    assert_null(json_get(o, "prefill.<<"));
    /* Earlier merge sources win over later ones. */
    assert_int_equal(json_get_string(o, "decode.image", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "engine:v1");
    assert_int_equal(json_get_string(o, "decode.role", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "decode");
    assert_int_equal(json_get_int(o, "decode.replicas", &n, err, sizeof(err)), 0);
    assert_int_equal(n, 4);
    assert_int_equal(json_get_string(o, "plain.memory", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "80Gi");
    assert_int_equal(json_get_string(o, "quoted.<<", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "not a merge");
    /* Aliases are copies: changing one does not change the other. */
    json_object_object_add(json_get(o, "plain"), "gpu", json_object_new_int(8));
    assert_int_equal(json_get_int(o, "defaults.resources.gpu", &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
    json_object_put(o);

    /* Scalar anchors, anchors used as keys, redefinition. */
    assert_yaml_json("- &a p\n- *a\n- &a q\n- *a\n- {*a : 1}\n",
                     "[\"p\",\"p\",\"q\",\"q\",{\"q\":1}]");
    assert_yaml_json("- &n 10\n- {*n : ten}\n", "[10,{\"10\":\"ten\"}]");
    yaml_bad("- &m {a: 1}\n- {*m : 1}\n", "line 2 column 4: map keys must be scalars");
    yaml_bad("- &z ~\n- {*z : 1}\n", "null map key");

    yaml_bad("a: *nope", "line 1 column 4: unknown anchor \"nope\"");
    yaml_bad("a: &a [1, *a]", "unknown anchor \"a\""); /* no self reference */
    yaml_bad("a:\n  <<: 1\n", "line 2 column 3: merge key \"<<\" needs a mapping");
    yaml_bad("a:\n  <<: [{x: 1}, 2]\n", "merge key \"<<\" needs a mapping");
    yaml_bad("a:\n  <<: ~\n", "merge key");
    /* Anchors do not cross documents. */
    struct json_object *docs = NULL;
    assert_int_equal(yaml_parse_all("a: &x 1\n---\nb: *x\n", 18, &docs, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "line 3 column 4: unknown anchor \"x\"");
}

static void test_alias_bomb(void **state)
{
    (void)state;
    /* Billion laughs: 10^9 nodes if expanded. Must fail fast on the budget. */
    const char *bomb =
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
        "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
        "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n";
    yaml_bad(bomb, "alias expansion exceeds 100000 nodes");
    /* A bomb through mappings, merge keys and a different fan-out is bounded the same way. */
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(buf_appends(&b, "l0: &l0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8}\n"),
                     0);
    for (int i = 1; i < 12; i++) {
        assert_int_equal(buf_appendf(&b,
                                     "l%d: &l%d {<<: *l%d, x: [*l%d, *l%d, *l%d, *l%d, *l%d]}\n", i,
                                     i, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1),
                         0);
    }
    yaml_bad(buf_cstr(&b), "alias expansion exceeds");
    buf_free(&b);
    /* Moderate reuse is fine. */
    struct json_object *o = yaml_ok("a: &a [1, 2, 3]\nb: [*a, *a, *a, *a]\n");
    assert_int_equal(json_object_array_length(json_get(o, "b")), 4);
    assert_int_equal(json_object_get_int(json_get(o, "b[3][2]")), 3);
    json_object_put(o);
}

static void test_multi_document(void **state)
{
    (void)state;
    const char *stream = "# leading comment\n"
                         "---\n"
                         "apiVersion: v1\n"
                         "kind: Service\n"
                         "metadata: {name: epp}\n"
                         "---\n"
                         "# an empty document\n"
                         "---\n"
                         "~\n"
                         "---\n"
                         "apiVersion: apps/v1\n"
                         "kind: Deployment\n"
                         "metadata: {name: engine}\n"
                         "...\n"
                         "---\n"
                         "kind: ConfigMap\n";
    char err[256];
    struct json_object *docs = NULL;
    assert_int_equal(yaml_parse_all(stream, strlen(stream), &docs, err, sizeof(err)), 0);
    assert_int_equal(json_object_array_length(docs), 3);
    const char *s;
    assert_int_equal(json_get_string(docs, "[0].kind", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "Service");
    assert_int_equal(json_get_string(docs, "[1].metadata.name", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "engine");
    assert_int_equal(json_get_string(docs, "[2].kind", &s, err, sizeof(err)), 0);
    assert_string_equal(s, "ConfigMap");
    json_object_put(docs);

    /* yaml_parse wants exactly one non-empty document. */
    yaml_bad(stream, "line 10 column 1: expected a single YAML document, found another one here");
    yaml_bad("a: 1\n---\nb: 2\n", "line 2 column 1: expected a single YAML document");
    struct json_object *o = yaml_ok("---\na: 1\n---\n");
    assert_int_equal(json_object_get_int(json_get(o, "a")), 1);
    json_object_put(o);

    /* Empty inputs: null document, empty stream. */
    const char *empties[] = {"",    "\n\n", "# only a comment\n", "---\n", "---\n...\n",
                             "~\n", "null"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        o = (struct json_object *)0x1;
        err[0] = 'x';
        assert_int_equal(yaml_parse_one(empties[i], strlen(empties[i]), &o, err, sizeof(err)), 0);
        assert_null(o);
        assert_string_equal(err, "");
        assert_null(yaml_parse(empties[i], strlen(empties[i]), err, sizeof(err)));
        assert_string_equal(err, "");
        assert_int_equal(yaml_parse_all(empties[i], strlen(empties[i]), &docs, err, sizeof(err)),
                         0);
        assert_int_equal(json_object_array_length(docs), 0);
        json_object_put(docs);
    }
    assert_int_equal(yaml_parse_all(NULL, 0, &docs, err, sizeof(err)), 0);
    json_object_put(docs);
}

static void test_keys(void **state)
{
    (void)state;
    /* Non-string scalar keys become their canonical text, like sigs.k8s.io/yaml. */
    assert_yaml_json("{1: a, 0x10: b, true: c, off: d, 1.5: e, \"2\": f, -7: g, 1e3: h}",
                     "{\"1\":\"a\",\"16\":\"b\",\"true\":\"c\",\"false\":\"d\",\"1.5\":\"e\","
                     "\"2\":\"f\",\"-7\":\"g\",\"1e3\":\"h\"}");
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    yaml_bad("a: 1\nb: 2\na: 3\n", "line 3 column 1: duplicate key \"a\"");
    yaml_bad("spec:\n  replicas: 1\n  replicas: 2\n",
             "line 3 column 3: duplicate key \"replicas\"");
    yaml_bad("{on: 1, true: 2}", "line 1 column 9: duplicate key \"true\"");
    yaml_bad("{1: a, 0x1: b}", "duplicate key \"1\"");
    yaml_bad("{\"a\": 1, 'a': 2}", "duplicate key \"a\"");
    /* A merged key does not clash with an explicit one. */
    struct json_object *o = yaml_ok("b: &b {x: 1}\nc: {<<: *b, x: 2}\n");
    assert_int_equal(json_object_get_int(json_get(o, "c.x")), 2);
    json_object_put(o);
}

static void test_bad_keys(void **state)
{
    (void)state;
    yaml_bad("? [a, b]\n: 1\n", "line 1 column 3: map keys must be scalars, got a sequence");
    yaml_bad("? {a: b}\n: 1\n", "map keys must be scalars, got a mapping");
    yaml_bad("{[1]: 2}", "map keys must be scalars");
    yaml_bad("~: 1", "line 1 column 1: null map key is not supported");
    yaml_bad("?\n: 1", "line 1 column 2: null map key");
    yaml_bad("{? : 1}", "line 1 column 4: null map key");
    yaml_bad("\"a\\0b\": 1", "map key contains a NUL character");
}

static void test_malformed(void **state)
{
    (void)state;
    yaml_bad("[a, b", "line 2 column 1: did not find expected ',' or ']'");
    yaml_bad("{a: 1", "did not find expected ',' or '}'");
    yaml_bad("a: \"unterminated", "found unexpected end of stream");
    yaml_bad("a: 'x", "found unexpected end of stream");
    yaml_bad("a:\n\tb: 1\n", "line 2 column 1: found character that cannot start any token");
    yaml_bad("a: b: c", "line 1 column 5: mapping values are not allowed in this context");
    yaml_bad("- a\nb: c\n", "line 2 column 1: did not find expected '-' indicator");
    yaml_bad("a: 1\n b: 2\n", "mapping values are not allowed");
    yaml_bad("a: [1, 2]]", "line 1 column 10: did not find expected key");
    yaml_bad("%YAML 1.1\n%YAML 1.1\n---\na", "found duplicate %YAML directive");
    yaml_bad("a: *", "did not find expected alphabetic or numeric character");
    yaml_bad("a: &", "did not find expected alphabetic or numeric character");
    yaml_bad("a: !<", "did not find expected tag URI");
    yaml_bad("\"\\q\"", "found unknown escape character");
    /* Invalid UTF-8 and NUL bytes. */
    yaml_bad("a: \xff\n", "invalid leading UTF-8 octet");
    yaml_bad("a: \xc3\x28\n", "invalid trailing UTF-8 octet");
    yaml_bad("a: \xed\xa0\x80\n", "invalid Unicode character");
    yaml_bad_len("a: b\0c\n", 7, "control characters are not allowed");
    yaml_bad_len("\0", 1, "control characters are not allowed");
    /* Truncated documents at every length never crash, and either parse or explain. */
    const char *doc = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"x\"\n  labels: {a: 'b'}\n"
                      "spec:\n  containers:\n  - name: c\n    args: [\"--port\", 8000]\n";
    for (size_t n = 0; n <= strlen(doc); n++) {
        char err[256] = "";
        struct json_object *o = NULL;
        int rc = yaml_parse_one(doc, n, &o, err, sizeof(err));
        if (rc != 0) {
            assert_int_equal(rc, -EINVAL);
            assert_int_equal(strncmp(err, "line ", 5), 0);
        }
        json_object_put(o);
    }
}

static void test_deep_nesting(void **state)
{
    (void)state;
    char ok[YAML_MAX_DEPTH * 2 + 1];
    for (int i = 0; i < YAML_MAX_DEPTH; i++) {
        ok[i] = '[';
        ok[YAML_MAX_DEPTH + i] = ']';
    }
    ok[YAML_MAX_DEPTH * 2] = '\0';
    struct json_object *o = yaml_ok(ok);
    json_object_put(o);
    size_t n = 200000;
    char *deep = malloc(n + 1);
    assert_non_null(deep);
    memset(deep, '[', n);
    deep[n] = '\0';
    yaml_bad(deep, "line 1 column 129: nesting deeper than 128");
    /* Block-style nesting as well. */
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(buf_appendf(&b, "%*sk:\n", i, ""), 0);
    }
    yaml_bad(buf_cstr(&b), "nesting deeper than 128");
    buf_free(&b);
    free(deep);
}

static void test_huge_numbers_and_long_scalars(void **state)
{
    (void)state;
    /* A 300-digit integer is a float (like Go's ParseFloat); 400 digits overflow: text. */
    char text[500];
    memset(text, '9', 300);
    text[300] = '\0';
    struct json_object *o = yaml_ok(text);
    assert_string_equal(json_type_label(o), "number");
    assert_true(json_object_get_double(o) == 1e300);
    json_object_put(o);
    memset(text, '9', 400);
    text[400] = '\0';
    o = yaml_ok(text);
    assert_string_equal(json_type_label(o), "string");
    assert_int_equal(json_object_get_string_len(o), 400);
    json_object_put(o);
    memcpy(text, "0.", 2);
    o = yaml_ok(text);
    assert_string_equal(json_type_label(o), "number");
    json_object_put(o);
    o = yaml_ok("1e308");
    assert_true(json_object_get_double(o) == 1e308);
    json_object_put(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_resolution),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_kubeconfig),
        cmocka_unit_test(test_anchors_and_merges),
        cmocka_unit_test(test_alias_bomb),
        cmocka_unit_test(test_multi_document),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_bad_keys),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_huge_numbers_and_long_scalars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
