#!/usr/bin/env python3
"""RBAC checks for the operator e2e tests (Python 3 standard library only).

    rbac_check.py covers CLUSTERROLE_JSON ROLELIST_JSON
        Every permission of every Role in ROLELIST_JSON (a RoleList, e.g. the Roles the operator
        created) is held by CLUSTERROLE_JSON. Kubernetes' RBAC escalation prevention refuses a
        client that creates (or binds) a Role granting more than it holds itself, unless it has
        the "escalate" ("bind") verb, so the operator's ClusterRole must cover these Roles.

    rbac_check.py allows CLUSTERROLE_JSON ROLE_JSON ROLE_NAMESPACE < REQUESTS
        Every request on stdin ("METHOD PATH CODE" lines, from localkube's API server log) is
        allowed by the ClusterRole, or, in ROLE_NAMESPACE, by the Role: the request is mapped to
        its RBAC attributes (verb, API group, resource[/subresource], namespace, name) as the
        API server's RequestInfoResolver does.

    rbac_check.py verbs < REQUESTS
        Prints "VERB GROUP/RESOURCE COUNT" for the requests on stdin (same format as above).

Exit 0 when everything is allowed, 1 with one line per violation otherwise.
"""

import json
import sys
import urllib.parse


def rule_allows(rule, verb, group, resource, name):
    def has(key, value):
        vals = rule.get(key) or []
        return "*" in vals or value in vals

    if not has("verbs", verb) or not has("apiGroups", group) or not has("resources", resource):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)


def allowed(rules, verb, group, resource, name):
    return any(rule_allows(r, verb, group, resource, name) for r in rules)


def covers(cluster_role, role_list):
    rules = cluster_role.get("rules") or []
    bad = []
    n = 0
    for role in role_list.get("items") or []:
        for r in role.get("rules") or []:
            for g in r.get("apiGroups") or []:
                for res in r.get("resources") or []:
                    for v in r.get("verbs") or []:
                        for name in (r.get("resourceNames") or [None]):
                            n += 1
                            if not allowed(rules, v, g, res, name):
                                bad.append("Role %s/%s grants %s on %s%s%s, which the ClusterRole "
                                           "%s does not hold" % (
                                               role["metadata"].get("namespace"),
                                               role["metadata"]["name"], v,
                                               (g + "/") if g else "", res,
                                               (" (name %s)" % name) if name else "",
                                               cluster_role["metadata"]["name"]))
    return n, bad


def request_attributes(method, path):
    """(verb, group, resource, namespace, name) of an API request, or None for non-resource
    paths."""
    u = urllib.parse.urlsplit(path)
    q = urllib.parse.parse_qs(u.query)
    parts = [p for p in u.path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    watch = False
    if rest[:1] == ["watch"]:
        watch, rest = True, rest[1:]
    ns = None
    # /namespaces/NS/RESOURCE...; /namespaces and /namespaces/NAME are the namespaces themselves
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else None
    if len(rest) >= 3:
        resource += "/" + rest[2]
    if q.get("watch", ["false"])[0] in ("true", "1"):
        watch = True
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
    if method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    return verb, group, resource, ns, name


def allows(cluster_role, role, role_ns, lines):
    crules = cluster_role.get("rules") or []
    rrules = role.get("rules") or []
    bad = []
    seen = set()
    n = 0
    for line in lines:
        f = line.split()
        if len(f) < 2:
            continue
        attrs = request_attributes(f[0], f[1])
        if attrs is None:
            continue
        n += 1
        verb, group, resource, ns, name = attrs
        seen.add((verb, group, resource))
        if allowed(crules, verb, group, resource, name):
            continue
        if ns == role_ns and allowed(rrules, verb, group, resource, name):
            continue
        bad.append("%s %s -> %s %s%s%s%s: not allowed" % (
            f[0], f[1], verb, (group + "/") if group else "", resource,
            (" in " + ns) if ns else "", (" name " + name) if name else ""))
    return n, seen, bad


def main(argv):
    if len(argv) >= 3 and argv[0] == "covers":
        cr, roles = json.loads(argv[1]), json.loads(argv[2])
        n, bad = covers(cr, roles)
        for b in bad:
            print(b)
        print("%d Role permission(s) checked, %d not held" % (n, len(bad)))
        return 1 if bad else 0
    if len(argv) >= 4 and argv[0] == "allows":
        cr, role, ns = json.loads(argv[1]), json.loads(argv[2]), argv[3]
        n, seen, bad = allows(cr, role, ns, sys.stdin)
        for b in sorted(set(bad)):
            print(b)
        print("%d request(s), %d distinct (verb, group, resource), %d not allowed: %s" % (
            n, len(seen), len(bad), " ".join(sorted("%s:%s%s" % (v, (g + "/") if g else "", r)
                                                   for v, g, r in seen))))
        return 1 if bad else 0
    if argv[:1] == ["verbs"]:
        counts = {}
        for line in sys.stdin:
            f = line.split()
            attrs = request_attributes(f[0], f[1]) if len(f) >= 2 else None
            if attrs:
                key = "%s %s%s" % (attrs[0], (attrs[1] + "/") if attrs[1] else "", attrs[2])
                counts[key] = counts.get(key, 0) + 1
        for key in sorted(counts):
            print("%s %d" % (key, counts[key]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
