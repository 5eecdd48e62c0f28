/*
 * Unit tests of lib/shutdown.h: the first SIGTERM/SIGINT asks for a graceful stop, the second for
 * an immediate one, later ones only count; SIGPIPE no longer kills the process; the watchers do
 * not keep the loop alive.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "lib/shutdown.h"

struct calls {
    int n;
    int signum[4];
    int immediate[4];
};

static void on_shutdown(void *ud, int signum, int immediate)
{
    struct calls *c = ud;
    if (c->n < 4) {
        c->signum[c->n] = signum;
        c->immediate[c->n] = immediate;
    }
    c->n++;
}

static void on_guard(uv_timer_t *t)
{
    *(int *)t->data = 1;
}

/* Runs the loop until the callback count reaches want, at most 300 ms. (The signal watchers are
 * unreferenced, so a guard timer keeps the loop polling.) */
static void run_until(uv_loop_t *loop, struct calls *c, int want)
{
    uv_timer_t guard;
    int expired = 0;
    uv_timer_init(loop, &guard);
    guard.data = &expired;
    uv_timer_start(&guard, on_guard, 300, 0);
    while (c->n < want && !expired) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&guard, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

static void test_two_stages(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct calls c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(uv_loop_init(&loop), 0);
    struct shutdown *s = shutdown_new(&loop, on_shutdown, &c);
    assert_non_null(s);

    /* unreferenced: a loop with nothing else to do returns at once */
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);

    raise(SIGTERM);
    run_until(&loop, &c, 1);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.signum[0], SIGTERM);
    assert_int_equal(c.immediate[0], 0);

    raise(SIGINT);
    run_until(&loop, &c, 2);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.signum[1], SIGINT);
    assert_int_equal(c.immediate[1], 1);

    /* a third signal is counted but calls nothing */
    raise(SIGTERM);
    run_until(&loop, &c, 3); /* times out: no third call */
    assert_int_equal(shutdown_signal_count(s), 3);
    assert_int_equal(c.n, 2);

    /* SIGPIPE is ignored: the process survives it */
    raise(SIGPIPE);

    shutdown_free(s);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_free_stops_callbacks(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct calls c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(uv_loop_init(&loop), 0);
    struct shutdown *s = shutdown_new(&loop, on_shutdown, &c);
    assert_non_null(s);
    shutdown_free(s);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
    /* with the watcher gone, SIGTERM must not reach the old callback; block it to stay alive */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, &old);
    raise(SIGTERM);
    assert_int_equal(c.n, 0);
    struct timespec zero = {0, 0};
    assert_int_equal(sigtimedwait(&set, NULL, &zero), SIGTERM); /* consume it */
    sigprocmask(SIG_SETMASK, &old, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_stages),
        cmocka_unit_test(test_free_stops_callbacks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
