/*
 * Command-line parsing shared by the binaries that host the engine (tandem-engine serve, generate,
 * bench; tandem-agent serve): the argument cursor and value parsers, and the engine flags with
 * vLLM's names (docs/engine.md lists them). Messages go to stderr prefixed with the program name
 * set by cli_set_prog; every parser returns 2 (the usage exit status) on a bad value so that
 * callers can `return` it.
 */
#ifndef TANDEM_ENGINE_CLI_FLAGS_H
#define TANDEM_ENGINE_CLI_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include "engine/core/engine.h"
#include "engine/server/openai.h"
#include "lib/common.h"

/* The argument cursor: argv[i] is the argument being looked at. */
struct cli_args {
    int argc;
    char **argv;
    int i;
};

/* Names the program in messages ("tandem-engine", "tandem-agent"). */
void cli_set_prog(const char *prog);
/* Prints "<prog>: <message>" to stderr; returns 2. */
int cli_die(const char *fmt, ...) TANDEM_PRINTF(1, 2);

/* Matches --name or --name=value; on a match *val gets the value (the next argument when
 * needed; NULL when there is none: the parsers below then say the flag needs a value). */
int cli_flag(struct cli_args *a, const char *name, const char **val);
/* Matches a flag without a value. */
int cli_bool(struct cli_args *a, const char *name);

/* Value parsers: 0, or 2 after a message naming the flag. */
int cli_i64(const char *s, const char *name, int64_t lo, int64_t hi, int64_t *out);
int cli_i32(const char *s, const char *name, int32_t lo, int32_t hi, int32_t *out);
int cli_double(const char *s, const char *name, double lo, double hi, double *out);
int cli_float(const char *s, const char *name, double lo, double hi, float *out);
/* Sizes like 4294967296, 4GiB, 512MiB, 2G, 100M, 64K. */
int cli_bytes(const char *s, const char *name, size_t *out);
/* "1,2,3" → a malloc'd array of token ids. */
int cli_ids(const char *s, const char *name, int32_t **out, int32_t *n);

#define ENGINE_FLAGS_MAX_API_KEYS     64
#define ENGINE_FLAGS_MAX_LORA_MODULES 256

/* The engine's flags, as vLLM names them. */
struct engine_flags {
    engine_config cfg;
    const char *model_path;
    char *chat_template;                    /* owned: the template text of --chat-template */
    const char *device;                     /* --device auto|cpu|cuda ("auto") */
    int32_t tensor_parallel_size;           /* 1 */
    double gpu_memory_utilization;          /* 0: not given */
    const char *generation_config;          /* --generation-config auto|vllm|DIR ("auto") */
    const char *override_generation_config; /* JSON text, or NULL */
    const char *api_keys[ENGINE_FLAGS_MAX_API_KEYS]; /* --api-key (borrowed from argv), else
                                                        $VLLM_API_KEY after engine_flags_check */
    size_t n_api_keys;
    int enable_auto_tool_choice;  /* --enable-auto-tool-choice */
    const char *tool_call_parser; /* --tool-call-parser NAME (borrowed from argv), or NULL */
    const char *pooler_config;    /* --pooler-config JSON (borrowed from argv), or NULL */
    /* LoRA: --enable-lora, --max-loras (1), --max-lora-rank (16) into cfg.max_loras /
     * max_lora_rank by engine_flags_check; --lora-modules entries "name=path" or JSON
     * {"name", "path", "base_model_name"} (borrowed from argv), loaded by engine_flags_load_loras
     */
    int enable_lora;
    int32_t max_loras, max_lora_rank;
    const char *lora_modules[ENGINE_FLAGS_MAX_LORA_MODULES];
    size_t n_lora_modules;
};

void engine_flags_init(struct engine_flags *f);
void engine_flags_free(struct engine_flags *f);

/* Looks at a->argv[a->i]: 1 when it was an engine flag (consumed, with its value), 0 when not,
 * 2 on a bad value (message printed). */
int engine_flags_parse(struct cli_args *a, struct engine_flags *f);

/* vLLM's default --gpu-memory-utilization. */
#define ENGINE_FLAGS_GPU_MEMORY_UTILIZATION 0.9

/* Picks the backend for --device: cpu; cuda (a usable CUDA device, or 2 after a message naming
 * why not: no CUDA backend in this build, no driver, no device); auto (cuda when this build has
 * it and a device is usable, else cpu; logged). 0, or 2 after a message. */
int engine_flags_select_device(const char *device, const backend_ops **ops);

/* Checks what can only be judged once every flag is read, and resolves --device into
 * f->cfg.backend (NULL for the cpu backend): the device (engine_flags_select_device),
 * --tensor-parallel-size (ranks per model, docs/tensor-parallel.md), --gpu-memory-utilization
 * (logged as not applying to the CPU backend, whose KV cache --kv-cache-memory sizes). 0, or 2
 * after a message. */
int engine_flags_check(struct engine_flags *f);

/* Once the model is loaded: on the cuda backend sizes the KV cache, unless --kv-cache-memory
 * was given, as --gpu-memory-utilization (0.9 when not given) x device memory - memory in use -
 * weights - scratch, into f->cfg.kv_cache_bytes, and logs the device and the sizes. Nothing on
 * the cpu backend. 0, or 2 after a message (too little device memory: how much is needed). */
int engine_flags_device_memory(struct engine_flags *f, const model *m);

/* Loads the --lora-modules adapters into e's registry (after engine_new). 0, or 2 after a message
 * naming the module (vLLM refuses to start on a bad one too). */
int engine_flags_load_loras(const struct engine_flags *f, engine *e);

/* The flag list for usage texts. */
void engine_flags_usage(FILE *out);

/* Loads the model and its tokenizer (messages name the path). NULL on failure. */
model *engine_flags_load_model(const char *path, const tokenizer **tok_out);

/* vLLM's default sampling parameters: with --generation-config auto the model's
 * generation_config.json (a Hugging Face directory's, when present), with DIR that directory's,
 * with vllm none; then --override-generation-config on top. Logs what it applies. 0, or 2 after
 * a message naming the file or flag. */
int engine_flags_generation_defaults(const struct engine_flags *f, struct openai_defaults *out);

#endif
