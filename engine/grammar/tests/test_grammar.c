/* Tests for GBNF compilation and the byte-level matcher (grammar.h). */
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

static grammar *compile(const char *text)
{
    grammar *g = NULL;
    char err[256] = "";
    int rc = grammar_compile(text, strlen(text), NULL, &g, err, sizeof err);
    if (rc != 0) {
        fail_msg("compile failed (%d): %s\n%s", rc, err, text);
    }
    return g;
}

static void expect_match(const grammar *g, const char *s, int want)
{
    int got = grammar_match(g, s, strlen(s));
    if (got != want) {
        fail_msg("'%s': match %d, want %d", s, got, want);
    }
}

static void expect_error(const char *text, int code, const char *needle)
{
    grammar *g = NULL;
    char err[256] = "";
    int rc = grammar_compile(text, strlen(text), NULL, &g, err, sizeof err);
    if (rc != code || g != NULL || !strstr(err, needle)) {
        fail_msg("'%s': rc %d err '%s', want %d with '%s'", text, rc, err, code, needle);
    }
}

static void test_literals_and_alternatives(void **state)
{
    (void)state;
    grammar *g = compile("root ::= \"ab\" | \"c\" d\nd ::= \"d\" | \"\"\n");
    expect_match(g, "ab", 1);
    expect_match(g, "c", 1);
    expect_match(g, "cd", 1);
    expect_match(g, "a", 0);
    expect_match(g, "abc", 0);
    expect_match(g, "", 0);
    expect_match(g, "cdd", 0);
    grammar_free(g);
    /* escapes */
    g = compile("root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"");
    expect_match(g, "\n\t\\\"A\xC3\xA9\xF0\x9F\x98\x80", 1);
    grammar_free(g);
    /* a rule continued on the next lines, comments, '|' leading a line */
    g = compile("# header\nroot ::= a # first\n  | b\na ::= (\n \"x\"\n | \"y\" )\nb ::= \"z\"\n");
    expect_match(g, "x", 1);
    expect_match(g, "y", 1);
    expect_match(g, "z", 1);
    expect_match(g, "xz", 0);
    grammar_free(g);
}

static void test_classes(void **state)
{
    (void)state;
    grammar *g = compile("root ::= [a-c0-9_] [^\"\\\\]");
    expect_match(g, "a\xC3\xA9", 1);         /* é: two bytes, one code point */
    expect_match(g, "9\xF0\x9F\x98\x80", 1); /* 4-byte code point */
    expect_match(g, "_x", 1);
    expect_match(g, "d", 0);
    expect_match(g, "a\"", 0);
    expect_match(g, "a\\", 0);
    expect_match(g, "a\xC3", 0);         /* truncated */
    expect_match(g, "a\xED\xA0\x80", 0); /* a surrogate is not UTF-8 */
    expect_match(g, "a\xC0\x80", 0);     /* overlong */
    grammar_free(g);
    g = compile("root ::= [\\u0100-\\u0150\\u4e00-\\u4e05]+");
    expect_match(g, "\xC4\x80\xC5\x90", 1); /* U+0100 U+0150 */
    expect_match(g, "\xC5\x91", 0);         /* U+0151 */
    expect_match(g, "\xE4\xB8\x80\xE4\xB8\x85", 1);
    expect_match(g, "\xE4\xB8\x86", 0);
    grammar_free(g);
    g = compile("root ::= . .");
    expect_match(g, "\n\xF4\x8F\xBF\xBF", 1); /* U+10FFFF */
    expect_match(g, "\xF4\x90\x80\x80", 0);   /* past U+10FFFF */
    expect_match(g, "a", 0);
    grammar_free(g);
    /* a negated class is over code points: [^a] takes any other code point whole */
    g = compile("root ::= [^a]");
    expect_match(g, "\xE2\x82\xAC", 1);
    expect_match(g, "a", 0);
    expect_match(g, "\xE2\x82", 0);
    grammar_free(g);
}

static void test_repetitions(void **state)
{
    (void)state;
    grammar *g = compile("root ::= \"a\"{2,4} \"b\"? \"c\"* (\"de\")+ \"f\"{3} \"g\"{1,}");
    expect_match(g, "aadefffg", 1);
    expect_match(g, "aaaabcccdededefffggg", 1);
    expect_match(g, "adefffg", 0);
    expect_match(g, "aaaaadefffg", 0);
    expect_match(g, "aabbdefffg", 0);
    expect_match(g, "aafffg", 0);
    expect_match(g, "aadeffg", 0);
    expect_match(g, "aadefff", 0);
    grammar_free(g);
    /* long bounded repetitions stay cheap and exact */
    g = compile("root ::= [0-9]{0,3000}");
    char buf[3002];
    memset(buf, '7', sizeof buf);
    buf[3000] = '\0';
    expect_match(g, buf, 1);
    buf[3000] = '7';
    buf[3001] = '\0';
    expect_match(g, buf, 0);
    expect_match(g, "", 1);
    grammar_free(g);
}

static void test_recursion(void **state)
{
    (void)state;
    /* nested brackets: right and middle recursion are fine */
    grammar *g = compile("root ::= item*\nitem ::= \"[\" root \"]\" | \"x\"");
    expect_match(g, "[[x][]]x", 1);
    expect_match(g, "[[x]", 0);
    expect_match(g, "", 1);
    grammar_free(g);
}

static const char json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] "
    "[1-9]{0,15})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_json_grammar(void **state)
{
    (void)state;
    grammar *g = compile(json_gbnf);
    expect_match(g, "{}", 1);
    expect_match(g, "{\"a\": [1, 2.5, -3e4, true, null, {\"b\": \"\\u00e9\\n\"}]}", 1);
    expect_match(g, "{\"caf\xC3\xA9\": \"\xE2\x82\xAC\"}", 1);
    expect_match(g, "{\"a\": }", 0);
    expect_match(g, "{\"a\": 01}", 0);
    expect_match(g, "{\"a\": \"\x01\"}", 0);
    expect_match(g, "[1]", 0);
    grammar_free(g);
}

static void test_matcher_state(void **state)
{
    (void)state;
    grammar *g = compile("root ::= \"ab\" \"c\"?");
    grammar_matcher *m;
    assert_int_equal(grammar_matcher_new(g, &m), 0);
    assert_false(grammar_matcher_can_end(m));
    assert_int_equal(grammar_matcher_feed(m, "a", 1), 0);
    /* a refused feed leaves the matcher where it was, even part way through */
    assert_int_equal(grammar_matcher_feed(m, "bx", 2), -EINVAL);
    assert_int_equal(grammar_matcher_feed(m, "b", 1), 0);
    assert_true(grammar_matcher_can_end(m));
    assert_false(grammar_matcher_must_end(m));
    assert_int_equal(grammar_matcher_feed(m, "c", 1), 0);
    assert_true(grammar_matcher_must_end(m));
    assert_int_equal(grammar_matcher_feed(m, "c", 1), -EINVAL);
    grammar_matcher_reset(m);
    assert_false(grammar_matcher_can_end(m));
    assert_int_equal(grammar_matcher_feed(m, "abc", 3), 0);
    assert_true(grammar_matcher_must_end(m));
    grammar_matcher_free(m);
    grammar_free(g);
}

/* A long generation keeps the node pool bounded (compaction). */
static void test_long_feed(void **state)
{
    (void)state;
    grammar *g = compile(json_gbnf);
    grammar_matcher *m;
    assert_int_equal(grammar_matcher_new(g, &m), 0);
    assert_int_equal(grammar_matcher_feed(m, "{\"k\": [", 7), 0);
    for (int i = 0; i < 200000; i++) {
        assert_int_equal(grammar_matcher_feed(m, "1, ", 3), 0);
    }
    assert_int_equal(grammar_matcher_feed(m, "2]}", 3), 0);
    assert_true(grammar_matcher_can_end(m));
    grammar_matcher_free(m);
    grammar_free(g);
}

/* Ambiguity is bounded: equal stacks merge, so this does not blow up. */
static void test_ambiguous(void **state)
{
    (void)state;
    grammar *g = compile("root ::= (\"a\" | \"a\" | [a])* \"b\"");
    char buf[1002];
    memset(buf, 'a', 1000);
    buf[1000] = 'b';
    buf[1001] = '\0';
    expect_match(g, buf, 1);
    grammar_free(g);
    g = compile("root ::= x x x x x x x x x x x x x x x x x x x x x x x x x x x x x x \"b\"\n"
                "x ::= \"\" | \"\" | \"\"");
    expect_match(g, "b", 1);
    grammar_free(g);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("root ::= foo", -EINVAL, "undefined rule 'foo'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", -EINVAL, "defined twice");
    expect_error("start ::= \"a\"", -EINVAL, "no rule named 'root'");
    expect_error("root ::= root \"a\" | \"b\"", -EINVAL, "left recursion");
    expect_error("root ::= a\na ::= b \"x\"\nb ::= \"\" | a", -EINVAL, "left recursion");
    expect_error("root ::= (\"a\"?)*", -EINVAL, "may match nothing");
    expect_error("root ::= \"abc", -EINVAL, "unterminated string");
    expect_error("root ::= [abc", -EINVAL, "unterminated character class");
    expect_error("root ::= \"\\q\"", -EINVAL, "unknown escape");
    expect_error("root ::= \"\\x4\"", -EINVAL, "hex digits");
    expect_error("root ::= \"\\uD800\"", -EINVAL, "no Unicode scalar");
    expect_error("root ::= [z-a]", -EINVAL, "out of order");
    expect_error("root ::= \"a\"{3,1}", -EINVAL, "maximum below minimum");
    expect_error("root ::= \"a\"{99999999}", -EINVAL, "repetition count");
    expect_error("root ::= * \"a\"", -EINVAL, "follows nothing");
    expect_error("root ::= (\"a\"", -EINVAL, "expected ')'");
    expect_error("root ::= \"a\" )", -EINVAL, "unexpected ')'");
    expect_error("root \"a\"", -EINVAL, "expected '::='");
    expect_error("::= \"a\"", -EINVAL, "expected a rule name");
    expect_error("root ::= \"\xC3\"", -EINVAL, "UTF-8");
    expect_error("root ::= \"a\"{100000}{100000}", -EINVAL, "follows nothing");
    char big[256] = "root ::=";
    for (int i = 0; i < 11; i++) {
        strcat(big, " \"a\"{100000}");
    }
    expect_error(big, -E2BIG, "elements");
    expect_error("", -EINVAL, "empty grammar");
    /* the message names the line */
    expect_error("root ::= a\n\na ::= \"x\" ]\n", -EINVAL, "line 3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_and_alternatives),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_repetitions),
        cmocka_unit_test(test_recursion),
        cmocka_unit_test(test_json_grammar),
        cmocka_unit_test(test_matcher_state),
        cmocka_unit_test(test_long_feed),
        cmocka_unit_test(test_ambiguous),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
