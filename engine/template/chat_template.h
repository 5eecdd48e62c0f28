/*
 * Chat templates: OpenAI `messages` → the prompt text a model was trained on, by rendering the
 * model's Jinja chat template (jinja.h) the way Hugging Face's apply_chat_template does.
 *
 * Where the template comes from, in order (what the server does):
 *   1. `--chat-template VALUE` (vLLM's flag): VALUE is a path to a file whose content is the
 *      template; if no such file exists and VALUE contains "{{" or "{%", VALUE is the template
 *      itself; otherwise VALUE may name a built-in ("chatml", "llama2"). See
 *      chat_template_resolve_arg.
 *   2. The model's own: tokenizer_config.json `chat_template` (a string, or a list of
 *      {name, template} from which "default" is taken; chat_template_from_config) or GGUF
 *      `tokenizer.chat_template`.
 *   3. The built-in "chatml" fallback (template_src NULL).
 *
 * Render context: `messages` (normalised, see below), `add_generation_prompt`, `bos_token`,
 * `eos_token`, and every member of extra_vars (e.g. `tools`, `documents`, `date_string`); the
 * members of an object member named `chat_template_kwargs` are spread into the context too, as
 * vLLM passes them to the template (e.g. enable_thinking).
 *
 * Message normalisation (as vLLM does for templates that expect string content): each message
 * must be an object with a string `role`; a `content` given as an array of parts
 * [{type:"text", text}] becomes the texts joined with "\n"; parts of another type are an error
 * (this engine is text-only); string, null or absent content is passed through.
 */
#ifndef TANDEM_ENGINE_TEMPLATE_CHAT_TEMPLATE_H
#define TANDEM_ENGINE_TEMPLATE_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "engine/template/jinja.h"

/* A compiled chat template with its special tokens. Immutable: may be shared between threads. */
struct chat_template;

/*
 * Compiles template_src (NULL → the built-in "chatml"). bos_token / eos_token (NULL → "") are
 * copied. Returns NULL with a message ("chat template: line L column C: ...") in err.
 */
struct chat_template *chat_template_new(const char *template_src, const char *bos_token,
                                        const char *eos_token, char *err, size_t errlen);

/*
 * Renders messages (a json array, borrowed) with ct. extra_vars may be NULL. On success returns
 * 0 and *out is a malloc'd NUL-terminated prompt of *len bytes (len may be NULL). Errors:
 * -EINVAL (bad messages, "messages[2].content[0]: ..."; or a render error),
 * JINJA_ERAISED (the template's raise_exception; err holds its message), -E2BIG, -ENOMEM.
 */
int chat_template_apply(const struct chat_template *ct, struct json_object *messages,
                        bool add_generation_prompt, struct json_object *extra_vars, char **out,
                        size_t *len, char *err, size_t errlen);

/* Frees ct. NULL is allowed. */
void chat_template_free(struct chat_template *ct);

/* One-shot chat_template_new + chat_template_apply + chat_template_free. */
int chat_template_render(const char *template_src, struct json_object *messages,
                         bool add_generation_prompt, const char *bos_token, const char *eos_token,
                         struct json_object *extra_vars, char **out, size_t *len, char *err,
                         size_t errlen);

/* The source of a built-in template ("chatml" or "llama2"; static storage), or NULL. */
const char *chat_template_builtin(const char *name);

/*
 * Resolves a --chat-template value (see above) into *src (malloc'd, caller frees): a file's
 * content (at most JINJA_MAX_SOURCE bytes), the value itself when it is inline template text, or
 * a built-in's source. -ENOENT with a message when it is none of those; -E2BIG for a file too
 * large; -EIO when the file cannot be read; -ENOMEM.
 */
int chat_template_resolve_arg(const char *value, char **src, char *err, size_t errlen);

/*
 * The chat template of a parsed tokenizer_config.json (borrowed string, lives as long as cfg):
 * `chat_template` when it is a string; when it is a list of {name, template}, the entry named
 * name (NULL → "default"). -ENOENT when there is none (the caller falls back), -EINVAL when the
 * field has the wrong shape (message names it).
 */
int chat_template_from_config(struct json_object *cfg, const char *name, const char **src,
                              char *err, size_t errlen);

/*
 * A special token of tokenizer_config.json (field "bos_token", "eos_token", ...), given either
 * as a string or as an AddedToken object {"content": "..."}. *out is borrowed; NULL (and 0
 * returned) when the field is absent or null. -EINVAL for another shape.
 */
int chat_template_config_token(struct json_object *cfg, const char *field, const char **out,
                               char *err, size_t errlen);

#endif /* TANDEM_ENGINE_TEMPLATE_CHAT_TEMPLATE_H */
