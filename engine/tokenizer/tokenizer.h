/*
 * Tokenizers: text <-> token ids for the models the engine serves.
 *
 * Four families, loaded from two sources:
 *   - byte-level BPE (GPT-2 style: GGUF tokenizer.ggml.model "gpt2", or a Hugging Face
 *     tokenizer.json whose model is "BPE" with a ByteLevel pre-tokenizer) and character-level BPE
 *     with byte fallback (tokenizer.json "BPE" without ByteLevel, e.g. Llama 2, Gemma 3);
 *   - SentencePiece-style score-driven merges (GGUF "llama"), following llama.cpp's
 *     llm_tokenizer_spm: spaces become U+2581, a space is prefixed to each text fragment that
 *     starts the input or follows a special token (add_space_prefix), unknown characters fall back
 *     to <0xXX> byte tokens;
 *   - Unigram (GGUF "t5", tokenizer.json "Unigram": T5, XLM-R, ALBERT) and WordPiece (GGUF "bert",
 *     tokenizer.json "WordPiece": BERT), following llama.cpp's UGM/WPM for GGUF files and HF
 *     tokenizers for tokenizer.json (see tok_unigram.c).
 *
 * Encoding splits added/special tokens out first (longest match, leftmost; their lstrip/rstrip
 * flags honoured), then normalizes (tokenizer.json normalizers: NFC, Prepend, Replace, Sequence),
 * pre-tokenizes (PCRE2 regex splits, in UTF + UCP mode, JIT-compiled when available; GGUF "gpt2"
 * uses llama.cpp's preset regexes chosen by tokenizer.ggml.pre) and runs the model on each piece.
 * Input that is not valid UTF-8 is accepted: byte-level BPE encodes the bytes as they are, byte
 * fallback/SPM emit <0xXX> tokens for them; regexes see such bytes as non-matching (each invalid
 * byte becomes its own piece).
 *
 * Decoding concatenates each token's piece (its bytes: byte-level symbols mapped back to bytes,
 * U+2581 back to spaces, <0xXX> to the byte, added tokens as their text) and applies the leading
 * space rule of the source (tokenizer.json Strip/Metaspace decoders; llama.cpp's SPM rule: the
 * first token's leading space is removed unless the list starts with a skipped BOS). Output is
 * always valid UTF-8: each byte of an invalid or truncated sequence becomes U+FFFD.
 *
 * Thread-safety: a tokenizer is immutable after loading; any number of threads may encode and
 * decode with it at once. A detok belongs to one stream (one thread at a time).
 * Errors: functions return 0 or -errno (-EINVAL bad input, -ENOMEM, -E2BIG over a limit, -ENOENT
 * missing file); loaders write a message naming the file/field into err (errlen bytes).
 */
#ifndef TANDEM_ENGINE_TOKENIZER_H
#define TANDEM_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"

/* Hard caps on inputs: text longer than this is refused with -E2BIG by tokenizer_encode. */
#define TOKENIZER_MAX_TEXT_BYTES ((size_t)64 << 20)
/* Vocabulary size cap for loaders. */
#define TOKENIZER_MAX_VOCAB 4000000
/* Largest tokenizer.json accepted by tokenizer_load_hf. */
#define TOKENIZER_MAX_JSON_BYTES ((size_t)512 << 20)

typedef struct tokenizer tokenizer;

typedef enum tokenizer_kind {
    TOKENIZER_BPE,       /* byte-level or char-level BPE (merges by rank) */
    TOKENIZER_SPM,       /* SentencePiece-style (merges by score) */
    TOKENIZER_UNIGRAM,   /* SentencePiece unigram (Viterbi by log probability) */
    TOKENIZER_WORDPIECE, /* BERT WordPiece (greedy longest match) */
} tokenizer_kind;

/*
 * Loads a Hugging Face tokenizer from the path of tokenizer.json (or a directory holding it) and,
 * optionally, tokenizer_config.json (NULL: none; for a directory, its tokenizer_config.json is
 * used when present). tokenizer_config supplies bos_token/eos_token (EOG set), add_bos_token/
 * add_eos_token (applied over the post_processor for Llama/Gemma tokenizer classes, as
 * transformers' LlamaTokenizerFast does) and additional_special_tokens.
 * Supported: models BPE, Unigram (vocab [[piece, score], ...], unk_id, byte_fallback) and
 * WordPiece (vocab, unk_token, continuing_subword_prefix, max_input_chars_per_word); normalizers
 * Sequence/NFC/NFD/NFKC/NFKD/Lowercase/StripAccents/Strip/Prepend/Replace/Precompiled/
 * BertNormalizer; pre-tokenizers Sequence/Split/ByteLevel (last in a sequence)/Digits/Metaspace/
 * WhitespaceSplit/Whitespace/BertPreTokenizer; post-processors TemplateProcessing/BertProcessing/
 * RobertaProcessing/ByteLevel/Sequence; decoders Sequence/ByteLevel/Replace/ByteFallback/Fuse/
 * Strip/Metaspace/WordPiece. Anything else is an error naming the field. On success *out owns
 * the tokenizer (tokenizer_free).
 */
int tokenizer_load_hf(const char *tokenizer_json, const char *tokenizer_config_json,
                      tokenizer **out, char *err, size_t errlen);

/* Parses tokenizer.json / tokenizer_config.json contents already in memory (config may be NULL).
 * `what` names the source in messages. Same contract as tokenizer_load_hf. */
int tokenizer_load_hf_mem(const char *json, size_t len, const char *config_json, size_t config_len,
                          const char *what, tokenizer **out, char *err, size_t errlen);

/*
 * Builds a tokenizer from a GGUF vocabulary ("llama" → SPM, "gpt2" → byte-level BPE with the
 * pre-tokenizer preset named by v->pre: "llama-bpe"/"llama3"/"llama-v3", "qwen2", "deepseek-v3",
 * "gpt-2"/"gpt2", "default" or NULL; "t5" → Unigram as llama.cpp's UGM; "bert" → WordPiece as
 * llama.cpp's WPM). Copies everything it needs: v may be freed afterwards. add_bos/add_eos
 * default per llama.cpp (SPM: BOS on; gpt2: BOS on for llama3 presets only; t5: EOS on; bert:
 * BOS ([CLS]) and SEP on). Same as tokenizer_load_gguf_ext(v, NULL, ...).
 */
int tokenizer_load_gguf(const model_gguf_vocab *v, tokenizer **out, char *err, size_t errlen);

/* GGUF tokenizer keys that only "t5" and "bert" vocabularies use. Integers are -1 when absent. */
typedef struct tokenizer_gguf_extra {
    const void *precompiled_charsmap; /* tokenizer.ggml.precompiled_charsmap (u8/i8 array) */
    size_t charsmap_len;              /* its bytes; 0 when absent */
    int remove_extra_whitespaces;     /* tokenizer.ggml.remove_extra_whitespaces */
    int add_sep;                      /* tokenizer.ggml.add_sep_token */
    int32_t sep_id;                   /* tokenizer.ggml.seperator_token_id (sic) */
    int lowercase;                    /* tokenizer.ggml.normalizer.lowercase (bert) */
    int strip_accents;                /* tokenizer.ggml.normalizer.strip_accents (bert) */
} tokenizer_gguf_extra;

/* Sets every field of x to "absent". */
void tokenizer_gguf_extra_init(tokenizer_gguf_extra *x);

/* tokenizer_load_gguf with the extra keys (x may be NULL: all absent). A "t5" vocabulary needs
 * an unknown token (tokenizer.ggml.unknown_token_id, default 2 as in llama.cpp); its charsmap is
 * checked (header, sizes, NUL-terminated UTF-8 strings) and copied. A "bert" one needs an
 * unknown token (default 100) and, with add_sep, a separator (default 102). */
int tokenizer_load_gguf_ext(const model_gguf_vocab *v, const tokenizer_gguf_extra *x,
                            tokenizer **out, char *err, size_t errlen);

/* tokenizer_load_gguf(&m->vocab) for a GGUF model, tokenizer_load_hf(m->hf_tokenizer_json,
 * m->hf_tokenizer_config) for a Hugging Face one. */
int tokenizer_from_model(const model *m, tokenizer **out, char *err, size_t errlen);

/* Frees the tokenizer. NULL is a no-op. */
void tokenizer_free(tokenizer *t);

/*
 * Encodes len bytes of text (need not be NUL-terminated nor valid UTF-8). add_special: add BOS/EOS
 * as the tokenizer's rules say. parse_special: special-token text (e.g. "<|im_start|>") becomes its
 * id; when false only non-special added tokens are split out and special text is tokenized as
 * ordinary text. On success *ids is malloc'd (caller frees; non-NULL even for zero ids) and
 * *n_ids its count. -E2BIG when len > TOKENIZER_MAX_TEXT_BYTES.
 */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids, size_t *n_ids);

/*
 * Decodes n ids into *text (malloc'd, NUL-terminated, valid UTF-8; caller frees) and *len.
 * skip_special: special tokens (BOS, EOS, control tokens) produce no text. -EINVAL when an id is
 * out of range.
 */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                     char **text, size_t *len);

tokenizer_kind tokenizer_get_kind(const tokenizer *t);
int32_t tokenizer_n_vocab(const tokenizer *t); /* ids are 0 .. n_vocab-1 */
int32_t tokenizer_bos(const tokenizer *t);     /* -1 when none */
int32_t tokenizer_eos(const tokenizer *t);     /* -1 when none */
/* Token texts of BOS/EOS (as in the vocabulary, e.g. "<s>"), or NULL. Valid while t lives. */
const char *tokenizer_bos_text(const tokenizer *t);
const char *tokenizer_eos_text(const tokenizer *t);
/* Whether encode with add_special adds BOS / EOS. */
bool tokenizer_adds_bos(const tokenizer *t);
bool tokenizer_adds_eos(const tokenizer *t);
/* End-of-generation: EOS, GGUF eot_id, tokenizer_config eos_token, and tokens such as
 * <|eot_id|>, <|im_end|>, <end_of_turn>, <|end_of_text|>, <|endoftext|> when they are special. */
bool tokenizer_is_eog(const tokenizer *t, int32_t id);
/* Special (control) token: skipped by decode with skip_special. False for out-of-range ids. */
bool tokenizer_is_special(const tokenizer *t, int32_t id);
/* Id of the token whose vocabulary text is exactly text[0..len), or -1. */
int32_t tokenizer_token_id(const tokenizer *t, const char *text, size_t len);
/* The bytes token id decodes to on its own (no leading-space rule; may be a partial UTF-8
 * sequence), for logprobs. NULL for an out-of-range id. Valid while t lives. */
const char *tokenizer_piece(const tokenizer *t, int32_t id, size_t *len);

/* Incremental detokenizer for streaming. The concatenation of all deltas returned by detok_push
 * and detok_flush equals tokenizer_decode of all pushed ids with the same skip_special. */
typedef struct detok {
    const tokenizer *tok;
    bool skip_special;
    size_t n_pushed;        /* ids pushed so far */
    bool first_skipped_bos; /* first id was a skipped BOS (SPM leading-space rule) */
    bool stripping;         /* still inside the leading-space strip window */
    size_t strip_left;      /* spaces still to strip at the start (HF Strip decoder) */
    unsigned char pend[8];  /* bytes of an incomplete UTF-8 sequence held back */
    size_t n_pend;
} detok;

void detok_init(detok *d, const tokenizer *t, bool skip_special);

/* Like detok_init for ids that continue earlier text (e.g. generated tokens after a prompt): no
 * leading-space rule applies, so "▁Paris" streams as " Paris". Deltas then equal the suffix that
 * decoding prompt+generated ids adds after the prompt's text. */
void detok_init_continuation(detok *d, const tokenizer *t, bool skip_special);

/* Feeds one id. *delta (malloc'd, NUL-terminated, caller frees; may be empty) receives the new
 * complete text; never ends inside a UTF-8 sequence. -EINVAL for an out-of-range id. */
int detok_push(detok *d, int32_t id, char **delta, size_t *len);

/* Ends the stream: held-back bytes of an unfinished sequence come out as U+FFFD each. */
int detok_flush(detok *d, char **delta, size_t *len);

/* Releases nothing today (a detok owns no memory); kept so callers need not know. */
void detok_free(detok *d);

#endif /* TANDEM_ENGINE_TOKENIZER_H */
