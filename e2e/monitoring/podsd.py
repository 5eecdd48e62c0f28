#!/usr/bin/env python3
"""Kubernetes discovery for a Prometheus without Kubernetes SD: a file_sd_configs refresher.

    podsd.py --kubeconfig KUBECONFIG --pods PODS.json [--endpoints ENDPOINTS.json]
             [--interval 2] [--once]

Debian's prometheus 2.42 is built without kubernetes_sd_configs (the field is unknown to its
config parser), so `make run` and the monitoring e2e use file-based service discovery instead:
this process lists the pods (and, for --endpoints, the Endpoints and Services) of the cluster the
kubeconfig names every --interval seconds and writes file_sd target groups carrying the
`__meta_kubernetes_*` labels Prometheus's Kubernetes SD attaches: PODS.json as role "pod" (one
target per container port), ENDPOINTS.json as role "endpoints" (one target per endpoint address
and port, with the Service's and the backing pod's labels). The scrape jobs' relabel_configs
(generated from the PodMonitors and ServiceMonitors by promconfig.py) then work unchanged and give
the labels a real cluster's monitors give (namespace, pod, container, service, job, endpoint, ...).
(Not emulated: the extra targets role "endpoints" adds for a backing pod's container ports that
the Endpoints do not list; a ServiceMonitor's port rule drops them anyway.)

The file is replaced atomically (write + rename) and only when it changes; Prometheus notices
through inotify. Standard library only. The kubeconfig must name a plain-http server without
credentials (localkube's); on a real cluster use a Prometheus that has Kubernetes SD.
"""

import argparse
import json
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.request

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize(name):
    """Prometheus's strutil.SanitizeLabelName."""
    return _INVALID.sub("_", name)


def kubeconfig_server(path):
    """The server URL of the kubeconfig's clusters (there must be exactly one distinct one)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    servers = sorted(set(re.findall(r"^\s*server:\s*['\"]?([^'\"\s]+)", text, re.M)))
    if len(servers) != 1:
        raise SystemExit("podsd: %s: expected exactly one cluster server, found %s" %
                         (path, servers or "none"))
    if not servers[0].startswith("http://"):
        raise SystemExit("podsd: %s: server %s is not plain http (localkube); on a real cluster "
                         "use a Prometheus with kubernetes_sd_configs" % (path, servers[0]))
    return servers[0].rstrip("/")


def _ready(pod):
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status", "unknown")).lower()
    return "unknown"


def _object_labels(prefix, meta):
    out = {}
    for k, v in (meta.get("labels") or {}).items():
        out[prefix + "_label_" + sanitize(k)] = str(v)
        out[prefix + "_labelpresent_" + sanitize(k)] = "true"
    for k, v in (meta.get("annotations") or {}).items():
        out[prefix + "_annotation_" + sanitize(k)] = str(v)
        out[prefix + "_annotationpresent_" + sanitize(k)] = "true"
    return out


def pod_labels(pod):
    """podLabels() of discovery/kubernetes/pod.go (the namespace included)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = {
        "__meta_kubernetes_namespace": meta.get("namespace", ""),
        "__meta_kubernetes_pod_name": meta.get("name", ""),
        "__meta_kubernetes_pod_ip": status.get("podIP") or "",
        "__meta_kubernetes_pod_ready": _ready(pod),
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_uid": meta.get("uid", ""),
    }
    labels.update(_object_labels("__meta_kubernetes_pod", meta))
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            labels["__meta_kubernetes_pod_controller_kind"] = ref.get("kind", "")
            labels["__meta_kubernetes_pod_controller_name"] = ref.get("name", "")
            break
    return labels


def _container_labels(c, init):
    return {"__meta_kubernetes_pod_container_name": c.get("name", ""),
            "__meta_kubernetes_pod_container_image": c.get("image", ""),
            "__meta_kubernetes_pod_container_init": init}


def _hostport(ip, port):
    host = "[%s]" % ip if ":" in ip else ip
    return host if port is None else "%s:%s" % (host, port)


def pod_groups(pod):
    """The target groups Prometheus's Kubernetes SD (role pod) builds for one pod
    (discovery/kubernetes/pod.go)."""
    spec = pod.get("spec") or {}
    ip = (pod.get("status") or {}).get("podIP") or ""
    if not ip:  # Kubernetes SD leaves pods without an IP out
        return []
    labels = pod_labels(pod)
    groups = []
    containers = [(c, "false") for c in spec.get("containers") or []]
    containers += [(c, "true") for c in spec.get("initContainers") or []]
    for c, init in containers:
        base = dict(labels)
        base.update(_container_labels(c, init))
        ports = c.get("ports") or []
        if not ports:  # one target without a port, as Kubernetes SD does
            groups.append({"targets": [_hostport(ip, None)], "labels": base})
            continue
        for p in ports:
            lab = dict(base)
            lab["__meta_kubernetes_pod_container_port_name"] = p.get("name", "")
            lab["__meta_kubernetes_pod_container_port_number"] = str(p.get("containerPort", ""))
            lab["__meta_kubernetes_pod_container_port_protocol"] = p.get("protocol", "TCP")
            groups.append({"targets": [_hostport(ip, p.get("containerPort"))], "labels": lab})
    return groups


def endpoints_groups(ep, services, pods):
    """The target groups of role endpoints for one Endpoints object
    (discovery/kubernetes/endpoints.go): one target per address and port."""
    meta = ep.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    base = {"__meta_kubernetes_namespace": ns, "__meta_kubernetes_endpoints_name": name}
    base.update(_object_labels("__meta_kubernetes_endpoints", meta))
    svc = services.get((ns, name))
    if svc is not None:
        base["__meta_kubernetes_service_name"] = name
        base.update(_object_labels("__meta_kubernetes_service", svc.get("metadata") or {}))
    groups = []
    for sub in ep.get("subsets") or []:
        addrs = [(a, "true") for a in sub.get("addresses") or []]
        addrs += [(a, "false") for a in sub.get("notReadyAddresses") or []]
        for a, ready in addrs:
            for port in sub.get("ports") or []:
                lab = dict(base)
                lab["__meta_kubernetes_endpoint_port_name"] = port.get("name", "")
                lab["__meta_kubernetes_endpoint_port_protocol"] = port.get("protocol", "TCP")
                lab["__meta_kubernetes_endpoint_ready"] = ready
                if a.get("hostname"):
                    lab["__meta_kubernetes_endpoint_hostname"] = a["hostname"]
                if a.get("nodeName"):
                    lab["__meta_kubernetes_endpoint_node_name"] = a["nodeName"]
                ref = a.get("targetRef") or {}
                if ref:
                    lab["__meta_kubernetes_endpoint_address_target_kind"] = ref.get("kind", "")
                    lab["__meta_kubernetes_endpoint_address_target_name"] = ref.get("name", "")
                pod = pods.get((ref.get("namespace", ns), ref.get("name"))) if ref.get("kind") == "Pod" else None
                if pod is not None:
                    lab.update(pod_labels(pod))
                    spec = pod.get("spec") or {}
                    for c, init in [(c, "false") for c in spec.get("containers") or []] + \
                            [(c, "true") for c in spec.get("initContainers") or []]:
                        for cp in c.get("ports") or []:
                            if cp.get("containerPort") == port.get("port") and \
                                    cp.get("protocol", "TCP") == port.get("protocol", "TCP"):
                                lab.update(_container_labels(c, init))
                                lab["__meta_kubernetes_pod_container_port_name"] = cp.get("name", "")
                                lab["__meta_kubernetes_pod_container_port_number"] = str(cp["containerPort"])
                                lab["__meta_kubernetes_pod_container_port_protocol"] = cp.get("protocol", "TCP")
                groups.append({"targets": [_hostport(a.get("ip", ""), port.get("port"))], "labels": lab})
    return groups


def list_items(server, resource, timeout=10):
    with urllib.request.urlopen(server + "/api/v1/" + resource, timeout=timeout) as r:
        items = json.load(r).get("items") or []
    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))
    return items


def write_atomic(path, data):
    """Replaces PATH with DATA when it differs; True when it was written."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == data:
                return False
    except FileNotFoundError:
        pass
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
    os.replace(tmp, path)
    return True


def _dump(groups):
    return json.dumps(groups, indent=1, sort_keys=True) + "\n"


def refresh(server, pods_out, endpoints_out):
    """Rewrites the files; (changed, number of targets)."""
    pods = list_items(server, "pods")
    groups = [g for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")
              for g in pod_groups(p)]
    changed = write_atomic(pods_out, _dump(groups))
    n = len(groups)
    if endpoints_out:
        services = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o
                    for o in list_items(server, "services")}
        by_name = {(p["metadata"].get("namespace"), p["metadata"]["name"]): p for p in pods}
        eg = [g for e in list_items(server, "endpoints") for g in endpoints_groups(e, services, by_name)]
        changed = write_atomic(endpoints_out, _dump(eg)) or changed
        n += len(eg)
    return changed, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--pods", required=True, help="the file_sd JSON of role pod")
    ap.add_argument("--endpoints", help="the file_sd JSON of role endpoints")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between lists")
    ap.add_argument("--once", action="store_true", help="write the file once and exit")
    args = ap.parse_args()
    server = kubeconfig_server(args.kubeconfig)
    if args.once:
        refresh(server, args.pods, args.endpoints)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    failing = False
    while True:
        try:
            changed, n = refresh(server, args.pods, args.endpoints)
            if changed or failing:
                print("podsd: %s %d targets" % (time.strftime("%H:%M:%S"), n), flush=True)
            failing = False
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            # keep the last file: a restarting API server must not empty Prometheus's targets
            if not failing:
                print("podsd: listing pods from %s failed: %s" % (server, e), file=sys.stderr,
                      flush=True)
            failing = True
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
