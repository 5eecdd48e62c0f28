/*
 * SIGTERM/SIGINT → graceful, then immediate, shutdown callbacks (see shutdown.h).
 */
#include "lib/shutdown.h"

#include <signal.h>
#include <stdlib.h>

#include "lib/log.h"

struct shutdown {
    uv_signal_t term;
    uv_signal_t intr;
    shutdown_fn fn;
    void *ud;
    int count;   /* signals received */
    int closing; /* handles still to be closed by the loop; freed at 0 */
    int stopped; /* shutdown_free was called */
};

static void on_signal(uv_signal_t *h, int signum)
{
    struct shutdown *s = h->data;
    if (s->stopped) {
        return;
    }
    s->count++;
    if (s->count > 2) {
        log_warn("signal %d received again (%d so far); already shutting down", signum, s->count);
        return;
    }
    log_info("signal %d received: %s shutdown", signum, s->count == 1 ? "graceful" : "immediate");
    s->fn(s->ud, signum, s->count == 2);
}

static void on_closed(uv_handle_t *h)
{
    struct shutdown *s = h->data;
    if (--s->closing == 0) {
        free(s);
    }
}

struct shutdown *shutdown_new(uv_loop_t *loop, shutdown_fn fn, void *ud)
{
    TANDEM_ASSERT(loop != NULL && fn != NULL);
    struct shutdown *s = calloc(1, sizeof(*s));
    if (!s) {
        return NULL;
    }
    s->fn = fn;
    s->ud = ud;
    if (uv_signal_init(loop, &s->term) != 0) {
        free(s);
        return NULL;
    }
    s->term.data = s;
    s->closing = 1;
    if (uv_signal_init(loop, &s->intr) != 0) {
        s->stopped = 1;
        uv_close((uv_handle_t *)&s->term, on_closed);
        return NULL;
    }
    s->intr.data = s;
    s->closing = 2;
    if (uv_signal_start(&s->term, on_signal, SIGTERM) != 0 ||
        uv_signal_start(&s->intr, on_signal, SIGINT) != 0) {
        shutdown_free(s);
        return NULL;
    }
    uv_unref((uv_handle_t *)&s->term);
    uv_unref((uv_handle_t *)&s->intr);
    signal(SIGPIPE, SIG_IGN);
    return s;
}

void shutdown_free(struct shutdown *s)
{
    if (!s) {
        return;
    }
    s->stopped = 1;
    uv_close((uv_handle_t *)&s->term, on_closed);
    uv_close((uv_handle_t *)&s->intr, on_closed);
}

int shutdown_signal_count(const struct shutdown *s)
{
    return s->count;
}
