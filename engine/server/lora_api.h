/*
 * vLLM's LoRA adapter management surface over the engine's registry (lora_registry.h):
 * --lora-modules entries, and the bodies of POST /v1/load_lora_adapter and
 * /v1/unload_lora_adapter (served when VLLM_ALLOW_RUNTIME_LORA_UPDATING is true), with vLLM's
 * messages (vllm/entrypoints/openai/serving_models.py).
 */
#ifndef TANDEM_ENGINE_SERVER_LORA_API_H
#define TANDEM_ENGINE_SERVER_LORA_API_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/core/lora_registry.h"
#include "engine/server/openai.h"

/* One --lora-modules entry: "name=path" or a JSON object {"name", "path", "base_model_name"}.
 * 0 with *name and *path malloc'd, or -EINVAL / -ENOMEM with err. */
int lora_module_parse(const char *spec, char **name, char **path, char *err, size_t errlen);

/* Whether VLLM_ALLOW_RUNTIME_LORA_UPDATING is "1" or "true" (any case, spaces trimmed). */
bool lora_runtime_updating_allowed(void);

/* The load / unload request body: 0 with msg set to vLLM's success text ("Success: LoRA adapter
 * 'x' added successfully."), or -1 with err (400 bad body or adapter, 404 path or adapter not
 * found). */
int lora_api_load(lora_registry *r, const char *body, size_t len, char *msg, size_t msglen,
                  struct openai_error *err);
int lora_api_unload(lora_registry *r, const char *body, size_t len, char *msg, size_t msglen,
                    struct openai_error *err);

#endif
