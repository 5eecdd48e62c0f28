#!/usr/bin/python3
"""Black-box tests of `tandem-agent serve` (Debian's python3: pyzmq and msgpack for KV events).

    agent_e2e.py TANDEM_AGENT TANDEM_GENMODEL WORK_DIR [NET]

Generates a small llama model and runs agents the way the operator renders them, each on its own
loopback address (NET.1-4, 127.0.77 by default, like localkube's pods) with the default ports
8000/8200/5557/5558.
Checks over real HTTP and ZeroMQ:
  * the sidecar in local mode gives the engine port's answers (greedy text, SSE stream, /v1/models,
    /health), keeps or creates x-request-id, and serves the agent's /metrics (llmd_sidecar_* and
    vllm:*);
  * a P/D request (x-prefiller-host-port) runs the prefill leg on the other agent and the decode leg
    locally: the text equals the unified run's, the response names both pods, the prefiller served
    exactly one request; the prefiller's engine does not return kv_transfer_params yet, so the
    decode pod prefills itself and says so (x-tandem-pd-fallback: no-kv-transfer-params);
  * a prefiller that is gone: the request is still answered (fallback prefill-unreachable);
  * KV events, read by kvevents_check.py (an independent consumer written from vLLM's schema):
    AllBlocksCleared at start, BlockStored for the prompt's full blocks with the right block size
    and token count, seq continuous from 0, replay from 0 returns every batch, and SIGTERM drains,
    publishes AllBlocksCleared and exits 0;
  * generation-config defaults (--override-generation-config max_new_tokens caps max_tokens);
  * start-up errors: every bad flag value exits 2 naming the flag; a taken port exits 1 at once;
  * a decoder killed before notifying leaves the prefiller's blocks to the hold timeout;
  * Tandem's KV transfer extensions (block checksums, int8 wire) between two agents.
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvevents_check  # noqa: E402

FAILS = []
MODEL_NAME = "tiny"
AGENTS = []  # every agent started: none outlives the test, whatever fails


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def addr_usable(ip):
    try:
        s = socket.socket()
        s.bind((ip, 0))
        s.close()
        return True
    except OSError:
        return False


class Agent:
    def __init__(self, exe, model, ip, work, name, extra=(), port=8000):
        self.ip, self.port, self.engine_port = ip, port, 8200
        self.logpath = os.path.join(work, name + ".log")
        self.log = open(self.logpath, "w")
        args = [exe, "serve", "--role", "both", "--model", model, "--model-format", "gguf",
                "--served-model-name", MODEL_NAME, "--host", ip, "--port", str(port),
                "--engine-port", "8200", "--kv-events-port", "5557", "--kv-transfer-port", "5600",
                "--inference-pool", "default/pool", "--max-model-len", "256", "--threads", "1",
                "--block-size", "16", "--no-enable-chunked-prefill",
                "--max-num-batched-tokens", "256"] + list(extra)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        AGENTS.append(self)
        for _ in range(300):
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("agent exited early (%d); see %s" % (self.proc.returncode,
                                                                       self.logpath))
            time.sleep(0.05)
        raise SystemExit("agent did not become healthy; see " + self.logpath)

    def request(self, method, path, body=None, headers=None, port=None):
        c = http.client.HTTPConnection(self.ip, port or self.port, timeout=60)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def get(self, path, port=None):
        return self.request("GET", path, port=port)

    def post(self, path, body, headers=None, port=None):
        return self.request("POST", path, body, headers, port)

    def metric(self, name, labels=""):
        _, body, _ = self.get("/metrics")
        total, found = 0.0, False
        for line in body.decode().splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) and labels in line:
                total += float(line.rsplit(" ", 1)[1])
                found = True
        return total if found else None

    def wait_metric(self, name, done, tries, interval):
        """Polls a metric until done(value) holds (bounded); returns the last value."""
        value = None
        for _ in range(tries):
            value = self.metric(name)
            if done(value):
                break
            time.sleep(interval)
        return value

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def completion(agent, prompt, extra=None, headers=None, port=None):
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0}
    body.update(extra or {})
    st, data, r = agent.post("/v1/completions", body, headers, port)
    return st, data, r


def text_of(data):
    return json.loads(data)["choices"][0]["text"]


def run_local_mode(a):
    st, body, _ = a.get("/v1/models")
    st2, body2, _ = a.get("/v1/models", port=a.engine_port)
    check(st == 200 and st2 == 200, "/v1/models via sidecar %d, engine %d" % (st, st2))
    ids = [m["id"] for m in json.loads(body)["data"]]
    check(ids == [m["id"] for m in json.loads(body2)["data"]] == [MODEL_NAME],
          "/v1/models ids %r" % ids)
    for prompt in ["Hello there", "A longer prompt that spans more than one KV block of sixteen "
                   "tokens, so that the cache has full blocks to store and publish"]:
        st, data, r = completion(a, prompt, headers={"x-request-id": "abc-123"})
        st2, data2, _ = completion(a, prompt, port=a.engine_port)
        check(st == 200 and st2 == 200, "completion status %d / %d" % (st, st2))
        if st == 200 and st2 == 200:
            check(text_of(data) == text_of(data2),
                  "sidecar and engine differ: %r vs %r" % (text_of(data), text_of(data2)))
        check(r.getheader("x-request-id") == "abc-123", "x-request-id kept: %r" %
              r.getheader("x-request-id"))
        check(r.getheader("x-tandem-prefill-host") is None, "local mode names no prefiller")
    # a created id is a UUID
    _, _, r = completion(a, "Hi")
    rid = r.getheader("x-request-id") or ""
    check(len(rid) == 36 and rid.count("-") == 4, "created x-request-id %r" % rid)
    # streaming passes through
    c = http.client.HTTPConnection(a.ip, a.port, timeout=60)
    c.request("POST", "/v1/chat/completions", body=json.dumps({
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    check(r.status == 200 and "text/event-stream" in (r.getheader("content-type") or ""),
          "stream status %d ct %r" % (r.status, r.getheader("content-type")))
    events = [ln[6:] for ln in raw.splitlines() if ln.startswith("data: ")]
    check(events and events[-1] == "[DONE]", "stream ends with [DONE]: %r" % events[-2:])
    check(any('"usage"' in e and '"prompt_tokens"' in e for e in events), "stream has usage")
    # x-request-timeout ends a request the engine has not finished: 504, and the engine stops it.
    # 16 choices of 230 tokens against 1 ms: a fast host ran 230 tokens of this tiny model in
    # under the 5 ms this used to allow
    st, data, _ = completion(a, "time me out", {"max_tokens": 230, "ignore_eos": True, "n": 16,
                                                "temperature": 1.0, "seed": 1},
                             {"x-request-timeout": "1ms"})
    check(st == 504 and b"x-request-timeout" in data, "x-request-timeout: %d %r" % (st, data[:200]))
    running = a.wait_metric("vllm:num_requests_running", lambda v: v == 0, 50, 0.05)
    check(running == 0, "the timed-out request still runs in the engine: %r" % running)
    # errors come through as the engine's JSON
    st, data, _ = a.post("/v1/completions", {"model": MODEL_NAME, "prompt": "x",
                                             "temperature": -1})
    check(st == 400 and json.loads(data)["error"]["param"] == "temperature",
          "bad request through the sidecar: %d %r" % (st, data[:200]))
    st, data, _ = a.post("/v1/completions", {"model": "other", "prompt": "x"})
    check(st == 404, "unknown model through the sidecar: %d" % st)
    # the agent's /metrics
    check((a.metric("llmd_sidecar_requests_total", 'status="success"') or 0) >= 3,
          "llmd_sidecar_requests_total counts successes")
    check(a.metric("vllm:num_requests_running") is not None, "vllm:* on the agent's /metrics")
    check(a.metric("llmd_sidecar_decode_requests_total") is not None,
          "llmd_sidecar_decode_requests_total present")


def sum_metric(agent, name):
    """Sum of a histogram's _sum or a counter over all its series."""
    return agent.metric(name) or 0.0


def run_pd(p, d, u):
    """200 prompts of mixed lengths, greedy: P/D (prefill on p, decode on d) == unified (u)."""
    hp = "%s:%d" % (p.ip, p.port)
    words = ["alpha", "beta", "gamma", "delta", "kv", "cache", "block", "token", "pod", "node"]
    before = p.metric("llmd_sidecar_decode_requests_total") or 0
    n_req, mismatches, fallbacks = 200, 0, 0
    for i in range(n_req):
        n_words = 1 + (i * 37) % 50
        prompt = " ".join(words[(i + j * 3) % len(words)] + str((i * j) % 7) for j in range(n_words))
        st_u, uni, _ = completion(u, prompt, {"max_tokens": 6})
        st, data, r = completion(d, prompt, {"max_tokens": 6}, {"x-prefiller-host-port": hp})
        if st != 200 or st_u != 200:
            check(False, "P/D request %d: status %d (unified %d): %r" % (i, st, st_u, data[:200]))
            continue
        unified = uni
        if text_of(data) != text_of(unified):
            mismatches += 1
            if mismatches <= 3:
                print("mismatch %d: %r vs %r" % (i, text_of(data), text_of(unified)))
        if r.getheader("x-tandem-pd-fallback"):
            fallbacks += 1
            if fallbacks <= 3:
                print("fallback %d: %s" % (i, r.getheader("x-tandem-pd-fallback")))
        if i == 0:
            check(r.getheader("x-tandem-prefill-host") == hp, "x-tandem-prefill-host %r" %
                  r.getheader("x-tandem-prefill-host"))
            check(r.getheader("x-tandem-decode-host") == "%s:%d" % (d.ip, d.port),
                  "x-tandem-decode-host %r" % r.getheader("x-tandem-decode-host"))
    check(mismatches == 0, "%d of %d P/D answers differ from the unified run" % (mismatches, n_req))
    check(fallbacks == 0, "%d of %d P/D requests fell back to a local prefill" % (fallbacks, n_req))
    after = p.metric("llmd_sidecar_decode_requests_total") or 0
    check(after - before == n_req, "the prefiller served %d prefill legs, want %d" %
          (after - before, n_req))
    check((d.metric("llmd_sidecar_prefill_requests_total") or 0) >= n_req,
          "llmd_sidecar_prefill_requests_total on the decoder")
    # every hold was released by a notification: the prefiller's cache has nothing in use
    usage = p.wait_metric("vllm:kv_cache_usage_perc", lambda v: v == 0, 50, 0.1)
    check(usage == 0, "prefiller KV usage after the notifications: %r" % usage)
    unknown = p.metric("tandem_agent_kv_unknown_notifications_total") or 0
    check(unknown == 0, "the prefiller found no hold for %r notifications" % unknown)
    check(d.metric("vllm:nixl_num_failed_transfers_total") == 0, "no failed transfers (%r)" %
          d.metric("vllm:nixl_num_failed_transfers_total"))
    # streaming P/D
    st, data, r = completion(d, "streamed prompt " * 10, {"stream": True},
                             {"x-prefiller-host-port": hp})
    check(st == 200 and data.decode().rstrip().endswith("data: [DONE]"),
          "streamed P/D: %d %r" % (st, data[-80:]))
    check(r.getheader("x-tandem-pd-fallback") is None, "streamed P/D fell back: %r" %
          r.getheader("x-tandem-pd-fallback"))


def transfer_bytes(agent):
    _, body, _ = agent.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith("llmd_sidecar_kv_cache_transfer_bytes_sum"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def run_partial_prefix(p, d):
    """The decoder holds the first 4 blocks already: only the rest moves."""
    hp = "%s:%d" % (p.ip, p.port)
    ids = [10 + (i * 7) % 400 for i in range(100)]
    # warm d with the first 64 tokens (4 full blocks) through a local request
    st, _, _ = d.post("/v1/completions", {"model": MODEL_NAME, "prompt": ids[:64], "max_tokens": 1})
    check(st == 200, "warm-up: %d" % st)
    b0 = transfer_bytes(d)
    st, data, r = d.post("/v1/completions", {"model": MODEL_NAME, "prompt": ids, "max_tokens": 4,
                                             "temperature": 0}, {"x-prefiller-host-port": hp})
    check(st == 200 and not r.getheader("x-tandem-pd-fallback"),
          "partial-hit P/D: %d %r" % (st, r.getheader("x-tandem-pd-fallback")))
    moved = transfer_bytes(d) - b0
    # blocks 4, 5 and 6 hold tokens 64..98 (token 99 is recomputed); a block of this model is
    # 2 kv heads x 16 tokens x 16 dims x 4 bytes (F32 KV) per K or V region of each of 2 layers
    block_bytes = 2 * 16 * 16 * 4 * 2 * 2
    check(moved == 3 * block_bytes, "bytes moved %d, want %d (3 blocks)" %
          (moved, 3 * block_bytes))
    usage = json.loads(data)["usage"]
    check((usage.get("prompt_tokens_details") or {}).get("cached_tokens") == 64,
          "cached_tokens %r" % usage)


def run_hold_timeout(exe, model, ip, work):
    """A prefill nobody consumes: its blocks are freed after abort_request_timeout."""
    a = Agent(exe, model, ip, work, "hold", ["--kv-connector", "nixlv2", "--kv-connector-config",
                                             '{"abort_request_timeout": 1.5}'])
    try:
        body = {"model": MODEL_NAME, "prompt": "held " * 40, "max_tokens": 1,
                "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}
        st, data, _ = a.post("/v1/completions", body)
        kv = json.loads(data).get("kv_transfer_params") if st == 200 else None
        check(kv is not None and kv.get("do_remote_prefill") is True and kv.get("remote_block_ids")
              and kv.get("remote_port") == 5600 and kv.get("remote_host") == ip and
              kv.get("tp_size") == 1 and kv.get("remote_request_id") and kv.get("remote_engine_id"),
              "producer answer: %r" % data[:400])
        check((a.metric("vllm:kv_cache_usage_perc") or 0) > 0, "blocks held after the prefill")
        time.sleep(2.5)
        check(a.metric("vllm:kv_cache_usage_perc") == 0, "held blocks freed after the timeout")
        # a wrongly typed kv_transfer_params is a 400 naming the field
        body["kv_transfer_params"] = {"do_remote_prefill": True, "remote_block_ids": "1,2"}
        st, data, _ = a.post("/v1/completions", body)
        check(st == 400 and b"remote_block_ids" in data, "bad kv_transfer_params: %d %r" %
              (st, data[:200]))
    finally:
        a.stop()


def run_decoder_killed(exe, model, ip_p, ip_d, work):
    """The decoder dies after the prefill leg and before its notification: the prefiller frees
    the held blocks when abort_request_timeout is up, and only then."""
    p = Agent(exe, model, ip_p, work, "orphan-p", ["--kv-connector", "nixlv2",
                                                   "--kv-connector-config",
                                                   '{"abort_request_timeout": 2}'])
    d = Agent(exe, model, ip_d, work, "doomed-d", ["--kv-connector", "nixlv2", "--max-num-seqs",
                                                   "1", "--max-model-len", "2048",
                                                   "--max-num-batched-tokens", "2048"])
    busy = None
    try:
        usage0 = p.metric("vllm:kv_cache_usage_perc")
        # the decoder's only sequence slot is taken by a long stream, so the P/D request's
        # decode leg (and its pull) waits in the decoder's queue once the prefill leg is done
        busy = http.client.HTTPConnection(d.ip, d.port, timeout=60)
        busy.request("POST", "/v1/completions", body=json.dumps({
            "model": MODEL_NAME, "prompt": "busy", "max_tokens": 2000, "temperature": 0,
            "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
        br = busy.getresponse()
        check(br.status == 200 and br.readline().startswith(b"data: "), "busy stream started")
        hp = "%s:%d" % (p.ip, p.port)
        t = threading.Thread(target=lambda: completion(d, "orphaned prefill " * 20,
                                                       {"max_tokens": 4},
                                                       {"x-prefiller-host-port": hp}),
                             daemon=True)
        t.start()
        held = p.wait_metric("tandem_engine_kv_held_requests", bool, 500, 0.01) or 0
        check(held == 1, "the prefiller holds the request's blocks (%r)" % held)
        check(d.metric("llmd_sidecar_kv_cache_transfer_bytes_count") in (None, 0),
              "the decoder had not pulled yet (busy stream too short?)")
        d.proc.kill()
        d.proc.wait()
        check((p.metric("vllm:kv_cache_usage_perc") or 0) > (usage0 or 0),
              "blocks still held after the decoder died")
        p.wait_metric("tandem_engine_kv_held_requests", lambda v: not v, 80, 0.1)
        check(p.metric("tandem_engine_kv_held_requests") == 0, "hold freed by the timeout")
        check(p.metric("tandem_engine_kv_holds_expired_total") == 1, "counted as expired")
        check(p.metric("tandem_engine_kv_holds_released_total") == 0, "no notification came")
        check(p.metric("vllm:kv_cache_usage_perc") == usage0,
              "prefiller KV usage back at its baseline: %r vs %r" %
              (p.metric("vllm:kv_cache_usage_perc"), usage0))
    finally:
        if busy:
            busy.close()
        p.stop()
        d.stop()


def run_extensions(exe, model, ip_p, ip_d, work):
    """Tandem's KV transfer extensions end to end: a decoder with per-block checksums and int8
    wire compression pulls from a plain producer (F16 KV): answered, no fallback, nothing
    retried or failed, and about half the bytes of an F16 pull on the wire."""
    f16 = ["--kv-connector", "nixlv2", "--kv-cache-dtype", "float16"]
    p = Agent(exe, model, ip_p, work, "ext-p", f16)
    d = Agent(exe, model, ip_d, work, "ext-d", f16 + [
        "--kv-connector-config", '{"tandem_block_checksum": true, "tandem_wire_dtype": "int8"}'])
    try:
        hp = "%s:%d" % (p.ip, p.port)
        for i in range(5):
            st, data, r = completion(d, "extension request %d " % i * 12, {"max_tokens": 4},
                                     {"x-prefiller-host-port": hp})
            check(st == 200 and not r.getheader("x-tandem-pd-fallback"),
                  "extensions: P/D request %d: %d, fallback %r, %r" %
                  (i, st, r.getheader("x-tandem-pd-fallback"), data[:200]))
        check(d.metric("tandem_agent_kv_checksum_retries_total") == 0,
              "no checksum retries: %r" % d.metric("tandem_agent_kv_checksum_retries_total"))
        check(d.metric("tandem_agent_kv_checksum_failures_total") == 0, "no checksum failures")
        check((d.metric("vllm:nixl_num_failed_transfers_total") or 0) == 0, "no failed pulls")
        check((d.metric("llmd_sidecar_kv_cache_transfer_bytes_count") or 0) >= 5,
              "five pulls counted")
    finally:
        check(p.stop() == 0, "extensions: producer exit status")
        check(d.stop() == 0, "extensions: consumer exit status")


def run_prefiller_gone(d, dead_ip):
    st, data, r = completion(d, "Is anyone there", headers={
        "x-prefiller-host-port": "%s:8000" % dead_ip})
    check(st == 200, "answered although the prefiller is gone: %d" % st)
    check(r.getheader("x-tandem-pd-fallback") == "prefill-unreachable",
          "fallback header %r" % r.getheader("x-tandem-pd-fallback"))
    check((d.metric("tandem_agent_prefill_fallbacks_total", 'reason="prefill-unreachable"') or 0)
          >= 1, "fallback counted")


def run_prefiller_killed(exe, model, d, ip, work):
    """SIGKILL the prefiller under 8 concurrent streams: every request is still answered."""
    p = Agent(exe, model, ip, work, "victim", ["--kv-connector", "nixlv2"])
    hp = "%s:%d" % (ip, p.port)
    results = []

    def one(i):
        st, data, r = completion(d, "concurrent request number %d " % i * 8,
                                 {"max_tokens": 24, "stream": True}, {"x-prefiller-host-port": hp})
        results.append((st, data.decode(errors="replace").rstrip().endswith("data: [DONE]")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for i, t in enumerate(threads):
        t.start()
        if i == 7:
            time.sleep(0.05)
            p.proc.kill()
    for t in threads:
        t.join(60)
    p.stop()
    check(len(results) == 24, "%d of 24 requests came back" % len(results))
    check(all(st == 200 and done for st, done in results),
          "every request answered in full: %r" % [r for r in results if r != (200, True)][:5])


def run_kv_events(exe, model, ip, work):
    sub = kvevents_check.Subscriber("tcp://%s:5557" % ip)
    a = Agent(exe, model, ip, work, "kv")
    try:
        time.sleep(0.3)  # the subscription reaches the publisher (slow joiner)
        prompt = " ".join("word%d" % i for i in range(25))
        st, _, _ = completion(a, prompt, {"max_tokens": 4})
        check(st == 200, "completion for KV events: %d" % st)
        batches = sub.collect(min_events=1, timeout=5.0, want=lambda ev: ev.tag == "BlockStored")
        stored = [ev for _, b in batches for ev in b.events if ev.tag == "BlockStored"]
        check(stored, "BlockStored published")
        for ev in stored:
            check(ev.block_size == 16 and len(ev.token_ids) == 16 * len(ev.block_hashes),
                  "BlockStored shape: %d hashes, %d tokens, block_size %d" %
                  (len(ev.block_hashes), len(ev.token_ids), ev.block_size))
            check(ev.medium == "GPU", "medium %r" % ev.medium)
        check(sub.topic == "kv@%s:8000@%s" % (ip, MODEL_NAME), "topic %r" % sub.topic)
        seqs = [s for s, _ in batches]
        check(seqs and seqs == list(range(seqs[0], seqs[0] + len(seqs))),
              "seq continuous: %r" % seqs)
        replayed = kvevents_check.replay("tcp://%s:5558" % ip, 0, timeout=5.0)
        check(replayed and replayed[0][0] == 0, "replay from 0 starts at seq 0: %r" %
              [s for s, _ in replayed][:3])
        first = kvevents_check.decode_batch(replayed[0][1]) if replayed else None
        check(first is not None and [e.tag for e in first.events] == ["AllBlocksCleared"],
              "the first batch of a new agent is AllBlocksCleared")
        check([s for s, _ in replayed] == list(range(len(replayed))), "replayed seqs continuous")
    finally:
        rc = a.stop()
    check(rc == 0, "SIGTERM exit status %r" % rc)
    tail = sub.collect(min_events=1, timeout=3.0, want=lambda ev: ev.tag == "AllBlocksCleared")
    check(any(ev.tag == "AllBlocksCleared" for _, b in tail for ev in b.events),
          "AllBlocksCleared published on SIGTERM")
    sub.close()


def run_generation_config(exe, model, ip, work):
    a = Agent(exe, model, ip, work, "gencfg",
              ["--override-generation-config", '{"max_new_tokens": 3, "temperature": 0}'])
    try:
        st, data, _ = a.post("/v1/completions", {"model": MODEL_NAME, "prompt": "Count",
                                                 "max_tokens": 10, "ignore_eos": True})
        check(st == 200 and json.loads(data)["usage"]["completion_tokens"] == 3,
              "max_new_tokens caps max_tokens: %r" % data[:300])
    finally:
        a.stop()


def run_bad_flags(exe, model, ip, work):
    base = [exe, "serve", "--model", model, "--host", ip, "--threads", "1"]
    cases = [
        (["--role", "leader"], "--role"),
        (["--model-format", "safetensors"], "--model-format"),
        (["--tensor-parallel-size", "2", "--kv-connector", "nixlv2"],
         "--kv-connector with --tensor-parallel-size 2"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
        (["--device", "tpu"], "--device"),
        (["--device", "cuda", "--kv-connector", "nixlv2"], "--device cuda"),
        (["--kv-connector", "lmcache"], "--kv-connector"),
        (["--kv-connector-config", "[1]"], "--kv-connector-config"),
        (["--kv-connector", "nixlv2", "--kv-connector-config", '{"bogus": 1}'], "bogus"),
        (["--kv-connector", "nixlv2", "--kv-connector-config", '{"tandem_wire_dtype": "int4"}'],
         "tandem_wire_dtype"),
        (["--kv-connector", "nixlv2", "--kv-connector-config",
          '{"tandem_block_checksum": "yes"}'], "tandem_block_checksum"),
        (["--pool-group", "example.com"], "--pool-group"),
        (["--enable-tls", "prefiller,encoder"], "encoder"),
        (["--secure-proxy"], "--secure-proxy"),
        (["--secure-proxy=true"], "--secure-proxy"),
        (["--cert-path", "/etc/tls"], "--cert-path"),
        (["--enable-ssrf-protection", "--inference-pool", ""], "--inference-pool"),
        (["--inference-pool", "justaname"], "--inference-pool"),
        (["--port", "8200"], "port 8200"),
        (["--override-generation-config", '{"top_p": 7}'], "top_p"),
        (["--no-such-flag"], "--no-such-flag"),
    ]
    for extra, needle in cases:
        r = subprocess.run(base + extra, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and needle in r.stderr,
              "%r: exit %d, stderr %r" % (extra, r.returncode, r.stderr[-300:]))
    # a taken port: exit 1 at once, naming the address
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, 8000))
    s.listen(1)
    try:
        t0 = time.time()
        r = subprocess.run(base + ["--port", "8000"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 1 and "in use" in r.stderr and time.time() - t0 < 10,
              "taken port: exit %d after %.1fs: %r" % (r.returncode, time.time() - t0,
                                                      r.stderr[-300:]))
    finally:
        s.close()


def main():
    exe, gen, work = sys.argv[1:4]
    # the agents use fixed ports, so each run (plain, ASan) gets its own /24 of loopback
    net = sys.argv[4] if len(sys.argv) > 4 else "127.0.77"
    os.makedirs(work, exist_ok=True)
    ips = ["%s.%d" % (net, i) for i in range(1, 5)]
    if not all(addr_usable(ip) for ip in ips):
        print("skip: %s.x loopback addresses are not usable here" % net)
        return 77
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab",
                    "512", "--type", "f32", "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    run_bad_flags(exe, model, ips[3], work)
    kv = ["--kv-connector", "nixlv2"]
    p = Agent(exe, model, ips[0], work, "prefill", kv)
    d = Agent(exe, model, ips[1], work, "decode", kv)
    # llm-d's decode-side TLS flags are accepted: the decode hop is in-process
    u = Agent(exe, model, ips[2], work, "unified",
              ["--decoder-use-tls", "--secure-proxy=false", "--enable-tls", "decoder"])
    try:
        run_local_mode(u)
        run_pd(p, d, u)
        run_partial_prefix(p, d)
        run_prefiller_gone(d, ips[3])
        run_prefiller_killed(exe, model, d, ips[3], work)
    finally:
        check(p.stop() == 0, "prefill agent exit status")
        check(d.stop() == 0, "decode agent exit status")
        check(u.stop() == 0, "unified agent exit status")
    run_kv_events(exe, model, ips[2], work)
    run_hold_timeout(exe, model, ips[3], work)
    run_decoder_killed(exe, model, ips[0], ips[1], work)
    run_extensions(exe, model, ips[0], ips[1], work)
    run_generation_config(exe, model, ips[3], work)
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


def kill_all():
    for a in AGENTS:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        kill_all()
    sys.exit(rc)
