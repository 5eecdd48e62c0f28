/*
 * Internal to engine/model: the loader state behind model->priv and the helpers shared by the
 * GGUF loader (model.c) and the Hugging Face loader (hf.c). Not for use outside this folder.
 */
#ifndef TANDEM_ENGINE_MODEL_INTERNAL_H
#define TANDEM_ENGINE_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"

typedef struct model_priv {
    gguf_ctx *gguf;        /* GGUF: the parsed, mapped file */
    safetensors_file **st; /* HF: the mapped shards */
    size_t n_st;
    void **owned; /* buffers freed with the model (names, converted tensors, ...) */
    size_t n_owned, cap_owned;
    /* Which layers use the sliding window (cfg.n_swa > 0): swa_layers[il] when set (GGUF's
     * per-layer sliding_window_pattern array, owned), else llama.cpp's set_swa_pattern: layer
     * il slides when swa_pattern is 0 or il % swa_pattern < swa_pattern - 1. */
    const uint8_t *swa_layers;
    int swa_pattern;
} model_priv;

/* Registers p (malloc'd or aligned_alloc'd) to be freed by model_free. On -ENOMEM frees p. */
int model__own(model *m, void *p);

/* Allocates n bytes aligned to 64, owned by the model. NULL on failure. */
void *model__alloc(model *m, size_t n);

/* Copy of s (len bytes) as an owned NUL-terminated string. NULL on failure. */
char *model__strndup(model *m, const char *s, size_t len);

/* Loads the Hugging Face directory at m->path into m (format, cfg, tensors, tokenizer paths,
 * template, token texts, name). The caller runs model__finish afterwards. 0 or -errno with err. */
int model__load_hf(model *m, char *err, size_t errlen);

/* An IEEE half as a float (exact). */
float model__f16_to_f32(uint16_t h);

/* Parses the JSON file at path, which must hold an object (at most 64 MiB): 0 with *out (a new
 * reference), or -errno with err naming the file. */
struct json_object;
int model__read_json(const char *path, struct json_object **out, char *err, size_t errlen);

/* The Hugging Face name of a tensor given its GGUF name ("blk.3.attn_q.weight" ->
 * "model.layers.3.self_attn.q_proj.weight") in architecture arch's checkpoints (gemma's norms,
 * phi3's fused matrices, qwen3moe's or Mixtral's experts) into out, for messages; "" when there
 * is none. */
void model__hf_name(model_arch arch, const char *gguf_name, char *out, size_t outlen);

/*
 * Shared by both loaders once m->cfg (but n_vocab), m->tensors and m->n_tensors are set: checks
 * every tensor's type is supported, binds tok_embd/output_norm/output and the layers by GGUF
 * names, validating shapes and types, and sets n_vocab, n_params and weight_bytes.
 */
int model__finish(model *m, char *err, size_t errlen);

/* Validates the hyperparameters in m->cfg (ranges, divisibility). label names the source. */
int model__check_config(const model *m, const char *label, char *err, size_t errlen);

#endif
