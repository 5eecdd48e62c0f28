/*
 * Stop-string matcher (see stop.h): a held-back tail, an earliest-match search over the held
 * text, and exact hold-back lengths (the longest suffix that is a proper prefix of a stop).
 */
#include "engine/sampler/stop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define STOP_HELD_MAX (16 * 1024 * 1024) /* cap on held + one delta */

int stop_matcher_init(struct stop_matcher *m, const char *const *stops, size_t n,
                      int include_stop_str_in_output)
{
    memset(m, 0, sizeof(*m));
    m->matched = -1;
    m->include = include_stop_str_in_output != 0;
    buf_init(&m->held, STOP_HELD_MAX);
    if (n > STOP_MAX_STRINGS || (n && !stops)) {
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!stops[i] || strlen(stops[i]) > STOP_MAX_LEN) {
            return -EINVAL;
        }
    }
    if (n == 0) {
        return 0;
    }
    m->stops = calloc(n, sizeof(*m->stops));
    m->lens = calloc(n, sizeof(*m->lens));
    if (!m->stops || !m->lens) {
        goto err_free;
    }
    for (size_t i = 0; i < n; i++) {
        m->stops[i] = strdup(stops[i]);
        if (!m->stops[i]) {
            m->n = i;
            goto err_free;
        }
        m->lens[i] = strlen(stops[i]);
    }
    m->n = n;
    return 0;
err_free:
    stop_matcher_deinit(m);
    return -ENOMEM;
}

void stop_matcher_deinit(struct stop_matcher *m)
{
    if (m->stops) {
        for (size_t i = 0; i < m->n; i++) {
            free(m->stops[i]);
        }
    }
    free(m->stops);
    free(m->lens);
    buf_free(&m->held);
    m->stops = NULL;
    m->lens = NULL;
    m->n = 0;
}

/* Longest suffix of text[0..len) that is a proper prefix of some stop string. */
static size_t hold_len(const struct stop_matcher *m, const char *text, size_t len)
{
    size_t best = 0;
    for (size_t s = 0; s < m->n; s++) {
        size_t sl = m->lens[s];
        size_t k = sl > 0 ? sl - 1 : 0;
        if (k > len) {
            k = len;
        }
        for (; k > best; k--) {
            if (memcmp(text + len - k, m->stops[s], k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

int stop_matcher_feed(struct stop_matcher *m, const char *delta, size_t len, struct buf *emit,
                      int *matched)
{
    int rc;
    *matched = m->matched;
    if (m->matched >= 0) {
        return 0;
    }
    if (m->n == 0) {
        return len ? buf_append(emit, delta, len) : 0;
    }
    if (len && (rc = buf_append(&m->held, delta, len)) != 0) {
        return rc;
    }
    const char *text = buf_cstr(&m->held);
    size_t tlen = m->held.len;
    size_t best_pos = tlen;
    int best = -1;
    for (size_t s = 0; s < m->n; s++) {
        size_t sl = m->lens[s];
        if (sl == 0 || sl > tlen) {
            continue;
        }
        const char *hit = memmem(text, tlen, m->stops[s], sl);
        if (!hit) {
            continue;
        }
        size_t pos = (size_t)(hit - text);
        if (best < 0 || pos < best_pos || (pos == best_pos && sl > m->lens[best])) {
            best = (int)s;
            best_pos = pos;
        }
    }
    if (best >= 0) {
        size_t out_len = best_pos + (m->include ? m->lens[best] : 0);
        if (out_len && (rc = buf_append(emit, text, out_len)) != 0) {
            return rc;
        }
        m->matched = best;
        *matched = best;
        buf_reset(&m->held);
        return 0;
    }
    size_t keep = hold_len(m, text, tlen);
    size_t safe = tlen - keep;
    if (safe == 0) {
        return 0;
    }
    if ((rc = buf_append(emit, text, safe)) != 0) {
        return rc;
    }
    memmove(m->held.data, m->held.data + safe, keep);
    m->held.len = keep;
    m->held.data[keep] = '\0';
    return 0;
}

int stop_matcher_flush(struct stop_matcher *m, struct buf *emit)
{
    if (m->matched >= 0 || m->held.len == 0) {
        return 0;
    }
    int rc = buf_append(emit, m->held.data, m->held.len);
    if (rc == 0) {
        buf_reset(&m->held);
    }
    return rc;
}

const char *stop_matcher_string(const struct stop_matcher *m, int i)
{
    if (i < 0 || (size_t)i >= m->n) {
        return NULL;
    }
    return m->stops[i];
}
