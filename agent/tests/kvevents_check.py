#!/usr/bin/python3
"""Independent consumer and validator of vLLM KV-cache events (ZeroMQ + msgpack).

Written from vLLM's schema (vllm/distributed/kv_events.py: ZmqEventPublisher, KVEventBatch,
BlockStored, BlockRemoved, AllBlocksCleared) and from what llm-d-kv-cache's subscriber accepts,
not from Tandem's C code, so that it can judge the agent's publisher.

What a message must look like:
  * exactly three frames: topic, seq, payload;
  * topic "kv@<host:port>@<model>" (llm-d splits on '@' and drops anything but three parts);
  * seq: 8 bytes, big-endian unsigned, +1 per message from the first one seen;
  * payload: the msgpack array form of KVEventBatch, [ts float, [event, ...], dp_rank int|nil];
  * events, tagged arrays (trailing defaulted fields may be absent, as msgspec omits them):
      ["BlockStored", hashes, parent|nil, token_ids, block_size, lora_id|nil, medium|nil,
       lora_name|nil, (extra_keys|nil, group_idx|nil, kv_cache_spec_kind|nil,
       kv_cache_spec_sliding_window|nil)]
      ["BlockRemoved", hashes, medium|nil, (group_idx|nil)]
      ["AllBlocksCleared"]
    hashes are integers in [0, 2^64) (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1, as llm-d's
    guides run it), and len(token_ids) == len(hashes) * block_size.
Replay: a DEALER sends ["", start seq (8 bytes BE)] to the ROUTER and reads ["", seq, payload]
messages for the kept batches with seq >= start, then the end marker ["", ff*8, ""].

As a module (the agent's end-to-end test):
    sub = Subscriber("tcp://127.0.0.1:5557")
    batches = sub.collect(min_events=1, timeout=5.0, want=lambda ev: ev.tag == "BlockStored")
    for seq, batch in batches:
        for ev in batch.events: print(ev.tag, ev.block_hashes)
    replayed = replay("tcp://127.0.0.1:5558", 0, timeout=5.0)   # [(seq, payload bytes)]
    decode_batch(replayed[0][1])
As a program:
    kvevents_check.py --endpoint tcp://127.0.0.1:5557 [--replay tcp://127.0.0.1:5558]
                      --count N --timeout S
It exits 0 when N valid batches arrived (and the replay, if asked, matched them), 1 on a
malformed message, 2 on a timeout.

Standard library, pyzmq and msgpack only (Debian's python3-zmq and python3-msgpack).
"""

import argparse
import sys
import time

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
U64_LIMIT = 1 << 64
TOPIC_PREFIX = "kv@"


class ValidationError(Exception):
    """A message that a vLLM KV-event consumer would reject or misread."""


class ReplayTimeout(TimeoutError):
    """The replay answer did not end with the end marker in time."""


class Event(dict):
    """One event: a dict of vLLM's field names, also readable as attributes (ev.tag)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Batch(list):
    """A decoded KVEventBatch: the list of its events, with .ts, .events and
    .data_parallel_rank."""

    def __init__(self, ts, events, data_parallel_rank):
        super().__init__(events)
        self.ts = ts
        self.data_parallel_rank = data_parallel_rank

    @property
    def events(self):
        return self


# Field names and checks, in vLLM's declaration order. The first `required` fields (tag
# included) must be present: they have no default in vLLM, so msgspec always writes them.
def _short(v, limit=80):
    """repr(v) cut to limit characters, for error messages about long lists."""
    r = repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _opt(check):
    return lambda v: v is None or check(v)


def _is_hash(v):
    return _is_int(v) and 0 <= v < U64_LIMIT


def _is_hash_list(v):
    return isinstance(v, list) and all(_is_hash(h) for h in v)


def _is_int_list(v):
    return isinstance(v, list) and all(_is_int(t) for t in v)


SCHEMA = {
    "BlockStored": (8, [
        ("block_hashes", _is_hash_list, "a list of integer hashes in [0, 2^64)"),
        ("parent_block_hash", _opt(_is_hash), "an integer hash in [0, 2^64) or nil"),
        ("token_ids", _is_int_list, "a list of integers"),
        ("block_size", lambda v: _is_int(v) and v > 0, "a positive integer"),
        ("lora_id", _opt(_is_int), "an integer or nil"),
        ("medium", _opt(lambda v: isinstance(v, str)), "a string or nil"),
        ("lora_name", _opt(lambda v: isinstance(v, str)), "a string or nil"),
        ("extra_keys", _opt(lambda v: isinstance(v, list)), "a list or nil"),
        ("group_idx", _opt(_is_int), "an integer or nil"),
        ("kv_cache_spec_kind", _opt(lambda v: isinstance(v, str)), "a string or nil"),
        ("kv_cache_spec_sliding_window", _opt(_is_int), "an integer or nil"),
    ]),
    "BlockRemoved": (3, [
        ("block_hashes", _is_hash_list, "a list of integer hashes in [0, 2^64)"),
        ("medium", _opt(lambda v: isinstance(v, str)), "a string or nil"),
        ("group_idx", _opt(_is_int), "an integer or nil"),
    ]),
    "AllBlocksCleared": (1, []),
}


def decode_event(raw, where="event"):
    """Checks one decoded msgpack event (a tagged array) and returns it as an Event."""
    if not isinstance(raw, list) or not raw:
        raise ValidationError("%s: want a non-empty array [tag, ...], got %s" %
                              (where, _short(raw)))
    tag = raw[0]
    if tag not in SCHEMA:
        raise ValidationError("%s: unknown tag %r" % (where, tag))
    required, fields = SCHEMA[tag]
    if len(raw) < required or len(raw) > 1 + len(fields):
        raise ValidationError("%s: %s has %d fields, want %d..%d" %
                              (where, tag, len(raw) - 1, required - 1, len(fields)))
    ev = Event(tag=tag)
    for (name, check, want), value in zip(fields, raw[1:]):
        if not check(value):
            raise ValidationError("%s: %s.%s must be %s, got %s" % (where, tag, name, want,
                                                                      _short(value)))
        ev[name] = value
    for name, _, _ in fields[len(raw) - 1:]:
        ev[name] = None  # omitted defaulted field
    if tag == "BlockStored":
        n_hashes = len(ev.block_hashes)
        if len(ev.token_ids) != n_hashes * ev.block_size:
            raise ValidationError("%s: BlockStored has %d tokens for %d blocks of %d" %
                                  (where, len(ev.token_ids), n_hashes, ev.block_size))
        if ev.extra_keys is not None and len(ev.extra_keys) != n_hashes:
            raise ValidationError("%s: BlockStored has %d extra_keys for %d blocks" %
                                  (where, len(ev.extra_keys), n_hashes))
    return ev


def decode_batch(payload):
    """Decodes and checks one payload; returns a Batch (a list of Events with .ts, .events,
    .data_parallel_rank). Raises ValidationError."""
    try:
        raw = msgpack.unpackb(payload, raw=False)
    except Exception as e:  # msgpack raises several types (ExtraData, ValueError, ...)
        raise ValidationError("payload is not one msgpack object: %s" % e) from None
    if not isinstance(raw, list) or len(raw) not in (2, 3):
        raise ValidationError("payload must be the array [ts, events, dp_rank] (vLLM's array_like "
                              "form, which llm-d decodes), got %s" % _short(raw))
    if not isinstance(raw[0], float):
        raise ValidationError("ts must be a float, got %s" % _short(raw[0]))
    if not isinstance(raw[1], list):
        raise ValidationError("events must be an array, got %s" % _short(raw[1]))
    rank = raw[2] if len(raw) == 3 else None
    if rank is not None and not _is_int(rank):
        raise ValidationError("data_parallel_rank must be an integer or nil, got %s" %
                              _short(rank))
    events = [decode_event(ev, "event %d" % i) for i, ev in enumerate(raw[1])]
    return Batch(raw[0], events, rank)


def check_topic(topic):
    """Checks a topic frame (bytes): kv@<host:port>@<model>. Returns it as a str."""
    try:
        text = topic.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError("topic is not UTF-8: %r" % topic) from None
    parts = text.split("@")
    if len(parts) != 3 or parts[0] != "kv":
        raise ValidationError("topic %r is not kv@<host:port>@<model>" % text)
    host, sep, port = parts[1].rpartition(":")
    if not sep or not host or not port.isdigit() or not parts[2]:
        raise ValidationError("topic %r is not kv@<host:port>@<model>" % text)
    return text


def check_message(frames):
    """Checks one PUB message (a list of frames). Returns (topic str, seq, Batch)."""
    if len(frames) != 3:
        raise ValidationError("message has %d frames, want 3 (topic, seq, payload)" %
                              len(frames))
    topic, seq, payload = frames
    if len(seq) != 8:
        raise ValidationError("seq frame has %d bytes, want 8" % len(seq))
    return check_topic(topic), int.from_bytes(seq, "big"), decode_batch(payload)


class Subscriber:
    """A SUB socket on a publisher (connect; bind=True for a publisher that connects, as in
    llm-d's centralized mode) that checks every message and the continuity of seq."""

    def __init__(self, endpoint, prefix=TOPIC_PREFIX, bind=False, ctx=None):
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)  # keep everything: a loss must be the publisher's
        self.sock.setsockopt(zmq.SUBSCRIBE, prefix.encode())
        if bind:
            self.sock.bind(endpoint)
        else:
            self.sock.connect(endpoint)
        self.topic = None
        self.last_seq = None
        self.payloads = {}  # seq -> payload bytes, for comparing with a replay

    def recv(self, timeout):
        """The next (seq, Batch), or None after timeout seconds. Raises ValidationError for a
        malformed message or a gap in seq."""
        if not self.sock.poll(max(0, int(timeout * 1000))):
            return None
        frames = self.sock.recv_multipart()
        topic, seq, batch = check_message(frames)
        if self.topic is not None and topic != self.topic:
            raise ValidationError("topic changed from %r to %r" % (self.topic, topic))
        if self.last_seq is not None and seq != self.last_seq + 1:
            raise ValidationError("seq %d after %d (lost or reordered batches)" %
                                  (seq, self.last_seq))
        self.topic, self.last_seq = topic, seq
        self.payloads[seq] = frames[2]
        return seq, batch

    def collect(self, min_events=1, timeout=5.0, want=None):
        """Receives batches until min_events events satisfying want (every event when None)
        have arrived, or timeout seconds have passed; returns [(seq, Batch)] in order."""
        deadline = time.monotonic() + timeout
        got, seen = [], 0
        while seen < min_events:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            item = self.recv(left)
            if item is None:
                break
            got.append(item)
            seen += sum(1 for ev in item[1].events if want is None or want(ev))
        return got

    def close(self):
        self.sock.close(linger=0)


def replay(endpoint, start_seq, timeout=5.0, ctx=None):
    """Asks a publisher's ROUTER for the batches from start_seq on; returns [(seq, payload)]
    in order, each payload checked with decode_batch. Raises ReplayTimeout when the end marker
    does not come within timeout seconds, ValidationError for a malformed answer."""
    ctx = ctx or zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    try:
        sock.connect(endpoint)
        sock.send_multipart([b"", start_seq.to_bytes(8, "big")])
        deadline = time.monotonic() + timeout
        out = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                raise ReplayTimeout("replay from %d on %s: no end marker after %.1fs (%d batches)"
                                    % (start_seq, endpoint, timeout, len(out)))
            frames = sock.recv_multipart()
            if len(frames) != 3 or frames[0] != b"" or len(frames[1]) != 8:
                raise ValidationError("replay message %r is not [\"\", seq (8 bytes), payload]" %
                                      [f[:16] for f in frames])
            if frames[1] == END_SEQ:
                if frames[2] != b"":
                    raise ValidationError("end marker with a payload of %d bytes" %
                                          len(frames[2]))
                return out
            seq = int.from_bytes(frames[1], "big")
            if seq < start_seq:
                raise ValidationError("replay from %d sent seq %d" % (start_seq, seq))
            if out and seq != out[-1][0] + 1:
                raise ValidationError("replay seq %d after %d" % (seq, out[-1][0]))
            decode_batch(frames[2])
            out.append((seq, frames[2]))
    finally:
        sock.close(linger=0)


def _describe(batch):
    counts = {}
    for ev in batch.events:
        counts[ev.tag] = counts.get(ev.tag, 0) + 1
    return ", ".join("%s x%d" % kv for kv in sorted(counts.items())) or "no events"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True, help="the publisher's PUB endpoint")
    ap.add_argument("--replay", help="its ROUTER endpoint: replay what was received, compare")
    ap.add_argument("--count", type=int, default=1, help="batches to receive (default 1)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds in all (default 10)")
    ap.add_argument("--bind", action="store_true", help="bind the SUB (publisher connects)")
    ap.add_argument("--prefix", default=TOPIC_PREFIX, help="subscription prefix (kv@)")
    ap.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    a = ap.parse_args(argv)

    sub = Subscriber(a.endpoint, a.prefix, bind=a.bind)
    deadline = time.monotonic() + a.timeout
    got, n_events = [], 0
    try:
        while len(got) < a.count:
            item = sub.recv(deadline - time.monotonic())
            if item is None:
                print("TIMEOUT: %d of %d batches after %.1fs" % (len(got), a.count, a.timeout))
                return 2
            seq, batch = item
            got.append(item)
            n_events += len(batch.events)
            if not a.quiet:
                print("seq %d topic %s ts %.3f rank %r: %s" %
                      (seq, sub.topic, batch.ts, batch.data_parallel_rank, _describe(batch)))
        if a.replay:
            first = got[0][0]
            replayed = replay(a.replay, first, max(1.0, deadline - time.monotonic()))
            # everything received was published before the request: the replay must reach the
            # last of it (its start may be later than asked when the ring has dropped the oldest)
            if not replayed or replayed[-1][0] < got[-1][0]:
                raise ValidationError("replay from %d ends at %s, before the last published seq %d"
                                      % (first, replayed[-1][0] if replayed else "-", got[-1][0]))
            kept = dict(replayed)
            for seq, _ in got:
                if seq in kept and kept[seq] != sub.payloads[seq]:
                    raise ValidationError("replayed seq %d differs from the published one" % seq)
            print("replay from %d: %d batches (seq %d..%d), identical to the published ones" %
                  (first, len(replayed), replayed[0][0], replayed[-1][0]))
    except ValidationError as e:
        print("INVALID: %s" % e)
        return 1
    except ReplayTimeout as e:
        print("TIMEOUT: %s" % e)
        return 2
    finally:
        sub.close()
    print("OK: %d batches (seq %d..%d), %d events, topic %s" %
          (len(got), got[0][0], got[-1][0], n_events, sub.topic))
    return 0


if __name__ == "__main__":
    sys.exit(main())
