/*
 * Command-line parsing shared by the binaries that host the engine (flags.h).
 */
#include "engine/cli/flags.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "engine/server/lora_api.h"
#include "engine/server/tool_parser.h"
#include "engine/template/chat_template.h"
#include "lib/log.h"

#ifdef TANDEM_HAVE_CUDA
#include "engine/backend/cuda_backend.h"
#endif

static const char *g_prog = "tandem";

void cli_set_prog(const char *prog)
{
    g_prog = prog;
}

int cli_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

int cli_flag(struct cli_args *a, const char *name, const char **val)
{
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    *val = NULL;
    if (strncmp(arg, name, n) != 0) {
        return 0;
    }
    if (arg[n] == '=') {
        *val = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') {
        return 0;
    }
    if (a->i + 1 >= a->argc) {
        return 1;
    }
    *val = a->argv[++a->i];
    return 1;
}

int cli_bool(struct cli_args *a, const char *name)
{
    return strcmp(a->argv[a->i], name) == 0;
}

int cli_i64(const char *s, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s) {
        return cli_die("%s needs a value", name);
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        return cli_die("%s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]", name, s, lo, hi);
    }
    *out = v;
    return 0;
}

int cli_i32(const char *s, const char *name, int32_t lo, int32_t hi, int32_t *out)
{
    int64_t v = 0;
    int rc = cli_i64(s, name, lo, hi, &v);
    if (rc == 0) {
        *out = (int32_t)v;
    }
    return rc;
}

int cli_double(const char *s, const char *name, double lo, double hi, double *out)
{
    if (!s || !*s) {
        return cli_die("%s needs a value", name);
    }
    char *end;
    double v = strtod(s, &end);
    if (*end || !(v >= lo && v <= hi)) {
        return cli_die("%s: '%s' is not a number in [%g, %g]", name, s, lo, hi);
    }
    *out = v;
    return 0;
}

int cli_float(const char *s, const char *name, double lo, double hi, float *out)
{
    double v = 0;
    int rc = cli_double(s, name, lo, hi, &v);
    if (rc == 0) {
        *out = (float)v;
    }
    return rc;
}

/* Sizes like 4294967296, 4GiB, 512MiB, 2G, 100M, 64K. */
int cli_bytes(const char *s, const char *name, size_t *out)
{
    if (!s || !*s) {
        return cli_die("%s needs a value", name);
    }
    char *end;
    double v = strtod(s, &end);
    double mult = 1;
    if (strcasecmp(end, "k") == 0 || strcasecmp(end, "kib") == 0 || strcasecmp(end, "kb") == 0) {
        mult = 1024.0;
    } else if (strcasecmp(end, "m") == 0 || strcasecmp(end, "mib") == 0 ||
               strcasecmp(end, "mb") == 0) {
        mult = 1024.0 * 1024;
    } else if (strcasecmp(end, "g") == 0 || strcasecmp(end, "gib") == 0 ||
               strcasecmp(end, "gb") == 0) {
        mult = 1024.0 * 1024 * 1024;
    } else if (*end) {
        return cli_die("%s: '%s' is not a size (e.g. 4GiB, 512MiB, 1073741824)", name, s);
    }
    if (!(v > 0) || v * mult > 1e15) {
        return cli_die("%s: '%s' is out of range", name, s);
    }
    *out = (size_t)(v * mult);
    return 0;
}

/* "1,2,3" → malloc'd array. */
int cli_ids(const char *s, const char *name, int32_t **out, int32_t *n)
{
    if (!s) {
        return cli_die("%s needs a value", name);
    }
    size_t cap = 1;
    for (const char *p = s; *p; p++) {
        cap += *p == ',';
    }
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        return cli_die("out of memory");
    }
    int32_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return cli_die("%s: '%s' is not a comma-separated list of token ids", name, s);
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *out = ids;
    *n = k;
    return 0;
}

/* Engine flags shared by serve, generate and bench. Returns 1 when argv[i] was one of them, 0
 * when not, 2 on a bad value. */
int engine_flags_parse(struct cli_args *a, struct engine_flags *f)
{
    engine_config *c = &f->cfg;
    const char *v = NULL;
    int32_t i32;
    if (cli_flag(a, "--model", &v)) {
        if (!v) {
            return cli_die("--model needs a path");
        }
        f->model_path = v;
        return 1;
    }
    if (cli_flag(a, "--max-model-len", &v)) {
        return cli_i32(v, "--max-model-len", 2, 1 << 24, &c->max_model_len) ? 2 : 1;
    }
    if (cli_flag(a, "--max-num-seqs", &v)) {
        return cli_i32(v, "--max-num-seqs", 1, 65536, &c->max_num_seqs) ? 2 : 1;
    }
    if (cli_flag(a, "--max-num-batched-tokens", &v)) {
        return cli_i32(v, "--max-num-batched-tokens", 1, 1 << 24, &c->max_num_batched_tokens) ? 2
                                                                                              : 1;
    }
    if (cli_flag(a, "--block-size", &v)) {
        return cli_i32(v, "--block-size", 1, 4096, &c->block_size) ? 2 : 1;
    }
    if (cli_flag(a, "--kv-cache-memory", &v) || cli_flag(a, "--kv-cache-memory-bytes", &v)) {
        return cli_bytes(v, "--kv-cache-memory", &c->kv_cache_bytes) ? 2 : 1;
    }
    if (cli_flag(a, "--kv-cache-dtype", &v)) {
        if (v && strcmp(v, "auto") == 0) {
            c->kv_dtype = ENGINE_KV_AUTO;
        } else if (v &&
                   (strcmp(v, "float32") == 0 || strcmp(v, "f32") == 0 || strcmp(v, "fp32") == 0)) {
            c->kv_dtype = ENGINE_KV_F32;
        } else if (v && (strcmp(v, "float16") == 0 || strcmp(v, "f16") == 0 ||
                         strcmp(v, "fp16") == 0 || strcmp(v, "half") == 0)) {
            c->kv_dtype = ENGINE_KV_F16;
        } else {
            return cli_die("--kv-cache-dtype: '%s' is not one of auto, float32, float16",
                           v ? v : "");
        }
        return 1;
    }
    if (cli_flag(a, "--threads", &v) || cli_flag(a, "-t", &v)) {
        if (cli_i32(v, "--threads", 1, 1024, &i32)) {
            return 2;
        }
        c->n_threads = i32;
        return 1;
    }
    if (cli_bool(a, "--pin-threads")) {
        c->pin_threads = true;
        return 1;
    }
    if (cli_bool(a, "--enforce-eager")) {
        c->enforce_eager = true;
        return 1;
    }
    if (cli_bool(a, "--enable-prefix-caching")) {
        c->disable_prefix_caching = false;
        return 1;
    }
    if (cli_bool(a, "--no-enable-prefix-caching")) {
        c->disable_prefix_caching = true;
        return 1;
    }
    if (cli_bool(a, "--disable-hybrid-kv-cache-manager")) {
        c->disable_hybrid_kv_cache_manager = true;
        return 1;
    }
    if (cli_bool(a, "--enable-chunked-prefill")) {
        c->disable_chunked_prefill = false;
        return 1;
    }
    if (cli_bool(a, "--no-enable-chunked-prefill")) {
        c->disable_chunked_prefill = true;
        return 1;
    }
    if (cli_flag(a, "--long-prefill-token-threshold", &v)) {
        return cli_i32(v, "--long-prefill-token-threshold", 0, 1 << 24,
                       &c->long_prefill_token_threshold)
                   ? 2
                   : 1;
    }
    if (cli_flag(a, "--scheduling-policy", &v)) {
        if (v && strcmp(v, "fcfs") == 0) {
            c->policy = SCHED_FCFS;
        } else if (v && strcmp(v, "priority") == 0) {
            c->policy = SCHED_PRIORITY;
        } else {
            return cli_die("--scheduling-policy: '%s' is not fcfs or priority", v ? v : "");
        }
        return 1;
    }
    if (cli_flag(a, "--max-waiting-requests", &v)) {
        return cli_i32(v, "--max-waiting-requests", 1, 1 << 20, &c->max_waiting) ? 2 : 1;
    }
    if (cli_flag(a, "--prefix-caching-hash-seed", &v)) {
        int64_t s = 0;
        if (cli_i64(v, "--prefix-caching-hash-seed", 0, INT64_MAX, &s)) {
            return 2;
        }
        c->prefix_hash_seed = (uint64_t)s;
        return 1;
    }
    if (cli_flag(a, "--chat-template", &v)) {
        char terr[512] = "";
        free(f->chat_template); /* a later --chat-template wins */
        f->chat_template = NULL;
        if (!v || chat_template_resolve_arg(v, &f->chat_template, terr, sizeof terr) != 0) {
            return cli_die("--chat-template: %s", v ? terr : "needs a file or a template");
        }
        return 1;
    }
    if (cli_flag(a, "--device", &v)) {
        if (!v || (strcmp(v, "auto") != 0 && strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0)) {
            return cli_die("--device: '%s' is not auto, cpu or cuda", v ? v : "");
        }
        f->device = v;
        return 1;
    }
    if (cli_flag(a, "--tensor-parallel-size", &v) || cli_flag(a, "-tp", &v)) {
        return cli_i32(v, "--tensor-parallel-size", 1, 1024, &f->tensor_parallel_size) ? 2 : 1;
    }
    if (cli_flag(a, "--gpu-memory-utilization", &v)) {
        double d = 0;
        if (cli_double(v, "--gpu-memory-utilization", 0, 1, &d) != 0) {
            return 2;
        }
        if (d <= 0) {
            return cli_die("--gpu-memory-utilization: must be in (0, 1], got %s", v);
        }
        f->gpu_memory_utilization = d;
        return 1;
    }
    if (cli_flag(a, "--generation-config", &v)) {
        if (!v || !*v) {
            return cli_die("--generation-config needs auto, vllm or a directory");
        }
        f->generation_config = v;
        return 1;
    }
    if (cli_flag(a, "--override-generation-config", &v)) {
        if (!v) {
            return cli_die("--override-generation-config needs a JSON object");
        }
        struct openai_defaults probe;
        char err[256] = "";
        memset(&probe, 0, sizeof probe);
        if (openai_defaults_merge(&probe, v, strlen(v), err, sizeof err) != 0) {
            return cli_die("--override-generation-config: %s", err);
        }
        f->override_generation_config = v;
        return 1;
    }
    if (strcmp(a->argv[a->i], "--enable-auto-tool-choice") == 0) {
        f->enable_auto_tool_choice = 1;
        return 1;
    }
    if (cli_flag(a, "--tool-call-parser", &v)) {
        enum tool_parser_kind k;
        if (!v || tool_parser_kind_from_name(v, &k) != 0) {
            return cli_die("--tool-call-parser: unknown parser '%s' (hermes, llama3_json, "
                           "llama4_json, mistral)",
                           v ? v : "");
        }
        f->tool_call_parser = v;
        return 1;
    }
    if (cli_flag(a, "--pooler-config", &v)) {
        engine_pool pool = ENGINE_POOL_LAST;
        bool norm = true;
        char err[256];
        if (!v || engine_pooler_config_parse(v, &pool, &norm, err, sizeof err) != 0) {
            return cli_die("%s", v ? err : "--pooler-config needs a JSON object");
        }
        f->pooler_config = v;
        return 1;
    }
    if (strcmp(a->argv[a->i], "--enable-lora") == 0) {
        f->enable_lora = 1;
        return 1;
    }
    if (cli_flag(a, "--max-loras", &v)) {
        return cli_i32(v, "--max-loras", 1, 65536, &f->max_loras) ? 2 : 1;
    }
    if (cli_flag(a, "--max-lora-rank", &v)) {
        return cli_i32(v, "--max-lora-rank", 1, LORA_MAX_RANK, &f->max_lora_rank) ? 2 : 1;
    }
    if (cli_flag(a, "--lora-modules", &v)) {
        /* vLLM's nargs='+': --lora-modules a=PATH b=PATH ...; repeating the flag adds more */
        for (;;) {
            char *name = NULL, *path = NULL, err[256];
            if (!v || lora_module_parse(v, &name, &path, err, sizeof err) != 0) {
                return cli_die("--lora-modules: %s", v ? err : "needs name=path");
            }
            free(name);
            free(path);
            if (f->n_lora_modules == ENGINE_FLAGS_MAX_LORA_MODULES) {
                return cli_die("--lora-modules: at most %d adapters",
                               ENGINE_FLAGS_MAX_LORA_MODULES);
            }
            f->lora_modules[f->n_lora_modules++] = v;
            if (a->i + 1 >= a->argc || a->argv[a->i + 1][0] == '-') {
                break;
            }
            v = a->argv[++a->i];
        }
        return 1;
    }
    if (cli_flag(a, "--api-key", &v)) {
        /* vLLM's nargs='+': --api-key K1 K2 ...; repeating the flag adds more */
        for (;;) {
            if (!v || !*v) {
                return cli_die("--api-key needs a key");
            }
            if (f->n_api_keys == ENGINE_FLAGS_MAX_API_KEYS) {
                return cli_die("--api-key: at most %d keys", ENGINE_FLAGS_MAX_API_KEYS);
            }
            f->api_keys[f->n_api_keys++] = v;
            if (a->i + 1 >= a->argc || a->argv[a->i + 1][0] == '-') {
                break;
            }
            v = a->argv[++a->i];
        }
        return 1;
    }
    return 0;
}

void engine_flags_init(struct engine_flags *f)
{
    memset(f, 0, sizeof *f);
    f->device = "auto";
    f->tensor_parallel_size = 1;
    f->generation_config = "auto";
    f->max_loras = 1;
    f->max_lora_rank = 16;
}

void engine_flags_free(struct engine_flags *f)
{
    free(f->chat_template);
    f->chat_template = NULL;
}

int engine_flags_select_device(const char *device, const backend_ops **ops)
{
    *ops = &cpu_backend_ops;
    const int want_cuda = strcmp(device, "cuda") == 0;
    if (strcmp(device, "cpu") == 0) {
        return 0;
    }
#ifdef TANDEM_HAVE_CUDA
    char why[256] = "";
    int n = cuda_backend_device_count(why, sizeof why);
    if (n > 0) {
        *ops = &cuda_backend_ops;
        if (!want_cuda) {
            log_info("--device auto: %d CUDA device(s), using the cuda backend", n);
        }
        return 0;
    }
    if (want_cuda) {
        return cli_die("--device cuda: no usable CUDA device: %s; use --device cpu (or auto)",
                       why[0] ? why : "none found");
    }
    log_info("--device auto: no usable CUDA device (%s), using the cpu backend",
             why[0] ? why : "none found");
    return 0;
#else
    if (want_cuda) {
        return cli_die("--device cuda: this build has no CUDA backend; use --device cpu (or auto)");
    }
    return 0;
#endif
}

/* --tensor-parallel-size N > 1 on backend ops: a collective, and N devices for the cuda one. */
static int engine_flags_check_tp(const backend_ops *ops, int32_t n)
{
    if (!ops->tp_comm_new) {
        return cli_die("--tensor-parallel-size %d: the %s backend of this build has no collective "
                       "for tensor parallelism",
                       (int)n, ops->name);
    }
#ifdef TANDEM_HAVE_CUDA
    if (ops == &cuda_backend_ops) {
        char why[256] = "";
        int have = cuda_backend_device_count(why, sizeof why);
        if (have < n) {
            return cli_die("--tensor-parallel-size %d: one GPU per rank, but %d CUDA device(s) "
                           "are visible",
                           (int)n, have > 0 ? have : 0);
        }
    }
#endif
    return 0;
}

int engine_flags_check(struct engine_flags *f)
{
    if (f->enable_auto_tool_choice && !f->tool_call_parser) {
        return cli_die("--enable-auto-tool-choice needs --tool-call-parser");
    }
    if (f->n_lora_modules > 0 && !f->enable_lora) {
        return cli_die("--lora-modules needs --enable-lora");
    }
    f->cfg.max_loras = f->enable_lora ? f->max_loras : 0;
    f->cfg.max_lora_rank = f->max_lora_rank;
    const char *env_key = getenv("VLLM_API_KEY");
    if (f->n_api_keys == 0 && env_key && *env_key) { /* --api-key wins, as in vLLM */
        f->api_keys[f->n_api_keys++] = env_key;
    }
    const backend_ops *ops = NULL;
    if (engine_flags_select_device(f->device, &ops) != 0) {
        return 2;
    }
    const int cuda = strcmp(ops->name, "cuda") == 0;
    f->cfg.backend = cuda ? ops : NULL; /* NULL: the engine's default, the cpu backend */
    f->cfg.tensor_parallel_size = f->tensor_parallel_size;
    if (f->tensor_parallel_size > 1 && engine_flags_check_tp(ops, f->tensor_parallel_size) != 0) {
        return 2;
    }
    if (f->gpu_memory_utilization > 0 && !cuda) {
        log_info("--gpu-memory-utilization %g applies to GPU backends; the cpu backend sizes its "
                 "KV cache with --kv-cache-memory",
                 f->gpu_memory_utilization);
    }
    return 0;
}

int engine_flags_device_memory(struct engine_flags *f, const model *m)
{
    if (!f->cfg.backend || strcmp(f->cfg.backend->name, "cuda") != 0) {
        return 0;
    }
#ifdef TANDEM_HAVE_CUDA
    engine_config *c = &f->cfg;
    const double util = f->gpu_memory_utilization > 0 ? f->gpu_memory_utilization
                                                      : ENGINE_FLAGS_GPU_MEMORY_UTILIZATION;
    if (c->kv_cache_bytes) {
        log_info("--kv-cache-memory %zu sizes the KV cache on the GPU; --gpu-memory-utilization "
                 "is not used",
                 c->kv_cache_bytes);
        return 0;
    }
    /* the engine's defaults (engine_new) for what the scratch is sized by */
    int32_t ctx =
        c->max_model_len ? c->max_model_len : (m->cfg.n_ctx_train > 0 ? m->cfg.n_ctx_train : 2048);
    int32_t seqs = c->max_num_seqs ? c->max_num_seqs : 128;
    int32_t toks = c->max_num_batched_tokens;
    if (toks == 0) {
        toks = c->disable_chunked_prefill && ctx > 2048 ? ctx : 2048;
    }
    toks = toks < seqs ? seqs : toks;
    int32_t bs = c->block_size ? c->block_size : 16;
    kv_dtype kdt = KV_DTYPE_F16;
    if (c->kv_dtype == ENGINE_KV_F32 ||
        (c->kv_dtype == ENGINE_KV_AUTO && m->tok_embd && m->tok_embd->type == TD_F32 && m->layers &&
         m->layers[0].wq && m->layers[0].wq->type == TD_F32)) {
        kdt = KV_DTYPE_F32;
    }
    char info[512] = "", err[512] = "";
    size_t bytes = 0;
    if (cuda_backend_kv_budget(m, c->tensor_parallel_size, toks, seqs, bs, kdt, ctx, util, &bytes,
                               info, sizeof info, err, sizeof err) != 0) {
        return cli_die("%s", err);
    }
    log_info("%s", info);
    c->kv_cache_bytes = bytes;
    return 0;
#else
    (void)m;
    return cli_die("--device cuda: this build has no CUDA backend");
#endif
}

void engine_flags_usage(FILE *out)
{
    fprintf(
        out,
        "  --model PATH                  GGUF file or Hugging Face directory\n"
        "  --max-model-len N             context length (default: the model's)\n"
        "  --max-num-seqs N              running sequences at most (128)\n"
        "  --max-num-batched-tokens N    tokens per engine step (2048)\n"
        "  --block-size N                KV block size in tokens (16)\n"
        "  --kv-cache-memory SIZE        KV cache budget, e.g. 2GiB (1GiB)\n"
        "  --kv-cache-dtype auto|float32|float16\n"
        "  --device auto|cpu|cuda        compute backend (auto: cuda when a GPU is usable)\n"
        "  --tensor-parallel-size N      split the model over N ranks: GPUs, or CPU thread\n"
        "                                groups (1)\n"
        "  --gpu-memory-utilization F    GPU memory share of the cuda backend (0, 1] (0.9)\n"
        "  --threads N                   compute threads (one per core)\n"
        "  --pin-threads                 pin compute threads to cores\n"
        "  --enforce-eager               no CUDA graphs: launch every step op by op\n"
        "  --[no-]enable-prefix-caching  automatic prefix caching (on)\n"
        "  --[no-]enable-chunked-prefill chunked prefill (on)\n"
        "  --disable-hybrid-kv-cache-manager\n"
        "                                one block table for full and sliding-window layers\n"
        "                                (gemma2/3 then keep every block of the context)\n"
        "  --long-prefill-token-threshold N\n"
        "  --scheduling-policy fcfs|priority\n"
        "  --max-waiting-requests N      waiting queue bound; beyond it 503 (1024)\n"
        "  --prefix-caching-hash-seed N  seed of the block-hash chain (0)\n"
        "  --chat-template FILE|TEMPLATE override the model's chat template\n"
        "  --generation-config auto|vllm|DIR\n"
        "                                sampling defaults from generation_config.json (auto:\n"
        "                                the model directory's; vllm: none)\n"
        "  --override-generation-config JSON\n"
        "                                sampling defaults on top, e.g. '{\"temperature\":0.6}'\n"
        "  --api-key KEY [KEY ...]       /v1/* needs 'Authorization: Bearer KEY' (default:\n"
        "                                $VLLM_API_KEY; /health, /metrics stay open)\n"
        "  --enable-auto-tool-choice     tool_choice \"auto\": the model decides to call tools\n"
        "  --tool-call-parser NAME       how tool calls are read from the output: hermes,\n"
        "                                llama3_json, llama4_json, mistral\n"
        "  --pooler-config JSON          /v1/embeddings: {\"pooling_type\": \"LAST\"|\"MEAN\",\n"
        "                                \"normalize\": true|false} (LAST, true)\n"
        "  --enable-lora                 serve LoRA adapters (requests name one as the model)\n"
        "  --lora-modules NAME=PATH ...  adapters to load at start: a GGUF adapter or a PEFT\n"
        "                                directory; also {\"name\": N, \"path\": P}\n"
        "  --max-loras N                 distinct adapters running at once (1)\n"
        "  --max-lora-rank N             largest adapter rank: 1, 8, 16, 32, 64, 128, 256,\n"
        "                                320, 512 (16)\n");
}

int engine_flags_load_loras(const struct engine_flags *f, engine *e)
{
    for (size_t i = 0; i < f->n_lora_modules; i++) {
        char *name = NULL, *path = NULL, err[1024] = "";
        int rc = lora_module_parse(f->lora_modules[i], &name, &path, err, sizeof err);
        if (rc == 0 && !engine_loras(e)) {
            rc = tandem_fail(err, sizeof err, -EINVAL, "LoRA is not enabled");
        }
        rc = rc ? rc : lora_registry_load(engine_loras(e), name, path, err, sizeof err);
        if (rc == 0) {
            log_info("LoRA adapter '%s' loaded from %s", name, path);
        }
        free(name);
        free(path);
        if (rc != 0) {
            return cli_die("--lora-modules %s: %s", f->lora_modules[i], err);
        }
    }
    return 0;
}

model *engine_flags_load_model(const char *path, const tokenizer **tok_out)
{
    char err[1024] = "";
    model *m = model_load(path, err, sizeof err);
    if (!m) {
        cli_die("cannot load model: %s", err);
        return NULL;
    }
    tokenizer *t = NULL;
    if (tokenizer_from_model(m, &t, err, sizeof err) != 0) {
        cli_die("cannot load the tokenizer of %s: %s", path, err);
        model_free(m);
        return NULL;
    }
    *tok_out = t;
    return m;
}

/* Reads dir/generation_config.json into d when it exists. 0, or 2 after a message. */
static int read_generation_config(const char *dir, int required, struct openai_defaults *d)
{
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (n < 0 || (size_t)n >= sizeof path) {
        return cli_die("--generation-config: path too long");
    }
    if (stat(path, &st) != 0) {
        if (required) {
            return cli_die("--generation-config: %s: %s", path, strerror(errno));
        }
        return 0;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
        return cli_die("%s: not a regular file of at most 1 MiB", path);
    }
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        return cli_die("%s: %s", path, strerror(errno));
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t len = text ? fread(text, 1, (size_t)st.st_size, fp) : 0;
    fclose(fp);
    if (!text) {
        return cli_die("out of memory");
    }
    char err[256] = "";
    int rc = openai_defaults_merge(d, text, len, err, sizeof err);
    free(text);
    if (rc != 0) {
        return cli_die("%s: %s", path, err);
    }
    return 0;
}

int engine_flags_generation_defaults(const struct engine_flags *f, struct openai_defaults *out)
{
    memset(out, 0, sizeof *out);
    const char *gc = f->generation_config;
    const char *source = NULL;
    struct stat st;
    if (strcmp(gc, "vllm") == 0) {
        /* vLLM's own defaults only */
    } else if (strcmp(gc, "auto") == 0) {
        if (f->model_path && stat(f->model_path, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (read_generation_config(f->model_path, 0, out) != 0) {
                return 2;
            }
            source = "the model's generation_config.json";
        }
    } else {
        if (read_generation_config(gc, 1, out) != 0) {
            return 2;
        }
        source = gc;
    }
    if (f->override_generation_config) {
        char err[256] = "";
        const char *o = f->override_generation_config;
        if (openai_defaults_merge(out, o, strlen(o), err, sizeof err) != 0) {
            return cli_die("--override-generation-config: %s", err);
        }
        source = source ? "the generation config and --override-generation-config"
                        : "--override-generation-config";
    }
    char desc[256];
    openai_defaults_describe(out, desc, sizeof desc);
    if (desc[0]) {
        log_info("default sampling parameters from %s: %s (requests that set a field win; "
                 "--generation-config vllm ignores the model's)",
                 source, desc);
    }
    return 0;
}
