/* CPU feature detection (cpuid/xgetbv) and the active ISA level; see kc_cpu.h. */
#include "kernels/cpu/kc_cpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KC_X86 1
#endif

static kc_cpu_features g_feat;
static kc_isa g_best = KC_ISA_SCALAR;
static kc_isa g_active = KC_ISA_SCALAR;
static kc_tune g_tune;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef KC_X86
static unsigned long long kc_xgetbv0(void)
{
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

/*
 * Decode prefetch distances per microarchitecture (one thread / several). A row is measured
 * (e2e/bench/cpu_tune.py, see kernels/cpu/README.md) on the host its comment names; the others
 * keep the generic values, the distances every CPU used before the table existed (measured on
 * Zen 3 with AVX2 and on Zen 5). The first matching row wins (zen4's model ranges before zen3's).
 */
typedef struct kc_uarch_row {
    const char *vendor; /* cpuid leaf 0 string */
    unsigned family;    /* display family */
    unsigned model_lo, model_hi;
    kc_tune tune;
} kc_uarch_row;

/* NOLINTBEGIN(bugprone-macro-parentheses): name initialises a char array, a bare literal */
#define KC_TUNE(name, q1, qn, h1, hn, f1, fn)                                                      \
    {                                                                                              \
        .uarch = name, .pf_quant = {q1, qn}, .pf_half = {h1, hn}, .pf_f32 = { f1, fn }             \
    }
/* NOLINTEND(bugprone-macro-parentheses) */
#define KC_TUNE_GENERIC(name) KC_TUNE(name, 16384, 16384, 8192, 8192, 0, 0)

static const kc_uarch_row kc_uarch_rows[] = {
    {"AuthenticAMD", 0x17, 0x00, 0xff, KC_TUNE_GENERIC("zen2")},
    {"AuthenticAMD", 0x19, 0x10, 0x1f, KC_TUNE_GENERIC("zen4")},
    {"AuthenticAMD", 0x19, 0x60, 0x7f, KC_TUNE_GENERIC("zen4")},
    {"AuthenticAMD", 0x19, 0xa0, 0xaf, KC_TUNE_GENERIC("zen4")},
    {"AuthenticAMD", 0x19, 0x00, 0xff, KC_TUNE_GENERIC("zen3")},
    /* EPYC family 26 model 2, 2 vCPUs, AVX-512 (2026-12-05, docs/BENCHMARKS.md): two threads
     * decode the K-quants 7-15 % faster with 8 KiB of prefetch than with 16 (Q4_K_M, Q5_K_M;
     * Q8_0, Q4_0 and Q6_K within the noise); no other change held in alternating engine runs */
    {"AuthenticAMD", 0x1a, 0x00, 0xff, KC_TUNE("zen5", 16384, 8192, 8192, 8192, 0, 0)},
    {"GenuineIntel", 0x06, 0x00, 0xff, KC_TUNE_GENERIC("intel")},
};

/* Parses a decimal distance in [s, e) into *v: 0, or -EINVAL. */
static int kc_tune_number(const char *s, const char *e, int *v)
{
    long n = 0;
    if (s == e) {
        return -EINVAL;
    }
    for (; s < e; s++) {
        if (*s < '0' || *s > '9') {
            return -EINVAL;
        }
        n = n * 10 + (*s - '0');
        if (n > KC_TUNE_PF_MAX) {
            return -EINVAL;
        }
    }
    *v = (int)n;
    return 0;
}

int kc_tune_parse(const char *spec, kc_tune *t)
{
    kc_tune out = *t;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        const char *e = end ? end : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(e - p));
        if (!eq || (end && end[1] == '\0')) { /* no value, or an empty last entry */
            return -EINVAL;
        }
        const size_t klen = (size_t)(eq - p);
        int *dst = NULL;
        if (klen == 8 && memcmp(p, "pf_quant", 8) == 0) {
            dst = out.pf_quant;
        } else if (klen == 7 && memcmp(p, "pf_half", 7) == 0) {
            dst = out.pf_half;
        } else if (klen == 6 && memcmp(p, "pf_f32", 6) == 0) {
            dst = out.pf_f32;
        } else {
            return -EINVAL;
        }
        const char *slash = memchr(eq + 1, '/', (size_t)(e - eq - 1));
        if (kc_tune_number(eq + 1, slash ? slash : e, &dst[KC_TUNE_ONE]) != 0) {
            return -EINVAL;
        }
        dst[KC_TUNE_MANY] = dst[KC_TUNE_ONE];
        if (slash && kc_tune_number(slash + 1, e, &dst[KC_TUNE_MANY]) != 0) {
            return -EINVAL;
        }
        out.from_env = true;
        p = end ? end + 1 : e;
    }
    *t = out;
    return 0;
}

/* The tuning row of this CPU (cpuid vendor, display family and model); generic off x86. */
static kc_tune kc_detect_tune(void)
{
    kc_tune t = KC_TUNE_GENERIC("generic");
#ifdef KC_X86
    unsigned int a, b, c, d;
    char vendor[13] = {0};
    if (!__get_cpuid(0, &a, &b, &c, &d)) {
        return t;
    }
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    if (!__get_cpuid(1, &a, &b, &c, &d)) {
        return t;
    }
    const unsigned base_family = (a >> 8) & 0xfu;
    const unsigned family = base_family == 0xf ? base_family + ((a >> 20) & 0xffu) : base_family;
    const unsigned model = base_family == 0x6 || base_family == 0xf
                               ? ((a >> 4) & 0xfu) | (((a >> 16) & 0xfu) << 4)
                               : (a >> 4) & 0xfu;
    for (size_t i = 0; i < sizeof(kc_uarch_rows) / sizeof(kc_uarch_rows[0]); i++) {
        const kc_uarch_row *r = &kc_uarch_rows[i];
        if (strcmp(vendor, r->vendor) == 0 && family == r->family && model >= r->model_lo &&
            model <= r->model_hi) {
            return r->tune;
        }
    }
#endif
    return t;
}

static void kc_detect(void)
{
    memset(&g_feat, 0, sizeof(g_feat));
    g_tune = kc_detect_tune();
    const char *spec = getenv("TANDEM_CPU_TUNE");
    if (spec && *spec) {
        g_tune.env_bad = kc_tune_parse(spec, &g_tune) != 0; /* the table's values stand */
    }
#ifdef KC_X86
    unsigned int a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = (c >> 27) & 1u;
        bool avx = (c >> 28) & 1u;
        unsigned long long xcr0 = osxsave ? kc_xgetbv0() : 0;
        bool ymm_ok = avx && (xcr0 & 0x6) == 0x6;
        bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
        g_feat.fma = ymm_ok && ((c >> 12) & 1u);
        g_feat.f16c = ymm_ok && ((c >> 29) & 1u);
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            g_feat.avx2 = ymm_ok && ((b >> 5) & 1u);
            g_feat.avx512f = zmm_ok && ((b >> 16) & 1u);
            g_feat.avx512bw = zmm_ok && ((b >> 30) & 1u);
            g_feat.avx512vl = zmm_ok && ((b >> 31) & 1u);
            g_feat.avx512vnni = zmm_ok && ((c >> 11) & 1u);
            unsigned int a1, b1, c1, d1;
            if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
                g_feat.avx512bf16 = zmm_ok && ((a1 >> 5) & 1u);
            }
        }
    }
#endif
    if (g_feat.avx2 && g_feat.fma && g_feat.f16c) {
        g_best = KC_ISA_AVX2;
        if (g_feat.avx512f && g_feat.avx512bw && g_feat.avx512vl && g_feat.avx512vnni) {
            g_best = KC_ISA_AVX512;
        }
    }
    g_active = g_best;
    const char *env = getenv("TANDEM_CPU_ISA");
    if (env) {
        kc_isa want = g_best;
        if (strcmp(env, "scalar") == 0) {
            want = KC_ISA_SCALAR;
        } else if (strcmp(env, "avx2") == 0) {
            want = KC_ISA_AVX2;
        } else if (strcmp(env, "avx512") == 0) {
            want = KC_ISA_AVX512;
        }
        if (want < g_active) {
            g_active = want;
        }
    }
}

const kc_cpu_features *kc_cpu_features_get(void)
{
    pthread_once(&g_once, kc_detect);
    return &g_feat;
}

kc_isa kc_isa_best(void)
{
    pthread_once(&g_once, kc_detect);
    return g_best;
}

kc_isa kc_isa_active(void)
{
    pthread_once(&g_once, kc_detect);
    return g_active;
}

int kc_isa_set(kc_isa isa)
{
    pthread_once(&g_once, kc_detect);
    if (isa > g_best || isa < KC_ISA_SCALAR) {
        return -ENOTSUP;
    }
    g_active = isa;
    return 0;
}

const char *kc_isa_name(kc_isa isa)
{
    switch (isa) {
    case KC_ISA_SCALAR:
        return "scalar";
    case KC_ISA_AVX2:
        return "avx2";
    case KC_ISA_AVX512:
        return "avx512";
    }
    return "unknown";
}

const kc_tune *kc_tune_get(void)
{
    pthread_once(&g_once, kc_detect);
    return &g_tune;
}

int kc_tune_set(const kc_tune *t)
{
    pthread_once(&g_once, kc_detect);
    for (int i = 0; i < 2; i++) {
        const int v[3] = {t->pf_quant[i], t->pf_half[i], t->pf_f32[i]};
        for (int j = 0; j < 3; j++) {
            if (v[j] < 0 || v[j] > KC_TUNE_PF_MAX) {
                return -EINVAL;
            }
        }
    }
    g_tune = *t;
    return 0;
}
