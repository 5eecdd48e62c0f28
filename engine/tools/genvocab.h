/*
 * Tokenizer section of generated test models. Either a small synthetic byte-level BPE vocabulary
 * (GPT-2 byte-to-unicode base tokens, merges learned by BPE over an embedded English text,
 * ChatML special tokens), or a conversion of a real Hugging Face tokenizer.json (+ the
 * tokenizer_config.json next to it) into the GGUF tokenizer keys llama.cpp reads:
 *   - byte-level BPE (no byte_fallback; llama3, qwen3, deepseek_v3): tokenizer.ggml.model "gpt2",
 *     tokens by id (added tokens included, id gaps filled with "[PAD<id>]" unused tokens), token
 *     types (3 control for special added tokens and for added tokens that look special the way
 *     convert_hf_to_gguf.py's does_token_look_special says, e.g. "<|fim_pad|>"; 4 user-defined
 *     for other added tokens; 1 normal),
 *     merges as "a b" strings, and pre named as convert_hf_to_gguf.py names it ("llama-bpe",
 *     "qwen2", "deepseek-v3") from the pre-tokenizer's split regexes.
 *   - SentencePiece-style BPE (byte_fallback with a U+2581 normalizer; llama2, gemma3):
 *     tokenizer.ggml.model "llama" with scores: a token produced by merges scores -(r + 1) where r
 *     is the rank of the first merge producing it, so llama.cpp's highest-score-first bigram
 *     merging applies merges in BPE rank order; single code points, byte tokens and added tokens
 *     score 0; other multi-code-point tokens (unreachable by merges) -1e9. Types: <0xXX> byte
 *     tokens 6, the model's unk token 2, special (or special-looking) added tokens 3, other added
 *     tokens 4 (with U+2581
 *     turned into spaces, as convert_hf_to_gguf.py does), 1 otherwise. add_space_prefix is true
 *     when the normalizer prepends U+2581 (llama2), false otherwise (gemma3).
 *   - Unigram (T5, XLM-R, ALBERT): "t5" with the vocabulary's scores (ids as in model.vocab),
 *     types (model.unk_id 2, <0xXX> with byte_fallback 6, special added tokens 3, other added
 *     tokens 4, 1 otherwise), the Precompiled normalizer's charsmap (base64-decoded), and
 *     add_space_prefix / remove_extra_whitespaces as the tokenizer.json implies them (Metaspace
 *     prepending; WhitespaceSplit or a Replace of " {2,}"). add_eos when the post-processor's
 *     template ends with the eos token.
 *   - WordPiece (BERT): "bert" with convert_hf_to_gguf.py's phantom-space tokens (control
 *     tokens as they are, "##x" → "x", any other x → "▁x"), the separator (BertProcessing's sep
 *     or the template's last special token) added after the text, and lowercase/strip_accents
 *     from the BertNormalizer.
 * bos/eos/pad ids come from tokenizer_config.json; without a bos_token, bos is the special token
 * the post-processor template starts with, else pad (real Qwen GGUFs carry bos =
 * <|endoftext|> = pad), else eos. add_bos_token comes from the config, else from whether the
 * post-processor template starts with the bos token.
 *
 * Ownership: a genvocab owns every string it points to; genvocab_free releases them.
 */
#ifndef TANDEM_ENGINE_TOOLS_GENVOCAB_H
#define TANDEM_ENGINE_TOOLS_GENVOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF token types (llama.cpp's llama_token_type). */
enum {
    GENV_NORMAL = 1,
    GENV_UNKNOWN = 2,
    GENV_CONTROL = 3,
    GENV_USER_DEFINED = 4,
    GENV_UNUSED = 5,
    GENV_BYTE = 6,
};

/* Upper bound on the vocabulary size accepted from a tokenizer or --vocab. */
#define GENV_MAX_TOKENS (1u << 21)
/* Unused ids a vocabulary may have beyond one per token (engine/tokenizer: TOK_MAX_GAP). */
#define GENV_MAX_GAP 65536

typedef struct genvocab {
    char model[16];             /* GGUF tokenizer.ggml.model: "gpt2", "llama", "t5" or "bert" */
    char pre[32];               /* tokenizer.ggml.pre */
    size_t n_tokens;            /* tokens, lens, types (and scores) have n_tokens entries */
    char **tokens;              /* token text by id (may contain NUL bytes: use lens) */
    uint32_t *lens;             /* byte length of each token */
    int32_t *types;             /* GENV_* */
    float *scores;              /* per token, only for "llama" and "t5"; NULL otherwise */
    size_t n_merges;            /* merges entries */
    char **merges;              /* "a b" strings (gpt2 only; NUL-terminated) */
    int64_t bos, eos, pad, unk; /* token ids, -1 when absent */
    bool add_bos, add_eos;
    bool add_space_prefix; /* llama and t5 models only */
    /* t5 / bert only, for the GGUF keys tokenizer.ggml.precompiled_charsmap (u8 array),
     * remove_extra_whitespaces, seperator_token_id + add_sep_token, normalizer.lowercase /
     * normalizer.strip_accents (tandem-genmodel writes them) */
    uint8_t *charsmap; /* NULL when the tokenizer has no Precompiled normalizer */
    size_t charsmap_len;
    bool remove_extra_ws;
    int64_t sep; /* -1 when absent */
    bool add_sep;
    int lowercase, strip_accents; /* 0/1, -1 when absent */
    char *chat_template;          /* NULL when absent */
    char *tokenizer_json;         /* the HF tokenizer.json text (copied or synthesized) */
    size_t tokenizer_json_len;
    char *tokenizer_config_json; /* the HF tokenizer_config.json text (copied or synthesized) */
    size_t tokenizer_config_json_len;
} genvocab;

/*
 * Builds the synthetic vocabulary of exactly vocab_size tokens: ids 0..255 the byte tokens,
 * then learned merges, then "[PAD<id>]" unused tokens when the text yields too few merges, then
 * <|begin_of_text|> (bos), <|end_of_text|> (pad), <|im_start|>, <|im_end|> (eos) as the last
 * four ids. pre is "llama-bpe" (the llama3 split regex; the synthetic tokenizer.json carries the
 * same regex and ignore_merges, so HF-style and llama.cpp tokenization agree). ctx is written
 * as model_max_length. Returns 0, -EINVAL (vocab_size < 260 or > GENV_MAX_TOKENS, message in
 * err) or -ENOMEM.
 */
int genvocab_synthetic(genvocab *v, int64_t vocab_size, int64_t ctx, char *err, size_t errlen);

/*
 * Converts a Hugging Face tokenizer: path is a tokenizer.json file or a folder holding one;
 * tokenizer_config.json is read from the same folder when present. pre_override (may be NULL)
 * replaces the detected pre-tokenizer name. When min_vocab exceeds the tokenizer's size, the
 * vocabulary is padded with "[PAD<id>]" unused tokens. Returns 0, or -EINVAL / -ENOENT /
 * -ENOMEM with a message naming the file and field in err.
 */
int genvocab_from_hf(genvocab *v, const char *path, const char *pre_override, int64_t min_vocab,
                     char *err, size_t errlen);

/* Like genvocab_from_hf on documents in memory: tok_json (tok_len bytes) is the tokenizer.json
 * text, cfg_json (cfg_len bytes; NULL when there is none) the tokenizer_config.json text. Both
 * are copied; messages name "tokenizer.json" / "tokenizer_config.json" and the field. */
int genvocab_from_hf_json(genvocab *v, const char *tok_json, size_t tok_len, const char *cfg_json,
                          size_t cfg_len, const char *pre_override, int64_t min_vocab, char *err,
                          size_t errlen);

/* Frees everything v owns and zeroes it. NULL or a zeroed struct is a no-op. */
void genvocab_free(genvocab *v);

#endif
