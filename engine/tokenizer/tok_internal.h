/*
 * Module-internal state of the tokenizer (the .c files of engine/tokenizer only). The loaders
 * (tok_hf.c, tok_gguf.c) fill a struct tokenizer; tokenizer.c encodes and decodes with it.
 */
#ifndef TANDEM_ENGINE_TOKENIZER_INTERNAL_H
#define TANDEM_ENGINE_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/tokenizer/tokenizer.h"

enum {
    TOKF_SPECIAL = 1, /* control/special: skipped by decode with skip_special */
    TOKF_ADDED = 2,   /* split out of the text before the model runs */
    TOKF_BYTE = 4,    /* <0xXX> byte token */
    TOKF_EOG = 8,     /* ends generation */
    TOKF_UNUSED = 16, /* GGUF "unused": never produced by encode */
};

typedef struct tok__added {
    int32_t id;
    const char *s; /* borrowed from the vocabulary text of id */
    uint32_t len;
    bool special, lstrip, rstrip, single_word;
} tok__added;

typedef enum tok__pre_kind {
    TOK_PRE_SPLIT,     /* regex or literal split with a behaviour */
    TOK_PRE_METASPACE, /* spaces → replacement, optional prefix */
    TOK_PRE_BYTELEVEL, /* optional prefix space + optional GPT-2 regex; turns on byte-level */
} tok__pre_kind;

typedef enum tok__behavior {
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok__behavior;

typedef struct tok__pre {
    tok__pre_kind kind;
    tok__behavior behavior;
    bool invert;
    pcre2_code *re; /* regex split, or NULL with str set for a literal split */
    char *str;      /* literal pattern / metaspace replacement */
    size_t str_len;
    bool add_prefix;   /* ByteLevel add_prefix_space / Metaspace prepend */
    bool prefix_first; /* Metaspace prepend_scheme "first": only the first section */
    bool meta_split;   /* Metaspace split */
} tok__pre;

typedef enum tok__norm_kind { TOK_NORM_NFC, TOK_NORM_PREPEND, TOK_NORM_REPLACE } tok__norm_kind;

typedef struct tok__norm {
    tok__norm_kind kind;
    pcre2_code *re; /* Replace with a Regex pattern */
    char *pat;      /* Replace literal pattern / Prepend text */
    size_t pat_len;
    char *with; /* Replace content */
    size_t with_len;
} tok__norm;

typedef enum tok__strip_rule {
    TOK_STRIP_NONE,
    TOK_STRIP_OUTPUT, /* HF Strip/Metaspace decoder: up to strip_n leading spaces of the output */
    TOK_STRIP_SPM,    /* llama.cpp: first token's leading space unless a BOS was skipped first */
} tok__strip_rule;

struct tokenizer {
    tokenizer_kind kind;
    int32_t n_vocab;
    char **text; /* [n_vocab] vocabulary text (NUL-terminated), owned */
    uint32_t *text_len;
    char **piece; /* [n_vocab] decoded bytes, owned (may alias text when equal: no) */
    uint32_t *piece_len;
    float *scores;  /* [n_vocab] SPM scores, or NULL */
    uint8_t *flags; /* [n_vocab] TOKF_* */
    int32_t *map;   /* open-addressing text → id, -1 empty */
    size_t map_mask;
    uint64_t *mkeys; /* merges: (left id << 32 | right id) + 1, 0 empty */
    int32_t *mrank, *mres;
    size_t mmask;
    int32_t byte_sym[256]; /* byte-level: byte → id of its GPT-2 symbol (-1 none) */
    int32_t byte_tok[256]; /* <0xXX> token ids (-1 none) */
    bool byte_level, byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;
    tok__norm *norms;
    size_t n_norms;
    tok__pre *pres;
    size_t n_pres;
    tok__added *added; /* sorted by length, longest first */
    size_t n_added;
    uint8_t added_first[256]; /* 1 when some added token starts with this byte */
    int32_t prefix_ids[4], suffix_ids[4];
    size_t n_prefix, n_suffix;
    int32_t bos, eos;
    bool add_space_prefix; /* SPM */
    tok__strip_rule strip_rule;
    size_t strip_n;
    bool dec_byte_level;     /* decoder maps GPT-2 symbols back to bytes */
    bool dec_byte_fallback;  /* decoder turns <0xXX> into the byte */
    char *dec_from, *dec_to; /* decoder Replace (literal), or NULL */
    size_t dec_from_len, dec_to_len;
};

/* Allocates an empty tokenizer with n_vocab slots (all arrays zeroed, ids -1). */
tokenizer *tok__alloc(int32_t n_vocab);

/* Sets token id's vocabulary text (copied). */
int tok__set_text(tokenizer *t, int32_t id, const char *s, size_t len);

/* Builds the text → id map; duplicates keep the lowest id. Call after all texts are set. */
int tok__build_map(tokenizer *t);

/* Adds a merge (left, right) → result with the given rank; a repeated pair keeps the first. */
int tok__add_merge(tokenizer *t, int32_t left, int32_t right, int32_t result, int32_t rank);

/* Sizes the merge table for n merges (call once before tok__add_merge). */
int tok__merges_reserve(tokenizer *t, size_t n);

/* Registers token id as an added token (split out before the model); sorted later. */
int tok__add_added(tokenizer *t, int32_t id, bool special, bool lstrip, bool rstrip,
                   bool single_word);

/* Sorts added tokens, fills the byte tables and computes each token's piece. Call last. */
int tok__finish(tokenizer *t, char *err, size_t errlen);

/* Compiles a pre-tokenizer / normalizer regex (UTF, UCP, invalid UTF allowed, JIT if possible). */
pcre2_code *tok__compile(const char *pat, size_t len, char *err, size_t errlen, const char *what);

/* GPT-2 byte → code point mapping. */
uint32_t tok__byte_to_cp(unsigned char b);

#endif /* TANDEM_ENGINE_TOKENIZER_INTERNAL_H */
