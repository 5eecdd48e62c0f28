/*
 * CPU feature detection and the instruction-set level the kernels dispatch on. Detection runs
 * once (cpuid + xgetbv, so an OS that does not save AVX state is treated as lacking AVX). The
 * environment variable TANDEM_CPU_ISA=scalar|avx2|avx512 lowers the level (it never raises it
 * above what the CPU supports); kc_isa_set lets tests run every level.
 */
#ifndef TANDEM_KERNELS_CPU_KC_CPU_H
#define TANDEM_KERNELS_CPU_KC_CPU_H

#include <stdbool.h>

typedef enum kc_isa {
    KC_ISA_SCALAR = 0, /* portable C */
    KC_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    KC_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/VNNI (+BF16 when present) */
} kc_isa;

typedef struct kc_cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
} kc_cpu_features;

/* Features of this CPU (detected once; thread-safe). */
const kc_cpu_features *kc_cpu_features_get(void);

/* Highest level this CPU and OS support. */
kc_isa kc_isa_best(void);

/* Level the kernels use now: kc_isa_best() lowered by TANDEM_CPU_ISA or kc_isa_set. */
kc_isa kc_isa_active(void);

/* Forces the level (for tests and benchmarks); 0, or -ENOTSUP when the CPU lacks it. Not
 * thread-safe against running kernels: call it between kernel calls. */
int kc_isa_set(kc_isa isa);

/* "scalar", "avx2", "avx512". */
const char *kc_isa_name(kc_isa isa);

#endif
