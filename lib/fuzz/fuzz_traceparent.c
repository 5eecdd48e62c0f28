/*
 * Fuzz target for the traceparent parser (lib/trace.h). Besides crashes and sanitizer findings it
 * checks, for any input:
 *   - a rejection leaves the context invalid and says why;
 *   - an accepted value formats to a version-00 traceparent that parses back to the same context
 *     (ids and the sampled flag), with non-zero ids.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/common.h"
#include "lib/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) {
        return 0;
    }
    char *s = malloc(size + 1);
    if (!s) {
        return 0;
    }
    memcpy(s, data, size);
    s[size] = '\0'; /* a header value ends at the first NUL */
    struct trace_ctx c;
    char err[200] = "";
    int rc = trace_parse_traceparent(s, &c, err, sizeof err);
    if (rc != 0) {
        TANDEM_ASSERT(!c.valid && err[0]);
    } else {
        TANDEM_ASSERT(c.valid && (c.flags & ~TRACE_FLAG_SAMPLED) == 0);
        char out[TRACEPARENT_LEN + 1];
        trace_format_traceparent(&c, out);
        TANDEM_ASSERT(strlen(out) == TRACEPARENT_LEN);
        struct trace_ctx back;
        TANDEM_ASSERT(trace_parse_traceparent(out, &back, NULL, 0) == 0);
        TANDEM_ASSERT(memcmp(back.trace_id, c.trace_id, 16) == 0);
        TANDEM_ASSERT(memcmp(back.span_id, c.span_id, 8) == 0);
        TANDEM_ASSERT(back.flags == c.flags);
        static const uint8_t zero[16];
        TANDEM_ASSERT(memcmp(c.trace_id, zero, 16) != 0 && memcmp(c.span_id, zero, 8) != 0);
    }
    free(s);
    return 0;
}
