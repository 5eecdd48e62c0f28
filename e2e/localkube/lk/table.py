"""Server-side printing: meta.k8s.io/v1 Table responses, as kube-apiserver builds them for
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.  Pure functions.

    to_table(kind_info, objs, include_object="Metadata", no_headers=False, wide=True,
             now=None, resource_version=None, continue_token=None) -> dict
    human_duration(seconds) -> str        k8s.io/apimachinery/pkg/util/duration.HumanDuration
    translate_timestamp_since(ts, now)     "<unknown>" for empty timestamps

kind_info = {"kind", "group", "version", "plural", "printerColumns"}.  A custom resource (a
group that is not one of kube's built-in API groups, a printerColumns list, or "custom": True)
gets the CRD version's additionalPrinterColumns, or the implicit "Age" column when there are
none (as apiextensions-apiserver does).  Built-in kinds are printed with a port of kube's
printers (pkg/printers/internalversion) for the kinds localkube serves and the default
"Name, Created At" table otherwise.

Columns with priority > 0 are the `-o wide` ones.  kube-apiserver always sends them and kubectl
hides them, so wide defaults to True; wide=False drops them.
"""

import datetime
import time

from . import jsonpath

__all__ = ["to_table", "human_duration", "translate_timestamp_since", "parse_time"]

_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def parse_time(ts):
    """RFC3339 (metav1.Time / MicroTime) to epoch seconds, or None."""
    if not isinstance(ts, str) or not ts:
        return None
    s = ts.strip()
    if s.endswith("Z") or s.endswith("z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.datetime.fromisoformat(s)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.timestamp()


def human_duration(seconds):
    """duration.HumanDuration for a number of seconds."""
    s = int(seconds) if seconds >= 0 else -int(-seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return "%dm" % minutes if sec == 0 else "%dm%ds" % (minutes, sec)
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return "%dh" % hours if m == 0 else "%dh%dm" % (hours, m)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        h = hours % 24
        return "%dd" % (hours // 24) if h == 0 else "%dd%dh" % (hours // 24, h)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        years = hours // 24 // 365
        return "%dy" % years if dy == 0 else "%dy%dd" % (years, dy)
    return "%dy" % (hours // 24 // 365)


def translate_timestamp_since(ts, now=None):
    t = parse_time(ts)
    if t is None:
        return "<unknown>"
    return human_duration((now if now is not None else time.time()) - t)


def _col(name, typ="string", desc="", priority=0, fmt=""):
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


def _name_col():
    return _col("Name", "string", _NAME_DESC, 0, "name")


def _age_col():
    return _col("Age", "string", _CREATED_DESC)


def _meta(o):
    m = o.get("metadata") if isinstance(o, dict) else None
    return m if isinstance(m, dict) else {}


def _get(o, *path, default=None):
    cur = o
    for p in path:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and -len(cur) <= p < len(cur):
            cur = cur[p]
        else:
            return default
    return cur


def _int(v):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    return 0


def _age(o, now):
    return translate_timestamp_since(_meta(o).get("creationTimestamp"), now)


def _selector_string(sel):
    from .selectors import SelectorError, selector_from_label_selector_object

    if sel is None:
        return "<none>"
    try:
        s = str(selector_from_label_selector_object(sel))
    except SelectorError:
        return "<error>"
    return s if s else "<none>"


def _set_selector_string(m):
    if not isinstance(m, dict) or not m:
        return "<none>"
    return ",".join("%s=%s" % (k, m[k]) for k in sorted(m))


def _containers_images(tpl_spec):
    cs = [c for c in (_get(tpl_spec, "containers") or []) if isinstance(c, dict)]
    return ",".join(str(c.get("name", "")) for c in cs), ",".join(str(c.get("image", ""))
                                                                   for c in cs)


# --------------------------------------------------------------------------------------------
# Built-in printers: (columns, row function(obj, now) -> (cells, conditions or None))


def _pod_row(pod, now):
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = spec.get("containers") or []
    init_containers = [c for c in (spec.get("initContainers") or []) if isinstance(c, dict)]
    total = len(containers)
    ready = 0
    restarts = 0
    last_restart = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "PodScheduled" and \
                cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    restartable = {c.get("name") for c in init_containers if c.get("restartPolicy") == "Always"}
    total += len(restartable)

    def term_time(cs):
        t = _get(cs, "lastState", "terminated", "finishedAt")
        return parse_time(t)

    initializing = False
    ri_restarts = 0
    ri_last = None
    init_statuses = [x for x in (status.get("initContainerStatuses") or []) if isinstance(x, dict)]
    for i, cs in enumerate(init_statuses):
        restarts += _int(cs.get("restartCount"))
        tt = term_time(cs)
        if tt is not None and (last_restart is None or tt > last_restart):
            last_restart = tt
        is_ri = cs.get("name") in restartable
        if is_ri:
            ri_restarts += _int(cs.get("restartCount"))
            if tt is not None and (ri_last is None or tt > ri_last):
                ri_last = tt
        state = cs.get("state") or {}
        term = state.get("terminated")
        wait = state.get("waiting")
        if isinstance(term, dict) and _int(term.get("exitCode")) == 0:
            continue
        if is_ri and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if isinstance(term, dict):
            if not term.get("reason"):
                if _int(term.get("signal")):
                    reason = "Init:Signal:%d" % _int(term.get("signal"))
                else:
                    reason = "Init:ExitCode:%d" % _int(term.get("exitCode"))
            else:
                reason = "Init:" + str(term["reason"])
        elif isinstance(wait, dict) and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + str(wait["reason"])
        else:
            reason = "Init:%d/%d" % (i, len(init_containers))
        initializing = True
        break
    initialized = any(isinstance(c, dict) and c.get("type") == "Initialized" and
                      c.get("status") == "True" for c in (status.get("conditions") or []))
    if not initializing or initialized:
        restarts = ri_restarts
        last_restart = ri_last
        has_running = False
        statuses = [x for x in (status.get("containerStatuses") or []) if isinstance(x, dict)]
        for cs in reversed(statuses):
            restarts += _int(cs.get("restartCount"))
            tt = term_time(cs)
            if tt is not None and (last_restart is None or tt > last_restart):
                last_restart = tt
            state = cs.get("state") or {}
            wait = state.get("waiting")
            term = state.get("terminated")
            if isinstance(wait, dict) and wait.get("reason"):
                reason = str(wait["reason"])
            elif isinstance(term, dict) and term.get("reason"):
                reason = str(term["reason"])
            elif isinstance(term, dict):
                if _int(term.get("signal")):
                    reason = "Signal:%d" % _int(term.get("signal"))
                else:
                    reason = "ExitCode:%d" % _int(term.get("exitCode"))
            elif cs.get("ready") and isinstance(state.get("running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(isinstance(c, dict) and c.get("type") == "Ready" and
                            c.get("status") == "True" for c in (status.get("conditions") or []))
            reason = "Running" if pod_ready else "NotReady"
    if _meta(pod).get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif _meta(pod).get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_str = str(restarts)
    if restarts and last_restart is not None:
        now_t = now if now is not None else time.time()
        restarts_str = "%d (%s ago)" % (restarts, human_duration(now_t - last_restart))
    pod_ip = status.get("podIP") or _get(status, "podIPs", 0, "ip") or "<none>"
    node = spec.get("nodeName") or "<none>"
    nominated = status.get("nominatedNodeName") or "<none>"
    gates = spec.get("readinessGates") or []
    if gates:
        true_types = {c.get("type") for c in (status.get("conditions") or [])
                      if isinstance(c, dict) and c.get("status") == "True"}
        ok = sum(1 for g in gates if isinstance(g, dict) and g.get("conditionType") in true_types)
        gates_str = "%d/%d" % (ok, len(gates))
    else:
        gates_str = "<none>"
    cells = [_meta(pod).get("name", ""), "%d/%d" % (ready, total), reason, restarts_str,
             _age(pod, now), pod_ip, node, nominated, gates_str]
    conditions = None
    if phase == "Succeeded":
        conditions = [{"type": "Completed", "status": "True", "reason": phase,
                       "message": "The pod has completed successfully."}]
    elif phase == "Failed":
        conditions = [{"type": "Completed", "status": "True", "reason": phase,
                       "message": "The pod failed."}]
    return cells, conditions


_POD_COLS = [
    _name_col(),
    _col("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", desc="The aggregate status of the containers in this pod."),
    _col("Restarts", desc="The number of times the containers in this pod have been restarted "
         "and when the last container in this pod has restarted."),
    _age_col(),
    _col("IP", desc="podIP address allocated to the pod. Routable at least within the "
         "cluster. Empty if not yet allocated.", priority=1),
    _col("Node", desc="NodeName indicates in which node this pod is scheduled.", priority=1),
    _col("Nominated Node", desc="nominatedNodeName is set when this pod preempts other pods "
         "on the node.", priority=1),
    _col("Readiness Gates", desc="If specified, all readiness gates will be evaluated for pod "
         "readiness.", priority=1),
]


def _deployment_row(d, now):
    spec = d.get("spec") or {}
    st = d.get("status") or {}
    desired = _int(spec.get("replicas", 1 if "replicas" not in spec else 0))
    names, images = _containers_images(_get(spec, "template", "spec"))
    return [_meta(d).get("name", ""), "%d/%d" % (_int(st.get("readyReplicas")), desired),
            _int(st.get("updatedReplicas")), _int(st.get("availableReplicas")), _age(d, now),
            names, images, _selector_string(spec.get("selector"))], None


_DEPLOYMENT_COLS = [
    _name_col(),
    _col("Ready", desc="Number of the pod with ready state"),
    _col("Up-to-date", "integer", "Total number of non-terminated pods targeted by this "
         "deployment that have the desired template spec."),
    _col("Available", "integer", "Total number of available pods (ready for at least "
         "minReadySeconds) targeted by this deployment."),
    _age_col(),
    _col("Containers", desc="Names of each container in the template.", priority=1),
    _col("Images", desc="Images referenced by each container in the template.", priority=1),
    _col("Selector", desc="Label selector for pods. Existing ReplicaSets whose pods are "
         "selected by this will be the ones affected by this deployment.", priority=1),
]


def _replicaset_row(rs, now):
    spec = rs.get("spec") or {}
    st = rs.get("status") or {}
    names, images = _containers_images(_get(spec, "template", "spec"))
    return [_meta(rs).get("name", ""), _int(spec.get("replicas", 1)), _int(st.get("replicas")),
            _int(st.get("readyReplicas")), _age(rs, now), names, images,
            _selector_string(spec.get("selector"))], None


_REPLICASET_COLS = [
    _name_col(),
    _col("Desired", "integer", "Replicas is the number of desired replicas."),
    _col("Current", "integer", "Replicas is the most recently observed number of replicas."),
    _col("Ready", "integer", "The number of ready replicas for this replica set."),
    _age_col(),
    _col("Containers", desc="Names of each container in the template.", priority=1),
    _col("Images", desc="Images referenced by each container in the template.", priority=1),
    _col("Selector", desc="Selector is a label query over pods that should match the replica "
         "count.", priority=1),
]


def _daemonset_row(ds, now):
    spec = ds.get("spec") or {}
    st = ds.get("status") or {}
    names, images = _containers_images(_get(spec, "template", "spec"))
    return [_meta(ds).get("name", ""), _int(st.get("desiredNumberScheduled")),
            _int(st.get("currentNumberScheduled")), _int(st.get("numberReady")),
            _int(st.get("updatedNumberScheduled")), _int(st.get("numberAvailable")),
            _set_selector_string(_get(spec, "template", "spec", "nodeSelector")), _age(ds, now),
            names, images, _selector_string(spec.get("selector"))], None


_DAEMONSET_COLS = [
    _name_col(),
    _col("Desired", "integer", "The total number of nodes that should be running the daemon "
         "pod."),
    _col("Current", "integer", "The number of nodes that are running at least 1 daemon pod "
         "and are supposed to run the daemon pod."),
    _col("Ready", "integer", "numberReady is the number of nodes that should be running the "
         "daemon pod and have one or more of the daemon pod running with a Ready Condition."),
    _col("Up-to-date", "integer", "The total number of nodes that are running updated daemon "
         "pod"),
    _col("Available", "integer", "The number of nodes that should be running the daemon pod "
         "and have one or more of the daemon pod running and available."),
    _col("Node Selector", desc="NodeSelector is a selector which must be true for the pod to "
         "fit on a node."),
    _age_col(),
    _col("Containers", desc="Names of each container in the template.", priority=1),
    _col("Images", desc="Images referenced by each container in the template.", priority=1),
    _col("Selector", desc="A label query over pods that are managed by the daemon set.",
         priority=1),
]


def _service_external_ip(svc):
    spec = svc.get("spec") or {}
    t = spec.get("type") or "ClusterIP"
    ext = [str(x) for x in (spec.get("externalIPs") or [])]
    if t in ("ClusterIP", "NodePort"):
        return ",".join(ext) if ext else "<none>"
    if t == "LoadBalancer":
        ips = []
        for ing in _get(svc, "status", "loadBalancer", "ingress") or []:
            if isinstance(ing, dict):
                if ing.get("ip"):
                    ips.append(str(ing["ip"]))
                elif ing.get("hostname"):
                    ips.append(str(ing["hostname"]))
        ips += ext
        return ",".join(ips) if ips else "<pending>"
    if t == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _service_ports(spec):
    out = []
    for p in spec.get("ports") or []:
        if not isinstance(p, dict):
            continue
        proto = p.get("protocol") or "TCP"
        if p.get("nodePort"):
            out.append("%s:%s/%s" % (p.get("port"), p.get("nodePort"), proto))
        else:
            out.append("%s/%s" % (p.get("port"), proto))
    return ",".join(out) if out else "<none>"


def _service_row(svc, now):
    spec = svc.get("spec") or {}
    cluster_ip = spec.get("clusterIP") or "<none>"
    return [_meta(svc).get("name", ""), spec.get("type") or "ClusterIP", cluster_ip,
            _service_external_ip(svc), _service_ports(spec), _age(svc, now),
            _set_selector_string(spec.get("selector"))], None


_SERVICE_COLS = [
    _name_col(),
    _col("Type", desc="type determines how the Service is exposed."),
    _col("Cluster-IP", desc="clusterIP is the IP address of the service and is usually "
         "assigned randomly."),
    _col("External-IP", desc="externalIPs is a list of IP addresses for which nodes in the "
         "cluster will also accept traffic for this service."),
    _col("Port(s)", desc="The list of ports that are exposed by this service."),
    _age_col(),
    _col("Selector", desc="Route service traffic to pods with label keys and values matching "
         "this selector.", priority=1),
]


def _format_endpoints(ep):
    subsets = ep.get("subsets") or []
    if not subsets:
        return "<none>"
    lst = []
    mx = 3
    more = False
    count = 0
    for ss in subsets:
        if not isinstance(ss, dict):
            continue
        addrs = [a for a in (ss.get("addresses") or []) if isinstance(a, dict)]
        ports = [p for p in (ss.get("ports") or []) if isinstance(p, dict)]
        if not ports:
            count += len(addrs)
            for a in addrs:
                if len(lst) == mx:
                    more = True
                    continue
                lst.append(str(a.get("ip", "")))
        else:
            for p in ports:
                count += len(addrs)
                for a in addrs:
                    if len(lst) == mx:
                        more = True
                        continue
                    ip = str(a.get("ip", ""))
                    host = "[%s]" % ip if ":" in ip else ip
                    lst.append("%s:%s" % (host, p.get("port")))
    ret = ",".join(lst)
    if more:
        return "%s + %d more..." % (ret, count - mx)
    return ret


_ENDPOINTS_COLS = [
    _name_col(),
    _col("Endpoints", desc="Endpoints is the list of endpoints in the service."),
    _age_col(),
]


def _endpoints_row(ep, now):
    return [_meta(ep).get("name", ""), _format_endpoints(ep), _age(ep, now)], None


_CONFIGMAP_COLS = [_name_col(), _col("Data", "integer", "Data contains the configuration "
                                     "data."), _age_col()]


def _configmap_row(cm, now):
    n = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [_meta(cm).get("name", ""), n, _age(cm, now)], None


_SECRET_COLS = [_name_col(), _col("Type", desc="The type of the secret"),
                _col("Data", "integer", "The number of data items in the secret"), _age_col()]


def _secret_row(s, now):
    n = len(s.get("data") or {}) + len(s.get("stringData") or {})
    return [_meta(s).get("name", ""), s.get("type") or "Opaque", n, _age(s, now)], None


_NAMESPACE_COLS = [_name_col(), _col("Status", desc="The status of the namespace"), _age_col()]


def _namespace_row(ns, now):
    return [_meta(ns).get("name", ""), _get(ns, "status", "phase") or "", _age(ns, now)], None


_NODE_COLS = [
    _name_col(),
    _col("Status", desc="The status of the node"),
    _col("Roles", desc="The roles of the node"),
    _age_col(),
    _col("Version", desc="Kubelet Version reported by the node."),
    _col("Internal-IP", desc="List of addresses reachable to the node. Queried from cloud "
         "provider, if available.", priority=1),
    _col("External-IP", desc="List of addresses reachable to the node. Queried from cloud "
         "provider, if available.", priority=1),
    _col("OS-Image", desc="OS Image reported by the node from /etc/os-release (e.g. Debian "
         "GNU/Linux 7 (wheezy)).", priority=1),
    _col("Kernel-Version", desc="Kernel Version reported by the node from 'uname -r' (e.g. "
         "3.16.0-0.bpo.4-amd64).", priority=1),
    _col("Container-Runtime", desc="ContainerRuntime Version reported by the node through "
         "runtime remote API (e.g. containerd://1.4.2).", priority=1),
]


def _node_row(node, now):
    st = node.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in (st.get("conditions") or [])
             if isinstance(c, dict)}
    statuses = []
    ready = conds.get("Ready")
    if ready == "True":
        statuses.append("Ready")
    elif ready == "False":
        statuses.append("NotReady")
    else:
        statuses.append("Unknown")
    if _get(node, "spec", "unschedulable"):
        statuses.append("SchedulingDisabled")
    roles = set()
    for k, v in (_meta(node).get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/"):
            r = k[len("node-role.kubernetes.io/"):]
            if r:
                roles.add(r)
        elif k == "kubernetes.io/role" and v:
            roles.add(str(v))
    info = st.get("nodeInfo") or {}

    def addr(t):
        for a in st.get("addresses") or []:
            if isinstance(a, dict) and a.get("type") == t:
                return str(a.get("address", ""))
        return "<none>"

    return [_meta(node).get("name", ""), ",".join(statuses),
            ",".join(sorted(roles)) if roles else "<none>", _age(node, now),
            info.get("kubeletVersion", ""), addr("InternalIP"), addr("ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"], None


_LEASE_COLS = [_name_col(), _col("Holder", desc="HolderIdentity contains the identity of the "
                                 "holder of a current lease."), _age_col()]


def _lease_row(le, now):
    return [_meta(le).get("name", ""), _get(le, "spec", "holderIdentity") or "",
            _age(le, now)], None


_SA_COLS = [_name_col(), _col("Secrets", "integer", "Secrets is a list of the secrets in the "
                              "same namespace that pods running using this ServiceAccount are "
                              "allowed to use."), _age_col()]


def _sa_row(sa, now):
    return [_meta(sa).get("name", ""), len(sa.get("secrets") or []), _age(sa, now)], None


_EVENT_COLS = [
    _col("Last Seen", desc="The time at which the most recent occurrence of this event was "
         "recorded."),
    _col("Type", desc="Type of this event (Normal, Warning), new types could be added in the "
         "future"),
    _col("Reason", desc="This should be a short, machine understandable string that gives "
         "the reason for the transition into the object's current status."),
    _col("Object", desc="The object that this event is about."),
    _col("Subobject", desc="If referring to a piece of an object instead of an entire object, "
         "this string should contain a valid JSON/Go field access statement.", priority=1),
    _col("Source", desc="The component reporting this event.", priority=1),
    _col("Message", desc="A human-readable description of the status of this operation."),
    _col("First Seen", desc="The time at which the event was first recorded.", priority=1),
    _col("Count", desc="The number of times this event has occurred.", priority=1),
    _col("Name", desc=_NAME_DESC, priority=1, fmt="name"),
]


def _event_row(ev, now):
    if "regarding" in ev or ev.get("apiVersion") == "events.k8s.io/v1":
        # events.k8s.io/v1: kube prints both APIs from the one internal Event
        from lk.builtin_schemas import event_from_v1
        ev = event_from_v1(ev)
    first = ev.get("firstTimestamp") or ev.get("eventTime")
    last = ev.get("lastTimestamp") or first
    count = _int(ev.get("count"))
    series_last = _get(ev, "series", "lastObservedTime")
    if series_last:
        last_seen = "%s (x%d over %s)" % (translate_timestamp_since(series_last, now),
                                          _int(_get(ev, "series", "count")),
                                          translate_timestamp_since(ev.get("eventTime"), now))
    elif count > 1:
        last_seen = "%s (x%d over %s)" % (translate_timestamp_since(last, now), count,
                                          translate_timestamp_since(first, now))
    else:
        last_seen = translate_timestamp_since(last, now)
    io = ev.get("involvedObject") or {}
    src = ev.get("source") or {}
    source = src.get("component") or ev.get("reportingComponent") or ""
    if src.get("host"):
        source = "%s, %s" % (source, src["host"])
    return [last_seen, ev.get("type", ""), ev.get("reason", ""),
            "%s/%s" % (str(io.get("kind", "")).lower(), io.get("name", "")),
            io.get("fieldPath", ""), source, ev.get("message", ""),
            translate_timestamp_since(first, now), count, _meta(ev).get("name", "")], None


_CREATED_AT_COLS = [_name_col(), _col("Created At", "date", _CREATED_DESC)]


def _created_at_row(o, now):
    ts = _meta(o).get("creationTimestamp")
    t = parse_time(ts)
    cell = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t is not None
            else "0001-01-01T00:00:00Z")
    return [_meta(o).get("name", ""), cell], None


_BINDING_COLS = [
    _name_col(),
    _col("Role", desc="RoleRef can reference a Role in the current namespace or a ClusterRole "
         "in the global namespace."),
    _age_col(),
    _col("Users", desc="Users in the roleBinding", priority=1),
    _col("Groups", desc="Groups in the roleBinding", priority=1),
    _col("ServiceAccounts", desc="ServiceAccounts in the roleBinding", priority=1),
]


def _binding_row(b, now):
    rr = b.get("roleRef") or {}
    users, groups, sas = [], [], []
    for s in b.get("subjects") or []:
        if not isinstance(s, dict):
            continue
        if s.get("kind") == "User":
            users.append(str(s.get("name", "")))
        elif s.get("kind") == "Group":
            groups.append(str(s.get("name", "")))
        elif s.get("kind") == "ServiceAccount":
            sas.append("%s:%s" % (s.get("namespace", ""), s.get("name", "")))
    return [_meta(b).get("name", ""), "%s/%s" % (rr.get("kind", ""), rr.get("name", "")),
            _age(b, now), ", ".join(users), ", ".join(groups), ", ".join(sas)], None


_HPA_COLS = [
    _name_col(),
    _col("Reference", desc="reference to scaled resource; horizontal pod autoscaler will learn "
         "the current resource consumption and will set the desired number of pods by using "
         "its Scale subresource."),
    _col("Targets", desc="metrics contains the specifications for which to use to calculate "
         "the desired replica count"),
    _col("MinPods", desc="minReplicas is the lower limit for the number of replicas to which "
         "the autoscaler can scale down."),
    _col("MaxPods", desc="maxReplicas is the upper limit for the number of replicas to which "
         "the autoscaler can scale up."),
    _col("Replicas", desc="current number of replicas of pods managed by this autoscaler."),
    _age_col(),
]


def _hpa_row(h, now):
    spec = h.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    targets = []
    for m in spec.get("metrics") or []:
        if not isinstance(m, dict):
            continue
        res = m.get("resource") or {}
        tgt = res.get("target") or {}
        if m.get("type") == "Resource" and tgt.get("averageUtilization") is not None:
            targets.append("%s: <unknown>/%s%%" % (res.get("name", ""), tgt["averageUtilization"]))
        else:
            targets.append("<unknown>")
    if spec.get("targetCPUUtilizationPercentage") is not None:
        targets.append("cpu: <unknown>/%s%%" % spec["targetCPUUtilizationPercentage"])
    min_pods = spec.get("minReplicas")
    return [_meta(h).get("name", ""), "%s/%s" % (ref.get("kind", ""), ref.get("name", "")),
            ", ".join(targets) if targets else "<none>",
            str(min_pods) if min_pods is not None else "<unset>", _int(spec.get("maxReplicas")),
            _int(_get(h, "status", "currentReplicas")), _age(h, now)], None


_PRINTERS = {
    "pods": (_POD_COLS, _pod_row),
    "deployments": (_DEPLOYMENT_COLS, _deployment_row),
    "replicasets": (_REPLICASET_COLS, _replicaset_row),
    "daemonsets": (_DAEMONSET_COLS, _daemonset_row),
    "services": (_SERVICE_COLS, _service_row),
    "endpoints": (_ENDPOINTS_COLS, _endpoints_row),
    "configmaps": (_CONFIGMAP_COLS, _configmap_row),
    "secrets": (_SECRET_COLS, _secret_row),
    "namespaces": (_NAMESPACE_COLS, _namespace_row),
    "nodes": (_NODE_COLS, _node_row),
    "leases": (_LEASE_COLS, _lease_row),
    "serviceaccounts": (_SA_COLS, _sa_row),
    "events": (_EVENT_COLS, _event_row),
    "roles": (_CREATED_AT_COLS, _created_at_row),
    "clusterroles": (_CREATED_AT_COLS, _created_at_row),
    "rolebindings": (_BINDING_COLS, _binding_row),
    "clusterrolebindings": (_BINDING_COLS, _binding_row),
    "horizontalpodautoscalers": (_HPA_COLS, _hpa_row),
}


# --------------------------------------------------------------------------------------------
# Custom resources


def _cr_columns(printer_columns):
    cols = [_name_col()]
    pcs = list(printer_columns or [])
    if not pcs:
        pcs = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                "description": _CREATED_DESC}]
    for pc in pcs:
        desc = pc.get("description") or (
            "Custom resource definition column (in JSONPath format): %s" % pc.get("jsonPath", ""))
        cols.append(_col(pc.get("name", ""), pc.get("type", "string"), desc,
                         _int(pc.get("priority", 0)), pc.get("format", "") or ""))
    return cols, pcs


def _cell_for_json_value(typ, v, now):
    if v is None:
        return None
    if typ == "integer":
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return int(v)
        return None
    if typ == "number":
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            return float(v)
        return None
    if typ == "boolean":
        return v if isinstance(v, bool) else None
    if typ == "string":
        return v if isinstance(v, str) else None
    if typ == "date":
        if isinstance(v, str):
            t = parse_time(v)
            if t is None:
                return "<invalid>"
            return human_duration((now if now is not None else time.time()) - t)
        return None
    return None


def _cr_row_fn(pcs):
    def row(o, now):
        cells = [_meta(o).get("name", "")]
        for pc in pcs:
            try:
                res = jsonpath.evaluate(o, pc.get("jsonPath", ""))
            except ValueError:
                res = []
            if not res:
                cells.append(None)
                continue
            v = res[0]
            if pc.get("type", "string") == "string":
                cells.append(None if v is None else jsonpath.format_value(v))
            else:
                cells.append(_cell_for_json_value(pc.get("type"), v, now))
        return cells, None

    return row


# --------------------------------------------------------------------------------------------


# API groups whose kinds are compiled into kube-apiserver (everything else is a custom resource)
_BUILTIN_GROUPS = {
    "", "core", "apps", "batch", "autoscaling", "policy", "coordination.k8s.io",
    "rbac.authorization.k8s.io", "apiextensions.k8s.io", "events.k8s.io", "networking.k8s.io",
    "storage.k8s.io", "discovery.k8s.io", "admissionregistration.k8s.io", "scheduling.k8s.io",
    "node.k8s.io", "certificates.k8s.io", "apiregistration.k8s.io",
    "flowcontrol.apiserver.k8s.io", "authentication.k8s.io", "authorization.k8s.io",
    "resource.k8s.io", "internal.apiserver.k8s.io", "storagemigration.k8s.io",
}


def _is_custom_group(group):
    return isinstance(group, str) and group not in _BUILTIN_GROUPS


def _row_object(o, include_object):
    if include_object == "Object":
        return o
    if include_object == "None":
        return None
    meta = dict(_meta(o))
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}


def to_table(kind_info, objs, include_object="Metadata", no_headers=False, wide=True, now=None,
             resource_version=None, continue_token=None):
    """Builds a meta.k8s.io/v1 Table for objs.

    include_object: "Metadata" (PartialObjectMetadata, the default), "Object" or "None".
    no_headers: columnDefinitions is [] (kube sends headers only on the first watch event).
    wide: keep the priority > 0 columns (kube-apiserver always sends them; kubectl hides
    them unless -o wide).  now: epoch seconds used for ages (default: time.time()).
    """
    if include_object not in ("Metadata", "Object", "None"):
        raise ValueError("includeObject must be one of Metadata, Object, None")
    kind_info = kind_info or {}
    pcs = kind_info.get("printerColumns")
    if pcs is not None or kind_info.get("custom") or _is_custom_group(kind_info.get("group")):
        cols, pcs2 = _cr_columns(pcs)
        row_fn = _cr_row_fn(pcs2)
    else:
        plural = (kind_info.get("plural") or "").lower()
        cols, row_fn = _PRINTERS.get(plural, (_CREATED_AT_COLS, _created_at_row))
    keep = [i for i, c in enumerate(cols) if wide or not c.get("priority")]
    rows = []
    for o in objs or []:
        if not isinstance(o, dict):
            continue
        cells, conditions = row_fn(o, now)
        row = {"cells": [cells[i] if i < len(cells) else None for i in keep]}
        if conditions:
            row["conditions"] = conditions
        ro = _row_object(o, include_object)
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    meta = {}
    if resource_version is not None:
        meta["resourceVersion"] = str(resource_version)
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [] if no_headers else [dict(cols[i]) for i in keep],
        "rows": rows,
    }
