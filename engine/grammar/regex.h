/*
 * Regular expressions to GBNF: the front end for vLLM's guided_regex (and for JSON schema
 * "pattern"/"format"), turning a Python re / JavaScript pattern into one GBNF expression that
 * engine/grammar/grammar.h compiles.
 *
 * Supported: literals (UTF-8; classes and `.` are over code points); escapes \d \w \s and their
 * complements, read so that what is generated matches in both ECMAScript and Python: \d is
 * [0-9] and \w [A-Za-z0-9_] (ECMAScript), \s the whitespace both agree on, while \D, \W, \S and
 * [^\d] ... leave out what either dialect puts in the set (\D: every Unicode decimal digit; \W:
 * every non-ASCII character, as Python counts letters of all scripts as word characters; \S:
 * all whitespace of either); \n \t \r \f \v \0 \a, \xHH, \x{H...}, \uHHHH (a UTF-16
 * pair of them is one character), \u{H...}, \UHHHHHHHH, and an escaped punctuation character
 * standing for itself (\. \\ \/ \- ...); [classes] with ranges, negation and those escapes (\b
 * is a backspace there); `.` (any code point that neither dialect calls a line terminator: all
 * but \n, \r, U+2028 and U+2029); groups ( ), (?: ), (?P<name> ) and (?<name> ); alternation |;
 * quantifiers * + ? {n} {n,} {n,m} and their lazy forms (a lazy quantifier matches the same
 * language). ^ at the start and $ at the end of a top-level alternative are accepted and ignored:
 * the match is always of the whole text.
 *
 * Refused (-EINVAL, the message names the construct and its byte offset): backreferences,
 * lookaround, \b \B \A \Z \z, inline flags (?i) etc., possessive quantifiers, ^ or $ elsewhere,
 * unbalanced parentheses or brackets, empty or reversed ranges, repetition counts above
 * REGEX_MAX_REPEAT, nesting deeper than REGEX_MAX_DEPTH, invalid UTF-8, surrogate code points.
 * Classes never contain surrogates (U+D800-U+DFFF): they have no UTF-8 form.
 *
 * The expression may have top-level alternatives: put it in ( ) to combine it with other terms.
 * The empty regex is written "" (an empty literal).
 */
#ifndef TANDEM_ENGINE_GRAMMAR_REGEX_H
#define TANDEM_ENGINE_GRAMMAR_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/buf.h"

#define REGEX_MAX_REPEAT 10000 /* largest count in {n,m} */
#define REGEX_MAX_DEPTH  64    /* nesting of groups */

/*
 * Appends to out a GBNF expression (one expression, no rule definitions, using only "literals",
 * [classes], ( ), |, * + ? {m,n}) that matches exactly the strings re[0..len) fully matches. The
 * text is plain ASCII: other characters are written as \xHH / \uHHHH / \UHHHHHHHH escapes.
 *
 * json_string: the expression matches instead the JSON-escaped form of those strings as it
 * appears between the quotes of a JSON string, with one canonical escape per character: '"'
 * becomes \", '\' becomes \\, U+0008 U+0009 U+000A U+000C U+000D become \b \t \n \f \r, other
 * characters below U+0020 become \u00XX (lowercase hex), and every other character (DEL and '/'
 * included) is written as itself.
 *
 * Returns 0, -EINVAL (bad or unsupported regex; message in err), -E2BIG (the expression would
 * pass out's cap or REGEX_MAX_* limits), -ENOMEM. On failure out may hold a partial expression
 * (and its sticky error may be set); the caller discards it.
 */
int regex_to_gbnf(const char *re, size_t len, bool json_string, struct buf *out, char *err,
                  size_t errlen);

#endif /* TANDEM_ENGINE_GRAMMAR_REGEX_H */
