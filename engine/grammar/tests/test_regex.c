/* Unit tests for engine/grammar/regex.h: the GBNF written for small regexes, full-match
 * semantics through the GBNF compiler and matcher (tables with Unicode and json_string mode), a
 * differential check against glibc's POSIX regexec over random regexes and every short string,
 * and errors for every refused construct (message naming it and its offset). */
#include <errno.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/regex.h"

/* Compiles "root ::= <regex as GBNF>"; fails the test on any error. */
static grammar *compile_regex(const char *re, size_t len, bool json)
{
    struct buf b;
    char err[256];
    buf_init(&b, (size_t)1 << 22);
    buf_appends(&b, "root ::= ");
    int rc = regex_to_gbnf(re, len, json, &b, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "regex_to_gbnf(%.*s): %d %s\n", (int)len, re, rc, err);
    }
    assert_int_equal(rc, 0);
    buf_appends(&b, "\n");
    grammar *g = NULL;
    rc = grammar_compile(b.data, b.len, NULL, &g, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "grammar_compile(%s): %d %s\n", buf_cstr(&b), rc, err);
    }
    assert_int_equal(rc, 0);
    buf_free(&b);
    return g;
}

static void expect_match(grammar *g, const char *re, const char *s, size_t n, int want)
{
    int got = grammar_match(g, s, n);
    if (got != want) {
        fprintf(stderr, "regex /%s/ on \"%.*s\" (%zu bytes): got %d, want %d\n", re, (int)n, s, n,
                got, want);
    }
    assert_int_equal(got, want);
}

static void test_golden(void **state)
{
    (void)state;
    static const struct {
        const char *re;
        bool json;
        const char *gbnf;
    } cases[] = {
        {"abc", false, "\"abc\""},
        {"a|b|", false, "(\"a\" | \"b\")?"},
        {"(a*)*", false, "(\"a\"+)*"},
        {"[a-z]+\\d{2,3}", false, "[a-z]+ [0-9]{2,3}"},
        {"^ab$", false, "\"ab\""},
        {"(a{2}){3}", false, "(\"a\"{2}){3}"},
        {"x{", false, "\"x{\""},
        {"a{,3}", false, "\"a\"{0,3}"},
        {"", false, "\"\""},
        {"\\u00e9[\\u00e0-\\u00ff]", false, "\"\\u00E9\" [\\u00E0-\\u00FF]"},
        {"a\"b\\\\c", true, "\"a\\\\\\\"b\\\\\\\\c\""},
        {"\\n", true, "\"\\\\n\""},
        {"[\\x01\\x03]", true, "(\"\\\\u000\" [13])"},
        {"[\\x01]", true, "\"\\\\u0001\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b;
        char err[128];
        buf_init(&b, 1 << 16);
        assert_int_equal(
            regex_to_gbnf(cases[i].re, strlen(cases[i].re), cases[i].json, &b, err, sizeof(err)),
            0);
        assert_string_equal(buf_cstr(&b), cases[i].gbnf);
        buf_free(&b);
    }
}

struct match_case {
    const char *re;
    const char *s;
    int want;
};

static void run_cases(const struct match_case *cases, size_t n, bool json)
{
    for (size_t i = 0; i < n; i++) {
        grammar *g = compile_regex(cases[i].re, strlen(cases[i].re), json);
        expect_match(g, cases[i].re, cases[i].s, strlen(cases[i].s), cases[i].want);
        grammar_free(g);
    }
}

static void test_semantics(void **state)
{
    (void)state;
    static const struct match_case cases[] = {
        {"abc", "abc", 1},
        {"abc", "ab", 0},
        {"abc", "abcd", 0},
        {"a|bc|", "", 1},
        {"a|bc|", "bc", 1},
        {"a|bc|", "b", 0},
        {"(ab)*c", "ababc", 1},
        {"(ab)*c", "abac", 0},
        {"(?:ab)+", "", 0},
        {"(?P<x>a)(?<y>b)?", "a", 1},
        {"a{2,3}", "a", 0},
        {"a{2,3}", "aa", 1},
        {"a{2,3}", "aaa", 1},
        {"a{2,3}", "aaaa", 0},
        {"a{2}", "aa", 1},
        {"a{2,}", "aaaaaaa", 1},
        {"a{2,}", "a", 0},
        {"a*?b+?c??", "aabb", 1},
        {"(a|b)*abb", "babaabb", 1},
        {"(a*)*b", "aaab", 1},
        {"(a?b?)+c", "abbac", 1},
        {"(a?b?)+c", "c", 1},
        {"(|a)+", "", 1},
        {"\\d+\\.\\d{2}", "12.50", 1},
        {"\\d+\\.\\d{2}", "12x50", 0},
        {"\\D\\W\\S", "1!x", 0},
        {"\\D\\W\\S", "a!x", 1},
        {"\\D\\W\\S", "a!\xc2\xa0", 0},
        {"\\w+", "a_Z9", 1},
        {"\\w+", "a-b", 0},
        {"\\s", "\t", 1},
        {"\\s", "\xc2\xa0", 1},     /* U+00A0 is ECMAScript whitespace */
        {"\\S", "\xe3\x80\x80", 0}, /* U+3000 too */
        {"[^\\s]", "\xc2\xa0", 0},
        {"\\W", "\xc3\xa9", 0}, /* a word character in Python */
        {"\\W", "-", 1},
        {"[^\\w]", "\xc3\xa9", 0},
        {"[^\\W]", "a", 1},
        {"[^\\W]", "\xc3\xa9", 0},
        {"\\D", "\xd9\xa3", 0}, /* U+0663, a digit in Python */
        {"\\D", "\xc3\xa9", 1},
        {"[^\\D]", "\xd9\xa3", 0},
        {"\\d", "\xd9\xa3", 0},
        {"", "", 1},
        {"", "a", 0},
        {"()", "", 1},
        {".", "\n", 0},
        {".", "\r", 0},
        {".", "\xe2\x80\xa8", 0}, /* U+2028 line separator */
        {".", "x", 1},
        {".", "\xf0\x9f\x98\x80", 1},
        {"..", "\xf0\x9f\x98\x80", 0},
        {"[^a]", "\n", 1},
        {"[^a]", "a", 0},
        {"[^a]", "\xc3\xa9", 1},
        {"[\\]\\-^]+", "]-^", 1},
        {"[]a]+", "]a]", 1},
        {"[a-]+", "-a", 1},
        {"[\\d.]+", "1.5", 1},
        {"[\\b]", "\b", 1},
        {"\\x41\\u0042\\x{43}\\U00000044", "ABCD", 1},
        {"\\u00e9", "\xc3\xa9", 1},
        {"\\uD83D\\uDE00", "\xf0\x9f\x98\x80", 1},
        {"\\u{1F600}", "\xf0\x9f\x98\x80", 1},
        {"[\\u00e0-\\u00ff]", "\xc3\xa9", 1},
        {"[\\u00e0-\\u00ff]", "\xc3\x9f", 0},
        {"\xc3\xa9+", "\xc3\xa9\xc3\xa9", 1},
        {"[\xe2\x82\xac$]", "\xe2\x82\xac", 1},
        {"[^\xe2\x82\xac]", "\xe2\x82\xac", 0},
        {"\\.\\\\\\/\\$\\^\\{\\}\\(\\)\\|\\?\\*\\+\\[\\]", ".\\/$^{}()|?*+[]", 1},
        {"\\t\\n\\r\\f\\v\\0\\a", "\t\n\r\f\v\0\a", 0}, /* strlen stops at the NUL: see below */
        {"^a$|^b$", "b", 1},
        {"a{0}b", "b", 1},
        {"(a|b){0,0}c", "c", 1},
        {"x{2,}?", "xx", 1},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]), false);
    /* a NUL in the subject */
    const char *ctl = "\\t\\n\\r\\f\\v\\0\\a";
    grammar *g = compile_regex(ctl, strlen(ctl), false);
    expect_match(g, "ctl", "\t\n\r\f\v\0\a", 7, 1);
    grammar_free(g);
}

static void test_json_string(void **state)
{
    (void)state;
    /* the subject is the text between the quotes of a JSON string */
    static const struct match_case cases[] = {
        {"a\"b", "a\\\"b", 1},
        {"a\"b", "a\"b", 0},
        {"a\\\\b", "a\\\\b", 1},
        {"a\\\\b", "a\\b", 0},
        {"\\n", "\\n", 1},
        {"\\n", "\n", 0},
        {"\\n", "\\u000a", 0}, /* only the canonical escape */
        {"\\x01", "\\u0001", 1},
        {"\\x1f", "\\u001f", 1},
        {"\\x1f", "\\u001F", 0},
        {"\\x08\\x0c", "\\b\\f", 1},
        {"/", "/", 1},
        {"/", "\\/", 0},
        {"a", "\\u0061", 0},
        {"\\x7f", "\x7f", 1},
        {"[^a]", "\\\"", 1},
        {"[^a]", "\\\\", 1},
        {"[^a]", "\\t", 1},
        {"[^a]", "\\u0000", 1},
        {"[^a]", "\"", 0},
        {"[^a]", "\\", 0},
        {"[^a]", "\n", 0},
        {"[^a]", "\xc3\xa9", 1},
        {".", "\\n", 0},
        {".", "\\r", 0},
        {".", "\\t", 1},
        {"[\\s\\S]*", "x\\ny\\\"z\\u0007", 1},
        {"[\\s\\S]*", "\\u0007x\\", 0},
        {"[a-z]+\"x", "ab\\\"x", 1},
        {"\\d{3}-\\d{4}", "555-1234", 1},
        {"(\\\\|\")+", "\\\\\\\"", 1},
    };
    run_cases(cases, sizeof(cases) / sizeof(cases[0]), true);
}

/* ---- differential test against POSIX EREs ---- */

struct rng {
    uint64_t s;
};

static uint32_t rnd(struct rng *r, uint32_t n)
{
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(r->s >> 33) % n;
}

/* A random regex in the syntax POSIX EREs and regex.h share, over the letters of alpha. */
static void random_regex(struct rng *r, int depth, const char *alpha, bool dot, struct buf *out)
{
    int branches = depth > 0 && rnd(r, 4) == 0 ? 2 : 1;
    for (int b = 0; b < branches; b++) {
        buf_appends(out, b ? "|" : "");
        int items = 1 + (int)rnd(r, 3);
        for (int i = 0; i < items; i++) {
            uint32_t kind = rnd(r, depth > 0 ? 7 : 5);
            size_t na = strlen(alpha);
            char c1 = alpha[rnd(r, (uint32_t)na)], c2 = alpha[rnd(r, (uint32_t)na)];
            switch (kind) {
            case 0:
            case 1:
                buf_append(out, &c1, 1);
                break;
            case 2:
                buf_appendf(out, "[%c%c]", c1, c2);
                break;
            case 3:
                buf_appendf(out, "[^%c]", c1);
                break;
            case 4:
                if (dot) {
                    buf_appends(out, ".");
                } else {
                    buf_append(out, &c2, 1);
                }
                break;
            default:
                buf_appends(out, "(");
                random_regex(r, depth - 1, alpha, dot, out);
                buf_appends(out, ")");
                break;
            }
            switch (rnd(r, 9)) {
            case 0:
                buf_appends(out, "*");
                break;
            case 1:
                buf_appends(out, "+");
                break;
            case 2:
                buf_appends(out, "?");
                break;
            case 3: {
                uint32_t lo = rnd(r, 3);
                buf_appendf(out, "{%u,%u}", lo, lo + rnd(r, 3));
                break;
            }
            case 4:
                buf_appendf(out, "{%u,}", rnd(r, 3));
                break;
            default:
                break;
            }
        }
    }
}

/* The canonical JSON escaping of s[0..n) (the text between the quotes). */
static void json_escape(const char *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[k++] = '\\';
            out[k++] = (char)c;
        } else if (c == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
        } else if (c < 0x20) {
            k += (size_t)sprintf(out + k, "\\u%04x", c);
        } else {
            out[k++] = (char)c;
        }
    }
    out[k] = '\0';
}

/* Every regex against every string up to max_len over alpha, grammar vs regexec. */
static void differential(uint64_t seed, int n_regex, const char *alpha, int max_len, bool dot,
                         bool json)
{
    struct rng r = {seed};
    size_t na = strlen(alpha);
    for (int t = 0; t < n_regex; t++) {
        struct buf re, posix;
        buf_init(&re, 1 << 12);
        buf_init(&posix, 1 << 12);
        random_regex(&r, 2, alpha, dot, &re);
        buf_appendf(&posix, "^(%s)$", buf_cstr(&re));
        regex_t px;
        assert_int_equal(regcomp(&px, buf_cstr(&posix), REG_EXTENDED | REG_NOSUB), 0);
        grammar *g = compile_regex(re.data, re.len, json);
        char s[16], esc[128];
        for (int len = 0; len <= max_len; len++) {
            size_t total = 1;
            for (int i = 0; i < len; i++) {
                total *= na;
            }
            for (size_t code = 0; code < total; code++) {
                size_t c = code;
                for (int i = 0; i < len; i++) {
                    s[i] = alpha[c % na];
                    c /= na;
                }
                s[len] = '\0';
                int want = regexec(&px, s, 0, NULL, 0) == 0;
                if (json) {
                    json_escape(s, (size_t)len, esc);
                    expect_match(g, buf_cstr(&re), esc, strlen(esc), want);
                } else {
                    expect_match(g, buf_cstr(&re), s, (size_t)len, want);
                }
            }
        }
        grammar_free(g);
        regfree(&px);
        buf_free(&re);
        buf_free(&posix);
    }
}

static void test_differential_posix(void **state)
{
    (void)state;
    differential(1, 300, "abc", 6, true, false);
}

static void test_differential_json_string(void **state)
{
    (void)state;
    /* '"', the newline and a control character must come out escaped; '.' is left out because
     * POSIX's matches a newline */
    differential(2, 200, "a\"\n\x01", 5, false, true);
}

/* ---- errors ---- */

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *re;
        int rc;
        const char *msg; /* a substring of the message */
    } cases[] = {
        {"(", -EINVAL, "missing ) for the group at offset 0"},
        {"a)", -EINVAL, "unbalanced ) at offset 1"},
        {"[a", -EINVAL, "missing ] for the class at offset 0"},
        {"[z-a]", -EINVAL, "reversed class range at offset 1"},
        {"[\\d-z]", -EINVAL, "bad class range"},
        {"[^\\x00-\\x{10FFFF}]", -EINVAL, "class matches no character"},
        {"*a", -EINVAL, "nothing to repeat before '*' at offset 0"},
        {"a|+", -EINVAL, "nothing to repeat"},
        {"{2}", -EINVAL, "nothing to repeat before '{'"},
        {"a**", -EINVAL, "multiple repeat at offset 2"},
        {"a{2}{3}", -EINVAL, "multiple repeat at offset 4"},
        {"a*+", -EINVAL, "possessive quantifier at offset 2"},
        {"a{3,2}", -EINVAL, "minimum above its maximum at offset 1"},
        {"(a)\\1", -EINVAL, "backreference \\1 at offset 3"},
        {"(?P<n>a)(?P=n)", -EINVAL, "backreference (?P="},
        {"\\k<n>", -EINVAL, "backreference \\k"},
        {"a(?=b)", -EINVAL, "lookaround (?= at offset 1"},
        {"a(?!b)", -EINVAL, "lookaround (?!"},
        {"(?<=a)b", -EINVAL, "lookaround (?<"},
        {"(?<!a)b", -EINVAL, "lookaround (?<"},
        {"(?i)a", -EINVAL, "inline flags or group (? at offset 0"},
        {"(?>a)", -EINVAL, "atomic group"},
        {"(?#c)", -EINVAL, "comment group"},
        {"(?P<1>a)", -EINVAL, "bad group name"},
        {"\\bword", -EINVAL, "word boundary \\b at offset 0"},
        {"a\\B", -EINVAL, "word boundary \\B at offset 1"},
        {"\\Aa\\Z", -EINVAL, "anchor \\A"},
        {"a^b", -EINVAL, "anchor ^ inside the regex at offset 1"},
        {"(^a)", -EINVAL, "anchor ^"},
        {"a$b", -EINVAL, "anchor $ inside the regex at offset 1"},
        {"(a$)", -EINVAL, "anchor $"},
        {"\\p{L}", -EINVAL, "Unicode property \\p"},
        {"\\cA", -EINVAL, "unsupported escape \\c"},
        {"\\q", -EINVAL, "unsupported escape \\q"},
        {"\\01", -EINVAL, "octal escape"},
        {"\\xZZ", -EINVAL, "bad hex escape at offset 0"},
        {"\\x{110000}", -EINVAL, "above U+10FFFF"},
        {"\\uD800", -EINVAL, "lone surrogate"},
        {"\\uDC00\\uD800", -EINVAL, "lone surrogate"},
        {"\\U0000D800", -EINVAL, "lone surrogate"},
        {"a\\", -EINVAL, "trailing backslash at offset 1"},
        {"ab\xff", -EINVAL, "invalid UTF-8 at offset 2"},
        {"[\xc3]", -EINVAL, "invalid UTF-8 at offset 1"},
        {"a{10001}", -E2BIG, "repetition count above 10000 at offset 1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b;
        char err[256] = "";
        buf_init(&b, 1 << 20);
        int rc = regex_to_gbnf(cases[i].re, strlen(cases[i].re), false, &b, err, sizeof(err));
        if (rc != cases[i].rc || !strstr(err, cases[i].msg)) {
            fprintf(stderr, "regex /%s/: rc %d (want %d), message \"%s\" (want \"%s\")\n",
                    cases[i].re, rc, cases[i].rc, err, cases[i].msg);
        }
        assert_int_equal(rc, cases[i].rc);
        assert_non_null(strstr(err, cases[i].msg));
        assert_non_null(strstr(err, "regex: "));
        buf_free(&b);
    }
}

static void test_limits(void **state)
{
    (void)state;
    char err[256];
    struct buf b;
    /* nesting: REGEX_MAX_DEPTH groups are fine, one more is refused */
    char deep[2 * (REGEX_MAX_DEPTH + 1) + 2];
    size_t n = 0;
    for (int i = 0; i < REGEX_MAX_DEPTH; i++) {
        deep[n++] = '(';
    }
    deep[n++] = 'a';
    for (int i = 0; i < REGEX_MAX_DEPTH; i++) {
        deep[n++] = ')';
    }
    buf_init(&b, 1 << 20);
    assert_int_equal(regex_to_gbnf(deep, n, false, &b, err, sizeof(err)), 0);
    assert_string_equal(buf_cstr(&b), "\"a\"");
    buf_free(&b);
    memmove(deep + 1, deep, n);
    deep[0] = '(';
    deep[n + 1] = ')';
    buf_init(&b, 1 << 20);
    assert_int_equal(regex_to_gbnf(deep, n + 2, false, &b, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "nested deeper"));
    buf_free(&b);
    /* the output buffer's cap */
    buf_init(&b, 8);
    assert_int_equal(regex_to_gbnf("abcdefghijkl", 12, false, &b, err, sizeof(err)), -E2BIG);
    buf_free(&b);
    /* a long regex of nested nullable pieces stays linear, and compiles */
    struct buf re;
    buf_init(&re, 1 << 16);
    for (int i = 0; i < 200; i++) {
        buf_appends(&re, "(a?b?)*");
    }
    grammar *g = compile_regex(re.data, re.len, false);
    expect_match(g, "(a?b?)*...", "abba", 4, 1);
    grammar_free(g);
    buf_free(&re);
    /* nested repetitions cost their sum (the compiler shares the repeated rule), a long run of
     * large ones is refused */
    g = compile_regex("((a{100}){100}){100}", 20, false);
    expect_match(g, "((a{100}){100}){100}", "a", 1, 0);
    grammar_free(g);
    buf_init(&re, 1 << 20);
    for (int i = 0; i < 120; i++) {
        buf_appends(&re, "[a-z]{10000}");
    }
    buf_init(&b, 1 << 24);
    assert_int_equal(regex_to_gbnf(re.data, re.len, false, &b, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "too large"));
    buf_free(&b);
    buf_free(&re);
    /* a NULL err is allowed */
    buf_init(&b, 1 << 10);
    assert_int_equal(regex_to_gbnf("(", 1, false, &b, NULL, 0), -EINVAL);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_semantics),
        cmocka_unit_test(test_json_string),
        cmocka_unit_test(test_differential_posix),
        cmocka_unit_test(test_differential_json_string),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
