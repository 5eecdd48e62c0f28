#!/usr/bin/env bash
# e2e: the install manifests, without a cluster (fast).
#
#   * manifests/crds/*.yaml are byte-identical copies of crds/*.yaml (kustomize loads no file
#     outside manifests/, so the kustomization carries copies);
#   * `kubectl kustomize manifests/` renders exactly the install objects: the namespace, both CRDs,
#     RBAC, the operator Deployment + metrics Service and the agent DaemonSet (no examples);
#   * the operator Deployment: 2 replicas, leader election on, tandem-operator:<version> image
#     (project(VERSION) in CMakeLists.txt, the tag `make images` builds), probes
#     /healthz and /readyz on 8081, metrics port 8080, resources, a restricted securityContext,
#     bind addresses on the pod IP (so it also runs on localkube);
#   * the agent DaemonSet: role both, the operator's agent flags (--inference-pool NS/NAME
#     included), a memory-backed emptyDir at /dev/shm, opt-in per node;
#   * the ClusterRole: no wildcards, no secrets, no escalate/bind/impersonate, status written only
#     through the status subresources, leases only through the namespaced Role.
# Exit 77 when kubectl or python3 is missing.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TEST_NAME=operator_manifests
fail() {
    echo "FAIL [$TEST_NAME]: $*" >&2
    exit 1
}
. "$REPO/e2e/lib/common.sh"
kubectl=$(pick_kubectl) || { echo "skip: kubectl not found"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 not found"; exit 77; }

for f in "$REPO"/crds/*.yaml; do
    copy=$REPO/manifests/crds/$(basename "$f")
    [ -f "$copy" ] || fail "manifests/crds/$(basename "$f") is missing (cp crds/*.yaml manifests/crds/)"
    cmp -s "$f" "$copy" || fail "manifests/crds/$(basename "$f") differs from crds/$(basename "$f"); update the copy: cp crds/*.yaml manifests/crds/"
done
for f in "$REPO"/manifests/crds/*.yaml; do
    [ -f "$REPO/crds/$(basename "$f")" ] || fail "manifests/crds/$(basename "$f") has no original in crds/"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kubectl" kustomize "$REPO/manifests" >"$tmp/rendered.yaml" 2>"$tmp/err" ||
    fail "kubectl kustomize manifests/ failed: $(cat "$tmp/err")"

version=$(sed -n 's/^project(tandem VERSION \([0-9.]*\).*/\1/p' "$REPO/CMakeLists.txt")
[ -n "$version" ] || fail "no project(tandem VERSION x.y.z) in CMakeLists.txt"
PYTHONPATH=$REPO/e2e/localkube python3 - "$tmp/rendered.yaml" "$version" <<'PY' || fail "rendered manifests (see above)"
import sys
from lk import yamlmini

docs = [d for d in yamlmini.loads_all(open(sys.argv[1]).read()) if d]
by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


want = {
    ("Namespace", "tandem-system"),
    ("CustomResourceDefinition", "inferencepools.tandem.dev"),
    ("CustomResourceDefinition", "inferencemodels.tandem.dev"),
    ("ServiceAccount", "tandem-operator"), ("ServiceAccount", "tandem-agent"),
    ("ClusterRole", "tandem-operator"), ("ClusterRoleBinding", "tandem-operator"),
    ("ClusterRole", "tandem-agent"), ("ClusterRoleBinding", "tandem-agent"),
    ("Role", "tandem-operator-leader-election"),
    ("RoleBinding", "tandem-operator-leader-election"),
    ("Deployment", "tandem-operator"), ("Service", "tandem-operator-metrics"),
    ("DaemonSet", "tandem-agent"),
}
check(set(by) == want, "rendered objects: extra %s, missing %s" % (
    sorted(set(by) - want), sorted(want - set(by))))
for (kind, name), d in by.items():
    if kind not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
        check(d["metadata"].get("namespace") == "tandem-system",
              "%s/%s: namespace %r" % (kind, name, d["metadata"].get("namespace")))

# ---- the operator Deployment
dep = by.get(("Deployment", "tandem-operator"))
if dep:
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    check(spec.get("replicas") == 2, "operator replicas %r" % spec.get("replicas"))
    check(pod.get("serviceAccountName") == "tandem-operator", "operator service account")
    c = pod["containers"][0]
    check(c["image"] == "tandem-operator:" + sys.argv[2], "operator image %r" % c["image"])
    args = " ".join(c.get("args") or [])
    check("--leader-elect=true" in args or "--leader-elect " in args + " ",
          "leader election on: %s" % args)
    check("--metrics-bind-address=$(POD_IP):8080" in args, "metrics on the pod IP: %s" % args)
    check("--health-probe-bind-address=$(POD_IP):8081" in args, "health on the pod IP: %s" % args)
    ports = {p["name"]: p["containerPort"] for p in c.get("ports") or []}
    check(ports == {"metrics": 8080, "health": 8081}, "operator ports %r" % ports)
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        g = (c.get(probe) or {}).get("httpGet") or {}
        check(g.get("path") == path and g.get("port") in ("health", 8081),
              "%s %r" % (probe, g))
    env = {e["name"]: (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
           for e in c.get("env") or []}
    check(env.get("POD_IP") == "status.podIP" and env.get("POD_NAME") == "metadata.name" and
          env.get("POD_NAMESPACE") == "metadata.namespace", "operator downward env %r" % env)
    res = c.get("resources") or {}
    check(res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory") and
          res.get("limits", {}).get("memory"), "operator resources %r" % res)
    sc = c.get("securityContext") or {}
    check(sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True
          and sc.get("capabilities", {}).get("drop") == ["ALL"], "container securityContext %r" % sc)
    psc = pod.get("securityContext") or {}
    check(psc.get("runAsNonRoot") is True and
          psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
          "pod securityContext %r" % psc)

# ---- RBAC
cr = by.get(("ClusterRole", "tandem-operator"))
if cr:
    for r in cr["rules"]:
        for key in ("apiGroups", "resources", "verbs"):
            check("*" not in r.get(key, []), "ClusterRole wildcard in %s: %r" % (key, r))
        check("secrets" not in r.get("resources", []), "ClusterRole grants secrets: %r" % r)
        check(not set(r.get("verbs", [])) & {"escalate", "bind", "impersonate"},
              "ClusterRole grants escalate/bind/impersonate: %r" % r)
        check("leases" not in r.get("resources", []), "leases belong in the namespaced Role: %r" % r)
        if "tandem.dev" in r.get("apiGroups", []):
            plain = [x for x in r["resources"] if "/" not in x]
            check(not plain or set(r["verbs"]) <= {"get", "list", "watch"},
                  "pools/models must be read-only outside /status: %r" % r)
    def allows(verb, group, resource):
        return any(verb in r["verbs"] and group in r["apiGroups"] and resource in r["resources"]
                   for r in cr["rules"])
    for verb, group, res in [("watch", "tandem.dev", "inferencepools"),
                             ("watch", "tandem.dev", "inferencemodels"),
                             ("update", "tandem.dev", "inferencepools/status"),
                             ("patch", "tandem.dev", "inferencepools/status"),
                             ("update", "tandem.dev", "inferencemodels/status"),
                             ("create", "apps", "deployments"), ("update", "apps", "deployments"),
                             ("delete", "apps", "deployments"), ("watch", "apps", "daemonsets"),
                             ("create", "apps", "daemonsets"), ("update", "apps", "daemonsets"),
                             ("delete", "apps", "daemonsets"), ("create", "", "services"),
                             ("create", "", "configmaps"), ("create", "", "serviceaccounts"),
                             ("create", "rbac.authorization.k8s.io", "roles"),
                             ("create", "rbac.authorization.k8s.io", "rolebindings"),
                             ("create", "autoscaling", "horizontalpodautoscalers"),
                             ("watch", "", "pods"), ("create", "", "events"), ("patch", "", "events")]:
        check(allows(verb, group, res), "ClusterRole lacks %s %s/%s" % (verb, group, res))
    check(not allows("delete", "", "pods") and not allows("create", "", "pods"),
          "the operator never writes pods")
crb = by.get(("ClusterRoleBinding", "tandem-operator"))
if crb:
    check(crb["roleRef"]["name"] == "tandem-operator" and crb["subjects"] == [
        {"kind": "ServiceAccount", "name": "tandem-operator", "namespace": "tandem-system"}],
        "ClusterRoleBinding %r" % crb)
lr = by.get(("Role", "tandem-operator-leader-election"))
if lr:
    verbs = {v for r in lr["rules"] if "leases" in r["resources"] for v in r["verbs"]}
    check({"get", "create", "update"} <= verbs, "leader-election Role verbs %r" % verbs)

# ---- the agent DaemonSet
ds = by.get(("DaemonSet", "tandem-agent"))
if ds:
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    check(c["image"] == "tandem-agent:" + sys.argv[2], "agent image %r" % c["image"])
    check(ds["spec"]["template"]["metadata"]["labels"].get("llm-d.ai/role") == "both",
          "agent role label")
    a = c.get("args") or []
    check(a[:1] == ["serve"] and "--role" in a and a[a.index("--role") + 1] == "both",
          "agent args %r" % a)
    # the flags the operator renders for its own agents (desired_agent_args) that apply here
    pool = a[a.index("--inference-pool") + 1] if "--inference-pool" in a[:-1] else ""
    check(pool.count("/") == 1 and all(pool.split("/")), "agent --inference-pool NS/NAME: %r" % a)
    for flag, value in (("--port", "8000"), ("--engine-port", "8200"),
                        ("--kv-events-port", "5557"), ("--kv-transfer-port", "5600")):
        check(flag in a[:-1] and a[a.index(flag) + 1] == value, "agent %s %s: %r" % (flag, value, a))
    # /dev/shm: a memory-backed emptyDir (UCX's shared-memory KV pools; the default is 64 MiB)
    shm = [m for m in c.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"]
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    ed = (vols.get(shm[0]["name"]) if shm else {}) or {}
    check(len(shm) == 1 and (ed.get("emptyDir") or {}).get("medium") == "Memory" and
          (ed.get("emptyDir") or {}).get("sizeLimit"),
          "agent /dev/shm: mounts %r, volumes %r" % (c.get("volumeMounts"), pod.get("volumes")))
    ports = {p["containerPort"] for p in c.get("ports") or []}
    check({8000, 8200, 5557, 5600} <= ports, "agent ports %r" % ports)
    check(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/health",
          "agent readiness probe")
    check(pod.get("nodeSelector", {}).get("tandem.dev/node-agent") == "true",
          "the DaemonSet is opt-in per node")

for e in errors:
    print("  " + e)
print("%d objects rendered, %d problems" % (len(docs), len(errors)))
sys.exit(1 if errors else 0)
PY
echo "PASS: operator_manifests"
