/* Norms, RoPE, SwiGLU, softmax, embedding and paged attention; see kc_ops.h. */
#include "kernels/cpu/kc_ops.h"

#include <errno.h>
#include <math.h>

#include "kernels/cpu/kc_convert.h"
#include "kernels/cpu/kc_internal.h"

void kc_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)(x[i] * x[i]);
    }
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] * scale;
        y[i] = w ? v * w[i] : v;
    }
}

/* ggml_rope_yarn_corr_dim, operand for operand */
static float yarn_corr_dim(int n_rot, int n_ctx_orig, float beta, float base)
{
    return (float)n_rot * logf((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

void kc_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow,
                            float dims[2])
{
    dims[0] = fmaxf(0.0f, floorf(yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, base)));
    dims[1] = fminf((float)(n_rot - 1), ceilf(yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, base)));
}

void kc_rope_cache_yarn(float *cs, int n_rot, int32_t pos, float base, float freq_scale,
                        const float *freq_factors, float ext_factor, float attn_factor,
                        const float *corr_dims)
{
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float mscale = attn_factor;
    float lo = 0.0f, span = 0.001f;
    if (ext_factor != 0.0f) {
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        lo = corr_dims[0];
        span = fmaxf(0.001f, corr_dims[1] - corr_dims[0]);
    }
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        const float extrap = theta / (freq_factors ? freq_factors[i] : 1.0f);
        float t = freq_scale * extrap; /* ggml's theta_interp */
        if (ext_factor != 0.0f) {
            const float y = ((float)i - lo) / span;
            const float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
            t = t * (1.0f - ramp_mix) + extrap * ramp_mix;
        }
        cs[2 * i] = cosf(t) * mscale;
        cs[2 * i + 1] = sinf(t) * mscale;
        theta *= theta_scale;
    }
}

void kc_rope_cache_ext(float *cs, int n_rot, int32_t pos, float base, float freq_scale,
                       const float *freq_factors)
{
    static const float no_ramp[2] = {0.0f, 0.0f};
    kc_rope_cache_yarn(cs, n_rot, pos, base, freq_scale, freq_factors, 0.0f, 1.0f, no_ramp);
}

void kc_rope_cache(float *cs, int n_rot, int32_t pos, float base)
{
    kc_rope_cache_ext(cs, n_rot, pos, base, 1.0f, NULL);
}

void kc_rope_apply(float *x, int n_heads, int head_dim, int n_rot, const float *cs, bool neox)
{
    const int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            const float c = cs[2 * i];
            const float s = cs[2 * i + 1];
            const int i0 = neox ? i : 2 * i;
            const int i1 = neox ? i + half : 2 * i + 1;
            const float x0 = xh[i0];
            const float x1 = xh[i1];
            xh[i0] = x0 * c - x1 * s;
            xh[i1] = x0 * s + x1 * c;
        }
    }
}

void kc_swiglu(const float *gate, const float *up, float *y, int64_t n)
{
    const kc__isa_ops *ops = kc__ops();
    if (ops->swiglu) {
        ops->swiglu(gate, up, y, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void kc_geglu(const float *gate, const float *up, float *y, int64_t n)
{
    /* ggml_gelu_f32's formula, evaluated in float (ggml's CPU backend looks it up in an f16
     * table instead; transformers' gelu_pytorch_tanh and vLLM compute it) */
    const float a = 0.044715f;
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        y[i] = 0.5f * g * (1.0f + tanhf(sqrt_2_over_pi * g * (1.0f + a * g * g))) * up[i];
    }
}

void kc_softcap(float *x, int64_t n, float cap)
{
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) {
        x[i] = tanhf(x[i] * inv) * cap;
    }
}

void kc_softmax(float *x, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        mx = fmaxf(mx, x[i]);
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) {
        x[i] *= inv;
    }
}

void kc_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        y[i] += x[i];
    }
}

void kc_axpy(float *y, float s, const float *x, int64_t n)
{
    kc__ops()->axpy_f32(y, s, x, n);
}

void kc_axpy_f16(float *y, float s, const uint16_t *x, int64_t n)
{
    kc__ops()->axpy_f16(y, s, x, n);
}

int kc_embed_row(tdtype type, const void *data, int64_t k, int64_t row, float *out)
{
    size_t rb = td_row_bytes(type, k);
    if (rb == 0 || row < 0) {
        return -EINVAL;
    }
    return kc_dequantize_row(type, (const uint8_t *)data + (size_t)row * rb, out, k);
}

typedef struct kc_attn_task {
    const kc_paged_kv *kv;
    const kc_attn_seq *seqs;
    int n_seqs;
    int n_head;
    int64_t q_stride, o_stride;
    float scale, softcap;
    int32_t window;
    const kc__isa_ops *ops;
} kc_attn_task;

/* One query (one token, one head) against keys [0, pos], or (window w) [pos - w + 1, pos]. */
static void kc_attn_one(const kc_attn_task *t, const kc_attn_seq *s, int32_t i, int h)
{
    const kc_paged_kv *kv = t->kv;
    const int hd = kv->head_dim;
    const int bs = kv->block_size;
    const int hk = h / (t->n_head / kv->n_head_kv);
    const float *q = s->q + i * t->q_stride + (int64_t)h * hd;
    float *out = s->out + i * t->o_stride + (int64_t)h * hd;
    const int32_t n_keys = s->start_pos + i + 1;
    const int32_t first = t->window > 0 && n_keys > t->window ? n_keys - t->window : 0;
    const size_t esz = kv->f16 ? 2 : 4;
    float acc[KC_ATTN_MAX_HEAD_DIM];
    float sc[KC_ATTN_MAX_BLOCK];
    float m = -INFINITY;
    float l = 0.0f;
    for (int d = 0; d < hd; d++) {
        acc[d] = 0.0f;
    }
    for (int32_t b = first / bs; b * bs < n_keys; b++) {
        const int32_t blk = s->block_table[b];
        /* keys [j0, j0 + cnt) of this block: the window may start inside it */
        const int j0 = b * bs < first ? first - b * bs : 0;
        const int cnt = (n_keys - b * bs < bs ? n_keys - b * bs : bs) - j0;
        const size_t off =
            ((((size_t)blk * (size_t)kv->n_head_kv + (size_t)hk) * (size_t)bs) + (size_t)j0) *
            (size_t)hd * esz;
        const uint8_t *kb = (const uint8_t *)kv->k + off;
        const uint8_t *vb = (const uint8_t *)kv->v + off;
        if (t->softcap == 0.0f && t->ops->attn_block &&
            t->ops->attn_block(q, kb, vb, cnt, hd, kv->f16, t->scale, &m, &l, acc)) {
            continue;
        }
        float bmax = -INFINITY;
        for (int j = 0; j < cnt; j++) {
            const void *kr = kb + (size_t)j * hd * esz;
            float d = kv->f16 ? t->ops->dot_f16(q, (const uint16_t *)kr, hd)
                              : t->ops->dot_f32(q, (const float *)kr, hd);
            sc[j] = d * t->scale;
            if (t->softcap != 0.0f) {
                sc[j] = tanhf(sc[j] * (1.0f / t->softcap)) * t->softcap;
            }
            bmax = sc[j] > bmax ? sc[j] : bmax;
        }
        if (bmax > m) {
            const float corr = expf(m - bmax);
            for (int d = 0; d < hd; d++) {
                acc[d] *= corr;
            }
            l *= corr;
            m = bmax;
        }
        for (int j = 0; j < cnt; j++) {
            const float p = expf(sc[j] - m);
            const void *vr = vb + (size_t)j * hd * esz;
            l += p;
            if (kv->f16) {
                t->ops->axpy_f16(acc, p, (const uint16_t *)vr, hd);
            } else {
                t->ops->axpy_f32(acc, p, (const float *)vr, hd);
            }
        }
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < hd; d++) {
        out[d] = acc[d] * inv;
    }
}

/* Pairs [k0, k0 + np) of sequence s and KV head hk, numbered token-major (pair k: token k / G,
 * head hk * G + k % G with G query heads per KV head), as one kc__attn_tile. false: the level
 * has no tile kernel for them. */
static bool kc_attn_tile(const kc_attn_task *t, const kc_attn_seq *s, int hk, int64_t k0, int np)
{
    const kc_paged_kv *kv = t->kv;
    const int G = t->n_head / kv->n_head_kv;
    kc__attn_tile tile = {.np = np,
                          .block_table = s->block_table,
                          .k = kv->k,
                          .v = kv->v,
                          .f16 = kv->f16,
                          .block_size = kv->block_size,
                          .n_head_kv = kv->n_head_kv,
                          .hk = hk,
                          .head_dim = kv->head_dim,
                          .scale = t->scale,
                          .softcap = t->softcap};
    for (int p = 0; p < np; p++) {
        const int64_t i = (k0 + p) / G;
        const int h = hk * G + (int)((k0 + p) % G);
        const int32_t n_keys = s->start_pos + (int32_t)i + 1;
        tile.q[p] = s->q + i * t->q_stride + (int64_t)h * kv->head_dim;
        tile.out[p] = s->out + i * t->o_stride + (int64_t)h * kv->head_dim;
        tile.first[p] = t->window > 0 && n_keys > t->window ? n_keys - t->window : 0;
        tile.end[p] = n_keys;
    }
    return t->ops->attn_tile(&tile);
}

static void kc_attn_worker(void *arg, int ith, int nth)
{
    const kc_attn_task *t = arg;
    int64_t item = 0;
    if (t->ops->attn_tile) { /* a level without a kernel for the head size falls back */
        /* tiles of up to attn_tile_np pairs sharing a KV head: in decode the heads of a GQA
         * group, in prefill consecutive tokens too */
        const int G = t->n_head / t->kv->n_head_kv;
        const int tn = t->ops->attn_tile_np;
        for (int si = 0; si < t->n_seqs; si++) {
            const kc_attn_seq *s = &t->seqs[si];
            const int64_t n_pairs = (int64_t)s->n_new * G;
            for (int hk = 0; hk < t->kv->n_head_kv; hk++) {
                for (int64_t k0 = 0; k0 < n_pairs; k0 += tn, item++) {
                    const int np = n_pairs - k0 < tn ? (int)(n_pairs - k0) : tn;
                    if (item % nth == ith && !kc_attn_tile(t, s, hk, k0, np)) {
                        for (int p = 0; p < np; p++) {
                            kc_attn_one(t, s, (int32_t)((k0 + p) / G),
                                        hk * G + (int)((k0 + p) % G));
                        }
                    }
                }
            }
        }
        return;
    }
    for (int si = 0; si < t->n_seqs; si++) {
        const kc_attn_seq *s = &t->seqs[si];
        for (int32_t i = 0; i < s->n_new; i++) {
            for (int h = 0; h < t->n_head; h++, item++) {
                if (item % nth == ith) {
                    kc_attn_one(t, s, i, h);
                }
            }
        }
    }
}

int kc_attention(kc_pool *pool, const kc_paged_kv *kv, int n_head, const kc_attn_seq *seqs,
                 int n_seqs, int64_t q_stride, int64_t o_stride, float scale)
{
    const kc_attn_params p = {.scale = scale};
    return kc_attention_ex(pool, kv, n_head, seqs, n_seqs, q_stride, o_stride, &p);
}

int kc_attention_ex(kc_pool *pool, const kc_paged_kv *kv, int n_head, const kc_attn_seq *seqs,
                    int n_seqs, int64_t q_stride, int64_t o_stride, const kc_attn_params *p)
{
    if (kv->n_head_kv <= 0 || n_head <= 0 || n_head % kv->n_head_kv != 0 || kv->block_size < 1 ||
        kv->block_size > KC_ATTN_MAX_BLOCK || kv->head_dim < 1 ||
        kv->head_dim > KC_ATTN_MAX_HEAD_DIM || n_seqs < 0 || p->window < 0 ||
        !(p->softcap >= 0.0f)) {
        return -EINVAL;
    }
    kc_attn_task t = {
        .kv = kv,
        .seqs = seqs,
        .n_seqs = n_seqs,
        .n_head = n_head,
        .q_stride = q_stride,
        .o_stride = o_stride,
        .scale = p->scale,
        .softcap = p->softcap,
        .window = p->window,
        .ops = kc__ops(),
    };
    if (pool) {
        kc_pool_run(pool, kc_attn_worker, &t);
    } else {
        kc_attn_worker(&t, 0, 1);
    }
    return 0;
}
