/*
 * tandem-membw: the machine's achievable memory bandwidth, the yardstick of decode speed (a
 * benchmark, not a test; docs/BENCHMARKS.md). Decode streams every weight once per token, so
 * tokens/s x weight bytes over this figure is how close the engine runs to the memory limit.
 *
 *   usage: tandem-membw [--mib 1024] [-t 1,2] [-r 5] [-o md|json]
 *
 * For each thread count, over a buffer of --mib MiB (far past the caches) split into one
 * contiguous slice per thread, best of -r sweeps after a warm-up one:
 *   read   every 64-byte line loaded with the widest vector loads the CPU has (AVX-512, AVX2 or
 *          SSE2 XOR reductions, several in flight), as a weight stream is read
 *   copy   memcpy from one half of the buffer into the other (bytes read + bytes written)
 * GB/s is 10^9 bytes per second. Threads start together at a barrier; a sweep's time is the
 * slowest thread's.
 */
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MEMBW_MAX_THREADS 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    return (uint64_t)_mm512_reduce_or_epi64(a);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

static uint64_t read_sse2(const uint8_t *p, size_t n)
{
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a0 = _mm_xor_si128(a0, _mm_load_si128((const __m128i *)(p + i)));
        a1 = _mm_xor_si128(a1, _mm_load_si128((const __m128i *)(p + i + 16)));
        a2 = _mm_xor_si128(a2, _mm_load_si128((const __m128i *)(p + i + 32)));
        a3 = _mm_xor_si128(a3, _mm_load_si128((const __m128i *)(p + i + 48)));
    }
    __m128i a = _mm_xor_si128(_mm_xor_si128(a0, a1), _mm_xor_si128(a2, a3));
    return (uint64_t)_mm_cvtsi128_si64(a);
}

typedef uint64_t (*read_fn)(const uint8_t *, size_t);

typedef struct membw_job {
    pthread_barrier_t *start;
    read_fn read;
    bool copy;
    uint8_t *src, *dst; /* this thread's slice(s) */
    size_t bytes;
    double seconds;
    uint64_t sink;
} membw_job;

static void *membw_thread(void *arg)
{
    membw_job *j = arg;
    pthread_barrier_wait(j->start);
    double t0 = now_s();
    if (j->copy) {
        memcpy(j->dst, j->src, j->bytes);
        j->sink = j->dst[j->bytes - 1];
    } else {
        j->sink = j->read(j->src, j->bytes);
    }
    j->seconds = now_s() - t0;
    return NULL;
}

/* One sweep over the buffer with n threads: GB/s (bytes moved / slowest thread's time). */
static double membw_sweep(uint8_t *buf, size_t bytes, int n, read_fn rd, bool copy, uint64_t *sink)
{
    pthread_t th[MEMBW_MAX_THREADS];
    membw_job jobs[MEMBW_MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    const size_t half = bytes / 2;
    const size_t span = copy ? half : bytes;
    const size_t slice = span / (size_t)n / 4096 * 4096;
    for (int i = 0; i < n; i++) {
        jobs[i] = (membw_job){.start = &start,
                              .read = rd,
                              .copy = copy,
                              .src = buf + (size_t)i * slice,
                              .dst = buf + half + (size_t)i * slice,
                              .bytes = slice};
        if (i > 0 && pthread_create(&th[i], NULL, membw_thread, &jobs[i]) != 0) {
            fprintf(stderr, "tandem-membw: cannot start thread %d\n", i);
            exit(1);
        }
    }
    membw_thread(&jobs[0]);
    double worst = jobs[0].seconds;
    for (int i = 1; i < n; i++) {
        pthread_join(th[i], NULL);
        worst = jobs[i].seconds > worst ? jobs[i].seconds : worst;
    }
    for (int i = 0; i < n; i++) {
        *sink ^= jobs[i].sink;
    }
    pthread_barrier_destroy(&start);
    const double moved = (double)slice * (double)n * (copy ? 2.0 : 1.0);
    return worst > 0 ? moved / worst / 1e9 : 0.0;
}

static int parse_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (s && *s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MEMBW_MAX_THREADS) {
            return -1;
        }
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            return -1;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    long mib = 1024;
    int threads[16] = {1, 2}, n_thr = 2, reps = 5;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--mib") == 0 && v) {
            mib = strtol(v, NULL, 10);
            i++;
        } else if (strcmp(argv[i], "-t") == 0 && v) {
            n_thr = parse_list(v, threads, 16);
            i++;
        } else if (strcmp(argv[i], "-r") == 0 && v) {
            reps = (int)strtol(v, NULL, 10);
            i++;
        } else if (strcmp(argv[i], "-o") == 0 && v) {
            json = strcmp(v, "json") == 0;
            i++;
        } else {
            fprintf(stderr, "usage: tandem-membw [--mib 1024] [-t 1,2] [-r 5] [-o md|json]\n");
            return strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (mib < 16 || mib > (1L << 20) || n_thr < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "tandem-membw: bad --mib, -t or -r\n");
        return 2;
    }
    const size_t bytes = (size_t)mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "tandem-membw: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    memset(buf, 0x5a, bytes); /* resident, no zero page */
    __builtin_cpu_init();
    read_fn rd = read_sse2;
    const char *isa = "SSE2";
    if (__builtin_cpu_supports("avx512f")) {
        rd = read_avx512;
        isa = "AVX-512";
    } else if (__builtin_cpu_supports("avx2")) {
        rd = read_avx2;
        isa = "AVX2";
    }
    uint64_t sink = 0;
    if (!json) {
        printf("| threads | read GB/s | copy GB/s |\n| ---: | ---: | ---: |\n");
    }
    for (int t = 0; t < n_thr; t++) {
        double best[2] = {0, 0};
        for (int kind = 0; kind < 2; kind++) {
            membw_sweep(buf, bytes, threads[t], rd, kind == 1, &sink); /* warm-up */
            for (int r = 0; r < reps; r++) {
                double g = membw_sweep(buf, bytes, threads[t], rd, kind == 1, &sink);
                best[kind] = g > best[kind] ? g : best[kind];
            }
        }
        if (json) {
            printf("{\"threads\":%d,\"read_gbs\":%.2f,\"copy_gbs\":%.2f,\"mib\":%ld,\"isa\":\"%s\","
                   "\"reps\":%d}\n",
                   threads[t], best[0], best[1], mib, isa, reps);
        } else {
            printf("| %d | %.2f | %.2f |\n", threads[t], best[0], best[1]);
        }
        fflush(stdout);
    }
    if (!json) {
        printf("(%ld MiB, %s loads, best of %d; sink %llx)\n", mib, isa, reps,
               (unsigned long long)(sink & 0xf));
    }
    free(buf);
    return 0;
}
