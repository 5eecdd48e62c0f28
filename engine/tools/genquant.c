/*
 * Bit-exact ports of ggml's FP32 -> FP16/BF16 rounding and Q8_0/Q4_0 reference quantizers, and our
 * own quantizers for the other ggml block types (see genquant.h). The FP16 rounding is done with
 * integer arithmetic (ggml uses a float trick that gives the same results); the quantizers are
 * compiled with -ffp-contract=off (see CMakeLists.txt) so that x * id + 8.5f is never fused into an
 * FMA, matching ggml's reference.
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

/* ---- the other ggml block types ------------------------------------------------------------
 *
 * These write valid ggml blocks that kc_dequantize_row / ggml decode, but the rounding search is
 * our own (not a port of ggml's quantize_row_*_ref), so the bytes may differ from
 * llama-quantize's. Every scale is rounded to its stored precision (f16, 4/6/8-bit integer)
 * before the values are quantized against it, and the squared error below is computed with the
 * decoder's own formulas.
 */

/* The integer nearest v (ties up), clamped to [lo, hi] (NaN -> lo). Inline arithmetic rather
 * than lrintf: this is the inner loop of every search below. */
static inline int round_clamp(float v, int lo, int hi)
{
    if (!(v > (float)lo)) {
        return lo;
    }
    if (v >= (float)hi) {
        return hi;
    }
    return (int)(v - (float)lo + 0.5f) + lo; /* v - lo > 0: truncation is floor */
}

static inline float min_f(float a, float b)
{
    return b < a ? b : a;
}

static inline float max_f(float a, float b)
{
    return b > a ? b : a;
}

/* The quantization levels of a symmetric (scale-only) type: the integers lo..hi, or with book
 * the sorted 16-entry codebook book[0 .. hi - lo] and mid[k] the midpoint of book[k] and
 * book[k + 1]. Codes are indices 0 .. hi - lo. */
typedef struct genq_levels {
    int lo, hi;
    const int8_t *book;
    const float *mid;
} genq_levels;

/* midpoints of td_iq4nl_values (checked against it by the decoder round trip in the tests) */
static const float iq4_mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                  7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

static const genq_levels q3k_levels = {-4, 3, NULL, NULL};
static const genq_levels q6k_levels = {-32, 31, NULL, NULL};
static const genq_levels iq4_levels = {0, 15, td_iq4nl_values, iq4_mid};

static inline float level_value(const genq_levels *lv, int code)
{
    return lv->book != NULL ? (float)lv->book[code] : (float)(lv->lo + code);
}

/* The code whose level is nearest v (NaN -> 0; a tie -> the lower). For the 16-entry codebook:
 * the number of midpoints below v, by a branch-free binary search. */
static inline int level_code(const genq_levels *lv, float v)
{
    if (lv->book == NULL) {
        return round_clamp(v, lv->lo, lv->hi) - lv->lo;
    }
    const float *mid = lv->mid;
    int c = v > mid[7] ? 8 : 0;
    c += v > mid[c + 3] ? 4 : 0;
    c += v > mid[c + 1] ? 2 : 0;
    c += v > mid[c] ? 1 : 0;
    return c;
}

/* Codes of x[0..n) at scale d (x ~ d * level); returns the squared error. d = 0 gives the code
 * nearest 0 (the value decodes to 0 whatever the code). */
static float requant_sym(const float *x, int n, const genq_levels *lv, float d, uint8_t *L)
{
    float err = 0.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) {
        const int c = level_code(lv, x[i] * id);
        const float y = d * level_value(lv, c);
        L[i] = (uint8_t)c;
        err += (y - x[i]) * (y - x[i]);
    }
    return err;
}

/* Rounds x[0..n) * id to the nearest levels q and returns the least-squares scale of x on them,
 * sum(x q) / sum(q^2); *score is sum(x q)^2 / sum(q^2), the reduction of the squared error that
 * scale achieves (larger is better). The two loops keep the level test out of the inner one. */
static float ls_at(const float *x, int n, const genq_levels *lv, float id, float *score)
{
    float sxq = 0.0f, sqq = 0.0f;
    if (lv->book == NULL) {
        for (int i = 0; i < n; i++) {
            const float q = (float)round_clamp(x[i] * id, lv->lo, lv->hi);
            sxq += x[i] * q;
            sqq += q * q;
        }
    } else {
        for (int i = 0; i < n; i++) {
            const float q = (float)lv->book[level_code(lv, x[i] * id)];
            sxq += x[i] * q;
            sqq += q * q;
        }
    }
    if (sqq <= 0.0f) {
        *score = 0.0f;
        return 0.0f;
    }
    *score = sxq * sxq / sqq;
    return sxq / sqq;
}

/*
 * The float scale s that best fits x[0..n) as s * level: the element of largest magnitude is
 * mapped near either end of the levels (2 * (2 ntry + 1) candidate inverse scales, 2.5% apart),
 * the values rounded to levels, s is the least-squares scale on those levels, and the best
 * candidate is refined by re-rounding at its s until that stops helping. Returns 0 for an
 * all-zero x.
 */
static float fit_sym(const float *x, int n, const genq_levels *lv, int ntry)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax == 0.0f) {
        return 0.0f;
    }
    const float ends[2] = {level_value(lv, 0), level_value(lv, lv->hi - lv->lo)};
    float best = 0.0f, best_score = -1.0f;
    for (int e = 0; e < 2; e++) {
        const float step = fabsf(ends[e]) / 40.0f;
        for (int k = -ntry; k <= ntry; k++) {
            /* ends[0] < 0 < ends[1]: k > 0 moves the largest value inwards */
            const float t = ends[e] - (e == 0 ? -1.0f : 1.0f) * step * (float)k;
            float score;
            const float s = ls_at(x, n, lv, t / max, &score);
            if (score > best_score) {
                best_score = score;
                best = s;
            }
        }
    }
    for (int it = 0; it < 4 && best != 0.0f; it++) {
        float score;
        const float s = ls_at(x, n, lv, 1.0f / best, &score);
        if (!(score > best_score)) {
            break;
        }
        best_score = score;
        best = s;
    }
    return best;
}

/* Codes of x[0..n) for x ~ d * q - m, q in 0..nmax; returns the squared error (computed as the
 * decoder does). d = 0 gives q = 0. */
static float requant_min(const float *x, int n, int nmax, float d, float m, uint8_t *q)
{
    float err = 0.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) {
        const int v = d > 0.0f ? round_clamp((x[i] + m) * id, 0, nmax) : 0;
        const float y = d * (float)v - m;
        q[i] = (uint8_t)v;
        err += (y - x[i]) * (y - x[i]);
    }
    return err;
}

/* Least-squares (s, b) of x ~ s * q + b over codes q, with b <= 0 (ggml's K-quant minimum is a
 * non-negative number subtracted); returns the squared error. */
static float ls_affine(const float *x, int n, const uint8_t *q, float *s, float *b)
{
    float sq = 0.0f, sqq = 0.0f, sx = 0.0f, sxq = 0.0f;
    for (int i = 0; i < n; i++) {
        sq += (float)q[i];
        sqq += (float)q[i] * (float)q[i];
        sx += x[i];
        sxq += x[i] * (float)q[i];
    }
    const float det = (float)n * sqq - sq * sq;
    if (det > 0.0f) {
        *s = ((float)n * sxq - sq * sx) / det;
        *b = (sqq * sx - sq * sxq) / det;
    } else { /* all codes equal: only the offset can fit */
        *s = 0.0f;
        *b = sx / (float)n;
    }
    if (*b > 0.0f || *s < 0.0f) {
        *b = min_f(*b, 0.0f);
        *s = sqq > 0.0f ? (sxq - *b * sq) / sqq : 0.0f;
        if (*s < 0.0f) {
            *s = 0.0f;
        }
    }
    float err = 0.0f;
    for (int i = 0; i < n; i++) {
        const float y = *s * (float)q[i] + *b;
        err += (y - x[i]) * (y - x[i]);
    }
    return err;
}

/*
 * The float scale s >= 0 and minimum m >= 0 that best fit x[0..n) (n <= 32) as s * q - m with q in
 * 0..nmax: inverse scales from (nmax - 1) / range to (nmax + 1) / range in 11 steps (range from
 * min(x, 0) to max(x)), the codes rounded, (s, -m) the least-squares fit of each, the best
 * refined by re-rounding until that stops helping.
 */
static float fit_min(const float *x, int n, int nmax, float *m_out)
{
    float mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) {
        mn = min_f(mn, x[i]);
        mx = max_f(mx, x[i]);
    }
    if (mn > 0.0f) {
        mn = 0.0f;
    }
    if (mx == mn) { /* all equal and <= 0: the minimum alone */
        *m_out = -mn;
        return 0.0f;
    }
    uint8_t q[32];
    float best_s = 0.0f, best_b = mn, best_err = INFINITY;
    for (int k = -5; k <= 5; k++) {
        const float iscale = ((float)nmax + 0.2f * (float)k) / (mx - mn);
        for (int i = 0; i < n; i++) {
            q[i] = (uint8_t)round_clamp(iscale * (x[i] - mn), 0, nmax);
        }
        float s, b;
        const float err = ls_affine(x, n, q, &s, &b);
        if (err < best_err) {
            best_err = err;
            best_s = s;
            best_b = b;
        }
    }
    for (int it = 0; it < 4 && best_s > 0.0f; it++) {
        const float id = 1.0f / best_s;
        for (int i = 0; i < n; i++) {
            q[i] = (uint8_t)round_clamp((x[i] - best_b) * id, 0, nmax);
        }
        float s, b;
        const float err = ls_affine(x, n, q, &s, &b);
        if (!(err < best_err)) {
            break;
        }
        best_err = err;
        best_s = s;
        best_b = b;
    }
    *m_out = -best_b;
    return best_s;
}

/*
 * One 256-element super-block of a type with minimums (Q2_K: sub 16, nmax 3, smax 15; Q4_K: 32,
 * 15, 63; Q5_K: 32, 31, 63): each sub-block's float (scale, min) is fitted, the super-block's f16
 * d and dmin put the largest of each at smax, and each sub-block's integer scale and min are
 * chosen among the three nearest values of each by the error of the values re-quantized with
 * them. Writes the f16 d / dmin, the integer scales / mins and the 256 codes.
 */
static void quant_min_super(const float *x, int sub, int nmax, int smax, uint16_t *dh,
                            uint16_t *dmh, uint8_t *ls, uint8_t *lm, uint8_t *q)
{
    const int nsub = TD_QKK / sub;
    float s[16], m[16], max_s = 0.0f, max_m = 0.0f;
    for (int j = 0; j < nsub; j++) {
        s[j] = fit_min(x + j * sub, sub, nmax, &m[j]);
        max_s = max_f(max_s, s[j]);
        max_m = max_f(max_m, m[j]);
    }
    *dh = genq_fp32_to_fp16(max_s / (float)smax);
    *dmh = genq_fp32_to_fp16(max_m / (float)smax);
    const float d = genq_fp16_to_fp32(*dh), dmin = genq_fp16_to_fp32(*dmh);
    for (int j = 0; j < nsub; j++) {
        const int rs = d > 0.0f ? round_clamp(s[j] / d, 0, smax) : 0;
        const int rm = dmin > 0.0f ? round_clamp(m[j] / dmin, 0, smax) : 0;
        uint8_t tmp[32];
        float best = INFINITY;
        static const int off[3] = {0, -1, 1}; /* ties keep the nearest */
        for (int ia = 0; ia < 3; ia++) {
            for (int ib = 0; ib < 3; ib++) {
                const int a = rs + off[ia], b = rm + off[ib];
                if (a < 0 || a > smax || b < 0 || b > smax) {
                    continue;
                }
                const float err =
                    requant_min(x + j * sub, sub, nmax, d * (float)a, dmin * (float)b, tmp);
                if (err < best) {
                    best = err;
                    ls[j] = (uint8_t)a;
                    lm[j] = (uint8_t)b;
                    memcpy(q + j * sub, tmp, (size_t)sub);
                }
            }
        }
    }
}

/*
 * One 256-element super-block of a scale-only type (Q3_K: sub 16, 6-bit scales -32..31; Q6_K:
 * 16, int8 -128..127; IQ4_XS: 32, 6-bit -32..31): each sub-block's float scale is fitted; the
 * super-block's f16 d maps the scale of largest magnitude onto smin (as ggml does) or onto smax,
 * whichever gives the smaller error, with each sub-block's integer scale chosen among the three
 * nearest by the error of its values re-quantized with it. Writes d, the integer scales and the
 * 256 codes.
 */
static void quant_sym_super(const float *x, int sub, const genq_levels *lv, int ntry, int smin,
                            int smax, uint16_t *dh, int *ls, uint8_t *L)
{
    const int nsub = TD_QKK / sub;
    float s[16], max_s = 0.0f;
    for (int j = 0; j < nsub; j++) {
        s[j] = fit_sym(x + j * sub, sub, lv, ntry);
        if (fabsf(s[j]) > fabsf(max_s)) {
            max_s = s[j];
        }
    }
    *dh = 0;
    for (int j = 0; j < nsub; j++) {
        ls[j] = 0;
    }
    requant_sym(x, TD_QKK, lv, 0.0f, L);
    if (max_s == 0.0f) {
        return;
    }
    float best_total = INFINITY;
    const int ends[2] = {smin, smax};
    for (int e = 0; e < 2; e++) {
        const uint16_t ch = genq_fp32_to_fp16(max_s / (float)ends[e]);
        const float d = genq_fp16_to_fp32(ch);
        if (d == 0.0f || !isfinite(d)) {
            continue;
        }
        int cls[16];
        uint8_t cL[TD_QKK];
        float total = 0.0f;
        for (int j = 0; j < nsub; j++) {
            const int r = round_clamp(s[j] / d, smin, smax);
            uint8_t tmp[32];
            float best = INFINITY;
            static const int off[3] = {0, -1, 1}; /* ties keep the nearest */
            for (int ia = 0; ia < 3; ia++) {
                const int a = r + off[ia];
                if (a < smin || a > smax) {
                    continue;
                }
                const float err = requant_sym(x + j * sub, sub, lv, d * (float)a, tmp);
                if (err < best) {
                    best = err;
                    cls[j] = a;
                    memcpy(cL + j * sub, tmp, (size_t)sub);
                }
            }
            total += best;
        }
        if (total < best_total) {
            best_total = total;
            *dh = ch;
            memcpy(ls, cls, (size_t)nsub * sizeof(int));
            memcpy(L, cL, TD_QKK);
        }
    }
}

/* Q4_1 / Q5_1 block: d = (max - min) / nmax, m = min, both rounded to f16 first. */
static void quant_legacy_min(const float *x, int nmax, uint16_t *dh, uint16_t *mh, uint8_t q[TD_QK])
{
    float mn = x[0], mx = x[0];
    for (int j = 1; j < TD_QK; j++) {
        mn = min_f(mn, x[j]);
        mx = max_f(mx, x[j]);
    }
    *dh = genq_fp32_to_fp16((mx - mn) / (float)nmax);
    *mh = genq_fp32_to_fp16(mn);
    const float d = genq_fp16_to_fp32(*dh), m = genq_fp16_to_fp32(*mh);
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < TD_QK; j++) {
        q[j] = (uint8_t)round_clamp((x[j] - m) * id, 0, nmax);
    }
}

/* The 32 five-bit codes q of a Q5 block into its nibbles and little-endian fifth bits. */
static void pack_q5(const uint8_t q[TD_QK], uint8_t qs[TD_QK / 2], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < TD_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
        h |= (uint32_t)(q[j] >> 4) << j;
        h |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) {
        qh[k] = (uint8_t)(h >> (8 * k));
    }
}

void genq_quantize_q4_1(const float *x, td_block_q4_1 *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QK; i++) {
        uint8_t q[TD_QK];
        quant_legacy_min(x + i * TD_QK, 15, &y[i].d, &y[i].m, q);
        for (int j = 0; j < TD_QK / 2; j++) {
            y[i].qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        }
    }
}

void genq_quantize_q5_1(const float *x, td_block_q5_1 *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QK; i++) {
        uint8_t q[TD_QK];
        quant_legacy_min(x + i * TD_QK, 31, &y[i].d, &y[i].m, q);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void genq_quantize_q5_0(const float *x, td_block_q5_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QK; i++) {
        const float *xb = x + i * TD_QK;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < TD_QK; j++) {
            if (fabsf(xb[j]) > amax) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        /* the largest magnitude maps to -16, the one level without a positive twin */
        y[i].d = genq_fp32_to_fp16(max / -16.0f);
        const float d = genq_fp16_to_fp32(y[i].d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[TD_QK];
        for (int j = 0; j < TD_QK; j++) {
            q[j] = (uint8_t)(round_clamp(xb[j] * id, -16, 15) + 16);
        }
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void genq_quantize_iq4_nl(const float *x, td_block_iq4_nl *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QK; i++) {
        const float *xb = x + i * TD_QK;
        y[i].d = genq_fp32_to_fp16(fit_sym(xb, TD_QK, &iq4_levels, 4));
        uint8_t q[TD_QK];
        requant_sym(xb, TD_QK, &iq4_levels, genq_fp16_to_fp32(y[i].d), q);
        for (int j = 0; j < TD_QK / 2; j++) {
            y[i].qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        }
    }
}

void genq_quantize_q2_k(const float *x, td_block_q2_k *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QKK; i++) {
        uint8_t ls[16], lm[16], q[TD_QKK];
        quant_min_super(x + i * TD_QKK, 16, 3, 15, &y[i].d, &y[i].dmin, ls, lm, q);
        for (int j = 0; j < 16; j++) {
            y[i].scales[j] = (uint8_t)(ls[j] | (lm[j] << 4));
        }
        memset(y[i].qs, 0, sizeof(y[i].qs));
        for (int e = 0; e < TD_QKK; e++) { /* element 128h + 32s + l */
            const int h = e / 128, s = (e / 32) % 4, l = e % 32;
            y[i].qs[32 * h + l] |= (uint8_t)(q[e] << (2 * s));
        }
    }
}

void genq_quantize_q3_k(const float *x, td_block_q3_k *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QKK; i++) {
        int ls[16];
        uint8_t q[TD_QKK]; /* codes 0..7 = quant + 4 */
        quant_sym_super(x + i * TD_QKK, 16, &q3k_levels, 4, -32, 31, &y[i].d, ls, q);
        memset(y[i].scales, 0, sizeof(y[i].scales));
        for (int j = 0; j < 16; j++) {
            const int u = ls[j] + 32;
            y[i].scales[j % 8] |= (uint8_t)((u & 15) << (j < 8 ? 0 : 4));
            y[i].scales[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
        }
        memset(y[i].qs, 0, sizeof(y[i].qs));
        memset(y[i].hmask, 0, sizeof(y[i].hmask));
        for (int e = 0; e < TD_QKK; e++) {
            const int h = e / 128, s = (e / 32) % 4, l = e % 32;
            y[i].qs[32 * h + l] |= (uint8_t)((q[e] & 3) << (2 * s));
            y[i].hmask[l] |= (uint8_t)((q[e] >> 2) << (4 * h + s));
        }
    }
}

/* Q4_K / Q5_K scale and min packing (the inverse of ggml's get_scale_min_k4). */
static void pack_k4_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t q[12])
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

void genq_quantize_q4_k(const float *x, td_block_q4_k *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QKK; i++) {
        uint8_t ls[8], lm[8], q[TD_QKK];
        quant_min_super(x + i * TD_QKK, 32, 15, 63, &y[i].d, &y[i].dmin, ls, lm, q);
        pack_k4_scales(ls, lm, y[i].scales);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                y[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
            }
        }
    }
}

void genq_quantize_q5_k(const float *x, td_block_q5_k *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QKK; i++) {
        uint8_t ls[8], lm[8], q[TD_QKK];
        quant_min_super(x + i * TD_QKK, 32, 31, 63, &y[i].d, &y[i].dmin, ls, lm, q);
        pack_k4_scales(ls, lm, y[i].scales);
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                y[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

void genq_quantize_q6_k(const float *x, td_block_q6_k *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QKK; i++) {
        int ls[16];
        uint8_t q[TD_QKK]; /* codes 0..63 = quant + 32 */
        quant_sym_super(x + i * TD_QKK, 16, &q6k_levels, 4, -128, 127, &y[i].d, ls, q);
        for (int j = 0; j < 16; j++) {
            y[i].scales[j] = (int8_t)ls[j];
        }
        for (int h = 0; h < 2; h++) {
            const uint8_t *u = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                y[i].ql[64 * h + l] = (uint8_t)((u[l] & 15) | ((u[l + 64] & 15) << 4));
                y[i].ql[64 * h + l + 32] = (uint8_t)((u[l + 32] & 15) | ((u[l + 96] & 15) << 4));
                y[i].qh[32 * h + l] = (uint8_t)((u[l] >> 4) | ((u[l + 32] >> 4) << 2) |
                                                ((u[l + 64] >> 4) << 4) | ((u[l + 96] >> 4) << 6));
            }
        }
    }
}

void genq_quantize_iq4_xs(const float *x, td_block_iq4_xs *y, int64_t n)
{
    for (int64_t i = 0; i < n / TD_QKK; i++) {
        int ls[8];
        uint8_t q[TD_QKK];
        quant_sym_super(x + i * TD_QKK, 32, &iq4_levels, 4, -32, 31, &y[i].d, ls, q);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof(y[i].scales_l));
        for (int ib = 0; ib < 8; ib++) {
            const int u = ls[ib] + 32;
            y[i].scales_l[ib / 2] |= (uint8_t)((u & 15) << (4 * (ib % 2)));
            y[i].scales_h |= (uint16_t)((u >> 4) << (2 * ib));
            for (int j = 0; j < 16; j++) {
                y[i].qs[16 * ib + j] = (uint8_t)(q[32 * ib + j] | (q[32 * ib + j + 16] << 4));
            }
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
    case TD_Q4_1:
        genq_quantize_q4_1(x, out, n);
        break;
    case TD_Q5_0:
        genq_quantize_q5_0(x, out, n);
        break;
    case TD_Q5_1:
        genq_quantize_q5_1(x, out, n);
        break;
    case TD_IQ4_NL:
        genq_quantize_iq4_nl(x, out, n);
        break;
    case TD_Q2_K:
        genq_quantize_q2_k(x, out, n);
        break;
    case TD_Q3_K:
        genq_quantize_q3_k(x, out, n);
        break;
    case TD_Q4_K:
        genq_quantize_q4_k(x, out, n);
        break;
    case TD_Q5_K:
        genq_quantize_q5_k(x, out, n);
        break;
    case TD_Q6_K:
        genq_quantize_q6_k(x, out, n);
        break;
    case TD_IQ4_XS:
        genq_quantize_iq4_xs(x, out, n);
        break;
    case TD_Q8_1:
    case TD_Q8_K:
        return 0; /* activation types: never weights */
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
