/*
 * Fuzz target for the watch stream splitter (lib/kube/watch.h). Besides crashes and sanitizer
 * findings it checks properties that must hold for any input:
 *   - chunking does not matter: the stream fed whole and fed in pieces (sizes from the first
 *     byte) gives the same events and the same result;
 *   - memory is bounded: the carried-over partial line never exceeds the line cap;
 *   - after an error, a reset splitter accepts a well-formed event again.
 * The line cap comes from the second byte, so -E2BIG paths are reached with small inputs.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/kube/watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_watch_stream: check failed: %s (line %d)\n", #cond, __LINE__);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

struct trace {
    struct buf out;
    int stop_after; /* the callback returns 9 at this event (0: never) */
    int n;
};

static int on_event(void *ud, enum kube_event_type type, struct json_object *object)
{
    struct trace *t = ud;
    CHECK(object && json_object_is_type(object, json_type_object));
    CHECK(type >= KUBE_EVENT_ADDED && type <= KUBE_EVENT_ERROR);
    buf_appendf(&t->out, "%s ", kube_event_type_name(type));
    buf_appends(&t->out, json_object_to_json_string_ext(object, JSON_C_TO_STRING_PLAIN));
    buf_appends(&t->out, "\n");
    t->n++;
    return t->stop_after && t->n == t->stop_after ? 9 : 0;
}

static int run(const char *p, size_t len, size_t max_line, size_t piece, struct trace *t)
{
    struct kube_watch_splitter *s = kube_watch_splitter_new(max_line);
    CHECK(s);
    char err[256];
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0; off += piece) {
        size_t n = len - off < piece ? len - off : piece;
        rc = kube_watch_splitter_feed(s, p + off, n, on_event, t, err, sizeof(err));
        CHECK(kube_watch_splitter_pending(s) <= max_line);
        if (rc == -EINVAL || rc == -E2BIG) {
            CHECK(err[0] != '\0');
        }
    }
    if (rc == 0) {
        rc = kube_watch_splitter_finish(s, on_event, t, err, sizeof(err));
    }
    /* after anything, a reset splitter takes a good event */
    kube_watch_splitter_reset(s);
    struct trace good;
    memset(&good, 0, sizeof(good));
    buf_init(&good.out, 1 << 16);
    const char *ev = "{\"type\":\"ADDED\",\"object\":{}}\n";
    CHECK(kube_watch_splitter_feed(s, ev, strlen(ev), on_event, &good, err, sizeof(err)) == 0 ||
          strlen(ev) - 1 > max_line);
    buf_free(&good.out);
    kube_watch_splitter_free(s);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) {
        return 0;
    }
    size_t piece = (size_t)(data[0] % 17) + 1;
    size_t max_line = data[1] < 16 ? (size_t)data[1] * 64 + 16 : (size_t)1 << 20;
    int stop_after = data[2] % 8;
    const char *p = (const char *)data + 3;
    size_t len = size - 3;

    struct trace whole, pieces;
    memset(&whole, 0, sizeof(whole));
    memset(&pieces, 0, sizeof(pieces));
    buf_init(&whole.out, 64u << 20);
    buf_init(&pieces.out, 64u << 20);
    whole.stop_after = pieces.stop_after = stop_after;
    int rc_whole = run(p, len, max_line, len ? len : 1, &whole);
    int rc_pieces = run(p, len, max_line, piece, &pieces);
    CHECK(rc_whole == rc_pieces);
    CHECK(whole.n == pieces.n);
    CHECK(whole.out.len == pieces.out.len);
    CHECK(whole.out.len == 0 || memcmp(whole.out.data, pieces.out.data, whole.out.len) == 0);
    buf_free(&whole.out);
    buf_free(&pieces.out);
    return 0;
}
