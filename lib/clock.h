/*
 * The one monotonic clock: CLOCK_MONOTONIC for durations, deadlines and rates. Wall-clock time
 * (timestamps people read) comes from clock_gettime(CLOCK_REALTIME) where it is rendered.
 */
#ifndef TANDEM_LIB_CLOCK_H
#define TANDEM_LIB_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds since an arbitrary start. */
static inline int64_t tandem_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Monotonic time in milliseconds. */
static inline int64_t tandem_now_ms(void)
{
    return tandem_now_ns() / 1000000;
}

/* Monotonic time in seconds, for durations measured as doubles (metrics, benchmarks). */
static inline double tandem_now_s(void)
{
    return (double)tandem_now_ns() * 1e-9;
}

#endif /* TANDEM_LIB_CLOCK_H */
