/*
 * Pickers: each ranks every candidate best first (so the gateway has fallbacks) and says how many
 * of them it picked (maxNumOfEndpoints, default 1).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "operator/epp/sched/plugins.h"

static int picker_create(struct plugin *p, struct json_object *params, char *err, size_t errlen)
{
    int64_t *max = malloc(sizeof(*max));
    p->state = max;
    if (!max) {
        return -ENOMEM;
    }
    return param_int(params, "maxNumOfEndpoints", 1, 1, EPP_SCHED_MAX_TARGETS, max, err, errlen);
}

static void picker_destroy(struct plugin *p)
{
    free(p->state);
}

static int picked(const struct plugin *p, int n)
{
    int64_t max = *(const int64_t *)p->state;
    return n < max ? n : (int)max;
}

/* Stable insertion sort of cand by key, highest first (candidate lists are short). */
static void sort_desc(int *cand, double *key, int n)
{
    for (int i = 1; i < n; i++) {
        double k = key[i];
        int c = cand[i], j = i - 1;
        while (j >= 0 && key[j] < k) {
            key[j + 1] = key[j];
            cand[j + 1] = cand[j];
            j--;
        }
        key[j + 1] = k;
        cand[j + 1] = c;
    }
}

/* Shuffles the pairs together so equal scores come out in random order after the stable sort. */
static void shuffle_pairs(struct epp_sched *s, int *cand, double *score, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(sched_rand(s) % (uint64_t)(i + 1));
        int tc = cand[i];
        double ts = score[i];
        cand[i] = cand[j];
        score[i] = score[j];
        cand[j] = tc;
        score[j] = ts;
    }
}

static int max_score_pick(struct plugin *p, struct cycle *c, int *cand, double *score, int n)
{
    shuffle_pairs(c->s, cand, score, n);
    sort_desc(cand, score, n);
    return picked(p, n);
}

static int random_pick(struct plugin *p, struct cycle *c, int *cand, double *score, int n)
{
    shuffle_pairs(c->s, cand, score, n);
    return picked(p, n);
}

/* A-Res weighted sampling without replacement: key = u^(1/w); all-zero weights ⇒ uniform. */
static int weighted_pick(struct plugin *p, struct cycle *c, int *cand, double *score, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++) {
        any = any || score[i] > 0;
    }
    if (!any) {
        return random_pick(p, c, cand, score, n);
    }
    double *key = malloc((size_t)n * sizeof(*key));
    if (!key) {
        return max_score_pick(p, c, cand, score, n);
    }
    for (int i = 0; i < n; i++) {
        double u = sched_rand01(c->s);
        key[i] = score[i] > 0 ? pow(u > 0 ? u : 1e-300, 1.0 / score[i]) : -1.0;
    }
    for (int i = 1; i < n; i++) { /* keep score parallel to cand while sorting by key */
        double k = key[i], sc = score[i];
        int cd = cand[i], j = i - 1;
        while (j >= 0 && key[j] < k) {
            key[j + 1] = key[j];
            score[j + 1] = score[j];
            cand[j + 1] = cand[j];
            j--;
        }
        key[j + 1] = k;
        score[j + 1] = sc;
        cand[j + 1] = cd;
    }
    free(key);
    return picked(p, n);
}

const struct plugin_ops picker_max_score_ops = {.type = "max-score-picker",
                                                .kind = PK_PICKER,
                                                .create = picker_create,
                                                .destroy = picker_destroy,
                                                .pick = max_score_pick};
const struct plugin_ops picker_random_ops = {.type = "random-picker",
                                             .kind = PK_PICKER,
                                             .create = picker_create,
                                             .destroy = picker_destroy,
                                             .pick = random_pick};
const struct plugin_ops picker_weighted_ops = {.type = "weighted-random-picker",
                                               .kind = PK_PICKER,
                                               .create = picker_create,
                                               .destroy = picker_destroy,
                                               .pick = weighted_pick};
