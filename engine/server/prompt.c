/*
 * Prompt building (see prompt.h), moved out of server.c unchanged so the EPP runs the same code.
 */
#include "engine/server/prompt.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"

/* An assistant message's tool_calls as templates read them: a copy whose function.arguments are
 * parsed from their JSON text into values (vLLM's chat_utils does the same: templates such as
 * Llama 3's and Qwen's iterate over the arguments). Arguments that are not JSON stay text. */
static struct json_object *template_tool_calls(struct json_object *calls)
{
    struct json_object *copy = NULL;
    if (json_object_deep_copy(calls, &copy, NULL) != 0) {
        return NULL;
    }
    for (size_t i = 0; i < json_object_array_length(copy); i++) {
        struct json_object *fn, *args, *parsed = NULL;
        struct json_object *c = json_object_array_get_idx(copy, i);
        if (!json_object_object_get_ex(c, "function", &fn) ||
            !json_object_object_get_ex(fn, "arguments", &args) ||
            !json_object_is_type(args, json_type_string)) {
            continue;
        }
        char perr[64];
        if (json_parse_one(json_object_get_string(args), (size_t)json_object_get_string_len(args),
                           &parsed, perr, sizeof perr) == 0 &&
            parsed) {
            json_object_object_add(fn, "arguments", parsed);
        }
    }
    return copy;
}

/* The template variables of a request that sets tools, documents or reasoning_effort, as vLLM's
 * build_chat_params merges them: chat_template_kwargs, then documents and reasoning_effort over
 * them, enable_thinking = reasoning_effort != "none" unless chat_template_kwargs sets it, and
 * the tools (vLLM passes them whatever tool_choice is). NULL when out of memory. */
static struct json_object *chat_kwargs(const struct openai_request *o)
{
    struct json_object *merged = json_object_new_object();
    if (!merged) {
        return NULL;
    }
    int user_thinking = 0;
    if (o->chat_template_kwargs) {
        json_object_object_foreach(o->chat_template_kwargs, k, v)
        {
            json_object_object_add(merged, k, json_object_get(v));
            user_thinking |= strcmp(k, "enable_thinking") == 0;
        }
    }
    if (o->documents) {
        json_object_object_add(merged, "documents", json_object_get(o->documents));
    }
    if (o->reasoning_effort) {
        json_object_object_add(merged, "reasoning_effort",
                               json_object_new_string(o->reasoning_effort));
        if (!user_thinking) {
            json_object_object_add(
                merged, "enable_thinking",
                json_object_new_boolean(strcmp(o->reasoning_effort, "none") != 0));
        }
    }
    if (o->tools) {
        json_object_object_add(merged, "tools", json_object_get(o->tools));
    }
    return merged;
}

/* Renders the chat messages through the template into a prompt string (malloc'd). */
int prompt_render_chat(const struct prompt_ctx *pc, const struct openai_request *o, char **out,
                       size_t *out_len, struct openai_error *err)
{
    struct json_object *msgs = json_object_new_array();
    if (!msgs) {
        openai_error_set(err, 500, NULL, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < o->n_messages; i++) {
        const struct openai_message *m = &o->messages[i];
        struct json_object *jm = json_object_new_object();
        json_object_object_add(jm, "role", json_object_new_string(m->role));
        json_object_object_add(
            jm, "content",
            m->content ? json_object_new_string_len(m->content, (int)m->content_len) : NULL);
        if (m->name) {
            json_object_object_add(jm, "name", json_object_new_string(m->name));
        }
        if (m->tool_call_id) {
            json_object_object_add(jm, "tool_call_id", json_object_new_string(m->tool_call_id));
        }
        if (m->tool_calls) {
            json_object_object_add(jm, "tool_calls", template_tool_calls(m->tool_calls));
        }
        if (m->reasoning && strcmp(m->role, "assistant") == 0) {
            /* vLLM's chat_utils: an assistant message's reasoning, under both names */
            json_object_object_add(jm, "reasoning", json_object_new_string(m->reasoning));
            json_object_object_add(jm, "reasoning_content", json_object_new_string(m->reasoning));
        }
        json_object_array_add(msgs, jm);
    }
    struct json_object *kwargs = o->chat_template_kwargs;
    struct json_object *merged = NULL;
    if (o->tools || o->documents || o->reasoning_effort) {
        merged = chat_kwargs(o);
        if (!merged) {
            json_object_put(msgs);
            openai_error_set(err, 500, NULL, "out of memory");
            return -ENOMEM;
        }
        kwargs = merged;
    }
    char terr[512] = "";
    bool add_gen = o->continue_final_message ? false : o->add_generation_prompt != 0;
    int rc =
        o->chat_template
            ? chat_template_render(o->chat_template, msgs, add_gen, pc->bos_token, pc->eos_token,
                                   kwargs, out, out_len, terr, sizeof terr)
            : chat_template_apply(pc->ct, msgs, add_gen, kwargs, out, out_len, terr, sizeof terr);
    json_object_put(msgs);
    json_object_put(merged);
    if (rc != 0) {
        openai_error_set(err, 400, "messages", "cannot apply the chat template: %s", terr);
        return -EINVAL;
    }
    if (o->continue_final_message && o->n_messages > 0) {
        /* end the prompt right after the final message's content (vLLM) */
        const struct openai_message *last = &o->messages[o->n_messages - 1];
        if (last->content && last->content_len > 0) {
            const char *p = NULL;
            for (const char *q = *out; (q = memmem(q, *out_len - (size_t)(q - *out), last->content,
                                                   last->content_len)) != NULL;
                 q++) {
                p = q;
            }
            if (p) {
                *out_len = (size_t)(p - *out) + last->content_len;
                (*out)[*out_len] = '\0';
            }
        }
    }
    return 0;
}

/* Tokenizes the request's prompt (text, tokens or rendered chat). *ids malloc'd. */
int prompt_build(const struct prompt_ctx *pc, const struct openai_request *o, int32_t **ids,
                 size_t *n_ids, char **text_out, size_t *text_len, struct openai_error *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc;
    *text_out = NULL;
    if (o->kind == OPENAI_CHAT) {
        rc = prompt_render_chat(pc, o, &text, &len, err);
        if (rc != 0) {
            return rc;
        }
    } else if (o->prompt_tokens) {
        *ids = malloc((o->n_prompt_tokens ? o->n_prompt_tokens : 1) * sizeof **ids);
        if (!*ids) {
            openai_error_set(err, 500, NULL, "out of memory");
            return -ENOMEM;
        }
        memcpy(*ids, o->prompt_tokens, o->n_prompt_tokens * sizeof **ids);
        *n_ids = o->n_prompt_tokens;
        return 0;
    } else {
        text = malloc(o->prompt_text_len + 1);
        if (!text) {
            openai_error_set(err, 500, NULL, "out of memory");
            return -ENOMEM;
        }
        memcpy(text, o->prompt_text, o->prompt_text_len);
        text[o->prompt_text_len] = '\0';
        len = o->prompt_text_len;
    }
    rc = tokenizer_encode(pc->tok, text, len, o->add_special_tokens, true, ids, n_ids);
    if (rc != 0) {
        free(text);
        openai_error_set(err, 400, o->kind == OPENAI_CHAT ? "messages" : "prompt",
                         "cannot tokenize the prompt (%s)", tandem_strerror(rc));
        return rc;
    }
    *text_out = text;
    *text_len = len;
    return 0;
}

/* Bytes of whitespace at the start of s (Python's str.isspace characters, as str.lstrip). */
static size_t leading_space(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        uint32_t cp = p[i];
        size_t n = 1;
        if (cp >= 0xc0 && cp < 0xe0 && i + 1 < len) {
            cp = ((cp & 0x1f) << 6) | (p[i + 1] & 0x3f);
            n = 2;
        } else if (cp >= 0xe0 && cp < 0xf0 && i + 2 < len) {
            cp = ((cp & 0x0f) << 12) | ((uint32_t)(p[i + 1] & 0x3f) << 6) | (p[i + 2] & 0x3f);
            n = 3;
        }
        const bool space = (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 ||
                           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
                           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
                           cp == 0x3000;
        if (!space) {
            break;
        }
        i += n;
    }
    return i;
}

int prompt_bad_words(const struct prompt_ctx *pc, struct openai_request *o,
                     struct openai_error *err)
{
    size_t n_seqs = 0, total = 0, cap_ids = 0;
    int32_t *all = NULL, *lens = NULL;
    char *text = NULL;
    int rc = 0;
    if (o->n_bad_words == 0) {
        return 0;
    }
    lens = malloc(2 * o->n_bad_words * sizeof(*lens));
    if (!lens) {
        goto err_nomem;
    }
    for (size_t w = 0; w < o->n_bad_words; w++) {
        const size_t skip = leading_space(o->bad_words[w], o->bad_word_lens[w]);
        const size_t wl = o->bad_word_lens[w] - skip;
        free(text);
        text = malloc(wl + 2);
        if (!text) {
            goto err_nomem;
        }
        text[0] = ' ';
        memcpy(text + 1, o->bad_words[w] + skip, wl);
        text[wl + 1] = '\0';
        for (int spaced = 0; spaced <= 1; spaced++) {
            int32_t *ids = NULL;
            size_t n = 0;
            rc = tokenizer_encode(pc->tok, spaced ? text : text + 1, wl + (size_t)spaced, false,
                                  true, &ids, &n);
            if (rc == -ENOMEM) {
                goto err_nomem;
            }
            if (rc != 0) {
                openai_error_set(err, 400, "bad_words", "cannot tokenize bad_words[%zu] (%s)", w,
                                 tandem_strerror(rc));
                goto err_free;
            }
            const int32_t *prev = n_seqs ? all + total - (size_t)lens[n_seqs - 1] : NULL;
            const bool keep =
                n > 0 && (!spaced || (ids[0] != prev[0] && n == (size_t)lens[n_seqs - 1]));
            if (n == 0 && !spaced) {
                free(ids);
                openai_error_set(err, 400, "bad_words",
                                 "bad_words entries must tokenize to at least one token.");
                rc = -EINVAL;
                goto err_free;
            }
            if (keep && n_seqs == OPENAI_MAX_BAD_WORDS) { /* vLLM counts up to max + 1 */
                free(ids);
                openai_error_set(err, 400, "bad_words",
                                 "Too many bad words after tokenization: %d. The max number is "
                                 "%d.",
                                 OPENAI_MAX_BAD_WORDS + 1, OPENAI_MAX_BAD_WORDS);
                rc = -EINVAL;
                goto err_free;
            }
            int32_t *grown = keep ? tandem_grow(all, &cap_ids, total + n, sizeof(*all), 64) : all;
            if (!grown) {
                free(ids);
                goto err_nomem;
            }
            all = grown;
            if (keep) {
                memcpy(all + total, ids, n * sizeof(*all));
                total += n;
                lens[n_seqs++] = (int32_t)n;
            }
            free(ids);
        }
    }
    if (total > OPENAI_MAX_BAD_WORD_TOKENS) {
        openai_error_set(err, 400, "bad_words",
                         "Too many total bad word tokens: %zu. The max is %d.", total,
                         OPENAI_MAX_BAD_WORD_TOKENS);
        rc = -EINVAL;
        goto err_free;
    }
    free(text);
    free(o->bad_word_ids);
    free(o->bad_word_seq_lens);
    o->bad_word_ids = all;
    o->bad_word_seq_lens = lens;
    o->sampling.bad_words = all;
    o->sampling.bad_words_lens = lens;
    o->sampling.n_bad_words = n_seqs;
    return 0;
err_nomem:
    openai_error_set(err, 500, NULL, "out of memory");
    rc = -ENOMEM;
err_free:
    free(text);
    free(all);
    free(lens);
    return rc;
}
