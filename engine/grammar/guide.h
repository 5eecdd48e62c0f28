/*
 * Guided decoding: the tokens a grammar allows next, as a logit mask (vLLM's structured output
 * with a grammar backend of our own).
 *
 * Three objects:
 *   guide_vocab    the tokenizer's vocabulary as a byte trie of token pieces, built once per
 *                  engine. Special tokens never match a grammar; end-of-generation tokens are
 *                  allowed exactly when the grammar may end.
 *   guide_grammar  a compiled grammar bound to a vocabulary, with its cache of masks. Shared by
 *                  every request that uses the same grammar (reference-counted; the registry
 *                  below hands them out).
 *   guide          one sequence: a matcher over the bytes generated so far.
 *
 * A mask is computed by walking the trie depth first from the matcher's stacks, one byte per
 * level, dropping a whole subtree as soon as its prefix is refused; tokens whose piece is
 * accepted to its end are allowed. The result is cached under the matcher's stack set (the
 * sorted hashes of its stacks), so a state met again, by this sequence or another one with the
 * same grammar, costs a table lookup: inside a JSON string or between array items, the state
 * repeats at every token. The cache holds at most GUIDE_CACHE_BYTES of masks per grammar and is
 * emptied when full.
 *
 * Thread-safety: vocabularies and grammars are immutable but for the mask cache, which has its
 * own lock; a guide belongs to one thread at a time; the registry has a lock.
 */
#ifndef TANDEM_ENGINE_GRAMMAR_GUIDE_H
#define TANDEM_ENGINE_GRAMMAR_GUIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/grammar.h"
#include "engine/tokenizer/tokenizer.h"

/* Memory bound: a registry's grammars hold at most GUIDE_REGISTRY_SLOTS * GUIDE_CACHE_BYTES of
 * masks (256 MiB; grammars still in use by requests after leaving the registry add theirs). A
 * mask is n_vocab / 8 bytes: 4 KB for a 32,000-token vocabulary, 19 KB for 152,000. */
#define GUIDE_CACHE_BYTES    ((size_t)8 << 20) /* masks kept per grammar */
#define GUIDE_REGISTRY_SLOTS 32                /* compiled grammars kept by a registry */

typedef struct guide_vocab guide_vocab;
typedef struct guide_grammar guide_grammar;
typedef struct guide guide;
typedef struct guide_registry guide_registry;

/* Builds the trie of t's token pieces for a model whose logits have n_vocab entries (ids past
 * the tokenizer's vocabulary are never allowed). eog_ids[0..n_eog) end the output. */
int guide_vocab_new(const tokenizer *t, int32_t n_vocab, const int32_t *eog_ids, size_t n_eog,
                    guide_vocab **out);
void guide_vocab_free(guide_vocab *v);

/* Binds g (ownership passes to the result, also on failure) to v (which must outlive it). The
 * result has one reference. */
int guide_grammar_new(grammar *g, const guide_vocab *v, guide_grammar **out);
guide_grammar *guide_grammar_ref(guide_grammar *gg);
void guide_grammar_unref(guide_grammar *gg);
const grammar *guide_grammar_get(const guide_grammar *gg);

/* A sequence at the grammar's start; takes a reference on gg. */
int guide_new(guide_grammar *gg, guide **out);
void guide_free(guide *gd);

/* Sets logits[id] = -inf for every id the grammar does not allow next (logits has the
 * vocabulary's n_vocab entries). Returns the number of allowed ids (when the grammar is at a
 * dead end, no piece continues it, the end-of-generation ids are allowed instead, so the count is
 * never 0 when the vocabulary has one), or -errno (-ENOMEM, -E2BIG from the matcher). */
int guide_mask(guide *gd, float *logits, int32_t n_vocab);

/* The allowed ids as a bitset of (n_vocab + 63) / 64 words (bit id % 64 of word id / 64), valid
 * until the next call on gd; the count as guide_mask's. For tests and tools. */
int guide_allowed(guide *gd, const uint64_t **bits);

/* Advances over token (the one appended to the sequence). 0, or -EINVAL when the grammar does not
 * allow it (the guide is unchanged), -ENOMEM. An end-of-generation id leaves the state as it is. */
int guide_accept(guide *gd, int32_t token);

/* The grammar accepts the output so far as complete / allows nothing more. */
bool guide_can_end(const guide *gd);
bool guide_must_end(const guide *gd);

/* Mask-cache counters of gg (hits, misses), for tests and benchmarks. */
void guide_grammar_stats(guide_grammar *gg, uint64_t *hits, uint64_t *misses);

/* ---- registry: compiled grammars by their GBNF text ---- */

guide_registry *guide_registry_new(void);
void guide_registry_free(guide_registry *r);

/* The grammar of GBNF gbnf[0..len) bound to v: the cached one when the same text (and
 * vocabulary) was compiled before, else compiled now and kept (least recently used one out).
 * *out gets a new reference. Compile errors as grammar_compile's. */
int guide_registry_get(guide_registry *r, const guide_vocab *v, const char *gbnf, size_t len,
                       guide_grammar **out, char *err, size_t errlen);

#endif /* TANDEM_ENGINE_GRAMMAR_GUIDE_H */
