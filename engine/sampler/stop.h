/*
 * Stop strings for streamed generation (vLLM's `stop` / `include_stop_str_in_output`).
 *
 * The matcher is fed the detokenized text deltas of one sequence as they are produced. Each feed
 * appends to `emit` the text that is safe to send now: everything except the longest tail that is
 * still a proper prefix of some stop string (that tail is held back until later text decides).
 * When a stop string appears, the text before it (plus the stop string itself when
 * include_stop_str_in_output) is emitted, the match is reported and the matcher is finished:
 * later feeds emit nothing. At the end of generation stop_matcher_flush emits what is held back.
 *
 * Matching is bytewise on UTF-8, so a stop string can span any number of deltas and multi-byte
 * characters are never split (UTF-8 is self-synchronising: a held-back tail that is a prefix of a
 * stop string starts at a character boundary). When several stop strings occur, the one that
 * starts first wins (ties: the longest, then the first listed); vLLM checks the list in order,
 * which only differs when two stops are found in the same delta. Empty stop strings are ignored.
 *
 * Ownership: the matcher copies the stop strings. Not thread-safe (one per sequence).
 */
#ifndef TANDEM_ENGINE_SAMPLER_STOP_H
#define TANDEM_ENGINE_SAMPLER_STOP_H

#include <stddef.h>

#include "lib/buf.h"

#define STOP_MAX_STRINGS 64   /* most stop strings per request */
#define STOP_MAX_LEN     1024 /* most bytes per stop string */

struct stop_matcher {
    char **stops; /* copies, NUL-terminated */
    size_t *lens;
    size_t n;
    int include;     /* include_stop_str_in_output */
    struct buf held; /* text fed but not yet emitted (bounded by STOP_MAX_LEN + delta) */
    int matched;     /* index of the stop string that matched, or -1 */
};

/* Copies the n stop strings. 0, -EINVAL (n > STOP_MAX_STRINGS, a string longer than
 * STOP_MAX_LEN, NULL entries), -ENOMEM. On error nothing needs freeing. */
int stop_matcher_init(struct stop_matcher *m, const char *const *stops, size_t n,
                      int include_stop_str_in_output);

void stop_matcher_deinit(struct stop_matcher *m);

/*
 * Feeds len bytes of new text. Appends the text safe to emit to `emit` (not cleared first) and
 * sets *matched to the index of the stop string that ended the text, or -1. Once a stop matched,
 * every later feed emits nothing and reports the same index. 0, -ENOMEM / -ENOSPC (buffers).
 */
int stop_matcher_feed(struct stop_matcher *m, const char *delta, size_t len, struct buf *emit,
                      int *matched);

/* End of generation: appends the held-back text (nothing after a match). 0 or a buffer error. */
int stop_matcher_flush(struct stop_matcher *m, struct buf *emit);

/* The stop string with index i (i < n), for stop_reason. */
const char *stop_matcher_string(const struct stop_matcher *m, int i);

#endif /* TANDEM_ENGINE_SAMPLER_STOP_H */
