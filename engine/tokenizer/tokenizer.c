/*
 * Tokenizer core: vocabulary tables, the encode pipeline (added-token split, normalizers,
 * pre-tokenizers, BPE/SPM models, BOS/EOS) and decoding (pieces, leading-space rules, UTF-8
 * sanitizing, incremental detokenization). Loading lives in tok_hf.c and tok_gguf.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef TOKENIZER_NO_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

#include "engine/tokenizer/tok_internal.h"
#include "lib/buf.h"
#include "lib/common.h"
#include "lib/err.h"

/* ---------------------------------------------------------------- helpers */

uint32_t tok__byte_to_cp(unsigned char b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
        return b;
    }
    /* The remaining 68 bytes map to 256.. in byte order. */
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++) {
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) {
            n++;
        }
    }
    return 256 + n;
}

size_t tok__utf8_next(const unsigned char *p, size_t n, int32_t *cp)
{
    size_t l = tandem_utf8_seq_len(p, n);
    if (l == 0) {
        *cp = -1;
        return 1;
    }
    uint32_t c = p[0];
    if (l == 2) {
        c = ((c & 0x1F) << 6) | (p[1] & 0x3F);
    } else if (l == 3) {
        c = ((c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    } else if (l == 4) {
        c = ((c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
            (p[3] & 0x3F);
    }
    *cp = (int32_t)c;
    return l;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* ---------------------------------------------------------------- construction */

tokenizer *tok__alloc(int32_t n_vocab)
{
    if (n_vocab <= 0 || n_vocab > TOKENIZER_MAX_VOCAB) {
        return NULL;
    }
    tokenizer *t = calloc(1, sizeof(*t));
    if (!t) {
        return NULL;
    }
    size_t n = (size_t)n_vocab;
    t->n_vocab = n_vocab;
    t->text = calloc(n, sizeof(*t->text));
    t->text_len = calloc(n, sizeof(*t->text_len));
    t->piece = calloc(n, sizeof(*t->piece));
    t->piece_len = calloc(n, sizeof(*t->piece_len));
    t->flags = calloc(n, sizeof(*t->flags));
    if (!t->text || !t->text_len || !t->piece || !t->piece_len || !t->flags) {
        tokenizer_free(t);
        return NULL;
    }
    for (int i = 0; i < 256; i++) {
        t->byte_sym[i] = -1;
        t->byte_tok[i] = -1;
    }
    t->unk_id = -1;
    t->bos = -1;
    t->eos = -1;
    return t;
}

int tok__set_text(tokenizer *t, int32_t id, const char *s, size_t len)
{
    TANDEM_ASSERT(id >= 0 && id < t->n_vocab);
    if (len > UINT32_MAX - 1) {
        return -E2BIG;
    }
    char *c = malloc(len + 1);
    if (!c) {
        return -ENOMEM;
    }
    if (len) {
        memcpy(c, s, len);
    }
    c[len] = '\0';
    free(t->text[id]);
    t->text[id] = c;
    t->text_len[id] = (uint32_t)len;
    return 0;
}

int tok__build_map(tokenizer *t)
{
    size_t cap = 16;
    while (cap < (size_t)t->n_vocab * 2) {
        cap <<= 1;
    }
    free(t->map);
    t->map = malloc(cap * sizeof(*t->map));
    if (!t->map) {
        return -ENOMEM;
    }
    memset(t->map, 0xff, cap * sizeof(*t->map));
    t->map_mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->text[id]) {
            continue;
        }
        size_t h = hash_bytes(t->text[id], t->text_len[id]) & t->map_mask;
        for (;;) {
            int32_t o = t->map[h];
            if (o < 0) {
                t->map[h] = id;
                break;
            }
            if (t->text_len[o] == t->text_len[id] &&
                memcmp(t->text[o], t->text[id], t->text_len[id]) == 0) {
                break; /* duplicate text: the lower id wins */
            }
            h = (h + 1) & t->map_mask;
        }
    }
    return 0;
}

static int32_t map_find(const tokenizer *t, const char *s, size_t n)
{
    if (!t->map) {
        return -1;
    }
    size_t h = hash_bytes(s, n) & t->map_mask;
    for (;;) {
        int32_t o = t->map[h];
        if (o < 0) {
            return -1;
        }
        if (t->text_len[o] == n && memcmp(t->text[o], s, n) == 0) {
            return o;
        }
        h = (h + 1) & t->map_mask;
    }
}

int32_t tok__find(const tokenizer *t, const char *s, size_t n)
{
    return map_find(t, s, n);
}

int tok__merges_reserve(tokenizer *t, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 2) {
        cap <<= 1;
    }
    t->mkeys = calloc(cap, sizeof(*t->mkeys));
    t->mrank = malloc(cap * sizeof(*t->mrank));
    t->mres = malloc(cap * sizeof(*t->mres));
    if (!t->mkeys || !t->mrank || !t->mres) {
        return -ENOMEM;
    }
    t->mmask = cap - 1;
    return 0;
}

int tok__add_merge(tokenizer *t, int32_t left, int32_t right, int32_t result, int32_t rank)
{
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t h = hash_u64(key) & t->mmask;
    while (t->mkeys[h] != 0) {
        if (t->mkeys[h] == key) {
            return 0;
        }
        h = (h + 1) & t->mmask;
    }
    t->mkeys[h] = key;
    t->mrank[h] = rank;
    t->mres[h] = result;
    return 0;
}

/* Rank of merging (left, right), or -1; *res receives the merged id. */
static int32_t merge_find(const tokenizer *t, int32_t left, int32_t right, int32_t *res)
{
    if (!t->mkeys) {
        return -1;
    }
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t h = hash_u64(key) & t->mmask;
    while (t->mkeys[h] != 0) {
        if (t->mkeys[h] == key) {
            *res = t->mres[h];
            return t->mrank[h];
        }
        h = (h + 1) & t->mmask;
    }
    return -1;
}

int tok__add_added(tokenizer *t, int32_t id, bool special, bool lstrip, bool rstrip,
                   bool single_word)
{
    if (id < 0 || id >= t->n_vocab || !t->text[id] || t->text_len[id] == 0) {
        return -EINVAL;
    }
    for (size_t i = 0; i < t->n_added; i++) {
        if (t->added[i].id == id) {
            t->added[i].special = special;
            t->added[i].lstrip = lstrip;
            t->added[i].rstrip = rstrip;
            t->added[i].single_word = single_word;
            return 0;
        }
    }
    tok__added *a = realloc(t->added, (t->n_added + 1) * sizeof(*a));
    if (!a) {
        return -ENOMEM;
    }
    t->added = a;
    a[t->n_added++] = (tok__added){.id = id,
                                   .s = t->text[id],
                                   .len = t->text_len[id],
                                   .special = special,
                                   .lstrip = lstrip,
                                   .rstrip = rstrip,
                                   .single_word = single_word};
    t->flags[id] |= TOKF_ADDED;
    if (special) {
        t->flags[id] |= TOKF_SPECIAL;
    }
    return 0;
}

static int added_cmp(const void *a, const void *b)
{
    const tok__added *x = a, *y = b;
    if (x->len != y->len) {
        return x->len > y->len ? -1 : 1;
    }
    return x->id < y->id ? -1 : (x->id > y->id);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

/* <0xXX> → byte value, else -1. */
static int byte_token_value(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') {
        return -1;
    }
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

#define PIECE_GROWTH 4 /* a token's decoded bytes are at most this many times its text */

/* Computes the decoded bytes of token id; -ENOSPC when they would outgrow PIECE_GROWTH. */
static int make_piece(tokenizer *t, int32_t id, int32_t *cp_to_byte)
{
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    struct buf b;
    /* Every rule below shrinks a token's text or keeps its length, except a Replace decoder whose
     * content is longer than its pattern: bounded here, so a vocabulary's pieces stay within
     * PIECE_GROWTH times its text (plus a little for empty tokens). */
    buf_init(&b, PIECE_GROWTH * n + 16);
    int rc = 0;
    int bv = byte_token_value(s, n);
    if (!s) {
        rc = buf_append(&b, "", 0);
    } else if (t->dec_wordpiece) {
        rc = tok__wordpiece_piece(t, id, &b);
    } else if ((t->flags[id] & TOKF_ADDED) && !(t->kind == TOKENIZER_SPM)) {
        /* added tokens: their text, with the decoder's Replace applied */
        size_t i = 0;
        while (i < n && rc == 0) {
            if (t->dec_from_len > 0 && n - i >= t->dec_from_len &&
                memcmp(s + i, t->dec_from, t->dec_from_len) == 0) {
                rc = buf_append(&b, t->dec_to, t->dec_to_len);
                i += t->dec_from_len;
            } else {
                rc = buf_append(&b, s + i, 1);
                i++;
            }
        }
    } else if (bv >= 0 && t->dec_byte_fallback) {
        unsigned char c = (unsigned char)bv;
        rc = buf_append(&b, &c, 1);
    } else if (t->dec_byte_level) {
        size_t i = 0;
        while (i < n && rc == 0) {
            int32_t cp;
            size_t l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
            if (cp >= 0 && cp < 512 && cp_to_byte[cp] >= 0) {
                unsigned char c = (unsigned char)cp_to_byte[cp];
                rc = buf_append(&b, &c, 1);
            } else {
                rc = buf_append(&b, s + i, l);
            }
            i += l;
        }
    } else {
        size_t i = 0;
        while (i < n && rc == 0) {
            if (t->dec_from_len > 0 && n - i >= t->dec_from_len &&
                memcmp(s + i, t->dec_from, t->dec_from_len) == 0) {
                rc = buf_append(&b, t->dec_to, t->dec_to_len);
                i += t->dec_from_len;
            } else {
                rc = buf_append(&b, s + i, 1);
                i++;
            }
        }
    }
    if (rc == 0 && !b.data) {
        rc = buf_append(&b, "", 0);
    }
    if (rc != 0) {
        buf_free(&b);
        return rc;
    }
    size_t len = 0;
    t->piece[id] = buf_detach(&b, &len);
    t->piece_len[id] = (uint32_t)len;
    return 0;
}

int tok__finish(tokenizer *t, char *err, size_t errlen)
{
    int32_t cp_to_byte[512];
    for (int i = 0; i < 512; i++) {
        cp_to_byte[i] = -1;
    }
    for (int b = 0; b < 256; b++) {
        cp_to_byte[tok__byte_to_cp((unsigned char)b)] = b;
    }
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->text[id]) {
            int rc = tok__set_text(t, id, "", 0);
            if (rc) {
                return rc;
            }
        }
    }
    int rc = tok__build_map(t);
    if (rc) {
        return tandem_fail(err, errlen, rc, "out of memory");
    }
    for (int b = 0; b < 256; b++) {
        char sym[4];
        size_t l = tandem_utf8_put(sym, tok__byte_to_cp((unsigned char)b));
        t->byte_sym[b] = map_find(t, sym, l);
        char hex[7];
        snprintf(hex, sizeof(hex), "<0x%02X>", b);
        int32_t id = map_find(t, hex, 6);
        t->byte_tok[b] = id;
        if (id >= 0) {
            t->flags[id] |= TOKF_BYTE;
        }
    }
    if (t->byte_level) {
        for (int b = 0; b < 256; b++) {
            if (t->byte_sym[b] < 0) {
                return tandem_fail(err, errlen, -EINVAL,
                                   "byte-level vocabulary lacks the symbol for byte 0x%02X", b);
            }
        }
    }
    if (t->n_added > 0) {
        qsort(t->added, t->n_added, sizeof(*t->added), added_cmp);
    }
    t->max_token_len = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->text_len[id] > t->max_token_len) {
            t->max_token_len = t->text_len[id];
        }
    }
    if (t->kind == TOKENIZER_UNIGRAM && tok__trie_build(t) != 0) {
        return tandem_fail(err, errlen, -ENOMEM, "out of memory");
    }
    memset(t->added_first, 0, sizeof(t->added_first));
    for (size_t i = 0; i < t->n_added; i++) {
        t->added_first[(unsigned char)t->added[i].s[0]] = 1;
    }
    for (int32_t id = 0; id < t->n_vocab; id++) {
        rc = make_piece(t, id, cp_to_byte);
        if (rc == -ENOSPC) {
            return tandem_fail(err, errlen, -EINVAL,
                               "decoder: token %d decodes to more than %d times its %u bytes "
                               "(a Replace content much longer than its pattern)",
                               (int)id, PIECE_GROWTH, (unsigned)t->text_len[id]);
        }
        if (rc) {
            return tandem_fail(err, errlen, rc, "out of memory");
        }
    }
    static const char *const eog_names[] = {
        "<|eot_id|>",    "<|im_end|>", "<end_of_turn>", "<|end_of_text|>",
        "<|endoftext|>", "<|eom_id|>", "<|end|>",       "<｜end▁of▁sentence｜>",
    };
    for (size_t i = 0; i < ARRAY_SIZE(eog_names); i++) {
        int32_t id = map_find(t, eog_names[i], strlen(eog_names[i]));
        if (id >= 0 && (t->flags[id] & TOKF_SPECIAL)) {
            t->flags[id] |= TOKF_EOG;
        }
    }
    if (t->eos >= 0) {
        t->flags[t->eos] |= TOKF_EOG;
    }
    return 0;
}

pcre2_code *tok__compile(const char *pat, size_t len, char *err, size_t errlen, const char *what)
{
    int ec = 0;
    PCRE2_SIZE off = 0;
    pcre2_code *re = pcre2_compile(
        (PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        tandem_fail(err, errlen, -EINVAL, "%s: bad regex at offset %zu: %s", what, (size_t)off,
                    (const char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter fallback when JIT fails */
    return re;
}

void tokenizer_free(tokenizer *t)
{
    if (!t) {
        return;
    }
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (t->text) {
            free(t->text[i]);
        }
        if (t->piece) {
            free(t->piece[i]);
        }
    }
    free(t->text);
    free(t->text_len);
    free(t->piece);
    free(t->piece_len);
    free(t->scores);
    free(t->flags);
    free(t->map);
    free(t->mkeys);
    free(t->mrank);
    free(t->mres);
    for (size_t i = 0; i < t->n_norms; i++) {
        pcre2_code_free(t->norms[i].re);
        free(t->norms[i].pat);
        free(t->norms[i].with);
    }
    free(t->norms);
    for (size_t i = 0; i < t->n_pres; i++) {
        pcre2_code_free(t->pres[i].re);
        free(t->pres[i].str);
    }
    free(t->pres);
    free(t->added);
    free(t->dec_from);
    free(t->dec_to);
    free(t->uscores);
    tok__trie_free(&t->trie);
    tok__trie_free(&t->utrie);
    tok__charsmap_free(&t->charsmap);
    free(t->wp_prefix);
    free(t);
}

/* ---------------------------------------------------------------- id vector */

typedef struct idvec {
    int32_t *v;
    size_t n, cap;
} idvec;

static int idvec_push(idvec *iv, int32_t id)
{
    int32_t *v = tandem_grow(iv->v, &iv->cap, iv->n + 1, sizeof(*v), 64);
    if (!v) {
        return -ENOMEM;
    }
    iv->v = v;
    iv->v[iv->n++] = id;
    return 0;
}

/* ---------------------------------------------------------------- word lists */

typedef struct words {
    struct buf text; /* all words' bytes back to back */
    size_t *off, *len;
    size_t n, cap;
} words;

static void words_init(words *w)
{
    memset(w, 0, sizeof(*w));
    buf_init(&w->text, TOKENIZER_MAX_TEXT_BYTES * 4);
}

static void words_free(words *w)
{
    buf_free(&w->text);
    free(w->off);
    free(w->len);
    memset(w, 0, sizeof(*w));
}

/* Appends a new word made of a then b (either may be empty; the word is dropped if both are). */
static int words_add2(words *w, const char *a, size_t na, const char *b, size_t nb)
{
    if (na + nb == 0) {
        return 0;
    }
    /* off and len share one capacity: grow each from a copy, then record it */
    size_t off_cap = w->cap, len_cap = w->cap;
    size_t *o = tandem_grow(w->off, &off_cap, w->n + 1, sizeof(*o), 32);
    if (!o) {
        return -ENOMEM;
    }
    w->off = o;
    size_t *l = tandem_grow(w->len, &len_cap, w->n + 1, sizeof(*l), 32);
    if (!l) {
        return -ENOMEM;
    }
    w->len = l;
    w->cap = len_cap;
    w->off[w->n] = w->text.len;
    w->len[w->n] = na + nb;
    int rc = buf_append(&w->text, a, na);
    if (rc == 0) {
        rc = buf_append(&w->text, b, nb);
    }
    if (rc) {
        return rc;
    }
    w->n++;
    return 0;
}

static int words_add1(void *w, const char *a, size_t na)
{
    return words_add2(w, a, na, NULL, 0);
}

/* Appends bytes to the last word. */
static int words_extend(words *w, const char *a, size_t na)
{
    TANDEM_ASSERT(w->n > 0);
    int rc = buf_append(&w->text, a, na);
    if (rc == 0) {
        w->len[w->n - 1] += na;
    }
    return rc;
}

/* Splits word s[0..n) by the matches of p into out, per p's behaviour. */
static int split_word(const tok__pre *p, const char *s, size_t n, words *out, pcre2_match_data *md)
{
    size_t pos = 0;
    int rc = 0;
    bool pending_next = false; /* MergedWithNext: last word waits for the next piece */
    bool last_was_match = false;
    bool have_last = false;
    while (pos <= n && rc == 0) {
        size_t ms, me;
        bool found = false;
        if (p->re) {
            int m = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
            if (m > 0) {
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                ms = ov[0];
                me = ov[1];
                found = true;
                if (me == ms) { /* empty match: skip a character */
                    if (ms >= n) {
                        found = false;
                    } else {
                        int32_t cp;
                        pos = ms + tok__utf8_next((const unsigned char *)s + ms, n - ms, &cp);
                        continue;
                    }
                }
            } else if (m != PCRE2_ERROR_NOMATCH) {
                return -EINVAL;
            }
        } else if (p->str_len > 0 && pos < n) {
            const char *f = memmem(s + pos, n - pos, p->str, p->str_len);
            if (f) {
                ms = (size_t)(f - s);
                me = ms + p->str_len;
                found = true;
            }
        }
        if (!found) {
            ms = me = n;
        }
        /* piece [pos, ms) is a gap, [ms, me) a match; invert swaps the roles */
        for (int part = 0; part < 2 && rc == 0; part++) {
            size_t a = part == 0 ? pos : ms, b = part == 0 ? ms : me;
            if (b <= a) {
                continue;
            }
            bool is_match = (part == 1) != p->invert;
            switch (p->behavior) {
            case TOK_SPLIT_ISOLATED:
                rc = words_add2(out, s + a, b - a, NULL, 0);
                break;
            case TOK_SPLIT_REMOVED:
                if (!is_match) {
                    rc = words_add2(out, s + a, b - a, NULL, 0);
                }
                break;
            case TOK_SPLIT_MERGED_PREV:
                if (is_match && have_last) {
                    rc = words_extend(out, s + a, b - a);
                } else {
                    rc = words_add2(out, s + a, b - a, NULL, 0);
                }
                break;
            case TOK_SPLIT_MERGED_NEXT:
                if (pending_next) {
                    rc = words_extend(out, s + a, b - a);
                } else {
                    rc = words_add2(out, s + a, b - a, NULL, 0);
                }
                pending_next = is_match;
                break;
            case TOK_SPLIT_CONTIGUOUS:
                if (is_match && last_was_match && have_last) {
                    rc = words_extend(out, s + a, b - a);
                } else {
                    rc = words_add2(out, s + a, b - a, NULL, 0);
                }
                break;
            }
            have_last = true;
            last_was_match = is_match;
        }
        if (!found) {
            break;
        }
        pos = me;
    }
    return rc;
}

/* Runs the pre-tokenizer steps over one normalized section. */
static int pretokenize(const tokenizer *t, const char *s, size_t n, size_t section, words *out)
{
    words cur, next;
    words_init(&cur);
    words_init(&next);
    pcre2_match_data *md = NULL;
    int rc = words_add2(&cur, s, n, NULL, 0);
    for (size_t k = 0; k < t->n_pres && rc == 0; k++) {
        const tok__pre *p = &t->pres[k];
        words_free(&next);
        words_init(&next);
        if (p->kind == TOK_PRE_METASPACE) {
            for (size_t i = 0; i < cur.n && rc == 0; i++) {
                const char *w = cur.text.data + cur.off[i];
                size_t wl = cur.len[i];
                struct buf b;
                buf_init(&b, TOKENIZER_MAX_TEXT_BYTES * 4);
                bool pre = p->add_prefix && (!p->prefix_first || (section == 0 && i == 0));
                if (pre && !(wl >= p->str_len && memcmp(w, p->str, p->str_len) == 0) &&
                    !(wl > 0 && w[0] == ' ')) {
                    rc = buf_append(&b, p->str, p->str_len);
                }
                for (size_t j = 0; j < wl && rc == 0; j++) {
                    rc =
                        w[j] == ' ' ? buf_append(&b, p->str, p->str_len) : buf_append(&b, w + j, 1);
                }
                if (rc == 0 && b.len > 0) {
                    if (p->meta_split) {
                        tok__pre sp = {.kind = TOK_PRE_SPLIT,
                                       .behavior = TOK_SPLIT_MERGED_NEXT,
                                       .str = p->str,
                                       .str_len = p->str_len};
                        rc = split_word(&sp, b.data, b.len, &next, NULL);
                    } else {
                        rc = words_add2(&next, b.data, b.len, NULL, 0);
                    }
                }
                buf_free(&b);
            }
        } else if (p->kind == TOK_PRE_WHITESPACE_SPLIT || p->kind == TOK_PRE_BERT) {
            for (size_t i = 0; i < cur.n && rc == 0; i++) {
                rc = tok__split_unicode(p->kind, cur.text.data + cur.off[i], cur.len[i], words_add1,
                                        &next);
            }
        } else if (p->kind == TOK_PRE_BYTELEVEL) {
            if (p->re && !md) {
                md = pcre2_match_data_create_from_pattern(p->re, NULL);
                if (!md) {
                    rc = -ENOMEM;
                    break;
                }
            }
            for (size_t i = 0; i < cur.n && rc == 0; i++) {
                const char *w = cur.text.data + cur.off[i];
                size_t wl = cur.len[i];
                if (p->re) {
                    struct buf b;
                    buf_init(&b, TOKENIZER_MAX_TEXT_BYTES * 4);
                    if (p->add_prefix && (wl == 0 || w[0] != ' ')) {
                        rc = buf_append(&b, " ", 1);
                    }
                    if (rc == 0) {
                        rc = buf_append(&b, w, wl);
                    }
                    if (rc == 0) {
                        rc = split_word(p, b.data, b.len, &next, md);
                    }
                    buf_free(&b);
                } else if (p->add_prefix && (wl == 0 || w[0] != ' ')) {
                    rc = words_add2(&next, " ", 1, w, wl);
                } else {
                    rc = words_add2(&next, w, wl, NULL, 0);
                }
            }
        } else {
            if (p->re) {
                pcre2_match_data_free(md);
                md = pcre2_match_data_create_from_pattern(p->re, NULL);
                if (!md) {
                    rc = -ENOMEM;
                    break;
                }
            }
            for (size_t i = 0; i < cur.n && rc == 0; i++) {
                rc = split_word(p, cur.text.data + cur.off[i], cur.len[i], &next, md);
            }
            if (p->re) {
                pcre2_match_data_free(md);
                md = NULL;
            }
        }
        words tmp = cur;
        cur = next;
        next = tmp;
    }
    pcre2_match_data_free(md);
    words_free(&next);
    if (rc) {
        words_free(&cur);
        return rc;
    }
    *out = cur;
    return 0;
}

/* ---------------------------------------------------------------- normalizers */

static int nfc(const char *s, size_t n, struct buf *out)
{
    bool ascii = true;
    for (size_t i = 0; i < n && ascii; i++) {
        ascii = (unsigned char)s[i] < 0x80;
    }
    for (size_t i = 0; i < n && !ascii;) {
        size_t l = tandem_utf8_seq_len((const unsigned char *)s + i, n - i);
        if (l == 0) {
            ascii = true; /* not valid UTF-8: left as it is (documented) */
        }
        i += l ? l : 1;
    }
    if (ascii || n > INT32_MAX / 16) {
        return buf_append(out, s, n);
    }
#ifdef TOKENIZER_NO_ICU
    return buf_append(out, s, n); /* built without ICU: NFC is the identity (documented) */
#else
    UErrorCode ue = U_ZERO_ERROR;
    const UNormalizer2 *norm = unorm2_getNFCInstance(&ue);
    if (U_FAILURE(ue)) {
        return buf_append(out, s, n);
    }
    int32_t cap16 = (int32_t)n + 16;
    UChar *u16 = malloc((size_t)cap16 * sizeof(UChar));
    UChar *n16 = malloc((size_t)cap16 * 3 * sizeof(UChar));
    char *u8 = malloc((size_t)cap16 * 9);
    int rc = -ENOMEM;
    if (!u16 || !n16 || !u8) {
        goto out_free;
    }
    int32_t l16 = 0;
    u_strFromUTF8(u16, cap16, &l16, s, (int32_t)n, &ue);
    int32_t ln = U_SUCCESS(ue) ? unorm2_normalize(norm, u16, l16, n16, cap16 * 3, &ue) : 0;
    int32_t l8 = 0;
    if (U_SUCCESS(ue)) {
        u_strToUTF8(u8, cap16 * 9, &l8, n16, ln, &ue);
    }
    rc = U_SUCCESS(ue) ? buf_append(out, u8, (size_t)l8) : buf_append(out, s, n);
out_free:
    free(u16);
    free(n16);
    free(u8);
    return rc;
#endif
}

static int normalize(const tokenizer *t, const char *s, size_t n, struct buf *out)
{
    struct buf cur;
    buf_init(&cur, TOKENIZER_MAX_TEXT_BYTES * 4);
    int rc = buf_append(&cur, s, n);
    for (size_t k = 0; k < t->n_norms && rc == 0; k++) {
        const tok__norm *m = &t->norms[k];
        struct buf nx;
        buf_init(&nx, TOKENIZER_MAX_TEXT_BYTES * 4);
        const char *c = cur.data ? cur.data : "";
        if (m->kind == TOK_NORM_NFC) {
            rc = nfc(c, cur.len, &nx);
        } else if (m->kind != TOK_NORM_PREPEND && m->kind != TOK_NORM_REPLACE) {
            rc = tok__normalize_unicode(t, m, c, cur.len, &nx);
        } else if (m->kind == TOK_NORM_PREPEND) {
            if (cur.len > 0) {
                rc = buf_append(&nx, m->pat, m->pat_len);
            }
            if (rc == 0) {
                rc = buf_append(&nx, c, cur.len);
            }
        } else if (m->re) {
            pcre2_match_data *md = pcre2_match_data_create_from_pattern(m->re, NULL);
            size_t pos = 0;
            rc = md ? 0 : -ENOMEM;
            while (rc == 0 && pos <= cur.len) {
                int r = pcre2_match(m->re, (PCRE2_SPTR)c, cur.len, pos, 0, md, NULL);
                if (r <= 0) {
                    break;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                rc = buf_append(&nx, c + pos, ov[0] - pos);
                if (rc == 0) {
                    rc = buf_append(&nx, m->with, m->with_len);
                }
                if (ov[1] == ov[0]) {
                    if (ov[0] < cur.len && rc == 0) {
                        rc = buf_append(&nx, c + ov[0], 1);
                    }
                    pos = ov[0] + 1;
                } else {
                    pos = ov[1];
                }
            }
            if (rc == 0 && pos < cur.len) {
                rc = buf_append(&nx, c + pos, cur.len - pos);
            }
            pcre2_match_data_free(md);
        } else {
            size_t pos = 0;
            while (rc == 0 && pos < cur.len) {
                const char *f =
                    m->pat_len ? memmem(c + pos, cur.len - pos, m->pat, m->pat_len) : NULL;
                if (!f) {
                    rc = buf_append(&nx, c + pos, cur.len - pos);
                    break;
                }
                rc = buf_append(&nx, c + pos, (size_t)(f - (c + pos)));
                if (rc == 0) {
                    rc = buf_append(&nx, m->with, m->with_len);
                }
                pos = (size_t)(f - c) + m->pat_len;
            }
        }
        buf_free(&cur);
        cur = nx;
    }
    if (rc == 0) {
        rc = buf_append(out, cur.data ? cur.data : "", cur.len);
    }
    buf_free(&cur);
    return rc;
}

/* ---------------------------------------------------------------- heaps */

/* A growable binary heap of TYPE named NAME (struct NAME {v, n, cap}), whose pop returns the
 * element for which BEFORE(x, others) holds: NAME##_push (0 or -ENOMEM) and NAME##_pop (the heap
 * must not be empty). Both merge loops use one: candidates by rank (BPE), bigrams by score (SPM).
 */
/* NAME and TYPE are an identifier and a type name, which cannot be parenthesized. */
// NOLINTBEGIN(bugprone-macro-parentheses)
#define TOK_HEAP(NAME, TYPE, BEFORE)                                                               \
    typedef struct NAME {                                                                          \
        TYPE *v;                                                                                   \
        size_t n, cap;                                                                             \
    } NAME;                                                                                        \
                                                                                                   \
    static int NAME##_push(NAME *h, TYPE c)                                                        \
    {                                                                                              \
        TYPE *v = tandem_grow(h->v, &h->cap, h->n + 1, sizeof(*v), 64);                            \
        if (!v) {                                                                                  \
            return -ENOMEM;                                                                        \
        }                                                                                          \
        h->v = v;                                                                                  \
        size_t i = h->n++;                                                                         \
        h->v[i] = c;                                                                               \
        while (i > 0) {                                                                            \
            size_t p = (i - 1) / 2;                                                                \
            if (!BEFORE(h->v[i], h->v[p])) {                                                       \
                break;                                                                             \
            }                                                                                      \
            TYPE tmp = h->v[i];                                                                    \
            h->v[i] = h->v[p];                                                                     \
            h->v[p] = tmp;                                                                         \
            i = p;                                                                                 \
        }                                                                                          \
        return 0;                                                                                  \
    }                                                                                              \
                                                                                                   \
    static TYPE NAME##_pop(NAME *h)                                                                \
    {                                                                                              \
        TYPE top = h->v[0];                                                                        \
        h->v[0] = h->v[--h->n];                                                                    \
        size_t i = 0;                                                                              \
        for (;;) {                                                                                 \
            size_t l = 2 * i + 1, r = l + 1, m = i;                                                \
            if (l < h->n && BEFORE(h->v[l], h->v[m])) {                                            \
                m = l;                                                                             \
            }                                                                                      \
            if (r < h->n && BEFORE(h->v[r], h->v[m])) {                                            \
                m = r;                                                                             \
            }                                                                                      \
            if (m == i) {                                                                          \
                break;                                                                             \
            }                                                                                      \
            TYPE tmp = h->v[i];                                                                    \
            h->v[i] = h->v[m];                                                                     \
            h->v[m] = tmp;                                                                         \
            i = m;                                                                                 \
        }                                                                                          \
        return top;                                                                                \
    }
// NOLINTEND(bugprone-macro-parentheses)

/* ---------------------------------------------------------------- BPE */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
} sym;

typedef struct cand {
    int32_t rank;
    int32_t left;
} cand;

static bool cand_less(cand a, cand b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.left < b.left);
}

TOK_HEAP(heap, cand, cand_less)

typedef struct scratch {
    sym *s;
    size_t cap;
    heap h;
    struct buf tmp;
} scratch;

static int scratch_syms(scratch *sc, size_t n)
{
    if (n > sc->cap) {
        sym *s = realloc(sc->s, n * sizeof(*s));
        if (!s) {
            return -ENOMEM;
        }
        sc->s = s;
        sc->cap = n;
    }
    return 0;
}

static int try_pair(const tokenizer *t, scratch *sc, int32_t left)
{
    if (left < 0 || sc->s[left].next < 0) {
        return 0;
    }
    int32_t res = -1;
    int32_t rank = merge_find(t, sc->s[left].id, sc->s[sc->s[left].next].id, &res);
    if (rank < 0) {
        return 0;
    }
    return heap_push(&sc->h, (cand){.rank = rank, .left = left});
}

static int bpe_word(const tokenizer *t, const char *w, size_t n, scratch *sc, idvec *out)
{
    if (n == 0) {
        return 0;
    }
    int rc;
    if (t->ignore_merges) {
        int32_t id;
        if (t->byte_level) {
            buf_reset(&sc->tmp);
            rc = 0;
            for (size_t i = 0; i < n && rc == 0; i++) {
                rc = buf_append(&sc->tmp, t->text[t->byte_sym[(unsigned char)w[i]]],
                                t->text_len[t->byte_sym[(unsigned char)w[i]]]);
            }
            if (rc) {
                return rc;
            }
            id = map_find(t, sc->tmp.data, sc->tmp.len);
        } else {
            id = map_find(t, w, n);
        }
        if (id >= 0) {
            return idvec_push(out, id);
        }
    }
    rc = scratch_syms(sc, n);
    if (rc) {
        return rc;
    }
    int32_t ns = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < n; i++) {
            sc->s[ns++].id = t->byte_sym[(unsigned char)w[i]];
        }
    } else {
        size_t i = 0;
        while (i < n) {
            int32_t cp;
            size_t l = tok__utf8_next((const unsigned char *)w + i, n - i, &cp);
            int32_t id = map_find(t, w + i, l);
            if (id >= 0) {
                sc->s[ns++].id = id;
            } else if (t->byte_fallback && t->byte_tok[(unsigned char)w[i]] >= 0) {
                for (size_t j = 0; j < l; j++) {
                    int32_t bt = t->byte_tok[(unsigned char)w[i + j]];
                    sc->s[ns++].id = bt >= 0 ? bt : t->unk_id;
                }
            } else if (t->unk_id >= 0) {
                if (!(t->fuse_unk && ns > 0 && sc->s[ns - 1].id == t->unk_id)) {
                    sc->s[ns++].id = t->unk_id;
                }
            }
            i += l;
        }
    }
    for (int32_t i = 0; i < ns; i++) {
        sc->s[i].prev = i - 1;
        sc->s[i].next = i + 1 < ns ? i + 1 : -1;
    }
    sc->h.n = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        rc = try_pair(t, sc, i);
        if (rc) {
            return rc;
        }
    }
    while (sc->h.n > 0) {
        cand c = heap_pop(&sc->h);
        sym *l = &sc->s[c.left];
        if (l->id < 0 || l->next < 0) {
            continue;
        }
        int32_t res = -1;
        int32_t rank = merge_find(t, l->id, sc->s[l->next].id, &res);
        if (rank != c.rank) {
            continue; /* stale entry */
        }
        sym *r = &sc->s[l->next];
        l->id = res;
        r->id = -1;
        l->next = r->next;
        if (r->next >= 0) {
            sc->s[r->next].prev = c.left;
        }
        rc = try_pair(t, sc, l->prev);
        if (rc == 0) {
            rc = try_pair(t, sc, c.left);
        }
        if (rc) {
            return rc;
        }
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = sc->s[i].next) {
        rc = idvec_push(out, sc->s[i].id);
        if (rc) {
            return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- SPM */

typedef struct spm_sym {
    int32_t prev, next;
    size_t off, n; /* bytes of the text; n == 0 once merged away */
} spm_sym;

typedef struct spm_big {
    float score;
    int32_t left;
    size_t size;
} spm_big;

static bool big_better(spm_big a, spm_big b)
{
    return a.score > b.score || (a.score == b.score && a.left < b.left);
}

TOK_HEAP(spm_heap, spm_big, big_better)

static int spm_try(const tokenizer *t, const char *s, spm_sym *sy, int32_t left, spm_heap *h)
{
    if (left < 0 || sy[left].next < 0) {
        return 0;
    }
    const spm_sym *r = &sy[sy[left].next];
    size_t size = sy[left].n + r->n;
    int32_t id = map_find(t, s + sy[left].off, size);
    if (id < 0) {
        return 0;
    }
    float score = t->scores ? t->scores[id] : 0.0f;
    return spm_heap_push(h, (spm_big){.score = score, .left = left, .size = size});
}

static int spm_text(const tokenizer *t, const char *s, size_t n, idvec *out)
{
    if (n == 0) {
        return 0;
    }
    spm_sym *sy = malloc(n * sizeof(*sy));
    spm_heap h = {0};
    int rc = sy ? 0 : -ENOMEM;
    int32_t ns = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        int32_t cp;
        size_t l = tok__utf8_next((const unsigned char *)s + i, n - i, &cp);
        sy[ns] = (spm_sym){.prev = ns - 1, .next = -1, .off = i, .n = l};
        if (ns > 0) {
            sy[ns - 1].next = ns;
        }
        ns++;
        i += l;
    }
    for (int32_t i = 0; i + 1 < ns && rc == 0; i++) {
        rc = spm_try(t, s, sy, i, &h);
    }
    while (rc == 0 && h.n > 0) {
        spm_big b = spm_heap_pop(&h);
        spm_sym *l = &sy[b.left];
        if (l->n == 0 || l->next < 0) {
            continue;
        }
        spm_sym *r = &sy[l->next];
        if (l->n + r->n != b.size) {
            continue; /* stale */
        }
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) {
            sy[r->next].prev = b.left;
        }
        rc = spm_try(t, s, sy, l->prev, &h);
        if (rc == 0) {
            rc = spm_try(t, s, sy, b.left, &h);
        }
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0 && rc == 0; i = sy[i].next) {
        int32_t id = map_find(t, s + sy[i].off, sy[i].n);
        if (id >= 0) {
            rc = idvec_push(out, id);
            continue;
        }
        for (size_t j = 0; j < sy[i].n && rc == 0; j++) {
            int32_t bt = t->byte_tok[(unsigned char)s[sy[i].off + j]];
            if (bt < 0) {
                bt = t->unk_id;
            }
            if (bt >= 0) {
                rc = idvec_push(out, bt);
            }
        }
    }
    free(sy);
    free(h.v);
    return rc;
}

/* ---------------------------------------------------------------- encode */

static bool is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_word_byte(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c >= 0x80;
}

/* Encodes one text fragment (no added tokens inside). */
static int encode_fragment(const tokenizer *t, const char *s, size_t n, size_t section,
                           bool prev_special, scratch *sc, idvec *out)
{
    int rc;
    if (t->kind == TOKENIZER_SPM) {
        struct buf b;
        buf_init(&b, TOKENIZER_MAX_TEXT_BYTES * 4);
        rc = 0;
        if (t->add_space_prefix && prev_special) {
            rc = buf_append(&b, "\xE2\x96\x81", 3);
        }
        for (size_t i = 0; i < n && rc == 0; i++) {
            rc = s[i] == ' ' ? buf_append(&b, "\xE2\x96\x81", 3) : buf_append(&b, s + i, 1);
        }
        if (rc == 0) {
            rc = spm_text(t, b.data, b.len, out);
        }
        buf_free(&b);
        return rc;
    }
    bool ugm = t->kind == TOKENIZER_UNIGRAM, wpm = t->kind == TOKENIZER_WORDPIECE;
    if ((ugm || wpm) && t->flavor == TOK_FLAVOR_GGUF) {
        return ugm ? tok__unigram(t, s, n, &out->v, &out->n, &out->cap)
                   : tok__wordpiece(t, s, n, &out->v, &out->n, &out->cap);
    }
    struct buf norm;
    buf_init(&norm, TOKENIZER_MAX_TEXT_BYTES * 4);
    rc = normalize(t, s, n, &norm);
    words w;
    memset(&w, 0, sizeof(w));
    if (rc == 0) {
        rc = pretokenize(t, norm.data ? norm.data : "", norm.len, section, &w);
    }
    for (size_t i = 0; i < w.n && rc == 0; i++) {
        const char *wd = w.text.data + w.off[i];
        if (ugm) {
            rc = tok__unigram(t, wd, w.len[i], &out->v, &out->n, &out->cap);
        } else if (wpm) {
            rc = tok__wordpiece(t, wd, w.len[i], &out->v, &out->n, &out->cap);
        } else {
            rc = bpe_word(t, wd, w.len[i], sc, out);
        }
    }
    words_free(&w);
    buf_free(&norm);
    return rc;
}

/* Longest added token matching at text[pos..len), or NULL. */
static const tok__added *match_added(const tokenizer *t, const char *text, size_t len, size_t pos,
                                     bool parse_special)
{
    for (size_t i = 0; i < t->n_added; i++) {
        const tok__added *a = &t->added[i];
        if ((a->special && !parse_special) || a->len > len - pos ||
            memcmp(text + pos, a->s, a->len) != 0) {
            continue;
        }
        if (a->single_word &&
            ((pos > 0 && is_word_byte((unsigned char)text[pos - 1])) ||
             (pos + a->len < len && is_word_byte((unsigned char)text[pos + a->len])))) {
            continue;
        }
        return a;
    }
    return NULL;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids, size_t *n_ids)
{
    if (!t || (!text && len > 0) || !ids || !n_ids) {
        return -EINVAL;
    }
    if (len > TOKENIZER_MAX_TEXT_BYTES) {
        return -E2BIG;
    }
    idvec out = {0};
    scratch sc;
    memset(&sc, 0, sizeof(sc));
    buf_init(&sc.tmp, TOKENIZER_MAX_TEXT_BYTES * 4);
    int rc = 0;
    if (add_special) {
        for (size_t i = 0; i < t->n_prefix && rc == 0; i++) {
            rc = idvec_push(&out, t->prefix_ids[i]);
        }
    }
    size_t pos = 0, seg = 0, section = 0;
    bool prev_special = true;
    while (rc == 0 && pos < len) {
        const tok__added *a = NULL;
        if (t->added_first[(unsigned char)text[pos]]) {
            a = match_added(t, text, len, pos, parse_special);
        }
        if (!a) {
            pos++;
            continue;
        }
        size_t end = pos;
        if (a->lstrip) {
            while (end > seg && is_space((unsigned char)text[end - 1])) {
                end--;
            }
        }
        if (end > seg) {
            rc = encode_fragment(t, text + seg, end - seg, section++, prev_special, &sc, &out);
        }
        if (rc == 0) {
            rc = idvec_push(&out, a->id);
        }
        prev_special = true;
        pos += a->len;
        if (a->rstrip) {
            while (pos < len && is_space((unsigned char)text[pos])) {
                pos++;
            }
        }
        seg = pos;
    }
    if (rc == 0 && len > seg) {
        rc = encode_fragment(t, text + seg, len - seg, section, prev_special, &sc, &out);
    }
    if (rc == 0 && add_special) {
        for (size_t i = 0; i < t->n_suffix && rc == 0; i++) {
            rc = idvec_push(&out, t->suffix_ids[i]);
        }
    }
    if (rc == 0 && !out.v) {
        out.v = malloc(sizeof(int32_t));
        rc = out.v ? 0 : -ENOMEM;
    }
    free(sc.s);
    free(sc.h.v);
    buf_free(&sc.tmp);
    if (rc) {
        free(out.v);
        return rc;
    }
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}

/* ---------------------------------------------------------------- decode */

/* Length a UTF-8 lead byte announces (0: not a lead byte). */
static size_t lead_len(unsigned char c)
{
    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        return 4;
    }
    return 0;
}

/* Whether p[0..n) (n < lead_len) can still become a valid sequence. */
static bool valid_prefix(const unsigned char *p, size_t n)
{
    unsigned char lo = 0x80, hi = 0xBF;
    if (p[0] == 0xE0) {
        lo = 0xA0;
    } else if (p[0] == 0xED) {
        hi = 0x9F;
    } else if (p[0] == 0xF0) {
        lo = 0x90;
    } else if (p[0] == 0xF4) {
        hi = 0x8F;
    }
    for (size_t i = 1; i < n; i++) {
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (p[i] < l || p[i] > h) {
            return false;
        }
    }
    return true;
}

/* Feeds bytes through the UTF-8 sanitizer of d into out: complete sequences pass, each byte of
 * an invalid one becomes U+FFFD, an unfinished one waits in d->pend (final: no more bytes come,
 * so it is invalid too). */
static int sanitize(detok *d, const char *s, size_t n, bool final, struct buf *out)
{
    size_t i = 0;
    for (;;) {
        while (i < n && d->n_pend < 4) {
            d->pend[d->n_pend++] = (unsigned char)s[i++];
        }
        while (d->n_pend > 0) {
            size_t need = lead_len(d->pend[0]);
            size_t take = 1;
            bool bad = true;
            if (need != 0 && d->n_pend < need) {
                if (i < n) {
                    break; /* refill first */
                }
                if (!final && valid_prefix(d->pend, d->n_pend)) {
                    return 0; /* wait for the rest of the sequence */
                }
            } else if (need != 0 && tandem_utf8_seq_len(d->pend, need) == need) {
                take = need;
                bad = false;
            }
            int rc = bad ? buf_append(out, "\xEF\xBF\xBD", 3) : buf_append(out, d->pend, take);
            if (rc) {
                return rc;
            }
            memmove(d->pend, d->pend + take, d->n_pend - take);
            d->n_pend -= take;
        }
        if (i >= n) {
            return 0;
        }
    }
}

static int detok_feed(detok *d, int32_t id, struct buf *out)
{
    const tokenizer *t = d->tok;
    if (id < 0 || id >= t->n_vocab) {
        return -EINVAL;
    }
    size_t idx = d->n_pushed++;
    if (d->skip_special && (t->flags[id] & TOKF_SPECIAL)) {
        if (idx == 0 && id == t->bos) {
            d->first_skipped_bos = true;
        }
        return 0;
    }
    const char *p = t->piece[id];
    size_t n = t->piece_len[id];
    if (t->strip_rule == TOK_STRIP_WORDPIECE && d->stripping) {
        p = t->text[id]; /* HF WordPiece decoder: the first token as it is */
        n = t->text_len[id];
        d->stripping = false;
    } else if (t->strip_rule == TOK_STRIP_SPM && idx == 0 && !d->first_skipped_bos && n > 0 &&
               p[0] == ' ') {
        p++;
        n--;
    } else if (t->strip_rule == TOK_STRIP_OUTPUT && d->stripping) {
        while (n > 0 && d->strip_left > 0 && p[0] == ' ') {
            p++;
            n--;
            d->strip_left--;
        }
        if (n > 0 || d->strip_left == 0) {
            d->stripping = false;
        }
    }
    return sanitize(d, p, n, false, out);
}

void detok_init(detok *d, const tokenizer *t, bool skip_special)
{
    memset(d, 0, sizeof(*d));
    d->tok = t;
    d->skip_special = skip_special;
    d->stripping = (t->strip_rule == TOK_STRIP_OUTPUT && t->strip_n > 0) ||
                   t->strip_rule == TOK_STRIP_WORDPIECE;
    d->strip_left = t->strip_n;
}

void detok_init_continuation(detok *d, const tokenizer *t, bool skip_special)
{
    detok_init(d, t, skip_special);
    d->n_pushed = 1; /* not the first id: the SPM rule does not apply */
    d->stripping = false;
    d->strip_left = 0;
}

static int finish_buf(struct buf *b, int rc, char **text, size_t *len)
{
    if (rc == 0 && !b->data) {
        rc = buf_append(b, "", 0);
    }
    if (rc) {
        buf_free(b);
        return rc;
    }
    size_t l = 0;
    *text = buf_detach(b, &l);
    if (len) {
        *len = l;
    }
    return 0;
}

int detok_push(detok *d, int32_t id, char **delta, size_t *len)
{
    struct buf b;
    buf_init(&b, (size_t)1 << 30);
    int rc = detok_feed(d, id, &b);
    return finish_buf(&b, rc, delta, len);
}

int detok_flush(detok *d, char **delta, size_t *len)
{
    struct buf b;
    buf_init(&b, (size_t)1 << 30);
    int rc = sanitize(d, NULL, 0, true, &b);
    return finish_buf(&b, rc, delta, len);
}

void detok_free(detok *d)
{
    if (d) {
        d->n_pend = 0;
    }
}

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                     char **text, size_t *len)
{
    if (!t || (!ids && n > 0) || !text) {
        return -EINVAL;
    }
    detok d;
    detok_init(&d, t, skip_special);
    struct buf b;
    buf_init(&b, TOKENIZER_MAX_TEXT_BYTES * 4);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = detok_feed(&d, ids[i], &b);
    }
    if (rc == 0) {
        rc = sanitize(&d, NULL, 0, true, &b);
    }
    return finish_buf(&b, rc, text, len);
}

/* ---------------------------------------------------------------- accessors */

tokenizer_kind tokenizer_get_kind(const tokenizer *t)
{
    return t->kind;
}

int32_t tokenizer_n_vocab(const tokenizer *t)
{
    return t->n_vocab;
}

int32_t tokenizer_bos(const tokenizer *t)
{
    return t->bos;
}

int32_t tokenizer_eos(const tokenizer *t)
{
    return t->eos;
}

const char *tokenizer_bos_text(const tokenizer *t)
{
    return t->bos >= 0 ? t->text[t->bos] : NULL;
}

const char *tokenizer_eos_text(const tokenizer *t)
{
    return t->eos >= 0 ? t->text[t->eos] : NULL;
}

bool tokenizer_adds_bos(const tokenizer *t)
{
    return t->n_prefix > 0;
}

bool tokenizer_adds_eos(const tokenizer *t)
{
    return t->n_suffix > 0;
}

bool tokenizer_is_eog(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOKF_EOG);
}

bool tokenizer_is_special(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOKF_SPECIAL);
}

int32_t tokenizer_token_id(const tokenizer *t, const char *text, size_t len)
{
    if (!text) {
        return -1;
    }
    return map_find(t, text, len);
}

const char *tokenizer_piece(const tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        return NULL;
    }
    if (len) {
        *len = t->piece_len[id];
    }
    return t->piece[id];
}
