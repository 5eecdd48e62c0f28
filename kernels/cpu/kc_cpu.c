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
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef KC_X86
static unsigned long long kc_xgetbv0(void)
{
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static void kc_detect(void)
{
    memset(&g_feat, 0, sizeof(g_feat));
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
