/*
 * Heap accounting for fuzz targets (see fuzz_heap.h): the sanitizer runtime calls our hooks on
 * every malloc and free; the free hook asks the allocator for the chunk's size, which it still
 * knows at that point. Counters are atomics: a target may start threads.
 */
#include "e2e/fuzz/fuzz_heap.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* From <sanitizer/allocator_interface.h>, declared weak so that a build without a sanitizer
 * runtime links and simply measures nothing. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *))
    __attribute__((weak));
size_t __sanitizer_get_allocated_size(const volatile void *p) __attribute__((weak));
int __sanitizer_get_ownership(const volatile void *p) __attribute__((weak));
void __sanitizer_print_stack_trace(void) __attribute__((weak));

static int hooks_on;
/* signed: a chunk allocated before the hooks were installed may be freed after */
static long long live, peak, base;
static size_t malloc_limit, live_limit;
static int reporting; /* set once a limit fired: the report itself allocates */

static void report(const char *fmt, size_t a, size_t b)
{
    if (__atomic_exchange_n(&reporting, 1, __ATOMIC_SEQ_CST)) {
        return;
    }
    char line[256];
    int n = snprintf(line, sizeof(line), fmt, a, b);
    if (n > 0) {
        (void)!write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    }
    if (__sanitizer_print_stack_trace) {
        __sanitizer_print_stack_trace();
    }
    abort();
}

static void on_malloc(const volatile void *p, size_t size)
{
    (void)p;
    long long now = __atomic_add_fetch(&live, (long long)size, __ATOMIC_RELAXED);
    long long old = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (now > old &&
           !__atomic_compare_exchange_n(&peak, &old, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    if (malloc_limit && size > malloc_limit) {
        report("==fuzz_heap== ERROR: out-of-memory (malloc(%zu) exceeds -malloc_limit_mb, %zu "
               "bytes)\n",
               size, malloc_limit);
    }
    if (live_limit && now > (long long)live_limit) {
        report("==fuzz_heap== ERROR: out-of-memory (live heap %zu bytes exceeds -rss_limit_mb, "
               "%zu bytes)\n",
               (size_t)now, live_limit);
    }
}

static void on_free(const volatile void *p)
{
    if (p && __sanitizer_get_ownership(p)) {
        __atomic_sub_fetch(&live, (long long)__sanitizer_get_allocated_size(p), __ATOMIC_RELAXED);
    }
}

__attribute__((constructor)) static void fuzz_heap_install(void)
{
    if (__sanitizer_install_malloc_and_free_hooks && __sanitizer_get_allocated_size &&
        __sanitizer_get_ownership) {
        hooks_on = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) != 0;
    }
}

int fuzz_heap_enabled(void)
{
    return hooks_on;
}

size_t fuzz_heap_live(void)
{
    long long now = __atomic_load_n(&live, __ATOMIC_RELAXED);
    return now > 0 ? (size_t)now : 0;
}

void fuzz_heap_peak_reset(void)
{
    long long now = __atomic_load_n(&live, __ATOMIC_RELAXED);
    __atomic_store_n(&base, now, __ATOMIC_RELAXED);
    __atomic_store_n(&peak, now, __ATOMIC_RELAXED);
}

size_t fuzz_heap_peak(void)
{
    long long p = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    long long b = __atomic_load_n(&base, __ATOMIC_RELAXED);
    return p > b ? (size_t)(p - b) : 0;
}

void fuzz_heap_set_limits(size_t malloc_limit_bytes, size_t live_limit_bytes)
{
    malloc_limit = malloc_limit_bytes;
    live_limit = live_limit_bytes;
}

/* FUZZ_HEAP_STATS=1: the largest peak/size ratio seen (inputs over 1 KiB), printed at exit, to
 * choose and document a bound. */
static const char *stats_what;
static double stats_ratio;
static size_t stats_peak, stats_size, stats_max_peak;

static void print_stats(void)
{
    fprintf(stderr,
            "fuzz_heap: %s: largest peak %zu bytes; largest peak/size %.1f (%zu bytes for a "
            "%zu-byte input)\n",
            stats_what, stats_max_peak, stats_ratio, stats_peak, stats_size);
}

void fuzz_heap_check_bound(const char *what, size_t peak_bytes, size_t input_size, size_t factor,
                           size_t slack)
{
    static int stats = -1;
    if (stats < 0) {
        const char *e = getenv("FUZZ_HEAP_STATS");
        stats = e && *e && *e != '0';
        if (stats) {
            atexit(print_stats);
        }
    }
    if (stats) {
        stats_what = what;
        stats_max_peak = peak_bytes > stats_max_peak ? peak_bytes : stats_max_peak;
        double r = (double)peak_bytes / (double)(input_size ? input_size : 1);
        if (input_size >= 1024 && r > stats_ratio) {
            stats_ratio = r;
            stats_peak = peak_bytes;
            stats_size = input_size;
        }
    }
    if (!hooks_on || peak_bytes <= factor * input_size + slack) {
        return;
    }
    fprintf(stderr,
            "==fuzz_heap== ERROR: %s: peak heap %zu bytes for a %zu-byte input, above its bound "
            "%zu x size + %zu = %zu\n",
            what, peak_bytes, input_size, factor, slack, factor * input_size + slack);
    abort();
}
