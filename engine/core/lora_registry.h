/*
 * The engine's loaded LoRA adapters (vLLM's LoRA requests: --lora-modules at start,
 * /v1/load_lora_adapter and /v1/unload_lora_adapter at run time), by name.
 *
 * An adapter is reference counted: a request holds a reference from submit to its end, so an
 * unload takes the name away at once (new requests no longer find it) while the requests using
 * it run to completion; the weights are freed with the last reference. Every function is
 * thread-safe.
 */
#ifndef TANDEM_ENGINE_CORE_LORA_REGISTRY_H
#define TANDEM_ENGINE_CORE_LORA_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/lora.h"
#include "engine/model/model.h"

typedef struct lora_registry lora_registry;
typedef struct lora_ref lora_ref;

/* A registry for adapters of model m (borrowed) of rank max_rank at most. NULL on OOM. */
lora_registry *lora_registry_new(const model *m, int32_t max_rank);
/* Drops the registry's references; adapters still used by requests live on until put. */
void lora_registry_free(lora_registry *r);

/*
 * Loads path (lora.h) as name. 0; -EEXIST when name is taken; -ENOENT when path does not exist;
 * -EINVAL (bad adapter, or a rank above max_rank); -ENOMEM. err gets vLLM's message ("The lora
 * adapter 'x' has already been loaded.", "LoRA rank 32 is greater than max_lora_rank 16.", ...).
 */
int lora_registry_load(lora_registry *r, const char *name, const char *path, char *err,
                       size_t errlen);
/* Removes name. 0 or -ENOENT. */
int lora_registry_unload(lora_registry *r, const char *name);

/* A new reference to the adapter called name, or NULL. */
lora_ref *lora_registry_get(lora_registry *r, const char *name);
/* Drops a reference (NULL is a no-op). */
void lora_ref_put(lora_ref *ref);
const lora_adapter *lora_ref_adapter(const lora_ref *ref);
const char *lora_ref_name(const lora_ref *ref);

/* One loaded adapter, as /v1/models lists it. */
typedef struct lora_info {
    char *name;
    char *path;
    int64_t id; /* vLLM's lora_int_id: 1, 2, ... in load order, never reused */
} lora_info;

/* A snapshot of the loaded adapters in load order: *out (free with lora_info_free) and the
 * count, or -ENOMEM. */
int lora_registry_list(lora_registry *r, lora_info **out, size_t *n);
void lora_info_free(lora_info *info, size_t n);

#endif
