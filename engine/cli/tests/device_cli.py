#!/usr/bin/env python3
"""--device of `tandem-engine serve` and `bench` (Python 3 stdlib only).

    device_cli.py TANDEM_ENGINE TANDEM_GENMODEL WORK_DIR

On a machine without a usable CUDA device (these build machines):
  * `serve --device cuda` fails at start with exit status 2 and a message naming the cause (no
    usable CUDA device, or no CUDA backend in this build) before it loads anything;
  * `serve --device auto` serves on the CPU backend: the startup log says so, and a completion
    is answered;
  * `bench --device cuda` fails the same way, `bench --device cpu` runs and reports CPU;
  * a bad --device value is a usage error (2).
On a machine with a CUDA device and a CUDA build, `--device cuda` and `--device auto` must both
serve on the cuda backend instead (checked through the startup log and a completion).
"""

import http.client
import json
import os
import socket
import subprocess
import sys
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


def serve(exe, model, device, log_path):
    """Starts serve; returns (proc, port) once healthy, or (proc, None) when it exited."""
    port = free_port()
    log = open(log_path, "w")
    proc = subprocess.Popen([exe, "serve", "--model", model, "--host", "127.0.0.1", "--port",
                             str(port), "--threads", "1", "--max-model-len", "128", "--device",
                             device, "--kv-cache-memory", "16MiB"], stdout=log, stderr=log)
    for _ in range(400):
        if proc.poll() is not None:
            return proc, None
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    return proc, None


def complete(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0}
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    return r.status, data


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read(path):
    with open(path) as f:
        return f.read()


def has_gpu(exe, model):
    """Whether this build and machine run --device cuda (bench -p 1 -n 0 is quick)."""
    r = subprocess.run([exe, "bench", "--model", model, "-p", "1", "-n", "0", "-r", "1",
                        "--device", "cuda"], capture_output=True, text=True, timeout=300)
    return r.returncode == 0, r


def main():
    exe, gen, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab",
                    "512", "--type", "f16", "--seed", "7"], check=True, stdout=subprocess.DEVNULL)

    gpu, bench_cuda = has_gpu(exe, model)
    print("CUDA device usable:", gpu, flush=True)
    if not gpu:
        check(bench_cuda.returncode == 2, "bench --device cuda without a GPU exits 2 (got %d)" %
              bench_cuda.returncode)
        check("--device cuda" in bench_cuda.stderr and
              ("no usable CUDA device" in bench_cuda.stderr or
               "no CUDA backend" in bench_cuda.stderr),
              "bench --device cuda names the cause: " + bench_cuda.stderr.strip())

    # serve --device cuda
    log = os.path.join(work, "serve-cuda.log")
    proc, port = serve(exe, model, "cuda", log)
    if gpu:
        check(port is not None, "serve --device cuda starts on a GPU machine; see " + log)
        if port:
            st, data = complete(port)
            check(st == 200 and len(data["choices"][0]["text"]) >= 0, "completion on cuda")
            check("cuda backend" in read(log), "the startup log names the cuda backend")
            stop(proc)
    else:
        check(port is None and proc.returncode == 2,
              "serve --device cuda without a GPU exits 2 at start (got %s)" % proc.returncode)
        text = read(log)
        check("--device cuda:" in text and ("no usable CUDA device" in text or
                                             "no CUDA backend" in text),
              "serve --device cuda names the cause: " + text.strip())
        check("model " not in text, "serve --device cuda fails before loading the model")

    # serve --device auto
    log = os.path.join(work, "serve-auto.log")
    proc, port = serve(exe, model, "auto", log)
    check(port is not None, "serve --device auto starts; see " + log)
    if port:
        st, data = complete(port)
        check(st == 200 and data.get("usage", {}).get("completion_tokens") == 4,
              "completion with --device auto: %s %s" % (st, data))
        stop(proc)
        text = read(log)
        want = "cuda backend" if gpu else "cpu backend"
        check(want in text, "serve --device auto runs the %s: %s" % (want, text.strip()))

    # bench --device cpu, and a bad value
    r = subprocess.run([exe, "bench", "--model", model, "-p", "4", "-n", "2", "-r", "1", "-t",
                        "1", "--device", "cpu"], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "| CPU |" in r.stdout, "bench --device cpu: " + r.stdout +
          r.stderr)
    r = subprocess.run([exe, "serve", "--model", model, "--device", "tpu"], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 2 and "--device" in r.stderr, "--device tpu is a usage error")

    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
