/* Unit tests for model_load on GGUF files written with gguf_writer: every architecture (the
 * MoE, phi3 and gemma ones with their keys and tensors: features, views, per-layer sliding
 * windows), tied and untied output, all five tensor types, GQA, the tokenizer section, and the
 * validation errors (missing tensor, shape mismatch, unsupported type, unknown architecture, bad
 * metadata). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/model/gguf_writer.h"
#include "engine/model/model.h"

typedef struct spec {
    const char *arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    bool write_head_dim; /* write <arch>.attention.key_length */
    tdtype wtype;        /* matrices */
    bool tied;
    const char *skip;      /* tensor left out */
    const char *bad_shape; /* tensor written with one extra row */
    const char *f16_norm;  /* 1-D tensor written as F16 */
    bool vocab;            /* write tokenizer.ggml.* */
    int n_tokens;          /* tokens written (0: n_vocab) */
    const char *extra_key; /* u32 key added with value 1 (to break things) */
    const char *str_key;   /* string key set to "x" */
    uint32_t alignment;    /* writer alignment (0: 32) */
    int rope_freqs;        /* > 0: a rope_freqs.weight of that many F32 elements */
    float rope_freq0;      /* its first element (the rest are 2) */
    int longrope;          /* LongRoPE tables written: 1 short (all 1.25), 2 long (all 3), 3 both */
    int longrope_n;        /* their elements */
    struct {               /* "<arch>.<key>" keys: kind 's' (string), 'f' (f32), 'u' (u32) */
        const char *key;
        char kind;
        const char *str;
        double v;
    } kv[8];
    int n_expert, n_ff_exp; /* MoE: expert_count (experts used: 2), qwen3moe's hidden size */
    bool phi3_split;        /* phi3 with attn_q/k/v instead of attn_qkv */
    bool swa_i32;           /* <arch>.attention.sliding_window_pattern as an i32 array */
    int t5_keys;            /* 1: the Unigram / WordPiece tokenizer keys; 2: a bad charsmap */
} spec;

static spec base_spec(const char *arch)
{
    spec s = {.arch = arch,
              .n_layer = 2,
              .n_embd = 64,
              .n_head = 4,
              .n_head_kv = 2,
              .head_dim = 16,
              .n_ff = 96,
              .n_vocab = 40,
              .wtype = TD_F32,
              .vocab = true};
    return s;
}

static char *tmp_path(const char *name)
{
    static char path[256];
    snprintf(path, sizeof(path), "/tmp/tandem_model_gguf_%d_%s", (int)getpid(), name);
    return path;
}

/* Adds a tensor of the given shape (ne1 == 0: 1-D; ne2 > 1: 3-D) filled with bytes derived
 * from its name. */
static void add3(gguf_writer *w, const spec *s, const char *name, tdtype type, int64_t ne0,
                 int64_t ne1, int64_t ne2)
{
    if (s->skip && strcmp(s->skip, name) == 0) {
        return;
    }
    if (s->bad_shape && strcmp(s->bad_shape, name) == 0) {
        ne1 = ne1 ? ne1 + 1 : 0;
        ne0 = ne1 ? ne0 : ne0 + 1;
    }
    if (s->f16_norm && strcmp(s->f16_norm, name) == 0) {
        type = TD_F16;
    }
    int64_t ne[3] = {ne0, ne1, ne2};
    int n_dims = ne2 > 1 ? 3 : ne1 ? 2 : 1;
    size_t nbytes = td_row_bytes(type, ne0) * (size_t)(ne1 ? ne1 : 1) * (size_t)ne2;
    uint8_t *data = malloc(nbytes ? nbytes : 1);
    assert_non_null(data);
    size_t h = strlen(name);
    for (size_t i = 0; i < nbytes; i++) {
        data[i] = (uint8_t)(i * 31 + h * 7 + (uint8_t)name[h - 1]);
    }
    if (type == TD_F32) { /* keep F32 data finite and recognisable: element i = i */
        for (size_t i = 0; i < nbytes / 4; i++) {
            float f = (float)i;
            memcpy(data + 4 * i, &f, 4);
        }
    }
    int rc = gguf_writer_add_tensor(w, name, type, n_dims, ne, data, nbytes);
    if (rc != 0) {
        fail_msg("add_tensor %s: %d", name, rc);
    }
    free(data);
}

static void add(gguf_writer *w, const spec *s, const char *name, tdtype type, int64_t ne0,
                int64_t ne1)
{
    add3(w, s, name, type, ne0, ne1, 1);
}

static void set_hp(gguf_writer *w, const spec *s, const char *key, uint32_t v)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", s->arch, key);
    assert_int_equal(gguf_writer_set_u32(w, full, v), 0);
}

/* Writes the model described by s to path. */
static void write_model(const spec *s, const char *path)
{
    gguf_writer *w = gguf_writer_new(s->alignment);
    assert_non_null(w);
    assert_int_equal(gguf_writer_set_str(w, "general.architecture", s->arch), 0);
    assert_int_equal(gguf_writer_set_str(w, "general.name", "tiny test"), 0);
    set_hp(w, s, "context_length", 256);
    set_hp(w, s, "embedding_length", (uint32_t)s->n_embd);
    set_hp(w, s, "block_count", (uint32_t)s->n_layer);
    set_hp(w, s, "feed_forward_length", (uint32_t)s->n_ff);
    set_hp(w, s, "attention.head_count", (uint32_t)s->n_head);
    set_hp(w, s, "attention.head_count_kv", (uint32_t)s->n_head_kv);
    if (s->write_head_dim) {
        set_hp(w, s, "attention.key_length", (uint32_t)s->head_dim);
    }
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", s->arch);
    assert_int_equal(gguf_writer_set_f32(w, key, 1e-5f), 0);
    snprintf(key, sizeof(key), "%s.rope.freq_base", s->arch);
    assert_int_equal(gguf_writer_set_f32(w, key, 500000.0f), 0);
    if (s->extra_key) {
        assert_int_equal(gguf_writer_set_u32(w, s->extra_key, 1), 0);
    }
    if (s->str_key) {
        assert_int_equal(gguf_writer_set_str(w, s->str_key, "x"), 0);
    }
    if (s->t5_keys == 1) {
        const uint8_t map[5] = {1, 2, 3, 4, 5};
        assert_int_equal(gguf_writer_set_arr_u8(w, "tokenizer.ggml.precompiled_charsmap", map, 5),
                         0);
        assert_int_equal(gguf_writer_set_bool(w, "tokenizer.ggml.remove_extra_whitespaces", true),
                         0);
        assert_int_equal(gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 3), 0);
        assert_int_equal(gguf_writer_set_bool(w, "tokenizer.ggml.add_sep_token", false), 0);
        assert_int_equal(gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.lowercase", true), 0);
    } else if (s->t5_keys == 2) {
        const float map[2] = {1.0f, 2.0f};
        assert_int_equal(gguf_writer_set_arr_f32(w, "tokenizer.ggml.precompiled_charsmap", map, 2),
                         0);
    }
    for (size_t i = 0; i < sizeof(s->kv) / sizeof(s->kv[0]) && s->kv[i].key; i++) {
        snprintf(key, sizeof(key), "%s.%s", s->arch, s->kv[i].key);
        if (s->kv[i].kind == 's') {
            assert_int_equal(gguf_writer_set_str(w, key, s->kv[i].str), 0);
        } else if (s->kv[i].kind == 'f') {
            assert_int_equal(gguf_writer_set_f32(w, key, (float)s->kv[i].v), 0);
        } else {
            assert_int_equal(gguf_writer_set_u32(w, key, (uint32_t)s->kv[i].v), 0);
        }
    }
    if (s->n_expert > 0) {
        set_hp(w, s, "expert_count", (uint32_t)s->n_expert);
        set_hp(w, s, "expert_used_count", 2);
        if (s->n_ff_exp > 0) {
            set_hp(w, s, "expert_feed_forward_length", (uint32_t)s->n_ff_exp);
        }
    }
    if (s->swa_i32) {
        int32_t flags[8] = {1, 0, 1, 0, 1, 0, 1, 0};
        snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", s->arch);
        assert_int_equal(gguf_writer_set_arr_i32(w, key, flags, (size_t)s->n_layer), 0);
    }
    if (s->rope_freqs > 0) {
        float f[64];
        for (int i = 0; i < s->rope_freqs && i < 64; i++) {
            f[i] = i == 0 ? s->rope_freq0 : 2.0f;
        }
        int64_t ne[1] = {s->rope_freqs};
        assert_int_equal(gguf_writer_add_tensor(w, "rope_freqs.weight", TD_F32, 1, ne, f,
                                                sizeof(float) * (size_t)s->rope_freqs),
                         0);
    }
    for (int b = 1; b <= 2; b++) {
        if (s->longrope & b) {
            float f[64];
            for (int i = 0; i < 64; i++) {
                f[i] = b == 1 ? 1.25f : 3.0f;
            }
            int64_t ne[1] = {s->longrope_n};
            assert_int_equal(gguf_writer_add_tensor(
                                 w,
                                 b == 1 ? "rope_factors_short.weight" : "rope_factors_long.weight",
                                 TD_F32, 1, ne, f, sizeof(float) * (size_t)s->longrope_n),
                             0);
        }
    }
    if (s->vocab) {
        int n = s->n_tokens ? s->n_tokens : s->n_vocab;
        char **toks = calloc((size_t)n, sizeof(*toks));
        float *scores = calloc((size_t)n, sizeof(*scores));
        int32_t *types = calloc((size_t)n, sizeof(*types));
        assert_true(toks && scores && types);
        for (int i = 0; i < n; i++) {
            toks[i] = malloc(16);
            assert_non_null(toks[i]);
            snprintf(toks[i], 16, i == 1 ? "<s>" : i == 2 ? "</s>" : "tok%d", i);
            scores[i] = -(float)i;
            types[i] = i < 3 ? 3 : 1;
        }
        assert_int_equal(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), 0);
        assert_int_equal(gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2"), 0);
        assert_int_equal(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens",
                                                 (const char *const *)toks, NULL, (size_t)n),
                         0);
        assert_int_equal(gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)n), 0);
        assert_int_equal(gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n),
                         0);
        const char *merges[] = {"t o", "to k"};
        assert_int_equal(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 2), 0);
        assert_int_equal(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1), 0);
        assert_int_equal(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2), 0);
        assert_int_equal(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false), 0);
        assert_int_equal(gguf_writer_set_str(w, "tokenizer.chat_template", "{{ x }}"), 0);
        for (int i = 0; i < n; i++) {
            free(toks[i]);
        }
        free(toks);
        free(scores);
        free(types);
    }
    int64_t qd = (int64_t)s->n_head * s->head_dim, kvd = (int64_t)s->n_head_kv * s->head_dim;
    const bool phi3 = strcmp(s->arch, "phi3") == 0;
    const bool gemma = strncmp(s->arch, "gemma", 5) == 0;
    add(w, s, "token_embd.weight", s->wtype, s->n_embd, s->n_vocab);
    add(w, s, "output_norm.weight", TD_F32, s->n_embd, 0);
    if (!s->tied) {
        add(w, s, "output.weight", s->wtype, s->n_embd, s->n_vocab);
    }
    for (int l = 0; l < s->n_layer; l++) {
        char name[64];
#define ADD(suffix, type, a, b)                                                                    \
    do {                                                                                           \
        snprintf(name, sizeof(name), "blk.%d.%s", l, suffix);                                      \
        add(w, s, name, type, a, b);                                                               \
    } while (0)
        ADD("attn_norm.weight", TD_F32, s->n_embd, 0);
        if (phi3 && !s->phi3_split) {
            ADD("attn_qkv.weight", s->wtype, s->n_embd, qd + 2 * kvd);
        } else {
            ADD("attn_q.weight", s->wtype, s->n_embd, qd);
            ADD("attn_k.weight", s->wtype, s->n_embd, kvd);
            ADD("attn_v.weight", s->wtype, s->n_embd, kvd);
        }
        if (strcmp(s->arch, "qwen2") == 0 || (strcmp(s->arch, "qwen2moe") == 0 && l == 0)) {
            /* qwen2moe: layer 0 only, its biases being optional */
            ADD("attn_q.bias", TD_F32, qd, 0);
            ADD("attn_k.bias", TD_F32, kvd, 0);
            ADD("attn_v.bias", TD_F32, kvd, 0);
        }
        if (strcmp(s->arch, "qwen3") == 0 || strcmp(s->arch, "qwen3moe") == 0 ||
            strcmp(s->arch, "gemma3") == 0) {
            ADD("attn_q_norm.weight", TD_F32, s->head_dim, 0);
            ADD("attn_k_norm.weight", TD_F32, s->head_dim, 0);
        }
        ADD("attn_output.weight", s->wtype, qd, s->n_embd);
        if (gemma) {
            ADD("post_attention_norm.weight", TD_F32, s->n_embd, 0);
        }
        ADD("ffn_norm.weight", TD_F32, s->n_embd, 0);
        if (s->n_expert > 0) {
            const int64_t fe = s->n_ff_exp > 0 ? s->n_ff_exp : s->n_ff;
            ADD("ffn_gate_inp.weight", TD_F32, s->n_embd, s->n_expert);
            snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", l);
            add3(w, s, name, s->wtype, s->n_embd, fe, s->n_expert);
            snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", l);
            add3(w, s, name, s->wtype, s->n_embd, fe, s->n_expert);
            snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", l);
            add3(w, s, name, s->wtype, fe, s->n_embd, s->n_expert);
            if (strcmp(s->arch, "qwen2moe") == 0) { /* the shared expert, n_ff wide */
                ADD("ffn_gate_inp_shexp.weight", TD_F32, s->n_embd, 0);
                ADD("ffn_gate_shexp.weight", s->wtype, s->n_embd, s->n_ff);
                ADD("ffn_up_shexp.weight", s->wtype, s->n_embd, s->n_ff);
                ADD("ffn_down_shexp.weight", s->wtype, s->n_ff, s->n_embd);
            }
        } else if (phi3) {
            ADD("ffn_up.weight", s->wtype, s->n_embd, 2 * s->n_ff);
            ADD("ffn_down.weight", s->wtype, s->n_ff, s->n_embd);
        } else {
            ADD("ffn_gate.weight", s->wtype, s->n_embd, s->n_ff);
            ADD("ffn_up.weight", s->wtype, s->n_embd, s->n_ff);
            ADD("ffn_down.weight", s->wtype, s->n_ff, s->n_embd);
        }
        if (gemma) {
            ADD("post_ffw_norm.weight", TD_F32, s->n_embd, 0);
        }
#undef ADD
    }
    char err[256];
    int rc = gguf_writer_write_file(w, path, err, sizeof(err));
    if (rc != 0) {
        fail_msg("write: %s", err);
    }
    gguf_writer_free(w);
}

static model *load_ok(const spec *s)
{
    const char *path = tmp_path("m.gguf");
    write_model(s, path);
    char err[512];
    model *m = model_load(path, err, sizeof(err));
    if (!m) {
        fail_msg("model_load: %s", err);
    }
    unlink(path);
    return m;
}

static void load_bad(const spec *s, const char *want)
{
    const char *path = tmp_path("bad.gguf");
    write_model(s, path);
    char err[512] = "";
    model *m = model_load(path, err, sizeof(err));
    unlink(path);
    if (m) {
        model_free(m);
        fail_msg("model_load should fail with \"%s\"", want);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    }
}

static void check_common(const model *m, const spec *s)
{
    const model_config *c = &m->cfg;
    assert_int_equal(m->format, MODEL_FORMAT_GGUF);
    assert_string_equal(model_arch_name(c->arch), s->arch);
    assert_int_equal(c->n_layer, s->n_layer);
    assert_int_equal(c->n_embd, s->n_embd);
    assert_int_equal(c->n_head, s->n_head);
    assert_int_equal(c->n_head_kv, s->n_head_kv);
    assert_int_equal(c->head_dim, s->head_dim);
    assert_int_equal(c->n_rot, s->head_dim);
    assert_int_equal(c->n_ff, s->n_ff);
    assert_int_equal(c->n_vocab, s->n_vocab);
    assert_int_equal(c->n_ctx_train, 256);
    assert_true(c->rope_base == 500000.0f);
    assert_true(c->rms_eps == 1e-5f);
    assert_int_equal(c->rope_neox, strcmp(s->arch, "llama") != 0);
    assert_int_equal(c->tied_output, s->tied);
    assert_ptr_equal(m->tok_embd, model_find_tensor(m, "token_embd.weight"));
    assert_int_equal(m->tok_embd->type, s->wtype);
    assert_int_equal(m->tok_embd->ne[1], s->n_vocab);
    assert_int_equal(((uintptr_t)m->tok_embd->data) % 32, 0);
    if (s->tied) {
        assert_ptr_equal(m->output, m->tok_embd);
    } else {
        assert_ptr_equal(m->output, model_find_tensor(m, "output.weight"));
    }
    assert_non_null(m->output_norm);
    assert_int_equal(m->output_norm->type, TD_F32);
    float f;
    memcpy(&f, (const uint8_t *)m->output_norm->data + 4 * 5, 4);
    assert_true(f == 5.0f);
    size_t params = 0, bytes = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        params += (size_t)(m->tensors[i].ne[0] * m->tensors[i].ne[1]);
        bytes += m->tensors[i].nbytes;
    }
    assert_int_equal(m->n_params, params);
    assert_int_equal(m->weight_bytes, bytes);
    for (int l = 0; l < s->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.attn_k.weight", l);
        assert_ptr_equal(L->wk, model_find_tensor(m, name));
        assert_int_equal(L->wk->ne[0], s->n_embd);
        assert_int_equal(L->wk->ne[1], s->n_head_kv * s->head_dim);
        assert_int_equal(L->wk->type, s->wtype);
        assert_non_null(L->attn_norm);
        assert_non_null(L->wq);
        assert_non_null(L->wv);
        assert_non_null(L->wo);
        assert_non_null(L->ffn_norm);
        assert_non_null(L->w_gate);
        assert_non_null(L->w_up);
        assert_int_equal(L->w_down->ne[0], s->n_ff);
        bool q2 = strcmp(s->arch, "qwen2") == 0, q3 = strcmp(s->arch, "qwen3") == 0;
        assert_int_equal(L->bq != NULL, q2);
        assert_int_equal(L->bk != NULL, q2);
        assert_int_equal(L->bv != NULL, q2);
        assert_int_equal(L->q_norm != NULL, q3);
        assert_int_equal(L->k_norm != NULL, q3);
    }
    assert_string_equal(m->name, "tiny test");
}

static void check_vocab(const model *m, int n)
{
    const model_gguf_vocab *v = &m->vocab;
    assert_string_equal(v->model, "gpt2");
    assert_string_equal(v->pre, "qwen2");
    assert_int_equal(v->n_tokens, n);
    assert_int_equal(v->tokens[5].len, 4);
    assert_memory_equal(v->tokens[5].s, "tok5", 4);
    assert_int_equal(((uintptr_t)v->scores) % 4, 0);
    assert_true(v->scores[7] == -7.0f);
    assert_int_equal(v->token_types[1], 3);
    assert_int_equal(v->token_types[9], 1);
    assert_int_equal(v->n_merges, 2);
    assert_memory_equal(v->merges[1].s, "to k", 4);
    assert_int_equal(v->bos_id, 1);
    assert_int_equal(v->eos_id, 2);
    assert_int_equal(v->unk_id, -1);
    assert_int_equal(v->pad_id, -1);
    assert_int_equal(v->eot_id, -1);
    assert_int_equal(v->add_bos, 0);
    assert_int_equal(v->add_eos, -1);
    assert_int_equal(v->add_space_prefix, -1);
    assert_string_equal(m->bos_token, "<s>");
    assert_string_equal(m->eos_token, "</s>");
    assert_string_equal(m->chat_template, "{{ x }}");
    assert_null(m->hf_tokenizer_json);
}

static void test_archs_and_types(void **state)
{
    (void)state;
    const char *archs[] = {"llama", "qwen2", "qwen3"};
    const tdtype types[] = {TD_F32, TD_F16, TD_BF16, TD_Q8_0, TD_Q4_0};
    for (size_t a = 0; a < 3; a++) {
        for (size_t t = 0; t < 5; t++) {
            spec s = base_spec(archs[a]);
            s.wtype = types[t];
            s.tied = (t % 2) == 1;
            s.write_head_dim = a == 2;
            model *m = load_ok(&s);
            check_common(m, &s);
            check_vocab(m, s.n_vocab);
            model_free(m);
        }
    }
}

static void test_mha_and_head_dim(void **state)
{
    (void)state;
    spec s = base_spec("llama");
    s.n_head_kv = 4; /* MHA */
    model *m = load_ok(&s);
    check_common(m, &s);
    assert_null(m->cfg.rope_freqs);
    assert_true(model_rope_freq_scale(&m->cfg) == 1.0f);
    model_free(m);

    s = base_spec("llama"); /* Llama 3.1: rope_freqs.weight */
    s.rope_freqs = 8;
    s.rope_freq0 = 1.5f;
    m = load_ok(&s);
    assert_non_null(m->cfg.rope_freqs);
    assert_true(m->cfg.rope_freqs[0] == 1.5f && m->cfg.rope_freqs[7] == 2.0f);
    model_free(m);

    s = base_spec("qwen3"); /* head_dim != n_embd / n_head */
    s.head_dim = 32;
    s.write_head_dim = true;
    m = load_ok(&s);
    check_common(m, &s);
    assert_int_equal(m->layers[0].wq->ne[1], 4 * 32);
    assert_int_equal(m->layers[1].q_norm->ne[0], 32);
    model_free(m);

    s = base_spec("llama"); /* fewer tokens than embedding rows is fine */
    s.n_tokens = 30;
    m = load_ok(&s);
    assert_int_equal(m->vocab.n_tokens, 30);
    assert_int_equal(m->cfg.n_vocab, 40);
    model_free(m);

    s = base_spec("qwen2"); /* alignment 8: tensors are copied to keep 32-byte alignment */
    s.alignment = 8;
    s.wtype = TD_Q4_0;
    m = load_ok(&s);
    check_common(m, &s);
    for (size_t i = 0; i < m->n_tensors; i++) {
        assert_int_equal((uintptr_t)m->tensors[i].data % 32, 0);
    }
    model_free(m);

    s = base_spec("llama");
    s.vocab = false;
    m = load_ok(&s);
    assert_null(m->vocab.model);
    assert_int_equal(m->vocab.n_tokens, 0);
    assert_int_equal(m->vocab.bos_id, -1);
    assert_null(m->bos_token);
    model_free(m);
}

/* A spec with RoPE scaling keys: type (NULL: none written), factor (0: none), original context
 * length (0: none). */
static spec rope_spec(const char *arch, const char *type, double factor, uint32_t orig)
{
    spec s = base_spec(arch);
    int n = 0;
    if (type) {
        s.kv[n].key = "rope.scaling.type";
        s.kv[n].kind = 's';
        s.kv[n++].str = type;
    }
    if (factor != 0.0) {
        s.kv[n].key = "rope.scaling.factor";
        s.kv[n].kind = 'f';
        s.kv[n++].v = factor;
    }
    if (orig) {
        s.kv[n].key = "rope.scaling.original_context_length";
        s.kv[n].kind = 'u';
        s.kv[n++].v = orig;
    }
    return s;
}

/* Appends one more key to a rope_spec. */
static void rope_key(spec *s, const char *key, char kind, double v)
{
    size_t i = 0;
    while (s->kv[i].key) {
        i++;
    }
    s->kv[i].key = key;
    s->kv[i].kind = kind;
    s->kv[i].str = "x";
    s->kv[i].v = v;
}

/* RoPE scaling keys as llama.cpp reads them: linear, none (factor ignored), YaRN with its
 * original context length and llama.cpp's fixed ramp, attn_factor for every type. */
static void test_rope_scaling(void **state)
{
    (void)state;
    spec s = rope_spec("qwen2", "linear", 4.0, 0);
    model *m = load_ok(&s);
    assert_true(model_rope_freq_scale(&m->cfg) == 0.25f);
    assert_true(model_rope_ext_factor(&m->cfg) == 0.0f);
    assert_true(model_rope_attn_factor(&m->cfg) == 1.0f);
    model_free(m);

    s = rope_spec("qwen2", NULL, 2.0, 0); /* no type: llama.cpp's default, linear */
    rope_key(&s, "rope.scaling.attn_factor", 'f', 0.75);
    m = load_ok(&s);
    assert_true(model_rope_freq_scale(&m->cfg) == 0.5f);
    assert_true(model_rope_attn_factor(&m->cfg) == 0.75f); /* applied whatever the type */
    model_free(m);

    s = rope_spec("llama", "none", 4.0, 0); /* llama_context: never scale with type none */
    m = load_ok(&s);
    assert_true(model_rope_freq_scale(&m->cfg) == 1.0f);
    model_free(m);

    s = rope_spec("qwen2", "yarn", 4.0, 4096);
    m = load_ok(&s);
    const model_config *c = &m->cfg;
    assert_true(c->rope_factor == 4.0f);
    assert_int_equal(c->rope_yarn_orig_ctx, 4096);
    assert_true(c->rope_yarn_beta_fast == 32.0f && c->rope_yarn_beta_slow == 1.0f);
    assert_true(c->rope_attn_factor == 1.0f);
    assert_true(model_rope_freq_scale(c) == 0.25f);
    assert_true(model_rope_ext_factor(c) == 1.0f);
    /* llama_context: get_mscale(4) * 1 / (1 + 0.1 ln 4), ggml multiplies by 1 + 0.1 ln 4 */
    const float mscale = 0.1f * logf(4.0f) + 1.0f;
    assert_true(model_rope_attn_factor(c) == mscale * (1.0f / (1.0f + 0.1f * logf(4.0f))));
    assert_true(fabsf(model_rope_attn_factor(c) - 1.0f) < 1e-6f);
    assert_int_equal(c->n_ctx_train, 256);
    model_free(m);

    /* attn_factor multiplies; the converter's yarn_* keys with the values llama.cpp uses */
    s = rope_spec("llama", "yarn", 8.0, 8192);
    rope_key(&s, "rope.scaling.attn_factor", 'f', 0.5);
    rope_key(&s, "rope.scaling.yarn_beta_fast", 'f', 32.0);
    rope_key(&s, "rope.scaling.yarn_beta_slow", 'f', 1.0);
    rope_key(&s, "rope.scaling.yarn_ext_factor", 'f', 1.0);
    rope_key(&s, "rope.scaling.yarn_attn_factor", 'f', 0.1 * log(8.0) + 1.0);
    m = load_ok(&s);
    assert_int_equal(m->cfg.rope_yarn_orig_ctx, 8192);
    assert_true(m->cfg.rope_attn_factor == 0.5f);
    assert_true(fabsf(model_rope_attn_factor(&m->cfg) - 0.5f) < 1e-6f);
    model_free(m);

    s = rope_spec("qwen3", "yarn", 0.5, 4096); /* factor <= 1: get_mscale is 1 */
    m = load_ok(&s);
    assert_true(model_rope_freq_scale(&m->cfg) == 2.0f);
    assert_true(fabsf(model_rope_attn_factor(&m->cfg) * (1.0f + 0.1f * logf(0.5f)) - 1.0f) < 1e-6f);
    model_free(m);
}

/* Each bad or missing RoPE scaling key is a load error naming it. */
static void test_rope_scaling_errors(void **state)
{
    (void)state;
    spec s = rope_spec("qwen2", "yarn", 0.0, 4096);
    load_bad(&s, "qwen2.rope.scaling.factor = 0 is out of range (yarn needs a positive factor)");
    s = rope_spec("qwen2", "yarn", -2.0, 4096);
    load_bad(&s, "qwen2.rope.scaling.factor = -2 is out of range");
    s = rope_spec("qwen2", "yarn", NAN, 4096);
    load_bad(&s, "qwen2.rope.scaling.factor = nan is out of range");
    s = rope_spec("qwen2", "linear", INFINITY, 0);
    load_bad(&s, "qwen2.rope.scaling.factor = inf is out of range");
    s = rope_spec("qwen2", "yarn", 4.0, 0); /* absent: the training context, as llama.cpp */
    model *m = load_ok(&s);
    assert_int_equal(m->cfg.rope_yarn_orig_ctx, m->cfg.n_ctx_train);
    model_free(m);
    s = rope_spec("qwen2", "yarn", 4.0, 0);
    rope_key(&s, "rope.scaling.original_context_length", 'u', 0);
    load_bad(&s, "qwen2.rope.scaling.original_context_length must be > 0");
    s = rope_spec("qwen2", "yarn", 4.0, 0);
    rope_key(&s, "rope.scaling.original_context_length", 's', 0);
    load_bad(&s, "qwen2.rope.scaling.original_context_length: expected u32, got string");
    s = rope_spec("qwen2", "yarn", 4.0, 4096);
    rope_key(&s, "rope.scaling.attn_factor", 'f', 0.0);
    load_bad(&s, "qwen2.rope.scaling.attn_factor = 0 is out of range");
    s = rope_spec("qwen2", "linear", 4.0, 0);
    rope_key(&s, "rope.scaling.attn_factor", 'f', NAN);
    load_bad(&s, "qwen2.rope.scaling.attn_factor = nan is out of range");
    const struct {
        const char *key;
        double v;
        const char *want;
    } unread[] = {
        {"rope.scaling.yarn_beta_fast", 16.0,
         "qwen2.rope.scaling.yarn_beta_fast = 16 is not supported: llama.cpp ignores it for qwen2 "
         "(it uses 32)"},
        {"rope.scaling.yarn_beta_slow", 2.0, "qwen2.rope.scaling.yarn_beta_slow = 2 is not"},
        {"rope.scaling.yarn_ext_factor", 0.5, "qwen2.rope.scaling.yarn_ext_factor = 0.5 is not"},
        {"rope.scaling.yarn_log_multiplier", 0.1,
         "qwen2.rope.scaling.yarn_log_multiplier = 0.1 is not"},
        {"rope.scaling.yarn_attn_factor", 1.5,
         "qwen2.rope.scaling.yarn_attn_factor = 1.5 is not supported: llama.cpp ignores it for "
         "qwen2 (it uses 1.13863)"},
    };
    for (size_t i = 0; i < sizeof(unread) / sizeof(unread[0]); i++) {
        s = rope_spec("qwen2", "yarn", 4.0, 4096);
        rope_key(&s, unread[i].key, 'f', unread[i].v);
        load_bad(&s, unread[i].want);
    }
    s = rope_spec("qwen2", "longrope", 4.0, 4096);
    load_bad(&s,
             "qwen2.rope.scaling.type 'longrope' is not supported (none, linear, yarn, or Llama "
             "3's rope_freqs)");
}

static void test_errors(void **state)
{
    (void)state;
    spec s = base_spec("gptneox");
    load_bad(&s, "general.architecture 'gptneox' is not supported (supported: llama, qwen2, qwen3, "
                 "qwen2moe, qwen3moe, phi3, gemma2, gemma3)");

    s = base_spec("llama");
    s.skip = "blk.1.ffn_up.weight";
    load_bad(&s, "missing tensor 'blk.1.ffn_up.weight'");
    s = base_spec("qwen2");
    s.skip = "blk.0.attn_k.bias";
    load_bad(&s, "missing tensor 'blk.0.attn_k.bias'");
    s = base_spec("qwen3");
    s.skip = "blk.1.attn_q_norm.weight";
    load_bad(&s, "missing tensor 'blk.1.attn_q_norm.weight'");
    s = base_spec("llama");
    s.skip = "token_embd.weight";
    load_bad(&s, "missing tensor 'token_embd.weight'");
    s = base_spec("llama");
    s.skip = "output_norm.weight";
    load_bad(&s, "missing tensor 'output_norm.weight'");

    s = base_spec("llama");
    s.bad_shape = "blk.0.attn_v.weight";
    load_bad(&s, "tensor 'blk.0.attn_v.weight' has shape {64, 33, 1, 1}, expected {64, 32}");
    s = base_spec("llama");
    s.bad_shape = "blk.1.ffn_norm.weight";
    load_bad(&s, "tensor 'blk.1.ffn_norm.weight' has shape {65, 1, 1, 1}, expected {64, 1}");
    s = base_spec("llama");
    s.bad_shape = "output.weight";
    load_bad(&s, "tensor 'output.weight' has shape {64, 41, 1, 1}, expected {64, 40}");
    s = base_spec("llama");
    s.f16_norm = "blk.0.attn_norm.weight";
    load_bad(&s,
             "tensor 'blk.0.attn_norm.weight' has type F16; norm weights and biases must be F32");

    s = base_spec("llama");
    s.n_tokens = 41;
    load_bad(&s, "tokenizer.ggml.tokens has 41 tokens but the model has 40 rows");
    s = base_spec("llama");
    s.n_head_kv = 3;
    load_bad(&s, "n_head = 4 is not a multiple of n_head_kv = 3");
    s = base_spec("llama");
    s.extra_key = "llama.rope.dimension_count";
    load_bad(&s, "rotary dimension 1 must be even and in 2..head_dim (16)");
    s = base_spec("llama");
    s.extra_key = "llama.vocab_size";
    load_bad(&s, "vocabulary size 1 differs from the 40 rows of 'token_embd.weight'");
    s = base_spec("llama");
    s.extra_key = "tokenizer.ggml.eos_token_id";
    s.n_tokens = 1;
    load_bad(&s, "tokenizer.ggml.bos_token_id = 1 is out of range (1 tokens)");
    s = base_spec("llama");
    s.str_key = "llama.block_count";
    load_bad(&s, "llama.block_count: expected u32, got string");
    s = base_spec("llama");
    s.str_key = "llama.rope.scaling.type";
    load_bad(&s, "llama.rope.scaling.type 'x' is not supported");
    s = base_spec("llama");
    s.rope_freqs = 4; /* head_dim 16: 8 pairs */
    s.rope_freq0 = 1.0f;
    load_bad(&s,
             "tensor 'rope_freqs.weight' must be F32 of 8 elements (n_rot / 2), got F32 {4, 1}");
    s.rope_freqs = 8;
    s.rope_freq0 = 0.0f;
    load_bad(&s, "tensor 'rope_freqs.weight'[0] = 0 is not a positive finite divisor");
    s = base_spec("llama");
    s.extra_key = "llama.block_count"; /* 1 layer declared, 2 in the file */
    load_bad(&s, "tensor 'blk.1.attn_norm.weight' found but the model has 1 layers");

    char err[256];
    assert_null(model_load("/nonexistent/model.gguf", err, sizeof(err)));
    assert_non_null(strstr(err, "/nonexistent/model.gguf: cannot open"));
}

/* Patches the type id of tensor `name` in the file at path. */
static void patch_type(const char *path, const char *name, uint32_t type)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof(buf), f);
    size_t len = strlen(name);
    for (size_t i = 8; i + len + 4 < n; i++) {
        uint64_t l;
        memcpy(&l, buf + i - 8, 8);
        if (l == len && memcmp(buf + i, name, len) == 0) {
            uint32_t nd;
            memcpy(&nd, buf + i + len, 4);
            size_t off = i + len + 4 + 8 * nd;
            fseek(f, (long)off, SEEK_SET);
            fwrite(&type, 4, 1, f);
            fclose(f);
            return;
        }
    }
    fclose(f);
    fail_msg("tensor %s not found in the header", name);
}

/* Adds an "<arch>.<key>" key to s. */
static void add_key(spec *s, const char *key, char kind, double v)
{
    size_t i = 0;
    while (s->kv[i].key) {
        i++;
    }
    s->kv[i].key = key;
    s->kv[i].kind = kind;
    s->kv[i].str = "x";
    s->kv[i].v = v;
}

static model *load_ok_path(const spec *s, const char *name)
{
    const char *path = tmp_path(name);
    write_model(s, path);
    char err[512];
    model *m = model_load(path, err, sizeof(err));
    if (!m) {
        fail_msg("model_load: %s", err);
    }
    unlink(path);
    return m;
}

static void assert_swa(const model *m, const char *want)
{
    for (int il = 0; il < m->cfg.n_layer; il++) {
        if (m->layers[il].swa != (want[il] == '1')) {
            fail_msg("layer %d: swa %d, want %c", il, m->layers[il].swa, want[il]);
        }
    }
}

/* Tensor name of layer il, "blk.<il>.<suffix>". */
static const model_tensor *layer_tensor(const model *m, int il, const char *suffix)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.%s", il, suffix);
    return model_find_tensor(m, name);
}

/* gemma2 and gemma3 as llama.cpp's converter writes them: post-norms, tied output, soft-caps,
 * sliding windows (per layer, with their RoPE base), embedding scale, GeGLU. */
static void test_gemma(void **state)
{
    (void)state;
    spec s = base_spec("gemma2");
    s.tied = true;
    s.write_head_dim = true;
    add_key(&s, "attention.sliding_window", 'u', 8);
    add_key(&s, "attn_logit_softcapping", 'f', 40.0);
    add_key(&s, "final_logit_softcapping", 'f', 20.0);
    model *m = load_ok_path(&s, "g2.gguf");
    const model_config *c = &m->cfg;
    assert_int_equal(c->arch, MODEL_ARCH_GEMMA2);
    assert_int_equal(c->ffn_act, MODEL_ACT_GELU_TANH);
    assert_true(c->embd_scale == 8.0f);
    assert_true(c->attn_scale == 0.25f);
    assert_true(c->attn_softcap == 40.0f && c->final_softcap == 20.0f);
    assert_int_equal(c->n_swa, 8);
    assert_true(c->rope_swa_scaled);
    assert_true(c->rope_base_swa == 500000.0f);
    assert_true(c->rope_neox);
    assert_true(c->tied_output);
    assert_ptr_equal(m->output, m->tok_embd);
    assert_swa(m, "10");
    for (int il = 0; il < 2; il++) {
        const model_layer *l = &m->layers[il];
        assert_ptr_equal(l->attn_post_norm, layer_tensor(m, il, "post_attention_norm.weight"));
        assert_ptr_equal(l->ffn_post_norm, layer_tensor(m, il, "post_ffw_norm.weight"));
        assert_ptr_equal(l->ffn_norm, layer_tensor(m, il, "ffn_norm.weight"));
        assert_null(l->q_norm);
        assert_null(l->ffn_gate_inp);
    }
    model_free(m);

    s = base_spec("gemma2"); /* llama.cpp's defaults: window 4096, caps 50 / 30 */
    s.tied = true;
    m = load_ok_path(&s, "g2d.gguf");
    assert_int_equal(m->cfg.n_swa, 4096);
    assert_true(m->cfg.attn_softcap == 50.0f && m->cfg.final_softcap == 30.0f);
    model_free(m);

    s = base_spec("gemma3");
    s.tied = true;
    s.head_dim = 32;
    s.write_head_dim = true;
    add_key(&s, "attention.sliding_window", 'u', 4);
    add_key(&s, "rope.freq_base_swa", 'f', 10000.0);
    add_key(&s, "attention.sliding_window_pattern", 'u', 2);
    m = load_ok_path(&s, "g3.gguf");
    c = &m->cfg;
    assert_int_equal(c->arch, MODEL_ARCH_GEMMA3);
    assert_int_equal(c->ffn_act, MODEL_ACT_GELU_TANH);
    assert_true(c->attn_scale == 1.0f / sqrtf(32.0f));
    assert_true(c->attn_softcap == 0.0f && c->final_softcap == 0.0f);
    assert_int_equal(c->n_swa, 4);
    assert_false(c->rope_swa_scaled);
    assert_true(c->rope_base_swa == 10000.0f);
    assert_swa(m, "10");
    assert_int_equal(m->layers[1].q_norm->ne[0], 32);
    assert_ptr_equal(m->layers[1].k_norm, layer_tensor(m, 1, "attn_k_norm.weight"));
    assert_non_null(m->layers[0].attn_post_norm);
    model_free(m);

    s = base_spec("gemma3"); /* default period 6: both layers local; no window: none */
    s.tied = true;
    add_key(&s, "attention.sliding_window", 'u', 4);
    m = load_ok_path(&s, "g3d.gguf");
    assert_swa(m, "11");
    model_free(m);
    s = base_spec("gemma3");
    s.tied = true;
    m = load_ok_path(&s, "g3n.gguf");
    assert_int_equal(m->cfg.n_swa, 0);
    assert_swa(m, "00");
    model_free(m);

    s = base_spec("gemma3");
    s.tied = true;
    add_key(&s, "attention.sliding_window", 'u', 4);
    s.swa_i32 = true; /* 32-bit integers per layer, as llama.cpp's get_arr takes too */
    m = load_ok_path(&s, "g3i.gguf");
    assert_swa(m, "10");
    model_free(m);
    s = base_spec("gemma2");
    s.tied = true;
    s.skip = "blk.1.post_ffw_norm.weight";
    load_bad(&s, "missing tensor 'blk.1.post_ffw_norm.weight'");
    s = base_spec("llama");
    s.extra_key = "llama.attention.sliding_window"; /* llama.cpp ignores it for llama */
    m = load_ok_path(&s, "lsw.gguf");
    assert_int_equal(m->cfg.n_swa, 0);
    model_free(m);
}

/* phi3: the fused attn_qkv and gate/up ffn_up as row views (Q, K, V; gate, up), partial
 * rotary dims, or separate attn_q/k/v. */
static void test_phi3(void **state)
{
    (void)state;
    const tdtype types[] = {TD_F32, TD_Q8_0};
    for (size_t t = 0; t < 2; t++) {
        spec s = base_spec("phi3");
        s.wtype = types[t];
        add_key(&s, "rope.dimension_count", 'u', 8);
        add_key(&s, "attention.sliding_window", 'u', 0);
        model *m = load_ok_path(&s, "phi3.gguf");
        const model_config *c = &m->cfg;
        assert_int_equal(c->arch, MODEL_ARCH_PHI3);
        assert_int_equal(c->n_rot, 8);
        assert_int_equal(c->ffn_act, MODEL_ACT_SILU);
        assert_int_equal(c->n_swa, 0);
        assert_true(c->rope_neox);
        const size_t row = td_row_bytes(s.wtype, 64);
        for (int il = 0; il < 2; il++) {
            const model_layer *l = &m->layers[il];
            const model_tensor *qkv = layer_tensor(m, il, "attn_qkv.weight");
            const model_tensor *up = layer_tensor(m, il, "ffn_up.weight");
            assert_non_null(qkv);
            assert_int_equal(qkv->ne[1], 64 + 2 * 32);
            const model_tensor *v[] = {l->wq, l->wk, l->wv, l->w_gate, l->w_up};
            const model_tensor *whole[] = {qkv, qkv, qkv, up, up};
            const int64_t r0[] = {0, 64, 96, 0, 96}, n[] = {64, 32, 32, 96, 96};
            for (int k = 0; k < 5; k++) {
                assert_int_equal(v[k]->type, s.wtype);
                assert_int_equal(v[k]->n_dims, 2);
                assert_int_equal(v[k]->ne[0], 64);
                assert_int_equal(v[k]->ne[1], n[k]);
                assert_int_equal(v[k]->nbytes, row * (size_t)n[k]);
                assert_ptr_equal(v[k]->data, (const uint8_t *)whole[k]->data + row * (size_t)r0[k]);
            }
            assert_int_equal(l->w_down->ne[0], 96);
        }
        model_free(m);
    }
    spec s = base_spec("phi3");
    s.phi3_split = true;
    model *m = load_ok_path(&s, "phi3s.gguf");
    assert_ptr_equal(m->layers[1].wk, layer_tensor(m, 1, "attn_k.weight"));
    assert_int_equal(m->cfg.n_rot, 16);
    model_free(m);
    s = base_spec("phi3");
    s.bad_shape = "blk.0.ffn_up.weight";
    load_bad(&s, "blk.0.ffn_up.weight");
    s = base_spec("phi3");
    add_key(&s, "rope.dimension_count", 'u', 7);
    load_bad(&s, "rotary dimension 7 must be even");

    /* LongRoPE (Phi-3.5): short factors up to the original context, long ones beyond */
    s = base_spec("phi3");
    add_key(&s, "rope.dimension_count", 'u', 8);
    add_key(&s, "rope.scaling.original_context_length", 'u', 64);
    add_key(&s, "rope.scaling.attn_factor", 'f', 1.1875);
    s.longrope = 3;
    s.longrope_n = 4;
    m = load_ok_path(&s, "phi3lr.gguf");
    const model_config *c = &m->cfg;
    assert_int_equal(c->rope_long_ctx, 64);
    assert_true(c->rope_attn_factor == 1.1875f);
    assert_true(model_rope_attn_factor(c) == 1.1875f);
    assert_true(model_rope_freqs(c, 64)[0] == 1.25f && model_rope_freqs(c, 64)[3] == 1.25f);
    assert_true(model_rope_freqs(c, 65)[0] == 3.0f && model_rope_freqs(c, 65)[3] == 3.0f);
    model_free(m);
    s.longrope = 2;
    load_bad(&s, "tensor 'rope_factors_long.weight' needs rope_factors_short.weight");
    s.longrope = 3;
    s.longrope_n = 8;
    load_bad(&s, "tensor 'rope_factors_short.weight' must be F32 of 4 elements (n_rot / 2)");
    s.longrope_n = 4;
    s.rope_freqs = 4;
    s.rope_freq0 = 1.0f;
    load_bad(&s, "needs no rope_freqs.weight beside it");
    s = base_spec("llama");
    s.longrope = 3;
    s.longrope_n = 8;
    load_bad(&s, "tensor 'rope_factors_long.weight' is not used by architecture llama");
}

static void check_experts(const model *m, int n_expert, int64_t n_ff_exp)
{
    const model_config *c = &m->cfg;
    assert_int_equal(c->n_expert, n_expert);
    assert_int_equal(c->n_expert_used, 2);
    assert_int_equal(c->n_ff_exp, n_ff_exp);
    for (int il = 0; il < c->n_layer; il++) {
        const model_layer *l = &m->layers[il];
        assert_null(l->w_gate);
        assert_null(l->w_up);
        assert_null(l->w_down);
        assert_ptr_equal(l->ffn_gate_inp, layer_tensor(m, il, "ffn_gate_inp.weight"));
        assert_int_equal(l->ffn_gate_inp->ne[1], n_expert);
        const model_tensor *stacked[] = {layer_tensor(m, il, "ffn_gate_exps.weight"),
                                         layer_tensor(m, il, "ffn_up_exps.weight"),
                                         layer_tensor(m, il, "ffn_down_exps.weight")};
        const model_tensor *const *views[] = {l->exp_gate, l->exp_up, l->exp_down};
        for (int k = 0; k < 3; k++) {
            assert_non_null(stacked[k]);
            assert_int_equal(stacked[k]->n_dims, 3);
            assert_int_equal(stacked[k]->ne[2], n_expert);
            const size_t plane =
                td_row_bytes(stacked[k]->type, stacked[k]->ne[0]) * (size_t)stacked[k]->ne[1];
            for (int e = 0; e < n_expert; e++) {
                const model_tensor *v = views[k][e];
                assert_int_equal(v->n_dims, 2);
                assert_int_equal(v->ne[0], k == 2 ? n_ff_exp : 64);
                assert_int_equal(v->ne[1], k == 2 ? 64 : n_ff_exp);
                assert_int_equal(v->nbytes, plane);
                assert_ptr_equal(v->data, (const uint8_t *)stacked[k]->data + plane * (size_t)e);
            }
        }
    }
}

/* qwen3moe and Mixtral (llama with experts): the router and the stacked 3-D experts as views;
 * their errors. */
static void test_moe(void **state)
{
    (void)state;
    spec s = base_spec("qwen3moe");
    s.n_expert = 4;
    s.n_ff_exp = 32;
    s.wtype = TD_Q8_0;
    model *m = load_ok_path(&s, "moe.gguf");
    assert_int_equal(m->cfg.arch, MODEL_ARCH_QWEN3MOE);
    check_experts(m, 4, 32);
    assert_non_null(m->layers[0].q_norm);
    model_free(m);

    s = base_spec("llama");
    s.n_expert = 3;
    m = load_ok_path(&s, "mixtral.gguf");
    assert_int_equal(m->cfg.arch, MODEL_ARCH_LLAMA);
    assert_false(m->cfg.rope_neox);
    check_experts(m, 3, 96);
    model_free(m);

    s = base_spec("qwen3moe");
    s.n_expert = 4;
    s.n_ff_exp = 32;
    s.skip = "blk.1.ffn_up_exps.weight";
    load_bad(&s, "missing tensor 'blk.1.ffn_up_exps.weight'");
    s = base_spec("qwen3moe");
    s.n_expert = 4;
    s.n_ff_exp = 32;
    s.bad_shape = "blk.0.ffn_down_exps.weight";
    load_bad(&s, "tensor 'blk.0.ffn_down_exps.weight' has shape {32, 65, 4, 1}, expected {32, 64, "
                 "4}");
    s = base_spec("qwen3moe");
    s.n_expert = 4;
    s.n_ff_exp = 32;
    s.skip = "blk.0.ffn_gate_inp.weight";
    load_bad(&s, "missing tensor 'blk.0.ffn_gate_inp.weight'");
    s = base_spec("qwen3moe"); /* no expert_count */
    load_bad(&s, "qwen3moe.expert_count");

    /* qwen2moe: raw expert weights, the shared expert (n_ff wide unless the key says), optional
     * q/k/v biases */
    s = base_spec("qwen2moe");
    s.n_expert = 4;
    s.n_ff_exp = 32;
    s.wtype = TD_Q8_0;
    m = load_ok_path(&s, "qwen2moe.gguf");
    const model_config *c = &m->cfg;
    assert_int_equal(c->arch, MODEL_ARCH_QWEN2MOE);
    check_experts(m, 4, 32);
    assert_true(c->expert_weights_raw);
    assert_int_equal(c->n_ff_shexp, 96);
    assert_true(c->rope_neox);
    for (int il = 0; il < 2; il++) {
        const model_layer *l = &m->layers[il];
        assert_ptr_equal(l->ffn_gate_inp_shexp, layer_tensor(m, il, "ffn_gate_inp_shexp.weight"));
        assert_ptr_equal(l->w_gate_shexp, layer_tensor(m, il, "ffn_gate_shexp.weight"));
        assert_ptr_equal(l->w_up_shexp, layer_tensor(m, il, "ffn_up_shexp.weight"));
        assert_ptr_equal(l->w_down_shexp, layer_tensor(m, il, "ffn_down_shexp.weight"));
        assert_true((l->bq != NULL) == (il == 0));
        assert_null(l->q_norm);
    }
    model_free(m);
    s.skip = "blk.1.ffn_down_shexp.weight";
    load_bad(&s, "missing tensor 'blk.1.ffn_down_shexp.weight'");
    s.skip = NULL;
    add_key(&s, "expert_shared_feed_forward_length", 'u', 48);
    load_bad(&s,
             "tensor 'blk.0.ffn_gate_shexp.weight' has shape {64, 96, 1, 1}, expected {64, 48}");
    s = base_spec("qwen3moe");
    s.n_expert = 4;
    s.n_ff_exp = 32;
    s.bad_shape = NULL;
    m = load_ok_path(&s, "moe2.gguf");
    assert_false(m->cfg.expert_weights_raw);
    assert_null(m->layers[0].w_gate_shexp);
    model_free(m);
    s = base_spec("llama");
    s.n_expert = 1; /* fewer experts than expert_used_count (2) */
    load_bad(&s, "experts: 1 in all, 2 per token");
}

static void test_unsupported_type(void **state)
{
    (void)state;
    spec s = base_spec("llama");
    const char *path = tmp_path("i8.gguf");
    write_model(&s, path);
    patch_type(path, "blk.0.attn_q.weight", 24);
    char err[512];
    model *m = model_load(path, err, sizeof(err));
    unlink(path);
    assert_null(m);
    char want[512];
    snprintf(want, sizeof(want),
             "%s: tensor 'blk.0.attn_q.weight' has type I8 (24), which is not supported "
             "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, "
             "Q4_K, Q5_K, Q6_K, IQ4_XS)",
             path);
    assert_string_equal(err, want);
}

/* Every prefix of a small valid model file fails to load with a message; the whole file loads. */
static void test_truncated_model(void **state)
{
    (void)state;
    spec s = base_spec("qwen3");
    s.n_layer = 1;
    s.n_embd = 8;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 4;
    s.n_ff = 8;
    s.n_vocab = 6;
    char path[300];
    snprintf(path, sizeof(path), "%s", tmp_path("full.gguf"));
    write_model(&s, path);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t file[16384];
    size_t len = fread(file, 1, sizeof(file), f);
    fclose(f);
    unlink(path);
    assert_true(len > 1000 && len < sizeof(file));
    /* a memfd cut shorter and shorter: much faster than creating thousands of files */
    int fd = memfd_create("truncated_model", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, file, len), (ssize_t)len);
    char cut[64];
    snprintf(cut, sizeof(cut), "/proc/self/fd/%d", fd);
    char err[512];
    model *m = model_load(cut, err, sizeof(err));
    if (!m) {
        fail_msg("whole file: %s", err);
        return;
    }
    model_free(m);
    for (size_t n = len; n-- > 0;) {
        assert_int_equal(ftruncate(fd, (off_t)n), 0);
        m = model_load(cut, err, sizeof(err));
        if (m) {
            fail_msg("prefix of %zu/%zu bytes loaded", n, len);
        }
        assert_non_null(strstr(err, cut));
    }
    close(fd);
}

/* The keys only "t5" / "bert" vocabularies use reach model_gguf_vocab (tokenizer_from_model
 * hands them to the tokenizer); absent ones are -1 / NULL. */
static void test_unigram_wordpiece_keys(void **state)
{
    (void)state;
    spec s = base_spec("llama");
    s.t5_keys = 1;
    model *m = load_ok_path(&s, "t5keys.gguf");
    const model_gguf_vocab *v = &m->vocab;
    assert_int_equal(v->charsmap_len, 5);
    assert_int_equal(v->precompiled_charsmap[4], 5);
    assert_int_equal(v->remove_extra_whitespaces, 1);
    assert_int_equal(v->sep_id, 3);
    assert_int_equal(v->add_sep, 0);
    assert_int_equal(v->lowercase, 1);
    assert_int_equal(v->strip_accents, -1);
    model_free(m);
    s = base_spec("llama");
    m = load_ok_path(&s, "not5keys.gguf");
    assert_null(m->vocab.precompiled_charsmap);
    assert_int_equal(m->vocab.sep_id, -1);
    assert_int_equal(m->vocab.remove_extra_whitespaces, -1);
    model_free(m);
    s = base_spec("llama");
    s.t5_keys = 2;
    load_bad(&s, "tokenizer.ggml.precompiled_charsmap must be an array of bytes");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_archs_and_types),
        cmocka_unit_test(test_mha_and_head_dim),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_unsupported_type),
        cmocka_unit_test(test_truncated_model),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_rope_scaling_errors),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_unigram_wordpiece_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
