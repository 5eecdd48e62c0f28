/*
 * Fuzz target: encode random bytes with small built-in vocabularies (byte-level BPE, SPM, Unigram
 * with a precompiled charsmap, WordPiece), decode them back, and check that byte-level BPE
 * round-trips valid UTF-8 exactly and that the incremental detokenizer agrees with the full
 * decode.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tok_internal.h"
#include "engine/tokenizer/tokenizer.h"
#include "lib/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char texts[300][16];
static model_str toks[300];
static int32_t types[300];
static float scores[300];

static tokenizer *build(bool spm)
{
    size_t n = 0;
    if (spm) {
        const char *fixed[] = {"<unk>", "<s>", "</s>"};
        for (size_t i = 0; i < 3; i++) {
            snprintf(texts[n], sizeof(texts[n]), "%s", fixed[i]);
            types[n++] = i == 0 ? 2 : 3;
        }
        for (int b = 0; b < 256; b++) {
            snprintf(texts[n], sizeof(texts[n]), "<0x%02X>", b);
            types[n++] = 6;
        }
        const char *p[] = {"\xE2\x96\x81",
                           "a",
                           "b",
                           "ab",
                           "\xE2\x96\x81"
                           "a",
                           "\xE2\x96\x81"
                           "ab"};
        for (size_t i = 0; i < ARRAY_SIZE(p); i++) {
            snprintf(texts[n], sizeof(texts[n]), "%s", p[i]);
            scores[n] = -(float)i;
            types[n++] = 1;
        }
    } else {
        for (int b = 0; b < 256; b++) {
            memset(texts[n], 0, sizeof(texts[n]));
            tandem_utf8_put(texts[n], tok__byte_to_cp((unsigned char)b));
            types[n++] = 1;
        }
        snprintf(texts[n], sizeof(texts[n]), "ab");
        types[n++] = 1;
        snprintf(texts[n], sizeof(texts[n]), "<|end|>");
        types[n++] = 3;
    }
    for (size_t i = 0; i < n; i++) {
        toks[i] = (model_str){texts[i], (uint32_t)strlen(texts[i])};
    }
    static char merge[] = "a b";
    model_str m = {merge, 3};
    model_gguf_vocab v = {.model = spm ? "llama" : "gpt2",
                          .pre = spm ? NULL : "llama3",
                          .n_tokens = n,
                          .tokens = toks,
                          .scores = scores,
                          .token_types = types,
                          .n_merges = spm ? 0 : 1,
                          .merges = spm ? NULL : &m,
                          .bos_id = spm ? 1 : -1,
                          .eos_id = spm ? 2 : (int32_t)n - 1,
                          .unk_id = spm ? 0 : -1,
                          .pad_id = -1,
                          .eot_id = -1,
                          .add_bos = -1,
                          .add_eos = -1,
                          .add_space_prefix = -1};
    tokenizer *t = NULL;
    char err[256];
    if (tokenizer_load_gguf(&v, &t, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return t;
}

static void check(const tokenizer *t, const uint8_t *data, size_t size, bool exact)
{
    int32_t *ids = NULL;
    size_t n = 0;
    TANDEM_ASSERT(tokenizer_encode(t, (const char *)data, size, false, size % 2 == 0, &ids, &n) ==
                  0);
    char *full = NULL;
    size_t fl = 0;
    TANDEM_ASSERT(tokenizer_decode(t, ids, n, false, &full, &fl) == 0);
    bool valid = true;
    for (size_t i = 0; i < size && valid;) {
        size_t l = tandem_utf8_seq_len(data + i, size - i);
        valid = l > 0;
        i += l;
    }
    if (exact && valid) {
        TANDEM_ASSERT(fl == size && memcmp(full, data, size) == 0);
    }
    detok d;
    detok_init(&d, t, false);
    size_t off = 0;
    for (size_t i = 0; i <= n; i++) {
        char *delta = NULL;
        size_t dl = 0;
        TANDEM_ASSERT(
            (i < n ? detok_push(&d, ids[i], &delta, &dl) : detok_flush(&d, &delta, &dl)) == 0);
        TANDEM_ASSERT(off + dl <= fl && memcmp(full + off, delta, dl) == 0);
        off += dl;
        free(delta);
    }
    TANDEM_ASSERT(off == fl);
    free(full);
    free(ids);
}

/* GGUF "t5" (with a one-rule charsmap, "Q" → "k", and a user-defined token) or "bert". */
static tokenizer *build_ugm_wpm(bool ugm)
{
    /* octal escapes: U+2581 is \342\226\201, U+4E2D is \344\270\255 */
    static const char *const ugm_toks[] = {
        "<pad>", "</s>", "<unk>", "\342\226\201", "\342\226\201a", "b", "ab", "k", "<x>"};
    static const char *const wpm_toks[] = {"[PAD]",
                                           "[UNK]",
                                           "[CLS]",
                                           "[SEP]",
                                           "\342\226\201a",
                                           "b",
                                           "\342\226\201,",
                                           "\342\226\201\344\270\255",
                                           "ab"};
    static model_str mt[9];
    static int32_t ty[9];
    static float sc[9];
    static uint8_t cm[4 + 256 * 4 + 2];
    const char *const *tk = ugm ? ugm_toks : wpm_toks;
    for (size_t i = 0; i < 9; i++) {
        mt[i] = (model_str){tk[i], (uint32_t)strlen(tk[i])};
        ty[i] = i < (ugm ? 2u : 4u) ? 3 : (ugm && i == 2) ? 2 : (ugm && i == 8) ? 4 : 1;
        sc[i] = -(float)i;
    }
    uint32_t units[256] = {0}; /* one darts-clone block: base ^ byte stays inside */
    units[0] = 1u << 10;       /* root: children at 1 ^ byte */
    units[1 ^ 'Q'] = ((uint32_t)((1 ^ 'Q') ^ 2) << 10) | (1u << 8) | 'Q'; /* leaf → value at 2 */
    units[2] = 0x80000000u; /* replacement at offset 0 */
    uint32_t trie = sizeof(units);
    memcpy(cm, &trie, 4);
    memcpy(cm + 4, units, sizeof(units));
    memcpy(cm + 4 + sizeof(units), "k", 2);
    model_gguf_vocab v = {.model = ugm ? "t5" : "bert",
                          .n_tokens = 9,
                          .tokens = mt,
                          .scores = sc,
                          .token_types = ty,
                          .bos_id = ugm ? -1 : 2,
                          .eos_id = ugm ? 1 : -1,
                          .unk_id = ugm ? 2 : 1,
                          .pad_id = 0,
                          .eot_id = -1,
                          .add_bos = -1,
                          .add_eos = -1,
                          .add_space_prefix = ugm ? 1 : -1};
    tokenizer_gguf_extra x;
    tokenizer_gguf_extra_init(&x);
    x.sep_id = 3;
    if (ugm) {
        x.precompiled_charsmap = cm;
        x.charsmap_len = sizeof(cm);
        x.remove_extra_whitespaces = 1;
    }
    tokenizer *t = NULL;
    char err[256];
    if (tokenizer_load_gguf_ext(&v, &x, &t, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tokenizer *bpe, *spm, *ugm, *wpm;
    if (!bpe) {
        bpe = build(false);
        spm = build(true);
        ugm = build_ugm_wpm(true);
        wpm = build_ugm_wpm(false);
    }
    check(bpe, data, size, true);
    check(spm, data, size, false);
    check(ugm, data, size, false);
    check(wpm, data, size, false);
    return 0;
}
