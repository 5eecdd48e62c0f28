/* kcu_weight_upload + kcu_matmul on the GPU against kc_matmul and a double-precision reference,
 * for every weight type (F32, F16, BF16, Q8_0, Q4_0 sources), n in {1, 2, 7, 8, 9, 64, 300} and
 * odd shapes. Exits 77 without a device.
 *
 * Tolerances (mag = sum_j |w_j x_j| of the output, u = 2^-24, w the device's weights):
 *   F16 weights (F32 and F16 sources): x is rounded to F16 for cuBLAS: |y - ref| <= mag (2^-11 +
 *     (cols + 64) u); an F32 source is compared with ref over its F16-rounded weights, and with
 *     kc_matmul (F32 weights) within a further 2^-11 mag.
 *   BF16: x rounded to BF16: mag (2^-8 + (cols + 64) u).
 *   Q8_0/Q4_0, n <= 8 (the GEMV kernel): bit-identical to kcu_q_row_dot_emul (kcu_quant.h),
 *     which the host tests bound against the double reference.
 *   Q8_0/Q4_0, n > 8 (dequantise to F16 + cuBLAS): W and x rounded to F16: mag (2 2^-11 +
 *     (cols + 64) u).
 *   kc_matmul quantises the activations of Q8_0/Q4_0 matmuls to Q8_0; against it the bound above
 *     grows by sum_j |w_j| dx_b (1/2 + 127 2^-11) (half a step of each block's activation scale).
 */
#include "kernels/cuda/kcu.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_matmul.h"
#include "kernels/cuda/kcu_quant.h"

#define U32 0x1.0p-24

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static int g_fail;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Random host weights of type t: rows x cols. */
static void *make_weights(tdtype t, int64_t rows, int64_t cols)
{
    const size_t rb = td_row_bytes(t, cols);
    uint8_t *data = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!data || !row) {
        abort();
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) {
            row[i] = frand() * 0.5f;
        }
        uint8_t *dst = data + (size_t)r * rb;
        switch (t) {
        case TD_F32:
            memcpy(dst, row, rb);
            break;
        case TD_F16:
        case TD_BF16:
            for (int64_t i = 0; i < cols; i++) {
                ((uint16_t *)dst)[i] = t == TD_F16 ? kc_f32_to_f16(row[i]) : kc_f32_to_bf16(row[i]);
            }
            break;
        case TD_Q8_0:
            kc_quantize_row_q8_0(row, (td_block_q8_0 *)dst, cols);
            break;
        case TD_Q4_0: {
            td_block_q4_0 *b = (td_block_q4_0 *)dst;
            for (int64_t ib = 0; ib < cols / TD_QK; ib++) {
                b[ib].d = kc_f32_to_f16(0.05f + 0.01f * frand());
                for (int j = 0; j < TD_QK / 2; j++) {
                    b[ib].qs[j] = (uint8_t)(g_rng >> (j % 7 * 8));
                    frand();
                }
            }
            break;
        }
        default: /* kcu_weight_upload's types only */
            fprintf(stderr, "make_weights: type %s has no device kernel\n", td_name(t));
            abort();
        }
    }
    free(row);
    return data;
}

/* One (source type, shape, n) case; returns the number of bad outputs. */
static int run_case(kcu_ctx *c, const kcu_weight *w, tdtype src, const void *hw, const float *wf,
                    int64_t rows, int64_t cols, int64_t n)
{
    const size_t rb = td_row_bytes(src, cols);
    float *x = malloc(sizeof(float) * (size_t)(n * cols));
    float *y = malloc(sizeof(float) * (size_t)(n * rows));
    float *yc = malloc(sizeof(float) * (size_t)(n * rows));
    td_block_q8_0 *xq = malloc(sizeof(td_block_q8_0) * (size_t)(cols / TD_QK + 1));
    if (!x || !y || !yc || !xq) {
        abort();
    }
    for (int64_t i = 0; i < n * cols; i++) {
        x[i] = frand();
    }
    /* the CPU kernel */
    kc_weight kw = {.type = src, .k = cols, .m = rows, .data = hw, .packed = NULL};
    const size_t kws = kc_matmul_wsize(&kw, n);
    void *kwsp = kws ? malloc(kws) : NULL;
    if (kc_matmul(NULL, &kw, x, n, yc, kwsp, kws) != 0) {
        fprintf(stderr, "FAIL: kc_matmul\n");
        abort();
    }
    free(kwsp);

    /* the GPU */
    const size_t wsp_bytes = kcu_matmul_workspace(w, n);
    float *d_x = kcu_malloc(c, sizeof(float) * (size_t)(n * cols));
    float *d_y = kcu_malloc(c, sizeof(float) * (size_t)(n * rows));
    void *d_wsp = wsp_bytes ? kcu_malloc(c, wsp_bytes) : NULL;
    int bad = 0;
    if (!d_x || !d_y || (wsp_bytes && !d_wsp)) {
        fprintf(stderr, "FAIL: device allocation: %s\n", kcu_last_error());
        bad = 1;
        goto out;
    }
    if (wsp_bytes && kcu_matmul(c, w, d_x, n, d_y, d_wsp, wsp_bytes - 1) != -EINVAL) {
        fprintf(stderr, "FAIL: a short workspace is not refused\n");
        bad++;
    }
    int rc = kcu_h2d(c, d_x, x, sizeof(float) * (size_t)(n * cols));
    if (rc == 0) {
        rc = kcu_matmul(c, w, d_x, n, d_y, d_wsp, wsp_bytes);
    }
    if (rc == 0) {
        rc = kcu_d2h(c, y, d_y, sizeof(float) * (size_t)(n * rows));
    }
    if (rc == 0) {
        rc = kcu_sync(c);
    }
    if (rc != 0) {
        fprintf(stderr, "FAIL: %s rows %lld cols %lld n %lld: rc %d: %s\n", td_name(src),
                (long long)rows, (long long)cols, (long long)n, rc, kcu_last_error());
        bad++;
        goto out;
    }

    const bool quant = src == TD_Q8_0 || src == TD_Q4_0;
    double r_x; /* relative rounding of the operands on the device */
    if (w->type == TD_BF16) {
        r_x = 0x1.0p-8;
    } else if (quant) {
        r_x = n <= 8 ? 0.0 : 2.0 * 0x1.0p-11;
    } else {
        r_x = 0x1.0p-11;
    }
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        if (quant) {
            kc_quantize_row_q8_0(xt, xq, cols);
        }
        for (int64_t r = 0; r < rows; r++) {
            const float *wr = wf + r * cols;
            double ref = 0.0, mag = 0.0, qerr = 0.0;
            for (int64_t i = 0; i < cols; i++) {
                ref += (double)wr[i] * xt[i];
                mag += fabs((double)wr[i] * xt[i]);
                if (quant) {
                    qerr += fabs((double)wr[i]) * kc_f16_to_f32(xq[i / TD_QK].d) *
                            (0.5 + 127.0 * 0x1.0p-11);
                }
            }
            const double got = y[t * rows + r], cpu = yc[t * rows + r];
            double tol = mag * (r_x + (double)(cols + 64) * U32) * 1.01 + 1e-30;
            if (quant && n <= 8) {
                const float emul =
                    kcu_q_row_dot_emul(src, (const uint8_t *)hw + (size_t)r * rb, xt, cols / TD_QK);
                uint32_t ue, ug;
                memcpy(&ue, &emul, sizeof(ue));
                memcpy(&ug, &y[t * rows + r], sizeof(ug));
                if (ue != ug) {
                    if (bad++ < 5) {
                        fprintf(stderr,
                                "FAIL: %s %lldx%lld n %lld y[%lld][%lld] = %a, host "
                                "emulation %a (must be bit-identical)\n",
                                td_name(src), (long long)rows, (long long)cols, (long long)n,
                                (long long)t, (long long)r, got, (double)emul);
                    }
                }
                const int64_t lane_adds = cols / TD_QK / 32;
                tol = (double)(TD_QK + lane_adds + 8) * U32 * mag * 1.01 + 1e-30;
            }
            const double tol_cpu = tol + (src == TD_F32 ? 0x1.0p-11 * mag : 0.0) + qerr * 1.01 +
                                   (double)(cols + 64) * U32 * mag;
            if (!(fabs(got - ref) <= tol) || !(fabs(got - cpu) <= tol_cpu)) {
                if (bad++ < 5) {
                    fprintf(stderr,
                            "FAIL: %s %lldx%lld n %lld y[%lld][%lld] = %.9g, reference %.9g "
                            "(tol %.3g), kc_matmul %.9g (tol %.3g)\n",
                            td_name(src), (long long)rows, (long long)cols, (long long)n,
                            (long long)t, (long long)r, got, ref, tol, cpu, tol_cpu);
                }
            }
        }
    }
out:
    kcu_free(c, d_x);
    kcu_free(c, d_y);
    kcu_free(c, d_wsp);
    free(xq);
    free(yc);
    free(y);
    free(x);
    return bad;
}

int main(void)
{
    char err[256];
    if (kcu_device_count(err, sizeof(err)) == 0) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    kcu_ctx *c = kcu_ctx_create(0, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "FAIL: kcu_ctx_create: %s\n", err);
        return 1;
    }
    static const tdtype types[] = {TD_F32, TD_F16, TD_BF16, TD_Q8_0, TD_Q4_0};
    static const int64_t shapes[][2] = {{1, 32},     {33, 64}, {67, 1056}, {257, 2080},
                                        {130, 4128}, {19, 45}, {5, 7}};
    static const int64_t ns[] = {1, 2, 7, 8, 9, 64, 300};
    int cases = 0;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const tdtype src = types[ti];
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            if (td_row_bytes(src, cols) == 0) {
                continue; /* quantised types need whole blocks */
            }
            void *hw = make_weights(src, rows, cols);
            float *wf = malloc(sizeof(float) * (size_t)(rows * cols));
            if (!wf) {
                abort();
            }
            for (int64_t r = 0; r < rows; r++) {
                kc_dequantize_row(src, (const uint8_t *)hw + (size_t)r * td_row_bytes(src, cols),
                                  wf + r * cols, cols);
            }
            if (src == TD_F32) { /* the device holds F16 */
                for (int64_t i = 0; i < rows * cols; i++) {
                    wf[i] = kc_f16_to_f32(kc_f32_to_f16(wf[i]));
                }
            }
            kcu_weight w;
            memset(&w, 0, sizeof(w));
            if (kcu_weight_upload(c, &w, src, hw, rows, cols) != 0) {
                fprintf(stderr, "FAIL: upload %s %lldx%lld: %s\n", td_name(src), (long long)rows,
                        (long long)cols, kcu_last_error());
                g_fail++;
            } else {
                const tdtype want = src == TD_F32 ? TD_F16 : src;
                if (w.type != want || w.rows != rows || w.cols != cols) {
                    fprintf(stderr, "FAIL: upload of %s gave %s\n", td_name(src), td_name(w.type));
                    g_fail++;
                }
                for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
                    g_fail += run_case(c, &w, src, hw, wf, rows, cols, ns[ni]) != 0;
                    cases++;
                }
                kcu_weight_free(c, &w);
            }
            free(wf);
            free(hw);
        }
    }
    kcu_ctx_destroy(c);
    if (g_fail) {
        fprintf(stderr, "%d of %d case(s) failed\n", g_fail, cases);
        return 1;
    }
    printf("ok: %d matmul cases\n", cases);
    return 0;
}
