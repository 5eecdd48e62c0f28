/* Unit tests for engine/cache/kv_groups: vLLM's grouping of full-attention and sliding-window
 * layers (group size, padding, order) and the blocks one sequence may hold. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/cache/kv_groups.h"

/* gemma2: sliding and global layers alternate (window 4096 on the even layers) */
static void test_alternating(void **state)
{
    (void)state;
    int32_t w[8];
    for (int l = 0; l < 8; l++) {
        w[l] = l % 2 == 0 ? 4096 : 0;
    }
    kv_groups g;
    assert_int_equal(kv_groups_plan(&g, 8, w, true), 0);
    assert_int_equal(g.n_groups, 2);
    assert_int_equal(g.group_size, 4);
    assert_int_equal(g.window[0], 0); /* full attention first */
    assert_int_equal(g.window[1], 4096);
    for (int l = 0; l < 8; l++) {
        assert_int_equal(g.layer_group[l], l % 2 == 0 ? 1 : 0);
        assert_int_equal(g.layer_slot[l], l / 2);
    }
    /* 1000-token context, 256-token steps, blocks of 16: 63 + min(63, cdiv(1000, 16) + 1) */
    assert_int_equal(kv_groups_blocks_per_seq(g.n_groups, g.window, 1000, 256, 16), 63 + 63);
    w[0] = w[2] = w[4] = w[6] = 12;
    kv_groups_free(&g);
    assert_int_equal(kv_groups_plan(&g, 8, w, true), 0);
    assert_int_equal(kv_groups_blocks_per_seq(g.n_groups, g.window, 1000, 256, 16),
                     63 + 18); /* cdiv(267,16)+1 */
    kv_groups_free(&g);
    kv_groups_free(NULL);
}

/* gemma3 1B: 26 layers, every sixth global: 4 full, 22 sliding -> groups of 4, the sliding
 * layers in 6 groups (24 slots, 2 padding) */
static void test_gemma3_pattern(void **state)
{
    (void)state;
    int32_t w[26];
    for (int l = 0; l < 26; l++) {
        w[l] = l % 6 == 5 ? 0 : 512;
    }
    kv_groups g;
    assert_int_equal(kv_groups_plan(&g, 26, w, true), 0);
    assert_int_equal(g.group_size, 4);
    assert_int_equal(g.n_groups, 7);
    assert_int_equal(g.window[0], 0);
    for (int k = 1; k < 7; k++) {
        assert_int_equal(g.window[k], 512);
    }
    int used[7][4];
    memset(used, 0, sizeof used);
    for (int l = 0; l < 26; l++) {
        int k = g.layer_group[l], s = g.layer_slot[l];
        assert_true(k >= 0 && k < 7 && s >= 0 && s < 4);
        assert_int_equal(g.window[k], w[l]);
        assert_int_equal(used[k][s], 0); /* no two layers share a (group, slot) */
        used[k][s] = 1;
    }
    assert_int_equal(g.layer_group[5], 0);
    assert_int_equal(g.layer_slot[23], 3);
    assert_int_equal(g.layer_group[25], 6); /* the 22nd sliding layer: group 6, slot 1 */
    assert_int_equal(g.layer_slot[25], 1);
    kv_groups_free(&g);
}

/* counts within 1.5x of each other: one group per type, the larger size (padding the other) */
static void test_close_counts(void **state)
{
    (void)state;
    int32_t w[7] = {0, 64, 0, 64, 0, 64, 64}; /* 3 full, 4 sliding */
    kv_groups g;
    assert_int_equal(kv_groups_plan(&g, 7, w, true), 0);
    assert_int_equal(g.n_groups, 2);
    assert_int_equal(g.group_size, 4);
    kv_groups_free(&g);
}

/* no hybrid manager, one attention type, or too many groups: the one-group layout */
static void test_one_group(void **state)
{
    (void)state;
    int32_t w[40];
    for (int l = 0; l < 40; l++) {
        w[l] = l % 2 ? 8 : 0;
    }
    kv_groups g;
    assert_int_equal(kv_groups_plan(&g, 40, w, false), 0);
    assert_int_equal(g.n_groups, 1);
    assert_int_equal(g.group_size, 40);
    assert_int_equal(g.window[0], 0); /* mixed: full attention for the whole table */
    assert_int_equal(g.layer_slot[39], 39);
    assert_int_equal(kv_groups_blocks_per_seq(g.n_groups, g.window, 1000, 256, 16), 63);
    kv_groups_free(&g);
    for (int l = 0; l < 40; l++) {
        w[l] = 12; /* Mistral: every layer slides; one table with the window */
    }
    assert_int_equal(kv_groups_plan(&g, 40, w, true), 0);
    assert_int_equal(g.n_groups, 1);
    assert_int_equal(g.window[0], 12);
    kv_groups_free(&g);
    for (int l = 0; l < 40; l++) {
        w[l] = l == 0 ? 0 : 8; /* 1 full, 39 sliding: 40 groups of one */
    }
    assert_int_equal(kv_groups_plan(&g, 40, w, true), 0);
    assert_int_equal(g.n_groups, 1);
    kv_groups_free(&g);
    assert_int_equal(kv_groups_plan(&g, 0, w, true), -EINVAL);
    w[3] = -1;
    assert_int_equal(kv_groups_plan(&g, 40, w, true), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alternating),
        cmocka_unit_test(test_gemma3_pattern),
        cmocka_unit_test(test_close_counts),
        cmocka_unit_test(test_one_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
