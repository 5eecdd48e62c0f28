/*
 * tandem-genmodel: writes seeded random-weight test models, as a GGUF v3 file (llama.cpp's
 * names and metadata; F32/F16/BF16/Q8_0/Q4_0 matrices) or a Hugging Face folder (config.json,
 * generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json), with a
 * synthetic or a converted real tokenizer (genvocab.h). Used by the engine tests, the
 * benchmarks and `make run`.
 *
 * Architectures: llama, qwen2, qwen3, qwen2moe, qwen3moe, phi3, gemma2, gemma3, and mixtral (GGUF
 * llama with experts), with the tensors and keys llama.cpp's converter writes for each (gemma's
 * post-norms and tied output, phi3's fused attn_qkv and gate/up ffn_up, MoE's router and stacked
 * 3-D expert tensors) and the config.json fields of the checkpoints they stand in for.
 *
 * Same seed and shapes give the same model in both formats: every tensor's values come from a
 * PRNG seeded by (seed, GGUF tensor name), generated in GGUF row order (a 3-D expert tensor
 * plane by plane: HF's expert E is plane E). llama GGUF files hold Q/K rows permuted for
 * adjacent-pair RoPE (convert_hf_to_gguf.py's permute), so the HF q_proj / k_proj are written
 * with the inverse permutation; the other archs are not permuted. gemma's HF norms hold w - 1
 * (its RMSNorm computes x (1 + w); llama.cpp's converter adds the 1). Norm weights, biases and
 * the MoE router stay F32 in both formats. Same arguments give byte-identical files.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/gguf_writer.h"
#include "engine/model/model.h"
#include "engine/tools/genfile.h"
#include "engine/tools/genquant.h"
#include "engine/tools/genvocab.h"
#include "lib/buf.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/version.h"

#define PROG "tandem-genmodel"

enum {
    ARCH_LLAMA,
    ARCH_QWEN2,
    ARCH_QWEN3,
    ARCH_QWEN3MOE,
    ARCH_PHI3,
    ARCH_GEMMA2,
    ARCH_GEMMA3,
    ARCH_MIXTRAL,  /* GGUF "llama" with experts; HF MixtralForCausalLM */
    ARCH_QWEN2MOE, /* qwen2 attention, experts and a gated shared expert --ffn wide */
    N_ARCHS
};
enum { KIND_EMBED, KIND_MATRIX, KIND_NORM, KIND_BIAS, KIND_ROUTER };

#define MAX_DIM    (1 << 20)
#define MAX_LAYERS 1024

typedef struct gen_opts {
    int hf;          /* 0: GGUF, 1: HF folder */
    const char *out; /* output path */
    int arch;        /* ARCH_* */
    int64_t layers, dim, heads, kv_heads, head_dim, ffn, vocab, ctx;
    tdtype type; /* matrix type (the base type of a recipe) */
    int recipe;  /* RECIPE_*: llama-quantize's per-tensor mix */
    int tied;    /* no output.weight / lm_head */
    uint64_t seed;
    double rope_base, rms_eps; /* as given; GGUF stores them as f32 */
    int rope_scaling;          /* ROPE_SCALING_*: none, linear, llama3, yarn */
    double rope_factor;
    const char *tokenizer; /* NULL: synthetic */
    const char *tokenizer_pre;
    const char *name;
    /* architecture features (0 / NAN: unset on the command line, then the arch's default) */
    int64_t experts, experts_used, expert_ffn; /* MoE: count, per token, hidden size */
    int64_t sliding_window;                    /* gemma2/gemma3/llama (HF only): 0 none */
    int64_t swa_pattern;                       /* gemma: every Nth layer is global */
    int64_t rotary_dim;                        /* phi3: partial rotary (rope.dimension_count) */
    double attn_softcap, final_softcap;        /* gemma: NAN unset, 0 none */
    double rope_base_swa;                      /* gemma3: local layers' RoPE base */
} gen_opts;

enum {
    ROPE_SCALING_NONE,
    ROPE_SCALING_LINEAR,
    ROPE_SCALING_LLAMA3,
    ROPE_SCALING_YARN,
    ROPE_SCALING_LONGROPE /* phi3: original context ctx / factor, short and long factor lists */
};
enum { RECIPE_NONE, RECIPE_K_M }; /* Q4_K_M / Q5_K_M: see tensor_type */
/* Llama 3.1's other rope_scaling values (its config.json) */
#define LLAMA3_LOW_FREQ  1.0
#define LLAMA3_HIGH_FREQ 4.0
#define LLAMA3_ORIG_CTX  8192.0
/* YaRN's original context length; the model's context length becomes at least factor times it */
#define YARN_ORIG_CTX 4096

typedef struct tspec {
    char gguf[64];      /* GGUF tensor name */
    char hf[96];        /* HF tensor name; experts: the part before the expert number */
    char hf_suffix[32]; /* experts: the part after it (".gate_proj.weight") */
    int64_t rows, cols; /* cols == 0: a 1-D tensor of rows elements */
    int64_t planes;     /* experts: GGUF's 3-D {cols, rows, planes}, one HF tensor per plane */
    int kind;           /* KIND_* */
    int64_t perm_heads; /* > 0: llama Q/K permuted with this many heads */
    int hf_minus_one;   /* gemma norms: HF stores w - 1 (its RMSNorm computes x (1 + w)) */
} tspec;

/* --arch names, GGUF general.architecture, HF architectures[0] and model_type */
static const char *const arch_names[] = {"llama",  "qwen2",  "qwen3",   "qwen3moe", "phi3",
                                         "gemma2", "gemma3", "mixtral", "qwen2moe"};
static const char *const gguf_arch_names[] = {"llama",  "qwen2",  "qwen3", "qwen3moe", "phi3",
                                              "gemma2", "gemma3", "llama", "qwen2moe"};
static const char *const hf_arch_names[] = {
    "LlamaForCausalLM",    "Qwen2ForCausalLM",   "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM", "Phi3ForCausalLM",    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",   "MixtralForCausalLM", "Qwen2MoeForCausalLM"};
static const char *const hf_model_types[] = {"llama",       "qwen2",   "qwen3",
                                             "qwen3_moe",   "phi3",    "gemma2",
                                             "gemma3_text", "mixtral", "qwen2_moe"};

static bool is_gemma(const gen_opts *o)
{
    return o->arch == ARCH_GEMMA2 || o->arch == ARCH_GEMMA3;
}

static bool is_moe(const gen_opts *o)
{
    return o->arch == ARCH_QWEN3MOE || o->arch == ARCH_MIXTRAL || o->arch == ARCH_QWEN2MOE;
}

/* Whether Q/K are permuted for adjacent-pair RoPE in the GGUF (GGUF arch llama). */
static bool is_permuted(const gen_opts *o)
{
    return o->arch == ARCH_LLAMA || o->arch == ARCH_MIXTRAL;
}

/* The default sliding-window period: gemma2 alternates, gemma3 has 5 local layers per global. */
static int64_t default_swa_pattern(const gen_opts *o)
{
    return o->arch == ARCH_GEMMA2 ? 2 : 6;
}

/* Whether layer il slides (llama.cpp's set_swa_pattern, transformers' layer_types). */
static bool layer_slides(const gen_opts *o, int64_t il)
{
    const int64_t n = o->swa_pattern;
    return n == 0 || il % n < n - 1;
}

/* Values of one tensor in GGUF row order (caller frees), or NULL on OOM. */
static float *gen_values(const gen_opts *o, const tspec *t)
{
    int64_t n = t->planes * t->rows * (t->cols > 0 ? t->cols : 1);
    float *x = malloc((size_t)n * sizeof(float));
    if (x == NULL) {
        return NULL;
    }
    genq_rng rng;
    genq_rng_seed(&rng, o->seed ^ genf_name_hash(t->gguf));
    float scale = 0.0f, offset = 0.0f;
    switch (t->kind) {
    case KIND_EMBED:
        scale = sqrtf(3.0f) * 2.0f / sqrtf((float)o->dim);
        break;
    case KIND_MATRIX:
        scale = sqrtf(3.0f / (float)t->cols);
        break;
    case KIND_NORM:
        scale = 0.1f;
        offset = 1.0f;
        break;
    case KIND_BIAS:
        scale = 0.1f;
        break;
    case KIND_ROUTER:
        /* router logits with a standard deviation of about 6: the chosen experts are well
         * apart from the rest, so rounding differences between engines do not change the
         * choice, and a near-tie at the k-th place has a small renormalized weight */
        scale = 6.0f * sqrtf(3.0f / (float)t->cols);
        break;
    }
    for (int64_t i = 0; i < n; i++) {
        x[i] = offset + scale * genq_rng_uniform(&rng);
    }
    return x;
}

static size_t add_spec(tspec *s, size_t n, const char *gguf, const char *hf, int64_t rows,
                       int64_t cols, int kind, int64_t perm_heads)
{
    snprintf(s[n].gguf, sizeof(s[n].gguf), "%s", gguf);
    snprintf(s[n].hf, sizeof(s[n].hf), "%s", hf);
    s[n].rows = rows;
    s[n].cols = cols;
    s[n].planes = 1;
    s[n].kind = kind;
    s[n].perm_heads = perm_heads;
    return n + 1;
}

/* The tensor list in file order; *n receives the count. Caller frees. */
static tspec *build_specs(const gen_opts *o, size_t *n_out)
{
    size_t cap = 4 + (size_t)o->layers * 24;
    tspec *s = calloc(cap, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }
    int64_t d = o->dim, hd = o->head_dim, q = o->heads * hd, kv = o->kv_heads * hd;
    const bool perm = is_permuted(o), gemma = is_gemma(o), moe = is_moe(o);
    const bool mixtral = o->arch == ARCH_MIXTRAL;
    size_t n = 0;
    n = add_spec(s, n, "token_embd.weight", "model.embed_tokens.weight", o->vocab, d, KIND_EMBED,
                 0);
    for (int64_t l = 0; l < o->layers; l++) {
        char g[64], h[96];
#define SPEC(gsuf, hsuf, rows, cols, kind, perm)                                                   \
    do {                                                                                           \
        snprintf(g, sizeof(g), "blk.%lld.%s", (long long)l, gsuf);                                 \
        snprintf(h, sizeof(h), "model.layers.%lld.%s", (long long)l, hsuf);                        \
        n = add_spec(s, n, g, h, rows, cols, kind, perm);                                          \
    } while (0)
/* experts: GGUF's stacked 3-D tensor, HF's "<prefix>E<suffix>" per expert */
#define EXPERTS(gsuf, hpre, hsuf, rows, cols)                                                      \
    do {                                                                                           \
        SPEC(gsuf, hpre, rows, cols, KIND_MATRIX, 0);                                              \
        s[n - 1].planes = o->experts;                                                              \
        snprintf(s[n - 1].hf_suffix, sizeof(s[n - 1].hf_suffix), "%s", hsuf);                      \
    } while (0)
        SPEC("attn_norm.weight", "input_layernorm.weight", d, 0, KIND_NORM, 0);
        if (o->arch == ARCH_PHI3) {
            /* Q rows, then K, then V, as Phi-3's qkv_proj */
            SPEC("attn_qkv.weight", "self_attn.qkv_proj.weight", q + 2 * kv, d, KIND_MATRIX, 0);
        } else {
            SPEC("attn_q.weight", "self_attn.q_proj.weight", q, d, KIND_MATRIX,
                 perm ? o->heads : 0);
            SPEC("attn_k.weight", "self_attn.k_proj.weight", kv, d, KIND_MATRIX,
                 perm ? o->kv_heads : 0);
            SPEC("attn_v.weight", "self_attn.v_proj.weight", kv, d, KIND_MATRIX, 0);
        }
        if (o->arch == ARCH_QWEN2 || o->arch == ARCH_QWEN2MOE) {
            SPEC("attn_q.bias", "self_attn.q_proj.bias", q, 0, KIND_BIAS, 0);
            SPEC("attn_k.bias", "self_attn.k_proj.bias", kv, 0, KIND_BIAS, 0);
            SPEC("attn_v.bias", "self_attn.v_proj.bias", kv, 0, KIND_BIAS, 0);
        }
        if (o->arch == ARCH_QWEN3 || o->arch == ARCH_QWEN3MOE || o->arch == ARCH_GEMMA3) {
            SPEC("attn_q_norm.weight", "self_attn.q_norm.weight", hd, 0, KIND_NORM, 0);
            SPEC("attn_k_norm.weight", "self_attn.k_norm.weight", hd, 0, KIND_NORM, 0);
        }
        SPEC("attn_output.weight", "self_attn.o_proj.weight", d, q, KIND_MATRIX, 0);
        if (gemma) {
            SPEC("post_attention_norm.weight", "post_attention_layernorm.weight", d, 0, KIND_NORM,
                 0);
            SPEC("ffn_norm.weight", "pre_feedforward_layernorm.weight", d, 0, KIND_NORM, 0);
        } else {
            SPEC("ffn_norm.weight", "post_attention_layernorm.weight", d, 0, KIND_NORM, 0);
        }
        if (moe) {
            const char *moe_pre = mixtral ? "block_sparse_moe." : "mlp.";
            char hg[32], hp[32];
            snprintf(hg, sizeof(hg), "%sgate.weight", moe_pre);
            snprintf(hp, sizeof(hp), "%sexperts.", moe_pre);
            SPEC("ffn_gate_inp.weight", hg, o->experts, d, KIND_ROUTER, 0);
            EXPERTS("ffn_gate_exps.weight", hp, mixtral ? ".w1.weight" : ".gate_proj.weight",
                    o->expert_ffn, d);
            EXPERTS("ffn_up_exps.weight", hp, mixtral ? ".w3.weight" : ".up_proj.weight",
                    o->expert_ffn, d);
            EXPERTS("ffn_down_exps.weight", hp, mixtral ? ".w2.weight" : ".down_proj.weight", d,
                    o->expert_ffn);
            if (o->arch == ARCH_QWEN2MOE) {
                /* the shared expert (--ffn wide) and its gate: one row, F32 like the router */
                SPEC("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", 1, d,
                     KIND_ROUTER, 0);
                SPEC("ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", o->ffn, d,
                     KIND_MATRIX, 0);
                SPEC("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", o->ffn, d,
                     KIND_MATRIX, 0);
                SPEC("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", d, o->ffn,
                     KIND_MATRIX, 0);
            }
        } else if (o->arch == ARCH_PHI3) {
            /* the gate's rows, then the up rows, as Phi-3's gate_up_proj */
            SPEC("ffn_up.weight", "mlp.gate_up_proj.weight", 2 * o->ffn, d, KIND_MATRIX, 0);
            SPEC("ffn_down.weight", "mlp.down_proj.weight", d, o->ffn, KIND_MATRIX, 0);
        } else {
            SPEC("ffn_gate.weight", "mlp.gate_proj.weight", o->ffn, d, KIND_MATRIX, 0);
            SPEC("ffn_up.weight", "mlp.up_proj.weight", o->ffn, d, KIND_MATRIX, 0);
            SPEC("ffn_down.weight", "mlp.down_proj.weight", d, o->ffn, KIND_MATRIX, 0);
        }
        if (gemma) {
            SPEC("post_ffw_norm.weight", "post_feedforward_layernorm.weight", d, 0, KIND_NORM, 0);
        }
#undef EXPERTS
#undef SPEC
    }
    n = add_spec(s, n, "output_norm.weight", "model.norm.weight", d, 0, KIND_NORM, 0);
    if (!o->tied) {
        n = add_spec(s, n, "output.weight", "lm_head.weight", o->vocab, d, KIND_EMBED, 0);
    }
    for (size_t i = 0; gemma && i < n; i++) {
        s[i].hf_minus_one = s[i].kind == KIND_NORM;
    }
    *n_out = n;
    return s;
}

/* llama.cpp's llama_ftype for general.file_type (a label: loaders read each tensor's type). */
static uint32_t file_type(const gen_opts *o)
{
    if (o->recipe == RECIPE_K_M) {
        return o->type == TD_Q5_K ? 17 : 15; /* MOSTLY_Q5_K_M, MOSTLY_Q4_K_M */
    }
    switch (o->type) {
    case TD_F32:
        return 0;
    case TD_F16:
        return 1;
    case TD_Q4_0:
        return 2;
    case TD_Q4_1:
        return 3;
    case TD_Q8_0:
        return 7;
    case TD_Q5_0:
        return 8;
    case TD_Q5_1:
        return 9;
    case TD_Q2_K:
        return 10;
    case TD_Q3_K:
        return 11; /* Q3_K_S */
    case TD_Q4_K:
        return 14; /* Q4_K_S */
    case TD_Q5_K:
        return 16; /* Q5_K_S */
    case TD_Q6_K:
        return 18;
    case TD_IQ4_NL:
        return 25;
    case TD_IQ4_XS:
        return 30;
    case TD_BF16:
        return 32;
    default:
        return 0;
    }
}

/* llama-quantize's use_more_bits: the layers of a _M recipe that get Q6_K attn_v / ffn_down. */
static bool use_more_bits(int64_t il, int64_t n)
{
    return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
}

/* The layer of a "blk.N.*" tensor name, or -1. */
static int64_t tensor_layer(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0) {
        return -1;
    }
    return strtoll(name + 4, NULL, 10);
}

/*
 * The type tensor t is written in, as llama-quantize chooses it: 1-D tensors and the MoE router
 * (ffn_gate_inp, which llama.cpp's converter writes in F32 and llama-quantize never quantizes)
 * F32; with a _M recipe the output matrix (or a tied token embedding, which is the output) Q6_K,
 * and attn_v / attn_qkv (llama-quant.cpp's attn_v category) / ffn_down / ffn_down_exps Q6_K in
 * the use_more_bits layers; with exactly 8 experts attn_v / attn_qkv / attn_k Q8_0 and (Q4_K_M)
 * attn_output Q5_K; then, for a row length that is not a whole number of 256-element
 * super-blocks, llama-quantize's fallback (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K /
 * Q3_K / IQ4_XS -> IQ4_NL). 3-D expert tensors are quantized row by row like any matrix.
 */
static tdtype tensor_type(const gen_opts *o, const tspec *t)
{
    if (t->cols == 0 || t->kind == KIND_ROUTER) {
        return TD_F32;
    }
    tdtype ty = o->type;
    if (o->recipe == RECIPE_K_M) {
        const char *n = t->gguf;
        const int64_t il = tensor_layer(n);
        const bool eight = o->experts == 8;
        const bool output =
            strcmp(n, "output.weight") == 0 || (o->tied && strcmp(n, "token_embd.weight") == 0);
        const bool attn_v = strstr(n, ".attn_v.weight") || strstr(n, ".attn_qkv.weight");
        const bool more_bits =
            (attn_v || strstr(n, ".ffn_down.weight") || strstr(n, ".ffn_down_exps.weight")) &&
            use_more_bits(il, o->layers);
        if (output || more_bits) {
            ty = TD_Q6_K;
        }
        if (eight && (attn_v || strstr(n, ".attn_k.weight"))) {
            ty = TD_Q8_0;
        } else if (eight && o->type == TD_Q4_K && strstr(n, ".attn_output.weight")) {
            ty = TD_Q5_K;
        }
    }
    if (t->cols % td_block_elems(ty) != 0) {
        switch (ty) {
        case TD_Q4_K:
            return TD_Q5_0;
        case TD_Q5_K:
            return TD_Q5_1;
        case TD_Q6_K:
            return TD_Q8_0;
        default:
            return TD_IQ4_NL;
        }
    }
    return ty;
}

/* ---- GGUF -------------------------------------------------------------------------------- */

static int set_tokenizer(gguf_writer *w, const genvocab *v)
{
    int rc = gguf_writer_set_str(w, "tokenizer.ggml.model", v->model);
    if (rc == 0) {
        rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre);
    }
    if (rc == 0) {
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
                                     v->lens, v->n_tokens);
    }
    if (rc == 0 && v->scores != NULL) {
        rc = gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", v->scores, v->n_tokens);
    }
    if (rc == 0) {
        rc = gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v->types, v->n_tokens);
    }
    if (rc == 0 && v->scores == NULL) {
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                     NULL, v->n_merges);
    }
    const struct {
        const char *key;
        int64_t id;
    } ids[] = {{"tokenizer.ggml.bos_token_id", v->bos},
               {"tokenizer.ggml.eos_token_id", v->eos},
               {"tokenizer.ggml.unknown_token_id", v->unk},
               {"tokenizer.ggml.padding_token_id", v->pad}};
    for (size_t i = 0; rc == 0 && i < ARRAY_SIZE(ids); i++) {
        if (ids[i].id >= 0) {
            rc = gguf_writer_set_u32(w, ids[i].key, (uint32_t)ids[i].id);
        }
    }
    if (rc == 0) {
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    }
    if (rc == 0) {
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos);
    }
    if (rc == 0 && v->scores != NULL) {
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    }
    if (rc == 0 && v->chat_template != NULL) {
        rc = gguf_writer_set_str(w, "tokenizer.chat_template", v->chat_template);
    }
    /* Unigram / WordPiece keys, as convert_hf_to_gguf writes them */
    const bool t5 = strcmp(v->model, "t5") == 0, bert = strcmp(v->model, "bert") == 0;
    if (rc == 0 && t5 && v->charsmap != NULL) {
        rc = gguf_writer_set_arr_u8(w, "tokenizer.ggml.precompiled_charsmap", v->charsmap,
                                    v->charsmap_len);
    }
    if (rc == 0 && t5) {
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.remove_extra_whitespaces", v->remove_extra_ws);
    }
    if (rc == 0 && (t5 || bert) && v->sep >= 0) {
        rc = gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", (uint32_t)v->sep);
        if (rc == 0) {
            rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_sep_token", v->add_sep);
        }
    }
    if (rc == 0 && bert && v->lowercase >= 0) {
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.lowercase", v->lowercase != 0);
    }
    if (rc == 0 && bert && v->strip_accents >= 0) {
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.strip_accents",
                                  v->strip_accents != 0);
    }
    return rc;
}

/* key "<arch>.<suffix>" */
static const char *arch_key(char *key, size_t len, const gen_opts *o, const char *suffix)
{
    snprintf(key, len, "%s.%s", gguf_arch_names[o->arch], suffix);
    return key;
}

/* LongRoPE (phi3): the original context (ctx / factor) the long factors take over beyond. */
static int64_t longrope_orig_ctx(const gen_opts *o)
{
    const int64_t orig = (int64_t)((double)o->ctx / o->rope_factor);
    return orig > 0 ? orig : 1;
}

/* LongRoPE's magnitude as llama.cpp's converter writes it (rope.scaling.attn_factor) and
 * transformers computes it: sqrt(1 + ln s / ln original), s = ctx / original, for s > 1. */
static double longrope_attn_factor(const gen_opts *o)
{
    const double orig = (double)longrope_orig_ctx(o), s = (double)o->ctx / orig;
    return s > 1.0 ? sqrt(1.0 + log(s) / log(orig)) : 1.0;
}

/* LongRoPE's factor lists, one per rotated pair: short ones near 1, long ones rising from 1 to
 * about the factor (the shape of Phi-3.5's). Floats, so GGUF and config.json hold the same. */
static void longrope_factors(const gen_opts *o, int longer, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const double t = n > 1 ? (double)i / (double)(n - 1) : 0.0;
        out[i] =
            (float)(longer ? 1.0 + (o->rope_factor - 1.0) * t * t + 0.125 * t : 1.0 + 0.25 * t);
    }
}

static int64_t rot_dims(const gen_opts *o)
{
    return o->rotary_dim > 0 ? o->rotary_dim : o->head_dim;
}

/*
 * The architecture keys llama.cpp's converter writes: gemma2's sliding window and soft-caps
 * (always), gemma3's sliding window (unless every layer is global), local RoPE base and final
 * soft-cap (when set), the sliding-window period when it is not the architecture's default
 * (llama.cpp reads attention.sliding_window_pattern as a number or a per-layer array), phi3's
 * sliding window (0: none) and original context length, and the experts.
 */
static int set_arch_hparams(gguf_writer *w, const gen_opts *o)
{
    char key[128];
    int rc = 0;
    if (is_gemma(o) && (o->arch == ARCH_GEMMA2 || o->swa_pattern != 1)) {
        rc = gguf_writer_set_u32(w, arch_key(key, sizeof(key), o, "attention.sliding_window"),
                                 (uint32_t)o->sliding_window);
        if (rc == 0 && o->swa_pattern != default_swa_pattern(o)) {
            rc = gguf_writer_set_u32(
                w, arch_key(key, sizeof(key), o, "attention.sliding_window_pattern"),
                (uint32_t)o->swa_pattern);
        }
        if (rc == 0 && o->arch == ARCH_GEMMA3) {
            rc = gguf_writer_set_f32(w, arch_key(key, sizeof(key), o, "rope.freq_base_swa"),
                                     (float)o->rope_base_swa);
        }
    }
    if (rc == 0 && o->arch == ARCH_GEMMA2) {
        rc = gguf_writer_set_f32(w, arch_key(key, sizeof(key), o, "attn_logit_softcapping"),
                                 (float)o->attn_softcap);
    }
    if (rc == 0 && is_gemma(o) && o->final_softcap > 0.0) {
        rc = gguf_writer_set_f32(w, arch_key(key, sizeof(key), o, "final_logit_softcapping"),
                                 (float)o->final_softcap);
    }
    if (rc == 0 && o->arch == ARCH_PHI3) {
        rc = gguf_writer_set_u32(w, arch_key(key, sizeof(key), o, "attention.sliding_window"), 0);
        if (rc == 0) {
            const int lr = o->rope_scaling == ROPE_SCALING_LONGROPE;
            rc = gguf_writer_set_u32(
                w, arch_key(key, sizeof(key), o, "rope.scaling.original_context_length"),
                (uint32_t)(lr ? longrope_orig_ctx(o) : o->ctx));
            if (rc == 0 && lr) {
                rc = gguf_writer_set_f32(w,
                                         arch_key(key, sizeof(key), o, "rope.scaling.attn_factor"),
                                         (float)longrope_attn_factor(o));
            }
        }
    }
    if (rc == 0 && is_moe(o)) {
        rc = gguf_writer_set_u32(w, arch_key(key, sizeof(key), o, "expert_count"),
                                 (uint32_t)o->experts);
        if (rc == 0) {
            rc = gguf_writer_set_u32(w, arch_key(key, sizeof(key), o, "expert_used_count"),
                                     (uint32_t)o->experts_used);
        }
        if (rc == 0 && o->arch != ARCH_MIXTRAL) {
            rc = gguf_writer_set_u32(w, arch_key(key, sizeof(key), o, "expert_feed_forward_length"),
                                     (uint32_t)o->expert_ffn);
        }
        if (rc == 0 && o->arch == ARCH_QWEN2MOE) {
            rc = gguf_writer_set_u32(
                w, arch_key(key, sizeof(key), o, "expert_shared_feed_forward_length"),
                (uint32_t)o->ffn);
        }
    }
    return rc;
}

static int set_hparams(gguf_writer *w, const gen_opts *o)
{
    const char *a = gguf_arch_names[o->arch];
    char key[128];
    int rc = gguf_writer_set_str(w, "general.architecture", a);
    if (rc == 0) {
        rc = gguf_writer_set_str(w, "general.name", o->name);
    }
    if (rc == 0) {
        rc = gguf_writer_set_u32(w, "general.file_type", file_type(o));
    }
    if (rc == 0) {
        rc = gguf_writer_set_u32(w, "general.quantization_version", 2);
    }
    const struct {
        const char *suffix;
        int64_t v;
    } u[] = {{"vocab_size", o->vocab},
             {"context_length", o->ctx},
             {"embedding_length", o->dim},
             {"block_count", o->layers},
             {"feed_forward_length", o->ffn},
             {"attention.head_count", o->heads},
             {"attention.head_count_kv", o->kv_heads},
             {"rope.dimension_count", o->rotary_dim > 0 ? o->rotary_dim : o->head_dim}};
    for (size_t i = 0; rc == 0 && i < ARRAY_SIZE(u); i++) {
        snprintf(key, sizeof(key), "%s.%s", a, u[i].suffix);
        rc = gguf_writer_set_u32(w, key, (uint32_t)u[i].v);
    }
    if (rc == 0 && (o->head_dim * o->heads != o->dim || is_gemma(o))) {
        snprintf(key, sizeof(key), "%s.attention.key_length", a);
        rc = gguf_writer_set_u32(w, key, (uint32_t)o->head_dim);
        if (rc == 0) {
            snprintf(key, sizeof(key), "%s.attention.value_length", a);
            rc = gguf_writer_set_u32(w, key, (uint32_t)o->head_dim);
        }
    }
    if (rc == 0) {
        snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", a);
        rc = gguf_writer_set_f32(w, key, (float)o->rms_eps);
    }
    if (rc == 0) {
        snprintf(key, sizeof(key), "%s.rope.freq_base", a);
        rc = gguf_writer_set_f32(w, key, (float)o->rope_base);
    }
    /* linear and YaRN as llama.cpp's converter writes them (Llama 3: add_rope_freqs) */
    const int yarn = o->rope_scaling == ROPE_SCALING_YARN;
    if (rc == 0 && (o->rope_scaling == ROPE_SCALING_LINEAR || yarn)) {
        snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
        rc = gguf_writer_set_str(w, key, yarn ? "yarn" : "linear");
        if (rc == 0) {
            snprintf(key, sizeof(key), "%s.rope.scaling.factor", a);
            rc = gguf_writer_set_f32(w, key, (float)o->rope_factor);
        }
        if (rc == 0 && yarn) {
            snprintf(key, sizeof(key), "%s.rope.scaling.original_context_length", a);
            rc = gguf_writer_set_u32(w, key, YARN_ORIG_CTX);
        }
    }
    return rc ? rc : set_arch_hparams(w, o);
}

/* Llama 3: the converter writes the frequency divisors as the tensor rope_freqs.weight;
 * LongRoPE its two lists as rope_factors_long.weight and rope_factors_short.weight. */
static int add_rope_freqs(gguf_writer *w, const gen_opts *o)
{
    if (o->rope_scaling == ROPE_SCALING_LONGROPE) {
        const int64_t n = rot_dims(o) / 2;
        float *f = malloc(sizeof(float) * (size_t)n);
        if (!f) {
            return -ENOMEM;
        }
        int64_t ne[1] = {n};
        int rc = 0;
        for (int longer = 1; rc == 0 && longer >= 0; longer--) {
            longrope_factors(o, longer, f, n);
            rc = gguf_writer_add_tensor(
                w, longer ? "rope_factors_long.weight" : "rope_factors_short.weight", TD_F32, 1, ne,
                f, sizeof(float) * (size_t)n);
        }
        free(f);
        return rc;
    }
    if (o->rope_scaling != ROPE_SCALING_LLAMA3) {
        return 0;
    }
    const int64_t n = o->head_dim / 2;
    float *f = malloc(sizeof(float) * (size_t)n);
    if (!f) {
        return -ENOMEM;
    }
    model_llama3_rope_freqs(f, (int)o->head_dim, (float)o->rope_base, (float)o->rope_factor,
                            (float)LLAMA3_LOW_FREQ, (float)LLAMA3_HIGH_FREQ,
                            (float)LLAMA3_ORIG_CTX);
    int64_t ne[1] = {n};
    int rc = gguf_writer_add_tensor(w, "rope_freqs.weight", TD_F32, 1, ne, f, sizeof(float) * n);
    free(f);
    return rc;
}

static int write_gguf(const gen_opts *o, const genvocab *v, const tspec *specs, size_t n_specs,
                      char *err, size_t errlen)
{
    gguf_writer *w = gguf_writer_new(0);
    if (w == NULL) {
        tandem_set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = set_hparams(w, o);
    if (rc == 0) {
        rc = set_tokenizer(w, v);
    }
    if (rc == 0) {
        rc = add_rope_freqs(w, o);
    }
    if (rc < 0) {
        tandem_set_err(err, errlen, "setting GGUF metadata: %s", tandem_strerror(rc));
        goto out;
    }
    for (size_t i = 0; i < n_specs; i++) {
        const tspec *t = &specs[i];
        float *x = gen_values(o, t);
        tdtype type = tensor_type(o, t);
        int64_t cols = t->cols > 0 ? t->cols : t->rows;
        int64_t rows = t->cols > 0 ? t->rows * t->planes : 1; /* a 3-D tensor's planes' rows */
        size_t bytes = td_row_bytes(type, cols) * (size_t)rows;
        void *data = x != NULL && bytes > 0 ? malloc(bytes) : NULL;
        if (data == NULL) {
            free(x);
            tandem_set_err(err, errlen, "%s: out of memory", t->gguf);
            rc = -ENOMEM;
            goto out;
        }
        genq_convert(type, x, rows, cols, data);
        int64_t ne[3] = {cols, t->rows, t->planes};
        const int n_dims = t->cols == 0 ? 1 : t->planes > 1 ? 3 : 2;
        rc = gguf_writer_add_tensor(w, t->gguf, type, n_dims, ne, data, bytes);
        free(x);
        free(data);
        if (rc < 0) {
            tandem_set_err(err, errlen, "%s: adding tensor: %s", t->gguf, tandem_strerror(rc));
            goto out;
        }
    }
    rc = gguf_writer_write_file(w, o->out, err, errlen);
out:
    gguf_writer_free(w);
    return rc;
}

/* ---- Hugging Face ------------------------------------------------------------------------ */

static int write_json(const char *dir, const char *file, struct json_object *o, char *err,
                      size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    struct buf b;
    buf_init(&b, (size_t)1 << 30);
    int rc = json_to_buf(o, 1, &b);
    if (rc == 0) {
        rc = buf_appends(&b, "\n");
    }
    if (rc < 0) {
        tandem_set_err(err, errlen, "%s: serializing: %s", path, tandem_strerror(rc));
    } else {
        rc = genf_write_bytes(path, b.data, b.len, err, errlen);
    }
    buf_free(&b);
    return rc;
}

static const char *st_dtype(tdtype t)
{
    return t == TD_F16 ? "F16" : t == TD_BF16 ? "BF16" : "F32";
}

/* The safetensors dtype of t: matrices in --type, norms, biases and the router F32. */
static tdtype hf_type(const gen_opts *o, const tspec *t)
{
    return t->cols > 0 && t->kind != KIND_ROUTER ? o->type : TD_F32;
}

/* HF name of plane p of t (experts: "<prefix>p<suffix>"). */
static void hf_name(const tspec *t, int64_t p, char *out, size_t len)
{
    if (t->planes > 1) {
        snprintf(out, len, "%s%lld%s", t->hf, (long long)p, t->hf_suffix);
    } else {
        snprintf(out, len, "%s", t->hf);
    }
}

/* The safetensors header: every tensor (each expert its own) in file order. */
static int st_header(const gen_opts *o, const tspec *specs, size_t n_specs, struct buf *b)
{
    struct json_object *hdr = json_object_new_object();
    struct json_object *meta = json_object_new_object();
    int rc = -ENOMEM;
    if (hdr == NULL || meta == NULL || json_object_object_add(hdr, "__metadata__", meta) != 0) {
        json_object_put(meta);
        goto out;
    }
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    uint64_t off = 0;
    for (size_t i = 0; i < n_specs; i++) {
        const tspec *t = &specs[i];
        tdtype type = hf_type(o, t);
        uint64_t bytes =
            (uint64_t)t->rows * (uint64_t)(t->cols > 0 ? t->cols : 1) * (type == TD_F32 ? 4u : 2u);
        for (int64_t p = 0; p < t->planes; p++) {
            char name[160];
            hf_name(t, p, name, sizeof(name));
            struct json_object *e = json_object_new_object();
            struct json_object *shape = json_object_new_array();
            struct json_object *offs = json_object_new_array();
            if (e == NULL || shape == NULL || offs == NULL ||
                json_object_object_add(hdr, name, e) != 0) {
                json_object_put(e);
                json_object_put(shape);
                json_object_put(offs);
                goto out;
            }
            json_object_object_add(e, "dtype", json_object_new_string(st_dtype(type)));
            json_object_array_add(shape, json_object_new_int64(t->rows));
            if (t->cols > 0) {
                json_object_array_add(shape, json_object_new_int64(t->cols));
            }
            json_object_object_add(e, "shape", shape);
            json_object_array_add(offs, json_object_new_int64((int64_t)off));
            json_object_array_add(offs, json_object_new_int64((int64_t)(off + bytes)));
            json_object_object_add(e, "data_offsets", offs);
            off += bytes;
        }
    }
    rc = json_to_buf(hdr, 0, b);
    while (rc == 0 && b->len % 8 != 0) {
        rc = buf_append(b, " ", 1);
    }
out:
    json_object_put(hdr);
    return rc;
}

/* Writes tensor t's HF form: llama Q/K un-permuted, gemma norms minus 1, one tensor per
 * expert. 0, -ENOMEM or -EIO. */
static int st_write_tensor(const gen_opts *o, const tspec *t, FILE *f)
{
    float *x = gen_values(o, t);
    const int64_t cols = t->cols > 0 ? t->cols : t->rows;
    const int64_t rows = t->cols > 0 ? t->rows : 1; /* per plane */
    const size_t plane = (size_t)(rows * cols);
    const tdtype type = hf_type(o, t);
    float *hfx = x != NULL && t->perm_heads > 0 ? malloc(plane * sizeof(float)) : NULL;
    const size_t data_bytes = td_row_bytes(type, cols) * (size_t)rows;
    void *data = x != NULL && data_bytes > 0 ? malloc(data_bytes) : NULL;
    int rc = 0;
    if (x == NULL || data == NULL || (t->perm_heads > 0 && hfx == NULL)) {
        rc = -ENOMEM;
        goto out;
    }
    if (t->hf_minus_one) {
        for (size_t i = 0; i < plane; i++) {
            x[i] -= 1.0f; /* exact: the values lie in [0.9, 1.1] */
        }
    }
    for (int64_t p = 0; rc == 0 && p < t->planes; p++) {
        const float *src = x + (size_t)p * plane;
        if (hfx != NULL) {
            genq_permute_qk(src, hfx, t->perm_heads, rows / t->perm_heads, cols, 1);
            src = hfx;
        }
        size_t bytes = genq_convert(type, src, rows, cols, data);
        rc = fwrite(data, 1, bytes, f) != bytes ? -EIO : 0;
    }
out:
    free(x);
    free(hfx);
    free(data);
    return rc;
}

struct st_job {
    const gen_opts *o;
    const tspec *specs;
};

static int st_write_one(void *ud, size_t i, FILE *f)
{
    const struct st_job *j = ud;
    return st_write_tensor(j->o, &j->specs[i], f);
}

static int write_safetensors(const gen_opts *o, const tspec *specs, size_t n_specs, char *err,
                             size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/model.safetensors", o->out);
    struct buf b;
    buf_init(&b, (size_t)64 << 20);
    int rc = st_header(o, specs, n_specs, &b);
    if (rc < 0) {
        tandem_set_err(err, errlen, "%s: header: %s", path, tandem_strerror(rc));
    } else {
        struct st_job job = {.o = o, .specs = specs};
        rc = genf_write_safetensors(path, &b, st_write_one, &job, n_specs, err, errlen);
    }
    buf_free(&b);
    return rc;
}

/* ["sliding_attention" | "full_attention"] per layer, as transformers' layer_types. */
static struct json_object *layer_types(const gen_opts *o)
{
    struct json_object *a = json_object_new_array();
    for (int64_t il = 0; a != NULL && il < o->layers; il++) {
        json_object_array_add(a, json_object_new_string(layer_slides(o, il) ? "sliding_attention"
                                                                            : "full_attention"));
    }
    return a;
}

static struct json_object *float_or_null(double v)
{
    return v > 0.0 ? json_object_new_double(v) : NULL;
}

/*
 * config.json's architecture fields, as the checkpoints these stand in for have them
 * (google/gemma-2-2b-it, google/gemma-3-1b-it, microsoft/Phi-3-mini-4k-instruct and
 * Phi-4-mini's partial_rotary_factor, Qwen/Qwen3-30B-A3B, mistralai/Mixtral-8x7B-v0.1,
 * mistralai/Mistral-7B-v0.1). -ENOMEM or 0.
 */
static int hf_arch_config(const gen_opts *o, struct json_object *cfg)
{
    int rc = 0;
#define ADD(key, value) rc |= json_object_object_add(cfg, key, value)
    if (is_gemma(o)) {
        /* the GGUF's attention scale: 1 / sqrt(head_dim), or llama.cpp's 27B rule */
        const bool big = o->layers == (o->arch == ARCH_GEMMA2 ? 46 : 62);
        ADD("hidden_activation", json_object_new_string("gelu_pytorch_tanh"));
        ADD("query_pre_attn_scalar", json_object_new_int64(big ? o->dim / o->heads : o->head_dim));
        ADD("sliding_window", json_object_new_int64(o->sliding_window));
        ADD("attn_logit_softcapping", float_or_null(o->attn_softcap));
        ADD("final_logit_softcapping", float_or_null(o->final_softcap));
        if (o->arch == ARCH_GEMMA3) {
            ADD("rope_local_base_freq", json_object_new_double(o->rope_base_swa));
            ADD("sliding_window_pattern", json_object_new_int64(o->swa_pattern));
        }
        if (o->arch == ARCH_GEMMA3 || o->swa_pattern != default_swa_pattern(o)) {
            ADD("layer_types", layer_types(o));
        }
    } else if (o->arch == ARCH_PHI3) {
        ADD("partial_rotary_factor",
            json_object_new_double(o->rotary_dim > 0 ? (double)o->rotary_dim / (double)o->head_dim
                                                     : 1.0));
        ADD("original_max_position_embeddings",
            json_object_new_int64(o->rope_scaling == ROPE_SCALING_LONGROPE ? longrope_orig_ctx(o)
                                                                           : o->ctx));
        ADD("sliding_window", NULL);
    } else if (o->arch == ARCH_QWEN3MOE || o->arch == ARCH_QWEN2MOE) {
        const int q2 = o->arch == ARCH_QWEN2MOE;
        ADD("num_experts", json_object_new_int64(o->experts));
        ADD("num_experts_per_tok", json_object_new_int64(o->experts_used));
        ADD("moe_intermediate_size", json_object_new_int64(o->expert_ffn));
        if (q2) {
            ADD("shared_expert_intermediate_size", json_object_new_int64(o->ffn));
        }
        ADD("norm_topk_prob", json_object_new_boolean(!q2));
        ADD("decoder_sparse_step", json_object_new_int64(1));
        ADD("mlp_only_layers", json_object_new_array());
        ADD("use_sliding_window", json_object_new_boolean(0));
        ADD("sliding_window", NULL);
    } else if (o->arch == ARCH_MIXTRAL) {
        ADD("num_local_experts", json_object_new_int64(o->experts));
        ADD("num_experts_per_tok", json_object_new_int64(o->experts_used));
        ADD("sliding_window", NULL);
    } else if (o->arch == ARCH_LLAMA && o->sliding_window > 0) {
        ADD("sliding_window", json_object_new_int64(o->sliding_window));
    }
#undef ADD
    return rc != 0 ? -ENOMEM : 0;
}

static int write_hf(const gen_opts *o, const genvocab *v, const tspec *specs, size_t n_specs,
                    char *err, size_t errlen)
{
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST) {
        tandem_set_err(err, errlen, "%s: %s", o->out, strerror(errno));
        return -EIO;
    }
    struct json_object *cfg = json_object_new_object();
    struct json_object *archs = json_object_new_array();
    struct json_object *gen = json_object_new_object();
    int rc = -ENOMEM;
    if (cfg == NULL || archs == NULL || gen == NULL) {
        json_object_put(archs);
        goto out;
    }
    /* Mistral: Llama with a sliding window */
    const bool mistral = o->arch == ARCH_LLAMA && o->sliding_window > 0;
    json_object_array_add(
        archs, json_object_new_string(mistral ? "MistralForCausalLM" : hf_arch_names[o->arch]));
    json_object_object_add(cfg, "architectures", archs);
    json_object_object_add(cfg, "model_type",
                           json_object_new_string(mistral ? "mistral" : hf_model_types[o->arch]));
    json_object_object_add(cfg, "hidden_size", json_object_new_int64(o->dim));
    json_object_object_add(cfg, "intermediate_size", json_object_new_int64(o->ffn));
    json_object_object_add(cfg, "num_hidden_layers", json_object_new_int64(o->layers));
    json_object_object_add(cfg, "num_attention_heads", json_object_new_int64(o->heads));
    json_object_object_add(cfg, "num_key_value_heads", json_object_new_int64(o->kv_heads));
    json_object_object_add(cfg, "head_dim", json_object_new_int64(o->head_dim));
    json_object_object_add(cfg, "hidden_act",
                           json_object_new_string(is_gemma(o) ? "gelu_pytorch_tanh" : "silu"));
    json_object_object_add(cfg, "max_position_embeddings", json_object_new_int64(o->ctx));
    json_object_object_add(cfg, "rms_norm_eps", json_object_new_double(o->rms_eps));
    json_object_object_add(cfg, "rope_theta", json_object_new_double(o->rope_base));
    if (o->rope_scaling == ROPE_SCALING_LONGROPE) {
        /* as Phi-3.5's config.json: type, the two lists, no factor */
        struct json_object *rs = json_object_new_object();
        json_object_object_add(rs, "type", json_object_new_string("longrope"));
        const int64_t n = rot_dims(o) / 2;
        float f[2048];
        for (int longer = 1; longer >= 0 && n <= 2048; longer--) {
            struct json_object *list = json_object_new_array();
            longrope_factors(o, longer, f, n);
            for (int64_t i = 0; i < n; i++) {
                json_object_array_add(list, json_object_new_double((double)f[i]));
            }
            json_object_object_add(rs, longer ? "long_factor" : "short_factor", list);
        }
        json_object_object_add(cfg, "rope_scaling", rs);
    } else if (o->rope_scaling != ROPE_SCALING_NONE) {
        const int llama3 = o->rope_scaling == ROPE_SCALING_LLAMA3;
        const int yarn = o->rope_scaling == ROPE_SCALING_YARN;
        struct json_object *rs = json_object_new_object();
        json_object_object_add(rs, "rope_type",
                               json_object_new_string(llama3 ? "llama3"
                                                      : yarn ? "yarn"
                                                             : "linear"));
        json_object_object_add(rs, "factor", json_object_new_double(o->rope_factor));
        if (yarn) {
            json_object_object_add(rs, "original_max_position_embeddings",
                                   json_object_new_int64(YARN_ORIG_CTX));
        }
        if (llama3) {
            json_object_object_add(rs, "low_freq_factor", json_object_new_double(LLAMA3_LOW_FREQ));
            json_object_object_add(rs, "high_freq_factor",
                                   json_object_new_double(LLAMA3_HIGH_FREQ));
            json_object_object_add(rs, "original_max_position_embeddings",
                                   json_object_new_int64((int64_t)LLAMA3_ORIG_CTX));
        }
        json_object_object_add(cfg, "rope_scaling", rs);
    }
    json_object_object_add(cfg, "vocab_size", json_object_new_int64(o->vocab));
    json_object_object_add(cfg, "tie_word_embeddings", json_object_new_boolean(o->tied));
    json_object_object_add(
        cfg, "attention_bias",
        json_object_new_boolean(o->arch == ARCH_QWEN2 || o->arch == ARCH_QWEN2MOE));
    if (hf_arch_config(o, cfg) != 0) {
        goto out;
    }
    json_object_object_add(cfg, "torch_dtype",
                           json_object_new_string(o->type == TD_F16    ? "float16"
                                                  : o->type == TD_BF16 ? "bfloat16"
                                                                       : "float32"));
    if (v->bos >= 0) {
        json_object_object_add(cfg, "bos_token_id", json_object_new_int64(v->bos));
        json_object_object_add(gen, "bos_token_id", json_object_new_int64(v->bos));
    }
    if (v->eos >= 0) {
        json_object_object_add(cfg, "eos_token_id", json_object_new_int64(v->eos));
        json_object_object_add(gen, "eos_token_id", json_object_new_int64(v->eos));
    }
    if (v->pad >= 0) {
        json_object_object_add(gen, "pad_token_id", json_object_new_int64(v->pad));
    }
    json_object_object_add(gen, "do_sample", json_object_new_boolean(0));
    rc = write_json(o->out, "config.json", cfg, err, errlen);
    if (rc == 0) {
        rc = write_json(o->out, "generation_config.json", gen, err, errlen);
    }
    char path[4096];
    if (rc == 0) {
        snprintf(path, sizeof(path), "%s/tokenizer.json", o->out);
        rc = genf_write_bytes(path, v->tokenizer_json, v->tokenizer_json_len, err, errlen);
    }
    if (rc == 0 && v->tokenizer_config_json != NULL) {
        snprintf(path, sizeof(path), "%s/tokenizer_config.json", o->out);
        rc = genf_write_bytes(path, v->tokenizer_config_json, v->tokenizer_config_json_len, err,
                              errlen);
    }
    if (rc == 0) {
        rc = write_safetensors(o, specs, n_specs, err, errlen);
    }
out:
    if (rc == -ENOMEM) {
        tandem_set_err(err, errlen, "%s: out of memory", o->out);
    }
    json_object_put(cfg);
    json_object_put(gen);
    return rc;
}

/* Bytes on disk of what was written: the GGUF file, or the files of the HF folder. */
static uint64_t written_bytes(const gen_opts *o)
{
    static const char *const hf_files[] = {"config.json", "generation_config.json",
                                           "tokenizer.json", "tokenizer_config.json",
                                           "model.safetensors"};
    struct stat st;
    if (!o->hf) {
        return stat(o->out, &st) == 0 ? (uint64_t)st.st_size : 0;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < sizeof(hf_files) / sizeof(hf_files[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", o->out, hf_files[i]);
        if (stat(path, &st) == 0) {
            total += (uint64_t)st.st_size;
        }
    }
    return total;
}

/* One line on success, so a user sees what the shape flags produced. */
static void print_summary(const gen_opts *o, const tspec *specs, size_t n_specs)
{
    int64_t params = 0;
    for (size_t i = 0; i < n_specs; i++) {
        params += specs[i].planes * specs[i].rows * (specs[i].cols ? specs[i].cols : 1);
    }
    printf("tandem-genmodel: wrote %s (%s %s): %s, %lld layers, dim %lld, %lld heads (%lld KV, "
           "head dim %lld), ffn %lld, vocab %lld (%s), ctx %lld, %s matrices%s, %.2f M params, "
           "%.2f MiB\n",
           o->out, o->hf ? "Hugging Face folder" : "GGUF", o->hf ? "safetensors" : "v3",
           arch_names[o->arch], (long long)o->layers, (long long)o->dim, (long long)o->heads,
           (long long)o->kv_heads, (long long)o->head_dim, (long long)o->ffn, (long long)o->vocab,
           o->tokenizer ? "tokenizer" : "synthetic", (long long)o->ctx,
           o->recipe == RECIPE_K_M ? (o->type == TD_Q5_K ? "Q5_K_M" : "Q4_K_M") : td_name(o->type),
           o->tied ? ", tied output" : "", (double)params / 1e6,
           (double)written_bytes(o) / (1024.0 * 1024.0));
}

/* ---- command line ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f, "usage: tandem-genmodel --out PATH [options]\n"
               "  --format gguf|hf        GGUF file (default) or Hugging Face folder\n"
               "  --arch A                llama qwen2 qwen3 qwen2moe qwen3moe phi3 gemma2 gemma3\n"
               "                          mixtral\n"
               "                          (default llama; mixtral: GGUF llama with experts)\n"
               "  --layers N --dim D --heads H --kv-heads K --ffn F\n"
               "                          (defaults 2, 128, 4, = heads, 256)\n"
               "  --head-dim HD           (default D/H)\n"
               "  --vocab V               synthetic vocabulary size (default 512); with\n"
               "                          --tokenizer a minimum (padded with unused tokens)\n"
               "  --ctx C                 context length (default 2048)\n"
               "  --type T                matrix type (default f32; hf: f32/f16/bf16): f32 f16\n"
               "                          bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q2_k q3_k q4_k\n"
               "                          q5_k q6_k iq4_xs, or llama-quantize's mixes q4_k_m\n"
               "                          q5_k_m; rows that are not whole 256-element blocks\n"
               "                          fall back as llama-quantize does (q4_k -> q5_0, ...)\n"
               "  --tied                  tie the output to the token embedding\n"
               "  --seed S                (default 1)\n"
               "  --rope-base B           (default 10000)\n"
               "  --rope-scaling linear:F|llama3:F|yarn:F|longrope:F\n"
               "                          RoPE scaling: linear by F, Llama 3.1's (factor F,\n"
               "                          low/high frequency factors 1/4, original context 8192),\n"
               "                          YaRN (factor F, original context 4096, beta_fast\n"
               "                          32, beta_slow 1; the context length becomes at least\n"
               "                          4096 x F), or phi3's LongRoPE (original context\n"
               "                          --ctx / F, short and long factor lists)\n"
               "  --rms-eps E             (default 1e-5)\n"
               "  --tokenizer PATH        a real tokenizer.json or a folder holding one\n"
               "  --tokenizer-pre NAME    override the detected GGUF pre-tokenizer name\n"
               "  --name NAME             general.name (default tandem-test)\n"
               "  --experts N --experts-used K\n"
               "                          qwen2moe / qwen3moe / mixtral experts (default 4, 2 per\n"
               "                          token; qwen2moe adds a shared expert --ffn wide)\n"
               "  --expert-ffn F          qwen2moe / qwen3moe expert hidden size (default --ffn;\n"
               "                          mixtral's experts are --ffn wide)\n"
               "  --sliding-window W      gemma2/gemma3 local layers' window (default 4096);\n"
               "                          llama: an HF MistralForCausalLM with that window (the\n"
               "                          GGUF gets none: llama.cpp ignores it for llama)\n"
               "  --swa-pattern N         gemma: every Nth layer global (default 2 / 6; 1: none\n"
               "                          slides)\n"
               "  --rope-base-swa B       gemma3 local layers' RoPE base (default 10000)\n"
               "  --rotary-dim R          phi3 partial rotary dims (default head dim)\n"
               "  --attn-softcap C --final-softcap C\n"
               "                          gemma2 soft-capping (default 50 and 30); gemma3's\n"
               "                          final soft-cap (default none)\n"
               "  --help, --version\n");
}

/* --rope-scaling linear:F | llama3:F | yarn:F | longrope:F */
static int parse_rope_scaling(const char *s, gen_opts *o)
{
    const char *colon = strchr(s, ':');
    if (colon && (size_t)(colon - s) == 6 && strncmp(s, "linear", 6) == 0) {
        o->rope_scaling = ROPE_SCALING_LINEAR;
    } else if (colon && (size_t)(colon - s) == 6 && strncmp(s, "llama3", 6) == 0) {
        o->rope_scaling = ROPE_SCALING_LLAMA3;
    } else if (colon && (size_t)(colon - s) == 4 && strncmp(s, "yarn", 4) == 0) {
        o->rope_scaling = ROPE_SCALING_YARN;
    } else if (colon && (size_t)(colon - s) == 8 && strncmp(s, "longrope", 8) == 0) {
        o->rope_scaling = ROPE_SCALING_LONGROPE;
    } else {
        fprintf(stderr,
                "tandem-genmodel: --rope-scaling: expected linear:F, llama3:F, yarn:F or "
                "longrope:F, got '%s'\n",
                s);
        return -EINVAL;
    }
    return genf_parse_positive(PROG, "--rope-scaling", colon + 1, &o->rope_factor);
}

static int parse_args(int argc, char **argv, gen_opts *o, int64_t *vocab_arg)
{
    static const struct option longopts[] = {{"format", required_argument, 0, 'f'},
                                             {"out", required_argument, 0, 'o'},
                                             {"arch", required_argument, 0, 'a'},
                                             {"layers", required_argument, 0, 'l'},
                                             {"dim", required_argument, 0, 'd'},
                                             {"heads", required_argument, 0, 'H'},
                                             {"kv-heads", required_argument, 0, 'K'},
                                             {"head-dim", required_argument, 0, 'D'},
                                             {"ffn", required_argument, 0, 'F'},
                                             {"vocab", required_argument, 0, 'V'},
                                             {"ctx", required_argument, 0, 'c'},
                                             {"type", required_argument, 0, 't'},
                                             {"tied", no_argument, 0, 'T'},
                                             {"seed", required_argument, 0, 's'},
                                             {"rope-base", required_argument, 0, 'r'},
                                             {"rope-scaling", required_argument, 0, 'R'},
                                             {"rms-eps", required_argument, 0, 'e'},
                                             {"tokenizer", required_argument, 0, 'k'},
                                             {"tokenizer-pre", required_argument, 0, 'p'},
                                             {"name", required_argument, 0, 'n'},
                                             {"experts", required_argument, 0, 'E'},
                                             {"experts-used", required_argument, 0, 'U'},
                                             {"expert-ffn", required_argument, 0, 'X'},
                                             {"sliding-window", required_argument, 0, 'W'},
                                             {"swa-pattern", required_argument, 0, 'P'},
                                             {"rope-base-swa", required_argument, 0, 'B'},
                                             {"rotary-dim", required_argument, 0, 'Q'},
                                             {"attn-softcap", required_argument, 0, 'A'},
                                             {"final-softcap", required_argument, 0, 'C'},
                                             {"help", no_argument, 0, 'h'},
                                             {"version", no_argument, 0, 'v'},
                                             {0, 0, 0, 0}};
    static const char *const formats[] = {"gguf", "hf"};
    static const char *const types[] = {"f32",  "f16",  "bf16",   "q8_0",   "q4_0",  "q4_1",
                                        "q5_0", "q5_1", "iq4_nl", "q2_k",   "q3_k",  "q4_k",
                                        "q5_k", "q6_k", "iq4_xs", "q4_k_m", "q5_k_m"};
    static const tdtype type_ids[] = {TD_F32,  TD_F16,  TD_BF16,   TD_Q8_0, TD_Q4_0, TD_Q4_1,
                                      TD_Q5_0, TD_Q5_1, TD_IQ4_NL, TD_Q2_K, TD_Q3_K, TD_Q4_K,
                                      TD_Q5_K, TD_Q6_K, TD_IQ4_XS, TD_Q4_K, TD_Q5_K};
    const int n_types = (int)(sizeof(types) / sizeof(types[0]));
    int c, idx, rc = 0;
    int64_t seed = 1;
    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            rc = genf_pick(PROG, "--format", optarg, formats, 2, &o->hf);
            break;
        case 'o':
            o->out = optarg;
            break;
        case 'a':
            rc = genf_pick(PROG, "--arch", optarg, arch_names, N_ARCHS, &o->arch);
            break;
        case 'l':
            rc = genf_parse_i64(PROG, "--layers", optarg, 1, MAX_LAYERS, &o->layers);
            break;
        case 'd':
            rc = genf_parse_i64(PROG, "--dim", optarg, 1, MAX_DIM, &o->dim);
            break;
        case 'H':
            rc = genf_parse_i64(PROG, "--heads", optarg, 1, 4096, &o->heads);
            break;
        case 'K':
            rc = genf_parse_i64(PROG, "--kv-heads", optarg, 1, 4096, &o->kv_heads);
            break;
        case 'D':
            rc = genf_parse_i64(PROG, "--head-dim", optarg, 2, 4096, &o->head_dim);
            break;
        case 'F':
            rc = genf_parse_i64(PROG, "--ffn", optarg, 1, MAX_DIM, &o->ffn);
            break;
        case 'V':
            rc = genf_parse_i64(PROG, "--vocab", optarg, 1, GENV_MAX_TOKENS, vocab_arg);
            break;
        case 'c':
            rc = genf_parse_i64(PROG, "--ctx", optarg, 1, 1 << 24, &o->ctx);
            break;
        case 't':
            rc = genf_pick(PROG, "--type", optarg, types, n_types, &idx);
            if (rc == 0) {
                o->type = type_ids[idx];
                o->recipe = idx >= n_types - 2 ? RECIPE_K_M : RECIPE_NONE;
            }
            break;
        case 'T':
            o->tied = 1;
            break;
        case 's':
            rc = genf_parse_i64(PROG, "--seed", optarg, 0, INT64_MAX, &seed);
            o->seed = (uint64_t)seed;
            break;
        case 'r':
            rc = genf_parse_positive(PROG, "--rope-base", optarg, &o->rope_base);
            break;
        case 'R':
            rc = parse_rope_scaling(optarg, o);
            break;
        case 'e':
            rc = genf_parse_positive(PROG, "--rms-eps", optarg, &o->rms_eps);
            break;
        case 'k':
            o->tokenizer = optarg;
            break;
        case 'p':
            o->tokenizer_pre = optarg;
            break;
        case 'n':
            o->name = optarg;
            break;
        case 'E':
            rc = genf_parse_i64(PROG, "--experts", optarg, 1, 1024, &o->experts);
            break;
        case 'U':
            rc = genf_parse_i64(PROG, "--experts-used", optarg, 1, 1024, &o->experts_used);
            break;
        case 'X':
            rc = genf_parse_i64(PROG, "--expert-ffn", optarg, 1, MAX_DIM, &o->expert_ffn);
            break;
        case 'W':
            rc = genf_parse_i64(PROG, "--sliding-window", optarg, 1, 1 << 24, &o->sliding_window);
            break;
        case 'P':
            rc = genf_parse_i64(PROG, "--swa-pattern", optarg, 1, MAX_LAYERS, &o->swa_pattern);
            break;
        case 'B':
            rc = genf_parse_positive(PROG, "--rope-base-swa", optarg, &o->rope_base_swa);
            break;
        case 'Q':
            rc = genf_parse_i64(PROG, "--rotary-dim", optarg, 2, 4096, &o->rotary_dim);
            break;
        case 'A':
            rc = genf_parse_positive(PROG, "--attn-softcap", optarg, &o->attn_softcap);
            break;
        case 'C':
            rc = genf_parse_positive(PROG, "--final-softcap", optarg, &o->final_softcap);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'v':
            printf("tandem-genmodel %s\n", TANDEM_VERSION);
            exit(0);
        default:
            fprintf(stderr, "tandem-genmodel: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            rc = -EINVAL;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "tandem-genmodel: unexpected argument '%s'\n", argv[optind]);
        rc = -EINVAL;
    }
    return rc;
}

/* The architecture options: which arch takes which, and their defaults. NULL or a message. */
static const char *check_arch_opts(gen_opts *o)
{
    const bool gemma = is_gemma(o), moe = is_moe(o);
    if (!moe && (o->experts || o->experts_used || o->expert_ffn)) {
        return "--experts, --experts-used and --expert-ffn are for --arch qwen2moe, qwen3moe and "
               "mixtral";
    }
    if (o->arch == ARCH_MIXTRAL && o->expert_ffn != 0 && o->expert_ffn != o->ffn) {
        return "--expert-ffn: mixtral's experts are --ffn wide";
    }
    if (o->sliding_window && !gemma && o->arch != ARCH_LLAMA) {
        return "--sliding-window is for --arch gemma2, gemma3 and llama (HF Mistral)";
    }
    if ((o->swa_pattern || !isnan(o->attn_softcap) || !isnan(o->final_softcap)) && !gemma) {
        return "--swa-pattern, --attn-softcap and --final-softcap are for --arch gemma2 and gemma3";
    }
    if (o->arch == ARCH_GEMMA3 && !isnan(o->attn_softcap)) {
        return "--attn-softcap: gemma3 has no attention soft-capping";
    }
    if (o->rope_base_swa != 0.0 && o->arch != ARCH_GEMMA3) {
        return "--rope-base-swa is for --arch gemma3";
    }
    if (o->rope_scaling == ROPE_SCALING_LONGROPE && o->arch != ARCH_PHI3) {
        return "--rope-scaling longrope:F is for --arch phi3 (llama.cpp's LongRoPE models)";
    }
    if (o->rope_scaling == ROPE_SCALING_LONGROPE && (double)o->ctx / o->rope_factor < 2.0) {
        return "--rope-scaling longrope:F: the original context --ctx / F must be at least 2";
    }
    if (o->rotary_dim && o->arch != ARCH_PHI3) {
        return "--rotary-dim is for --arch phi3";
    }
    if (o->rotary_dim && (o->rotary_dim % 2 != 0 || o->rotary_dim > o->head_dim)) {
        return "--rotary-dim must be even and at most the head dimension";
    }
    if (o->arch == ARCH_PHI3 && o->head_dim * o->heads != o->dim) {
        return "phi3: the head dimension must be --dim / --heads";
    }
    if (o->rope_scaling == ROPE_SCALING_LLAMA3 && o->arch > ARCH_QWEN3 && o->arch != ARCH_MIXTRAL) {
        return "--rope-scaling llama3 is for --arch llama, qwen2, qwen3 and mixtral";
    }
    if (o->rope_scaling != ROPE_SCALING_NONE &&
        ((o->arch == ARCH_PHI3 && o->rope_scaling != ROPE_SCALING_LONGROPE) ||
         (gemma && o->rope_scaling != ROPE_SCALING_LINEAR))) {
        return "--rope-scaling: phi3 takes longrope only, gemma2/gemma3 linear only";
    }
    if (moe) {
        o->experts = o->experts ? o->experts : 4;
        o->experts_used = o->experts_used ? o->experts_used : 2;
        o->expert_ffn = o->expert_ffn ? o->expert_ffn : o->ffn;
        if (o->experts_used > o->experts) {
            return "--experts-used must be at most --experts";
        }
    }
    if (gemma) {
        o->tied = 1; /* llama.cpp's gemma2 has no output matrix */
        o->sliding_window = o->sliding_window ? o->sliding_window : 4096;
        o->swa_pattern = o->swa_pattern ? o->swa_pattern : default_swa_pattern(o);
        if (isnan(o->attn_softcap)) {
            o->attn_softcap = o->arch == ARCH_GEMMA2 ? 50.0 : 0.0;
        }
        if (isnan(o->final_softcap)) {
            o->final_softcap = o->arch == ARCH_GEMMA2 ? 30.0 : 0.0;
        }
        o->rope_base_swa = o->rope_base_swa != 0.0 ? o->rope_base_swa : 10000.0;
    }
    return NULL;
}

static int check_opts(gen_opts *o)
{
    const char *e = NULL;
    if (o->out == NULL) {
        e = "--out is required";
    } else if (o->head_dim == 0 && o->dim % o->heads != 0) {
        e = "--dim must be a multiple of --heads (or give --head-dim)";
    } else if (o->heads % o->kv_heads != 0) {
        e = "--heads must be a multiple of --kv-heads";
    } else if (o->hf && o->type != TD_F32 && o->type != TD_F16 && o->type != TD_BF16) {
        e = "--type: HF output supports f32, f16 and bf16 only";
    }
    if (e == NULL) {
        if (o->head_dim == 0) {
            o->head_dim = o->dim / o->heads;
        }
        if (o->head_dim % 2 != 0) {
            e = "the head dimension must be even (RoPE rotates pairs)";
        }
    }
    if (e == NULL && o->rope_scaling == ROPE_SCALING_YARN) {
        const double ctx = ceil(YARN_ORIG_CTX * o->rope_factor);
        if (ctx > (double)(1 << 24)) {
            e = "--rope-scaling yarn:F: 4096 x F is beyond the largest context length (2^24)";
        } else if ((double)o->ctx < ctx) {
            o->ctx = (int64_t)ctx;
        }
    }
    if (e == NULL) {
        e = check_arch_opts(o);
    }
    if (e == NULL && td_block_elems(o->type) > 1 &&
        (o->dim % TD_QK != 0 || (o->heads * o->head_dim) % TD_QK != 0 || o->ffn % TD_QK != 0 ||
         (is_moe(o) && o->expert_ffn % TD_QK != 0))) {
        e = "quantized --type: --dim, --heads x head dim, --ffn and --expert-ffn must be "
            "multiples of 32";
    }
    if (e != NULL) {
        fprintf(stderr, "tandem-genmodel: %s\n", e);
        return -EINVAL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    gen_opts o = {.arch = ARCH_LLAMA,
                  .layers = 2,
                  .dim = 128,
                  .heads = 4,
                  .ffn = 256,
                  .ctx = 2048,
                  .type = TD_F32,
                  .seed = 1,
                  .rope_base = 10000.0,
                  .rms_eps = 1e-5,
                  .name = "tandem-test",
                  .attn_softcap = NAN,
                  .final_softcap = NAN};
    int64_t vocab_arg = 0;
    if (parse_args(argc, argv, &o, &vocab_arg) < 0) {
        usage(stderr);
        return 2;
    }
    if (o.kv_heads == 0) {
        o.kv_heads = o.heads;
    }
    if (check_opts(&o) < 0) {
        return 2;
    }
    char err[512] = "";
    genvocab v;
    int rc = o.tokenizer != NULL
                 ? genvocab_from_hf(&v, o.tokenizer, o.tokenizer_pre, vocab_arg, err, sizeof(err))
                 : genvocab_synthetic(&v, vocab_arg > 0 ? vocab_arg : 512, o.ctx, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "tandem-genmodel: %s\n", err);
        return 1;
    }
    o.vocab = (int64_t)v.n_tokens;
    size_t n_specs = 0;
    tspec *specs = build_specs(&o, &n_specs);
    if (specs == NULL) {
        fprintf(stderr, "tandem-genmodel: out of memory\n");
        genvocab_free(&v);
        return 1;
    }
    rc = o.hf ? write_hf(&o, &v, specs, n_specs, err, sizeof(err))
              : write_gguf(&o, &v, specs, n_specs, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "tandem-genmodel: %s\n", err);
    } else {
        print_summary(&o, specs, n_specs);
    }
    free(specs);
    genvocab_free(&v);
    return rc < 0 ? 1 : 0;
}
