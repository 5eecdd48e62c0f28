/* Unit tests for engine/sampler/stop.h: stops spanning deltas, several stops, overlapping
 * prefixes, include_stop_str_in_output, multi-byte UTF-8, flush. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sampler/stop.h"

/* Feeds the deltas; returns the emitted text (static buffer) and the match index. */
static const char *run(const char *const *stops, size_t n_stops, int include,
                       const char *const *deltas, size_t n_deltas, int *matched, int flush)
{
    static char out[1024];
    struct stop_matcher m;
    struct buf emit;
    buf_init(&emit, 4096);
    assert_int_equal(stop_matcher_init(&m, stops, n_stops, include), 0);
    *matched = -1;
    for (size_t i = 0; i < n_deltas; i++) {
        assert_int_equal(stop_matcher_feed(&m, deltas[i], strlen(deltas[i]), &emit, matched), 0);
    }
    if (flush) {
        assert_int_equal(stop_matcher_flush(&m, &emit), 0);
    }
    snprintf(out, sizeof(out), "%s", buf_cstr(&emit));
    buf_free(&emit);
    stop_matcher_deinit(&m);
    return out;
}

static void test_no_stops_passthrough(void **state)
{
    (void)state;
    const char *d[] = {"Hello", ", ", "world"};
    int mt;
    assert_string_equal(run(NULL, 0, 0, d, 3, &mt, 0), "Hello, world");
    assert_int_equal(mt, -1);
}

static void test_stop_spanning_deltas(void **state)
{
    (void)state;
    const char *s[] = {"STOP"};
    const char *d[] = {"abc S", "T", "O", "Pxyz"};
    int mt;
    assert_string_equal(run(s, 1, 0, d, 4, &mt, 1), "abc ");
    assert_int_equal(mt, 0);
    assert_string_equal(run(s, 1, 1, d, 4, &mt, 1), "abc STOP");
    /* a false start is released once it cannot match */
    const char *d2[] = {"ST", "OX", "!"};
    assert_string_equal(run(s, 1, 0, d2, 3, &mt, 0), "STOX!");
    assert_int_equal(mt, -1);
}

static void test_hold_back_exact(void **state)
{
    (void)state;
    const char *s[] = {"\n\nUser:"};
    struct stop_matcher m;
    struct buf emit;
    buf_init(&emit, 4096);
    assert_int_equal(stop_matcher_init(&m, s, 1, 0), 0);
    int mt;
    assert_int_equal(stop_matcher_feed(&m, "Hi\n", 3, &emit, &mt), 0);
    assert_string_equal(buf_cstr(&emit), "Hi"); /* "\n" may start the stop */
    assert_int_equal(stop_matcher_feed(&m, "\nUs", 3, &emit, &mt), 0);
    assert_string_equal(buf_cstr(&emit), "Hi");
    assert_int_equal(stop_matcher_feed(&m, "a", 1, &emit, &mt), 0);
    assert_string_equal(buf_cstr(&emit), "Hi\n\nUsa");
    assert_int_equal(stop_matcher_feed(&m, "\n", 1, &emit, &mt), 0);
    assert_int_equal(stop_matcher_flush(&m, &emit), 0);
    assert_string_equal(buf_cstr(&emit), "Hi\n\nUsa\n");
    assert_int_equal(mt, -1);
    buf_free(&emit);
    stop_matcher_deinit(&m);
}

static void test_multiple_and_overlapping(void **state)
{
    (void)state;
    const char *s[] = {"abcd", "bc", "xyz"};
    int mt;
    const char *d[] = {"1a", "b", "c", "d"};
    /* "bc" completes first (at position 2) before "abcd" could: earliest start wins only among
     * stops present; "abcd" is not yet present when "bc" is */
    assert_string_equal(run(s, 3, 0, d, 4, &mt, 1), "1a");
    assert_int_equal(mt, 1);
    /* both in one delta: "abcd" starts earlier */
    const char *d2[] = {"1abcd"};
    assert_string_equal(run(s, 3, 0, d2, 1, &mt, 1), "1");
    assert_int_equal(mt, 0);
    /* same start: the longer wins */
    const char *s2[] = {"ab", "abc"};
    const char *d3[] = {"xabc!"};
    assert_string_equal(run(s2, 2, 1, d3, 1, &mt, 1), "xabc");
    assert_int_equal(mt, 1);
    /* overlapping prefixes: "aab" inside "aaab" */
    const char *s3[] = {"aab"};
    const char *d4[] = {"a", "a", "a", "b", "c"};
    assert_string_equal(run(s3, 1, 0, d4, 5, &mt, 1), "a");
    assert_int_equal(mt, 0);
}

static void test_utf8(void **state)
{
    (void)state;
    /* stop "世界" (e4 b8 96 e7 95 8c) spanning deltas that split inside characters */
    const char *s[] = {"\xe4\xb8\x96\xe7\x95\x8c"};
    const char *d[] = {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4", "\xb8\x96\xe7", "\x95\x8c!"};
    int mt;
    assert_string_equal(run(s, 1, 0, d, 3, &mt, 1), "\xe4\xbd\xa0\xe5\xa5\xbd");
    assert_int_equal(mt, 0);
    /* emoji not matching: everything comes out intact */
    const char *d2[] = {"\xf0\x9f\x98\x80", "\xe4\xb8\x96", "x"};
    assert_string_equal(run(s, 1, 0, d2, 3, &mt, 1), "\xf0\x9f\x98\x80\xe4\xb8\x96x");
    assert_int_equal(mt, -1);
}

static void test_after_match_and_errors(void **state)
{
    (void)state;
    const char *s[] = {"", "END"};
    struct stop_matcher m;
    struct buf emit;
    buf_init(&emit, 4096);
    assert_int_equal(stop_matcher_init(&m, s, 2, 0), 0); /* empty stop ignored */
    int mt;
    assert_int_equal(stop_matcher_feed(&m, "xENDy", 5, &emit, &mt), 0);
    assert_int_equal(mt, 1);
    assert_string_equal(stop_matcher_string(&m, mt), "END");
    assert_null(stop_matcher_string(&m, 7));
    assert_int_equal(stop_matcher_feed(&m, "more", 4, &emit, &mt), 0);
    assert_int_equal(mt, 1);
    assert_int_equal(stop_matcher_flush(&m, &emit), 0);
    assert_string_equal(buf_cstr(&emit), "x");
    buf_free(&emit);
    stop_matcher_deinit(&m);

    const char *none[] = {NULL};
    assert_int_equal(stop_matcher_init(&m, none, 1, 0), -EINVAL);
    char *longs = malloc(STOP_MAX_LEN + 2);
    assert_non_null(longs);
    memset(longs, 'a', STOP_MAX_LEN + 1);
    longs[STOP_MAX_LEN + 1] = '\0';
    const char *l[] = {longs};
    assert_int_equal(stop_matcher_init(&m, l, 1, 0), -EINVAL);
    free(longs);
    assert_int_equal(stop_matcher_init(&m, s, STOP_MAX_STRINGS + 1, 0), -EINVAL);
}

/* Reference: the earliest occurrence of any stop in the whole text (ties: the longest). */
static int ref_match(const char *const *stops, size_t n, const char *text, size_t *pos)
{
    int best = -1;
    size_t best_pos = 0;
    for (size_t i = 0; i < n; i++) {
        const char *hit = strstr(text, stops[i]);
        if (!hit) {
            continue;
        }
        size_t p = (size_t)(hit - text);
        if (best < 0 || p < best_pos || (p == best_pos && strlen(stops[i]) > strlen(stops[best]))) {
            best = (int)i;
            best_pos = p;
        }
    }
    *pos = best_pos;
    return best;
}

/*
 * Property: for stop sets where no stop contains another, any split of the text into deltas
 * gives the reference result; at every step the emitted text is a prefix of the final output and
 * at most (longest stop - 1) fed bytes are held back. Fixed-seed random cases, bounded.
 */
static void test_chunking_invariance(void **state)
{
    (void)state;
    uint32_t rng = 12345;
#define NEXT() (rng = rng * 1103515245u + 12345u, (rng >> 16) & 0x7fff)
    for (int iter = 0; iter < 3000; iter++) {
        char stop_buf[3][6];
        const char *stops[3];
        size_t n_stops = 1 + NEXT() % 3;
        size_t max_len = 0;
        for (size_t i = 0; i < n_stops; i++) {
            size_t len = 1 + NEXT() % 4;
            for (size_t j = 0; j < len; j++) {
                stop_buf[i][j] = (char)('a' + NEXT() % 3);
            }
            stop_buf[i][len] = '\0';
            stops[i] = stop_buf[i];
            max_len = len > max_len ? len : max_len;
        }
        int nested = 0;
        for (size_t i = 0; i < n_stops; i++) {
            for (size_t j = 0; j < n_stops; j++) {
                nested |= i != j && strstr(stops[i], stops[j]) != NULL;
            }
        }
        if (nested) {
            continue;
        }
        char text[48];
        size_t tlen = NEXT() % 40;
        for (size_t j = 0; j < tlen; j++) {
            text[j] = (char)('a' + NEXT() % 4);
        }
        text[tlen] = '\0';
        int include = (int)(NEXT() % 2);
        size_t pos;
        int want = ref_match(stops, n_stops, text, &pos);
        char expect[64];
        size_t elen = want < 0 ? tlen : pos + (include ? strlen(stops[want]) : 0);
        memcpy(expect, text, elen);
        expect[elen] = '\0';

        struct stop_matcher m;
        struct buf emit;
        buf_init(&emit, 4096);
        assert_int_equal(stop_matcher_init(&m, stops, n_stops, include), 0);
        int got = -1;
        size_t fed = 0;
        while (fed < tlen) {
            size_t piece = 1 + NEXT() % 5;
            if (piece > tlen - fed) {
                piece = tlen - fed;
            }
            assert_int_equal(stop_matcher_feed(&m, text + fed, piece, &emit, &got), 0);
            fed += piece;
            assert_true(emit.len <= elen);
            assert_memory_equal(buf_cstr(&emit), expect, emit.len);
            if (got < 0) {
                assert_true(fed - emit.len <= max_len - 1);
            }
        }
        assert_int_equal(stop_matcher_flush(&m, &emit), 0);
        if (got != want || strcmp(buf_cstr(&emit), expect) != 0) {
            fail_msg("text '%s' stops %zu include %d: got %d '%s', want %d '%s'", text, n_stops,
                     include, got, buf_cstr(&emit), want, expect);
        }
        buf_free(&emit);
        stop_matcher_deinit(&m);
    }
#undef NEXT
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_stops_passthrough),
        cmocka_unit_test(test_stop_spanning_deltas),
        cmocka_unit_test(test_hold_back_exact),
        cmocka_unit_test(test_multiple_and_overlapping),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_after_match_and_errors),
        cmocka_unit_test(test_chunking_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
