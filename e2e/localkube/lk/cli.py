"""The `localkube` command: up / down / status / fault.

    localkube up --dir DIR [--port N] [--nodes N] [--images FILE] [--wait S]
                 [--runtime process|podman]
    localkube down --dir DIR
    localkube status --dir DIR
    localkube fault --dir DIR drop-watches | expire | fail ... | latency ... | clear | list

`up` starts two detached processes (their own sessions, so they outlive the CLI): the API server
(python3 -m lk.apiserver, log DIR/apiserver.log) and the controller manager + scheduler +
kubelet (python3 -m lk.controllers, log DIR/controllers.log); it waits for /readyz and Ready
nodes, then writes DIR/kubeconfig and DIR/state.json.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

LK_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_IMAGES = os.path.join(LK_ROOT, "images.json")

if LK_ROOT not in sys.path:
    sys.path.insert(0, LK_ROOT)

from lk import client as kc  # noqa: E402
from lk.kubelet import kill_recorded, proc_start_time  # noqa: E402
from lk import runtime_podman  # noqa: E402


class CliError(Exception):
    pass


def eprint(*a):
    print(*a, file=sys.stderr)


# ---- processes ------------------------------------------------------------------------------


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [x.decode("utf-8", "replace") for x in f.read().split(b"\0") if x]
    except OSError:
        return None


def is_component(pid, module, dir_):
    """True when pid is a live `python3 -m <module> --dir <dir_>` process."""
    argv = cmdline(pid)
    if not argv or module not in argv:
        return False
    try:
        i = argv.index("--dir")
    except ValueError:
        return False
    if i + 1 >= len(argv):
        return False
    d = argv[i + 1]
    if not os.path.isabs(d):
        try:
            d = os.path.join(os.readlink("/proc/%d/cwd" % pid), d)
        except OSError:
            return False
    if os.path.realpath(d) != os.path.realpath(dir_):
        return False
    st = proc_start_time(pid)
    return st is not None and not _zombie(pid)


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
        return data[data.rindex(")") + 2] == "Z"
    except (OSError, ValueError, IndexError):
        return True


def find_components(dir_):
    """{module: [pids]} of localkube processes serving dir_ (found by scanning /proc)."""
    out = {"lk.apiserver": [], "lk.controllers": []}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        pid = int(p)
        for m in out:
            if is_component(pid, m, dir_):
                out[m].append(pid)
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def stop_pids(pids, timeout, what):
    pids = [p for p in pids if alive(p)]
    if not pids:
        return
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for p in pids:
        if alive(p):
            eprint("localkube: %s (pid %d) did not stop in %.0fs; SIGKILL" % (what, p, timeout))
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)


# ---- state ----------------------------------------------------------------------------------


def state_path(dir_):
    return os.path.join(dir_, "state.json")


def read_state(dir_):
    try:
        with open(state_path(dir_)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_state(dir_, st):
    tmp = state_path(dir_) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(st, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, state_path(dir_))


def server_of(dir_):
    st = read_state(dir_)
    if not st.get("server"):
        raise CliError("localkube: no running instance in %s (no state.json); run `localkube up "
                       "--dir %s`" % (dir_, dir_))
    return st["server"]


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- cluster:
    server: {server}
  name: localkube
contexts:
- context:
    cluster: localkube
    namespace: default
    user: localkube
  name: localkube
current-context: localkube
preferences: {{}}
users:
- name: localkube
  user: {{}}
"""


def tail(path, n=20):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join("    " + x for x in lines[-n:])
    except OSError:
        return "    (no log)"


# ---- commands -------------------------------------------------------------------------------


def cmd_up(a):
    d = os.path.abspath(a.dir)
    os.makedirs(d, exist_ok=True)
    running = find_components(d)
    if running["lk.apiserver"] or running["lk.controllers"]:
        st = read_state(d)
        raise CliError("localkube: already running in %s (apiserver pid %s, controllers pid %s%s)"
                       "; run `localkube down --dir %s` first" % (
                           d, ",".join(map(str, running["lk.apiserver"])) or "-",
                           ",".join(map(str, running["lk.controllers"])) or "-",
                           ", port %s" % st["port"] if st.get("port") else "", a.dir))
    images = os.path.abspath(a.images or DEFAULT_IMAGES)
    if not os.path.isfile(images):
        raise CliError("localkube: images file %s not found" % images)
    if a.runtime == "podman":
        why = runtime_podman.check_podman()
        if why:
            raise CliError("localkube up --runtime podman: %s" % why)
    port_file = os.path.join(d, "apiserver.port")
    for f in (port_file, state_path(d)):
        try:
            os.unlink(f)
        except OSError:
            pass
    st = {"dir": d, "nodes": a.nodes, "images": images, "startedAt": kc.now_rfc3339(),
          "runtime": a.runtime}
    if a.runtime == "podman":
        # podman's configuration and storage, so that `down` cleans up in the same storage
        st["podmanEnv"] = runtime_podman.podman_env()
    started = []
    deadline = time.monotonic() + a.wait

    def spawn(module, args, logname):
        logf = open(os.path.join(d, logname), "ab")
        env = dict(os.environ)
        env["PYTHONPATH"] = LK_ROOT + (os.pathsep + env["PYTHONPATH"]
                                       if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        p = subprocess.Popen([sys.executable, "-m", module] + args, cwd=LK_ROOT, env=env,
                             stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             start_new_session=True, close_fds=True)
        logf.close()
        started.append(p)
        return p

    def fail(msg, log):
        for p in reversed(started):
            stop_pids([p.pid], 5, "process")
            try:
                p.wait(1)
            except subprocess.TimeoutExpired:
                pass
        kill_recorded(os.path.join(d, "kubelet", "pids"))
        if a.runtime == "podman":
            runtime_podman.cleanup_dir(d)
        raise CliError("localkube up: %s\n  last lines of %s:\n%s" % (msg, log, tail(log)))

    api = spawn("lk.apiserver", ["--dir", d, "--port", str(a.port)], "apiserver.log")
    st["apiserver"] = {"pid": api.pid}
    write_state(d, st)
    apilog = os.path.join(d, "apiserver.log")
    port = a.port
    while port == 0:
        if api.poll() is not None:
            fail("the API server exited with %s" % api.returncode, apilog)
        try:
            with open(port_file) as f:
                txt = f.read().strip()
            if txt:
                port = int(txt)
                break
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            fail("the API server did not write %s" % port_file, apilog)
        time.sleep(0.05)
    server = "http://127.0.0.1:%d" % port
    st.update({"port": port, "server": server})
    write_state(d, st)
    c = kc.Client(server, "cli", timeout=5, retries=0)
    while True:
        if api.poll() is not None:
            fail("the API server exited with %s" % api.returncode, apilog)
        try:
            c.request("GET", "/readyz", raw=True)
            break
        except (kc.ApiError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            fail("the API server did not become ready in %ss" % a.wait, apilog)
        time.sleep(0.1)
    kubeconfig = os.path.join(d, "kubeconfig")
    with open(kubeconfig + ".tmp", "w") as f:
        f.write(KUBECONFIG.format(server=server))
    os.replace(kubeconfig + ".tmp", kubeconfig)
    st["kubeconfig"] = kubeconfig
    cargs = ["--dir", d, "--server", server, "--nodes", str(a.nodes), "--images", images,
             "--backoff-scale", str(a.backoff_scale), "--runtime", a.runtime]
    if a.node_cpu:
        cargs += ["--node-cpu", a.node_cpu]
    if a.node_memory:
        cargs += ["--node-memory", a.node_memory]
    ctl = spawn("lk.controllers", cargs, "controllers.log")
    st["controllers"] = {"pid": ctl.pid}
    write_state(d, st)
    ctllog = os.path.join(d, "controllers.log")
    while True:
        if ctl.poll() is not None:
            fail("the controllers exited with %s" % ctl.returncode, ctllog)
        try:
            nodes = c.list(kc.NODES).get("items") or []
            ready = [n for n in nodes if (kc.get_condition(n.get("status"), "Ready") or {}).get(
                "status") == "True" and n["metadata"]["name"].startswith("localkube-node-")]
            if len(ready) >= a.nodes:
                break
        except (kc.ApiError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            fail("nodes did not become Ready in %ss" % a.wait, ctllog)
        time.sleep(0.1)
    st["readyAt"] = kc.now_rfc3339()
    write_state(d, st)
    print("localkube is up: %s (apiserver pid %d, controllers pid %d, %d nodes, runtime %s)" % (
        server, api.pid, ctl.pid, a.nodes, a.runtime))
    print("kubeconfig: %s" % kubeconfig)
    print("export KUBECONFIG=%s" % kubeconfig)
    return 0


def cmd_down(a):
    d = os.path.abspath(a.dir)
    st = read_state(d)
    procs = find_components(d)
    for what, module in (("controllers", "lk.controllers"), ("apiserver", "lk.apiserver")):
        pid = (st.get(what) or {}).get("pid")
        if pid and is_component(pid, module, d) and pid not in procs[module]:
            procs[module].append(pid)
    was = bool(procs["lk.controllers"] or procs["lk.apiserver"])
    stop_pids(procs["lk.controllers"], a.timeout, "controllers")
    stop_pids(procs["lk.apiserver"], 10, "apiserver")
    n = kill_recorded(os.path.join(d, "kubelet", "pids"))
    removed = 0
    if st.get("runtime") == "podman":
        env = dict(os.environ)
        env.update(st.get("podmanEnv") or {})
        removed = runtime_podman.cleanup_dir(d, env)
    for f in (state_path(d), os.path.join(d, "apiserver.port")):
        try:
            os.unlink(f)
        except OSError:
            pass
    if was:
        print("localkube in %s stopped%s%s" % (
            d, " (killed %d leftover pod process group(s))" % n if n else "",
            " (removed %d leftover container(s))" % removed if removed else ""))
    else:
        print("localkube: nothing running in %s" % d)
    return 0


def cmd_status(a):
    d = os.path.abspath(a.dir)
    st = read_state(d)
    procs = find_components(d)
    if not st and not any(procs.values()):
        print("localkube: nothing running in %s" % d)
        return 3
    print("dir:          %s" % d)
    print("server:       %s" % st.get("server", "-"))
    print("port:         %s" % st.get("port", "-"))
    print("kubeconfig:   %s" % st.get("kubeconfig", "-"))
    print("runtime:      %s" % st.get("runtime", "process"))
    for what, module in (("apiserver", "lk.apiserver"), ("controllers", "lk.controllers")):
        pids = procs[module]
        print("%-13s %s" % (what + ":", "pid %s running" % ",".join(map(str, pids)) if pids
                            else "not running"))
    if not st.get("server") or not procs["lk.apiserver"]:
        return 1
    c = kc.Client(st["server"], "cli", timeout=5, retries=1)
    try:
        nodes = c.list(kc.NODES).get("items") or []
        pods = c.list(kc.PODS).get("items") or []
    except (kc.ApiError, ConnectionError) as e:
        print("api:          unreachable: %s" % e)
        return 1
    print("nodes:")
    for n in nodes:
        ready = (kc.get_condition(n.get("status"), "Ready") or {}).get("status", "Unknown")
        print("  %-24s Ready=%s" % (n["metadata"]["name"], ready))
    print("pods:")
    if not pods:
        print("  (none)")
    for p in pods:
        s = p.get("status") or {}
        print("  %-40s %-10s %-15s %s%s" % (
            "%s/%s" % (p["metadata"].get("namespace"), p["metadata"]["name"]),
            s.get("phase", "-"), s.get("podIP", "-"), (p.get("spec") or {}).get("nodeName")
            or "-", " (terminating)" if p["metadata"].get("deletionTimestamp") else ""))
    return 0


def cmd_fault(a):
    d = os.path.abspath(a.dir)
    c = kc.Client(server_of(d), "cli", timeout=10, retries=0)
    if a.action == "list":
        out = c.request("GET", "/localkube/faults")
    elif a.action == "clear":
        out = c.request("DELETE", "/localkube/faults")
    else:
        body = {"drop-watches": {"type": "dropWatches"}, "expire": {"type": "expire"}}.get(
            a.action)
        if a.action == "fail":
            if a.code is None:
                raise CliError("localkube fault fail: --code is required")
            body = {"type": "fail", "verb": a.verb, "resource": a.resource, "code": a.code,
                    "count": a.count}
            if a.retry_after is not None:
                body["retryAfter"] = a.retry_after
        elif a.action == "latency":
            if a.ms is None:
                raise CliError("localkube fault latency: --ms is required")
            body = {"type": "latency", "ms": a.ms, "verb": a.verb, "resource": a.resource,
                    "count": a.count if a.count is not None else 0}
        if a.internal:
            body["internal"] = True
        out = c.request("POST", "/localkube/faults", body=body)
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def parser():
    ap = argparse.ArgumentParser(prog="localkube", description="single-machine Kubernetes "
                                 "stand-in for development and tests (never production)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the API server and the controllers")
    up.add_argument("--dir", required=True)
    up.add_argument("--port", type=int, default=0, help="API server port (0: a free one)")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--images", default=None, help="image map (default: images.json here)")
    up.add_argument("--wait", type=float, default=60.0, help="seconds to wait for readiness")
    up.add_argument("--backoff-scale", type=float, default=1.0,
                    help="scale the kubelet's restart back-off (tests use e.g. 0.1)")
    up.add_argument("--node-cpu", default=None)
    up.add_argument("--node-memory", default=None)
    up.add_argument("--runtime", choices=["process", "podman"], default="process",
                    help="run containers as local processes (images.json; the default) or from "
                         "their images with podman (they must be in podman's local storage)")
    up.set_defaults(fn=cmd_up)
    dn = sub.add_parser("down", help="stop everything started by up (idempotent)")
    dn.add_argument("--dir", required=True)
    dn.add_argument("--timeout", type=float, default=30.0,
                    help="seconds to wait for the controllers to stop pods")
    dn.set_defaults(fn=cmd_down)
    s = sub.add_parser("status", help="show what runs")
    s.add_argument("--dir", required=True)
    s.set_defaults(fn=cmd_status)
    f = sub.add_parser("fault", help="fault injection (see README.md)")
    f.add_argument("--dir", required=True)
    f.add_argument("action", choices=["drop-watches", "expire", "fail", "latency", "clear",
                                      "list"])
    f.add_argument("--verb", default="*")
    f.add_argument("--resource", default="*")
    f.add_argument("--code", type=int, default=None)
    f.add_argument("--count", type=int, default=None)
    f.add_argument("--retry-after", type=int, default=None)
    f.add_argument("--ms", type=int, default=None)
    f.add_argument("--internal", action="store_true",
                   help="also hit localkube's own components")
    f.set_defaults(fn=cmd_fault)
    return ap


def main(argv=None):
    a = parser().parse_args(argv)
    if a.cmd == "fault" and a.action == "fail" and a.count is None:
        a.count = 1
    try:
        return a.fn(a)
    except CliError as e:
        eprint(str(e))
        return 1
    except kc.ApiError as e:
        eprint("localkube: %s" % e)
        return 1
    except ConnectionError as e:
        eprint("localkube: cannot reach the API server: %s" % e)
        return 1
