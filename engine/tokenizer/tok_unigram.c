/*
 * Unigram and WordPiece models, and the Unicode normalizers they bring along.
 *
 * Unigram (SentencePiece unigram; GGUF "t5", tokenizer.json "Unigram"): the best segmentation by
 * the sum of token log probabilities, found by Viterbi over a byte trie of the vocabulary; a code
 * point no token starts with costs the lowest score minus 10 and becomes the unknown token
 * (consecutive unknowns fuse into one, or into <0xXX> byte tokens with byte_fallback). The GGUF
 * flavor first normalizes as llama.cpp's llm_tokenizer_ugm_session does: the precompiled
 * charsmap (a XOR-compressed double array of byte sequences → replacement strings), user-defined
 * token text passed through, spaces escaped as U+2581, optional prefix space and whitespace
 * merging. The HF flavor runs on words the tokenizer.json normalizers/pre-tokenizers made.
 *
 * WordPiece (BERT; GGUF "bert", tokenizer.json "WordPiece"): greedy longest-match-first pieces of
 * each word, the word as one unknown token when some part matches nothing. GGUF vocabularies
 * follow llama.cpp's conversion: word-initial tokens carry a U+2581 prefix, continuations none;
 * words come from llama.cpp's WPM pre-processing (lowercase, accent stripping by the first code
 * point of the NFD form, punctuation and CJK ideographs as words of their own). HF vocabularies
 * mark continuations with continuing_subword_prefix ("##").
 *
 * Unicode classes (White_Space, general categories, case, NFD/NFKC) come from ICU; a build
 * without ICU (TOKENIZER_NO_ICU) classifies ASCII only and leaves other text as it is.
 */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>
#ifndef TOKENIZER_NO_ICU
#include <unicode/ubrk.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>
#endif

#include "engine/tokenizer/tok_internal.h"
#include "lib/buf.h"
#include "lib/common.h"
#include "lib/err.h"

/* ---------------------------------------------------------------- Unicode classes */

/* The Unicode White_Space property (Rust's char::is_whitespace). */
static bool uni_space(int32_t cp)
{
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

typedef enum uni_class {
    UNI_OTHER,      /* letters, numbers, separators */
    UNI_CONTROL,    /* Cc Cf Cs Co */
    UNI_UNASSIGNED, /* Cn: "other" to HF tokenizers, "undefined" (kept) to llama.cpp */
    UNI_PUNCT,      /* P* */
    UNI_SYMBOL,     /* S* */
    UNI_MARK_MN,    /* Mn */
    UNI_MARK,       /* Mc Me */
} uni_class;

static uni_class uni_class_of(int32_t cp)
{
    if (cp < 0) {
        return UNI_OTHER;
    }
#ifndef TOKENIZER_NO_ICU
    switch (u_charType((UChar32)cp)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
        return UNI_CONTROL;
    case U_UNASSIGNED:
        return UNI_UNASSIGNED;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
        return UNI_PUNCT;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
        return UNI_SYMBOL;
    case U_NON_SPACING_MARK:
        return UNI_MARK_MN;
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
        return UNI_MARK;
    default:
        return UNI_OTHER;
    }
#else
    if (cp < 32 || (cp >= 127 && cp < 160)) {
        return UNI_CONTROL;
    }
    if (cp < 127 && strchr("$+<=>^`|~", (int)cp)) {
        return UNI_SYMBOL;
    }
    if (cp < 127 && strchr("!\"#%&'()*,-./:;?@[\\]_{}", (int)cp)) {
        return UNI_PUNCT;
    }
    return UNI_OTHER;
#endif
}

/* Full lowercase mapping of one code point (Rust's char::to_lowercase) into out (≤ 12 bytes). */
static size_t uni_lower_full(int32_t cp, char *out)
{
#ifndef TOKENIZER_NO_ICU
    if (cp >= 0x80) {
        UChar src[2], dst[8];
        int32_t ls = 0;
        U16_APPEND_UNSAFE(src, ls, cp);
        UErrorCode ue = U_ZERO_ERROR;
        int32_t ld = u_strToLower(dst, 8, src, ls, "", &ue);
        if (U_SUCCESS(ue) && ld > 0 && ld <= 8) {
            size_t n = 0;
            for (int32_t i = 0; i < ld;) {
                UChar32 c;
                U16_NEXT(dst, i, ld, c);
                n += tandem_utf8_put(out + n, (unsigned long)c);
            }
            return n;
        }
    }
#endif
    if (cp >= 'A' && cp <= 'Z') {
        cp += 32;
    }
    return tandem_utf8_put(out, (unsigned long)cp);
}

/* Simple lowercase mapping (llama.cpp's unicode_tolower). */
static int32_t uni_lower_simple(int32_t cp)
{
#ifndef TOKENIZER_NO_ICU
    return (int32_t)u_tolower((UChar32)cp);
#else
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
#endif
}

/* First code point of cp's canonical decomposition (llama.cpp's unicode_cpts_normalize_nfd). */
static int32_t uni_nfd_first(int32_t cp)
{
#ifndef TOKENIZER_NO_ICU
    if (cp < 0xC0) {
        return cp;
    }
    UErrorCode ue = U_ZERO_ERROR;
    const UNormalizer2 *nfd = unorm2_getNFDInstance(&ue);
    if (U_FAILURE(ue)) {
        return cp;
    }
    UChar d[32];
    int32_t l = unorm2_getDecomposition(nfd, (UChar32)cp, d, 32, &ue);
    if (U_FAILURE(ue) || l <= 0) {
        return cp;
    }
    int32_t i = 0;
    UChar32 c;
    U16_NEXT(d, i, l, c);
    return (int32_t)c;
#else
    return cp;
#endif
}

static bool uni_cjk(int32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Rust's char::is_ascii_punctuation || char::is_punctuation (BertPreTokenizer). */
static bool uni_bert_punct(int32_t cp)
{
    if (cp >= 0 && cp < 128) {
        return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);
    }
    return uni_class_of(cp) == UNI_PUNCT;
}

/* Applies an ICU normalization form to s (valid UTF-8 only; anything else is copied). */
static int uni_form(tok__norm_kind kind, const char *s, size_t n, struct buf *out)
{
#ifndef TOKENIZER_NO_ICU
    bool plain = true;
    for (size_t i = 0; i < n && plain; i++) {
        plain = (unsigned char)s[i] < 0x80;
    }
    if (plain || n > INT32_MAX / 16) {
        return buf_append(out, s, n);
    }
    for (size_t i = 0; i < n;) {
        size_t l = tandem_utf8_seq_len((const unsigned char *)s + i, n - i);
        if (l == 0) {
            return buf_append(out, s, n);
        }
        i += l;
    }
    UErrorCode ue = U_ZERO_ERROR;
    const UNormalizer2 *norm = kind == TOK_NORM_NFD    ? unorm2_getNFDInstance(&ue)
                               : kind == TOK_NORM_NFKD ? unorm2_getNFKDInstance(&ue)
                                                       : unorm2_getNFKCInstance(&ue);
    if (U_FAILURE(ue)) {
        return buf_append(out, s, n);
    }
    int32_t cap16 = (int32_t)n + 16;
    /* NFKD/NFKC may grow text by up to 18 code points per code point (U+FDFA) */
    int32_t capn = cap16 * 18;
    UChar *u16 = malloc((size_t)cap16 * sizeof(UChar));
    UChar *n16 = malloc((size_t)capn * sizeof(UChar));
    char *u8 = malloc((size_t)capn * 3);
    int rc = -ENOMEM;
    if (u16 && n16 && u8) {
        int32_t l16 = 0, l8 = 0;
        u_strFromUTF8(u16, cap16, &l16, s, (int32_t)n, &ue);
        int32_t ln = U_SUCCESS(ue) ? unorm2_normalize(norm, u16, l16, n16, capn, &ue) : 0;
        if (U_SUCCESS(ue)) {
            u_strToUTF8(u8, capn * 3, &l8, n16, ln, &ue);
        }
        rc = U_SUCCESS(ue) ? buf_append(out, u8, (size_t)l8) : buf_append(out, s, n);
    }
    free(u16);
    free(n16);
    free(u8);
    return rc;
#else
    (void)kind;
    return buf_append(out, s, n);
#endif
}

/* ---------------------------------------------------------------- precompiled charsmap */

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int tok__charsmap_init(tok__charsmap *cm, const void *data, size_t size, const char *what,
                       char *err, size_t errlen)
{
    memset(cm, 0, sizeof(*cm));
    if (!data || size < 4) {
        return tandem_fail(err, errlen, -EINVAL, "%s: %zu bytes, too small for its header", what,
                           size);
    }
    uint32_t trie = rd32(data);
    if ((uint64_t)trie + 4 >= size || trie % 4 != 0) {
        return tandem_fail(err, errlen, -EINVAL,
                           "%s: trie size %u does not fit its %zu bytes (or is not a multiple "
                           "of 4)",
                           what, trie, size);
    }
    const uint8_t *p = data;
    if (p[size - 1] != 0) {
        return tandem_fail(err, errlen, -EINVAL, "%s: replacement strings do not end with a NUL",
                           what);
    }
    for (size_t i = 4 + trie; i < size;) {
        size_t l = tandem_utf8_seq_len(p + i, size - i);
        if (l == 0) {
            return tandem_fail(err, errlen, -EINVAL,
                               "%s: replacement strings are not valid UTF-8 (byte %zu)", what, i);
        }
        i += l;
    }
    cm->blob = malloc(size);
    if (!cm->blob) {
        return -ENOMEM;
    }
    memcpy(cm->blob, data, size);
    cm->size = size;
    cm->n_xcda = trie / 4;
    cm->repl_off = 4 + (size_t)trie;
    cm->repl_size = size - cm->repl_off;
    return 0;
}

void tok__charsmap_free(tok__charsmap *cm)
{
    free(cm->blob);
    memset(cm, 0, sizeof(*cm));
}

static uint32_t xcda(const tok__charsmap *cm, size_t i)
{
    return rd32(cm->blob + 4 + 4 * i);
}

static uint32_t xcda_base(uint32_t u)
{
    return (u >> 10) << ((u & (1U << 9)) >> 6);
}

/*
 * Longest (first: shortest) prefix of s[0..n) the charsmap rewrites: *mlen its length (0: none),
 * *repl and *rlen the replacement. -EINVAL when the double array points outside itself or its
 * strings (a malformed charsmap; a well-formed one never does).
 */
static int charsmap_match(const tok__charsmap *cm, const unsigned char *s, size_t n, bool first,
                          size_t *mlen, const char **repl, size_t *rlen)
{
    *mlen = 0;
    if (cm->n_xcda == 0) {
        return 0;
    }
    uint32_t node = xcda_base(xcda(cm, 0));
    uint32_t value = 0;
    for (size_t i = 0; i < n && s[i] != 0; i++) {
        node ^= s[i];
        if (node >= cm->n_xcda) {
            return -EINVAL;
        }
        uint32_t u = xcda(cm, node);
        if ((u & ((1U << 31) | 0xFFU)) != s[i]) {
            break;
        }
        bool leaf = (u >> 8) & 1;
        node ^= xcda_base(u);
        if (leaf) {
            if (node >= cm->n_xcda) {
                return -EINVAL;
            }
            *mlen = i + 1;
            value = xcda(cm, node) & ((1U << 31) - 1);
            if (first) {
                break;
            }
        }
    }
    if (*mlen == 0) {
        return 0;
    }
    if (value >= cm->repl_size) {
        return -EINVAL;
    }
    *repl = (const char *)cm->blob + cm->repl_off + value;
    *rlen = strlen(*repl); /* the strings end with a NUL (checked at load) */
    return 0;
}

/* ---------------------------------------------------------------- trie */

static uint64_t trie_hash(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    return x;
}

static int32_t trie_next(const tok__trie *tr, int32_t node, unsigned char c)
{
    if (!tr->keys) {
        return -1;
    }
    uint64_t key = (((uint64_t)(uint32_t)node << 8) | c) + 1;
    size_t h = trie_hash(key) & tr->mask;
    while (tr->keys[h] != 0) {
        if (tr->keys[h] == key) {
            return tr->child[h];
        }
        h = (h + 1) & tr->mask;
    }
    return -1;
}

static int trie_insert(tok__trie *tr, const char *s, size_t n, int32_t id)
{
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int32_t next = trie_next(tr, node, c);
        if (next < 0) {
            if (tr->n_nodes == tr->cap_nodes) {
                return -ENOSPC; /* sized from the total text length: cannot happen */
            }
            next = (int32_t)tr->n_nodes++;
            tr->value[next] = -1;
            uint64_t key = (((uint64_t)(uint32_t)node << 8) | c) + 1;
            size_t h = trie_hash(key) & tr->mask;
            while (tr->keys[h] != 0) {
                h = (h + 1) & tr->mask;
            }
            tr->keys[h] = key;
            tr->child[h] = next;
        }
        node = next;
    }
    if (tr->value[node] < 0) {
        tr->value[node] = id; /* duplicate text: the lower id wins */
    }
    return 0;
}

void tok__trie_free(tok__trie *tr)
{
    free(tr->keys);
    free(tr->child);
    free(tr->value);
    memset(tr, 0, sizeof(*tr));
}

static int trie_build_one(tokenizer *t, tok__trie *tr, uint8_t need, uint8_t skip)
{
    size_t total = 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if ((t->flags[id] & need) == need && !(t->flags[id] & skip)) {
            total += t->text_len[id];
        }
    }
    size_t cap = 16;
    while (cap < total * 2) {
        cap <<= 1;
    }
    tok__trie_free(tr);
    tr->keys = calloc(cap, sizeof(*tr->keys));
    tr->child = malloc(cap * sizeof(*tr->child));
    tr->value = malloc(total * sizeof(*tr->value));
    if (!tr->keys || !tr->child || !tr->value) {
        tok__trie_free(tr);
        return -ENOMEM;
    }
    tr->mask = cap - 1;
    tr->cap_nodes = total;
    tr->n_nodes = 1;
    tr->value[0] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if ((t->flags[id] & need) == need && !(t->flags[id] & skip) && t->text_len[id] > 0) {
            int rc = trie_insert(tr, t->text[id], t->text_len[id], id);
            if (rc) {
                return rc;
            }
        }
    }
    return 0;
}

int tok__trie_build(tokenizer *t)
{
    int rc = trie_build_one(t, &t->trie, 0, TOKF_NOMATCH);
    if (rc == 0 && t->flavor == TOK_FLAVOR_GGUF) {
        rc = trie_build_one(t, &t->utrie, TOKF_USER, 0);
    }
    return rc;
}

/* ---------------------------------------------------------------- id output */

static int push_id(int32_t **ids, size_t *n, size_t *cap, int32_t id)
{
    int32_t *v = tandem_grow(*ids, cap, *n + 1, sizeof(*v), 64);
    if (!v) {
        return -ENOMEM;
    }
    *ids = v;
    v[(*n)++] = id;
    return 0;
}

/* Length of the code point starting with byte c as its lead byte announces (llama.cpp's
 * unicode_len_utf8: continuation and invalid bytes count 1). */
static size_t lead_len(unsigned char c)
{
    static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* ---------------------------------------------------------------- Unigram */

#define SPACE_ESC "\xE2\x96\x81"

/* llama.cpp's llm_tokenizer_ugm_session::normalize_prefix + normalize. */
static int ugm_normalize(const tokenizer *t, const char *s, size_t n, struct buf *out)
{
    const char *space = t->escape_ws ? SPACE_ESC : " ";
    size_t space_len = t->escape_ws ? 3 : 1;
    bool prepend = t->add_space_prefix, merge = t->remove_extra_ws;
    bool prepended = false, in_word = false;
    int rc = 0;
    for (size_t pos = 0; pos < n && rc == 0;) {
        const unsigned char *p = (const unsigned char *)s + pos;
        size_t left = n - pos, used = 0, rl = 0;
        const char *r = NULL;
        /* the longest trie path of user-defined text (llama.cpp's naive_trie::get_longest_prefix:
         * a path, not necessarily a whole token) passes unchanged */
        for (int32_t node = 0; used < left;) {
            node = trie_next(&t->utrie, node, p[used]);
            if (node < 0) {
                break;
            }
            used++;
        }
        if (used > 0) {
            r = s + pos;
            rl = used;
        } else {
            rc = charsmap_match(&t->charsmap, p, left, false, &used, &r, &rl);
            if (rc) {
                break;
            }
            if (used == 0) {
                used = tandem_utf8_seq_len(p, left);
                r = s + pos;
                rl = used;
                if (used == 0) {
                    used = 1;
                    r = "\xEF\xBF\xBD";
                    rl = 3;
                }
            }
        }
        for (size_t i = 0; i < rl && rc == 0; i++) {
            if (r[i] != ' ') {
                if (!in_word) {
                    in_word = true;
                    if ((prepend && !prepended) || merge) {
                        rc = buf_append(out, space, space_len);
                        prepended = true;
                    }
                }
                if (rc == 0) {
                    rc = buf_append(out, r + i, 1);
                }
            } else {
                in_word = false;
                if (!merge) {
                    rc = buf_append(out, space, space_len);
                }
            }
        }
        pos += used;
    }
    return rc;
}

typedef struct ugm_best {
    int32_t id;
    size_t start;
    double score;
} ugm_best;

static int ugm_emit_unk(const tokenizer *t, const char *s, size_t a, size_t b, int32_t **ids,
                        size_t *n_ids, size_t *cap)
{
    if (t->byte_fallback) {
        bool all = true;
        for (size_t i = a; i < b && all; i++) {
            all = t->byte_tok[(unsigned char)s[i]] >= 0;
        }
        if (all) {
            int rc = 0;
            for (size_t i = a; i < b && rc == 0; i++) {
                rc = push_id(ids, n_ids, cap, t->byte_tok[(unsigned char)s[i]]);
            }
            return rc;
        }
    }
    if (t->unk_id < 0) {
        return -EINVAL; /* loaders require an unknown token unless byte fallback covers it */
    }
    return push_id(ids, n_ids, cap, t->unk_id);
}

/* Viterbi over the normalized text s[0..n). */
static int ugm_viterbi(const tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                       size_t *cap)
{
    if (n == 0) {
        return 0;
    }
    ugm_best *best = malloc((n + 1) * sizeof(*best));
    if (!best) {
        return -ENOMEM;
    }
    for (size_t i = 0; i <= n; i++) {
        best[i] = (ugm_best){.id = t->unk_id, .start = 0, .score = -DBL_MAX};
    }
    best[0].score = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t pos = 0; pos < n;) {
        size_t cl = lead_len(u[pos]);
        if (cl > n - pos) {
            cl = n - pos;
        }
        bool single = false;
        double base = best[pos].score;
        int32_t node = 0;
        for (size_t end = pos; end < n;) {
            node = trie_next(&t->trie, node, u[end++]);
            if (node < 0) {
                break;
            }
            int32_t id = t->trie.value[node];
            if (id < 0) {
                continue;
            }
            if (end - pos == cl) {
                single = true;
            }
            double sc = base + ((t->flags[id] & TOKF_USER) ? 0.0 : t->uscores[id]);
            if (sc > best[end].score) {
                best[end] = (ugm_best){.id = id, .start = pos, .score = sc};
            }
        }
        if (!single) {
            double sc = base + t->unk_score;
            if (sc > best[pos + cl].score) {
                best[pos + cl] = (ugm_best){.id = -1, .start = pos, .score = sc};
            }
        }
        pos += cl;
    }
    /* back from the end (ends in reverse order); an unknown (-1) spans [start, end) and
     * consecutive unknowns fuse */
    size_t *ends = malloc((n + 1) * sizeof(*ends));
    int rc = ends ? 0 : -ENOMEM;
    size_t count = 0;
    for (size_t end = n; rc == 0 && end > 0; end = best[end].start) {
        ends[count++] = end;
    }
    for (size_t j = count; rc == 0 && j > 0; j--) {
        size_t e = ends[j - 1];
        const ugm_best *b = &best[e];
        if (b->id >= 0 && b->id != t->unk_id) {
            rc = push_id(ids, n_ids, cap, b->id);
            continue;
        }
        size_t a = b->start;
        while (j > 1 && (best[ends[j - 2]].id < 0 || best[ends[j - 2]].id == t->unk_id)) {
            e = ends[--j - 1];
        }
        rc = ugm_emit_unk(t, s, a, e, ids, n_ids, cap);
    }
    free(ends);
    free(best);
    return rc;
}

int tok__unigram(const tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                 size_t *cap)
{
    if (t->flavor == TOK_FLAVOR_HF) {
        return ugm_viterbi(t, s, n, ids, n_ids, cap);
    }
    struct buf norm;
    buf_init(&norm, TOKENIZER_MAX_TEXT_BYTES * 4);
    int rc = ugm_normalize(t, s, n, &norm);
    if (rc == 0) {
        rc = ugm_viterbi(t, norm.data ? norm.data : "", norm.len, ids, n_ids, cap);
    }
    buf_free(&norm);
    return rc;
}

/* ---------------------------------------------------------------- WordPiece */

/* HF WordPiece::tokenize on one word. */
static int wp_word_hf(const tokenizer *t, const char *w, size_t n, struct buf *tmp, int32_t **ids,
                      size_t *n_ids, size_t *cap)
{
    size_t chars = 0;
    for (size_t i = 0; i < n; i++) {
        chars += ((unsigned char)w[i] & 0xC0) != 0x80;
    }
    size_t first = *n_ids;
    bool bad = chars > t->wp_max_chars;
    int rc = 0;
    for (size_t start = 0; start < n && !bad && rc == 0;) {
        int32_t found = -1;
        size_t end = n;
        while (end > start) {
            size_t plen = start > 0 ? t->wp_prefix_len : 0;
            if (plen + (end - start) <= t->max_token_len) {
                buf_reset(tmp);
                rc = buf_append(tmp, t->wp_prefix ? t->wp_prefix : "", plen);
                if (rc == 0) {
                    rc = buf_append(tmp, w + start, end - start);
                }
                if (rc) {
                    return rc;
                }
                found = tok__find(t, tmp->data, tmp->len);
                if (found >= 0) {
                    break;
                }
            }
            end--;
            while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80) {
                end--;
            }
        }
        if (found < 0) {
            bad = true;
            break;
        }
        rc = push_id(ids, n_ids, cap, found);
        start = end;
    }
    if (rc) {
        return rc;
    }
    if (bad) {
        *n_ids = first;
        if (t->unk_id < 0) {
            return -EINVAL;
        }
        return push_id(ids, n_ids, cap, t->unk_id);
    }
    return 0;
}

/* llama.cpp's llm_tokenizer_wpm_session::tokenize on one pre-processed word. */
static int wp_word_gguf(const tokenizer *t, const char *word, size_t wl, struct buf *tmp,
                        int32_t **ids, size_t *n_ids, size_t *cap)
{
    buf_reset(tmp);
    int rc = buf_append(tmp, SPACE_ESC, 3);
    if (rc == 0) {
        rc = buf_append(tmp, word, wl);
    }
    if (rc) {
        return rc;
    }
    const char *w = tmp->data;
    size_t n = tmp->len, first = *n_ids;
    for (size_t i = 0; i < n && rc == 0; i++) {
        bool match = false;
        size_t hi = i + t->max_token_len + 1 < n ? i + t->max_token_len + 1 : n;
        for (size_t j = hi; j > i; j--) {
            int32_t id = tok__find(t, w + i, j - i);
            if (id >= 0) {
                rc = push_id(ids, n_ids, cap, id);
                match = true;
                i = j - 1;
                break;
            }
        }
        if (!match) {
            *n_ids = first;
            break;
        }
    }
    if (rc == 0 && *n_ids == first) {
        if (t->unk_id < 0) {
            return -EINVAL;
        }
        rc = push_id(ids, n_ids, cap, t->unk_id);
    }
    return rc;
}

int tok__wordpiece(const tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                   size_t *cap)
{
    struct buf tmp, word;
    buf_init(&tmp, TOKENIZER_MAX_TEXT_BYTES * 4);
    buf_init(&word, TOKENIZER_MAX_TEXT_BYTES * 4);
    int rc = 0;
    if (t->flavor == TOK_FLAVOR_HF) {
        rc = wp_word_hf(t, s, n, &tmp, ids, n_ids, cap);
        goto out;
    }
    /* llama.cpp's WPM preprocess: words split at White_Space; NUL, U+FFFD, controls (and marks
     * when stripping accents) dropped; punctuation, ASCII symbols and CJK ideographs alone */
    for (size_t i = 0; i <= n && rc == 0;) {
        int32_t cp = -1;
        size_t l = 0;
        if (i < n) {
            l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
            if (cp < 0) {
                cp = 0xFFFD; /* llama.cpp's unicode_cpts_from_utf8 */
            }
            if (t->wp_strip_accents) {
                cp = uni_nfd_first(cp);
            }
        }
        uni_class cls = i < n ? uni_class_of(cp) : UNI_OTHER;
        bool end = i >= n || uni_space(cp);
        bool alone = !end && (cls == UNI_PUNCT || (cp < 0x7F && cls == UNI_SYMBOL) || uni_cjk(cp));
        bool drop = !end && (cp == 0 || cp == 0xFFFD || cls == UNI_CONTROL ||
                             (t->wp_strip_accents && (cls == UNI_MARK || cls == UNI_MARK_MN)));
        if ((end || alone) && word.len > 0) {
            rc = wp_word_gguf(t, word.data, word.len, &tmp, ids, n_ids, cap);
            buf_reset(&word);
        }
        if (rc == 0 && !end && !drop) {
            char u8[4];
            size_t ul =
                tandem_utf8_put(u8, (unsigned long)(t->wp_lowercase ? uni_lower_simple(cp) : cp));
            rc = buf_append(&word, u8, ul);
            if (rc == 0 && alone) {
                rc = wp_word_gguf(t, word.data, word.len, &tmp, ids, n_ids, cap);
                buf_reset(&word);
            }
        }
        i += i < n ? l : 1;
    }
out:
    buf_free(&tmp);
    buf_free(&word);
    return rc;
}

int tok__wordpiece_piece(const tokenizer *t, int32_t id, struct buf *out)
{
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    struct buf b;
    buf_init(&b, (size_t)n + 8);
    int rc;
    if (t->wp_prefix_len > 0 && n >= t->wp_prefix_len &&
        memcmp(s, t->wp_prefix, t->wp_prefix_len) == 0) {
        rc = buf_append(&b, s + t->wp_prefix_len, n - t->wp_prefix_len);
    } else {
        rc = buf_append(&b, " ", 1);
        if (rc == 0) {
            rc = buf_append(&b, s, n);
        }
    }
    if (rc == 0 && !t->dec_cleanup) {
        rc = buf_append(out, b.data, b.len);
    } else if (rc == 0) {
        /* HF tokenizers' cleanup(), applied to the piece as its WordPiece decoder does */
        static const char *const from[] = {" .",  " ?",      " !",  " ,",   " ' ", " n't",
                                           " 'm", " do not", " 's", " 've", " 're"};
        static const char *const to[] = {".",  "?",      "!",  ",",   "'",  "n't",
                                         "'m", " don't", "'s", "'ve", "'re"};
        struct buf cur, nx;
        buf_init(&cur, (size_t)n + 8);
        rc = buf_append(&cur, b.data, b.len);
        for (size_t k = 0; k < ARRAY_SIZE(from) && rc == 0; k++) {
            size_t fl = strlen(from[k]);
            buf_init(&nx, (size_t)n + 8);
            for (size_t i = 0; i < cur.len && rc == 0;) {
                if (cur.len - i >= fl && memcmp(cur.data + i, from[k], fl) == 0) {
                    rc = buf_append(&nx, to[k], strlen(to[k]));
                    i += fl;
                } else {
                    rc = buf_append(&nx, cur.data + i, 1);
                    i++;
                }
            }
            buf_free(&cur);
            cur = nx;
        }
        if (rc == 0) {
            rc = buf_append(out, cur.data ? cur.data : "", cur.len);
        }
        buf_free(&cur);
    }
    buf_free(&b);
    return rc;
}

/* ---------------------------------------------------------------- normalizers */

/* HF tokenizers' Precompiled on one grapheme cluster (spm_precompiled's normalize_string): a
 * cluster shorter than 6 bytes is replaced whole by the rule of the shortest key it starts with;
 * otherwise (or when none matches) each code point by the shortest key it starts with, or kept. */
static int precompiled_grapheme(const tok__charsmap *cm, const char *g, size_t gl, struct buf *out)
{
    size_t used = 0, rl = 0;
    const char *r = NULL;
    int rc = 0;
    if (gl < 6) {
        rc = charsmap_match(cm, (const unsigned char *)g, gl, true, &used, &r, &rl);
        if (rc || used > 0) {
            return rc ? rc : buf_append(out, r, rl);
        }
    }
    for (size_t i = 0; i < gl && rc == 0;) {
        int32_t cp;
        size_t l = tok__utf8_next((const unsigned char *)g + i, gl - i, &cp);
        rc = charsmap_match(cm, (const unsigned char *)g + i, l, true, &used, &r, &rl);
        if (rc == 0) {
            rc = used > 0 ? buf_append(out, r, rl) : buf_append(out, g + i, l);
        }
        i += l;
    }
    return rc;
}

/* HF Precompiled over s: grapheme clusters from ICU's character break iterator (without ICU,
 * or for text ICU will not take, every code point is its own cluster). */
static int precompiled_hf(const tok__charsmap *cm, const char *s, size_t n, struct buf *out)
{
    int rc = 0;
#ifndef TOKENIZER_NO_ICU
    UErrorCode ue = U_ZERO_ERROR;
    UText *ut = n <= INT32_MAX ? utext_openUTF8(NULL, s, (int64_t)n, &ue) : NULL;
    UBreakIterator *bi = ut && U_SUCCESS(ue) ? ubrk_open(UBRK_CHARACTER, "", NULL, 0, &ue) : NULL;
    if (bi && U_SUCCESS(ue)) {
        ubrk_setUText(bi, ut, &ue);
    }
    if (bi && U_SUCCESS(ue)) {
        size_t a = 0;
        for (int32_t b = ubrk_next(bi); b != UBRK_DONE && rc == 0; b = ubrk_next(bi)) {
            size_t e = (size_t)b > n ? n : (size_t)b;
            if (e > a) {
                rc = precompiled_grapheme(cm, s + a, e - a, out);
                a = e;
            }
        }
        if (rc == 0 && a < n) {
            rc = precompiled_grapheme(cm, s + a, n - a, out);
        }
        ubrk_close(bi);
        utext_close(ut);
        return rc;
    }
    if (bi) {
        ubrk_close(bi);
    }
    if (ut) {
        utext_close(ut);
    }
#endif
    for (size_t i = 0; i < n && rc == 0;) {
        int32_t cp;
        size_t l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
        rc = precompiled_grapheme(cm, s + i, l, out);
        i += l;
    }
    return rc;
}

static int norm_bert(const tok__norm *m, const char *s, size_t n, struct buf *out)
{
    struct buf a, c;
    buf_init(&a, TOKENIZER_MAX_TEXT_BYTES * 4);
    buf_init(&c, TOKENIZER_MAX_TEXT_BYTES * 4);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        int32_t cp;
        size_t l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
        if ((m->flags & TOK_BERT_CLEAN) && cp >= 0) {
            if (cp == 0 || cp == 0xFFFD ||
                (cp != '\t' && cp != '\n' && cp != '\r' &&
                 (uni_class_of(cp) == UNI_CONTROL || uni_class_of(cp) == UNI_UNASSIGNED))) {
                i += l;
                continue;
            }
            if (uni_space(cp)) {
                rc = buf_append(&a, " ", 1);
                i += l;
                continue;
            }
        }
        if ((m->flags & TOK_BERT_CHINESE) && uni_cjk(cp)) {
            rc = buf_append(&a, " ", 1);
            if (rc == 0) {
                rc = buf_append(&a, s + i, l);
            }
            if (rc == 0) {
                rc = buf_append(&a, " ", 1);
            }
        } else {
            rc = buf_append(&a, s + i, l);
        }
        i += l;
    }
    if (rc == 0 && (m->flags & TOK_BERT_ACCENTS)) {
        tok__norm nfd = {.kind = TOK_NORM_NFD};
        tok__norm strip = {.kind = TOK_NORM_STRIP_ACCENTS};
        rc = tok__normalize_unicode(NULL, &nfd, a.data ? a.data : "", a.len, &c);
        buf_reset(&a);
        if (rc == 0) {
            rc = tok__normalize_unicode(NULL, &strip, c.data ? c.data : "", c.len, &a);
        }
    }
    if (rc == 0 && (m->flags & TOK_BERT_LOWER)) {
        tok__norm lower = {.kind = TOK_NORM_LOWERCASE};
        rc = tok__normalize_unicode(NULL, &lower, a.data ? a.data : "", a.len, out);
    } else if (rc == 0) {
        rc = buf_append(out, a.data ? a.data : "", a.len);
    }
    buf_free(&a);
    buf_free(&c);
    return rc;
}

int tok__normalize_unicode(const tokenizer *t, const tok__norm *m, const char *s, size_t n,
                           struct buf *out)
{
    int rc = 0;
    switch (m->kind) {
    case TOK_NORM_NFD:
    case TOK_NORM_NFKC:
    case TOK_NORM_NFKD:
        return uni_form(m->kind, s, n, out);
    case TOK_NORM_BERT:
        return norm_bert(m, s, n, out);
    case TOK_NORM_LOWERCASE:
        for (size_t i = 0; i < n && rc == 0;) {
            int32_t cp;
            size_t l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
            if (cp < 0) {
                rc = buf_append(out, s + i, 1);
            } else {
                char u8[16];
                rc = buf_append(out, u8, uni_lower_full(cp, u8));
            }
            i += l;
        }
        return rc;
    case TOK_NORM_STRIP_ACCENTS:
        for (size_t i = 0; i < n && rc == 0;) {
            int32_t cp;
            size_t l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
            if (uni_class_of(cp) != UNI_MARK_MN) {
                rc = buf_append(out, s + i, l);
            }
            i += l;
        }
        return rc;
    case TOK_NORM_STRIP: {
        size_t a = 0, b = n;
        int32_t cp;
        while ((m->flags & 1) && a < b) {
            size_t l = tok__utf8_next((const unsigned char *)s + a, b - a, &cp);
            if (!uni_space(cp)) {
                break;
            }
            a += l;
        }
        while ((m->flags & 2) && b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80 && b - k < 4) {
                k--;
            }
            tok__utf8_next((const unsigned char *)s + k, b - k, &cp);
            if (!uni_space(cp)) {
                break;
            }
            b = k;
        }
        return buf_append(out, s + a, b - a);
    }
    case TOK_NORM_PRECOMPILED:
        return precompiled_hf(&t->charsmap, s, n, out);
    default:
        return buf_append(out, s, n);
    }
}

/* ---------------------------------------------------------------- pre-tokenizers */

int tok__split_unicode(tok__pre_kind kind, const char *s, size_t n,
                       int (*add)(void *ctx, const char *p, size_t len), void *ctx)
{
    size_t start = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        int32_t cp;
        size_t l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (uni_space(cp)) {
            if (i > start) {
                rc = add(ctx, s + start, i - start);
            }
            start = i + l;
        } else if (kind == TOK_PRE_BERT && uni_bert_punct(cp)) {
            if (i > start) {
                rc = add(ctx, s + start, i - start);
            }
            if (rc == 0) {
                rc = add(ctx, s + i, l);
            }
            start = i + l;
        }
        i += l;
    }
    if (rc == 0 && n > start) {
        rc = add(ctx, s + start, n - start);
    }
    return rc;
}
