/*
 * Bit-exact ports of ggml's FP32 -> FP16/BF16 rounding and Q8_0/Q4_0 reference quantizers (see
 * genquant.h). The FP16 rounding is done with integer arithmetic (ggml uses a float trick that
 * gives the same results); the quantizers are compiled with -ffp-contract=off (see
 * CMakeLists.txt) so that x * id + 8.5f is never fused into an FMA, matching ggml's reference.
 */
#include "engine/tools/genquant.h"

#include <math.h>
#include <string.h>

uint16_t genq_fp32_to_fp16(float f)
{
    uint32_t w;
    memcpy(&w, &f, sizeof(w));
    uint16_t sign = (uint16_t)((w >> 16) & 0x8000u);
    uint32_t a = w & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return (uint16_t)(sign | 0x7e00u);
    }
    if (a >= 0x477ff000u) { /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half or zero */
        if (a < 0x33000000u) {
            return sign; /* below 2^-25 (2^-25 itself ties to even = 0) */
        }
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* units of 2^-24 */
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) {
            h++;
        }
        return (uint16_t)(sign | h);
    }
    uint32_t h = (a - 0x38000000u) >> 13;
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
        h++;
    }
    return (uint16_t)(sign | h);
}

float genq_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    uint32_t w;
    if (e == 0x1fu) {
        w = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        float v = ldexpf((float)m, -24);
        return (h & 0x8000u) ? -v : v;
    } else {
        w = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &w, sizeof(f));
    return f;
}

uint16_t genq_fp32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 64u);
    }
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

void genq_quantize_q8_0(const float *x, td_block_q8_0 *y, int64_t n)
{
    int64_t nb = n / TD_QK;
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * TD_QK;
        float amax = 0.0f;
        for (int j = 0; j < TD_QK; j++) {
            amax = fmaxf(amax, fabsf(xb[j]));
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = genq_fp32_to_fp16(d);
        for (int j = 0; j < TD_QK; j++) {
            y[i].qs[j] = (int8_t)roundf(xb[j] * id);
        }
    }
}

void genq_quantize_q4_0(const float *x, td_block_q4_0 *y, int64_t n)
{
    int64_t nb = n / TD_QK;
    for (int64_t i = 0; i < nb; i++) {
        const float *xb = x + i * TD_QK;
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < TD_QK; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = genq_fp32_to_fp16(d);
        for (int j = 0; j < TD_QK / 2; j++) {
            int8_t q0 = (int8_t)(xb[j] * id + 8.5f);
            int8_t q1 = (int8_t)(xb[TD_QK / 2 + j] * id + 8.5f);
            uint8_t x0 = (uint8_t)(q0 < 15 ? q0 : 15);
            uint8_t x1 = (uint8_t)(q1 < 15 ? q1 : 15);
            y[i].qs[j] = (uint8_t)(x0 | (uint8_t)(x1 << 4));
        }
    }
}

size_t genq_convert(tdtype t, const float *x, int64_t rows, int64_t cols, void *out)
{
    size_t row_bytes = td_row_bytes(t, cols);
    if (row_bytes == 0 || rows < 0) {
        return 0;
    }
    int64_t n = rows * cols;
    switch (t) {
    case TD_F32:
        memcpy(out, x, (size_t)n * sizeof(float));
        break;
    case TD_F16: {
        uint16_t *o = out;
        for (int64_t i = 0; i < n; i++) {
            o[i] = genq_fp32_to_fp16(x[i]);
        }
        break;
    }
    case TD_BF16: {
        uint16_t *o = out;
        for (int64_t i = 0; i < n; i++) {
            o[i] = genq_fp32_to_bf16(x[i]);
        }
        break;
    }
    case TD_Q8_0:
        genq_quantize_q8_0(x, out, n);
        break;
    case TD_Q4_0:
        genq_quantize_q4_0(x, out, n);
        break;
    }
    return row_bytes * (size_t)rows;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void genq_rng_seed(genq_rng *r, uint64_t seed)
{
    uint64_t st = seed;
    for (int i = 0; i < 4; i++) {
        r->s[i] = splitmix64(&st);
    }
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t genq_rng_next(genq_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float genq_rng_uniform(genq_rng *r)
{
    uint32_t v = (uint32_t)(genq_rng_next(r) >> 40); /* 24 bits */
    return (float)v * (2.0f / 16777216.0f) - 1.0f;
}

void genq_permute_qk(const float *in, float *out, int64_t n_head, int64_t head_dim, int64_t cols,
                     int inverse)
{
    int64_t half = head_dim / 2;
    for (int64_t h = 0; h < n_head; h++) {
        for (int64_t i = 0; i < half; i++) {
            for (int64_t j = 0; j < 2; j++) {
                int64_t gguf_row = h * head_dim + 2 * i + j;
                int64_t hf_row = h * head_dim + j * half + i;
                int64_t src = inverse ? gguf_row : hf_row;
                int64_t dst = inverse ? hf_row : gguf_row;
                memcpy(out + dst * cols, in + src * cols, (size_t)cols * sizeof(float));
            }
        }
    }
}
