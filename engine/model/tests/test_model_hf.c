/* Unit tests for the safetensors reader and for model_load on Hugging Face directories written
 * by hand in the test (config.json, a hand-built .safetensors, tokenizer files): llama and qwen3,
 * sharded files, F16/BF16 norm conversion; gemma2/gemma3 (norms + 1, post-norms, soft-caps,
 * sliding-window layers), phi3 (fused QKV and gate/up, partial rotary), qwen3moe and Mixtral
 * (per-expert tensors), Mistral's sliding window; and the errors (config field types,
 * rope_scaling, architecture fields, missing files and experts, unsupported dtypes, inconsistent
 * offsets, truncation). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "lib/buf.h"

#define MAX_T 64

typedef struct st_builder {
    int n;
    char names[MAX_T][96];
    char dtypes[MAX_T][8];
    int n_dims[MAX_T];
    int64_t shape[MAX_T][4];
    size_t nbytes[MAX_T];
} st_builder;

static size_t dtype_size(const char *d)
{
    return strcmp(d, "F32") == 0 ? 4 : strcmp(d, "I64") == 0 ? 8 : 2;
}

static void st_add(st_builder *b, const char *name, const char *dtype, int64_t d0, int64_t d1)
{
    assert_true(b->n < MAX_T);
    int i = b->n++;
    snprintf(b->names[i], sizeof(b->names[i]), "%s", name);
    snprintf(b->dtypes[i], sizeof(b->dtypes[i]), "%s", dtype);
    b->n_dims[i] = d1 ? 2 : 1;
    b->shape[i][0] = d0;
    b->shape[i][1] = d1;
    b->nbytes[i] = (size_t)d0 * (size_t)(d1 ? d1 : 1) * dtype_size(dtype);
}

/* Serializes b into out: header JSON padded to 8 bytes, then data (element values i*0.5). */
static void st_build(const st_builder *b, struct buf *out)
{
    struct buf h;
    buf_init(&h, 1 << 20);
    buf_appends(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = 0; i < b->n; i++) {
        buf_appendf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", b->names[i], b->dtypes[i]);
        for (int d = 0; d < b->n_dims[i]; d++) {
            buf_appendf(&h, "%s%lld", d ? "," : "", (long long)b->shape[i][d]);
        }
        buf_appendf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + b->nbytes[i]);
        off += b->nbytes[i];
    }
    buf_appends(&h, "}");
    while (h.len % 8) {
        buf_appends(&h, " ");
    }
    buf_init(out, 64 << 20);
    uint64_t hl = h.len;
    buf_append(out, &hl, 8);
    buf_append(out, h.data, h.len);
    for (int i = 0; i < b->n; i++) {
        size_t es = dtype_size(b->dtypes[i]);
        for (size_t k = 0; k < b->nbytes[i] / es; k++) {
            float f = (float)k * 0.5f;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            if (es == 4) {
                buf_append(out, &f, 4);
            } else if (strcmp(b->dtypes[i], "BF16") == 0) {
                uint16_t v = (uint16_t)(bits >> 16);
                buf_append(out, &v, 2);
            } else if (strcmp(b->dtypes[i], "F16") == 0) {
                /* k * 0.5 for small k is exact in f16: build it from the f32 bits */
                uint32_t e = (bits >> 23) & 0xff, mant = bits & 0x7fffff;
                uint16_t v = f == 0.0f ? 0 : (uint16_t)(((e - 112) << 10) | (mant >> 13));
                buf_append(out, &v, 2);
            } else {
                uint64_t z = k;
                buf_append(out, &z, 8);
            }
        }
    }
    buf_free(&h);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    write_file(path, text, strlen(text));
}

static char g_dir[256];

static void rm_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static const char *fresh_dir(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/tandem_model_hf_%d", (int)getpid());
    rm_dir(g_dir);
    assert_int_equal(mkdir(g_dir, 0755), 0);
    return g_dir;
}

typedef struct hf_spec {
    const char *norm_dtype;   /* dtype of 1-D tensors */
    const char *mat_dtype;    /* dtype of matrices */
    const char *skip;         /* HF tensor left out */
    const char *config_extra; /* appended inside config.json's object */
    const char *extra_i64;    /* name of an extra I64 tensor */
    int shards;               /* 1 or 2 */
    bool qwen3;
    bool tied;
} hf_spec;

enum { E = 64, H = 4, KV = 2, HD = 16, FF = 96, V = 40, L = 2 };

static void write_hf(const hf_spec *s)
{
    const char *dir = fresh_dir();
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"architectures\":[\"%s\"],\"model_type\":\"%s\",\"hidden_size\":%d,"
             "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"head_dim\":%d,\"intermediate_size\":%d,\"vocab_size\":%d,"
             "\"max_position_embeddings\":512,\"rope_theta\":1000000.0,\"rms_norm_eps\":1e-06,"
             "\"tie_word_embeddings\":%s,\"rope_scaling\":null,\"hidden_act\":\"silu\"%s}",
             s->qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM", s->qwen3 ? "qwen3" : "llama", E, L,
             H, KV, HD, FF, V, s->tied ? "true" : "false", s->config_extra ? s->config_extra : "");
    write_text(dir, "config.json", cfg);
    write_text(dir, "tokenizer.json", "{}");
    write_text(dir, "tokenizer_config.json",
               "{\"bos_token\":{\"content\":\"<s>\",\"lstrip\":false},\"eos_token\":\"</s>\","
               "\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},"
               "{\"name\":\"default\",\"template\":\"{{ messages }}\"}]}");
    st_builder *b[2];
    b[0] = calloc(1, sizeof(st_builder));
    b[1] = calloc(1, sizeof(st_builder));
    if (!b[0] || !b[1]) {
        abort();
    }
    const char *nd = s->norm_dtype ? s->norm_dtype : "F32";
    const char *md = s->mat_dtype ? s->mat_dtype : "F32";
#define T(bi, name, dt, a, c)                                                                      \
    do {                                                                                           \
        if (!s->skip || strcmp(s->skip, name) != 0) {                                              \
            st_add(b[bi], name, dt, a, c);                                                         \
        }                                                                                          \
    } while (0)
    T(0, "model.embed_tokens.weight", md, V, E);
    T(1, "model.norm.weight", nd, E, 0);
    if (!s->tied) {
        T(1, "lm_head.weight", md, V, E);
    }
    for (int l = 0; l < L; l++) {
        int bi = s->shards == 2 ? l % 2 : 0;
        char n[128];
#define LT(suffix, dt, a, c)                                                                       \
    do {                                                                                           \
        snprintf(n, sizeof(n), "model.layers.%d.%s", l, suffix);                                   \
        T(bi, n, dt, a, c);                                                                        \
    } while (0)
        LT("input_layernorm.weight", nd, E, 0);
        LT("self_attn.q_proj.weight", md, H * HD, E);
        LT("self_attn.k_proj.weight", md, KV * HD, E);
        LT("self_attn.v_proj.weight", md, KV * HD, E);
        LT("self_attn.o_proj.weight", md, E, H * HD);
        if (s->qwen3) {
            LT("self_attn.q_norm.weight", nd, HD, 0);
            LT("self_attn.k_norm.weight", nd, HD, 0);
        }
        LT("post_attention_layernorm.weight", nd, E, 0);
        LT("mlp.gate_proj.weight", md, FF, E);
        LT("mlp.up_proj.weight", md, FF, E);
        LT("mlp.down_proj.weight", md, E, FF);
#undef LT
    }
#undef T
    if (s->extra_i64) {
        st_add(b[0], s->extra_i64, "I64", 4, 0);
    }
    if (s->shards != 2) {
        for (int i = 0; i < b[1]->n; i++) {
            st_add(b[0], b[1]->names[i], b[1]->dtypes[i], b[1]->shape[i][0],
                   b[1]->n_dims[i] == 2 ? b[1]->shape[i][1] : 0);
        }
    }
    for (int k = 0; k < (s->shards == 2 ? 2 : 1); k++) {
        struct buf out;
        st_build(b[k], &out);
        char path[512];
        snprintf(path, sizeof(path), "%s/model-%05d-of-%05d.safetensors", dir, k + 1,
                 s->shards == 2 ? 2 : 1);
        write_file(path, out.data, out.len);
        buf_free(&out);
    }
    free(b[0]);
    free(b[1]);
}

static model *hf_ok(const hf_spec *s)
{
    write_hf(s);
    char err[512];
    model *m = model_load(g_dir, err, sizeof(err));
    if (!m) {
        fail_msg("model_load: %s", err);
    }
    return m;
}

/* Loads g_dir as it is now (after write_text edits). */
static model *load_dir_ok(void)
{
    char err[512];
    model *m = model_load(g_dir, err, sizeof(err));
    if (!m) {
        fail_msg("model_load: %s", err);
    }
    return m;
}

static void hf_bad(const hf_spec *s, const char *want)
{
    write_hf(s);
    char err[512] = "";
    model *m = model_load(g_dir, err, sizeof(err));
    if (m) {
        model_free(m);
        fail_msg("model_load should fail with \"%s\"", want);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    }
}

static void check_hf(const model *m, const hf_spec *s)
{
    const model_config *c = &m->cfg;
    assert_int_equal(m->format, MODEL_FORMAT_HF);
    assert_int_equal(c->arch, s->qwen3 ? MODEL_ARCH_QWEN3 : MODEL_ARCH_LLAMA);
    assert_int_equal(c->n_layer, L);
    assert_int_equal(c->n_embd, E);
    assert_int_equal(c->n_head, H);
    assert_int_equal(c->n_head_kv, KV);
    assert_int_equal(c->head_dim, HD);
    assert_int_equal(c->n_ff, FF);
    assert_int_equal(c->n_vocab, V);
    assert_int_equal(c->n_ctx_train, 512);
    assert_true(c->rope_base == 1000000.0f);
    assert_true(c->rms_eps == 1e-6f);
    assert_true(c->rope_neox);
    assert_int_equal(c->tied_output, s->tied);
    /* [out, in] safetensors -> ne = {in, out} */
    assert_int_equal(m->tok_embd->ne[0], E);
    assert_int_equal(m->tok_embd->ne[1], V);
    assert_int_equal(m->layers[1].wk->ne[0], E);
    assert_int_equal(m->layers[1].wk->ne[1], KV * HD);
    assert_int_equal(m->layers[0].w_down->ne[0], FF);
    assert_ptr_equal(m->layers[0].wq, model_find_tensor(m, "blk.0.attn_q.weight"));
    if (s->tied) {
        assert_ptr_equal(m->output, m->tok_embd);
    } else {
        assert_ptr_equal(m->output, model_find_tensor(m, "output.weight"));
    }
    /* norms are F32 whatever the file had, with the right values (element k = k / 2) */
    const model_tensor *norms[] = {m->output_norm, m->layers[1].attn_norm, m->layers[0].ffn_norm,
                                   m->layers[0].q_norm};
    for (size_t i = 0; i < 4; i++) {
        if (!norms[i]) {
            continue;
        }
        assert_int_equal(norms[i]->type, TD_F32);
        assert_int_equal(norms[i]->nbytes, (size_t)norms[i]->ne[0] * 4);
        float f;
        memcpy(&f, (const uint8_t *)norms[i]->data + 4 * 9, 4);
        assert_true(f == 4.5f);
    }
    assert_int_equal(m->layers[0].q_norm != NULL, s->qwen3);
    assert_null(m->layers[0].bq);
    const char *md = s->mat_dtype ? s->mat_dtype : "F32";
    assert_int_equal(m->layers[0].w_up->type, strcmp(md, "F32") == 0   ? TD_F32
                                              : strcmp(md, "F16") == 0 ? TD_F16
                                                                       : TD_BF16);
    char path[512];
    snprintf(path, sizeof(path), "%s/tokenizer.json", g_dir);
    assert_string_equal(m->hf_tokenizer_json, path);
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", g_dir);
    assert_string_equal(m->hf_tokenizer_config, path);
    assert_string_equal(m->chat_template, "{{ messages }}");
    assert_string_equal(m->bos_token, "<s>");
    assert_string_equal(m->eos_token, "</s>");
    assert_null(m->vocab.tokens);
    assert_int_equal(m->vocab.n_tokens, 0);
    char name[64];
    snprintf(name, sizeof(name), "tandem_model_hf_%d", (int)getpid());
    assert_string_equal(m->name, name);
    assert_true(m->n_params > (size_t)(V * E));
}

static void test_hf_models(void **state)
{
    (void)state;
    hf_spec specs[] = {
        {.qwen3 = false},
        {.qwen3 = false, .tied = true, .norm_dtype = "BF16", .mat_dtype = "BF16"},
        {.qwen3 = true, .norm_dtype = "F16", .mat_dtype = "F16", .shards = 2},
        {.qwen3 = true, .tied = true, .norm_dtype = "BF16", .mat_dtype = "F32", .shards = 2},
    };
    for (size_t i = 0; i < ARRAY_SIZE(specs); i++) {
        model *m = hf_ok(&specs[i]);
        check_hf(m, &specs[i]);
        model_free(m);
    }
    rm_dir(g_dir);
}

static void test_hf_errors(void **state)
{
    (void)state;
    hf_spec s = {.qwen3 = false};
    s.config_extra = ",\"hidden_size\":\"64\"";
    /* duplicate key: lib/json rejects it, naming the key */
    hf_bad(&s, "config.json");
    s.config_extra = NULL;
    write_hf(&s);
    write_text(g_dir, "config.json",
               "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":\"64\"}");
    char err[512];
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "config.json: hidden_size: expected integer, got string"));
    write_text(g_dir, "config.json",
               "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":96,"
               "\"vocab_size\":40,\"max_position_embeddings\":512,\"rms_norm_eps\":\"x\"}");
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "config.json: rms_norm_eps: expected number, got string"));
    write_text(g_dir, "config.json",
               "{\"architectures\":[\"GPTNeoXForCausalLM\"],\"hidden_size\":64}");
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "architecture 'GPTNeoXForCausalLM' is not supported"));
    write_text(g_dir, "config.json", "[1]");
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "config.json: expected a JSON object"));
    write_text(g_dir, "config.json", "{\"a\":");
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "config.json: line 1"));

    hf_spec r = {.config_extra = ",\"rope_scaling_type\":null"};
    model *m = hf_ok(&r);
    model_free(m);
    write_hf(&s);
    write_text(g_dir, "config.json",
               "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":96,"
               "\"vocab_size\":40,\"max_position_embeddings\":512,"
               "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}");
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "rope_scaling.low_freq_factor (type llama3): required"));
    write_text(g_dir, "config.json",
               "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":96,"
               "\"vocab_size\":40,\"max_position_embeddings\":512,"
               "\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":4.0}}");
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "rope_scaling type 'dynamic' is not supported (null, 'default', "
                                "'linear', 'llama3', 'yarn' or 'longrope')"));
    /* Llama 3.1's values: the high frequencies keep theirs, the low ones are divided by 8 */
    write_text(g_dir, "config.json",
               "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":96,"
               "\"vocab_size\":40,\"max_position_embeddings\":512,\"rope_theta\":500000.0,"
               "\"num_key_value_heads\":2,"
               "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
               "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
               "\"original_max_position_embeddings\":8192}}");
    model *l3 = load_dir_ok();
    assert_non_null(l3->cfg.rope_freqs);
    assert_true(l3->cfg.rope_freqs[0] == 1.0f && l3->cfg.rope_freqs[7] == 8.0f);
    model_free(l3);
    write_text(g_dir, "config.json",
               "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":96,"
               "\"vocab_size\":40,\"max_position_embeddings\":512,"
               "\"num_key_value_heads\":2,\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0}}");
    model *lin = load_dir_ok();
    assert_null(lin->cfg.rope_freqs);
    assert_true(model_rope_freq_scale(&lin->cfg) == 0.25f);
    model_free(lin);

    hf_spec miss = {.skip = "model.layers.1.mlp.up_proj.weight"};
    hf_bad(&miss, "missing tensor 'blk.1.ffn_up.weight' (Hugging Face name "
                  "'model.layers.1.mlp.up_proj.weight')");
    hf_spec nohead = {.skip = "lm_head.weight"};
    hf_bad(&nohead, "missing tensor 'output.weight' (Hugging Face name 'lm_head.weight')");
    hf_spec q3 = {.qwen3 = true, .skip = "model.layers.0.self_attn.k_norm.weight"};
    hf_bad(&q3, "missing tensor 'blk.0.attn_k_norm.weight'");
    hf_spec i64 = {.extra_i64 = "model.position_ids"};
    hf_bad(&i64, "model-00001-of-00001.safetensors: tensor 'model.position_ids' has dtype I64, "
                 "which is not supported (supported: F32, F16, BF16)");
    hf_spec dup = {.config_extra = ",\"num_key_value_heads\":4"};
    hf_bad(&dup, "duplicate");

    /* missing files */
    write_hf(&s);
    char path[512];
    snprintf(path, sizeof(path), "%s/tokenizer.json", g_dir);
    unlink(path);
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "missing tokenizer.json"));
    snprintf(path, sizeof(path), "%s/model-00001-of-00001.safetensors", g_dir);
    unlink(path);
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "no *.safetensors files"));
    snprintf(path, sizeof(path), "%s/config.json", g_dir);
    unlink(path);
    assert_null(model_load(g_dir, err, sizeof(err)));
    assert_non_null(strstr(err, "config.json: cannot open"));
    rm_dir(g_dir);
}

/* A Hugging Face folder of one of the newer architectures (model_type decides the tensors). */
typedef struct arch_spec {
    const char *arch;       /* architectures[0] */
    const char *model_type; /* gemma2 gemma3_text phi3 qwen3_moe mixtral */
    const char *cfg;        /* architecture fields of config.json, "" for none */
    const char *skip;       /* HF tensor left out */
    const char *reshape;    /* HF tensor written with one more row */
    const char *norm_dtype; /* dtype of 1-D tensors (F32) */
    int n_expert;           /* qwen3_moe / mixtral */
    int n_ff_exp;           /* qwen3_moe */
} arch_spec;

static void write_arch(const arch_spec *a)
{
    const char *dir = fresh_dir();
    const bool gemma = strncmp(a->model_type, "gemma", 5) == 0;
    const bool gemma3 = strcmp(a->model_type, "gemma3_text") == 0;
    const bool phi3 = strcmp(a->model_type, "phi3") == 0;
    const bool q2moe = strcmp(a->model_type, "qwen2_moe") == 0;
    const bool qmoe = strcmp(a->model_type, "qwen3_moe") == 0 || q2moe;
    const bool mixtral = strcmp(a->model_type, "mixtral") == 0;
    char cfg[2048];
    snprintf(
        cfg, sizeof(cfg),
        "{\"architectures\":[\"%s\"],\"model_type\":\"%s\",\"hidden_size\":%d,"
        "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
        "\"head_dim\":%d,\"intermediate_size\":%d,\"vocab_size\":%d,"
        "\"max_position_embeddings\":512,\"rope_theta\":1000000.0,\"rms_norm_eps\":1e-06%s%s%s}",
        a->arch, a->model_type, E, L, H, KV, HD, FF, V,
        gemma ? "" : ",\"tie_word_embeddings\":false", a->cfg[0] ? "," : "", a->cfg);
    write_text(dir, "config.json", cfg);
    write_text(dir, "tokenizer.json", "{}");
    st_builder *b = calloc(1, sizeof(st_builder));
    if (!b) {
        abort();
    }
    const char *nd = a->norm_dtype ? a->norm_dtype : "F32";
#define T(name, dt, r, c)                                                                          \
    do {                                                                                           \
        if (!a->skip || strcmp(a->skip, name) != 0) {                                              \
            bool more = a->reshape && strcmp(a->reshape, name) == 0;                               \
            st_add(b, name, dt, (r) + more, c);                                                    \
        }                                                                                          \
    } while (0)
    T("model.embed_tokens.weight", "F32", V, E);
    T("model.norm.weight", nd, E, 0);
    if (!gemma) {
        T("lm_head.weight", "F32", V, E);
    }
    for (int l = 0; l < L; l++) {
        char n[128];
#define LT(suffix, dt, r, c)                                                                       \
    do {                                                                                           \
        snprintf(n, sizeof(n), "model.layers.%d.%s", l, suffix);                                   \
        T(n, dt, r, c);                                                                            \
    } while (0)
        LT("input_layernorm.weight", nd, E, 0);
        if (phi3) {
            LT("self_attn.qkv_proj.weight", "F32", (H + 2 * KV) * HD, E);
        } else {
            LT("self_attn.q_proj.weight", "F32", H * HD, E);
            LT("self_attn.k_proj.weight", "F32", KV * HD, E);
            LT("self_attn.v_proj.weight", "F32", KV * HD, E);
        }
        if (q2moe) { /* BF16, as a real checkpoint's, to exercise the conversion */
            LT("self_attn.q_proj.bias", "BF16", H * HD, 0);
            LT("self_attn.k_proj.bias", "BF16", KV * HD, 0);
            LT("self_attn.v_proj.bias", "BF16", KV * HD, 0);
        }
        if (gemma3 || (qmoe && !q2moe)) {
            LT("self_attn.q_norm.weight", nd, HD, 0);
            LT("self_attn.k_norm.weight", nd, HD, 0);
        }
        LT("self_attn.o_proj.weight", "F32", E, H * HD);
        LT("post_attention_layernorm.weight", nd, E, 0);
        if (gemma) {
            LT("pre_feedforward_layernorm.weight", nd, E, 0);
            LT("post_feedforward_layernorm.weight", nd, E, 0);
        }
        if (phi3) {
            LT("mlp.gate_up_proj.weight", "F32", 2 * FF, E);
            LT("mlp.down_proj.weight", "F32", E, FF);
        } else if (qmoe || mixtral) {
            const int fe = qmoe ? a->n_ff_exp : FF;
            LT(qmoe ? "mlp.gate.weight" : "block_sparse_moe.gate.weight", "F32", a->n_expert, E);
            for (int e = 0; e < a->n_expert; e++) {
                char x[96];
                const char *pre = qmoe ? "mlp.experts" : "block_sparse_moe.experts";
                snprintf(x, sizeof(x), "%s.%d.%s", pre, e, qmoe ? "gate_proj.weight" : "w1.weight");
                LT(x, "F32", fe, E);
                snprintf(x, sizeof(x), "%s.%d.%s", pre, e, qmoe ? "up_proj.weight" : "w3.weight");
                LT(x, "F32", fe, E);
                snprintf(x, sizeof(x), "%s.%d.%s", pre, e, qmoe ? "down_proj.weight" : "w2.weight");
                LT(x, "F32", E, fe);
            }
            if (q2moe) { /* the shared expert, FF wide, and its one-row gate */
                LT("mlp.shared_expert_gate.weight", "BF16", 1, E);
                LT("mlp.shared_expert.gate_proj.weight", "F32", FF, E);
                LT("mlp.shared_expert.up_proj.weight", "F32", FF, E);
                LT("mlp.shared_expert.down_proj.weight", "F32", E, FF);
            }
        } else {
            LT("mlp.gate_proj.weight", "F32", FF, E);
            LT("mlp.up_proj.weight", "F32", FF, E);
            LT("mlp.down_proj.weight", "F32", E, FF);
        }
#undef LT
    }
#undef T
    struct buf out;
    st_build(b, &out);
    char path[512];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_file(path, out.data, out.len);
    buf_free(&out);
    free(b);
}

static model *arch_ok(const arch_spec *a)
{
    write_arch(a);
    return load_dir_ok();
}

static void arch_bad(const arch_spec *a, const char *want)
{
    write_arch(a);
    char err[512] = "";
    model *m = model_load(g_dir, err, sizeof(err));
    if (m) {
        model_free(m);
        fail_msg("model_load should fail with \"%s\"", want);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    }
}

static const model_tensor *hf_layer_tensor(const model *m, int il, const char *suffix)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.%s", il, suffix);
    return model_find_tensor(m, name);
}

static void assert_swa_layers(const model *m, const char *want)
{
    for (int il = 0; il < m->cfg.n_layer; il++) {
        if (m->layers[il].swa != (want[il] == '1')) {
            fail_msg("layer %d: swa %d, want %c", il, m->layers[il].swa, want[il]);
        }
    }
}

/* Element 9 of a 1-D tensor (st_build wrote 4.5 there). */
static float elem9(const model_tensor *t)
{
    assert_int_equal(t->type, TD_F32);
    float f;
    memcpy(&f, (const uint8_t *)t->data + 4 * 9, 4);
    return f;
}

#define GEMMA2 "Gemma2ForCausalLM", "gemma2"
#define GEMMA3 "Gemma3ForCausalLM", "gemma3_text"

/* gemma2 / gemma3: the norms + 1 (every *norm.weight), their GGUF names, the features. */
static void test_hf_gemma(void **state)
{
    (void)state;
    arch_spec a = {
        .arch = "Gemma2ForCausalLM",
        .model_type = "gemma2",
        .cfg = "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_act\":\"gelu_pytorch_tanh\","
               "\"query_pre_attn_scalar\":24,\"sliding_window\":8,"
               "\"attn_logit_softcapping\":50.0,\"final_logit_softcapping\":null",
        .norm_dtype = "BF16"};
    model *m = arch_ok(&a);
    const model_config *c = &m->cfg;
    assert_int_equal(c->arch, MODEL_ARCH_GEMMA2);
    assert_int_equal(c->ffn_act, MODEL_ACT_GELU_TANH);
    assert_true(c->embd_scale == 8.0f);
    assert_true(c->attn_scale == 1.0f / sqrtf(24.0f));
    assert_true(c->attn_softcap == 50.0f && c->final_softcap == 0.0f);
    assert_int_equal(c->n_swa, 8);
    assert_true(c->rope_swa_scaled);
    assert_true(c->rope_base_swa == 1000000.0f);
    assert_true(c->tied_output); /* gemma's default */
    assert_ptr_equal(m->output, m->tok_embd);
    assert_swa_layers(m, "10");
    for (int il = 0; il < L; il++) {
        const model_layer *l = &m->layers[il];
        assert_ptr_equal(l->attn_post_norm, hf_layer_tensor(m, il, "post_attention_norm.weight"));
        assert_ptr_equal(l->ffn_norm, hf_layer_tensor(m, il, "ffn_norm.weight"));
        assert_ptr_equal(l->ffn_post_norm, hf_layer_tensor(m, il, "post_ffw_norm.weight"));
        const model_tensor *norms[] = {l->attn_norm, l->attn_post_norm, l->ffn_norm,
                                       l->ffn_post_norm};
        for (int k = 0; k < 4; k++) {
            assert_true(elem9(norms[k]) == 5.5f);
        }
    }
    assert_true(elem9(m->output_norm) == 5.5f);
    model_free(m);

    a = (arch_spec){.arch = "Gemma2ForCausalLM", .model_type = "gemma2", .cfg = ""};
    /* transformers' defaults */
    m = arch_ok(&a);
    assert_true(m->cfg.attn_softcap == 50.0f && m->cfg.final_softcap == 30.0f);
    assert_int_equal(m->cfg.n_swa, 4096);
    assert_true(m->cfg.attn_scale == 1.0f / 16.0f); /* query_pre_attn_scalar 256 */
    assert_int_equal(m->cfg.ffn_act, MODEL_ACT_GELU_TANH);
    model_free(m);

    a = (arch_spec){.arch = "Gemma3ForCausalLM",
                    .model_type = "gemma3_text",
                    .cfg = "\"sliding_window\":4,\"rope_local_base_freq\":10000.0,"
                           "\"sliding_window_pattern\":2,\"query_pre_attn_scalar\":16,"
                           "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":8.0}",
                    .norm_dtype = "F16"};
    m = arch_ok(&a);
    c = &m->cfg;
    assert_int_equal(c->arch, MODEL_ARCH_GEMMA3);
    assert_true(c->attn_softcap == 0.0f && c->final_softcap == 0.0f);
    assert_int_equal(c->n_swa, 4);
    assert_false(c->rope_swa_scaled);
    assert_true(c->rope_base_swa == 10000.0f && c->rope_base == 1000000.0f);
    assert_true(c->rope_factor == 8.0f);
    assert_swa_layers(m, "10");
    assert_true(elem9(m->layers[1].q_norm) == 5.5f && elem9(m->layers[0].k_norm) == 5.5f);
    model_free(m);
    a.cfg = "\"sliding_window\":4,\"sliding_window_pattern\":2,"
            "\"layer_types\":[\"full_attention\",\"sliding_attention\"]";
    m = arch_ok(&a);
    assert_swa_layers(m, "01");
    model_free(m);
    /* transformers 5's rope_parameters, per attention type */
    a.cfg = "\"sliding_window\":4,\"rope_parameters\":{\"full_attention\":{\"rope_type\":"
            "\"linear\",\"factor\":4.0,\"rope_theta\":200000.0},\"sliding_attention\":{"
            "\"rope_type\":\"default\",\"rope_theta\":20000.0}}";
    m = arch_ok(&a);
    assert_true(m->cfg.rope_base == 200000.0f && m->cfg.rope_base_swa == 20000.0f);
    assert_true(m->cfg.rope_factor == 4.0f);
    model_free(m);
    a.cfg = "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"linear\","
            "\"factor\":2.0}}";
    arch_bad(&a, "rope_parameters.sliding_attention.rope_type 'linear' is not supported");
    a.cfg = "\"final_logit_softcapping\":30.0"; /* window 4096, five local layers per global */
    m = arch_ok(&a);
    assert_int_equal(m->cfg.n_swa, 4096);
    assert_true(m->cfg.final_softcap == 30.0f);
    assert_swa_layers(m, "11");
    model_free(m);
    a.cfg = "\"sliding_window\":null";
    m = arch_ok(&a);
    assert_int_equal(m->cfg.n_swa, 0);
    assert_swa_layers(m, "00");
    model_free(m);

    const struct {
        const char *arch, *model_type, *cfg, *skip, *want;
    } bad[] = {
        {"Gemma3ForConditionalGeneration", "gemma3", "", NULL,
         "'Gemma3ForConditionalGeneration' (Gemma 3 with its vision tower) is not supported"},
        {GEMMA2, "\"hidden_activation\":\"gelu\"", NULL,
         "hidden_activation 'gelu' is not supported (only gelu_pytorch_tanh for gemma2)"},
        {GEMMA3, "\"hidden_act\":\"silu\"", NULL, "hidden_act 'silu' is not supported"},
        {GEMMA3, "\"layer_types\":[\"full_attention\"]", NULL,
         "layer_types: 1 entries for 2 layers"},
        {GEMMA3, "\"layer_types\":[\"full_attention\",\"chunked_attention\"]", NULL,
         "layer_types[1]: expected \"sliding_attention\" or \"full_attention\""},
        {GEMMA3, "\"sliding_window_pattern\":0", NULL, "sliding_window_pattern: must be >= 1"},
        {GEMMA3, "\"use_bidirectional_attention\":true", NULL,
         "use_bidirectional_attention: true (an embedding model) is not supported"},
        {GEMMA2, "\"query_pre_attn_scalar\":-1", NULL, "query_pre_attn_scalar"},
        {GEMMA2, "\"final_logit_softcapping\":-3.0", NULL, "final_logit_softcapping: -3"},
        {GEMMA2, "\"attention_bias\":true", NULL, "attention_bias is true"},
        {GEMMA2, "\"sliding_window\":-1", NULL, "sliding_window: must be >= 0"},
        {GEMMA2, "", "model.layers.1.post_feedforward_layernorm.weight",
         "missing tensor 'blk.1.post_ffw_norm.weight' (Hugging Face name "
         "'model.layers.1.post_feedforward_layernorm.weight')"},
        {GEMMA2, "", "model.layers.0.post_attention_layernorm.weight",
         "missing tensor 'blk.0.post_attention_norm.weight' (Hugging Face name "
         "'model.layers.0.post_attention_layernorm.weight')"},
        {GEMMA3, "", "model.layers.1.pre_feedforward_layernorm.weight",
         "missing tensor 'blk.1.ffn_norm.weight' (Hugging Face name "
         "'model.layers.1.pre_feedforward_layernorm.weight')"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        a = (arch_spec){.arch = bad[i].arch,
                        .model_type = bad[i].model_type,
                        .cfg = bad[i].cfg,
                        .skip = bad[i].skip};
        arch_bad(&a, bad[i].want);
    }
    rm_dir(g_dir);
}

/* phi3: qkv_proj and gate_up_proj as views, partial_rotary_factor, its sliding window. */
static void test_hf_phi3(void **state)
{
    (void)state;
    arch_spec a = {.arch = "Phi3ForCausalLM",
                   .model_type = "phi3",
                   .cfg = "\"partial_rotary_factor\":0.5,\"sliding_window\":2047,"
                          "\"original_max_position_embeddings\":512,\"rope_scaling\":null"};
    model *m = arch_ok(&a);
    const model_config *c = &m->cfg;
    assert_int_equal(c->arch, MODEL_ARCH_PHI3);
    assert_int_equal(c->n_rot, HD / 2);
    assert_int_equal(c->n_swa, 2047);
    assert_true(c->rope_swa_scaled);
    assert_swa_layers(m, "11");
    const size_t row = (size_t)E * 4;
    for (int il = 0; il < L; il++) {
        const model_layer *l = &m->layers[il];
        const model_tensor *qkv = hf_layer_tensor(m, il, "attn_qkv.weight");
        const model_tensor *up = hf_layer_tensor(m, il, "ffn_up.weight");
        assert_non_null(qkv);
        assert_non_null(up);
        assert_ptr_equal(l->wq->data, qkv->data);
        assert_ptr_equal(l->wk->data, (const uint8_t *)qkv->data + row * H * HD);
        assert_ptr_equal(l->wv->data, (const uint8_t *)qkv->data + row * (H + KV) * HD);
        assert_int_equal(l->wv->ne[1], KV * HD);
        assert_ptr_equal(l->w_gate->data, up->data);
        assert_ptr_equal(l->w_up->data, (const uint8_t *)up->data + row * FF);
        assert_int_equal(l->w_up->ne[1], FF);
    }
    model_free(m);
    a.cfg = "\"sliding_window\":null";
    m = arch_ok(&a);
    assert_int_equal(m->cfg.n_rot, HD);
    assert_int_equal(m->cfg.n_swa, 0);
    model_free(m);
    a.cfg = "\"rope_scaling\":{\"rope_type\":\"longrope\",\"long_factor\":[1.0],"
            "\"short_factor\":[1.0]}";
    arch_bad(&a, "rope_scaling.short_factor (type longrope) has 1 values, expected");
    a.cfg = "\"partial_rotary_factor\":1.5";
    arch_bad(&a, "partial_rotary_factor: must be in (0, 1]");
    a.cfg = "\"partial_rotary_factor\":0.1"; /* 1.6 -> 1 rotated dim */
    arch_bad(&a, "rotary dimension 1 must be even");
    a.cfg = "";
    a.reshape = "model.layers.1.self_attn.qkv_proj.weight";
    arch_bad(&a, "blk.1.attn_qkv.weight");
    rm_dir(g_dir);
}

static void check_hf_experts(const model *m, int n_expert, int n_ff_exp)
{
    const model_config *c = &m->cfg;
    assert_int_equal(c->n_expert, n_expert);
    assert_int_equal(c->n_expert_used, 2);
    assert_int_equal(c->n_ff_exp, n_ff_exp);
    for (int il = 0; il < L; il++) {
        const model_layer *l = &m->layers[il];
        assert_null(l->w_gate);
        assert_ptr_equal(l->ffn_gate_inp, hf_layer_tensor(m, il, "ffn_gate_inp.weight"));
        assert_int_equal(l->ffn_gate_inp->ne[0], E);
        assert_int_equal(l->ffn_gate_inp->ne[1], n_expert);
        for (int e = 0; e < n_expert; e++) {
            char suffix[48];
            snprintf(suffix, sizeof(suffix), "ffn_gate_exps.%d.weight", e);
            assert_ptr_equal(l->exp_gate[e], hf_layer_tensor(m, il, suffix));
            snprintf(suffix, sizeof(suffix), "ffn_up_exps.%d.weight", e);
            assert_ptr_equal(l->exp_up[e], hf_layer_tensor(m, il, suffix));
            snprintf(suffix, sizeof(suffix), "ffn_down_exps.%d.weight", e);
            assert_ptr_equal(l->exp_down[e], hf_layer_tensor(m, il, suffix));
            assert_int_equal(l->exp_up[e]->ne[0], E);
            assert_int_equal(l->exp_up[e]->ne[1], n_ff_exp);
            assert_int_equal(l->exp_down[e]->ne[0], n_ff_exp);
            assert_int_equal(l->exp_down[e]->ne[1], E);
        }
    }
}

#define QMOE_CFG                                                                                   \
    "\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"                    \
    "\"decoder_sparse_step\":1,\"use_sliding_window\":false,\"sliding_window\":null"

/* qwen3moe and Mixtral: one tensor per expert, the router; and their errors. */
static void test_hf_moe(void **state)
{
    (void)state;
    arch_spec a = {.arch = "Qwen3MoeForCausalLM",
                   .model_type = "qwen3_moe",
                   .cfg = QMOE_CFG ",\"norm_topk_prob\":true,\"mlp_only_layers\":[]",
                   .n_expert = 4,
                   .n_ff_exp = 32};
    model *m = arch_ok(&a);
    assert_int_equal(m->cfg.arch, MODEL_ARCH_QWEN3MOE);
    assert_int_equal(m->cfg.n_swa, 0);
    assert_non_null(m->layers[1].q_norm);
    check_hf_experts(m, 4, 32);
    model_free(m);

    /* qwen2moe: qwen2's biases, the shared expert and its gate (BF16 [1, hidden] -> F32) */
    a = (arch_spec){.arch = "Qwen2MoeForCausalLM",
                    .model_type = "qwen2_moe",
                    .cfg = QMOE_CFG ",\"shared_expert_intermediate_size\":96"
                                    ",\"norm_topk_prob\":false",
                    .n_expert = 4,
                    .n_ff_exp = 32};
    m = arch_ok(&a);
    assert_int_equal(m->cfg.arch, MODEL_ARCH_QWEN2MOE);
    assert_true(m->cfg.expert_weights_raw);
    assert_int_equal(m->cfg.n_ff_shexp, FF);
    check_hf_experts(m, 4, 32);
    for (int il = 0; il < L; il++) {
        const model_layer *l = &m->layers[il];
        assert_non_null(l->bq);
        assert_int_equal(l->bq->type, TD_F32);
        assert_null(l->q_norm);
        assert_ptr_equal(l->ffn_gate_inp_shexp,
                         hf_layer_tensor(m, il, "ffn_gate_inp_shexp.weight"));
        assert_int_equal(l->ffn_gate_inp_shexp->type, TD_F32);
        assert_int_equal(l->ffn_gate_inp_shexp->ne[0], E);
        assert_ptr_equal(l->w_down_shexp, hf_layer_tensor(m, il, "ffn_down_shexp.weight"));
        assert_int_equal(l->w_down_shexp->ne[0], FF);
    }
    model_free(m);
    a.cfg = QMOE_CFG ",\"shared_expert_intermediate_size\":96,\"norm_topk_prob\":true";
    arch_bad(&a, "norm_topk_prob: true is not supported");
    a.cfg = QMOE_CFG;
    arch_bad(&a, "shared_expert_intermediate_size");
    a.cfg = QMOE_CFG ",\"shared_expert_intermediate_size\":96";
    a.skip = "model.layers.1.mlp.shared_expert_gate.weight";
    arch_bad(&a, "missing tensor 'blk.1.ffn_gate_inp_shexp.weight' (Hugging Face name "
                 "'model.layers.1.mlp.shared_expert_gate.weight')");

    a = (arch_spec){.arch = "MixtralForCausalLM",
                    .model_type = "mixtral",
                    .cfg =
                        "\"num_local_experts\":3,\"num_experts_per_tok\":2,\"sliding_window\":null",
                    .n_expert = 3};
    m = arch_ok(&a);
    assert_int_equal(m->cfg.arch, MODEL_ARCH_LLAMA);
    assert_true(m->cfg.rope_neox);
    assert_int_equal(m->cfg.n_swa, 0);
    check_hf_experts(m, 3, FF);
    model_free(m);

    const struct {
        const char *cfg, *skip, *reshape, *want;
    } bad[] = {
        {QMOE_CFG ",\"norm_topk_prob\":false", NULL, NULL, "norm_topk_prob: false"},
        {QMOE_CFG, NULL, NULL, "norm_topk_prob: false (or absent) is not supported"},
        {QMOE_CFG ",\"norm_topk_prob\":true,\"mlp_only_layers\":[1]", NULL, NULL,
         "mlp_only_layers: dense layers"},
        {"\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
         "\"norm_topk_prob\":true,\"decoder_sparse_step\":2",
         NULL, NULL, "decoder_sparse_step: dense layers"},
        {"\"num_experts\":4,\"num_experts_per_tok\":5,\"moe_intermediate_size\":32,"
         "\"norm_topk_prob\":true",
         NULL, NULL, "experts: 4 in all, 5 per token"},
        {"\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"norm_topk_prob\":true", NULL,
         NULL, "num_experts"},
        {QMOE_CFG ",\"norm_topk_prob\":true", "model.layers.1.mlp.experts.2.up_proj.weight", NULL,
         "missing tensor 'blk.1.ffn_up_exps.2.weight' (Hugging Face name "
         "'model.layers.1.mlp.experts.2.up_proj.weight')"},
        {QMOE_CFG ",\"norm_topk_prob\":true", "model.layers.0.mlp.experts.0.gate_proj.weight", NULL,
         "missing tensor 'blk.0.ffn_gate_exps.weight' (Hugging Face name "
         "'model.layers.0.mlp.experts.0.gate_proj.weight')"},
        {QMOE_CFG ",\"norm_topk_prob\":true", "model.layers.0.mlp.gate.weight", NULL,
         "missing tensor 'blk.0.ffn_gate_inp.weight' (Hugging Face name "
         "'model.layers.0.mlp.gate.weight')"},
        {QMOE_CFG ",\"norm_topk_prob\":true", NULL, "model.layers.0.mlp.experts.1.down_proj.weight",
         "blk.0.ffn_down_exps.1.weight"},
        {"\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
         "\"norm_topk_prob\":true,\"use_sliding_window\":true",
         NULL, NULL, "use_sliding_window: sliding-window attention is not supported"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        a = (arch_spec){.arch = "Qwen3MoeForCausalLM",
                        .model_type = "qwen3_moe",
                        .cfg = bad[i].cfg,
                        .skip = bad[i].skip,
                        .reshape = bad[i].reshape,
                        .n_expert = 4,
                        .n_ff_exp = 32};
        arch_bad(&a, bad[i].want);
    }
    a = (arch_spec){.arch = "MixtralForCausalLM",
                    .model_type = "mixtral",
                    .cfg = "\"num_local_experts\":2",
                    .skip = "model.layers.1.block_sparse_moe.experts.1.w2.weight",
                    .n_expert = 2};
    arch_bad(&a, "missing tensor 'blk.1.ffn_down_exps.1.weight'");
    rm_dir(g_dir);
}

/* transformers 5's rope_parameters; Mistral's sliding_window applies to every layer, qwen's
 * only with use_sliding_window. */
static void test_hf_sliding_window(void **state)
{
    (void)state;
    hf_spec s = {.config_extra = ",\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                                 "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                                 "\"original_max_position_embeddings\":8192,"
                                 "\"rope_theta\":500000.0}"};
    model *m = hf_ok(&s);
    assert_true(m->cfg.rope_base == 500000.0f);
    assert_non_null(m->cfg.rope_freqs);
    model_free(m);
    s = (hf_spec){.config_extra = ",\"rope_parameters\":{\"rope_theta\":5.0}"};
    m = hf_ok(&s);
    assert_true(m->cfg.rope_base == 5.0f && m->cfg.rope_factor == 0.0f);
    model_free(m);

    s = (hf_spec){.config_extra = ",\"sliding_window\":16"};
    m = hf_ok(&s);
    assert_int_equal(m->cfg.n_swa, 16);
    assert_true(m->cfg.rope_swa_scaled);
    assert_true(m->cfg.rope_base_swa == m->cfg.rope_base);
    assert_swa_layers(m, "11");
    model_free(m);
    s = (hf_spec){.config_extra = ",\"sliding_window\":null"};
    m = hf_ok(&s);
    assert_int_equal(m->cfg.n_swa, 0);
    assert_swa_layers(m, "00");
    model_free(m);
    s = (hf_spec){.qwen3 = true, .config_extra = ",\"sliding_window\":16"};
    m = hf_ok(&s);
    assert_int_equal(m->cfg.n_swa, 0);
    model_free(m);
    rm_dir(g_dir);
}

/* Expects safetensors_open_buffer to fail with want in the message. */
static void st_bad(const void *data, size_t len, const char *want)
{
    char err[512] = "";
    safetensors_file *f = safetensors_open_buffer(data, len, "x.safetensors", err, sizeof(err));
    if (f) {
        safetensors_close(f);
        fail_msg("expected failure with \"%s\"", want);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    }
}

/* A file with one header text and len_data bytes of data. */
static void st_raw(struct buf *out, const char *header, size_t len_data)
{
    buf_init(out, 1 << 20);
    uint64_t hl = strlen(header);
    buf_append(out, &hl, 8);
    buf_appends(out, header);
    for (size_t i = 0; i < len_data; i++) {
        buf_append(out, "\0", 1);
    }
}

/* Writes config.json of the 64-wide llama (head_dim 16, rope_theta 10000, max_position_embeddings
 * 16384) with rope_scaling = the JSON object rs. */
/* A llama config.json with the given rope_scaling and top-level fields added (top: ",\"k\":v"
 * or ""). */
static void write_rope_config_top(const char *rs, const char *top)
{
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
             "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":96,"
             "\"vocab_size\":40,\"max_position_embeddings\":16384,\"num_key_value_heads\":2,"
             "\"rope_scaling\":%s%s}",
             rs, top);
    write_text(g_dir, "config.json", cfg);
}

static void write_rope_config(const char *rs)
{
    write_rope_config_top(rs, "");
}

/* model_load of write_rope_config_top(rs, top) fails with an error containing want. */
static void rope_bad(const char *rs, const char *top, const char *want)
{
    char err[512] = "";
    write_rope_config_top(rs, top);
    model *m = model_load(g_dir, err, sizeof(err));
    if (m) {
        model_free(m);
        fail_msg("model_load should fail with \"%s\" for %s", want, rs);
    }
    if (!strstr(err, want)) {
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
    }
}

static void yarn_bad(const char *rs, const char *want)
{
    rope_bad(rs, "", want);
}

/* rope_scaling of type longrope (Phi-3.5's config.json) or su, as transformers'
 * _compute_longrope_parameters reads it: the two lists, the original context and the magnitude;
 * the lists apply by the context (model_rope_freqs). */
static void test_hf_longrope(void **state)
{
    (void)state;
    hf_spec s = {0};
    write_hf(&s);
    static const char *const lists =
        "\"short_factor\":[1,1.0,1.5,1,1,1,1,2],\"long_factor\":[2,2,2,2,2,2,2,4.5]";
    char rs[512];
    snprintf(rs, sizeof(rs), "{\"type\":\"longrope\",%s}", lists);
    write_rope_config_top(rs, ",\"original_max_position_embeddings\":4096");
    model *m = load_dir_ok();
    const model_config *c = &m->cfg;
    assert_int_equal(c->rope_long_ctx, 4096);
    assert_true(c->rope_attn_factor == (float)sqrt(1.0 + log(4.0) / log(4096.0)));
    assert_true(model_rope_attn_factor(c) == c->rope_attn_factor);
    assert_true(model_rope_freqs(c, 4096)[2] == 1.5f && model_rope_freqs(c, 4096)[7] == 2.0f);
    assert_true(model_rope_freqs(c, 4097)[0] == 2.0f && model_rope_freqs(c, 4097)[7] == 4.5f);
    assert_true(model_rope_freq_scale(c) == 1.0f && model_rope_ext_factor(c) == 0.0f);
    model_free(m);

    /* the old name su; attention_factor given; no original: max_position_embeddings, and the
     * scale is rope_scaling.factor (only the magnitude would use it) */
    snprintf(rs, sizeof(rs), "{\"type\":\"su\",%s,\"factor\":2,\"attention_factor\":1.5}", lists);
    write_rope_config_top(rs, "");
    m = load_dir_ok();
    c = &m->cfg;
    assert_int_equal(c->rope_long_ctx, 16384);
    assert_true(c->rope_attn_factor == 1.5f);
    assert_true(model_rope_freqs(c, 16384)[7] == 2.0f);
    model_free(m);

    /* transformers 5: original_max_position_embeddings inside; a scale of 1: magnitude 1 */
    snprintf(rs, sizeof(rs),
             "{\"rope_type\":\"longrope\",%s,\"original_max_position_embeddings\":16384}", lists);
    write_rope_config_top(rs, "");
    m = load_dir_ok();
    assert_int_equal(m->cfg.rope_long_ctx, 16384);
    assert_true(m->cfg.rope_attn_factor == 1.0f);
    model_free(m);

    const char *top = ",\"original_max_position_embeddings\":4096";
    rope_bad("{\"type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1],"
             "\"long_factor\":[2,2,2,2,2,2,2,2]}",
             top, "rope_scaling.short_factor (type longrope) has 7 values, expected 8");
    rope_bad("{\"type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1,1]}", top,
             "rope_scaling.long_factor (type longrope)");
    rope_bad("{\"type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1,1],"
             "\"long_factor\":[2,2,2,0,2,2,2,2]}",
             top, "rope_scaling.long_factor[3] (type longrope) must be a positive number");
    rope_bad("{\"type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1,\"x\"],"
             "\"long_factor\":[2,2,2,2,2,2,2,2]}",
             top, "rope_scaling.short_factor[7] (type longrope) must be a positive number");
    snprintf(rs, sizeof(rs), "{\"type\":\"longrope\",%s}", lists);
    rope_bad(rs, "", "rope_scaling (type longrope): factor");
    rope_bad(rs, ",\"original_max_position_embeddings\":0",
             "original_max_position_embeddings (or, without it, factor) must be a positive");
    snprintf(rs, sizeof(rs), "{\"type\":\"longrope\",%s,\"attention_factor\":-1}", lists);
    rope_bad(rs, top, "rope_scaling.attention_factor (type longrope): must be a positive");
}

/* rope_scaling of type yarn as transformers' _compute_yarn_parameters reads it, mapped onto the
 * parameters its GGUF conversion gives llama.cpp; and every bad or missing field named. */
static void test_hf_yarn(void **state)
{
    (void)state;
    hf_spec s = {0};
    write_hf(&s);
    write_rope_config("{\"rope_type\":\"yarn\",\"factor\":4.0,"
                      "\"original_max_position_embeddings\":4096}");
    model *m = load_dir_ok();
    const model_config *c = &m->cfg;
    assert_true(c->rope_factor == 4.0f);
    assert_int_equal(c->rope_yarn_orig_ctx, 4096);
    assert_true(c->rope_yarn_beta_fast == 32.0f && c->rope_yarn_beta_slow == 1.0f);
    assert_true(c->rope_attn_factor == 1.0f); /* the default magnitude: as the GGUF's */
    assert_true(model_rope_ext_factor(c) == 1.0f);
    assert_true(model_rope_freq_scale(c) == 0.25f);
    assert_int_equal(c->n_ctx_train, 16384);
    model_free(m);

    /* the old "type" key, betas, and attention_factor kept as its ratio to get_mscale(factor) */
    write_rope_config("{\"type\":\"yarn\",\"factor\":8,\"original_max_position_embeddings\":"
                      "2048,\"beta_fast\":16,\"beta_slow\":2,\"attention_factor\":1.5}");
    m = load_dir_ok();
    c = &m->cfg;
    assert_int_equal(c->rope_yarn_orig_ctx, 2048);
    assert_true(c->rope_yarn_beta_fast == 16.0f && c->rope_yarn_beta_slow == 2.0f);
    assert_true(c->rope_attn_factor == (float)(1.5 / (0.1 * log(8.0) + 1.0)));
    /* what the kernels multiply cos and sin by: attention_factor */
    assert_true(fabsf(model_rope_attn_factor(c) * (1.0f + 0.1f * logf(8.0f)) - 1.5f) < 1e-6f);
    model_free(m);

    /* beta null or 0: 32 / 1 (Python's `or`); mscale / mscale_all_dim (DeepSeek-style) */
    write_rope_config("{\"rope_type\":\"yarn\",\"factor\":40,\"original_max_position_embeddings\":"
                      "4096,\"beta_fast\":null,\"beta_slow\":0,\"mscale\":0.707,"
                      "\"mscale_all_dim\":1.0}");
    m = load_dir_ok();
    c = &m->cfg;
    assert_true(c->rope_yarn_beta_fast == 32.0f && c->rope_yarn_beta_slow == 1.0f);
    const double g40 = 0.1 * log(40.0) + 1.0;
    assert_true(c->rope_attn_factor == (float)((0.1 * 0.707 * log(40.0) + 1.0) / g40 / g40));
    model_free(m);

    /* only one of mscale / mscale_all_dim: the default magnitude */
    write_rope_config("{\"rope_type\":\"yarn\",\"factor\":40,\"original_max_position_embeddings\":"
                      "4096,\"mscale\":0.707}");
    m = load_dir_ok();
    assert_true(m->cfg.rope_attn_factor == 1.0f);
    model_free(m);

    yarn_bad("{\"rope_type\":\"yarn\",\"original_max_position_embeddings\":4096}",
             "rope_scaling.factor (type yarn): required, a positive number");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":0,\"original_max_position_embeddings\":4096}",
             "rope_scaling.factor (type yarn): out of range");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":-4,\"original_max_position_embeddings\":4096}",
             "rope_scaling.factor (type yarn): out of range");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":\"4\",\"original_max_position_embeddings\":4096}",
             "rope_scaling.factor: expected number, got string (type yarn)");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4.0}",
             "rope_scaling.original_max_position_embeddings (type yarn): required, a positive "
             "number");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":0}",
             "rope_scaling.original_max_position_embeddings (type yarn): out of range");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":"
             "4096.5}",
             "rope_scaling.original_max_position_embeddings (type yarn): 4096.5 is not an integer");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096,"
             "\"beta_fast\":-32}",
             "rope_scaling.beta_fast (type yarn): -32 is not a positive number");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096,"
             "\"beta_slow\":\"x\"}",
             "rope_scaling.beta_slow: expected number, got string");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096,"
             "\"attention_factor\":0}",
             "rope_scaling.attention_factor (type yarn): 0 is not a positive number");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096,"
             "\"mscale\":-30,\"mscale_all_dim\":1}",
             "rope_scaling.mscale (type yarn): -30 is not a positive number");
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096,"
             "\"truncate\":false}",
             "rope_scaling.truncate (type yarn): false is not supported");
    /* beta_fast below beta_slow: an inverted ramp (transformers divides by a negative width,
     * llama.cpp by 0.001) */
    yarn_bad("{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096,"
             "\"beta_fast\":1,\"beta_slow\":32}",
             "rope_scaling.beta_fast 1 / beta_slow 32 (type yarn): the ramp's ends 5 > 3 (head_dim "
             "16, original_max_position_embeddings 4096) are not supported");
}

static void test_safetensors(void **state)
{
    (void)state;
    st_builder *b = calloc(1, sizeof(*b));
    if (!b) {
        abort();
    }
    st_add(b, "a", "F32", 3, 2);
    st_add(b, "b", "BF16", 5, 0);
    struct buf out;
    st_build(b, &out);
    char err[512];
    safetensors_file *f = safetensors_open_buffer(out.data, out.len, NULL, err, sizeof(err));
    if (!f) {
        fail_msg("%s", err);
        return;
    }
    assert_int_equal(f->n_tensors, 2);
    const safetensors_tensor *t = safetensors_find(f, "a");
    assert_non_null(t);
    assert_int_equal(t->type, TD_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[1], 2);
    assert_int_equal(t->nbytes, 24);
    float v;
    memcpy(&v, (const uint8_t *)t->data + 8, 4);
    assert_true(v == 1.0f);
    assert_null(safetensors_find(f, "c"));
    safetensors_close(f);

    /* every truncation fails cleanly */
    for (size_t n = 0; n < out.len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        assert_non_null(copy);
        memcpy(copy, out.data, n);
        f = safetensors_open_buffer(copy, n, NULL, err, sizeof(err));
        if (f) {
            fail_msg("prefix %zu/%zu parsed", n, out.len);
        }
        free(copy);
    }
    buf_free(&out);

    st_add(b, "c", "I64", 2, 0);
    st_build(b, &out);
    st_bad(out.data, out.len,
           "x.safetensors: tensor 'c' has dtype I64, which is not supported (supported: F32, F16, "
           "BF16)");
    buf_free(&out);
    free(b);

    st_raw(&out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8);
    st_bad(out.data, out.len, "tensor 'w': data_offsets span 4 bytes but shape x F32 needs 2");
    buf_free(&out);
    st_raw(&out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4);
    st_bad(out.data, out.len, "tensor 'w': data_offsets [0, 8] lie outside the data section");
    buf_free(&out);
    st_raw(&out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8);
    st_bad(out.data, out.len, "lie outside the data section");
    buf_free(&out);
    st_raw(&out,
           "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
           12);
    st_bad(out.data, out.len, "tensors 'w' and 'v' overlap");
    buf_free(&out);
    st_raw(&out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8);
    st_bad(out.data, out.len, "tensor 'w': shape[0] is not a valid dimension");
    buf_free(&out);
    st_raw(&out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8);
    st_bad(out.data, out.len, "shape has 5 dimensions");
    buf_free(&out);
    st_raw(&out, "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8);
    st_bad(out.data, out.len, "tensor 'w': shape: required field is missing");
    buf_free(&out);
    st_raw(&out, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8);
    st_bad(out.data, out.len, "data_offsets must be [begin, end]");
    buf_free(&out);
    st_raw(&out, "{\"w\":3}", 0);
    st_bad(out.data, out.len, "tensor 'w': expected object, got integer");
    buf_free(&out);
    st_raw(&out, "[]", 0);
    st_bad(out.data, out.len, "header: expected object, got array");
    buf_free(&out);
    st_raw(&out, "{\"w\":", 0);
    st_bad(out.data, out.len, "header: line 1");
    buf_free(&out);
    uint64_t huge[2] = {UINT64_MAX, 0};
    st_bad(huge, sizeof(huge), "header length 18446744073709551615 exceeds");
    st_bad("abc", 3, "file truncated");

    assert_null(safetensors_open("/nonexistent.safetensors", err, sizeof(err)));
    assert_non_null(strstr(err, "/nonexistent.safetensors: cannot open"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors),       cmocka_unit_test(test_hf_models),
        cmocka_unit_test(test_hf_errors),         cmocka_unit_test(test_hf_yarn),
        cmocka_unit_test(test_hf_longrope),       cmocka_unit_test(test_hf_gemma),
        cmocka_unit_test(test_hf_phi3),           cmocka_unit_test(test_hf_moe),
        cmocka_unit_test(test_hf_sliding_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
