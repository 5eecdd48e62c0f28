/* Standard base64 (RFC 4648 alphabet) decoding, for data embedded in JSON files (a tokenizer's
 * precompiled charsmap). */
#ifndef TANDEM_LIB_BASE64_H
#define TANDEM_LIB_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Decodes n characters of s (padding optional; nothing but '=' may follow it) into *out,
 * malloc'd, *len bytes. 0, -EINVAL for a character outside the alphabet (whitespace included),
 * or -ENOMEM. */
int tandem_base64_decode(const char *s, size_t n, uint8_t **out, size_t *len);

#endif
