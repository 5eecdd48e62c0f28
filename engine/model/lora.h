/*
 * LoRA adapters: low-rank deltas to a model's attention and feed-forward projections, loaded from
 * llama.cpp's adapter GGUF (convert_lora_to_gguf.py) or from a Hugging Face PEFT directory
 * (adapter_config.json + adapter_model.safetensors), and checked against the base model they
 * will run on.
 *
 * For a projection y = W x the adapter adds scale * B (A x): A has `rank` rows of the
 * projection's input width, B has one row of `rank` elements per output (ggml layout, as
 * model.h: A is {in, rank}, B is {rank, out}). scale is alpha / rank (llama.cpp: alpha 0 means
 * 1; PEFT's use_rslora: alpha / sqrt(rank)).
 *
 * Layouts: a GGUF llama file holds Q/K rows permuted for adjacent-pair RoPE and a Hugging Face
 * one does not (model.h); the adapter's B rows of q and k follow its format, so they are
 * permuted here when the base model's layout differs (a PEFT adapter on a GGUF llama model, a
 * GGUF adapter on an HF llama checkpoint).
 *
 * Tensors are memory-mapped (or owned copies where permuted); an adapter is immutable after
 * lora_load and may be shared by threads.
 */
#ifndef TANDEM_ENGINE_MODEL_LORA_H
#define TANDEM_ENGINE_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"

#define LORA_MAX_RANK 512 /* vLLM's largest --max-lora-rank */

typedef enum lora_target {
    LORA_Q,
    LORA_K,
    LORA_V,
    LORA_O,
    LORA_GATE,
    LORA_UP,
    LORA_DOWN,
    LORA_N_TARGETS
} lora_target;

/* One adapted projection; a.data NULL when the adapter leaves it alone. */
typedef struct lora_weights {
    model_tensor a; /* {in, rank} */
    model_tensor b; /* {rank, out} */
    /* B transposed, [rank][out] elements of bt_type (F16 for an F16 B, else F32): B (A x) as
     * rank axpys over whole output rows, which vectorise, where B's rows of only rank elements
     * would each need a reduction */
    const void *bt;
    tdtype bt_type;
    float scale;
} lora_weights;

typedef struct lora_adapter {
    model_format format; /* GGUF file or PEFT (HF) directory */
    int n_layer;
    int32_t rank;                           /* the largest rank of its projections */
    lora_weights (*layers)[LORA_N_TARGETS]; /* [n_layer] */
    size_t n_adapted;                       /* projections with weights */
    size_t bytes;                           /* bytes of A and B data */
    void *priv;                             /* mapping and owned copies */
} lora_adapter;

/*
 * Loads the adapter at path (a .gguf file or a PEFT directory) for base model m (borrowed: only
 * read during the call). Checks the format keys (general.type "adapter", adapter.type "lora";
 * adapter_config.json's peft_type, bias, fan_in_fan_out, modules_to_save, rank and alpha
 * patterns), the architecture, every tensor's name, type and shape against m, and that every A
 * has its B. NULL on failure with err naming the file and the key, field or tensor.
 */
lora_adapter *lora_load(const model *m, const char *path, char *err, size_t errlen);

/* NULL is a no-op. */
void lora_free(lora_adapter *a);

/* "attn_q", "attn_k", ... (the GGUF names). */
const char *lora_target_name(lora_target t);

/* The projection's input and output widths in m. */
void lora_target_dims(const model *m, lora_target t, int64_t *in, int64_t *out);

#endif
