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
    TOKF_SPECIAL = 1,  /* control/special: skipped by decode with skip_special */
    TOKF_ADDED = 2,    /* split out of the text before the model runs */
    TOKF_BYTE = 4,     /* <0xXX> byte token */
    TOKF_EOG = 8,      /* ends generation */
    TOKF_UNUSED = 16,  /* GGUF "unused": never produced by encode */
    TOKF_USER = 32,    /* GGUF user-defined: Unigram scores it 0, its text skips the charsmap */
    TOKF_NOMATCH = 64, /* not a candidate of the Unigram lattice / WordPiece lookup */
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
    TOK_PRE_WHITESPACE_SPLIT, /* HF WhitespaceSplit: split on Unicode White_Space, drop it */
    TOK_PRE_BERT,             /* HF BertPreTokenizer: WhitespaceSplit + isolate punctuation */
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

typedef enum tok__norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,     /* full Unicode lowercase, one code point at a time */
    TOK_NORM_STRIP_ACCENTS, /* drop nonspacing marks (Mn) */
    TOK_NORM_STRIP,         /* strip White_Space at the left and/or right */
    TOK_NORM_PRECOMPILED,   /* SentencePiece precompiled charsmap (t->charsmap) */
    TOK_NORM_BERT,          /* HF BertNormalizer (flags below) */
} tok__norm_kind;

enum {
    TOK_BERT_CLEAN = 1,   /* drop controls/NUL/U+FFFD, whitespace → ' ' */
    TOK_BERT_CHINESE = 2, /* surround CJK ideographs with spaces */
    TOK_BERT_ACCENTS = 4, /* NFD, drop Mn */
    TOK_BERT_LOWER = 8,   /* lowercase */
};

typedef struct tok__norm {
    tok__norm_kind kind;
    pcre2_code *re; /* Replace with a Regex pattern */
    char *pat;      /* Replace literal pattern / Prepend text */
    size_t pat_len;
    char *with; /* Replace content */
    size_t with_len;
    unsigned flags; /* BertNormalizer TOK_BERT_*; Strip: 1 left, 2 right */
} tok__norm;

/* A SentencePiece precompiled charsmap: [u32 trie bytes][XOR-compressed double array of u32]
 * [NUL-terminated replacement strings], validated by tok__charsmap_init. */
typedef struct tok__charsmap {
    uint8_t *blob; /* owned copy */
    size_t size;
    size_t n_xcda;    /* double-array entries (read with memcpy: the blob may be unaligned) */
    size_t repl_off;  /* offset of the replacement strings in blob */
    size_t repl_size; /* their total size (ends with a NUL) */
} tok__charsmap;

/* Byte trie of the vocabulary for the Unigram lattice: edges in an open-addressing table. */
typedef struct tok__trie {
    uint64_t *keys; /* (parent node << 8 | byte) + 1, 0 empty */
    int32_t *child;
    size_t mask;
    int32_t *value; /* [n_nodes] token id ending at the node, or -1 */
    size_t n_nodes, cap_nodes;
} tok__trie;

typedef enum tok__strip_rule {
    TOK_STRIP_NONE,
    TOK_STRIP_OUTPUT, /* HF Strip/Metaspace decoder: up to strip_n leading spaces of the output */
    TOK_STRIP_SPM,    /* llama.cpp: first token's leading space unless a BOS was skipped first */
    TOK_STRIP_WORDPIECE, /* HF WordPiece decoder: the first decoded token is its text as is */
} tok__strip_rule;

/* How the Unigram / WordPiece models prepare their input. */
typedef enum tok__flavor {
    TOK_FLAVOR_HF,   /* tokenizer.json: normalizers and pre-tokenizers, then the model per word */
    TOK_FLAVOR_GGUF, /* llama.cpp: UGM's own normalizer / WPM's own pre-processing */
} tok__flavor;

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
    /* Unigram and WordPiece */
    tok__flavor flavor;
    tok__trie trie;         /* Unigram: the candidate tokens */
    tok__trie utrie;        /* GGUF Unigram: user-defined tokens (their text skips the charsmap) */
    double *uscores;        /* Unigram: [n_vocab] log probabilities */
    double unk_score;       /* Unigram: score of an unknown code point */
    tok__charsmap charsmap; /* Unigram GGUF / HF Precompiled normalizer (size 0: none) */
    bool remove_extra_ws;   /* GGUF UGM: runs of spaces become one, leading ones go */
    bool escape_ws;         /* GGUF UGM: spaces become U+2581 */
    bool wp_lowercase;      /* GGUF WPM: lowercase */
    bool wp_strip_accents;  /* GGUF WPM: NFD first code point, drop marks */
    char *wp_prefix;        /* WordPiece continuing_subword_prefix (HF), owned */
    size_t wp_prefix_len;
    size_t wp_max_chars;  /* WordPiece max_input_chars_per_word (HF) */
    size_t max_token_len; /* longest vocabulary text in bytes */
    bool dec_wordpiece;   /* decoder WordPiece: "##" joins, others get a space */
    bool dec_cleanup;     /* WordPiece decoder cleanup (" ." → ".", ...) */
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

/* Id of the vocabulary text s[0..n), or -1 (needs tok__build_map). */
int32_t tok__find(const tokenizer *t, const char *s, size_t n);

/* Decodes one code point at p (n > 0 bytes); *cp = -1 and returns 1 for an invalid byte. */
size_t tok__utf8_next(const unsigned char *p, size_t n, int32_t *cp);

/* ---- tok_unigram.c: Unigram, WordPiece and the Unicode normalizers they need */

/* Copies and checks a precompiled charsmap; what names it in messages. */
int tok__charsmap_init(tok__charsmap *cm, const void *data, size_t size, const char *what,
                       char *err, size_t errlen);
void tok__charsmap_free(tok__charsmap *cm);

/* Builds t->trie over every token without TOKF_NOMATCH and a non-empty text, and t->utrie over
 * the TOKF_USER ones. */
int tok__trie_build(tokenizer *t);
void tok__trie_free(tok__trie *tr);

struct buf;

/* Unigram: GGUF flavor normalizes s as llama.cpp's UGM does (charsmap, spaces, prefix) first;
 * HF flavor takes one pre-tokenized word. Appends ids to out. */
int tok__unigram(const tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                 size_t *cap);

/* WordPiece: GGUF flavor pre-processes s as llama.cpp's WPM does and encodes every word; HF
 * flavor encodes one pre-tokenized word. */
int tok__wordpiece(const tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                   size_t *cap);

/* Normalizers of kind NFD/NFKC/NFKD/LOWERCASE/STRIP_ACCENTS/STRIP/PRECOMPILED/BERT: s → out. */
int tok__normalize_unicode(const tokenizer *t, const tok__norm *m, const char *s, size_t n,
                           struct buf *out);

/* HF pre-tokenizers WhitespaceSplit / BertPreTokenizer: calls add(ctx, piece) for each piece. */
int tok__split_unicode(tok__pre_kind kind, const char *s, size_t n,
                       int (*add)(void *ctx, const char *p, size_t len), void *ctx);

/* WordPiece decoder piece of token id (text already known): into out. */
int tok__wordpiece_piece(const tokenizer *t, int32_t id, struct buf *out);

#endif /* TANDEM_ENGINE_TOKENIZER_INTERNAL_H */
