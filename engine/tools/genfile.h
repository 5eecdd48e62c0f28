/*
 * What the test-file generators (tandem-genmodel, tandem-genlora) share besides the values
 * (genquant.h): the per-tensor seed, writing whole files and safetensors files, and parsing their
 * flags with messages naming the program and the flag.
 */
#ifndef TANDEM_ENGINE_TOOLS_GENFILE_H
#define TANDEM_ENGINE_TOOLS_GENFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/buf.h"

/* FNV-1a of a tensor name: xor-ed with the seed, it seeds that tensor's values, so a tensor's
 * values do not depend on which other tensors a file has. */
uint64_t genf_name_hash(const char *s);

/* Writes len bytes to path (created or truncated). 0, or -EIO with err naming the path. */
int genf_write_bytes(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Writes a safetensors file: the 8-byte little-endian length of header (already padded), the
 * header, then tensor i's bytes from write_tensor(ud, i, f) for i < n, which returns 0, -ENOMEM
 * or -EIO. 0, or that code with err naming the path. */
int genf_write_safetensors(const char *path, const struct buf *header,
                           int (*write_tensor)(void *ud, size_t i, FILE *f), void *ud, size_t n,
                           char *err, size_t errlen);

/* Flag values: 0, or -EINVAL after "PROG: FLAG: ..." on stderr. */
int genf_parse_i64(const char *prog, const char *flag, const char *s, int64_t lo, int64_t hi,
                   int64_t *out);
/* A positive finite number up to 1e30. */
int genf_parse_positive(const char *prog, const char *flag, const char *s, double *out);
/* The index of s among names[0..n). */
int genf_pick(const char *prog, const char *flag, const char *s, const char *const *names, int n,
              int *out);

#endif
