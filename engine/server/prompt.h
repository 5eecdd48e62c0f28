/*
 * A parsed OpenAI request → the prompt token ids the engine runs: a completion's token ids as
 * given, its text tokenized, or a chat's messages rendered through the chat template (a
 * request's own chat_template overriding the server's) and tokenized, with vLLM's
 * add_generation_prompt / continue_final_message rules and add_special_tokens deciding BOS.
 *
 * Shared by the engine's server (server.c) and by anyone who must reproduce its prompts exactly
 * (the EPP's block keys, operator/epp/keys), so both run the very same code.
 */
#ifndef TANDEM_ENGINE_SERVER_PROMPT_H
#define TANDEM_ENGINE_SERVER_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/server/openai.h"
#include "engine/template/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

/* What a prompt is built with; every pointer borrowed. */
struct prompt_ctx {
    const tokenizer *tok;
    const struct chat_template *ct; /* the server's compiled template */
    const char *bos_token;          /* for a request's own chat_template; NULL → "" */
    const char *eos_token;
};

/* Renders o's messages into *out (malloc'd, NUL-terminated, *out_len bytes). The template sees
 * what vLLM hands it: the messages (an assistant message's reasoning as "reasoning" and
 * "reasoning_content"), chat_template_kwargs, and over them documents, reasoning_effort (with
 * enable_thinking = effort != "none" unless chat_template_kwargs sets it) and tools. 0, or
 * -EINVAL / -ENOMEM with err set (400 naming "messages", 500). */
int prompt_render_chat(const struct prompt_ctx *pc, const struct openai_request *o, char **out,
                       size_t *out_len, struct openai_error *err);

/* The prompt token ids of o into *ids (malloc'd) and *n_ids; *text_out receives the prompt text
 * (malloc'd; NULL when o gave token ids) and *text_len its length. 0 or a negative errno with err
 * set (400 naming "prompt"/"messages" for what cannot be rendered or tokenized). */
int prompt_build(const struct prompt_ctx *pc, const struct openai_request *o, int32_t **ids,
                 size_t *n_ids, char **text_out, size_t *text_len, struct openai_error *err);

/* o's bad_words as token sequences, as vLLM's SamplingParams.update_from_tokenizer makes them:
 * each word without its leading whitespace, tokenized without special tokens, then again after
 * one blank, that second form kept only when it starts with another token and has as many (a
 * word of its own). Fills o->bad_word_ids / bad_word_seq_lens and points o->sampling at them.
 * 0 (nothing to do without bad_words), or -EINVAL with err a 400 naming "bad_words" (a word
 * that tokenizes to nothing, more than OPENAI_MAX_BAD_WORDS sequences or
 * OPENAI_MAX_BAD_WORD_TOKENS tokens), -ENOMEM (500). */
int prompt_bad_words(const struct prompt_ctx *pc, struct openai_request *o,
                     struct openai_error *err);

#endif
