/*
 * Standalone driver for libFuzzer-style targets (LLVMFuzzerTestOneInput), so every fuzz target
 * runs in `make test` with gcc and no libFuzzer runtime. It replays each file of the corpus
 * directories given on the command line, then runs a bounded number of seeded mutations of them
 * (bit flips, byte sets, inserts, deletes, truncations, splices, interesting bytes). The seed is
 * fixed unless -seed=N is given, so a failure reproduces. Crashes surface through ASan/UBSan.
 *
 *   fuzz_x [-runs=N] [-seed=N] [-max_len=N] [-malloc_limit_mb=N] [-rss_limit_mb=N]
 *          [-timeout=S] DIR_OR_FILE...
 *
 * Limits, as libFuzzer's flags of the same names: one allocation above -malloc_limit_mb (default:
 * the RSS limit), a live heap or a resident size above -rss_limit_mb (default 2048), or one input
 * running longer than -timeout seconds (default 60) ends the run with a report and abort(); 0
 * turns a limit off. The heap is counted through the sanitizer's allocator hooks (fuzz_heap.c).
 *
 * The same targets link against real libFuzzer with `make fuzz` (clang -fsanitize=fuzzer).
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "e2e/fuzz/fuzz_heap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
    uint8_t *data;
    size_t size;
};

static struct input *inputs;
static size_t ninputs, cap_inputs;

static void add_input(uint8_t *data, size_t size)
{
    if (ninputs == cap_inputs) {
        cap_inputs = cap_inputs ? cap_inputs * 2 : 64;
        inputs = realloc(inputs, cap_inputs * sizeof(*inputs));
        if (!inputs) {
            perror("realloc");
            exit(2);
        }
    }
    inputs[ninputs].data = data;
    inputs[ninputs].size = size;
    ninputs++;
}

static void load_file(const char *path, size_t max_len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    uint8_t *buf = malloc(max_len ? max_len : 1);
    if (!buf) {
        exit(2);
    }
    size_t n = fread(buf, 1, max_len, f);
    fclose(f);
    add_input(buf, n);
}

static void load_path(const char *path, size_t max_len)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        load_file(path, max_len);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        exit(2);
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
        load_path(full, max_len);
    }
    closedir(d);
}

/* xorshift64*: small, seeded, good enough to pick mutations. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

static const uint8_t interesting[] = {0,    0xff, 0x7f, 0x80, '"', '\\', '{', '}', '[', ']',
                                      ':',  ',',  '\n', '\r', ' ', '-',  '0', '9', 'e', '.',
                                      '\t', '&',  '*',  '!',  '#', '%',  '|', '>', '=', 0xc3};

static size_t mutate(uint8_t *buf, size_t size, size_t max_len)
{
    int rounds = 1 + (int)(rng() % 4);
    for (int r = 0; r < rounds; r++) {
        switch (rng() % 7) {
        case 0: /* flip a bit */
            if (size) {
                buf[rng() % size] ^= (uint8_t)(1u << (rng() % 8));
            }
            break;
        case 1: /* set an interesting byte */
            if (size) {
                buf[rng() % size] = interesting[rng() % sizeof(interesting)];
            }
            break;
        case 2: /* insert a byte */
            if (size < max_len) {
                size_t at = size ? rng() % (size + 1) : 0;
                memmove(buf + at + 1, buf + at, size - at);
                buf[at] = interesting[rng() % sizeof(interesting)];
                size++;
            }
            break;
        case 3: /* delete a range */
            if (size) {
                size_t at = rng() % size;
                size_t len = 1 + rng() % (size - at);
                memmove(buf + at, buf + at + len, size - at - len);
                size -= len;
            }
            break;
        case 4: /* truncate */
            if (size) {
                size = rng() % size;
            }
            break;
        case 5: /* splice in part of another input */
            if (ninputs) {
                const struct input *o = &inputs[rng() % ninputs];
                if (o->size) {
                    size_t from = rng() % o->size;
                    size_t len = 1 + rng() % (o->size - from);
                    size_t at = size ? rng() % size : 0;
                    if (at + len > max_len) {
                        len = max_len - at;
                    }
                    memcpy(buf + at, o->data + from, len);
                    if (at + len > size) {
                        size = at + len;
                    }
                }
            }
            break;
        default: /* duplicate a range */
            if (size && size < max_len) {
                size_t at = rng() % size;
                size_t len = 1 + rng() % (size - at);
                if (size + len > max_len) {
                    len = max_len - size;
                }
                memmove(buf + at + len, buf + at, size - at);
                size += len;
            }
            break;
        }
    }
    return size;
}

static long rss_limit_mb = 2048, timeout_s = 60;
static volatile size_t current_size; /* the input now running, for the reports */

/* Appends the decimal digits of v at p (async-signal-safe); returns the end. */
static char *put_ulong(char *p, unsigned long v)
{
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) {
        *p++ = digits[--n];
    }
    return p;
}

static char *put_str(char *p, const char *s)
{
    while (*s) {
        *p++ = *s++;
    }
    return p;
}

/* SIGALRM: one input ran past -timeout. Only async-signal-safe calls here. */
static void on_alarm(int sig)
{
    (void)sig;
    char line[200];
    char *p = put_str(line, "==fuzz== ERROR: timeout: one input ran longer than -timeout=");
    p = put_ulong(p, (unsigned long)timeout_s);
    p = put_str(p, " s (");
    p = put_ulong(p, (unsigned long)current_size);
    p = put_str(p, " bytes)\n");
    (void)!write(2, line, (size_t)(p - line));
    abort();
}

/* Resident set size in MiB, from /proc/self/statm (0 when unreadable). */
static long rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    char text[128] = "";
    if (!f) {
        return 0;
    }
    if (!fgets(text, sizeof(text), f)) {
        text[0] = '\0';
    }
    fclose(f);
    char *end;
    (void)strtol(text, &end, 10); /* total pages; the resident ones follow */
    long resident = strtol(end, NULL, 10);
    return resident * (sysconf(_SC_PAGESIZE) / 1024) / 1024;
}

/* Runs one input under the limits; run >= 0 is a mutation's number, -1 - i corpus input i. */
static void run_one(const uint8_t *data, size_t size, long run)
{
    current_size = size;
    alarm(timeout_s > 0 ? (unsigned)timeout_s : 0);
    LLVMFuzzerTestOneInput(data, size);
    alarm(0);
    long rss = rss_limit_mb > 0 ? rss_mb() : 0;
    if (rss > rss_limit_mb) {
        fprintf(stderr,
                "==fuzz== ERROR: out-of-memory (used: %ld Mb; exceeds: %ld Mb) after %s %ld "
                "(%zu bytes)\n",
                rss, rss_limit_mb, run < 0 ? "corpus input" : "mutation", run < 0 ? -1 - run : run,
                size);
        abort();
    }
}

int main(int argc, char **argv)
{
    long runs = 10000, malloc_limit_mb = -1;
    size_t max_len = 1 << 16;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "-malloc_limit_mb=", 17) == 0) {
            malloc_limit_mb = strtol(argv[i] + 17, NULL, 10);
        } else if (strncmp(argv[i], "-rss_limit_mb=", 14) == 0) {
            rss_limit_mb = strtol(argv[i] + 14, NULL, 10);
        } else if (strncmp(argv[i], "-timeout=", 9) == 0) {
            timeout_s = strtol(argv[i] + 9, NULL, 10);
        } else if (strncmp(argv[i], "-runs=", 6) == 0) {
            runs = strtol(argv[i] + 6, NULL, 10);
        } else if (strncmp(argv[i], "-seed=", 6) == 0) {
            rng_state = strtoull(argv[i] + 6, NULL, 10) | 1;
        } else if (strncmp(argv[i], "-max_len=", 9) == 0) {
            max_len = strtoul(argv[i] + 9, NULL, 10);
        } else if (argv[i][0] != '-') {
            load_path(argv[i], max_len);
        }
    }
    if (malloc_limit_mb < 0) {
        malloc_limit_mb = rss_limit_mb;
    }
    fuzz_heap_set_limits((size_t)(malloc_limit_mb > 0 ? malloc_limit_mb : 0) << 20,
                         (size_t)(rss_limit_mb > 0 ? rss_limit_mb : 0) << 20);
    signal(SIGALRM, on_alarm);
    if (ninputs == 0) {
        add_input(calloc(1, 1), 0);
    }
    for (size_t i = 0; i < ninputs; i++) {
        run_one(inputs[i].data, inputs[i].size, -1 - (long)i);
    }
    uint8_t *buf = malloc(max_len);
    if (!buf) {
        return 2;
    }
    for (long r = 0; r < runs; r++) {
        const struct input *seed = &inputs[rng() % ninputs];
        size_t size = seed->size < max_len ? seed->size : max_len;
        memcpy(buf, seed->data, size);
        size = mutate(buf, size, max_len);
        /* Hand the target an exactly-sized copy so ASan sees reads past the end. */
        uint8_t *exact = malloc(size ? size : 1);
        if (!exact) {
            free(buf);
            return 2;
        }
        memcpy(exact, buf, size);
        run_one(exact, size, r);
        free(exact);
    }
    printf("fuzz: %zu corpus inputs, %ld mutations, no crash (limits: malloc %ld MB, heap/RSS %ld "
           "MB, %ld s an input%s)\n",
           ninputs, runs, malloc_limit_mb, rss_limit_mb, timeout_s,
           fuzz_heap_enabled() ? "" : "; no sanitizer hooks: heap not counted");
    free(buf);
    for (size_t i = 0; i < ninputs; i++) {
        free(inputs[i].data);
    }
    free(inputs);
    return 0;
}
