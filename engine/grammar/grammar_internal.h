/*
 * The compiled form of a grammar and the matcher's stacks, shared by grammar.c and guide.c (the
 * token-mask search walks the same automaton).
 *
 * A grammar is a flat array of elements. Each rule has alternatives; each alternative is a run of
 * elements that ends with GEL_END. A GEL_SET element reads one byte out of a 256-bit set; a GEL_REF
 * element calls a rule. Every code-point construct of GBNF was lowered to byte sets at compile
 * time, so the automaton never sees code points.
 *
 * A matcher's state is a set of stacks. A stack is a chain of nodes in the matcher's node pool
 * (indices, parent first: a node's parent always has the smaller index); the top node's element
 * is always a GEL_SET, the nodes below it are return positions. The empty stack (GSTACK_NIL)
 * means "the sentence may end here". Nodes are never freed one by one: a step appends to the
 * pool, a refused step or a mask search rolls the pool back to a mark, and grammar__compact
 * drops the nodes no live stack reaches.
 */
#ifndef TANDEM_ENGINE_GRAMMAR_GRAMMAR_INTERNAL_H
#define TANDEM_ENGINE_GRAMMAR_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/grammar.h"

enum { GEL_END = 0, GEL_SET = 1, GEL_REF = 2 };

struct gel {
    uint32_t kind; /* GEL_* */
    uint32_t arg;  /* GEL_SET: index into sets; GEL_REF: rule index */
};

struct grammar {
    struct gel *elems;
    uint32_t n_elems;
    uint64_t (*sets)[4]; /* byte sets, bit b of word b / 64 */
    uint32_t n_sets;
    uint32_t *alts;      /* first element of each alternative */
    uint32_t *rule_alt0; /* rule r's alternatives are alts[rule_alt0[r] .. + rule_nalts[r]) */
    uint32_t *rule_nalts;
    uint32_t n_rules;
    uint32_t root;
};

#define GSTACK_NIL UINT32_MAX

struct gnode {
    uint32_t pos;    /* element index */
    uint32_t parent; /* node index of the return position, GSTACK_NIL at the bottom */
    uint64_t hash;   /* of the whole chain: equal stacks have equal hashes */
};

struct grammar_matcher {
    const grammar *g;
    struct gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *cur; /* the current stack set */
    uint32_t n_cur, cap_cur;
    uint32_t *tmp; /* step output / rollback copy */
    uint32_t cap_tmp;
    uint32_t *save;
    uint32_t cap_save;
    struct gwork *work; /* expansion work list */
    uint32_t cap_work;
    uint32_t *seen; /* dedupe table of one step: stack indices + 1, 0 = empty */
    uint32_t *seen_gen;
    uint32_t gen;
    uint32_t cap_seen;           /* power of two */
    uint32_t budget;             /* expansion steps of the current byte (GRAMMAR_MAX_EXPANSION) */
    struct gvisit *visit;        /* (element, return stack) pairs expanded during this step */
    uint32_t cap_visit, n_visit; /* power of two; entries of this generation */
    uint32_t visit_gen;
};

#define GRAMMAR_MAX_EXPANSION (1u << 20) /* expansion steps one byte may take */

/* Computes the stacks that follow byte b from in[0..n_in) into out (at most cap entries), adding
 * nodes to m's pool. *n_out gets the count (0: b is refused). 0, -E2BIG (more than cap stacks),
 * -ENOMEM. in and out must not overlap. */
int grammar__step(grammar_matcher *m, const uint32_t *in, uint32_t n_in, uint8_t b, uint32_t *out,
                  uint32_t cap, uint32_t *n_out);

/* The bytes any stack of in[0..n) may read next, as a 256-bit set. */
void grammar__first_bytes(const grammar_matcher *m, const uint32_t *in, uint32_t n,
                          uint64_t bits[4]);

/* Drops the pool nodes that no current stack reaches when the pool has grown well past them.
 * 0 or -ENOMEM (the matcher is unchanged). */
int grammar__compact(grammar_matcher *m);

static inline bool grammar__set_has(const uint64_t set[4], unsigned b)
{
    return (set[b >> 6] >> (b & 63)) & 1u;
}

#endif /* TANDEM_ENGINE_GRAMMAR_GRAMMAR_INTERNAL_H */
