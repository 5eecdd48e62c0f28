/*
 * Heap accounting for fuzz targets, through the sanitizer allocator's malloc and free hooks
 * (every fuzz target is built with ASan, under the standalone driver and under libFuzzer).
 *
 * Two uses:
 *  - limits: the standalone driver's -malloc_limit_mb and -rss_limit_mb, as libFuzzer has them:
 *    one allocation above the first, or live heap above the second, ends the run with a report
 *    and abort(), so a parser that balloons fails `make test` instead of passing slowly;
 *  - bounds: a target measures the peak heap of one parse (fuzz_heap_peak_reset before,
 *    fuzz_heap_peak after) and checks it against the bound its parser promises, a small multiple
 *    of the input's size (FUZZ_HEAP_BOUND).
 *
 * Without a sanitizer runtime the hooks are absent: fuzz_heap_enabled() is 0, every count is 0
 * and no bound is checked.
 */
#ifndef TANDEM_E2E_FUZZ_HEAP_H
#define TANDEM_E2E_FUZZ_HEAP_H

#include <stddef.h>

/* 1 when the allocator's hooks are installed (a sanitizer runtime is linked). */
int fuzz_heap_enabled(void);

/* Bytes allocated and not yet freed, process-wide. */
size_t fuzz_heap_live(void);

/* Starts a measurement: the peak is reset to the live heap now. */
void fuzz_heap_peak_reset(void);

/* The highest live heap since fuzz_heap_peak_reset, minus the live heap at that reset. */
size_t fuzz_heap_peak(void);

/* Abort with a report when one allocation exceeds malloc_limit bytes or the live heap exceeds
 * live_limit bytes (0: no limit). */
void fuzz_heap_set_limits(size_t malloc_limit, size_t live_limit);

/* Aborts with a report naming what when peak > factor * input_size + slack. */
void fuzz_heap_check_bound(const char *what, size_t peak, size_t input_size, size_t factor,
                           size_t slack);

/* Measure the heap of one statement and check it: FUZZ_HEAP_BOUND("gguf header", size, 8, 4096,
 * g = gguf_open_buffer(...)). */
#define FUZZ_HEAP_BOUND(what, input_size, factor, slack, stmt)                                     \
    do {                                                                                           \
        fuzz_heap_peak_reset();                                                                    \
        stmt;                                                                                      \
        fuzz_heap_check_bound((what), fuzz_heap_peak(), (input_size), (factor), (slack));          \
    } while (0)

#endif
