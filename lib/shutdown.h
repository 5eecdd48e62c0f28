/*
 * Signal-driven shutdown for every Tandem binary: SIGTERM and SIGINT are watched on a libuv loop
 * and turned into at most two calls of a user callback, the first asking for a graceful stop
 * (drain in-flight work, then exit) and the second for an immediate one. Later signals are only
 * counted. SIGPIPE is ignored process-wide, so that writing to a closed socket gives EPIPE instead
 * of killing the process.
 *
 * The signal watchers are unreferenced: they never keep uv_run alive on their own, so a loop whose
 * work is done returns even while they are installed.
 *
 * Threading: create, use and free on the loop's thread. The callback runs on that thread.
 */
#ifndef TANDEM_LIB_SHUTDOWN_H
#define TANDEM_LIB_SHUTDOWN_H

#include <uv.h>

#include "lib/common.h"

struct shutdown;

/* signum: the signal received; immediate: 0 for the first signal, 1 for the second. */
typedef void (*shutdown_fn)(void *ud, int signum, int immediate);

/* Installs the watchers on loop and ignores SIGPIPE. NULL on failure (OOM, uv errors). */
struct shutdown *shutdown_new(uv_loop_t *loop, shutdown_fn fn, void *ud);

/* Stops watching (no callback after this returns) and releases the object once the loop has run
 * the handles' close callbacks (run the loop again before uv_loop_close). NULL is allowed. */
void shutdown_free(struct shutdown *s);

/* Number of SIGTERM/SIGINT received so far. */
int shutdown_signal_count(const struct shutdown *s);

#endif /* TANDEM_LIB_SHUTDOWN_H */
