"""Fault injection for the localkube API server (the /localkube/faults API).

Fault specs (JSON bodies of POST /localkube/faults):
  {"type":"dropWatches"}                    close every open watch stream now
  {"type":"expire"}                         compact history (every RV / continue token so far is
                                            too old)
  {"type":"fail","verb":V,"resource":R,"code":C,"count":N,"retryAfter":S}
                                            the next N matching requests fail with HTTP code C
                                            (N=0: until cleared; default 1)
  {"type":"latency","ms":M,"verb":V,"resource":R,"count":N}
                                            delay matching requests by M ms (N=0 / absent: until
                                            cleared)
Any fault may carry "internal": true to also hit requests whose User-Agent starts with
"localkube/" (exempt by default).  V is one of VERBS or "*"; R is a plural resource name
(optionally "plural/subresource") or "*".
"""

import threading

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
TYPES = ("dropWatches", "expire", "fail", "latency")


class FaultError(ValueError):
    """A malformed fault spec; str(e) names the bad field."""


def _int_field(spec, name, default, lo, hi):
    v = spec.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise FaultError('invalid fault: field "%s" must be an integer between %d and %d'
                         % (name, lo, hi))
    return v


def validate(spec):
    """Returns the normalized fault dict or raises FaultError."""
    if not isinstance(spec, dict):
        raise FaultError("invalid fault: the body must be a JSON object")
    t = spec.get("type")
    if t not in TYPES:
        raise FaultError('invalid fault: field "type" must be one of %s' % ", ".join(TYPES))
    known = {"type", "internal"}
    out = {"type": t}
    if t in ("fail", "latency"):
        known |= {"verb", "resource", "count"}
        verb = spec.get("verb", "*")
        if verb != "*" and verb not in VERBS:
            raise FaultError('invalid fault: field "verb" must be "*" or one of %s'
                             % ", ".join(VERBS))
        res = spec.get("resource", "*")
        if not isinstance(res, str) or not res:
            raise FaultError('invalid fault: field "resource" must be a non-empty string')
        out["verb"] = verb
        out["resource"] = res
        if t == "fail":
            known |= {"code", "retryAfter", "message"}
            out["code"] = _int_field(spec, "code", 500, 400, 599)
            out["count"] = _int_field(spec, "count", 1, 0, 1000000)
            out["retryAfter"] = _int_field(spec, "retryAfter", 1, 0, 3600)
            msg = spec.get("message")
            if msg is not None and not isinstance(msg, str):
                raise FaultError('invalid fault: field "message" must be a string')
            if msg:
                out["message"] = msg
        else:
            known |= {"ms"}
            if "ms" not in spec:
                raise FaultError('invalid fault: field "ms" is required')
            out["ms"] = _int_field(spec, "ms", 0, 0, 600000)
            out["count"] = _int_field(spec, "count", 0, 0, 1000000)
    internal = spec.get("internal", False)
    if not isinstance(internal, bool):
        raise FaultError('invalid fault: field "internal" must be a boolean')
    out["internal"] = internal
    for k in spec:
        if k not in known:
            raise FaultError('invalid fault: unknown field "%s"' % k)
    return out


class Faults:
    """The active fail/latency faults.  Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._faults = []
        self._next_id = 1

    def add(self, spec):
        f = validate(spec)
        if f["type"] in ("fail", "latency"):
            with self._lock:
                f["id"] = self._next_id
                self._next_id += 1
                if f["count"]:
                    f["remaining"] = f["count"]
                self._faults.append(f)
        return f

    def list(self):
        with self._lock:
            return [dict(f) for f in self._faults]

    def clear(self):
        with self._lock:
            n = len(self._faults)
            self._faults = []
            return n

    def match(self, verb, resource, user_agent):
        """Consumes matching faults.  Returns (latency_ms, fail_fault_or_None)."""
        internal_client = (user_agent or "").startswith("localkube/")
        latency = 0
        fail = None
        with self._lock:
            keep = []
            for f in self._faults:
                hit = (not internal_client or f["internal"]) and \
                    f["verb"] in ("*", verb) and _res_match(f["resource"], resource)
                if hit and f["type"] == "fail" and fail is not None:
                    hit = False  # one failure per request; later faults wait their turn
                if hit:
                    if f["type"] == "latency":
                        latency += f["ms"]
                    else:
                        fail = f
                    if "remaining" in f:
                        f["remaining"] -= 1
                        if f["remaining"] <= 0:
                            continue
                keep.append(f)
            self._faults = keep
        return latency, fail


def _res_match(pattern, resource):
    if pattern == "*":
        return True
    if pattern == resource:
        return True
    return "/" in resource and "/" not in pattern and resource.split("/", 1)[0] == pattern
