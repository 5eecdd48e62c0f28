/*
 * A loaded model: hyperparameters, weight tensors (memory-mapped from a GGUF file or from
 * Hugging Face *.safetensors files, never copied unless a conversion is needed), the tokenizer's
 * source data and the chat template. Everything the forward pass and the tokenizer need, and
 * nothing about how they compute.
 *
 * Weight layout follows ggml/GGUF: ne[0] is the innermost (contiguous) dimension, so a linear
 * layer W with `out` outputs and `in` inputs has ne = {in, out} and row r (output r) is the
 * td_row_bytes(type, in) bytes at data + r * row_bytes. Safetensors [out, in] tensors map onto
 * the same convention unchanged.
 *
 * RoPE: `rope_neox` false means ggml NORM mode (rotate adjacent pairs x[2i], x[2i+1]: GGUF
 * `llama`, whose converter permuted Q/K); true means NeoX mode (pairs x[i], x[i + n_rot/2]:
 * qwen2, qwen3, and Hugging Face llama checkpoints, which are not permuted).
 *
 * Thread-safety: a model is immutable after model_load and may be shared by threads.
 */
#ifndef TANDEM_ENGINE_MODEL_H
#define TANDEM_ENGINE_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

typedef enum model_arch {
    MODEL_ARCH_LLAMA,    /* Llama 2/3, Mistral, TinyLlama; Mixtral (with experts) */
    MODEL_ARCH_QWEN2,    /* q/k/v bias, NeoX RoPE */
    MODEL_ARCH_QWEN3,    /* per-head q/k RMSNorm, NeoX RoPE, explicit head_dim */
    MODEL_ARCH_QWEN3MOE, /* qwen3 attention, mixture-of-experts feed-forward */
    MODEL_ARCH_PHI3,     /* fused QKV and gate/up matrices, NeoX RoPE (partial where set) */
    MODEL_ARCH_GEMMA2,   /* scaled embeddings, GeGLU, post-norms, soft-capping, SWA layers */
    MODEL_ARCH_GEMMA3,   /* gemma2's layout with q/k RMSNorm, local RoPE base on SWA layers */
    MODEL_ARCH_QWEN2MOE, /* qwen2 attention, experts plus a gated shared expert */
} model_arch;

/* The feed-forward gate's activation: SwiGLU (silu) or GeGLU (gelu, tanh approximation). */
typedef enum model_act {
    MODEL_ACT_SILU,
    MODEL_ACT_GELU_TANH,
} model_act;

typedef enum model_format {
    MODEL_FORMAT_GGUF,
    MODEL_FORMAT_HF, /* directory with config.json, *.safetensors, tokenizer.json */
} model_format;

typedef struct model_tensor {
    const char *name; /* GGUF name ("blk.0.attn_q.weight"), also for HF files */
    tdtype type;
    int n_dims;
    int64_t ne[4];    /* ne[0] innermost; unused dims are 1 */
    const void *data; /* mapped or owned; aligned to at least 32 bytes for GGUF */
    size_t nbytes;
} model_tensor;

typedef struct model_config {
    model_arch arch;
    int n_layer;
    int n_embd;    /* hidden size */
    int n_head;    /* query heads */
    int n_head_kv; /* key/value heads (== n_head without GQA) */
    int head_dim;  /* per-head size; n_embd / n_head unless the model says otherwise */
    int n_rot;     /* rotated dims per head: head_dim, or fewer (partial rotary: the first n_rot) */
    int n_ff;      /* feed-forward hidden size */
    int n_vocab;   /* rows of the embedding and output matrices */
    int n_ctx_train; /* context length the model was trained with */
    float rope_base; /* rope_theta / rope.freq_base */
    float rms_eps;
    bool rope_neox;   /* see the file comment */
    bool tied_output; /* output matrix is the token embedding */
    /* RoPE scaling, as llama.cpp applies it (model_rope_freq_scale, model_rope_attn_factor,
     * kc_rope_cache_yarn):
     *  - rope_factor: linear and YaRN's factor (GGUF rope.scaling.factor, HF rope_scaling's
     *    "factor"); the angles' multiplier is 1 / rope_factor; 0 or 1: none;
     *  - rope_freqs: Llama 3's per-pair frequency divisors (n_rot / 2 floats, or NULL: GGUF's
     *    rope_freqs.weight, or computed from HF's rope_scaling of type llama3);
     *  - YaRN (rope_yarn_orig_ctx > 0): the original context length n_ctx_orig (GGUF
     *    rope.scaling.original_context_length, HF original_max_position_embeddings) and the
     *    ramp's beta_fast / beta_slow (32 and 1; HF may set them): pairs below
     *    corr_dim(beta_fast) keep their angle, pairs above corr_dim(beta_slow) are interpolated
     *    by 1 / rope_factor, a linear ramp between (kc_rope_yarn_corr_dims), and cos/sin get
     *    YaRN's magnitude 0.1 ln(rope_factor) + 1;
     *  - rope_attn_factor: GGUF's rope.scaling.attn_factor, an extra multiplier of cos and sin
     *    (llama.cpp applies it whatever the scaling type); HF YaRN: attention_factor (or the
     *    mscale / mscale_all_dim ratio) over the default 0.1 ln(factor) + 1. 0 or 1: none;
     *  - LongRoPE (Phi-3 / Phi-3.5 / Phi-4-mini 128k; rope_freqs_long set): rope_freqs holds the
     *    short factors and rope_freqs_long the long ones (GGUF rope_factors_short/long.weight,
     *    HF rope_scaling short_factor/long_factor), each n_rot / 2 divisors; a context of more
     *    than rope_long_ctx tokens (the original context length) uses the long ones
     *    (model_rope_freqs), and rope_attn_factor carries the magnitude
     *    sqrt(1 + ln(s) / ln(rope_long_ctx)), s = n_ctx_train / rope_long_ctx. */
    float rope_factor;
    const float *rope_freqs;
    const float *rope_freqs_long;
    int rope_long_ctx;
    int rope_yarn_orig_ctx;
    float rope_yarn_beta_fast, rope_yarn_beta_slow;
    float rope_attn_factor;
    /* Architecture features (model_arch), set by the loaders for every model: */
    model_act ffn_act;
    float embd_scale; /* token embeddings are multiplied by it (gemma: sqrt(n_embd)); 0: 1 */
    float
        attn_scale; /* q.k multiplier (gemma's query_pre_attn_scalar^-1/2); 0: 1 / sqrt(head_dim) */
    float attn_softcap;  /* attention scores s -> c tanh(s / c) (gemma2); 0: none */
    float final_softcap; /* logits the same (gemma2, some gemma3); 0: none */
    /* Sliding-window attention: a query at position p of a layer with model_layer.swa sees the
     * keys at p - n_swa < k <= p (llama.cpp's LLAMA_SWA_TYPE_STANDARD, transformers'
     * sliding_window); such layers rotate with rope_base_swa, and with the model's RoPE
     * scaling only when rope_swa_scaled (gemma2; gemma3's local layers are unscaled). */
    int n_swa;
    float rope_base_swa;
    bool rope_swa_scaled;
    /* Mixture of experts (n_expert > 0): each token's feed-forward is the sum of its
     * n_expert_used best experts (softmax of the router's logits, the top ones renormalized to
     * sum to 1), each a SwiGLU of hidden size n_ff_exp. */
    int n_expert, n_expert_used, n_ff_exp;
    /* qwen2moe: the chosen experts keep their softmax probabilities (no renormalization, as
     * llama.cpp and norm_topk_prob false), and a shared expert of hidden size n_ff_shexp is
     * added to every token, scaled by sigmoid(ffn_gate_inp_shexp . x). */
    bool expert_weights_raw;
    int n_ff_shexp;
} model_config;

/* The angle multiplier of linear and YaRN RoPE scaling, as llama.cpp computes it: 1 / factor,
 * or 1. */
static inline float model_rope_freq_scale(const model_config *c)
{
    return c->rope_factor > 0.0f ? 1.0f / c->rope_factor : 1.0f;
}

/* The per-pair RoPE divisors for a context of n_ctx tokens (the engine's max_model_len): with
 * LongRoPE the long factors when n_ctx exceeds the original context length, else the short ones,
 * as llama.cpp chooses by its context size (transformers switches by the forward pass's longest
 * position, vLLM by the batch's; a choice per context keeps a sequence's cached keys and any
 * prefix-cache hit consistent); otherwise rope_freqs (Llama 3's, or NULL). */
static inline const float *model_rope_freqs(const model_config *c, int64_t n_ctx)
{
    return c->rope_freqs_long && n_ctx > c->rope_long_ctx ? c->rope_freqs_long : c->rope_freqs;
}

/* ggml rope's ext_factor: 1 for YaRN, else 0 (llama_context's default for the scaling type). */
static inline float model_rope_ext_factor(const model_config *c)
{
    return c->rope_yarn_orig_ctx > 0 ? 1.0f : 0.0f;
}

/* YaRN's magnitude as llama.cpp's llama_context and transformers compute it by default:
 * 0.1 ln(factor) + 1, or 1 for factor <= 1 (get_mscale with mscale 1). */
static inline float model_yarn_mscale(float factor)
{
    return factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
}

/* ggml rope's attn_factor as llama.cpp's llama_context computes it, in float: for YaRN,
 * get_mscale(factor) = 0.1 ln(factor) + 1 (1 for factor <= 1), times 1 / (1 + 0.1 ln(factor))
 * (which cancels the magnitude ggml's rope_yarn multiplies by again), times
 * rope_attn_factor; else rope_attn_factor. Inline, so the backends need no loader code. */
static inline float model_rope_attn_factor(const model_config *c)
{
    const float rope_attn = c->rope_attn_factor > 0.0f ? c->rope_attn_factor : 1.0f;
    float a = 1.0f; /* hparams.yarn_attn_factor */
    if (model_rope_ext_factor(c) != 0.0f) {
        const float factor = 1.0f / model_rope_freq_scale(c);
        a = model_yarn_mscale(factor);
        a *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    return a * rope_attn;
}

/* Llama 3's RoPE frequency divisors (HF rope_scaling type "llama3"), computed in float as
 * llama.cpp's converter does: out[i] for pair i of head_dim, 1 for high frequencies, factor for
 * low ones, and a smooth blend between. */
void model_llama3_rope_freqs(float *out, int head_dim, float base, float factor, float low_freq,
                             float high_freq, float original_ctx);

typedef struct model_layer {
    bool swa;                            /* sliding-window layer (model_config.n_swa) */
    const model_tensor *attn_norm;       /* [n_embd] */
    const model_tensor *wq, *wk, *wv;    /* {n_embd, n_head*hd}, {n_embd, n_head_kv*hd} */
    const model_tensor *bq, *bk, *bv;    /* qwen2 biases, else NULL */
    const model_tensor *q_norm, *k_norm; /* qwen3 [head_dim], else NULL */
    const model_tensor *wo;              /* {n_head*hd, n_embd} */
    const model_tensor *ffn_norm;        /* [n_embd] */
    const model_tensor *w_gate, *w_up;   /* {n_embd, n_ff} */
    const model_tensor *w_down;          /* {n_ff, n_embd} */
    /* gemma: RMSNorm of the attention output and of the feed-forward output before each
     * residual add ([n_embd]), else NULL */
    const model_tensor *attn_post_norm, *ffn_post_norm;
    /* MoE layers (model_config.n_expert > 0; w_gate / w_up / w_down are NULL): the router
     * {n_embd, n_expert} and per expert e its {n_embd, n_ff_exp} gate and up and
     * {n_ff_exp, n_embd} down matrices (views into GGUF's stacked 3-D tensors) */
    const model_tensor *ffn_gate_inp;
    const model_tensor **exp_gate, **exp_up, **exp_down; /* [n_expert] */
    /* qwen2moe's shared expert: its gate input [n_embd] and {n_embd, n_ff_shexp} gate / up,
     * {n_ff_shexp, n_embd} down matrices; NULL elsewhere */
    const model_tensor *ffn_gate_inp_shexp, *w_gate_shexp, *w_up_shexp, *w_down_shexp;
} model_layer;

/* A string with an explicit length (GGUF strings are not NUL-terminated and may hold any byte). */
typedef struct model_str {
    const char *s;
    uint32_t len;
} model_str;

/*
 * Tokenizer data found in a GGUF file (tokenizer.ggml.*), borrowed from the mapping. For HF
 * directories the loader sets `hf_tokenizer_json` instead and leaves this zeroed.
 */
typedef struct model_gguf_vocab {
    const char *model; /* tokenizer.ggml.model: "llama" (SPM), "gpt2" (BPE), "t5" (Unigram), "bert"
                          (WordPiece); a NUL-terminated copy */
    const char *pre;   /* tokenizer.ggml.pre or NULL, NUL-terminated copy */
    size_t n_tokens;
    const model_str *tokens;    /* [n_tokens] */
    const float *scores;        /* [n_tokens] or NULL */
    const int32_t *token_types; /* [n_tokens] or NULL: 1 normal 2 unknown 3 control 4 user-defined 5
                                   unused 6 byte */
    size_t n_merges;
    const model_str *merges;                        /* [n_merges] "a b", or NULL */
    int32_t bos_id, eos_id, unk_id, pad_id, eot_id; /* -1 when absent */
    int add_bos, add_eos; /* -1 when absent (tokenizer default), else 0/1 */
    int add_space_prefix; /* -1 when absent */
    /* "t5" (Unigram) and "bert" (WordPiece) keys, -1 / NULL when absent:
     * tokenizer.ggml.precompiled_charsmap (u8/i8 array, borrowed), remove_extra_whitespaces,
     * add_sep_token, seperator_token_id (sic), normalizer.lowercase / strip_accents */
    const uint8_t *precompiled_charsmap;
    size_t charsmap_len;
    int remove_extra_whitespaces, add_sep, lowercase, strip_accents;
    int32_t sep_id;
} model_gguf_vocab;

typedef struct model {
    model_format format;
    model_config cfg;
    char *path;                   /* as given to model_load */
    char *name;                   /* general.name, or the file/directory base name */
    const model_tensor *tok_embd; /* {n_embd, n_vocab} */
    const model_tensor *output_norm;
    const model_tensor *output; /* == tok_embd when cfg.tied_output */
    model_layer *layers;        /* [n_layer] */
    size_t n_tensors;
    model_tensor *tensors;       /* every tensor of the file(s) */
    size_t n_params;             /* elements over all tensors */
    size_t weight_bytes;         /* bytes of all tensor data */
    model_gguf_vocab vocab;      /* GGUF only */
    char *hf_tokenizer_json;     /* HF only: path of tokenizer.json */
    char *hf_tokenizer_config;   /* HF only: path of tokenizer_config.json, or NULL */
    char *chat_template;         /* tokenizer.chat_template / tokenizer_config.json, or NULL */
    char *bos_token, *eos_token; /* token texts for templates, or NULL */
    void *priv;                  /* loader state (mappings, owned buffers) */
} model;

/*
 * Loads a GGUF file or a Hugging Face directory (decided by what `path` is). Validates the
 * architecture, every required tensor's presence, type and shape against the hyperparameters,
 * and that every tensor lies inside the file. On failure returns NULL and writes a message naming
 * the file and the offending key, tensor or field into err (errlen bytes).
 */
model *model_load(const char *path, char *err, size_t errlen);

/* Releases the model and its mappings. NULL is a no-op. */
void model_free(model *m);

/* Tensor by exact name, or NULL. */
const model_tensor *model_find_tensor(const model *m, const char *name);

/* The GGUF architecture name: "llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma2",
 * "gemma3". */
const char *model_arch_name(model_arch a);

#endif
