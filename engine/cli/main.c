/*
 * tandem-engine: the inference engine's command line.
 *   serve     the OpenAI-compatible server (engine/server) on port 8200
 *   generate  one prompt through the engine, printing token ids (and optionally raw logits)
 *   bench     prompt-processing and generation throughput the way llama-bench measures them
 * Flag names follow vLLM's where one exists (docs/engine.md lists them all).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "engine/backend/tp_backend.h"
#include "engine/cli/flags.h"
#include "engine/core/engine.h"
#include "engine/server/server.h"
#include "engine/template/chat_template.h"
#include "kernels/cpu/kc_cpu.h"
#include "lib/clock.h"
#include "lib/common.h"
#include "lib/err.h"
#include "lib/http_server.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/otlp.h"
#include "lib/shutdown.h"
#include "lib/version.h"

/* ---- serve ---- */

struct serve_state {
    uv_loop_t *loop;
    struct http_server *srv;
    engine *e;
    struct shutdown *signals;
    uint64_t drain_ms;
    int drained;
};

/* The CPU kernels' instruction set and decode tuning (kernels/cpu/kc_cpu.h), and a warning for a
 * TANDEM_CPU_TUNE that did not parse. */
static void log_cpu_kernels(void)
{
    const kc_tune *t = kc_tune_get();
    const kc_isa isa = kc_isa_active();
    log_info("cpu kernels: %s%s; %s tuning%s: decode prefetch (one thread/several) %d/%d B "
             "quantized, %d/%d B F16/BF16, %d/%d B F32",
             kc_isa_name(isa),
             isa == KC_ISA_AVX512 && kc_cpu_features_get()->avx512bf16 ? " + avx512_bf16" : "",
             t->uarch, t->from_env ? " with TANDEM_CPU_TUNE" : "", t->pf_quant[0], t->pf_quant[1],
             t->pf_half[0], t->pf_half[1], t->pf_f32[0], t->pf_f32[1]);
    if (t->env_bad) {
        log_warn("TANDEM_CPU_TUNE=%s ignored: expected pf_quant=N,pf_half=N,pf_f32=N (N, or N/M "
                 "for one thread/several, bytes in [0, %d])",
                 getenv("TANDEM_CPU_TUNE"), KC_TUNE_PF_MAX);
    }
}

static void on_drained(struct http_server *srv, void *ud)
{
    struct serve_state *st = ud;
    (void)srv;
    st->drained = 1;
    log_info("drained; exiting");
    shutdown_free(st->signals);
    st->signals = NULL;
    uv_stop(st->loop); /* the engine's wake-up handle would keep the loop alive */
}

static void on_signal(void *ud, int signum, int immediate)
{
    struct serve_state *st = ud;
    (void)signum;
    engine_shutdown(st->e);
    if (immediate) {
        log_warn("second signal: closing all connections now");
        http_server_drain(st->srv, 0, on_drained, st);
        return;
    }
    log_info("draining in-flight requests (up to %llu ms)", (unsigned long long)st->drain_ms);
    http_server_drain(st->srv, st->drain_ms, on_drained, st);
}

static void serve_usage(FILE *f)
{
    fprintf(f, "usage: tandem-engine serve --model PATH [options]\n"
               "  --host ADDR                   bind address ($POD_IP, else 127.0.0.1)\n"
               "  --port N                      8200\n"
               "  --served-model-name NAME      the OpenAI model id (default: the model's name)\n");
    engine_flags_usage(f);
    fprintf(f, "  --drain-timeout-ms N          SIGTERM grace for in-flight requests (30000)\n"
               "  --enable-log-requests         one log line per request\n"
               "  --otlp-traces-endpoint URL    OTLP/HTTP collector for request traces\n"
               "                                (docs/tracing.md; default: $OTEL_EXPORTER_OTLP_*)\n"
               "  --log-level debug|info|warn|error, --log-format text|json\n");
}

static int cmd_serve(struct cli_args *a)
{
    struct engine_flags ef;
    engine_flags_init(&ef);
    engine_config *c = &ef.cfg;
    const char *host = getenv("POD_IP"), *served = NULL, *otlp_flag = NULL;
    int64_t port = 8200, drain_ms = 30000;
    int log_requests = 0;
    enum log_level level = LOGL_INFO;
    enum log_format format = LOG_FORMAT_TEXT;
    const char *v = NULL;
    for (a->i = 2; a->i < a->argc; a->i++) {
        int r = engine_flags_parse(a, &ef);
        if (r == 2) {
            engine_flags_free(&ef);
            return 2;
        }
        if (r == 1) {
            continue;
        }
        if (cli_flag(a, "--host", &v)) {
            host = v;
        } else if (cli_flag(a, "--port", &v)) {
            if (cli_i64(v, "--port", 0, 65535, &port)) {
                return 2;
            }
        } else if (cli_flag(a, "--served-model-name", &v)) {
            served = v;
        } else if (cli_flag(a, "--drain-timeout-ms", &v)) {
            if (cli_i64(v, "--drain-timeout-ms", 0, 3600000, &drain_ms)) {
                return 2;
            }
        } else if (cli_bool(a, "--enable-log-requests")) {
            log_requests = 1;
        } else if (cli_bool(a, "--disable-log-requests")) {
            log_requests = 0;
        } else if (cli_flag(a, "--otlp-traces-endpoint", &v)) {
            if (!v || !*v) {
                return cli_die("--otlp-traces-endpoint needs a URL");
            }
            otlp_flag = v;
        } else if (cli_flag(a, "--log-level", &v)) {
            if (!v || log_parse_level(v, &level) != 0) {
                return cli_die("--log-level: '%s' is not debug, info, warn or error", v ? v : "");
            }
        } else if (cli_flag(a, "--log-format", &v)) {
            if (!v || log_parse_format(v, &format) != 0) {
                return cli_die("--log-format: '%s' is not text or json", v ? v : "");
            }
        } else if (cli_bool(a, "--help") || cli_bool(a, "-h")) {
            serve_usage(stdout);
            return 0;
        } else {
            serve_usage(stderr);
            return cli_die("serve: unknown flag '%s'", a->argv[a->i]);
        }
    }
    if (!ef.model_path) {
        serve_usage(stderr);
        engine_flags_free(&ef);
        return cli_die("serve: --model is required");
    }
    log_init("tandem-engine", level, format);
    struct openai_defaults defaults;
    char err[1024] = "", url[2048];
    if (otlp_endpoint_resolve(otlp_flag, url, sizeof url, err, sizeof err) < 0) {
        engine_flags_free(&ef);
        return cli_die("%s", err);
    }
    if (engine_flags_check(&ef) != 0 || engine_flags_generation_defaults(&ef, &defaults) != 0) {
        engine_flags_free(&ef);
        return 2;
    }
    const tokenizer *tok = NULL;
    model *m = engine_flags_load_model(ef.model_path, &tok);
    if (!m) {
        engine_flags_free(&ef);
        return 1;
    }
    if (engine_flags_device_memory(&ef, m) != 0) {
        tokenizer_free((tokenizer *)tok);
        model_free(m);
        engine_flags_free(&ef);
        return 2;
    }
    int rc = 1;
    struct metrics_registry *reg = metrics_registry_new();
    struct otlp_exporter *otlp = NULL;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct serve_state st = {.loop = &loop, .drain_ms = (uint64_t)drain_ms};
    struct engine_server *es = NULL;
    c->metrics = reg;
    c->served_model_name = served;
    engine *e = NULL;
    if (reg && otlp_setup(otlp_flag, reg, &otlp, err, sizeof err) != 0) {
        log_error("tracing: %s", err);
        goto out;
    }
    e = reg ? engine_new(m, tok, c, err, sizeof err) : NULL;
    if (!e) {
        log_error("cannot start the engine: %s", reg ? err : "out of memory");
        goto out;
    }
    st.e = e;
    if (engine_flags_load_loras(&ef, e) != 0) {
        goto out;
    }
    engine_stats es0;
    engine_get_stats(e, &es0);
    log_info("model %s (%s, %d layers, dim %d, vocab %d, %.1f M params); %s backend, tensor "
             "parallel size %d; KV cache %d blocks of %d tokens; max_model_len %d",
             m->name, model_arch_name(m->cfg.arch), m->cfg.n_layer, m->cfg.n_embd, m->cfg.n_vocab,
             (double)m->n_params / 1e6, c->backend ? c->backend->name : cpu_backend_ops.name,
             c->tensor_parallel_size > 1 ? (int)c->tensor_parallel_size : 1, es0.num_blocks,
             es0.block_size, es0.max_model_len);
    if (!c->backend || c->backend == &cpu_backend_ops) {
        log_cpu_kernels();
    }
    struct http_server_config hc;
    http_server_config_init(&hc);
    hc.host = host && *host ? host : "127.0.0.1";
    hc.port = (int)port;
    hc.metrics = reg;
    hc.metrics_prefix = "tandem_engine_";
    hc.metrics_path = "/metrics";
    hc.server_name = "tandem-engine";
    hc.max_body = 64u << 20;
    st.srv = http_server_new(&loop, &hc, err, sizeof err);
    if (!st.srv) {
        log_error("%s", err);
        goto out;
    }
    struct engine_server_config sc = {
        .served_model_name = served,
        .model_root = ef.model_path,
        .chat_template = ef.chat_template,
        .log_requests = log_requests,
        .defaults = &defaults,
        .prefix_hash_seed = ef.cfg.prefix_hash_seed,
        .disable_prefix_caching = ef.cfg.disable_prefix_caching,
        .tracer = otlp_tracer(otlp, otlp_service_name("tandem-engine"), NULL),
        .api_keys = ef.api_keys,
        .n_api_keys = ef.n_api_keys,
        .enable_auto_tool_choice = ef.enable_auto_tool_choice,
        .tool_call_parser = ef.tool_call_parser,
        .pooler_config = ef.pooler_config,
    };
    es = engine_server_new(&loop, st.srv, e, &sc, err, sizeof err);
    if (!es || engine_start(e) != 0 || http_server_start(st.srv, err, sizeof err) != 0) {
        /* nothing listens yet: exit at once; out: closes the engine's handles and the loop */
        log_error("cannot start serving: %s", err[0] ? err : "engine thread");
        goto out;
    }
    st.signals = shutdown_new(&loop, on_signal, &st);
    if (!st.signals) {
        log_error("cannot install signal handlers");
        http_server_drain(st.srv, 0, on_drained, &st);
    } else {
        log_info("serving %s on http://%s:%d", served ? served : m->name, hc.host,
                 http_server_port(st.srv));
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = st.drained ? 0 : 1;
out:
    if (st.signals) {
        shutdown_free(st.signals);
    }
    if (e) {
        engine_stop(e);
        engine_free(e); /* aborts what is left; outputs land in the server's queue */
    }
    engine_server_free(es);
    uv_run(&loop, UV_RUN_DEFAULT);
    http_server_free(st.srv);
    uv_loop_close(&loop);
    otlp_exporter_free(otlp); /* the last spans go out; its counters live in reg */
    metrics_registry_free(reg);
    tokenizer_free((tokenizer *)tok);
    model_free(m);
    engine_flags_free(&ef);
    return rc;
}

/* ---- generate ---- */

struct gen_state {
    int32_t *ids;
    size_t n, cap;
    FILE *dump;
    int32_t n_vocab;
    int finished;
    sched_status status;
    struct buf text;
    int dump_failed;
    int lost;  /* a token id could not be kept (out of memory); text failures stay in text */
    int error; /* engine_output.error of the final output */
};

static void gen_output(void *user, const engine_output *o)
{
    struct gen_state *g = user;
    if (o->token >= 0) {
        int32_t *p = tandem_grow(g->ids, &g->cap, g->n + 1, sizeof *p, 64);
        if (p) {
            g->ids = p;
            g->ids[g->n++] = o->token;
        } else {
            g->lost = 1;
        }
        if (g->dump && o->logits &&
            fwrite(o->logits, sizeof(float), (size_t)g->n_vocab, g->dump) != (size_t)g->n_vocab) {
            g->dump_failed = 1;
        }
    }
    if (o->text_len > 0) {
        buf_append(&g->text, o->text, o->text_len);
    }
    if (o->finished) {
        g->finished = 1;
        g->status = o->status;
        g->error = o->error;
    }
}

static void print_ids(const char *label, const int32_t *ids, int32_t n)
{
    printf("%s:", label);
    for (int32_t i = 0; i < n; i++) {
        printf("%s%d", i ? "," : " ", (int)ids[i]);
    }
    printf("\n");
}

static void generate_usage(FILE *f)
{
    fprintf(f,
            "usage: tandem-engine generate --model PATH (--prompt TEXT | --prompt-tokens 1,2,3)\n"
            "                              [--n N] [--temperature T] [--top-k K] [--top-p P]\n"
            "                              [--min-p P] [--seed S] [--ignore-eos]\n"
            "                              [--teacher-tokens 4,5,6] [--dump-logits FILE]\n"
            "                              [--no-special] [--lora ADAPTER]\n"
            "                              [engine flags as for serve]\n"
            "  Prints the prompt token ids, the generated ids and the generated text.\n"
            "  --n: tokens to generate (16); sampling is greedy unless --temperature is given.\n"
            "  --dump-logits: float32 little-endian logits, one row of vocab values per evaluated\n"
            "  position (the last prompt position, then each generated step).\n"
            "  --teacher-tokens: feed these tokens instead of sampled ones (step-by-step\n"
            "  comparison with another engine); --no-special: no BOS for a text prompt.\n"
            "  --lora: run with this LoRA adapter (a GGUF adapter or a PEFT directory).\n");
}

static int cmd_generate(struct cli_args *a)
{
    struct engine_flags ef;
    engine_flags_init(&ef);
    engine_config *c = &ef.cfg;
    const char *prompt = NULL, *dump_path = NULL, *lora = NULL, *v = NULL;
    int32_t *prompt_ids = NULL, n_prompt_ids = 0, *teacher = NULL, n_teacher = 0, n = 16;
    int add_special = 1, ignore_eos = 0;
    struct sampling_params sp;
    sampling_params_init(&sp);
    sp.temperature = 0;
    int rc = 2;
    for (a->i = 2; a->i < a->argc; a->i++) {
        int r = engine_flags_parse(a, &ef);
        if (r == 2) {
            goto out;
        }
        if (r == 1) {
            continue;
        }
        if (cli_flag(a, "--prompt", &v)) {
            if (!v) {
                cli_die("--prompt needs a value");
                goto out;
            }
            prompt = v;
        } else if (cli_flag(a, "--prompt-tokens", &v)) {
            free(prompt_ids);
            prompt_ids = NULL;
            if (cli_ids(v, "--prompt-tokens", &prompt_ids, &n_prompt_ids)) {
                goto out;
            }
        } else if (cli_flag(a, "--teacher-tokens", &v)) {
            free(teacher);
            teacher = NULL;
            if (cli_ids(v, "--teacher-tokens", &teacher, &n_teacher)) {
                goto out;
            }
        } else if (cli_flag(a, "--n", &v) || cli_flag(a, "-n", &v)) {
            if (cli_i32(v, "--n", 1, 1 << 24, &n)) {
                goto out;
            }
        } else if (cli_flag(a, "--temperature", &v)) {
            if (cli_float(v, "--temperature", 0, 100, &sp.temperature)) {
                goto out;
            }
        } else if (cli_flag(a, "--top-k", &v)) {
            int32_t k;
            if (cli_i32(v, "--top-k", -1, 1 << 24, &k)) {
                goto out;
            }
            sp.top_k = k;
        } else if (cli_flag(a, "--top-p", &v)) {
            if (cli_float(v, "--top-p", 1e-9, 1, &sp.top_p)) {
                goto out;
            }
        } else if (cli_flag(a, "--min-p", &v)) {
            if (cli_float(v, "--min-p", 0, 1, &sp.min_p)) {
                goto out;
            }
        } else if (cli_flag(a, "--seed", &v)) {
            int64_t s = 0;
            if (cli_i64(v, "--seed", INT64_MIN, INT64_MAX, &s)) {
                goto out;
            }
            sp.seed = (uint64_t)s;
            sp.has_seed = 1;
        } else if (cli_flag(a, "--dump-logits", &v)) {
            dump_path = v;
        } else if (cli_flag(a, "--lora", &v)) {
            if (!v || !*v) {
                cli_die("--lora needs an adapter path");
                goto out;
            }
            lora = v;
        } else if (cli_bool(a, "--ignore-eos")) {
            ignore_eos = 1;
        } else if (cli_bool(a, "--no-special")) {
            add_special = 0;
        } else if (cli_bool(a, "--help") || cli_bool(a, "-h")) {
            generate_usage(stdout);
            rc = 0;
            goto out;
        } else {
            generate_usage(stderr);
            cli_die("generate: unknown flag '%s'", a->argv[a->i]);
            goto out;
        }
    }
    if (!ef.model_path || (!prompt && !prompt_ids) || (prompt && prompt_ids)) {
        generate_usage(stderr);
        cli_die("generate: --model and exactly one of --prompt / --prompt-tokens are required");
        goto out;
    }
    log_init("tandem-engine", LOGL_WARN, LOG_FORMAT_TEXT);
    if (engine_flags_check(&ef) != 0) {
        goto out;
    }
    rc = 1;
    const tokenizer *tok = NULL;
    model *m = engine_flags_load_model(ef.model_path, &tok);
    if (!m) {
        goto out;
    }
    if (engine_flags_device_memory(&ef, m) != 0) {
        rc = 2;
        goto out_model;
    }
    if (prompt) {
        size_t nn = 0;
        if (tokenizer_encode(tok, prompt, strlen(prompt), add_special, true, &prompt_ids, &nn) !=
            0) {
            cli_die("cannot tokenize the prompt");
            goto out_model;
        }
        n_prompt_ids = (int32_t)nn;
    }
    if (c->max_num_seqs == 0) {
        c->max_num_seqs = 1;
    }
    if (lora) {
        c->max_loras = 1;
        c->max_lora_rank = LORA_MAX_RANK;
    }
    char err[1024] = "";
    engine *e = engine_new(m, tok, c, err, sizeof err);
    if (!e) {
        cli_die("cannot start the engine: %s", err);
        goto out_model;
    }
    struct gen_state g = {.n_vocab = m->cfg.n_vocab};
    buf_init(&g.text, (size_t)64 << 20);
    if (engine_flags_load_loras(&ef, e) != 0 ||
        (lora && lora_registry_load(engine_loras(e), "lora", lora, err, sizeof err) != 0)) {
        if (lora && err[0]) {
            cli_die("--lora: %s", err);
        }
        goto out_engine;
    }
    if (dump_path) {
        g.dump = fopen(dump_path, "wb");
        if (!g.dump) {
            cli_die("--dump-logits: cannot open %s: %s", dump_path, strerror(errno));
            goto out_engine;
        }
    }
    sp.ignore_eos = ignore_eos;
    engine_request r = {
        .prompt = prompt_ids,
        .n_prompt = n_prompt_ids,
        .sampling = sp,
        .max_tokens = n_teacher > 0 && n_teacher < n ? n_teacher : n,
        .skip_special_tokens = true,
        .teacher = teacher,
        .n_teacher = n_teacher,
        .return_logits = dump_path != NULL,
        .lora_name = lora ? "lora" : NULL,
        .on_output = gen_output,
        .user = &g,
    };
    double t0 = tandem_now_s();
    int64_t id = engine_submit(e, &r, err, sizeof err);
    if (id < 0) {
        cli_die("%s", err);
        goto out_engine;
    }
    while (!g.finished) {
        int s = engine_step(e);
        if (s < 0) {
            cli_die("forward pass failed: %s", tandem_strerror(s));
            goto out_engine;
        }
        if (s == 0 && !g.finished) {
            cli_die("the engine stopped without finishing the request");
            goto out_engine;
        }
    }
    double dt = tandem_now_s() - t0;
    int lost = g.error ? g.error : g.lost ? -ENOMEM : buf_error(&g.text);
    if (lost != 0) {
        cli_die("the output is incomplete: %s", tandem_strerror(lost));
        goto out_engine;
    }
    print_ids("prompt_tokens", prompt_ids, n_prompt_ids);
    print_ids("generated_tokens", g.ids, (int32_t)g.n);
    printf("text: %s\n", g.text.data ? g.text.data : "");
    printf("finish_reason: %s\n", sched_status_reason(g.status));
    fprintf(stderr, "tandem-engine: %d prompt + %d generated tokens in %.3f s\n", (int)n_prompt_ids,
            (int)g.n, dt);
    rc = g.dump_failed ? 1 : 0;
    if (g.dump_failed) {
        cli_die("--dump-logits: write failed");
    }
out_engine:
    if (g.dump && fclose(g.dump) != 0) {
        rc = 1;
    }
    engine_free(e);
    buf_free(&g.text);
    free(g.ids);
out_model:
    tokenizer_free((tokenizer *)tok);
    model_free(m);
out:
    free(prompt_ids);
    free(teacher);
    engine_flags_free(&ef);
    return rc;
}

/* ---- bench ---- */

static void mean_std(const double *v, int n, double *mean, double *sd)
{
    double s = 0;
    *mean = *sd = 0;
    if (n < 1) {
        return;
    }
    for (int i = 0; i < n; i++) {
        s += v[i];
    }
    *mean = s / n;
    double q = 0;
    for (int i = 0; i < n; i++) {
        q += (v[i] - *mean) * (v[i] - *mean);
    }
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* One timed run: pp = one sequence of p tokens in one batch (logits for the last one); tg = n
 * single-token steps from an empty context, as llama-bench does. Returns seconds or < 0. */
static double bench_run(const backend_ops *ops, backend *b, const model *m, int32_t *blocks,
                        int32_t n_blocks, int32_t p, int32_t n, float *logits, uint64_t *rng)
{
    int32_t count = p > 0 ? p : n;
    int32_t *toks = malloc((size_t)count * sizeof *toks);
    if (!toks) {
        return -1;
    }
    for (int32_t i = 0; i < count; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((*rng >> 33) % (uint64_t)m->cfg.n_vocab);
    }
    double t0 = tandem_now_s();
    int rc = 0;
    if (p > 0) {
        fwd_seq s = {.n_new = p,
                     .start_pos = 0,
                     .block_table = blocks,
                     .n_blocks = n_blocks,
                     .want_logits = true};
        fwd_batch bt = {.n_tokens = p, .tokens = toks, .n_seqs = 1, .seqs = &s, .logits = logits};
        rc = ops->forward(b, &bt);
    } else {
        for (int32_t i = 0; i < n && rc == 0; i++) {
            fwd_seq s = {.n_new = 1,
                         .start_pos = i,
                         .block_table = blocks,
                         .n_blocks = n_blocks,
                         .want_logits = true};
            fwd_batch bt = {
                .n_tokens = 1, .tokens = toks + i, .n_seqs = 1, .seqs = &s, .logits = logits};
            rc = ops->forward(b, &bt);
        }
    }
    double dt = tandem_now_s() - t0;
    free(toks);
    return rc == 0 ? dt : -1;
}

static int parse_int_list(const char *s, const char *name, int32_t *out, int cap, int *n)
{
    *n = 0;
    const char *p = s;
    while (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > (1 << 20) || (*end && *end != ',') || *n == cap) {
            return cli_die("%s: '%s' is not a comma-separated list of counts", name, s);
        }
        out[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : cli_die("%s needs a value", name);
}

static int cmd_bench(struct cli_args *a)
{
    const char *model_path = NULL, *v = NULL;
    int32_t pps[8] = {512}, tgs[8] = {128}, threads[16] = {0};
    int n_pp = 1, n_tg = 1, n_thr = 1;
    int32_t reps = 5;
    int json = 0;
    kv_dtype kdt = KV_DTYPE_F16;
    int kdt_set = 0;
    const char *device = "cpu"; /* like llama-bench runs: the backend is chosen explicitly */
    int32_t tp = 1;
    threads[0] = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    for (a->i = 2; a->i < a->argc; a->i++) {
        if (cli_flag(a, "--model", &v) || cli_flag(a, "-m", &v)) {
            model_path = v;
        } else if (cli_flag(a, "-p", &v) || cli_flag(a, "--n-prompt", &v)) {
            if (parse_int_list(v, "-p", pps, 8, &n_pp)) {
                return 2;
            }
        } else if (cli_flag(a, "-n", &v) || cli_flag(a, "--n-gen", &v)) {
            if (parse_int_list(v, "-n", tgs, 8, &n_tg)) {
                return 2;
            }
        } else if (cli_flag(a, "-t", &v) || cli_flag(a, "--threads", &v)) {
            if (parse_int_list(v, "-t", threads, 16, &n_thr)) {
                return 2;
            }
        } else if (cli_flag(a, "-r", &v) || cli_flag(a, "--repetitions", &v)) {
            if (cli_i32(v, "-r", 1, 1000, &reps)) {
                return 2;
            }
        } else if (cli_flag(a, "--kv-cache-dtype", &v)) {
            kdt_set = 1;
            if (v && (strcmp(v, "float32") == 0 || strcmp(v, "f32") == 0)) {
                kdt = KV_DTYPE_F32;
            } else if (v && (strcmp(v, "float16") == 0 || strcmp(v, "f16") == 0)) {
                kdt = KV_DTYPE_F16;
            } else {
                return cli_die("--kv-cache-dtype: '%s' is not float32 or float16", v ? v : "");
            }
        } else if (cli_flag(a, "--device", &v)) {
            if (!v || (strcmp(v, "auto") != 0 && strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0)) {
                return cli_die("--device: '%s' is not auto, cpu or cuda", v ? v : "");
            }
            device = v;
        } else if (cli_flag(a, "--tensor-parallel-size", &v) || cli_flag(a, "-tp", &v)) {
            if (cli_i32(v, "--tensor-parallel-size", 1, 64, &tp)) {
                return 2;
            }
        } else if (cli_flag(a, "-o", &v)) {
            json = v && strcmp(v, "json") == 0;
        } else if (cli_bool(a, "--help") || cli_bool(a, "-h")) {
            printf("usage: tandem-engine bench --model PATH [-p 512] [-n 128] [-t 1,2] [-r 5]\n"
                   "                           [--kv-cache-dtype float16|float32] [-o md|json]\n"
                   "                           [--device cpu|cuda|auto] (cpu)\n"
                   "                           [--tensor-parallel-size N] (1; -t is then the\n"
                   "                           threads of all ranks together)\n"
                   "  pp<p>: one prompt of p random tokens in one forward pass; tg<n>: n\n"
                   "  single-token steps from an empty context (llama-bench's definitions);\n"
                   "  tokens/s as mean ± sample standard deviation over -r runs after a warm-up.\n"
                   "  The KV cache is F16 by default, like llama-bench's.\n");
            return 0;
        } else {
            return cli_die("bench: unknown flag '%s'", a->argv[a->i]);
        }
    }
    (void)kdt_set;
    if (!model_path) {
        return cli_die("bench: --model is required");
    }
    log_init("tandem-engine", LOGL_WARN, LOG_FORMAT_TEXT);
    const backend_ops *ops = &cpu_backend_ops;
    if (engine_flags_select_device(device, &ops) != 0) {
        return 2;
    }
    char be_name[32];
    snprintf(be_name, sizeof be_name, "%s", strcmp(ops->name, "cuda") == 0 ? "CUDA" : "CPU");
    const backend_ops *inner = ops;
    if (tp > 1) {
        snprintf(be_name + strlen(be_name), sizeof be_name - strlen(be_name), " TP%d", (int)tp);
        ops = &tp_backend_ops;
    }
    char err[1024] = "";
    model *m = model_load(model_path, err, sizeof err);
    if (!m) {
        return cli_die("cannot load model: %s", err);
    }
    int32_t max_tokens = 1;
    for (int i = 0; i < n_pp; i++) {
        max_tokens = pps[i] > max_tokens ? pps[i] : max_tokens;
    }
    int32_t max_ctx = max_tokens;
    for (int i = 0; i < n_tg; i++) {
        max_ctx = tgs[i] > max_ctx ? tgs[i] : max_ctx;
    }
    const int32_t bs = 16;
    int32_t n_blocks = (max_ctx + bs - 1) / bs;
    int32_t *blocks = malloc((size_t)n_blocks * sizeof *blocks);
    float *logits = malloc((size_t)m->cfg.n_vocab * sizeof *logits);
    if (!blocks || !logits) {
        free(blocks);
        free(logits);
        model_free(m);
        return cli_die("out of memory");
    }
    for (int32_t i = 0; i < n_blocks; i++) {
        blocks[i] = i + 1;
    }
    /* the attention Q type names the file, "+mix" when other matrices differ (Q4_K_M...) */
    char wtype[32];
    bool mixed = false;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const model_tensor *mats[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
        for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) {
            mixed = mixed || mats[i]->type != m->layers[0].wq->type;
        }
    }
    snprintf(wtype, sizeof(wtype), "%s%s", td_name(m->layers[0].wq->type), mixed ? "+mix" : "");
    if (!json) {
        printf("| model | size | params | backend | threads | test | t/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    }
    int rc = 0;
    uint64_t rng = 42;
    for (int ti = 0; ti < n_thr && rc == 0; ti++) {
        backend_config bc = {.num_blocks = n_blocks + 1,
                             .block_size = bs,
                             .kv_dtype = kdt,
                             .max_batch_tokens = max_tokens,
                             .max_seqs = 1,
                             .n_threads = threads[ti],
                             .tp_size = tp > 1 ? tp : 0,
                             .tp_inner = tp > 1 ? inner : NULL};
        backend *b = ops->create(m, &bc, err, sizeof err);
        if (!b) {
            rc = cli_die("cannot create the backend: %s", err);
            break;
        }
        for (int kind = 0; kind < 2 && rc == 0; kind++) {
            int cnt = kind == 0 ? n_pp : n_tg;
            for (int k = 0; k < cnt && rc == 0; k++) {
                int32_t p = kind == 0 ? pps[k] : 0, n = kind == 0 ? 0 : tgs[k];
                if (p == 0 && n == 0) {
                    continue;
                }
                double ts[1000] = {0};
                if (bench_run(ops, b, m, blocks, n_blocks, p, n, logits, &rng) < 0) { /* warm */
                    rc = cli_die("forward pass failed");
                    break;
                }
                for (int r = 0; r < reps; r++) {
                    double s = bench_run(ops, b, m, blocks, n_blocks, p, n, logits, &rng);
                    if (s <= 0) {
                        rc = cli_die("forward pass failed");
                        break;
                    }
                    ts[r] = (double)(p ? p : n) / s;
                }
                if (rc) {
                    break;
                }
                double mean, sd;
                mean_std(ts, reps, &mean, &sd);
                char test[32];
                snprintf(test, sizeof test, "%s%d", p ? "pp" : "tg", (int)(p ? p : n));
                if (json) {
                    printf("{\"model\":\"%s\",\"type\":\"%s\",\"size_bytes\":%zu,\"params\":%zu,"
                           "\"backend\":\"%s\",\"threads\":%d,\"test\":\"%s\",\"t_s\":%.2f,"
                           "\"t_s_sd\":%.2f}\n",
                           m->name, wtype, m->weight_bytes, m->n_params, be_name, (int)threads[ti],
                           test, mean, sd);
                } else {
                    printf("| %s %s %s | %.2f MiB | %.2f M | %s | %d | %s | %.2f ± %.2f |\n",
                           model_arch_name(m->cfg.arch), m->name, wtype,
                           (double)m->weight_bytes / (1024.0 * 1024.0), (double)m->n_params / 1e6,
                           be_name, (int)threads[ti], test, mean, sd);
                }
                fflush(stdout);
            }
        }
        ops->destroy(b);
    }
    free(blocks);
    free(logits);
    model_free(m);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tandem-engine COMMAND [flags]\n"
            "\n"
            "commands:\n"
            "  serve      OpenAI-compatible HTTP server (vLLM's API, metrics and errors)\n"
            "  generate   complete one prompt from the command line and print the tokens\n"
            "  bench      prompt-processing and generation speed, llama-bench style\n"
            "\n"
            "  --help, -h     this text; 'tandem-engine COMMAND --help' lists a command's flags\n"
            "  --version      print the version and exit\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    struct cli_args a = {.argc = argc, .argv = argv};
    cli_set_prog("tandem-engine");
    if (strcmp(argv[1], "serve") == 0) {
        return cmd_serve(&a);
    }
    if (strcmp(argv[1], "generate") == 0) {
        return cmd_generate(&a);
    }
    if (strcmp(argv[1], "bench") == 0) {
        return cmd_bench(&a);
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("tandem-engine %s\n", TANDEM_VERSION);
        return 0;
    }
    usage(stderr);
    return cli_die("unknown command '%s'", argv[1]);
}
