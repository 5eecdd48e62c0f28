/*
 * tandem-genlora: writes seeded random LoRA adapters for the test models tandem-genmodel
 * writes, as llama.cpp's adapter GGUF (what convert_lora_to_gguf.py writes and
 * llama_adapter_lora reads) or a Hugging Face PEFT folder (adapter_config.json and
 * adapter_model.safetensors). Used by the LoRA tests of the engine against llama.cpp.
 *
 * An adapter adds scale * B (A x) to a projection y = W x, scale = alpha / rank. A has rank rows
 * of the projection's input width (GGUF lora_a {in, rank}, PEFT lora_A [rank, in]), B one row of
 * rank elements per output (GGUF lora_b {rank, out}, PEFT lora_B [out, rank]): the same bytes in
 * both formats, except that llama GGUF files hold Q/K rows permuted for adjacent-pair RoPE
 * (convert_hf_to_gguf.py's permute), so the PEFT lora_B of q_proj and k_proj is written with the
 * inverse permutation, as tandem-genmodel writes q_proj and k_proj; A's rows are rank rows and
 * never permuted. qwen2 and qwen3 are not permuted.
 *
 * Same seed and shapes give the same adapter in both formats: every tensor's values come from a
 * PRNG seeded by (seed, GGUF tensor name), generated in GGUF row order, as tandem-genmodel does.
 * A is uniform in +-1/sqrt(in) and B in +-B_SCALE/sqrt(rank): a delta that changes the logits
 * materially but leaves the model sane (see B_SCALE). F16 values are the F32 values rounded to
 * nearest even. Same arguments give byte-identical files.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/gguf_writer.h"
#include "engine/tools/genfile.h"
#include "engine/tools/genquant.h"
#include "lib/buf.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/version.h"

#define PROG "tandem-genlora"

enum { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, N_ARCHS };
enum { T_Q, T_K, T_V, T_O, T_GATE, T_UP, T_DOWN, N_TARGETS };

#define MAX_DIM    (1 << 20)
#define MAX_LAYERS 1024
#define MAX_RANK   4096
/* B's bound times sqrt(rank). With A's bound 1/sqrt(in) and inputs of RMS about 1, A x has RMS
 * 1/sqrt(3), B (A x) B_SCALE/3, and scale * B (A x) about 1/12 at alpha / rank = 2, a twelfth of
 * a base projection's output (tandem-genmodel's matrices keep RMS 1). On tandem-genmodel's
 * 2-layer llama and qwen2 (--dim 128 --heads 4 --kv-heads 2 --ffn 256 --vocab 512 --seed 7),
 * rank 8, alpha 16 and all seven targets move llama.cpp's logits by up to about 2 (0.4 on
 * average, against logits of RMS 2) and change the greedy token at about half the positions. */
#define B_SCALE 0.125f

typedef struct lora_opts {
    int peft;        /* 0: GGUF file, 1: PEFT folder */
    const char *out; /* output path */
    int arch;        /* ARCH_* */
    int64_t layers, dim, heads, kv_heads, head_dim, ffn;
    int64_t rank;
    double alpha;
    unsigned targets; /* bit T_* set: the projection is adapted */
    tdtype type;      /* TD_F32 or TD_F16 */
    uint64_t seed;
    const char *base_name; /* NULL: none */
} lora_opts;

/* One tensor: an A or a B of one projection of one layer. */
typedef struct lspec {
    char gguf[64];      /* GGUF tensor name */
    char hf[128];       /* PEFT tensor name */
    int64_t rows, cols; /* GGUF row order: rows of cols elements */
    float bound;        /* values uniform in +-bound */
    int64_t perm_heads; /* > 0: llama Q/K lora_b, PEFT rows un-permuted with this many heads */
} lspec;

static const char *const arch_names[] = {"llama", "qwen2", "qwen3"};
/* --targets names, GGUF projection names, PEFT module paths and target_modules names */
static const char *const target_names[] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char *const gguf_targets[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                           "ffn_gate", "ffn_up", "ffn_down"};
static const char *const hf_modules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                         "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                         "mlp.down_proj"};
static const char *const hf_targets[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                         "gate_proj", "up_proj", "down_proj"};

/* The projection's input and output widths. */
static void target_dims(const lora_opts *o, int t, int64_t *in, int64_t *out)
{
    const int64_t q = o->heads * o->head_dim, kv = o->kv_heads * o->head_dim;
    const int64_t ins[N_TARGETS] = {o->dim, o->dim, o->dim, q, o->dim, o->dim, o->ffn};
    const int64_t outs[N_TARGETS] = {q, kv, kv, o->dim, o->ffn, o->ffn, o->dim};
    *in = ins[t];
    *out = outs[t];
}

/* Values of one tensor in GGUF row order (caller frees), or NULL on OOM. */
static float *gen_values(const lora_opts *o, const lspec *t)
{
    const size_t n = (size_t)(t->rows * t->cols);
    float *x = malloc(n * sizeof(float));
    if (x == NULL) {
        return NULL;
    }
    genq_rng rng;
    genq_rng_seed(&rng, o->seed ^ genf_name_hash(t->gguf));
    for (size_t i = 0; i < n; i++) {
        x[i] = t->bound * genq_rng_uniform(&rng);
    }
    return x;
}

/* The tensor list in file order (per layer, per target: A then B); *n_out the count. Caller
 * frees; NULL on OOM. */
static lspec *build_specs(const lora_opts *o, size_t *n_out)
{
    lspec *s = calloc((size_t)o->layers * N_TARGETS * 2, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }
    size_t n = 0;
    for (int64_t l = 0; l < o->layers; l++) {
        for (int t = 0; t < N_TARGETS; t++) {
            if (!(o->targets & (1u << t))) {
                continue;
            }
            int64_t in, out;
            target_dims(o, t, &in, &out);
            lspec *a = &s[n++], *b = &s[n++];
            snprintf(a->gguf, sizeof(a->gguf), "blk.%lld.%s.weight.lora_a", (long long)l,
                     gguf_targets[t]);
            snprintf(b->gguf, sizeof(b->gguf), "blk.%lld.%s.weight.lora_b", (long long)l,
                     gguf_targets[t]);
            snprintf(a->hf, sizeof(a->hf), "base_model.model.model.layers.%lld.%s.lora_A.weight",
                     (long long)l, hf_modules[t]);
            snprintf(b->hf, sizeof(b->hf), "base_model.model.model.layers.%lld.%s.lora_B.weight",
                     (long long)l, hf_modules[t]);
            a->rows = o->rank;
            a->cols = in;
            a->bound = 1.0f / sqrtf((float)in);
            b->rows = out;
            b->cols = o->rank;
            b->bound = B_SCALE / sqrtf((float)o->rank);
            if (o->arch == ARCH_LLAMA && (t == T_Q || t == T_K)) {
                b->perm_heads = t == T_Q ? o->heads : o->kv_heads;
            }
        }
    }
    *n_out = n;
    return s;
}

static size_t tensor_bytes(const lora_opts *o, const lspec *t)
{
    return td_row_bytes(o->type, t->cols) * (size_t)t->rows;
}

/* ---- GGUF -------------------------------------------------------------------------------- */

static int write_gguf(const lora_opts *o, const lspec *specs, size_t n_specs, char *err,
                      size_t errlen)
{
    gguf_writer *w = gguf_writer_new(0);
    if (w == NULL) {
        tandem_set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = gguf_writer_set_str(w, "general.architecture", arch_names[o->arch]);
    if (rc == 0) {
        rc = gguf_writer_set_str(w, "general.type", "adapter");
    }
    if (rc == 0 && o->base_name != NULL) {
        rc = gguf_writer_set_str(w, "general.name", o->base_name);
    }
    if (rc == 0) {
        rc = gguf_writer_set_str(w, "adapter.type", "lora");
    }
    if (rc == 0) {
        rc = gguf_writer_set_f32(w, "adapter.lora.alpha", (float)o->alpha);
    }
    if (rc < 0) {
        tandem_set_err(err, errlen, "setting GGUF metadata: %s", tandem_strerror(rc));
        goto out;
    }
    for (size_t i = 0; i < n_specs; i++) {
        const lspec *t = &specs[i];
        const size_t bytes = tensor_bytes(o, t);
        float *x = gen_values(o, t);
        void *data = x != NULL && bytes > 0 ? malloc(bytes) : NULL;
        if (data == NULL) {
            free(x);
            tandem_set_err(err, errlen, "%s: out of memory", t->gguf);
            rc = -ENOMEM;
            goto out;
        }
        genq_convert(o->type, x, t->rows, t->cols, data);
        const int64_t ne[2] = {t->cols, t->rows};
        rc = gguf_writer_add_tensor(w, t->gguf, o->type, 2, ne, data, bytes);
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

/* ---- PEFT -------------------------------------------------------------------------------- */

/* adapter_config.json as PEFT writes it for a plain LoRA on a causal LM. */
static int write_config(const lora_opts *o, const char *path, char *err, size_t errlen)
{
    struct json_object *cfg = json_object_new_object();
    struct json_object *mods = json_object_new_array();
    struct buf b;
    buf_init(&b, (size_t)1 << 20);
    int rc = -ENOMEM;
    if (cfg == NULL || mods == NULL) {
        json_object_put(mods);
        goto out;
    }
    for (int t = 0; t < N_TARGETS; t++) {
        if (o->targets & (1u << t)) {
            json_object_array_add(mods, json_object_new_string(hf_targets[t]));
        }
    }
    int bad = 0;
#define ADD(key, value) bad |= json_object_object_add(cfg, key, value)
    ADD("peft_type", json_object_new_string("LORA"));
    ADD("task_type", json_object_new_string("CAUSAL_LM"));
    ADD("r", json_object_new_int64(o->rank));
    ADD("lora_alpha", json_object_new_double(o->alpha));
    ADD("target_modules", mods);
    ADD("lora_dropout", json_object_new_double(0.0));
    ADD("bias", json_object_new_string("none"));
    ADD("fan_in_fan_out", json_object_new_boolean(0));
    ADD("use_rslora", json_object_new_boolean(0));
    ADD("modules_to_save", NULL);
    ADD("base_model_name_or_path",
        json_object_new_string(o->base_name != NULL ? o->base_name : ""));
#undef ADD
    if (bad != 0) {
        goto out;
    }
    rc = json_to_buf(cfg, 1, &b);
    if (rc == 0) {
        rc = buf_appends(&b, "\n");
    }
    if (rc == 0) {
        rc = genf_write_bytes(path, b.data, b.len, err, errlen);
    }
out:
    if (rc < 0 && rc != -EIO) {
        tandem_set_err(err, errlen, "%s: serializing: %s", path, tandem_strerror(rc));
    }
    json_object_put(cfg);
    buf_free(&b);
    return rc;
}

/* The safetensors header, padded with spaces to a multiple of 8 bytes. */
static int st_header(const lora_opts *o, const lspec *specs, size_t n_specs, struct buf *b)
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
        const lspec *t = &specs[i];
        const uint64_t bytes = tensor_bytes(o, t);
        struct json_object *e = json_object_new_object();
        struct json_object *shape = json_object_new_array();
        struct json_object *offs = json_object_new_array();
        if (e == NULL || shape == NULL || offs == NULL ||
            json_object_object_add(hdr, t->hf, e) != 0) {
            json_object_put(e);
            json_object_put(shape);
            json_object_put(offs);
            goto out;
        }
        json_object_object_add(e, "dtype",
                               json_object_new_string(o->type == TD_F16 ? "F16" : "F32"));
        json_object_array_add(shape, json_object_new_int64(t->rows));
        json_object_array_add(shape, json_object_new_int64(t->cols));
        json_object_object_add(e, "shape", shape);
        json_object_array_add(offs, json_object_new_int64((int64_t)off));
        json_object_array_add(offs, json_object_new_int64((int64_t)(off + bytes)));
        json_object_object_add(e, "data_offsets", offs);
        off += bytes;
    }
    rc = json_to_buf(hdr, 0, b);
    while (rc == 0 && b->len % 8 != 0) {
        rc = buf_append(b, " ", 1);
    }
out:
    json_object_put(hdr);
    return rc;
}

/* Writes tensor t's PEFT form (llama Q/K lora_B un-permuted). 0, -ENOMEM or -EIO. */
static int st_write_tensor(const lora_opts *o, const lspec *t, FILE *f)
{
    const size_t bytes = tensor_bytes(o, t);
    float *x = gen_values(o, t);
    float *hfx =
        x != NULL && t->perm_heads > 0 ? malloc((size_t)(t->rows * t->cols) * sizeof(float)) : NULL;
    void *data = x != NULL && bytes > 0 ? malloc(bytes) : NULL;
    int rc = 0;
    if (x == NULL || data == NULL || (t->perm_heads > 0 && hfx == NULL)) {
        rc = -ENOMEM;
        goto out;
    }
    const float *src = x;
    if (hfx != NULL) {
        genq_permute_qk(x, hfx, t->perm_heads, t->rows / t->perm_heads, t->cols, 1);
        src = hfx;
    }
    genq_convert(o->type, src, t->rows, t->cols, data);
    rc = fwrite(data, 1, bytes, f) != bytes ? -EIO : 0;
out:
    free(x);
    free(hfx);
    free(data);
    return rc;
}

struct st_job {
    const lora_opts *o;
    const lspec *specs;
};

static int st_write_one(void *ud, size_t i, FILE *f)
{
    const struct st_job *j = ud;
    return st_write_tensor(j->o, &j->specs[i], f);
}

static int write_safetensors(const lora_opts *o, const char *path, const lspec *specs,
                             size_t n_specs, char *err, size_t errlen)
{
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

static int write_peft(const lora_opts *o, const lspec *specs, size_t n_specs, char *err,
                      size_t errlen)
{
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST) {
        tandem_set_err(err, errlen, "%s: %s", o->out, strerror(errno));
        return -EIO;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/adapter_config.json", o->out);
    int rc = write_config(o, path, err, errlen);
    if (rc == 0) {
        snprintf(path, sizeof(path), "%s/adapter_model.safetensors", o->out);
        rc = write_safetensors(o, path, specs, n_specs, err, errlen);
    }
    return rc;
}

/* One line on success, so a user sees what the flags produced. */
static void print_summary(const lora_opts *o, const lspec *specs, size_t n_specs)
{
    char targets[64] = "";
    for (int t = 0; t < N_TARGETS; t++) {
        if (o->targets & (1u << t)) {
            size_t len = strlen(targets);
            snprintf(targets + len, sizeof(targets) - len, "%s%s", len ? "," : "", target_names[t]);
        }
    }
    int64_t params = 0;
    for (size_t i = 0; i < n_specs; i++) {
        params += specs[i].rows * specs[i].cols;
    }
    printf("tandem-genlora: wrote %s (%s LoRA adapter): %s, %lld layers, dim %lld, %lld heads "
           "(%lld KV, head dim %lld), ffn %lld, rank %lld, alpha %g, targets %s, %s, %zu tensors, "
           "%.3f M params\n",
           o->out, o->peft ? "PEFT" : "GGUF", arch_names[o->arch], (long long)o->layers,
           (long long)o->dim, (long long)o->heads, (long long)o->kv_heads, (long long)o->head_dim,
           (long long)o->ffn, (long long)o->rank, o->alpha, targets, td_name(o->type), n_specs,
           (double)params / 1e6);
}

/* ---- command line ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f, "usage: tandem-genlora --out PATH [options]\n"
               "  --format gguf|peft      llama.cpp adapter GGUF file (default) or a PEFT folder\n"
               "                          (adapter_config.json, adapter_model.safetensors)\n"
               "  --arch A                llama qwen2 qwen3 (default llama)\n"
               "  --layers N --dim D --heads H --kv-heads K --ffn F\n"
               "                          the base model's shape, as tandem-genmodel's flags\n"
               "                          (defaults 2, 128, 4, = heads, 256)\n"
               "  --head-dim HD           (default D/H)\n"
               "  --rank R                (default 8)\n"
               "  --alpha A               lora_alpha; scale = A / R (default 16)\n"
               "  --targets LIST          comma list of q k v o gate up down (default all)\n"
               "  --type f32|f16          (default f32)\n"
               "  --seed S                (default 1)\n"
               "  --base-name NAME        base_model_name_or_path / general.name\n"
               "  --help, --version\n");
}

/* --targets q,k,v,o,gate,up,down (any non-empty subset, any order) */
static int parse_targets(const char *s, unsigned *out)
{
    unsigned mask = 0;
    const char *p = s;
    for (;;) {
        const size_t len = strcspn(p, ",");
        int t = 0;
        while (t < N_TARGETS &&
               (strlen(target_names[t]) != len || strncmp(p, target_names[t], len) != 0)) {
            t++;
        }
        if (t == N_TARGETS) {
            fprintf(stderr,
                    "tandem-genlora: --targets: expected a comma list of q, k, v, o, gate, up, "
                    "down, got '%s'\n",
                    s);
            return -EINVAL;
        }
        mask |= 1u << t;
        if (p[len] == '\0') {
            break;
        }
        p += len + 1;
    }
    *out = mask;
    return 0;
}

static int parse_args(int argc, char **argv, lora_opts *o)
{
    static const struct option longopts[] = {
        {"format", required_argument, 0, 'f'},    {"out", required_argument, 0, 'o'},
        {"arch", required_argument, 0, 'a'},      {"layers", required_argument, 0, 'l'},
        {"dim", required_argument, 0, 'd'},       {"heads", required_argument, 0, 'H'},
        {"kv-heads", required_argument, 0, 'K'},  {"head-dim", required_argument, 0, 'D'},
        {"ffn", required_argument, 0, 'F'},       {"rank", required_argument, 0, 'r'},
        {"alpha", required_argument, 0, 'A'},     {"targets", required_argument, 0, 'T'},
        {"type", required_argument, 0, 't'},      {"seed", required_argument, 0, 's'},
        {"base-name", required_argument, 0, 'n'}, {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'v'},         {0, 0, 0, 0}};
    static const char *const formats[] = {"gguf", "peft"};
    static const char *const types[] = {"f32", "f16"};
    static const tdtype type_ids[] = {TD_F32, TD_F16};
    int c, idx, rc = 0;
    int64_t seed = 1;
    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            rc = genf_pick(PROG, "--format", optarg, formats, 2, &o->peft);
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
        case 'r':
            rc = genf_parse_i64(PROG, "--rank", optarg, 1, MAX_RANK, &o->rank);
            break;
        case 'A':
            rc = genf_parse_positive(PROG, "--alpha", optarg, &o->alpha);
            break;
        case 'T':
            rc = parse_targets(optarg, &o->targets);
            break;
        case 't':
            rc = genf_pick(PROG, "--type", optarg, types, 2, &idx);
            if (rc == 0) {
                o->type = type_ids[idx];
            }
            break;
        case 's':
            rc = genf_parse_i64(PROG, "--seed", optarg, 0, INT64_MAX, &seed);
            o->seed = (uint64_t)seed;
            break;
        case 'n':
            o->base_name = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'v':
            printf("tandem-genlora %s\n", TANDEM_VERSION);
            exit(0);
        default:
            fprintf(stderr, "tandem-genlora: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            rc = -EINVAL;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "tandem-genlora: unexpected argument '%s'\n", argv[optind]);
        rc = -EINVAL;
    }
    return rc;
}

static int check_opts(lora_opts *o)
{
    const char *e = NULL;
    if (o->out == NULL) {
        e = "--out is required";
    } else if (o->head_dim == 0 && o->dim % o->heads != 0) {
        e = "--dim must be a multiple of --heads (or give --head-dim)";
    } else if (o->heads % o->kv_heads != 0) {
        e = "--heads must be a multiple of --kv-heads";
    }
    if (e == NULL) {
        if (o->head_dim == 0) {
            o->head_dim = o->dim / o->heads;
        }
        if (o->head_dim % 2 != 0) {
            e = "the head dimension must be even (RoPE rotates pairs)";
        }
    }
    if (e != NULL) {
        fprintf(stderr, "tandem-genlora: %s\n", e);
        return -EINVAL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    lora_opts o = {.arch = ARCH_LLAMA,
                   .layers = 2,
                   .dim = 128,
                   .heads = 4,
                   .ffn = 256,
                   .rank = 8,
                   .alpha = 16.0,
                   .targets = (1u << N_TARGETS) - 1,
                   .type = TD_F32,
                   .seed = 1};
    if (parse_args(argc, argv, &o) < 0) {
        usage(stderr);
        return 2;
    }
    if (o.kv_heads == 0) {
        o.kv_heads = o.heads;
    }
    if (check_opts(&o) < 0) {
        return 2;
    }
    size_t n_specs = 0;
    lspec *specs = build_specs(&o, &n_specs);
    if (specs == NULL) {
        fprintf(stderr, "tandem-genlora: out of memory\n");
        return 1;
    }
    char err[512] = "";
    int rc = o.peft ? write_peft(&o, specs, n_specs, err, sizeof(err))
                    : write_gguf(&o, specs, n_specs, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "tandem-genlora: %s\n", err);
    } else {
        print_summary(&o, specs, n_specs);
    }
    free(specs);
    return rc < 0 ? 1 : 0;
}
