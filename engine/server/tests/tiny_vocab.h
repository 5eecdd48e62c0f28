/*
 * The eight-token SentencePiece vocabulary the server's tests and fuzz targets tokenize with
 * (▁ a b ▁a ab, scores favouring "ab"): <unk> 0, <s> 1, </s> 2, ▁ 3, a 4, b 5, ▁a 6, ab 7.
 * One copy for every file that needs a real tokenizer without a model file.
 */
#ifndef TANDEM_ENGINE_SERVER_TESTS_TINY_VOCAB_H
#define TANDEM_ENGINE_SERVER_TESTS_TINY_VOCAB_H

#include <stdint.h>

#include "engine/model/model.h"

static const model_str g_tokens[] = {{"<unk>", 5},
                                     {"<s>", 3},
                                     {"</s>", 4},
                                     {"\xe2\x96\x81", 3},
                                     {"a", 1},
                                     {"b", 1},
                                     {"\xe2\x96\x81"
                                      "a",
                                      4},
                                     {"ab", 2}};
static const float g_scores[] = {0, 0, 0, -1, -2, -3, -1.5f, -2.5f};
static const int32_t g_types[] = {2, 3, 3, 1, 1, 1, 1, 1};

/* The GGUF vocabulary of the tokens above (llama model, BOS added, no EOS); add_space_prefix as
 * the GGUF key: 0 off, -1 absent. */
static inline model_gguf_vocab tiny_vocab(int add_space_prefix)
{
    model_gguf_vocab v = {
        .model = "llama",
        .n_tokens = 8,
        .tokens = g_tokens,
        .scores = g_scores,
        .token_types = g_types,
        .bos_id = 1,
        .eos_id = 2,
        .unk_id = 0,
        .pad_id = -1,
        .eot_id = -1,
        .add_bos = 1,
        .add_eos = -1,
        .add_space_prefix = add_space_prefix,
    };
    return v;
}

#endif
