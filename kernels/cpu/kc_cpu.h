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

/*
 * Per-microarchitecture tuning of the decode kernels (matmuls of at most KC__DECODE_MAX_N tokens):
 * how far ahead of the weight stream they software-prefetch, in bytes (0: no software prefetch,
 * the hardware prefetchers alone), for a pool of one thread and of several (the best distance
 * differs: on Zen 5 one thread streams float weights fastest unaided, two do not). The values
 * come from a table keyed by CPU vendor, family and model (kc_cpu.c; `kc_bench --tune` measures
 * a machine's best); TANDEM_CPU_TUNE overrides any of them, a value "N" for both thread counts or
 * "N/M" (one thread / several), e.g. TANDEM_CPU_TUNE=pf_quant=8192,pf_half=0/8192,pf_f32=0/8192.
 * Prefetch distances change timing only, never results.
 */
enum { KC_TUNE_ONE = 0, KC_TUNE_MANY = 1 }; /* index of the fields below: pool of 1, of > 1 */

typedef struct kc_tune {
    char uarch[16];  /* "zen5", "zen4", ..., "intel", "generic" */
    int pf_quant[2]; /* Q8_0/Q4_0 and every packed quantized layout */
    int pf_half[2];  /* F16/BF16 */
    int pf_f32[2];   /* F32 */
    bool from_env;   /* TANDEM_CPU_TUNE set at least one value */
    bool env_bad;    /* TANDEM_CPU_TUNE did not parse (the table's values stand) */
} kc_tune;

#define KC_TUNE_PF_MAX (1 << 20) /* distances above this are refused */

/* The tuning in force (detected once; thread-safe). */
const kc_tune *kc_tune_get(void);

/* Replaces the tuning (benchmarks sweep it); -EINVAL for a distance outside [0, KC_TUNE_PF_MAX].
 * Not thread-safe against running kernels: call it between kernel calls. */
int kc_tune_set(const kc_tune *t);

/* Parses "key=N[/M][,key=...]" (keys pf_quant, pf_half, pf_f32) over *t: 0, or -EINVAL with *t
 * unchanged for an unknown key or a value outside [0, KC_TUNE_PF_MAX]. */
int kc_tune_parse(const char *spec, kc_tune *t);

#endif
