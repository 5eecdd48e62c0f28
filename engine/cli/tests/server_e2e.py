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
vLLM's scoring endpoints (/score, /v1/score, /rerank, /v1/rerank, /v2/rerank, /pooling: cosine
scores of the /v1/embeddings vectors 1:1, 1:N and N:N, rerank order and top_n, pooling equal to
the embeddings, usage, max_tokens_per_doc, their 400s), vLLM's Responses API (/v1/responses:
the chat completion's text and usage in vLLM's ResponsesResponse, whole and as its SSE events,
logprobs, incomplete at max_output_tokens, json_schema output, a named function tool, its
errors with the Responses field names), a
client that disconnects mid-stream (its sequence is aborted: the abort counter moves and the KV
cache empties), a full waiting queue answered 503 with Retry-After, and SIGTERM draining an
in-flight streaming request to completion before exit.
"""

import base64
import http.client
import json
import math
import os
import random
import signal
import socket
import struct
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
        run_vllm_fields(srv)
        run_scoring(srv)
        run_responses(srv)
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


def run_vllm_fields(srv):
    """vLLM's request fields: repetition_detection (a logit_bias forcing one token at temperature
    0 repeats it, so the answer ends "repetition" after min_count tokens, whole and streamed),
    request_id, return_prompt_text with reasoning_effort / documents reaching the template,
    stream_interval, seed -1, max_tokens null, stream_options {} without stream, and vLLM's 400s
    (its messages) for thinking_token_budget, temperature, greedy n > 1, empty stop strings and
    prompts, cache salts, logprobs -1 and repetition_detection's values."""
    forced = {"logit_bias": {"100": 100}, "temperature": 0,
              "repetition_detection": {"max_pattern_size": 2, "min_count": 3}}
    st, body, _ = srv.post("/v1/completions", dict(forced, prompt="Once", max_tokens=40))
    r = json.loads(body)
    c = r["choices"][0] if st == 200 else {}
    check(st == 200 and c["finish_reason"] == "repetition" and
          c["stop_reason"] == "repetition_detected" and r["usage"]["completion_tokens"] == 3,
          "repetition_detection ends the completion: %r" % body[:400])
    chunks = stream_chunks(srv, "/v1/completions", dict(forced, prompt="Once", max_tokens=40))
    last = [ch for ch in chunks if ch["choices"]][-1]["choices"][0]
    check(last["finish_reason"] == "repetition" and last["stop_reason"] == "repetition_detected",
          "repetition_detection streamed: %r" % last)
    st, body, _ = srv.post("/v1/chat/completions", dict(
        forced, messages=[{"role": "user", "content": "Hi"}], max_tokens=40,
        repetition_detection={"max_pattern_size": 4, "min_pattern_size": 1, "min_count": 5}))
    r = json.loads(body)
    check(st == 200 and r["choices"][0]["finish_reason"] == "repetition" and
          r["choices"][0]["stop_reason"] == "repetition_detected" and
          r["usage"]["completion_tokens"] == 5, "chat repetition_detection: %r" % body[:400])
    chunks = stream_chunks(srv, "/v1/chat/completions", dict(
        forced, messages=[{"role": "user", "content": "Hi"}], max_tokens=40))
    check(any(ch["choices"] and ch["choices"][0]["finish_reason"] == "repetition" and
              ch["choices"][0]["stop_reason"] == "repetition_detected" for ch in chunks),
          "chat repetition_detection streamed")
    check(srv.metric("vllm:request_success_total", 'finished_reason="repetition"') >= 4,
          "request_success_total{finished_reason=repetition}")
    expect_message(srv, "/v1/completions", dict(forced, prompt="x", repetition_detection={
        "max_pattern_size": 2, "min_count": 1}), None,
        "min_count must be >= 2 to detect repetitive patterns in engine output. If you do not "
        "wish to detect repetitive patterns, set max_pattern_size to 0.")
    expect_message(srv, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}],
        "repetition_detection": {"max_pattern_size": 1, "min_pattern_size": 2}}, None,
        "max_pattern_size, min_pattern_size must be >=0, with min_pattern_size <= "
        "max_pattern_size. Set both to 0 to disable repetitive pattern detection.")

    # request_id: the response id without X-Request-Id (the header wins)
    st, body, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1,
                                               "request_id": "my-req.7"})
    check(st == 200 and json.loads(body)["id"] == "cmpl-my-req.7", "request_id: %r" % body[:200])
    c = srv.conn()
    c.request("POST", "/v1/chat/completions", body=json.dumps({
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "request_id": "r2"}),
        headers={"Content-Type": "application/json", "X-Request-Id": "abc-123"})
    got = json.loads(c.getresponse().read())
    c.close()
    check(got.get("id") == "chatcmpl-abc-123", "X-Request-Id wins over request_id: %r" % got)
    chunks = stream_chunks(srv, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "request_id": "r3"})
    check(all(ch["id"] == "chatcmpl-r3" for ch in chunks), "streamed request_id")

    # return_prompt_text: the rendered prompt, with reasoning_effort and documents in it
    tmpl = ("{% for m in messages %}{{ m.content }}/{{ m.reasoning_content }};{% endfor %}"
            "{{ reasoning_effort }},{{ enable_thinking }},"
            "{% for d in documents %}{{ d.title }}{% endfor %}")
    body = {"messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "A", "reasoning": "R"}],
            "max_tokens": 2, "chat_template": tmpl, "reasoning_effort": "none",
            "documents": [{"title": "D1", "text": "x"}], "return_prompt_text": True,
            "continue_final_message": True, "add_generation_prompt": False}
    st, out, _ = srv.post("/v1/chat/completions", body)
    r = json.loads(out)
    check(st == 200 and r.get("prompt_text") == "Hi/;A/R;none,False,D1"[:len("Hi/;A")],
          "return_prompt_text (continue_final_message cuts after the last content): %r"
          % out[:300])
    body.update(continue_final_message=False, add_generation_prompt=True)
    st, out, _ = srv.post("/v1/chat/completions", body)
    r = json.loads(out)
    check(st == 200 and r.get("prompt_text") == "Hi/;A/R;none,False,D1",
          "reasoning_effort, documents and reasoning reach the template: %r" % out[:300])
    chunks = stream_chunks(srv, "/v1/chat/completions", body)
    check(chunks[0].get("prompt_text") == "Hi/;A/R;none,False,D1" and
          all("prompt_text" not in ch for ch in chunks[1:]),
          "prompt_text in the first chunk only: %r" % chunks[:2])
    st, out, _ = srv.post("/v1/chat/completions", dict(body, return_prompt_text=False))
    check(st == 200 and "prompt_text" not in json.loads(out), "no prompt_text unless asked")

    # stream_interval: the first chunk at once, then stream_interval tokens per chunk
    base = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0,
            "ignore_eos": True}
    st, out, _ = srv.post("/v1/completions", base)
    whole = json.loads(out)["choices"][0]["text"]
    chunks = stream_chunks(srv, "/v1/completions", dict(base, stream_interval=3,
                                                        return_token_ids=True))
    sizes = [len(ch["choices"][0]["token_ids"]) for ch in chunks if ch["choices"]]
    text = "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"])
    check(sizes == [1, 3, 3, 3] and text == whole,
          "stream_interval 3: chunks of %r tokens, text %r vs %r" % (sizes, text, whole))
    chunks = stream_chunks(srv, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 7, "ignore_eos": True,
        "stream_interval": 4, "logprobs": True, "top_logprobs": 1})
    lps = [len(ch["choices"][0]["logprobs"]["content"]) for ch in chunks
           if ch["choices"] and ch["choices"][0].get("logprobs")]
    check(lps == [1, 4, 2], "chat stream_interval 4: logprobs per chunk %r" % lps)

    # seed -1 (no seed), max_tokens null (16), stream_options {} without stream
    st, out, _ = srv.post("/v1/completions", {"prompt": "x", "seed": -1, "max_tokens": 2})
    check(st == 200, "seed -1: %d" % st)
    st, out, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": None,
                                              "ignore_eos": True, "stream_options": {}})
    check(st == 200 and json.loads(out)["usage"]["completion_tokens"] == 16,
          "max_tokens null is 16, stream_options {} fine: %r" % out[:200])

    # vLLM's 400s, word for word
    msg = [{"role": "user", "content": "Hi"}]
    for path, body, param, message in (
            ("/v1/chat/completions", {"messages": msg, "thinking_token_budget": 10},
             "thinking_token_budget",
             "thinking_token_budget is set but reasoning_config is not configured. Please set "
             "--reasoning-parser and/or --reasoning-config to use thinking_token_budget."),
            ("/v1/chat/completions", {"messages": msg, "thinking_token_budget": 1.5},
             "thinking_token_budget",
             "`thinking_token_budget` must be a non-negative integer or -1 for unlimited."),
            ("/v1/completions", {"prompt": "x", "temperature": 2.5}, "temperature",
             "temperature must be in [0, 2], got 2.5."),
            ("/v1/completions", {"prompt": "x", "temperature": 0, "n": 2}, "n",
             "n must be 1 when using greedy sampling, got 2."),
            ("/v1/completions", {"prompt": "x", "stop": ["a", ""]}, "stop",
             "stop cannot contain an empty string."),
            ("/v1/completions", {"prompt": ""}, "prompt",
             "Either prompt or prompt_embeds must be provided and non-empty."),
            ("/v1/chat/completions", {"messages": msg, "cache_salt": "a@b"}, "cache_salt",
             "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', "
             "'/', '\\\\', or NUL."),
            ("/v1/completions", {"prompt": "x", "logprobs": -1}, "logprobs",
             "Requested sample logprobs of 512, which is greater than max allowed: 20"),
            ("/v1/chat/completions", {"messages": msg, "logprobs": True, "top_logprobs": -1},
             "logprobs", "Requested sample logprobs of 512, which is greater than max allowed: 20"),
            ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}},
             "stream_options", "Stream options can only be defined when `stream=True`."),
            ("/v1/chat/completions", {"messages": msg, "reasoning_effort": "huge"},
             "reasoning_effort", None),
            ("/v1/completions", {"prompt": "x", "stream_interval": 0}, "stream_interval", None)):
        expect_error(srv, path, body, 400, param)
        if message:
            expect_message(srv, path, body, param, message)


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


def cosine(a, b):
    """torch.nn.functional.cosine_similarity of two vectors (each norm clamped to 1e-8)."""
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (max(na, 1e-8) * max(nb, 1e-8))


def run_scoring(srv):
    """vLLM's bi-encoder scoring over the embeddings path: every score is the cosine similarity
    of the two texts' /v1/embeddings vectors, every pooled vector the embedding itself."""
    texts = ["The weather today", "Once upon a time", "hello world", "a b c d e f g h",
             "zebra", "Once upon a time"]
    st, out, _ = srv.post("/v1/embeddings", {"input": texts})
    check(st == 200, "embeddings for scoring: %d %r" % (st, out[:200]))
    emb = {t: d["embedding"] for t, d in zip(texts, json.loads(out)["data"])}
    ntok = {t: len(tokenize(srv, t)) for t in texts}
    pad = []  # tokens vLLM counts between a pair's prompts (1 with a pad token), once known

    def check_usage(usage, pairs, what):
        extra = usage["prompt_tokens"] - sum(ntok[a] + ntok[b] for a, b in pairs)
        if not pad:
            pad.append(extra // len(pairs) if extra in (0, len(pairs)) else -1)
        check(extra == pad[0] * len(pairs) and pad[0] in (0, 1)
              and usage["total_tokens"] == usage["prompt_tokens"],
              "%s usage (query + pad + document per pair): %r" % (what, usage))

    def score(path, body, pairs, what):
        st, out, _ = srv.post(path, body)
        r = json.loads(out) if st == 200 else {}
        check(st == 200 and r.get("id", "").startswith("score-") and r["object"] == "list"
              and r["model"] == "tiny" and isinstance(r["created"], int)
              and len(r["data"]) == len(pairs), "%s %s: %d %r" % (what, path, st, out[:300]))
        if st != 200:
            return r
        for i, ((a, b), d) in enumerate(zip(pairs, r["data"])):
            check(d["index"] == i and d["object"] == "score"
                  and abs(d["score"] - cosine(emb[a], emb[b])) < 1e-5,
                  "%s pair %d: %r, want %r" % (what, i, d, cosine(emb[a], emb[b])))
        check_usage(r["usage"], pairs, what)
        check(r["usage"]["completion_tokens"] == 0, "%s: completion_tokens 0" % what)
        return r

    q, docs = texts[0], texts[1:5]
    score("/score", {"text_1": q, "text_2": texts[2]}, [(q, texts[2])], "1:1")
    score("/v1/score", {"model": "tiny", "text_1": [q], "text_2": [texts[2]]}, [(q, texts[2])],
          "1:1 lists")
    score("/score", {"queries": q, "documents": docs}, [(q, d) for d in docs], "1:N")
    score("/score", {"queries": [q], "items": docs}, [(q, d) for d in docs], "1:N items")
    score("/score", {"data_1": texts[:3], "data_2": texts[3:]}, list(zip(texts[:3], texts[3:])),
          "N:N")
    r = score("/score", {"text_1": texts[1], "text_2": texts[5]}, [(texts[1], texts[5])], "same")
    check(r and abs(r["data"][0]["score"] - 1.0) < 1e-6, "a text scores 1 with itself: %r" % r)
    # use_activation (normalisation) does not move a cosine
    score("/score", {"text_1": q, "text_2": docs, "use_activation": False},
          [(q, d) for d in docs], "use_activation false")

    # truncate_prompt_tokens: the same cut as /v1/embeddings
    st, out, _ = srv.post("/v1/embeddings", {"input": [q, docs[2]], "truncate_prompt_tokens": 3})
    cut = [d["embedding"] for d in json.loads(out)["data"]]
    st, out, _ = srv.post("/score", {"text_1": q, "text_2": docs[2], "truncate_prompt_tokens": 3})
    r = json.loads(out)
    check(st == 200 and abs(r["data"][0]["score"] - cosine(cut[0], cut[1])) < 1e-5
          and r["usage"]["prompt_tokens"] == 6 + pad[0], "truncate_prompt_tokens: %r" % r)
    # max_tokens_per_doc / max_tokens_per_query: each text cut to the text of its first tokens
    # (counted without special tokens); a shorter one as it is
    def head(text, k):
        ids = tokenize(srv, text, special=False)
        return detokenize(srv, ids[:k]) if len(ids) > k else text

    heads = [head(d, 2) for d in docs] + [head(q, 3)]
    check(heads[2] == "a b" and heads[4] != q, "cut texts: %r" % heads)
    st, out, _ = srv.post("/v1/embeddings", {"input": heads})
    head_emb = [d["embedding"] for d in json.loads(out)["data"]]
    st, out, _ = srv.post("/score", {"text_1": q, "text_2": docs, "max_tokens_per_doc": 2,
                                     "max_tokens_per_query": 3})
    r = json.loads(out)
    check(st == 200 and all(abs(d["score"] - cosine(head_emb[4], head_emb[i])) < 1e-5
                            for i, d in enumerate(r["data"])),
          "max_tokens_per_doc/query: %r (heads %r)" % (r, heads))

    # rerank: best first, the documents as given, top_n
    want = sorted(range(len(docs)), key=lambda i: -cosine(emb[q], emb[docs[i]]))
    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
        st, out, _ = srv.post(path, {"model": "tiny", "query": q, "documents": docs})
        r = json.loads(out)
        check(st == 200 and r["id"].startswith("score-") and r["model"] == "tiny"
              and "object" not in r and [x["index"] for x in r["results"]] == want,
              "%s order: %r, want %r" % (path, out[:400], want))
        for x in r.get("results", []):
            check(x["document"] == {"text": docs[x["index"]], "multi_modal": None}
                  and abs(x["relevance_score"] - cosine(emb[q], emb[docs[x["index"]]])) < 1e-5,
                  "%s result %r" % (path, x))
        check(r["usage"]["prompt_tokens"] == sum(ntok[q] + pad[0] + ntok[d] for d in docs)
              and r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"]
              and set(r["usage"]) == {"prompt_tokens", "total_tokens"},
              "%s usage: %r" % (path, r["usage"]))
    for top_n, n in ((2, 2), (0, 4), (-1, 4), (9, 4), (1, 1)):
        st, out, _ = srv.post("/rerank", {"query": q, "documents": docs, "top_n": top_n})
        r = json.loads(out)
        check(st == 200 and [x["index"] for x in r["results"]] == want[:n],
              "rerank top_n %d: %r" % (top_n, out[:300]))
    st, out, _ = srv.post("/rerank", {"query": q, "documents": docs[0]})
    r = json.loads(out)
    check(st == 200 and len(r["results"]) == 1 and r["results"][0]["index"] == 0,
          "rerank of one document: %r" % out[:300])

    # pooling: the embeddings themselves, as the same JSON numbers
    st, out, _ = srv.post("/pooling", {"model": "tiny", "input": texts[:3]})
    r = json.loads(out)
    check(st == 200 and r["id"].startswith("pooling-") and r["object"] == "list"
          and r["model"] == "tiny" and [d["index"] for d in r["data"]] == [0, 1, 2]
          and all(d["object"] == "pooling" for d in r["data"])
          and [d["data"] for d in r["data"]] == [emb[t] for t in texts[:3]]
          and r["usage"]["prompt_tokens"] == sum(ntok[t] for t in texts[:3]),
          "pooling equals embeddings: %r" % out[:300])
    st, out, _ = srv.post("/pooling", {"input": texts[0], "encoding_format": "base64",
                                       "task": "embed"})
    raw = base64.b64decode(json.loads(out)["data"][0]["data"])
    vec = [x[0] for x in struct.iter_unpack("<f", raw)]
    check(st == 200 and len(vec) == len(emb[texts[0]])
          and max(abs(a - b) for a, b in zip(vec, emb[texts[0]])) < 1e-6,
          "pooling base64: %r" % out[:200])
    st, out, resp = srv.post("/pooling", {"input": texts[:2], "encoding_format": "bytes_only"})
    vec = [x[0] for x in struct.iter_unpack("<f", out)] if st == 200 else []
    check(st == 200 and resp.getheader("Content-Type", "").startswith("application/octet-stream")
          and len(vec) == 2 * len(emb[texts[0]])
          and max(abs(a - b) for a, b in zip(vec, emb[texts[0]] + emb[texts[1]])) < 1e-6,
          "pooling bytes_only: %d %r" % (st, out[:100]))
    st, out, _ = srv.post("/pooling", {"input": [texts[1]], "use_activation": False})
    st2, out2, _ = srv.post("/v1/embeddings", {"input": [texts[1]], "use_activation": False})
    check(st == 200 and st2 == 200
          and json.loads(out)["data"][0]["data"] == json.loads(out2)["data"][0]["embedding"],
          "pooling use_activation false equals the embedding's: %r %r" % (out[:200], out2[:200]))

    # vLLM's 400s (and the 404 of an unknown model)
    expect_message(srv, "/score", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "text_2",
                   "Input lengths must be either 1:1, 1:N or N:N")
    expect_message(srv, "/score", {"queries": [], "documents": ["a"]}, "queries",
                   "At least one text element must be given")
    expect_message(srv, "/rerank", {"query": "q", "documents": []}, "documents",
                   "At least one text_pair element must be given")
    expect_message(srv, "/rerank", {"query": "q", "documents": [{"content": [
        {"type": "text", "text": "x"}]}]}, None, "MultiModalParam is not supported for "
                   "LlamaForCausalLM")
    expect_message(srv, "/score", {"text_1": "a", "text_2": "b", "max_tokens_per_query": 256},
                   "max_tokens_per_query",
                   "max_tokens_per_query (256) must be less than max_model_len (256).")
    expect_message(srv, "/score", {"text_1": "a", "text_2": "b", "truncate_prompt_tokens": 257},
                   "truncate_prompt_tokens", "truncate_prompt_tokens value is greater than "
                   "max_model_len. Please request a smaller truncation size.")
    expect_message(srv, "/pooling", {"input": "a", "dimensions": 4}, "dimensions",
                   "dimensions is currently not supported")
    expect_message(srv, "/pooling", {"input": "a", "task": "classify"}, "task",
                   "Unsupported task: 'classify' Supported tasks: ('generate', 'embed')")
    for path, body, status, param in (
            ("/score", {"text_1": "a"}, 400, "text_2"),
            ("/score", {"text_1": 5, "text_2": "b"}, 400, "text_1"),
            ("/score", {"text_1": "a", "text_2": "b", "max_tokens_per_doc": -1}, 400,
             "max_tokens_per_doc"),
            ("/score", {"text_1": "x " * 300, "text_2": "b"}, 400, None),
            ("/score", {"model": "other", "text_1": "a", "text_2": "b"}, 404, "model"),
            ("/v1/score", b"{oops", 400, None),
            ("/rerank", {"query": "q"}, 400, "documents"),
            ("/v2/rerank", {"query": ["q"], "documents": ["d"]}, 400, "query"),
            ("/rerank", {"query": "q", "documents": [{"text": "d"}]}, 400, "documents"),
            ("/rerank", {"query": "q", "documents": ["d"], "top_n": 1.5}, 400, "top_n"),
            ("/pooling", {"input": []}, 400, "input"),
            ("/pooling", {"input": "a", "normalize": True}, 400, "normalize")):
        expect_error(srv, path, body, status, param, raw=isinstance(body, bytes))
    st, _, _ = srv.post("/score", {"text_1": "still", "text_2": "alive"})
    check(st == 200, "scoring keeps serving after bad input")


def responses_sse(srv, body, headers=None):
    """POST /v1/responses streamed: [(event line, data JSON)], the Content-Type."""
    c = srv.conn()
    c.request("POST", "/v1/responses", body=json.dumps(dict(body, stream=True)),
              headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    resp = c.getresponse()
    check(resp.status == 200, "/v1/responses stream %r: status %d" % (body, resp.status))
    ctype = resp.getheader("Content-Type", "")
    raw = resp.read().decode()
    c.close()
    events = []
    for frame in raw.split("\n\n"):
        if not frame:
            continue
        lines = frame.split("\n")
        ok = len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: ")
        check(ok, "SSE frame 'event: T\\ndata: J': %r" % frame[:200])
        if ok:
            events.append((lines[0][7:], json.loads(lines[1][6:])))
    check("[DONE]" not in raw, "a Responses stream has no [DONE]")
    for i, (name, ev) in enumerate(events):
        check(ev.get("type") == name and ev.get("sequence_number") == i,
              "event %d: %r with sequence_number %r" % (i, name, ev.get("sequence_number")))
    return events, ctype


RESPONSE_KEYS = ["id", "created_at", "incomplete_details", "instructions", "metadata", "model",
                 "object", "output", "parallel_tool_calls", "temperature", "tool_choice", "tools",
                 "top_p", "background", "max_output_tokens", "max_tool_calls",
                 "previous_response_id", "prompt", "reasoning", "service_tier", "status", "text",
                 "top_logprobs", "truncation", "usage", "user", "input_messages",
                 "output_messages"]


def run_responses(srv):
    """/v1/responses: the chat path's text in vLLM's Responses form, whole and streamed."""
    chat_body = {"messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Hello there"}],
                 "max_tokens": 12, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    st, out, _ = srv.post("/v1/chat/completions", chat_body)
    chat = json.loads(out)
    want = chat["choices"][0]["message"]["content"]
    want_status = "incomplete" if chat["choices"][0]["finish_reason"] == "length" else "completed"
    base = {"model": "tiny", "input": "Hello there", "instructions": "Be brief.",
            "max_output_tokens": 12, "temperature": 0}
    gen0 = srv.metric("vllm:generation_tokens_total")
    st, out, r = srv.post("/v1/responses", dict(base, metadata={"k": "v"}))
    resp = json.loads(out) if st == 200 else {}
    check(st == 200 and list(resp) == RESPONSE_KEYS,
          "/v1/responses keys in vLLM's order: %d %r" % (st, out[:300]))
    if st != 200:
        return
    msg = resp["output"][0]
    check(resp["id"].startswith("resp_") and resp["object"] == "response"
          and resp["model"] == "tiny" and resp["instructions"] == "Be brief."
          and resp["metadata"] == {"k": "v"} and resp["temperature"] == 0.0
          and resp["top_p"] == 1.0 and resp["max_output_tokens"] == 12
          and resp["tool_choice"] == "auto" and resp["tools"] == [] and resp["background"] is False
          and resp["parallel_tool_calls"] is True and resp["service_tier"] == "auto"
          and resp["truncation"] == "disabled" and resp["top_logprobs"] is None
          and resp["previous_response_id"] is None and resp["text"] is None
          and resp["reasoning"] is None and resp["user"] is None,
          "/v1/responses fields: %r" % {k: v for k, v in resp.items() if k != "output"})
    check(len(resp["output"]) == 1 and msg["type"] == "message" and msg["role"] == "assistant"
          and msg["status"] == "completed" and msg["id"].startswith("msg_")
          and msg["content"][0]["type"] == "output_text" and msg["content"][0]["annotations"] == []
          and msg["content"][0]["logprobs"] is None,
          "/v1/responses output item: %r" % msg)
    check(msg["content"][0]["text"] == want,
          "/v1/responses text equals the chat completion's: %r vs %r"
          % (msg["content"][0]["text"], want))
    u = resp["usage"]
    check(u["input_tokens"] == chat["usage"]["prompt_tokens"]
          and u["output_tokens"] == chat["usage"]["completion_tokens"]
          and u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
          and u["input_tokens_details"]["cached_tokens"] >= 0
          and u["output_tokens_details"]["reasoning_tokens"] == 0,
          "/v1/responses usage: %r vs chat %r" % (u, chat["usage"]))
    check(resp["status"] == want_status
          and (resp["incomplete_details"] == {"reason": "max_output_tokens"})
          == (want_status == "incomplete"),
          "/v1/responses status %r / %r, chat finish %r" % (resp["status"],
                                                           resp["incomplete_details"],
                                                           chat["choices"][0]["finish_reason"]))
    gen1 = srv.metric("vllm:generation_tokens_total")
    check(gen0 is not None and gen1 - gen0 >= u["output_tokens"],
          "vllm:generation_tokens_total counts /v1/responses: %r -> %r" % (gen0, gen1))

    # the same conversation as items, and the include'd logprobs equal chat's
    items = {"model": "tiny", "instructions": "Be brief.", "max_output_tokens": 12,
             "temperature": 0, "include": ["message.output_text.logprobs"], "top_logprobs": 2,
             "input": [{"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "Hello there"}]}]}
    st, out, _ = srv.post("/v1/responses", items)
    r2 = json.loads(out)
    part = r2["output"][0]["content"][0] if st == 200 else {}
    clp = chat["choices"][0]["logprobs"]["content"]
    check(st == 200 and part.get("text") == want and r2["top_logprobs"] == 2
          and len(part["logprobs"]) == len(clp)
          and all(a["token"] == b["token"] and abs(a["logprob"] - b["logprob"]) < 1e-6
                  and a["bytes"] == b["bytes"]
                  and [t["token"] for t in a["top_logprobs"]] ==
                  [t["token"] for t in b["top_logprobs"]]
                  for a, b in zip(part["logprobs"], clp)),
          "/v1/responses items + logprobs equal chat's: %r" % out[:400])

    # x-request-id as chat uses it; the body's request_id as vLLM does
    c = srv.conn()
    c.request("POST", "/v1/responses", body=json.dumps(dict(base, max_output_tokens=1)),
              headers={"Content-Type": "application/json", "x-request-id": "abc-123"})
    got = json.loads(c.getresponse().read())
    c.close()
    check(got.get("id") == "resp_abc-123", "x-request-id: id %r" % got.get("id"))
    st, out, _ = srv.post("/v1/responses", dict(base, max_output_tokens=1, request_id="my-id.1"))
    check(st == 200 and json.loads(out)["id"] == "my-id.1", "request_id: %r" % out[:200])

    # max_output_tokens reached: incomplete
    st, out, _ = srv.post("/v1/responses", dict(base, max_output_tokens=1))
    r3 = json.loads(out)
    check(st == 200 and r3["status"] == "incomplete"
          and r3["incomplete_details"] == {"reason": "max_output_tokens"}
          and r3["usage"]["output_tokens"] == 1 and r3["max_output_tokens"] == 1,
          "max_output_tokens 1: %r" % out[:300])

    # streamed: vLLM's events, the same text
    events, ctype = responses_sse(srv, dict(base, include=["message.output_text.logprobs"],
                                            top_logprobs=1))
    names = [n for n, _ in events]
    deltas = [e for n, e in events if n == "response.output_text.delta"]
    want_names = (["response.created", "response.in_progress"] +
                  (["response.output_item.added", "response.content_part.added"] +
                   ["response.output_text.delta"] * len(deltas) +
                   ["response.output_text.done", "response.content_part.done",
                    "response.output_item.done"] if want else []) + ["response.completed"])
    check(ctype.startswith("text/event-stream") and names == want_names,
          "/v1/responses stream events: %r (%s)" % (names, ctype))
    text = "".join(e["delta"] for e in deltas)
    check(text == want, "streamed text equals the chat completion's: %r vs %r" % (text, want))
    if events and want:
        added = events[2][1]["item"]
        final = events[-1][1]["response"]
        check(events[0][1]["response"]["status"] == "in_progress"
              and events[0][1]["response"]["output"] == []
              and events[0][1]["response"]["usage"] is None,
              "response.created: %r" % events[0][1])
        check(all(e["item_id"] == added["id"] and e["output_index"] == 0
                  and e["content_index"] == 0 and len(e["logprobs"]) == 1 for e in deltas),
              "deltas name the item and carry one logprob each: %r" % deltas[:2])
        check(events[-4][1]["text"] == want and events[-2][1]["item"]["status"] == "completed",
              "output_text.done / output_item.done: %r" % events[-4][1])
        check(final["status"] == want_status and final["output"][0]["id"] == added["id"]
              and final["output"][0]["content"][0]["text"] == want
              and len(final["output"][0]["content"][0]["logprobs"]) == final["usage"]["output_tokens"]
              and final["usage"]["output_tokens"] == u["output_tokens"],
              "response.completed: %r" % final)

    # text.format json_schema: the structured-output path
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}},
              "required": ["name"]}
    st, out, _ = srv.post("/v1/responses", {
        "input": "A user?", "max_output_tokens": 128, "temperature": 0,
        "text": {"format": {"type": "json_schema", "name": "u", "schema": schema,
                            "strict": True}}})
    r4 = json.loads(out) if st == 200 else {}
    try:
        doc = json.loads(r4["output"][0]["content"][0]["text"])
        ok = isinstance(doc, dict) and isinstance(doc.get("name"), str) and len(doc["name"]) <= 6
    except (KeyError, IndexError, ValueError):
        ok = False
    check(st == 200 and ok and r4["status"] == "completed"
          and r4["text"]["format"]["type"] == "json_schema",
          "json_schema output parses and fits the schema: %r" % out[:400])

    # a named function tool: a function_call item whose arguments fit its parameters
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
              "parameters": {"type": "object", "properties": {
                  "city": {"type": "string", "maxLength": 6}}, "required": ["city"]}}]
    tc = {"input": "Weather in Paris?", "tools": tools, "max_output_tokens": 128,
          "temperature": 0, "tool_choice": {"type": "function", "name": "get_weather"}}
    st, out, _ = srv.post("/v1/responses", tc)
    r5 = json.loads(out) if st == 200 else {}
    fc = r5.get("output", [{}])[-1]
    try:
        args = json.loads(fc["arguments"])
    except (KeyError, ValueError):
        args = None
    check(st == 200 and len(r5["output"]) == 1 and fc["type"] == "function_call"
          and fc["name"] == "get_weather" and fc["status"] == "completed"
          and fc["id"].startswith("fc_") and fc["call_id"]
          and isinstance(args, dict) and isinstance(args.get("city"), str)
          and r5["tools"] == tools and r5["tool_choice"] == tc["tool_choice"],
          "named tool: a function_call item: %r" % out[:400])
    events, _ = responses_sse(srv, tc)
    names = [n for n, _ in events]
    check(names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
          and names[-3:] == ["response.function_call_arguments.done",
                             "response.output_item.done", "response.completed"]
          and events[2][1]["item"]["type"] == "function_call"
          and "".join(e["delta"] for n, e in events
                      if n == "response.function_call_arguments.delta") == fc.get("arguments")
          and events[-1][1]["response"]["output"][0]["arguments"] == fc.get("arguments"),
          "named tool streamed: %r" % names)
    # "auto" without --enable-auto-tool-choice: the text, as vLLM without a tool parser
    st, out, _ = srv.post("/v1/responses", dict(tc, tool_choice="auto", max_output_tokens=4))
    check(st == 200 and json.loads(out)["output"][0]["type"] == "message",
          "tool_choice auto without a parser: a message: %r" % out[:300])

    # vLLM's errors, with the Responses field names
    long_input = "hello " * 300
    cases = [
        ({"model": "tiny"}, 400, "input"),
        ({"input": 5}, 400, "input"),
        ({"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"input": "x", "max_output_tokens": 1000}, 400, "max_output_tokens"),
        ({"input": long_input}, 400, "input"),
        ({"input": "x", "temperature": -1}, 400, "temperature"),
        ({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 30}, 400,
         "top_logprobs"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, 400, "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
         400, "input[0].content[0]"),
        ({"input": "x", "prompt": {"id": "p"}}, 400, "prompt"),
        ({"input": "x", "background": True}, 400, "background"),
        ({"input": "x", "background": True, "store": False}, 400, "background"),
        ({"input": "x", "previous_response_id": "resp_1"}, 404, "response_id"),
        ({"input": "x", "model": "other"}, 404, "model"),
        ({"input": "x", "text": {"format": {"type": "json_object"}}}, 501, None),
    ]
    for body, status, param in cases:
        expect_error(srv, "/v1/responses", body, status, param)
    st, out, _ = srv.post("/v1/responses", {"input": "x", "text": {"format": {"type":
                                                                                "json_object"}}})
    check(json.loads(out)["error"]["type"] == "NotImplementedError",
          "json_object: vLLM's NotImplementedError: %r" % out)
    expect_error(srv, "/v1/responses", b"{bad", 400, None, raw=True)
    st, out, _ = srv.get("/v1/responses/resp_123")
    err = json.loads(out).get("error", {})
    check(st == 404 and err.get("message") == "Response with id 'resp_123' not found."
          and err.get("param") == "response_id", "GET /v1/responses/{id}: %d %r" % (st, out))
    st, out, _ = srv.post("/v1/responses/resp_123/cancel", {})
    check(st == 404 and "resp_123" in out.decode(), "cancel: %d %r" % (st, out))
    st, _, _ = srv.post("/v1/responses", dict(base, max_output_tokens=2))
    check(st == 200, "the server keeps serving /v1/responses after bad input")


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
