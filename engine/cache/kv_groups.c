/*
 * KV cache groups (see kv_groups.h).
 */
#include "engine/cache/kv_groups.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void kv_groups_free(kv_groups *g)
{
    if (!g) {
        return;
    }
    free(g->layer_group);
    free(g->layer_slot);
    memset(g, 0, sizeof(*g));
}

/* The one-group layout: a slot per layer; a window only when every layer has the same one. */
static void plan_one(kv_groups *g, const int32_t *layer_window)
{
    g->n_groups = 1;
    g->group_size = g->n_layer;
    g->window[0] = layer_window[0];
    for (int32_t l = 0; l < g->n_layer; l++) {
        g->layer_group[l] = 0;
        g->layer_slot[l] = l;
        if (layer_window[l] != layer_window[0]) {
            g->window[0] = 0;
        }
    }
}

int kv_groups_plan(kv_groups *g, int32_t n_layer, const int32_t *layer_window, bool hybrid)
{
    memset(g, 0, sizeof(*g));
    if (n_layer < 1 || !layer_window) {
        return -EINVAL;
    }
    for (int32_t l = 0; l < n_layer; l++) {
        if (layer_window[l] < 0) {
            return -EINVAL;
        }
    }
    g->n_layer = n_layer;
    g->layer_group = malloc((size_t)n_layer * sizeof(*g->layer_group));
    g->layer_slot = malloc((size_t)n_layer * sizeof(*g->layer_slot));
    if (!g->layer_group || !g->layer_slot) {
        kv_groups_free(g);
        return -ENOMEM;
    }
    /* attention types: full attention first, then the windows in increasing order */
    int32_t types[KVG_MAX_GROUPS], counts[KVG_MAX_GROUPS], n_types = 0;
    bool too_many = false;
    for (int32_t l = 0; l < n_layer && !too_many; l++) {
        int32_t k = 0;
        while (k < n_types && types[k] != layer_window[l]) {
            k++;
        }
        if (k == n_types && n_types == KVG_MAX_GROUPS) {
            too_many = true;
        } else if (k == n_types) {
            types[n_types] = layer_window[l];
            counts[n_types++] = 1;
        } else {
            counts[k]++;
        }
    }
    if (!hybrid || too_many || n_types < 2) {
        plan_one(g, layer_window);
        return 0;
    }
    for (int32_t i = 1; i < n_types; i++) { /* insertion sort by window, 0 first */
        for (int32_t k = i; k > 0 && types[k] < types[k - 1]; k--) {
            int32_t t = types[k], n = counts[k];
            types[k] = types[k - 1];
            counts[k] = counts[k - 1];
            types[k - 1] = t;
            counts[k - 1] = n;
        }
    }
    int32_t min = counts[0], max = counts[0];
    for (int32_t k = 1; k < n_types; k++) {
        min = counts[k] < min ? counts[k] : min;
        max = counts[k] > max ? counts[k] : max;
    }
    int32_t size = (int64_t)max * 2 < (int64_t)min * 3 ? max : min;
    int32_t n_groups = 0;
    for (int32_t k = 0; k < n_types; k++) {
        n_groups += (counts[k] + size - 1) / size;
    }
    if (n_groups > KVG_MAX_GROUPS) {
        plan_one(g, layer_window);
        return 0;
    }
    g->n_groups = n_groups;
    g->group_size = size;
    int32_t first = 0; /* first group of the type */
    for (int32_t k = 0; k < n_types; k++) {
        int32_t i = 0; /* the type's layers seen so far */
        for (int32_t l = 0; l < n_layer; l++) {
            if (layer_window[l] != types[k]) {
                continue;
            }
            g->layer_group[l] = first + i / size;
            g->layer_slot[l] = i % size;
            i++;
        }
        int32_t n = (counts[k] + size - 1) / size;
        for (int32_t j = 0; j < n; j++) {
            g->window[first + j] = types[k];
        }
        first += n;
    }
    return 0;
}

int64_t kv_groups_blocks_per_seq(int32_t n_groups, const int32_t *window, int32_t max_model_len,
                                 int32_t max_batched_tokens, int32_t block_size)
{
    int64_t whole = ((int64_t)max_model_len + block_size - 1) / block_size;
    if (n_groups <= 1) {
        return whole;
    }
    int64_t n = 0;
    for (int32_t k = 0; k < n_groups; k++) {
        int64_t w = window[k];
        if (w == 0) {
            n += whole;
            continue;
        }
        int64_t tokens = w - 1 + max_batched_tokens;
        tokens = tokens < max_model_len ? tokens : max_model_len;
        int64_t b = (tokens + block_size - 1) / block_size + 1;
        n += b < whole ? b : whole;
    }
    return n;
}
