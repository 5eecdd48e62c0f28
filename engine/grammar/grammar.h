/*
 * Grammars for structured output: a context-free grammar compiled to a byte-level pushdown
 * automaton, and a matcher that feeds it bytes.
 *
 * Source form is GBNF, llama.cpp's grammar notation (vLLM's guided_grammar):
 *
 *     root   ::= object
 *     object ::= "{" space (pair ("," space pair)*)? "}"     # comment
 *     pair   ::= [a-z]+ ":" space value
 *
 * Rules are `name ::= alternatives`, one per line (a rule continues on the next line after `|`,
 * `::=` or inside parentheses); names are [A-Za-z0-9_-]+; `root` is the start unless the caller
 * names another. Terms: "literal" (escapes \\ \" \n \r \t \xHH \uHHHH \UHHHHHHHH, and \[ \] \-
 * \^ \/), [class] and [^class] over Unicode code points with ranges a-z and the same escapes, `.`
 * (any code point), a rule name, ( group ); postfix * + ? {m} {m,} {m,n}.
 *
 * Compilation turns code-point classes into UTF-8 byte sequences, so the automaton reads bytes:
 * a token's piece is fed byte by byte, and a token that ends inside a UTF-8 sequence leaves the
 * matcher inside it. Repetitions are expanded into rules; a grammar larger than
 * GRAMMAR_MAX_ELEMENTS after expansion is refused (-E2BIG) rather than built.
 *
 * The matcher keeps the set of automaton stacks that the bytes so far can lead to (the grammar
 * may be ambiguous); left recursion is refused at compile time because it would make that set
 * infinite.
 *
 * Thread-safety: a compiled grammar is immutable; matchers belong to one thread at a time.
 * Errors: 0 or -errno (-EINVAL bad grammar or rejected bytes, -ENOMEM, -E2BIG); compile errors
 * write a message naming the rule and the offending text into err.
 */
#ifndef TANDEM_ENGINE_GRAMMAR_GRAMMAR_H
#define TANDEM_ENGINE_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAMMAR_MAX_TEXT     ((size_t)1 << 20) /* largest GBNF source accepted */
#define GRAMMAR_MAX_ELEMENTS (1 << 20)         /* compiled automaton size cap (elements) */
#define GRAMMAR_MAX_STACKS   4096              /* stacks a matcher may track at once */

typedef struct grammar grammar;
typedef struct grammar_matcher grammar_matcher;

/* Compiles GBNF text[0..len) with start rule `root` (NULL: "root"). On success *out owns the
 * grammar (grammar_free). */
int grammar_compile(const char *text, size_t len, const char *root, grammar **out, char *err,
                    size_t errlen);
void grammar_free(grammar *g);

/* A matcher at the start of g (g must outlive it). */
int grammar_matcher_new(const grammar *g, grammar_matcher **out);
void grammar_matcher_free(grammar_matcher *m);
/* Resets m to the start. */
void grammar_matcher_reset(grammar_matcher *m);

/* Feeds n bytes. 0 when the grammar accepts them (the matcher advanced), -EINVAL when it does not
 * (the matcher is unchanged), -E2BIG when the stack set would pass GRAMMAR_MAX_STACKS (unchanged),
 * -ENOMEM. */
int grammar_matcher_feed(grammar_matcher *m, const void *bytes, size_t n);

/* The bytes fed so far form a complete sentence (the output may end here). */
bool grammar_matcher_can_end(const grammar_matcher *m);
/* Nothing more can follow: the output must end here. */
bool grammar_matcher_must_end(const grammar_matcher *m);

/* 1 when s[0..n) is a complete sentence of g, 0 when not, -errno on failure. For tests. */
int grammar_match(const grammar *g, const void *s, size_t n);

#endif /* TANDEM_ENGINE_GRAMMAR_GRAMMAR_H */
