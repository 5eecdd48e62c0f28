#!/usr/bin/env python3
"""Black-box tests of `tandem-engine serve` (Python 3 stdlib only).

    server_e2e.py TANDEM_ENGINE TANDEM_GENMODEL WORK_DIR

Generates a small llama model, starts the server on a free loopback port and checks, over real
HTTP: /health, /v1/models, /version, /tokenize and /detokenize round trip, completions (text and
token prompts, n > 1, echo, logprobs, stop strings, seed reproducibility), chat completions
(template applied, streaming with include_usage and [DONE]), vLLM metric names on /metrics,
bad input (malformed JSON, wrong types, out-of-range values, unknown model, too-long prompt,
max_tokens past the context) answered 400/404 with the error JSON naming the field while the
server keeps serving, vLLM's return_token_ids / return_tokens_as_token_ids (completions and chat,
whole and streamed) and bad_words (a one-token word never generated, a two-token word cut only
after its first token, per request in a batch), vLLM's prompt_logprobs (completions and chat,
each position equal to what generation computes there, also over a prompt longer than an engine
step), echo with logprobs (whole and streamed) and echo without generation (max_tokens 0), a
client that disconnects mid-stream (its sequence is aborted: the abort counter moves and the KV
cache empties), a full waiting queue answered 503 with Retry-After, and SIGTERM draining an
in-flight streaming request to completion before exit.
"""

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, exe, model, extra, log):
        self.port = free_port()
        self.log = open(log, "w")
        self.proc = subprocess.Popen([exe, "serve", "--model", model, "--served-model-name", "tiny",
                                      "--host", "127.0.0.1", "--port", str(self.port), "--threads",
                                      "1"] + (extra if "--max-model-len" in extra else
                                              ["--max-model-len", "256"] + extra),
                                     stdout=self.log, stderr=self.log)
        for _ in range(200):
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("server exited early; see " + log)
            time.sleep(0.05)
        raise SystemExit("server did not become healthy")

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def get(self, path):
        c = self.conn()
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body, r

    def post(self, path, body, raw=False):
        c = self.conn()
        data = body if raw else json.dumps(body)
        c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, out, r

    def metric(self, name, labels=""):
        _, body, _ = self.get("/metrics")
        total = 0.0
        found = False
        for line in body.decode().splitlines():
            if line.startswith(name + "{") and labels in line:
                total += float(line.rsplit(" ", 1)[1])
                found = True
        return total if found else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def sse_events(resp):
    events = []
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if line.startswith(b"data: "):
            payload = line[6:]
            events.append(payload)
            if payload == b"[DONE]":
                break
    return events


def expect_error(srv, path, body, status, param, raw=False):
    st, out, _ = srv.post(path, body, raw=raw)
    check(st == status, "%s %r: status %d, want %d" % (path, body, st, status))
    try:
        err = json.loads(out)["error"]
        check(err["code"] == status, "error code %r for %r" % (err.get("code"), body))
        if param is not None:
            check(err.get("param") == param or param in err.get("message", ""),
                  "error for %r names %r: %r" % (body, param, err))
    except (ValueError, KeyError) as e:
        check(False, "error body for %r is not OpenAI-shaped: %r (%s)" % (body, out[:200], e))


def main():
    exe, gen, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab",
                    "512", "--type", "f32", "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
    srv = Server(exe, model, [], os.path.join(work, "server.log"))
    try:
        run_basic(srv)
        run_token_ids(srv)
        run_bad_words(srv)
        run_prompt_logprobs(srv)
        run_bad_input(srv)
    finally:
        srv.stop()
    run_long_prompt_logprobs(exe, model, work)
    run_disconnect(exe, gen, work)
    run_queue_full(exe, model, work)
    run_drain(exe, model, work)
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


def run_basic(srv):
    st, body, _ = srv.get("/v1/models")
    m = json.loads(body)
    check(st == 200 and m["data"][0]["id"] == "tiny" and m["data"][0]["max_model_len"] == 256,
          "/v1/models: %r" % body[:200])
    check(srv.get("/version")[0] == 200, "/version")
    st, body, _ = srv.post("/tokenize", {"prompt": "hello world"})
    tok = json.loads(body)
    check(st == 200 and tok["count"] == len(tok["tokens"]) > 0, "/tokenize: %r" % body)
    st, body, _ = srv.post("/detokenize", {"tokens": tok["tokens"]})
    check(st == 200 and json.loads(body)["prompt"].endswith("hello world"),
          "/detokenize round trip: %r" % body)

    st, body, _ = srv.post("/v1/completions", {"model": "tiny", "prompt": "Once upon a time",
                                               "max_tokens": 8, "temperature": 0})
    r = json.loads(body)
    check(st == 200 and r["object"] == "text_completion" and r["id"].startswith("cmpl-"),
          "completion: %r" % body[:300])
    check(r["usage"]["completion_tokens"] == 8 and r["choices"][0]["finish_reason"] == "length",
          "completion usage/finish: %r" % r)
    greedy_text = r["choices"][0]["text"]
    st, body, _ = srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8,
                                               "temperature": 0})
    check(json.loads(body)["choices"][0]["text"] == greedy_text, "greedy is deterministic")
    st, body, _ = srv.post("/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 3, "n": 3,
                                               "temperature": 1.0, "seed": 7, "logprobs": 2})
    r = json.loads(body)
    check(st == 200 and len(r["choices"]) == 3 and r["usage"]["prompt_tokens"] == 4
          and r["usage"]["completion_tokens"] == 9, "n=3 with token prompt: %r" % body[:300])
    lp = r["choices"][0]["logprobs"]
    check(lp is not None and len(lp["token_logprobs"]) == 3 and len(lp["top_logprobs"][0]) >= 1,
          "completion logprobs: %r" % lp)
    st, body2, _ = srv.post("/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 3, "n": 3,
                                                "temperature": 1.0, "seed": 7, "logprobs": 2})
    check([c["text"] for c in json.loads(body2)["choices"]] == [c["text"] for c in r["choices"]],
          "seeded sampling is reproducible")
    st, body, _ = srv.post("/v1/completions", {"prompt": "abc", "max_tokens": 2, "echo": True,
                                               "temperature": 0})
    check(json.loads(body)["choices"][0]["text"].startswith("abc"), "echo: %r" % body[:200])
    if len(greedy_text) >= 3:
        stop = greedy_text[1:3]
        st, body, _ = srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8,
                                                   "temperature": 0, "stop": [stop]})
        c = json.loads(body)["choices"][0]
        check(c["finish_reason"] == "stop" and c["stop_reason"] == stop and stop not in c["text"],
              "stop string: %r" % c)

    st, body, _ = srv.post("/v1/chat/completions", {"model": "tiny", "max_tokens": 5,
                                                    "messages": [{"role": "user",
                                                                  "content": "Hi there"}]})
    r = json.loads(body)
    check(st == 200 and r["object"] == "chat.completion"
          and r["choices"][0]["message"]["role"] == "assistant"
          and r["usage"]["prompt_tokens"] > 3, "chat: %r" % body[:300])

    c = srv.conn()
    c.request("POST", "/v1/chat/completions", body=json.dumps({
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
        "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True},
        "ignore_eos": True, "seed": 1}),
        headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    check(resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream"),
          "chat stream status/content-type")
    ev = sse_events(resp)
    c.close()
    check(ev and ev[-1] == b"[DONE]", "stream ends with [DONE]")
    chunks = [json.loads(e) for e in ev[:-1]]
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "first delta has the role")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6,
          "usage chunk last: %r" % chunks[-1])
    check(any(ch["choices"] and ch["choices"][0].get("finish_reason") == "length" for ch in chunks),
          "a chunk carries finish_reason")
    check(srv.metric("vllm:generation_tokens_total") >= 30, "generation counter")
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_bucket", "vllm:cache_config_info"):
        check(srv.metric(name) is not None, "metric %s exposed" % name)
    check(srv.metric("vllm:request_success_total", 'finished_reason="length"') >= 5,
          "request_success_total{finished_reason=length}")


def stream_chunks(srv, path, body):
    c = srv.conn()
    c.request("POST", path, body=json.dumps(dict(body, stream=True)),
              headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    check(resp.status == 200, "%s stream %r: status %d" % (path, body, resp.status))
    ev = sse_events(resp)
    c.close()
    check(ev and ev[-1] == b"[DONE]", "%s stream ends with [DONE]" % path)
    return [json.loads(e) for e in ev[:-1]]


def tokenize(srv, text, special=True):
    return json.loads(srv.post("/tokenize", {"prompt": text,
                                             "add_special_tokens": special})[1])["tokens"]


def detokenize(srv, ids):
    return json.loads(srv.post("/detokenize", {"tokens": ids})[1])["prompt"]


def run_token_ids(srv):
    """return_token_ids and return_tokens_as_token_ids, as vLLM writes them."""
    base = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    st, body, _ = srv.post("/v1/completions", base)
    plain = json.loads(body)["choices"][0]
    check("token_ids" not in plain and "prompt_token_ids" not in plain,
          "no id fields without return_token_ids: %r" % plain)
    st, body, _ = srv.post("/v1/completions", dict(base, return_token_ids=True))
    r = json.loads(body)
    c = r["choices"][0]
    check(st == 200 and c["prompt_token_ids"] == tokenize(srv, base["prompt"]),
          "completion prompt_token_ids: %r" % c.get("prompt_token_ids"))
    ids = c.get("token_ids") or []
    check(len(ids) == r["usage"]["completion_tokens"] == 10 and c["text"] == plain["text"]
          and detokenize(srv, ids) == c["text"], "completion token_ids %r for %r" % (ids, c["text"]))
    # streamed: the prompt's ids in each choice's first chunk only, then the delta ids
    chunks = stream_chunks(srv, "/v1/completions",
                           dict(base, prompt=[base["prompt"], "The weather"], return_token_ids=True))
    got = {0: [], 1: []}
    firsts = {}
    for ch in chunks:
        for cc in ch["choices"]:
            firsts.setdefault(cc["index"], cc["prompt_token_ids"])
            if cc["index"] in firsts and got[cc["index"]]:
                check(cc["prompt_token_ids"] is None, "prompt_token_ids only in the first chunk")
            got[cc["index"]] += cc["token_ids"]
    check(firsts.get(0) == c["prompt_token_ids"] and firsts.get(1) == tokenize(srv, "The weather")
          and got[0] == ids and len(got[1]) == 10,
          "streamed completion ids: first chunks %r, ids %r" % (firsts, got))
    # echo: vLLM echoes no text with return_token_ids
    st, body, _ = srv.post("/v1/completions", dict(base, echo=True, return_token_ids=True))
    check(json.loads(body)["choices"][0]["text"] == plain["text"], "echo with return_token_ids")

    # return_tokens_as_token_ids: logprobs name tokens "token_id:{id}"
    st, body, _ = srv.post("/v1/completions", dict(base, logprobs=2, return_tokens_as_token_ids=True,
                                                   return_token_ids=True))
    c = json.loads(body)["choices"][0]
    lp = c["logprobs"]
    names = ["token_id:%d" % t for t in c["token_ids"]]
    check(lp["tokens"] == names and all(k.startswith("token_id:") for d in lp["top_logprobs"]
                                        for k in d) and names[0] in lp["top_logprobs"][0],
          "completion tokens as ids: %r" % lp["tokens"])
    offs = [0]
    for n in names[:-1]:
        offs.append(offs[-1] + len(n))
    check(lp["text_offset"] == offs, "text_offset advances by the names: %r" % lp["text_offset"])
    chunks = stream_chunks(srv, "/v1/completions", dict(base, logprobs=0,
                                                        return_tokens_as_token_ids=True))
    check(sum((ch["choices"][0]["logprobs"]["tokens"] for ch in chunks if ch["choices"]), [])
          == names, "streamed completion tokens as ids")

    chat = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 6,
            "temperature": 0, "ignore_eos": True}
    st, body, _ = srv.post("/v1/chat/completions", chat)
    plain = json.loads(body)
    check("prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0],
          "chat: no id fields without return_token_ids")
    st, body, _ = srv.post("/v1/chat/completions", dict(chat, return_token_ids=True))
    r = json.loads(body)
    ids = r["choices"][0].get("token_ids") or []
    check(len(r.get("prompt_token_ids") or []) == r["usage"]["prompt_tokens"]
          and "prompt_token_ids" not in r["choices"][0] and len(ids) == 6
          and r["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"],
          "chat token ids: %r" % body[:400])
    chunks = stream_chunks(srv, "/v1/chat/completions", dict(chat, return_token_ids=True))
    check(chunks[0].get("prompt_token_ids") == r["prompt_token_ids"]
          and "token_ids" not in chunks[0]["choices"][0]
          and all("prompt_token_ids" not in ch for ch in chunks[1:]),
          "chat stream: the prompt's ids with the role chunk: %r" % chunks[0])
    check(sum((ch["choices"][0]["token_ids"] for ch in chunks[1:] if ch["choices"]), []) == ids,
          "chat stream token_ids add up to the whole answer's")
    st, body, _ = srv.post("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=2))
    lp_text = json.loads(body)["choices"][0]["logprobs"]["content"]
    st, body, _ = srv.post("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=2,
                                                        return_tokens_as_token_ids=True))
    lp_ids = json.loads(body)["choices"][0]["logprobs"]["content"]
    check([e["token"] for e in lp_ids] == ["token_id:%d" % t for t in ids]
          and [e["bytes"] for e in lp_ids] == [e["bytes"] for e in lp_text]
          and all(t["token"].startswith("token_id:") and t["bytes"] == list(t["token"].encode())
                  for e in lp_ids for t in e["top_logprobs"]),
          "chat tokens as ids (a token's bytes its text's, a top entry's its name's): %r"
          % lp_ids[:1])
    for bad in ({"return_token_ids": "yes"}, {"return_tokens_as_token_ids": 1}):
        key = list(bad)[0]
        expect_error(srv, "/v1/completions", dict(base, **bad), 400, key)
        expect_error(srv, "/v1/chat/completions", dict(chat, **bad), 400, key)


def run_bad_words(srv):
    """bad_words: vLLM's logits processor over the generated tokens."""
    base = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    greedy = json.loads(srv.post("/v1/completions", base)[1])["choices"][0]["token_ids"]
    # a word of one token that greedy decoding generates: never again
    one = None
    for t in greedy:
        w = detokenize(srv, [t])
        if w.strip() and tokenize(srv, w, False) == [t]:
            one = (t, w)
            break
    check(one is not None, "a one-token word in %r" % greedy)
    # a word of two tokens a, b that greedy decoding generates: a stays, b is cut after it
    two = None
    for k in range(len(greedy) - 1):
        a, b = greedy[k], greedy[k + 1]
        w = detokenize(srv, [a, b])
        if w.strip() == w and w and tokenize(srv, w, False) == [a, b]:
            two = (k, a, b, w)
            break
    check(two is not None, "a two-token word in %r" % greedy)
    if one:
        t, w = one
        for path, body in (("/v1/completions", dict(base, bad_words=[w])),
                           ("/v1/completions", dict(base, bad_words=["  " + w, w]))):
            st, out, _ = srv.post(path, body)
            ids = json.loads(out)["choices"][0]["token_ids"] if st == 200 else None
            check(st == 200 and t not in ids and len(ids) == 24,
                  "bad_words %r: %d %r" % (body["bad_words"], st, out[:300]))
        chunks = stream_chunks(srv, "/v1/completions", dict(base, bad_words=[w]))
        sids = sum((ch["choices"][0]["token_ids"] for ch in chunks if ch["choices"]), [])
        check(t not in sids and len(sids) == 24, "streamed bad_words: %r" % sids)
        # per request: batched with requests without it (threads) and in a multi-prompt request
        results = {}

        def one_req(name, body):
            results[name] = srv.post("/v1/completions", body)

        threads = [threading.Thread(target=one_req, args=("banned%d" % i, dict(base, bad_words=[w])))
                   for i in range(3)]
        threads += [threading.Thread(target=one_req, args=("control%d" % i, base)) for i in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for name, (st, out, _) in sorted(results.items()):
            # (a batch may round differently from a lone request: the control only has to
            # still generate the word)
            ids = json.loads(out)["choices"][0]["token_ids"]
            check(st == 200 and (t not in ids) == name.startswith("banned"),
                  "batched %s, bad word %d: %r" % (name, t, ids))
        st, out, _ = srv.post("/v1/completions", dict(base, prompt=[base["prompt"], "The weather"],
                                                      bad_words=[w]))
        check(st == 200 and all(t not in c["token_ids"] for c in json.loads(out)["choices"]),
              "bad_words in a multi-prompt request")
        chat = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 12,
                "temperature": 0, "ignore_eos": True, "return_token_ids": True}
        cids = json.loads(srv.post("/v1/chat/completions", chat)[1])["choices"][0]["token_ids"]
        cw = detokenize(srv, [cids[0]])
        st, out, _ = srv.post("/v1/chat/completions", dict(chat, bad_words=[cw]))
        banned = tokenize(srv, cw.lstrip(), False)
        check(st == 200 and (len(banned) != 1 or banned[0] not in
                             json.loads(out)["choices"][0]["token_ids"]),
              "chat bad_words %r: %r" % (cw, out[:300]))
    if two:
        k, a, b, w = two
        st, out, _ = srv.post("/v1/completions", dict(base, bad_words=[w]))
        ids = json.loads(out)["choices"][0]["token_ids"]
        pairs = list(zip(ids, ids[1:]))
        check(st == 200 and ids[:k + 1] == greedy[:k + 1] and ids[k + 1] != b
              and (a, b) not in pairs,
              "two-token bad word %r (%d %d): the first token stays, the second never follows: "
              "%r vs greedy %r" % (w, a, b, ids, greedy))
    for bad, what in ((["   "], "must tokenize to at least one token"),
                      (["ok", ""], "cannot contain an empty string"),
                      (["w%d" % i for i in range(200)], "Too many bad words"),
                      ("word", "bad_words"), ([1], "bad_words"), (None, "bad_words")):
        st, out, _ = srv.post("/v1/completions", dict(base, bad_words=bad))
        err = json.loads(out).get("error", {})
        check(st == 400 and err.get("param") == "bad_words" and what in err.get("message", ""),
              "bad_words %r: %d %r" % (bad if not isinstance(bad, list) or len(bad) < 5 else "...",
                                      st, out[:200]))


def plp_entry_ok(entry, tok, k):
    """A prompt_logprobs entry: the prompt's token first, then the top tokens besides it, whose
    ranks (with the token's own when it is among them) are 1..k; {logprob, rank, decoded_token}
    each."""
    if not isinstance(entry, dict) or not entry or list(entry)[0] != str(tok):
        return False
    own = entry[str(tok)]["rank"]
    ranks = sorted(v["rank"] for key, v in entry.items() if key != str(tok))
    return (ranks == [r for r in range(1, k + 1) if r != own]
            and all(set(v) == {"logprob", "rank", "decoded_token"} for v in entry.values()))


def first_token_tops(srv, prefix, k):
    """The top logprobs of the greedy first token after the token prompt prefix, by token id."""
    st, body, _ = srv.post("/v1/completions", {"prompt": prefix, "max_tokens": 1, "logprobs": k,
                                               "temperature": 0,
                                               "return_tokens_as_token_ids": True})
    check(st == 200, "generation after %d prompt tokens: %d %r" % (len(prefix), st, body[:200]))
    tops = json.loads(body)["choices"][0]["logprobs"]["top_logprobs"][0]
    return {int(key.split(":")[1]): v for key, v in tops.items()}


def plp_matches_generation(srv, prompt, plp, k, positions, what):
    """The real check: prompt_logprobs at position i are what generation computes for the first
    token after prompt[:i] (the same logits row), within 1e-4."""
    for i in positions:
        entry = plp[i]
        tops = first_token_tops(srv, prompt[:i], k)
        ranked = {int(key): v["logprob"] for key, v in entry.items() if v["rank"] <= k}
        ok = set(ranked) == set(tops) and all(abs(ranked[t] - tops[t]) <= 1e-4 for t in tops)
        if prompt[i] in tops:
            ok = ok and abs(entry[str(prompt[i])]["logprob"] - tops[prompt[i]]) <= 1e-4
        check(ok, "%s: position %d: prompt_logprobs %r, generation %r" % (what, i, entry, tops))


def expect_message(srv, path, body, param, message):
    st, out, _ = srv.post(path, body)
    err = json.loads(out).get("error", {}) if out.startswith(b"{") else {}
    check(st == 400 and err.get("param") == param and err.get("message") == message,
          "%s %r: want 400 %r %r, got %d %r" % (path, body, param, message, st, out[:300]))


def run_prompt_logprobs(srv):
    """vLLM's prompt_logprobs, echo with logprobs and echo without generation."""
    rng = random.Random(11)
    prompt = [rng.randrange(3, 512) for _ in range(14)]
    k = 3
    st, body, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0,
                                               "prompt_logprobs": k})
    r = json.loads(body)
    plp = r["choices"][0].get("prompt_logprobs") if st == 200 else None
    check(isinstance(plp, list) and len(plp) == len(prompt) and plp[0] is None
          and all(plp_entry_ok(plp[i], prompt[i], k) for i in range(1, len(prompt))),
          "completions prompt_logprobs=%d: %r" % (k, body[:600]))
    if isinstance(plp, list) and len(plp) == len(prompt):
        plp_matches_generation(srv, prompt, plp, k, range(1, len(prompt)), "completions")
    # 0: the prompt tokens' own entries only
    st, body, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                               "prompt_logprobs": 0})
    plp0 = json.loads(body)["choices"][0]["prompt_logprobs"]
    check(len(plp0) == len(prompt) and plp0[0] is None
          and all(list(plp0[i]) == [str(prompt[i])] for i in range(1, len(prompt)))
          and all(abs(plp0[i][str(prompt[i])]["logprob"] - plp[i][str(prompt[i])]["logprob"])
                  <= 1e-6 for i in range(1, len(prompt))),
          "prompt_logprobs=0: %r" % plp0[:3])
    # several prompts and n > 1: each choice its own prompt's
    other = [rng.randrange(3, 512) for _ in range(5)]
    st, body, _ = srv.post("/v1/completions", {"prompt": [prompt, other], "n": 2, "max_tokens": 1,
                                               "prompt_logprobs": 1})
    cs = sorted(json.loads(body)["choices"], key=lambda c: c["index"])
    check(len(cs) == 4 and all(
        len(c["prompt_logprobs"]) == len(p) and c["prompt_logprobs"][0] is None
        and all(plp_entry_ok(c["prompt_logprobs"][i], p[i], 1) for i in range(1, len(p)))
        for c, p in zip(cs, [prompt, prompt, other, other])),
        "two prompts x n=2: each choice its prompt's prompt_logprobs: %r" % body[:400])

    # chat: the response's prompt_logprobs, over the templated prompt's tokens
    chat = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 1,
            "temperature": 0, "return_token_ids": True}
    st, body, _ = srv.post("/v1/chat/completions", dict(chat, prompt_logprobs=2))
    r = json.loads(body)
    cp, ids = r.get("prompt_logprobs"), r.get("prompt_token_ids") or []
    check(st == 200 and isinstance(cp, list) and len(cp) == len(ids) == r["usage"]["prompt_tokens"]
          and cp[0] is None and all(plp_entry_ok(cp[i], ids[i], 2) for i in range(1, len(ids)))
          and "prompt_logprobs" not in r["choices"][0],
          "chat prompt_logprobs=2: %r" % body[:600])
    if isinstance(cp, list) and len(cp) == len(ids) > 3:
        plp_matches_generation(srv, ids, cp, 2, (1, len(ids) // 2, len(ids) - 1), "chat")
    # chat echo: prompt_logprobs = top_logprobs, 0 by default (vLLM's to_sampling_params)
    st, body, _ = srv.post("/v1/chat/completions", dict(chat, echo=True))
    ep = json.loads(body).get("prompt_logprobs")
    check(isinstance(ep, list) and len(ep) == len(ids) and ep[0] is None
          and all(list(ep[i]) == [str(ids[i])] for i in range(1, len(ids))),
          "chat echo: the prompt tokens' own logprobs: %r" % body[:300])
    st, body, _ = srv.post("/v1/chat/completions", chat)
    check(json.loads(body).get("prompt_logprobs", 0) is None, "chat without: prompt_logprobs null")

    # echo with logprobs: the logprobs cover prompt + output (vLLM's _create_completion_logprobs)
    echo = {"prompt": prompt, "max_tokens": 3, "temperature": 0, "ignore_eos": True, "echo": True,
            "logprobs": 2}
    st, body, _ = srv.post("/v1/completions", echo)
    c = json.loads(body)["choices"][0]
    lp, ep = c["logprobs"], c.get("prompt_logprobs") or []
    n = len(prompt)
    check(len(lp["tokens"]) == n + 3 and lp["token_logprobs"][0] is None
          and lp["top_logprobs"][0] is None and len(ep) == n
          and all(lp["token_logprobs"][i] == ep[i][str(prompt[i])]["logprob"]
                  and lp["tokens"][i] == ep[i][str(prompt[i])]["decoded_token"]
                  and list(lp["top_logprobs"][i])[0] == lp["tokens"][i]
                  and len(lp["top_logprobs"][i]) <= 3 for i in range(1, n))
          and lp["text_offset"][0] == 0,
          "echo + logprobs: %r" % body[:800])
    offs = [0]
    for t in lp["tokens"][:-1]:
        offs.append(offs[-1] + len(t))
    check(lp["text_offset"] == offs, "echo offsets advance by the tokens: %r" % lp["text_offset"])
    chunks = stream_chunks(srv, "/v1/completions", echo)
    sc = [ch["choices"][0] for ch in chunks if ch["choices"]]
    cat = {key: sum((x["logprobs"][key] for x in sc), []) for key in
           ("tokens", "token_logprobs", "top_logprobs")}
    check(sc and len(sc[0]["logprobs"]["tokens"]) == n + 1
          and sc[0]["logprobs"]["text_offset"][0] == 0
          and "".join(x["text"] for x in sc) == c["text"]
          and all(cat[key] == lp[key] for key in cat),
          "streamed echo + logprobs: the prompt's with the first token, as the whole answer's: %r"
          % (sc[:1],))

    # echo without generation: max_tokens 0 returns the prompt (one token is generated, counted)
    st, body, _ = srv.post("/v1/completions", dict(echo, max_tokens=1))
    one = json.loads(body)["choices"][0]
    gen1 = json.loads(srv.post("/v1/completions", dict(echo, max_tokens=1, echo=False))[1])
    gen_text = gen1["choices"][0]["text"]
    st, body, _ = srv.post("/v1/completions", dict(echo, max_tokens=0))
    r = json.loads(body)
    z = r["choices"][0] if st == 200 else {}
    check(st == 200 and z["text"] == one["text"][:len(one["text"]) - len(gen_text)]
          and z["logprobs"]["tokens"] == lp["tokens"][:n]
          and z["logprobs"]["token_logprobs"] == lp["token_logprobs"][:n]
          and r["usage"]["completion_tokens"] == 1
          and z["finish_reason"] in ("length", "stop") and len(z["prompt_logprobs"]) == n,
          "echo without generation: %d %r" % (st, body[:500]))
    # with return_token_ids: no text (vLLM's echo), the generated token's id
    st, body, _ = srv.post("/v1/completions", dict(echo, max_tokens=0, return_token_ids=True))
    zi = json.loads(body)["choices"][0] if st == 200 else {}
    check(st == 200 and zi["text"] == "" and len(zi["token_ids"]) == 1
          and zi["prompt_token_ids"] == prompt and zi["logprobs"]["tokens"] == lp["tokens"][:n],
          "echo without generation, return_token_ids: %d %r" % (st, body[:300]))
    chunks = stream_chunks(srv, "/v1/completions", dict(echo, max_tokens=0))
    sc = [ch["choices"][0] for ch in chunks if ch["choices"]]
    check(len(sc) == 1 and sc[0]["text"] == z.get("text") and sc[0]["finish_reason"]
          == z.get("finish_reason") and sc[0]["logprobs"]["tokens"] == lp["tokens"][:n],
          "streamed echo without generation: one chunk with the prompt: %r" % chunks)

    # vLLM's checks and messages
    stream_msg = "`prompt_logprobs` are not available when `stream=True`."
    expect_message(srv, "/v1/completions", {"prompt": "x", "prompt_logprobs": 1, "stream": True},
                   "prompt_logprobs", stream_msg)
    expect_message(srv, "/v1/chat/completions", dict(chat, prompt_logprobs=-1, stream=True),
                   "prompt_logprobs", stream_msg)
    expect_message(srv, "/v1/completions", {"prompt": "x", "prompt_logprobs": -3},
                   "prompt_logprobs", "`prompt_logprobs` must be a positive value or -1.")
    expect_message(srv, "/v1/completions", {"prompt": "x", "prompt_logprobs": 21},
                   "prompt_logprobs",
                   "Requested prompt logprobs of 21, which is greater than max allowed: 20")
    expect_message(srv, "/v1/chat/completions", dict(chat, prompt_logprobs=-1), "prompt_logprobs",
                   "Requested prompt logprobs of 512, which is greater than max allowed: 20")
    expect_message(srv, "/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens",
                   "'max_tokens' must be at least 1, got 0.")
    st, _, _ = srv.post("/v1/completions", {"prompt": "x", "prompt_logprobs": 0, "stream": True,
                                            "max_tokens": 1})
    check(st == 200, "prompt_logprobs 0 with stream is fine (vLLM): %d" % st)


def run_long_prompt_logprobs(exe, model, work):
    """A prompt of several engine steps (--max-num-batched-tokens 64): every position."""
    srv = Server(exe, model, ["--max-model-len", "1024", "--max-num-batched-tokens", "64",
                              "--max-num-seqs", "4"], os.path.join(work, "server-plp.log"))
    try:
        rng = random.Random(12)
        prompt = [rng.randrange(3, 512) for _ in range(400)]
        st, body, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                                   "prompt_logprobs": 2})
        plp = json.loads(body)["choices"][0].get("prompt_logprobs") if st == 200 else None
        check(isinstance(plp, list) and len(plp) == 400 and plp[0] is None
              and all(plp_entry_ok(plp[i], prompt[i], 2) for i in range(1, 400)),
              "400-token prompt: %d %r" % (st, body[:300]))
        if isinstance(plp, list) and len(plp) == 400:
            plp_matches_generation(srv, prompt, plp, 2, (1, 63, 64, 65, 127, 128, 250, 399),
                                   "400-token prompt")
    finally:
        srv.stop()


def run_bad_input(srv):
    long_prompt = list(range(1, 300))
    cases = [
        ("/v1/completions", b"{not json", 400, None, True),
        ("/v1/completions", b"", 400, None, True),
        ("/v1/completions", b"[1,2]", 400, None, True),
        ("/v1/completions", {"prompt": 5}, 400, "prompt", False),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature", False),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature", False),
        ("/v1/completions", {"prompt": "x", "top_p": 1.5}, 400, "top_p", False),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens", False),
        ("/v1/completions", {"prompt": "x", "n": 0}, 400, "n", False),
        ("/v1/completions", {"prompt": "x", "logprobs": 50}, 400, "logprobs", False),
        ("/v1/completions", {"prompt": "x", "stop": 3}, 400, "stop", False),
        ("/v1/completions", {"prompt": [1, 2, 100000]}, 400, None, False),
        ("/v1/completions", {"prompt": long_prompt}, 400, "prompt", False),
        ("/v1/completions", {"prompt": "x", "max_tokens": 1000}, 400, "max_tokens", False),
        ("/v1/completions", {"model": "other", "prompt": "x"}, 404, "model", False),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "messages", False),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, None, False),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, None,
         False),
        ("/tokenize", {"prompt": 7}, 400, "prompt", False),
        ("/detokenize", {"tokens": ["a"]}, 400, "tokens", False),
        ("/detokenize", {"tokens": [99999]}, 400, "tokens", False),
    ]
    for path, body, status, param, raw in cases:
        expect_error(srv, path, body, status, param, raw)
    st, _, _ = srv.post("/v1/completions", {"prompt": "still alive", "max_tokens": 2})
    check(st == 200, "server keeps serving after bad input")


def run_disconnect(exe, gen, work):
    """A generation long enough (a bigger model, 3,000 tokens) to still run when the client
    leaves."""
    model = os.path.join(work, "slow.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "4",
                    "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--vocab",
                    "512", "--ctx", "4096", "--type", "f32", "--seed", "6"], check=True,
                   stdout=subprocess.DEVNULL)
    srv = Server(exe, model, ["--max-model-len", "4096"],
                 os.path.join(work, "server-disconnect.log"))
    try:
        disconnect(srv)
    finally:
        srv.stop()


def disconnect(srv):
    aborted0 = srv.metric("vllm:request_success_total", 'finished_reason="abort"') or 0
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": "a long story", "max_tokens": 3000, "stream": True,
                       "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    s.recv(4096)  # headers and the first chunk(s)
    s.close()
    ok = False
    for _ in range(100):
        if (srv.metric("vllm:request_success_total", 'finished_reason="abort"') or 0) > aborted0:
            ok = True
            break
        time.sleep(0.05)
    check(ok, "client disconnect aborts the request")
    for _ in range(100):
        if srv.metric("vllm:num_requests_running") == 0:
            break
        time.sleep(0.05)
    check(srv.metric("vllm:kv_cache_usage_perc") == 0, "KV cache empty after the abort")


def run_queue_full(exe, model, work):
    srv = Server(exe, model, ["--max-num-seqs", "1", "--max-waiting-requests", "1"],
                 os.path.join(work, "server-queue.log"))
    try:
        results = []

        def one():
            results.append(srv.post("/v1/completions", {"prompt": "x", "max_tokens": 120,
                                                        "ignore_eos": True}))

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = sorted(r[0] for r in results)
        check(200 in statuses and 503 in statuses, "queue bound: statuses %r" % statuses)
        for st, body, resp in results:
            if st == 503:
                check(resp.getheader("Retry-After") is not None, "503 carries Retry-After")
                check(json.loads(body)["error"]["code"] == 503, "503 body: %r" % body)
    finally:
        srv.stop()


def run_drain(exe, model, work):
    srv = Server(exe, model, ["--drain-timeout-ms", "20000"],
                 os.path.join(work, "server-drain.log"))
    try:
        c = srv.conn()
        c.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "x", "max_tokens": 150, "stream": True, "ignore_eos": True}),
            headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        resp.readline()
        srv.proc.send_signal(signal.SIGTERM)
        ev = sse_events(resp)
        c.close()
        check(ev and ev[-1] == b"[DONE]", "SIGTERM drains the in-flight stream to [DONE]")
        text_chunks = [e for e in ev if e != b"[DONE]"]
        check(len(text_chunks) >= 100, "drained stream delivered all tokens (%d chunks)"
              % len(text_chunks))
        check(srv.proc.wait(timeout=30) == 0, "exit status 0 after the drain")
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
