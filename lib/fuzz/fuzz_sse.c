/*
 * Fuzz target for the SSE parser (lib/sse.h). Besides crashes and sanitizer findings it checks two
 * properties that must hold for any input:
 *   - chunking does not matter: the input parsed whole and parsed in pieces (sizes taken from the
 *     first byte) gives the same events, the same error and the same last id;
 *   - the writer and the parser agree: every event's data written back with sse_write_event parses
 *     to the same data.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/common.h"
#include "lib/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct trace {
    struct buf out;      /* all events, serialised */
    int check_roundtrip; /* re-encode each event and parse it again */
};

static int on_roundtrip_event(void *ud, const struct sse_event *ev)
{
    struct buf *got = ud;
    return buf_append(got, ev->data, ev->data_len) == 0 ? 0 : -ENOMEM;
}

static void roundtrip(const struct sse_event *ev)
{
    struct buf enc, got;
    struct sse_parser p;
    buf_init(&enc, 1 << 22);
    buf_init(&got, 1 << 22);
    /* a parsed type cannot hold CR or LF (the parser splits lines there), so writing succeeds */
    int rc = sse_write_event(&enc, ev->type, NULL, ev->data, ev->data_len);
    TANDEM_ASSERT(rc == 0);
    sse_parser_init(&p, 1 << 22, on_roundtrip_event, NULL, &got);
    TANDEM_ASSERT(sse_parser_feed(&p, enc.data, enc.len, NULL, 0) == 0);
    /* data came out of a parser, so it has no CR and survives unchanged */
    TANDEM_ASSERT(got.len == ev->data_len);
    TANDEM_ASSERT(ev->data_len == 0 || memcmp(got.data, ev->data, ev->data_len) == 0);
    sse_parser_deinit(&p);
    buf_free(&enc);
    buf_free(&got);
}

static int on_event(void *ud, const struct sse_event *ev)
{
    struct trace *t = ud;
    TANDEM_ASSERT(ev->type != NULL && ev->data != NULL && ev->id != NULL);
    TANDEM_ASSERT(ev->data[ev->data_len] == '\0');
    TANDEM_ASSERT(memchr(ev->data, '\r', ev->data_len) == NULL);
    if (t->check_roundtrip) {
        roundtrip(ev);
    }
    buf_appendf(&t->out, "%s\x1f%s\x1f%ld\x1f", ev->type, ev->id, ev->retry_ms);
    buf_append(&t->out, ev->data, ev->data_len);
    buf_append(&t->out, "\x1e", 1);
    return 0;
}

static int run(const uint8_t *data, size_t size, size_t chunk, size_t max_event, int roundtrip_on,
               struct buf *out, struct buf *last_id)
{
    struct trace t = {.check_roundtrip = roundtrip_on};
    struct sse_parser p;
    buf_init(&t.out, 1 << 24);
    sse_parser_init(&p, max_event, on_event, NULL, &t);
    int rc = 0;
    for (size_t i = 0; i < size && rc == 0; i += chunk) {
        size_t n = size - i < chunk ? size - i : chunk;
        rc = sse_parser_feed(&p, data + i, n, NULL, 0);
    }
    if (rc == 0) {
        rc = sse_parser_finish(&p);
    }
    buf_appends(last_id, sse_parser_last_id(&p));
    sse_parser_deinit(&p);
    *out = t.out;
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    size_t chunk = (size_t)(data[0] % 13) + 1;
    size_t max_event = (data[0] & 0x80) ? 64 : 4096;
    data++;
    size--;

    struct buf whole, pieces, id_whole, id_pieces;
    buf_init(&id_whole, 1 << 24);
    buf_init(&id_pieces, 1 << 24);
    int rc_whole = run(data, size, size ? size : 1, max_event, 1, &whole, &id_whole);
    int rc_pieces = run(data, size, chunk, max_event, 0, &pieces, &id_pieces);

    TANDEM_ASSERT(rc_whole == rc_pieces);
    TANDEM_ASSERT(whole.len == pieces.len);
    TANDEM_ASSERT(whole.len == 0 || memcmp(whole.data, pieces.data, whole.len) == 0);
    if (rc_whole == 0) {
        TANDEM_ASSERT(strcmp(buf_cstr(&id_whole), buf_cstr(&id_pieces)) == 0);
    }
    buf_free(&whole);
    buf_free(&pieces);
    buf_free(&id_whole);
    buf_free(&id_pieces);
    return 0;
}
