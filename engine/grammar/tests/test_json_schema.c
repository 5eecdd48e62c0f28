/* Unit tests for engine/grammar/json_schema.h: the grammars are compiled with grammar.h and
 * checked on documents that must and must not match (every accepted document must also parse as
 * JSON): types, objects with every combination of optional members, additionalProperties,
 * arrays and tuples, string lengths, patterns and formats, exhaustive integer ranges, decimal
 * ranges on a grid, enum/const, combinators, $ref recursion, whitespace, and an error with a
 * message naming the keyword and its JSON pointer for every refused schema. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "lib/json.h"

static grammar *compile_text(const struct buf *b)
{
    char err[256];
    grammar *g = NULL;
    int rc = grammar_compile(b->data, b->len, NULL, &g, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "grammar_compile: %d %s\n%s\n", rc, err, buf_cstr(b));
    }
    assert_int_equal(rc, 0);
    return g;
}

/* The compiled grammar of a schema; fails the test on any error. */
static grammar *schema_grammar(const char *schema)
{
    struct buf b;
    char err[256];
    buf_init(&b, (size_t)1 << 22);
    int rc = json_schema_to_gbnf(schema, strlen(schema), &b, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "json_schema_to_gbnf(%s): %d %s\n", schema, rc, err);
    }
    assert_int_equal(rc, 0);
    grammar *g = compile_text(&b);
    buf_free(&b);
    return g;
}

static void check_match(grammar *g, const char *doc, size_t n, int want, int line)
{
    int got = grammar_match(g, doc, n);
    if (got != want) {
        fprintf(stderr, "line %d: \"%.*s\": got %d, want %d\n", line, (int)n, doc, got, want);
    }
    assert_int_equal(got, want);
    if (got == 1) { /* every sentence is JSON */
        char err[128];
        struct json_object *o = NULL;
        int rc = json_parse_one(doc, n, &o, err, sizeof(err));
        if (rc != 0) {
            fprintf(stderr, "line %d: accepted \"%.*s\" is not JSON: %s\n", line, (int)n, doc, err);
        }
        assert_int_equal(rc, 0);
        json_object_put(o);
    }
}

#define ACCEPT(g, s) check_match((g), (s), strlen(s), 1, __LINE__)
#define REJECT(g, s) check_match((g), (s), strlen(s), 0, __LINE__)

static void test_json_object(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1 << 16);
    assert_int_equal(json_object_gbnf(&b), 0);
    grammar *g = compile_text(&b);
    ACCEPT(g, "{}");
    ACCEPT(g, "{\"a\":1,\"b\":[true,null,{\"c\":\"d\\n\\u00e9\"}],\"e\":-1.5e3}");
    ACCEPT(g, "{ \"a\" : { } ,\n  \"\" : [ ] }\n");
    REJECT(g, "[]");
    REJECT(g, "\"x\"");
    REJECT(g, "1");
    REJECT(g, "{\"a\":1,}");
    REJECT(g, "{\"a\"}");
    REJECT(g, "{a:1}");
    REJECT(g, "{\"\\u0000\":1}"); /* keys never hold U+0000 (lib/json.h refuses them) */
    grammar_free(g);
    buf_free(&b);
    buf_init(&b, 16); /* the cap */
    assert_int_equal(json_object_gbnf(&b), -E2BIG);
    buf_free(&b);
}

static void test_any_value(void **state)
{
    (void)state;
    const char *schemas[] = {"true", "{}",
                             "{\"title\":\"t\",\"description\":\"d\",\"default\":1,"
                             "\"examples\":[],\"$schema\":\"x\",\"$id\":\"y\","
                             "\"$comment\":\"c\",\"deprecated\":false,"
                             "\"readOnly\":true,\"writeOnly\":false}"};
    for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
        grammar *g = schema_grammar(schemas[i]);
        ACCEPT(g, "null");
        ACCEPT(g, "true");
        ACCEPT(g, "-0.25E+12");
        ACCEPT(g, "\"s\\\"\\\\\\/\\b\\f\\n\\r\\t\\u20ac\"");
        ACCEPT(g, "[1, [2, {\"a\": []}]]");
        ACCEPT(g, "{\"k\": {\"k\": null}}");
        REJECT(g, "");
        REJECT(g, " 1");
        REJECT(g, "01");
        REJECT(g, "1.");
        REJECT(g, ".5");
        REJECT(g, "+1");
        REJECT(g, "nul");
        REJECT(g, "\"\\x\"");
        REJECT(g, "\"\\ud800\""); /* no surrogate escapes */
        REJECT(g, "\"a\nb\"");
        REJECT(g, "[1,]");
        grammar_free(g);
    }
}

static void test_types(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\":\"string\"}");
    ACCEPT(g, "\"\"");
    ACCEPT(g, "\"caf\xc3\xa9 \\u00e9 \xf0\x9f\x98\x80\"");
    REJECT(g, "1");
    REJECT(g, "null");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"integer\"}");
    ACCEPT(g, "0");
    ACCEPT(g, "-17");
    ACCEPT(g, "1234567890123456");
    REJECT(g, "1.0");
    REJECT(g, "1e3");
    REJECT(g, "\"1\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"number\"}");
    ACCEPT(g, "0");
    ACCEPT(g, "-1.5");
    ACCEPT(g, "2.5e-7");
    ACCEPT(g, "1E99");
    REJECT(g, "1e");
    REJECT(g, "true");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"boolean\"}");
    ACCEPT(g, "true");
    ACCEPT(g, "false");
    REJECT(g, "null");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"null\"}");
    ACCEPT(g, "null");
    REJECT(g, "0");
    grammar_free(g);
    g = schema_grammar("{\"type\":[\"string\",\"null\"]}");
    ACCEPT(g, "null");
    ACCEPT(g, "\"x\"");
    REJECT(g, "1");
    grammar_free(g);
    g = schema_grammar("{\"type\":[\"integer\",\"number\"],\"maximum\":2}");
    ACCEPT(g, "2");
    ACCEPT(g, "1.5");
    REJECT(g, "2.5");
    grammar_free(g);
    /* keywords without type describe their kind */
    g = schema_grammar("{\"minLength\":2,\"minimum\":5}");
    ACCEPT(g, "\"ab\"");
    ACCEPT(g, "7");
    REJECT(g, "\"a\"");
    REJECT(g, "4");
    REJECT(g, "null");
    grammar_free(g);
    /* keywords of another type are ignored (they do not apply) */
    g = schema_grammar("{\"type\":\"integer\",\"format\":\"int32\",\"maxLength\":1}");
    ACCEPT(g, "123");
    grammar_free(g);
}

/* Every subset of properties a b c d (in order) against the required ones. */
static void test_object_combinations(void **state)
{
    (void)state;
    static const char *names[4] = {"a", "b", "c", "d"};
    static const unsigned required_sets[] = {0x0, 0x2, 0x5, 0x8, 0xF, 0x1};
    for (size_t r = 0; r < sizeof(required_sets) / sizeof(required_sets[0]); r++) {
        unsigned req = required_sets[r];
        char schema[512];
        int n = snprintf(schema, sizeof(schema),
                         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                         "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"},"
                         "\"d\":{\"type\":\"null\"}},\"required\":[");
        const char *sep = "";
        for (int i = 0; i < 4; i++) {
            if (req & (1u << i)) {
                n += snprintf(schema + n, sizeof(schema) - (size_t)n, "%s\"%s\"", sep, names[i]);
                sep = ",";
            }
        }
        snprintf(schema + n, sizeof(schema) - (size_t)n, "]}");
        grammar *g = schema_grammar(schema);
        static const char *values[4] = {"1", "\"x\"", "true", "null"};
        for (unsigned subset = 0; subset < 16; subset++) {
            char doc[256], spaced[256];
            size_t k = 0, m = 0;
            doc[k++] = '{';
            m += (size_t)sprintf(spaced + m, "{\n  ");
            int count = 0;
            for (int i = 0; i < 4; i++) {
                if (subset & (1u << i)) {
                    k += (size_t)sprintf(doc + k, "%s\"%s\":%s", count ? "," : "", names[i],
                                         values[i]);
                    m += (size_t)sprintf(spaced + m, "%s\"%s\" : %s", count ? " ,\n  " : "",
                                         names[i], values[i]);
                    count++;
                }
            }
            doc[k++] = '}';
            doc[k] = '\0';
            sprintf(count ? spaced + m : spaced, count ? "\n}" : "{ }");
            int want = (subset & req) == req;
            check_match(g, doc, k, want, __LINE__);
            check_match(g, spaced, strlen(spaced), want, __LINE__);
        }
        REJECT(g, "{\"b\":\"x\",\"a\":1,\"c\":true,\"d\":null}");         /* out of schema order */
        REJECT(g, "{\"a\":1,\"b\":\"x\",\"c\":true,\"d\":null,\"e\":1}"); /* strict */
        REJECT(g, "{\"a\":1,\"a\":1,\"b\":\"x\",\"c\":true,\"d\":null}");
        REJECT(g, "{,\"a\":1,\"b\":\"x\",\"c\":true,\"d\":null}");
        REJECT(g, "{\"a\":1,\"b\":\"x\",\"c\":true,\"d\":null,}");
        grammar_free(g);
    }
}

static void test_additional_properties(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"properties\":{\"a\":{\"type\":\"string\"},\"ab\":{\"type\":"
                                "\"string\"}},\"additionalProperties\":{\"type\":\"integer\"}}");
    ACCEPT(g, "{}");
    ACCEPT(g, "{\"a\":\"x\"}");
    ACCEPT(g, "{\"ab\":\"y\"}");
    ACCEPT(g, "{\"a\":\"x\",\"ab\":\"y\",\"abc\":1,\"b\":2,\"\":3,\"\\\"\":4,\"a\\n\":5}");
    ACCEPT(g, "{\"abc\":1}");
    ACCEPT(g, "{\"A\":1}");
    ACCEPT(g, "{\"\xc3\xa9\":1}");
    REJECT(g, "{\"a\":1}"); /* a is a string, extra keys never reuse its name */
    REJECT(g, "{\"ab\":1}");
    REJECT(g, "{\"a\\u0062\":1}");       /* "ab" spelled with an escape */
    REJECT(g, "{\"\\u0061\":1}");        /* "a" */
    REJECT(g, "{\"x\":\"s\"}");          /* extra values are integers */
    REJECT(g, "{\"zz\":1,\"a\":\"x\"}"); /* extra members come last */
    grammar_free(g);
    /* true: any extra value; absent with properties: none */
    g = schema_grammar(
        "{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}");
    ACCEPT(g, "{\"a\":1,\"b\":[{}],\"c\":\"x\"}");
    REJECT(g, "{\"a\":\"x\"}");
    grammar_free(g);
    g = schema_grammar("{\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    ACCEPT(g, "{\"a\":1}");
    REJECT(g, "{\"a\":1,\"b\":1}");
    grammar_free(g);
    g = schema_grammar("{\"properties\":{\"a\":{}},\"additionalProperties\":false}");
    REJECT(g, "{\"b\":1}");
    grammar_free(g);
    /* no properties: {"type":"object"} is any object; a schema for every member */
    g = schema_grammar("{\"type\":\"object\"}");
    ACCEPT(g, "{\"x\":{\"y\":[1]}}");
    REJECT(g, "[]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}");
    ACCEPT(g, "{}");
    ACCEPT(g, "{\"x\":true,\"y\":false}");
    REJECT(g, "{\"x\":1}");
    grammar_free(g);
    /* a required name only additionalProperties describes */
    g = schema_grammar("{\"properties\":{\"a\":{}},\"required\":[\"a\",\"z\"],"
                       "\"additionalProperties\":{\"type\":\"boolean\"}}");
    ACCEPT(g, "{\"a\":1,\"z\":true}");
    ACCEPT(g, "{\"a\":1,\"z\":true,\"y\":false}");
    REJECT(g, "{\"a\":1}");
    REJECT(g, "{\"a\":1,\"z\":1}");
    REJECT(g, "{\"a\":1,\"y\":false,\"z\":true}");
    grammar_free(g);
    /* property names that need escaping */
    g = schema_grammar("{\"properties\":{\"q\\\"x\":{\"type\":\"integer\"},\"t\\tb\":{},"
                       "\"\xc3\xa9\":{\"type\":\"null\"}},\"required\":[\"q\\\"x\"]}");
    ACCEPT(g, "{\"q\\\"x\":1,\"t\\tb\":[],\"\xc3\xa9\":null}");
    REJECT(g, "{\"q\\\"x\":1,\"t\\u0009b\":[]}");
    grammar_free(g);
    /* trivially satisfied property counts */
    g = schema_grammar("{\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"a\"],"
                       "\"minProperties\":1,\"maxProperties\":2}");
    ACCEPT(g, "{\"a\":1}");
    grammar_free(g);
}

static void test_arrays(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
                                "\"minItems\":2,\"maxItems\":4}");
    REJECT(g, "[]");
    REJECT(g, "[1]");
    ACCEPT(g, "[1,2]");
    ACCEPT(g, "[ 1 , 2 , 3 , 4 ]");
    REJECT(g, "[1,2,3,4,5]");
    REJECT(g, "[1,\"a\"]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\"}");
    ACCEPT(g, "[]");
    ACCEPT(g, "[1,\"a\",{},[null]]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"maxItems\":1}");
    ACCEPT(g, "[]");
    ACCEPT(g, "[1]");
    REJECT(g, "[1,2]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"maxItems\":0}");
    ACCEPT(g, "[]");
    REJECT(g, "[1]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"minItems\":1,\"items\":{\"type\":\"null\"}}");
    ACCEPT(g, "[null]");
    ACCEPT(g, "[null,null,null]");
    REJECT(g, "[]");
    grammar_free(g);
    /* a tuple without items: nothing after it */
    g = schema_grammar("{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}");
    ACCEPT(g, "[]");
    ACCEPT(g, "[\"a\"]");
    ACCEPT(g, "[\"a\",1]");
    REJECT(g, "[\"a\",1,2]");
    REJECT(g, "[1]");
    grammar_free(g);
    g = schema_grammar("{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
                       "\"items\":{\"type\":\"boolean\"},\"minItems\":3,\"maxItems\":4}");
    ACCEPT(g, "[\"a\",1,true]");
    ACCEPT(g, "[\"a\",1,true,false]");
    REJECT(g, "[\"a\",1]");
    REJECT(g, "[\"a\",1,true,false,true]");
    REJECT(g, "[\"a\",1,1]");
    grammar_free(g);
    g = schema_grammar("{\"prefixItems\":[{\"type\":\"string\"}],\"items\":false,"
                       "\"minItems\":1}");
    ACCEPT(g, "[\"a\"]");
    REJECT(g, "[]");
    REJECT(g, "[\"a\",\"b\"]");
    grammar_free(g);
    g = schema_grammar("{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"},"
                       "{\"type\":\"null\"}],\"items\":true,\"maxItems\":2}");
    ACCEPT(g, "[\"a\",1]");
    REJECT(g, "[\"a\",1,null]");
    grammar_free(g);
    /* draft-04 tuples */
    g = schema_grammar(
        "{\"items\":[{\"type\":\"null\"}],\"additionalItems\":{\"type\":\"integer\"}}");
    ACCEPT(g, "[null,1,2]");
    ACCEPT(g, "[]");
    REJECT(g, "[1]");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"uniqueItems\":false,\"items\":{\"enum\":[1,2]}}");
    ACCEPT(g, "[1,1,2]");
    REJECT(g, "[3]");
    grammar_free(g);
}

static void test_strings(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    REJECT(g, "\"a\"");
    ACCEPT(g, "\"ab\"");
    ACCEPT(g, "\"abc\"");
    REJECT(g, "\"abcd\"");
    ACCEPT(g, "\"\xc3\xa9\xc3\xa9\"");                 /* code points, not bytes */
    ACCEPT(g, "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\""); /* two characters outside the BMP */
    ACCEPT(g, "\"\\u00e9x\"");                         /* an escape is one character */
    ACCEPT(g, "\"\\\"\\\\\"");
    REJECT(g, "\"\\ud83d\\ude00\""); /* a pair of escapes is refused */
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"maxLength\":0}");
    ACCEPT(g, "\"\"");
    REJECT(g, "\"a\"");
    grammar_free(g);
    /* patterns: anchored, half anchored, unanchored */
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^[a-z]+\\\"x$\"}");
    ACCEPT(g, "\"ab\\\"x\"");
    REJECT(g, "\"ab\"x\"");
    REJECT(g, "\"abx\"");
    REJECT(g, "\"ab\\u0022x\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^\\\\d{3}-\\\\d{4}$\"}");
    ACCEPT(g, "\"555-1234\"");
    REJECT(g, "\"555-12345\"");
    REJECT(g, "\" 555-1234\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"b\"}");
    ACCEPT(g, "\"b\"");
    ACCEPT(g, "\"abc\"");
    ACCEPT(g, "\"\\n\\\"b\\\"\\u0001\"");
    REJECT(g, "\"ac\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^ab\"}");
    ACCEPT(g, "\"abzz\"");
    REJECT(g, "\"zab\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"ab$\"}");
    ACCEPT(g, "\"zzab\"");
    REJECT(g, "\"abz\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"a\\\\$\"}"); /* an escaped $ */
    ACCEPT(g, "\"xa$y\"");
    REJECT(g, "\"xa\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"pattern\":\"^(cat|dog)s?$\"}");
    ACCEPT(g, "\"dogs\"");
    REJECT(g, "\"cow\"");
    grammar_free(g);
}

static void test_formats(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}");
    ACCEPT(g, "\"2024-02-29\"");
    ACCEPT(g, "\"2000-02-29\"");
    ACCEPT(g, "\"2023-12-31\"");
    ACCEPT(g, "\"0001-01-01\"");
    REJECT(g, "\"1900-02-29\"");
    REJECT(g, "\"2023-02-29\"");
    REJECT(g, "\"2023-04-31\"");
    REJECT(g, "\"2023-13-01\"");
    REJECT(g, "\"2023-00-10\"");
    REJECT(g, "\"0000-01-01\"");
    REJECT(g, "\"2023-1-01\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"time\"}");
    ACCEPT(g, "\"23:59:59Z\"");
    ACCEPT(g, "\"00:00:00.123456+05:30\"");
    REJECT(g, "\"24:00:00Z\"");
    REJECT(g, "\"12:00:00\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"date-time\"}");
    ACCEPT(g, "\"2024-02-29T12:00:00Z\"");
    ACCEPT(g, "\"2023-04-30T23:59:59.5-08:00\"");
    REJECT(g, "\"2023-04-31T00:00:00Z\"");
    REJECT(g, "\"2023-04-30 00:00:00Z\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"uuid\"}");
    ACCEPT(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    REJECT(g, "\"123e4567e89b12d3a456426614174000\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"email\"}");
    ACCEPT(g, "\"john.doe+x@mail.example.com\"");
    REJECT(g, "\"john@localhost\"");
    REJECT(g, "\"@example.com\"");
    REJECT(g, "\"a@-b.com\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"string\",\"format\":\"ipv4\"}");
    ACCEPT(g, "\"255.255.255.255\"");
    ACCEPT(g, "\"10.0.0.1\"");
    REJECT(g, "\"256.1.1.1\"");
    REJECT(g, "\"01.1.1.1\"");
    REJECT(g, "\"1.1.1\"");
    grammar_free(g);
}

/* ---- numbers ---- */

struct int_case {
    const char *bounds; /* JSON members */
    long lo, hi;        /* the integers that validate, inclusive */
};

static void test_integer_ranges(void **state)
{
    (void)state;
    static const struct int_case cases[] = {
        {"\"minimum\":-1000,\"maximum\":1000", -1000, 1000},
        {"\"minimum\":0", 0, 100000},
        {"\"maximum\":-5", -100000, -5},
        {"\"exclusiveMinimum\":-17,\"exclusiveMaximum\":1153", -16, 1152},
        {"\"minimum\":7,\"maximum\":7", 7, 7},
        {"\"minimum\":-1200.5,\"maximum\":999.9", -1200, 999},
        {"\"exclusiveMinimum\":-0.5,\"exclusiveMaximum\":10.0", 0, 9},
        {"\"minimum\":100,\"maximum\":199", 100, 199},
        {"\"minimum\":-99,\"maximum\":-10", -99, -10},
        {"\"minimum\":1,\"maximum\":1200", 1, 1200},
        {"\"minimum\":-1,\"maximum\":0", -1, 0},
        {"\"minimum\":909,\"maximum\":1090", 909, 1090},
        {"\"minimum\":-1090,\"maximum\":-909", -1090, -909},
        {"\"exclusiveMinimum\":0", 1, 100000},
        {"\"minimum\":5,\"exclusiveMinimum\":true,\"maximum\":50,\"exclusiveMaximum\":true", 6, 49},
        {"\"minimum\":5,\"exclusiveMinimum\":false", 5, 100000},
        {"\"minimum\":3,\"exclusiveMinimum\":5", 6, 100000}, /* the stricter of both */
        {"\"minimum\":10,\"exclusiveMinimum\":5", 10, 100000},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char schema[256];
        snprintf(schema, sizeof(schema), "{\"type\":\"integer\",%s}", cases[c].bounds);
        grammar *g = schema_grammar(schema);
        for (long i = -1200; i <= 1200; i++) {
            char doc[32];
            int n = snprintf(doc, sizeof(doc), "%ld", i);
            int want = i >= cases[c].lo && i <= cases[c].hi;
            if (grammar_match(g, doc, (size_t)n) != want) {
                fprintf(stderr, "%s: %ld\n", schema, i);
            }
            check_match(g, doc, (size_t)n, want, __LINE__);
        }
        REJECT(g, "05");
        REJECT(g, "-0");
        REJECT(g, "1.0");
        grammar_free(g);
    }
    grammar *g = schema_grammar("{\"type\":\"integer\",\"minimum\":0}");
    ACCEPT(g, "999999999999999");
    ACCEPT(g, "123456789012 ");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"integer\",\"minimum\":-9007199254740991,"
                       "\"maximum\":9007199254740991}");
    ACCEPT(g, "-999999999999999");
    ACCEPT(g, "0");
    grammar_free(g);
}

#define NO_BOUND 100000000L /* beyond the grid */

struct num_case {
    const char *bounds;
    long lo, hi; /* the bounds * 10000, +-NO_BOUND when absent */
    bool lo_excl, hi_excl;
};

static void test_number_ranges(void **state)
{
    (void)state;
    static const struct num_case cases[] = {
        {"\"minimum\":0.1,\"maximum\":0.2", 1000, 2000, false, false},
        {"\"exclusiveMinimum\":-1.5,\"exclusiveMaximum\":2.25", -15000, 22500, true, true},
        {"\"minimum\":-0.001", -10, NO_BOUND, false, false},
        {"\"exclusiveMaximum\":0", -NO_BOUND, 0, false, true},
        {"\"minimum\":1,\"maximum\":1", 10000, 10000, false, false},
        {"\"minimum\":-2.999,\"exclusiveMaximum\":-2.5", -29990, -25000, false, true},
        {"\"minimum\":0.5,\"exclusiveMinimum\":true,\"maximum\":1.5,\"exclusiveMaximum\":true",
         5000, 15000, true, true},
        {"\"minimum\":0.1234,\"maximum\":0.2", 1234, 2000, false, false},
        {"\"minimum\":0.3,\"maximum\":0.30000000000000004", 3000, 3000, false, false},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char schema[256];
        snprintf(schema, sizeof(schema), "{\"type\":\"number\",%s}", cases[c].bounds);
        grammar *g = schema_grammar(schema);
        long lo = cases[c].lo, hi = cases[c].hi;
        for (long v = -3000; v <= 3000; v++) { /* v / 1000 */
            long x = v * 10;
            int want =
                (cases[c].lo_excl ? x > lo : x >= lo) && (cases[c].hi_excl ? x < hi : x <= hi);
            long a = v < 0 ? -v : v;
            const char *sign = v < 0 ? "-" : "";
            char doc[48];
            int n = snprintf(doc, sizeof(doc), "%s%ld.%03ld", sign, a / 1000, a % 1000);
            check_match(g, doc, (size_t)n, want, __LINE__);
            if (a % 10 == 0) {
                n = snprintf(doc, sizeof(doc), "%s%ld.%02ld", sign, a / 1000, a % 1000 / 10);
                check_match(g, doc, (size_t)n, want, __LINE__);
            }
            if (a % 100 == 0) {
                n = snprintf(doc, sizeof(doc), "%s%ld.%ld", sign, a / 1000, a % 1000 / 100);
                check_match(g, doc, (size_t)n, want, __LINE__);
            }
            if (a % 1000 == 0) {
                n = snprintf(doc, sizeof(doc), "%s%ld", sign, a / 1000);
                check_match(g, doc, (size_t)n, want, __LINE__);
            }
        }
        grammar_free(g);
    }
    /* decimals of up to 6 fraction digits, and a bound that only decimals meet */
    grammar *g = schema_grammar("{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.100005}");
    ACCEPT(g, "0.1");
    ACCEPT(g, "0.100000");
    ACCEPT(g, "0.100005");
    REJECT(g, "0.100006");
    REJECT(g, "0.099999");
    REJECT(g, "0.1000001"); /* 7 fraction digits: beyond what bounded numbers generate */
    grammar_free(g);
    g = schema_grammar("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":0.001}");
    ACCEPT(g, "0.0005");
    ACCEPT(g, "0.000001");
    REJECT(g, "0");
    REJECT(g, "0.001");
    REJECT(g, "0.0000");
    grammar_free(g);
}

static void test_enum_const(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"enum\":[\"a\",1,null,{\"x\":[1,2.5]},true,\"caf\\u00e9\"],"
                                "\"title\":\"t\"}");
    ACCEPT(g, "\"a\"");
    ACCEPT(g, "1");
    ACCEPT(g, "null");
    ACCEPT(g, "{\"x\":[1,2.5]}");
    ACCEPT(g, "true ");
    ACCEPT(g, "\"caf\xc3\xa9\"");
    REJECT(g, "false");
    REJECT(g, "\"b\"");
    REJECT(g, "2");
    grammar_free(g);
    g = schema_grammar("{\"const\":\"q\\\"\\n\"}");
    ACCEPT(g, "\"q\\\"\\n\"");
    REJECT(g, "\"q\"");
    grammar_free(g);
    g = schema_grammar("{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",1,null]}");
    ACCEPT(g, "\"a\"");
    ACCEPT(g, "null");
    REJECT(g, "1");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"integer\",\"enum\":[1.0,1.5,2]}");
    ACCEPT(g, "1.0");
    ACCEPT(g, "2");
    REJECT(g, "1.5");
    grammar_free(g);
}

static void test_combinators(void **state)
{
    (void)state;
    const char *alts =
        "[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\",\"minimum\":5}]";
    const char *kws[] = {"anyOf", "oneOf"};
    for (size_t i = 0; i < 2; i++) {
        char schema[256];
        snprintf(schema, sizeof(schema), "{\"%s\":%s,\"description\":\"d\"}", kws[i], alts);
        grammar *g = schema_grammar(schema);
        ACCEPT(g, "\"ab\"");
        REJECT(g, "\"abc\"");
        ACCEPT(g, "7");
        REJECT(g, "3");
        REJECT(g, "null");
        grammar_free(g);
    }
    grammar *g = schema_grammar("{\"$defs\":{\"A\":{\"type\":\"boolean\"}},\"allOf\":[{\"$ref\":"
                                "\"#/$defs/A\"}],\"description\":\"x\"}");
    ACCEPT(g, "true");
    REJECT(g, "1");
    grammar_free(g);
    g = schema_grammar("{\"properties\":{\"x\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"array\","
                       "\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}}]}},"
                       "\"required\":[\"x\"]}");
    ACCEPT(g, "{\"x\":null}");
    ACCEPT(g, "{\"x\":[1,\"a\"]}");
    REJECT(g, "{\"x\":[true]}");
    grammar_free(g);
}

static void test_refs(void **state)
{
    (void)state;
    grammar *g = schema_grammar(
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
        "\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}");
    ACCEPT(g, "{\"v\":1,\"next\":null}");
    ACCEPT(g, "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3,\"next\":null}}}");
    REJECT(g, "{\"v\":1}");
    REJECT(g, "{\"v\":1,\"next\":{\"v\":2}}");
    grammar_free(g);
    g = schema_grammar("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}");
    ACCEPT(g, "[[],[[]]]");
    REJECT(g, "[1]");
    grammar_free(g);
    g = schema_grammar("{\"definitions\":{\"a/b\":{\"type\":\"string\"},\"c~d\":{\"$ref\":"
                       "\"#/definitions/a~1b\"}},\"properties\":{\"p\":{\"$ref\":"
                       "\"#/definitions/c~0d\"},\"q\":{\"$ref\":\"#/definitions/a~1b\"}}}");
    ACCEPT(g, "{\"p\":\"x\",\"q\":\"y\"}");
    REJECT(g, "{\"p\":1}");
    grammar_free(g);
    /* a pydantic-style model */
    g = schema_grammar(
        "{\"$defs\":{\"Address\":{\"properties\":{\"street\":{\"title\":\"Street\",\"type\":"
        "\"string\"},\"zip\":{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^\\\\d{5}$\"},"
        "{\"type\":\"null\"}],\"default\":null,\"title\":\"Zip\"}},\"required\":[\"street\"],"
        "\"title\":\"Address\",\"type\":\"object\"}},\"properties\":{\"name\":{\"type\":\"string\"}"
        ","
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\","
        "\"items\":{\"type\":\"string\"}},\"address\":{\"$ref\":\"#/$defs/Address\"}},"
        "\"required\":[\"name\",\"age\"],\"title\":\"Person\",\"type\":\"object\"}");
    ACCEPT(g, "{\"name\":\"Ann\",\"age\":30}");
    ACCEPT(g, "{\n  \"name\": \"Ann\",\n  \"age\": 150,\n  \"tags\": [\"a\", \"b\"],\n  "
              "\"address\": {\"street\": \"Main\", \"zip\": \"12345\"}\n}");
    ACCEPT(g, "{\"name\":\"Ann\",\"age\":0,\"address\":{\"street\":\"M\",\"zip\":null}}");
    REJECT(g, "{\"name\":\"Ann\",\"age\":151}");
    REJECT(g, "{\"name\":\"Ann\",\"age\":-1}");
    REJECT(g, "{\"name\":\"Ann\",\"age\":3,\"address\":{\"street\":\"M\",\"zip\":\"1234\"}}");
    REJECT(g, "{\"age\":3}");
    grammar_free(g);
}

static void test_whitespace(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"properties\":{\"a\":{\"type\":\"array\"}}}");
    ACCEPT(g, "{\"a\":[1,2]}");
    ACCEPT(g, "{ \"a\" : [ 1 , 2 ] } ");
    ACCEPT(g, "{\n\t\"a\": [\n\t\t1,\n\t\t2\n\t]\n}\n");
    ACCEPT(g, "{\n                    \"a\":[]}"); /* 20 blanks after a newline */
    REJECT(g, "{\n                     \"a\":[]}");
    REJECT(g, " {\"a\":[]}"); /* nothing before the root */
    REJECT(g, "{  \"a\":[]}");
    grammar_free(g);
}

/* ---- errors ---- */

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *schema;
        int rc;
        const char *msg; /* a substring of the message */
    } cases[] = {
        {"{", -EINVAL, "JSON schema is not valid JSON"},
        {"null", -EINVAL, "expected an object or a boolean, got null"},
        {"[]", -EINVAL, "expected an object or a boolean, got array"},
        {"false", -EINVAL, "the schema false allows nothing"},
        {"{\"properties\":{\"x\":false}}", -EINVAL, "at /properties/x: the schema false"},
        {"{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"multipleOf\":5}}}",
         -EINVAL, "unsupported JSON schema keyword 'multipleOf' at /properties/age"},
        {"{\"properties\":{\"a/b~c\":{\"not\":{}}}}", -EINVAL,
         "unsupported JSON schema keyword 'not' at /properties/a~1b~0c"},
        {"{\"type\":\"array\",\"contains\":{}}", -EINVAL,
         "unsupported JSON schema keyword 'contains' at the root"},
        {"{\"if\":{}}", -EINVAL, "keyword 'if'"},
        {"{\"patternProperties\":{}}", -EINVAL, "keyword 'patternProperties'"},
        {"{\"propertyNames\":{}}", -EINVAL, "keyword 'propertyNames'"},
        {"{\"dependentRequired\":{}}", -EINVAL, "keyword 'dependentRequired'"},
        {"{\"unevaluatedProperties\":false}", -EINVAL, "keyword 'unevaluatedProperties'"},
        {"{\"nullable\":true}", -EINVAL, "keyword 'nullable'"},
        {"{\"type\":\"foo\"}", -EINVAL, "keyword 'type' at the root: expected a type name"},
        {"{\"type\":[]}", -EINVAL, "keyword 'type'"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", -EINVAL, "'uniqueItems' at the root"},
        {"{\"allOf\":[{},{}]}", -EINVAL, "allOf of several schemas"},
        {"{\"anyOf\":[]}", -EINVAL, "'anyOf' at the root: expected a non-empty array"},
        {"{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", -EINVAL,
         "'type' at the root: not supported next to anyOf"},
        {"{\"anyOf\":[{}],\"oneOf\":[{}]}", -EINVAL, "next to anyOf/oneOf/allOf"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"minimum\":\"x\"}]}", -EINVAL,
         "'minimum' at /anyOf/1: expected a number"},
        {"{\"$ref\":\"#/$defs/x\"}", -EINVAL, "'#/$defs/x' is not defined"},
        {"{\"$ref\":\"http://x/s.json\"}", -EINVAL, "unsupported reference 'http://x/s.json'"},
        {"{\"$ref\":\"#/properties/a\",\"properties\":{\"a\":{}}}", -EINVAL, "next to $ref"},
        {"{\"$ref\":\"#/$defs/a/b\",\"$defs\":{\"a\":{}}}", -EINVAL, "unsupported reference"},
        {"{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", -EINVAL,
         "'type' at the root: not supported next to $ref"},
        {"{\"$ref\":1}", -EINVAL, "'$ref' at the root: expected a string"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"type\":\"null\"},"
         "{\"$ref\":\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}",
         -EINVAL, "left recursion"},
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", -EINVAL, "left recursion"},
        {"{\"$defs\":{\"a\":{\"properties\":{\"x\":{\"maxLength\":-1}}}},\"items\":{\"$ref\":"
         "\"#/$defs/a\"}}",
         -EINVAL, "'maxLength' at /$defs/a/properties/x: expected a non-negative integer"},
        {"{\"enum\":[1,2],\"minimum\":0}", -EINVAL,
         "'minimum' at the root: not supported next to "
         "enum/const"},
        {"{\"enum\":\"x\"}", -EINVAL, "'enum' at the root: expected an array"},
        {"{\"enum\":[1],\"const\":1}", -EINVAL, "'const'"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", -EINVAL, "no value of the allowed types"},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", -EINVAL,
         "keyword 'format' at the root: unsupported format 'hostname'"},
        {"{\"format\":1}", -EINVAL, "'format' at the root: expected a string"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", -EINVAL,
         "keyword 'pattern' at the root: regex: unsupported lookaround (?= at offset 0"},
        {"{\"type\":\"string\",\"pattern\":\"a)|(b\"}", -EINVAL, "unbalanced )"},
        {"{\"type\":\"string\",\"pattern\":\"a|^b\"}", -EINVAL, "anchor ^"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"minLength\":1}", -EINVAL,
         "'pattern' at the root: not supported together with minLength/maxLength"},
        {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"a\"}", -EINVAL,
         "together with 'format'"},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", -EINVAL, "above maxLength"},
        {"{\"type\":\"string\",\"maxLength\":1.5}", -EINVAL, "non-negative integer"},
        {"{\"type\":\"string\",\"maxLength\":10001}", -E2BIG,
         "'maxLength' at the root: above the "
         "limit of 10000"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", -EINVAL, "'minItems'"},
        {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", -EINVAL,
         "no array satisfies"},
        {"{\"items\":[{}],\"prefixItems\":[{}]}", -EINVAL, "next to prefixItems"},
        {"{\"items\":1}", -EINVAL, "'items' at the root: expected a schema"},
        {"{\"prefixItems\":{}}", -EINVAL, "'prefixItems'"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", -EINVAL, "no integer within"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":1}", -EINVAL,
         "no number within"},
        {"{\"type\":\"integer\",\"minimum\":1e300}", -EINVAL, "no integer within"},
        {"{\"type\":\"integer\",\"minimum\":\"a\"}", -EINVAL,
         "'minimum' at the root: expected a "
         "number"},
        {"{\"type\":\"integer\",\"exclusiveMaximum\":\"a\"}", -EINVAL, "'exclusiveMaximum'"},
        {"{\"properties\":{\"a\":{}},\"required\":[\"b\"]}", -EINVAL,
         "'required' at the root: property 'b' is not in properties and additionalProperties is "
         "false"},
        {"{\"required\":\"a\"}", -EINVAL, "'required' at the root: expected an array of strings"},
        {"{\"required\":[1]}", -EINVAL, "expected an array of strings"},
        {"{\"properties\":[]}", -EINVAL, "'properties' at the root: expected an object"},
        {"{\"additionalProperties\":1}", -EINVAL, "expected a boolean or a schema"},
        {"{\"type\":\"object\",\"minProperties\":1}", -EINVAL, "'minProperties'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"maxProperties\":0}", -EINVAL,
         "'maxProperties'"},
        {"{\"type\":\"object\",\"maxProperties\":3}", -EINVAL, "'maxProperties'"},
        {"{\"properties\":{\"a\":{\"properties\":{\"b\":{\"type\":\"integer\",\"minimum\":1,"
         "\"maximum\":0}}}}}",
         -EINVAL, "at /properties/a/properties/b: no integer within"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b;
        char err[256] = "";
        buf_init(&b, 1 << 22);
        int rc =
            json_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), &b, err, sizeof(err));
        if (rc != cases[i].rc || !strstr(err, cases[i].msg)) {
            fprintf(stderr, "schema %s: rc %d (want %d), message \"%s\" (want \"%s\")\n",
                    cases[i].schema, rc, cases[i].rc, err, cases[i].msg);
        }
        assert_int_equal(rc, cases[i].rc);
        assert_non_null(strstr(err, cases[i].msg));
        buf_free(&b);
    }
}

static void test_limits(void **state)
{
    (void)state;
    char err[256];
    struct buf b;
    /* nested to the parser's limit: still converted, and compiled */
    struct buf schema;
    buf_init(&schema, 1 << 16);
    for (int i = 0; i < JSON_MAX_DEPTH - 1; i++) {
        buf_appends(&schema, "{\"type\":\"array\",\"items\":");
    }
    buf_appends(&schema, "{\"type\":\"null\"}");
    for (int i = 0; i < JSON_MAX_DEPTH - 1; i++) {
        buf_appends(&schema, "}");
    }
    grammar *g = schema_grammar(buf_cstr(&schema));
    ACCEPT(g, "[[[]]]");
    REJECT(g, "[[[null]]]");
    grammar_free(g);
    buf_reset(&schema);
    for (int i = 0; i < JSON_MAX_DEPTH + 2; i++) {
        buf_appends(&schema, "{\"items\":");
    }
    buf_appends(&schema, "{}");
    for (int i = 0; i < JSON_MAX_DEPTH + 2; i++) {
        buf_appends(&schema, "}");
    }
    buf_init(&b, 1 << 22);
    assert_int_equal(json_schema_to_gbnf(schema.data, schema.len, &b, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "not valid JSON"));
    buf_free(&b);
    buf_free(&schema);
    /* the output cap */
    buf_init(&b, 64);
    const char *s = "{\"properties\":{\"a\":{\"type\":\"string\"}}}";
    assert_int_equal(json_schema_to_gbnf(s, strlen(s), &b, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "larger than"));
    buf_free(&b);
    /* many properties stay linear: every one optional, extra keys allowed */
    buf_init(&schema, 1 << 20);
    buf_appends(&schema, "{\"properties\":{");
    for (int i = 0; i < 300; i++) {
        buf_appendf(&schema, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
    }
    buf_appends(&schema, "},\"additionalProperties\":true}");
    g = schema_grammar(buf_cstr(&schema));
    ACCEPT(g, "{\"p7\":1,\"p299\":2,\"p3000\":\"x\"}");
    REJECT(g, "{\"p299\":2,\"p7\":1}");
    REJECT(g, "{\"p2\":\"x\"}");
    grammar_free(g);
    buf_free(&schema);
    /* declared names are excluded from extra keys up to 128 characters (nested groups) */
    for (int len = 128; len <= 129; len++) {
        buf_init(&schema, 1 << 16);
        buf_appends(&schema, "{\"properties\":{\"");
        for (int i = 0; i < len; i++) {
            buf_appends(&schema, "\xc3\xa9");
        }
        buf_appends(&schema, "\":{\"type\":\"null\"}},\"additionalProperties\":true}");
        if (len == 128) {
            g = schema_grammar(buf_cstr(&schema));
            ACCEPT(g, "{\"\xc3\xa9\":1}");
            grammar_free(g);
        } else {
            buf_init(&b, 1 << 22);
            assert_int_equal(json_schema_to_gbnf(schema.data, schema.len, &b, err, sizeof(err)),
                             -E2BIG);
            assert_non_null(strstr(err, "longer than 128 characters"));
            buf_free(&b);
        }
        buf_free(&schema);
    }
    /* a NULL err is allowed */
    buf_init(&b, 1 << 16);
    assert_int_equal(json_schema_to_gbnf("{\"x\":1}", 7, &b, NULL, 0), -EINVAL);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_object),
        cmocka_unit_test(test_any_value),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_object_combinations),
        cmocka_unit_test(test_additional_properties),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_integer_ranges),
        cmocka_unit_test(test_number_ranges),
        cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_combinators),
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
