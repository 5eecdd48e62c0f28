"""Field trees and apiserver defaulting for the built-in kinds localkube serves.  Pure functions.

    unknown_fields(kind, obj) -> list[str]
        Paths of fields the kind does not have, in the style kube's strict decoding prints
        ("spec.template.spec.containers[0].imagee").  Subtrees that are not modelled are
        marked OPEN and never yield an unknown field.
    default_object(kind, obj) -> dict
        A copy of obj with the defaults kube-apiserver applies on create/update (defaulting
        functions in k8s.io/kubernetes/pkg/apis/*/v1/defaults.go, plus the visible effect of the
        ServiceAccount, Priority and DefaultTolerationSeconds admission plugins on Pods).
    known_kinds() -> set[str]

Kind may be a Kind ("Deployment") or a plural resource name ("deployments").

Namespace defaulting decision: like kube-apiserver, a new Namespace gets spec.finalizers
["kubernetes"] and status.phase "Active".  spec.finalizers are not metadata.finalizers, so
they do not block deletion in the generic store; the namespace controller (localkube's
apiserver cascade) is what honours them.
"""

import copy

__all__ = ["unknown_fields", "default_object", "known_kinds", "OPEN", "MAP"]

OPEN = "<open>"  # any value, never reported
MAP = "<map>"  # map with free keys and scalar (or any) values


def O(leaves="", **subs):  # noqa: E743 - a tiny DSL for field trees
    d = {k: None for k in leaves.split()}
    d.update(subs)
    return d


def LIST(t):
    return [t]


OBJECT_REFERENCE = O("kind namespace name uid apiVersion resourceVersion fieldPath")
OBJECT_META = O(
    "name generateName namespace selfLink uid resourceVersion generation creationTimestamp "
    "deletionTimestamp deletionGracePeriodSeconds finalizers",
    labels=MAP,
    annotations=MAP,
    ownerReferences=LIST(O("apiVersion kind name uid controller blockOwnerDeletion")),
    managedFields=LIST(O("manager operation apiVersion time fieldsType subresource",
                         fieldsV1=OPEN)),
)
LABEL_SELECTOR = O(matchLabels=MAP, matchExpressions=LIST(O("key operator values")))
CONDITION = O("type status lastTransitionTime lastUpdateTime lastProbeTime lastHeartbeatTime "
              "reason message observedGeneration")

HTTP_GET = O("path port host scheme", httpHeaders=LIST(O("name value")))
EXEC = O("command")
TCP_SOCKET = O("port host")
PROBE = O(
    "initialDelaySeconds timeoutSeconds periodSeconds successThreshold failureThreshold "
    "terminationGracePeriodSeconds",
    exec=EXEC,
    httpGet=HTTP_GET,
    tcpSocket=TCP_SOCKET,
    grpc=O("port service"),
)
LIFECYCLE_HANDLER = O(exec=EXEC, httpGet=HTTP_GET, tcpSocket=TCP_SOCKET, sleep=O("seconds"))
SE_LINUX = O("user role type level")
WINDOWS_OPTIONS = O("gmsaCredentialSpecName gmsaCredentialSpec runAsUserName hostProcess")
SECCOMP = O("type localhostProfile")
RESOURCES = O(limits=MAP, requests=MAP, claims=LIST(O("name request")))
CONTAINER_SECURITY_CONTEXT = O(
    "privileged runAsUser runAsGroup runAsNonRoot readOnlyRootFilesystem "
    "allowPrivilegeEscalation procMount",
    capabilities=O("add drop"),
    seLinuxOptions=SE_LINUX,
    windowsOptions=WINDOWS_OPTIONS,
    seccompProfile=SECCOMP,
    appArmorProfile=SECCOMP,
)
KEY_SELECTOR = O("name key optional")
ENV_VAR = O(
    "name value",
    valueFrom=O(
        fieldRef=O("apiVersion fieldPath"),
        resourceFieldRef=O("containerName resource divisor"),
        configMapKeyRef=KEY_SELECTOR,
        secretKeyRef=KEY_SELECTOR,
    ),
)
CONTAINER = O(
    "name image command args workingDir restartPolicy terminationMessagePath "
    "terminationMessagePolicy imagePullPolicy stdin stdinOnce tty",
    ports=LIST(O("name hostPort containerPort protocol hostIP")),
    envFrom=LIST(O("prefix", configMapRef=O("name optional"), secretRef=O("name optional"))),
    env=LIST(ENV_VAR),
    resources=RESOURCES,
    resizePolicy=LIST(O("resourceName restartPolicy")),
    volumeMounts=LIST(O("name readOnly recursiveReadOnly mountPath subPath mountPropagation "
                        "subPathExpr")),
    volumeDevices=LIST(O("name devicePath")),
    livenessProbe=PROBE,
    readinessProbe=PROBE,
    startupProbe=PROBE,
    lifecycle=O("stopSignal", postStart=LIFECYCLE_HANDLER, preStop=LIFECYCLE_HANDLER),
    securityContext=CONTAINER_SECURITY_CONTEXT,
)
EPHEMERAL_CONTAINER = dict(CONTAINER, targetContainerName=None)

KEY_TO_PATH = O("key path mode")
DOWNWARD_FILE = O("path mode", fieldRef=O("apiVersion fieldPath"),
                  resourceFieldRef=O("containerName resource divisor"))
VOLUME = O(
    "name",
    hostPath=O("path type"),
    emptyDir=O("medium sizeLimit"),
    secret=O("secretName defaultMode optional", items=LIST(KEY_TO_PATH)),
    configMap=O("name defaultMode optional", items=LIST(KEY_TO_PATH)),
    persistentVolumeClaim=O("claimName readOnly"),
    downwardAPI=O("defaultMode", items=LIST(DOWNWARD_FILE)),
    projected=O(
        "defaultMode",
        sources=LIST(O(
            secret=O("name optional", items=LIST(KEY_TO_PATH)),
            configMap=O("name optional", items=LIST(KEY_TO_PATH)),
            downwardAPI=O(items=LIST(DOWNWARD_FILE)),
            serviceAccountToken=O("audience expirationSeconds path"),
            clusterTrustBundle=OPEN,
        )),
    ),
    nfs=O("server path readOnly"),
    image=O("reference pullPolicy"),
    csi=OPEN,
    ephemeral=OPEN,
    gcePersistentDisk=OPEN,
    awsElasticBlockStore=OPEN,
    gitRepo=OPEN,
    iscsi=OPEN,
    glusterfs=OPEN,
    rbd=OPEN,
    flexVolume=OPEN,
    cinder=OPEN,
    cephfs=OPEN,
    flocker=OPEN,
    fc=OPEN,
    azureFile=OPEN,
    azureDisk=OPEN,
    vsphereVolume=OPEN,
    quobyte=OPEN,
    photonPersistentDisk=OPEN,
    portworxVolume=OPEN,
    scaleIO=OPEN,
    storageos=OPEN,
)
NODE_SELECTOR_TERM = O(matchExpressions=LIST(O("key operator values")),
                       matchFields=LIST(O("key operator values")))
POD_AFFINITY_TERM = O("namespaces topologyKey matchLabelKeys mismatchLabelKeys",
                      labelSelector=LABEL_SELECTOR, namespaceSelector=LABEL_SELECTOR)
POD_AFFINITY = O(
    requiredDuringSchedulingIgnoredDuringExecution=LIST(POD_AFFINITY_TERM),
    preferredDuringSchedulingIgnoredDuringExecution=LIST(O("weight",
                                                           podAffinityTerm=POD_AFFINITY_TERM)),
)
AFFINITY = O(
    nodeAffinity=O(
        requiredDuringSchedulingIgnoredDuringExecution=O(
            nodeSelectorTerms=LIST(NODE_SELECTOR_TERM)),
        preferredDuringSchedulingIgnoredDuringExecution=LIST(O("weight",
                                                               preference=NODE_SELECTOR_TERM)),
    ),
    podAffinity=POD_AFFINITY,
    podAntiAffinity=POD_AFFINITY,
)
POD_SECURITY_CONTEXT = O(
    "runAsUser runAsGroup runAsNonRoot supplementalGroups supplementalGroupsPolicy fsGroup "
    "fsGroupChangePolicy seLinuxChangePolicy",
    seLinuxOptions=SE_LINUX,
    windowsOptions=WINDOWS_OPTIONS,
    sysctls=LIST(O("name value")),
    seccompProfile=SECCOMP,
    appArmorProfile=SECCOMP,
)
POD_SPEC = O(
    "restartPolicy terminationGracePeriodSeconds activeDeadlineSeconds dnsPolicy "
    "serviceAccountName serviceAccount automountServiceAccountToken nodeName hostNetwork "
    "hostPID hostIPC shareProcessNamespace hostname subdomain schedulerName priorityClassName "
    "priority runtimeClassName enableServiceLinks preemptionPolicy setHostnameAsFQDN hostUsers",
    volumes=LIST(VOLUME),
    initContainers=LIST(CONTAINER),
    containers=LIST(CONTAINER),
    ephemeralContainers=LIST(EPHEMERAL_CONTAINER),
    nodeSelector=MAP,
    securityContext=POD_SECURITY_CONTEXT,
    imagePullSecrets=LIST(O("name")),
    affinity=AFFINITY,
    tolerations=LIST(O("key operator value effect tolerationSeconds")),
    hostAliases=LIST(O("ip hostnames")),
    dnsConfig=O("nameservers searches", options=LIST(O("name value"))),
    readinessGates=LIST(O("conditionType")),
    overhead=MAP,
    topologySpreadConstraints=LIST(O(
        "maxSkew topologyKey whenUnsatisfiable matchLabelKeys minDomains nodeAffinityPolicy "
        "nodeTaintsPolicy", labelSelector=LABEL_SELECTOR)),
    os=O("name"),
    schedulingGates=LIST(O("name")),
    resourceClaims=LIST(O("name resourceClaimName resourceClaimTemplateName")),
    resources=RESOURCES,
)
POD_TEMPLATE_SPEC = O(metadata=OBJECT_META, spec=POD_SPEC)
POD_STATUS = O(
    "phase message reason nominatedNodeName hostIP podIP startTime qosClass resize "
    "observedGeneration",
    conditions=LIST(CONDITION),
    hostIPs=LIST(O("ip")),
    podIPs=LIST(O("ip")),
    initContainerStatuses=LIST(OPEN),
    containerStatuses=LIST(OPEN),
    ephemeralContainerStatuses=LIST(OPEN),
    resourceClaimStatuses=LIST(OPEN),
)


def _top(**fields):
    return O("apiVersion kind", metadata=OBJECT_META, **fields)


ROLLING = O("maxUnavailable maxSurge")
POLICY_RULE = O("verbs apiGroups resources resourceNames nonResourceURLs")
SUBJECT = O("kind apiGroup name namespace")
ROLE_REF = O("apiGroup kind name")

_TREES = {
    "Namespace": _top(spec=O("finalizers"), status=O("phase", conditions=LIST(CONDITION))),
    "Pod": _top(spec=POD_SPEC, status=POD_STATUS),
    "PodTemplate": _top(template=POD_TEMPLATE_SPEC),
    "Service": _top(
        spec=O(
            "clusterIP clusterIPs type externalIPs sessionAffinity loadBalancerIP "
            "loadBalancerSourceRanges externalName externalTrafficPolicy healthCheckNodePort "
            "publishNotReadyAddresses ipFamilies ipFamilyPolicy allocateLoadBalancerNodePorts "
            "loadBalancerClass internalTrafficPolicy trafficDistribution",
            ports=LIST(O("name protocol appProtocol port targetPort nodePort")),
            selector=MAP,
            sessionAffinityConfig=O(clientIP=O("timeoutSeconds")),
        ),
        status=O(
            loadBalancer=O(ingress=LIST(O("ip hostname ipMode",
                                          ports=LIST(O("port protocol error"))))),
            conditions=LIST(CONDITION),
        ),
    ),
    "Endpoints": _top(subsets=LIST(O(
        addresses=LIST(O("ip hostname nodeName", targetRef=OBJECT_REFERENCE)),
        notReadyAddresses=LIST(O("ip hostname nodeName", targetRef=OBJECT_REFERENCE)),
        ports=LIST(O("name port protocol appProtocol")),
    ))),
    "ConfigMap": _top(data=MAP, binaryData=MAP, immutable=None),
    "Secret": _top(data=MAP, stringData=MAP, type=None, immutable=None),
    "ServiceAccount": _top(secrets=LIST(OBJECT_REFERENCE), imagePullSecrets=LIST(O("name")),
                           automountServiceAccountToken=None),
    "Event": _top(
        involvedObject=OBJECT_REFERENCE,
        related=OBJECT_REFERENCE,
        source=O("component host"),
        series=O("count lastObservedTime"),
        **{k: None for k in ("reason message firstTimestamp lastTimestamp count type eventTime "
                             "action reportingComponent reportingInstance").split()}
    ),
    "Node": _top(
        spec=O("podCIDR podCIDRs providerID unschedulable externalID",
               taints=LIST(O("key value effect timeAdded")), configSource=OPEN),
        status=O(
            "phase volumesInUse",
            capacity=MAP,
            allocatable=MAP,
            conditions=LIST(CONDITION),
            addresses=LIST(O("type address")),
            daemonEndpoints=O(kubeletEndpoint=O("Port")),
            nodeInfo=O("machineID systemUUID bootID kernelVersion osImage "
                       "containerRuntimeVersion kubeletVersion kubeProxyVersion operatingSystem "
                       "architecture", swap=O("capacity")),
            images=LIST(O("names sizeBytes")),
            volumesAttached=LIST(O("name devicePath")),
            config=OPEN,
            runtimeHandlers=OPEN,
            features=OPEN,
        ),
    ),
    "Deployment": _top(
        spec=O(
            "replicas minReadySeconds revisionHistoryLimit paused progressDeadlineSeconds",
            selector=LABEL_SELECTOR,
            template=POD_TEMPLATE_SPEC,
            strategy=O("type", rollingUpdate=ROLLING),
        ),
        status=O(
            "observedGeneration replicas updatedReplicas readyReplicas availableReplicas "
            "unavailableReplicas terminatingReplicas collisionCount",
            conditions=LIST(CONDITION),
        ),
    ),
    "ReplicaSet": _top(
        spec=O("replicas minReadySeconds", selector=LABEL_SELECTOR, template=POD_TEMPLATE_SPEC),
        status=O("replicas fullyLabeledReplicas readyReplicas availableReplicas "
                 "terminatingReplicas observedGeneration", conditions=LIST(CONDITION)),
    ),
    "DaemonSet": _top(
        spec=O("minReadySeconds revisionHistoryLimit", selector=LABEL_SELECTOR,
               template=POD_TEMPLATE_SPEC, updateStrategy=O("type", rollingUpdate=ROLLING)),
        status=O("currentNumberScheduled numberMisscheduled desiredNumberScheduled numberReady "
                 "observedGeneration updatedNumberScheduled numberAvailable numberUnavailable "
                 "collisionCount", conditions=LIST(CONDITION)),
    ),
    "Lease": _top(spec=O("holderIdentity leaseDurationSeconds acquireTime renewTime "
                         "leaseTransitions strategy preferredHolder")),
    "Role": _top(rules=LIST(POLICY_RULE)),
    "ClusterRole": _top(rules=LIST(POLICY_RULE),
                        aggregationRule=O(clusterRoleSelectors=LIST(LABEL_SELECTOR))),
    "RoleBinding": _top(subjects=LIST(SUBJECT), roleRef=ROLE_REF),
    "ClusterRoleBinding": _top(subjects=LIST(SUBJECT), roleRef=ROLE_REF),
    "HorizontalPodAutoscaler": _top(
        spec=O("minReplicas maxReplicas targetCPUUtilizationPercentage",
               scaleTargetRef=O("kind name apiVersion"), metrics=LIST(OPEN), behavior=OPEN),
        status=OPEN,
    ),
    "CustomResourceDefinition": _top(
        spec=O(
            "group scope preserveUnknownFields",
            names=O("plural singular shortNames kind listKind categories"),
            versions=LIST(O(
                "name served storage deprecated deprecationWarning",
                schema=O(openAPIV3Schema=OPEN),
                subresources=O(status=OPEN, scale=O("specReplicasPath statusReplicasPath "
                                                    "labelSelectorPath")),
                additionalPrinterColumns=LIST(O("name type format description priority "
                                                "jsonPath")),
                selectableFields=LIST(O("jsonPath")),
            )),
            conversion=OPEN,
        ),
        status=OPEN,
    ),
}

_RESOURCE_TO_KIND = {
    "namespaces": "Namespace",
    "pods": "Pod",
    "podtemplates": "PodTemplate",
    "services": "Service",
    "endpoints": "Endpoints",
    "configmaps": "ConfigMap",
    "secrets": "Secret",
    "serviceaccounts": "ServiceAccount",
    "events": "Event",
    "nodes": "Node",
    "deployments": "Deployment",
    "replicasets": "ReplicaSet",
    "daemonsets": "DaemonSet",
    "leases": "Lease",
    "roles": "Role",
    "clusterroles": "ClusterRole",
    "rolebindings": "RoleBinding",
    "clusterrolebindings": "ClusterRoleBinding",
    "horizontalpodautoscalers": "HorizontalPodAutoscaler",
    "customresourcedefinitions": "CustomResourceDefinition",
}
_LOWER = {k.lower(): k for k in _TREES}


def _kind_name(kind):
    if not kind:
        return None
    return _RESOURCE_TO_KIND.get(kind) or _LOWER.get(kind.lower())


def known_kinds():
    return set(_TREES)


def unknown_fields(kind, obj):
    """Unknown field paths of obj for a built-in kind ([] for kinds not modelled)."""
    k = _kind_name(kind)
    if k is None or not isinstance(obj, dict):
        return []
    out = []
    _walk(obj, _TREES[k], "", out)
    return out


def _join(path, key):
    return key if not path else path + "." + key


def _walk(v, tree, path, out):
    if tree is None or tree is OPEN or tree == OPEN:
        return
    if tree == MAP:
        return
    if isinstance(tree, list):
        if isinstance(v, list):
            for i, x in enumerate(v):
                _walk(x, tree[0], "%s[%d]" % (path, i), out)
        return
    if isinstance(tree, dict):
        if not isinstance(v, dict):
            return
        for k, x in v.items():
            if k not in tree:
                out.append(_join(path, k))
                continue
            _walk(x, tree[k], _join(path, k), out)


# --------------------------------------------------------------------------------------------
# Defaulting


def _image_pull_policy(image):
    if not isinstance(image, str):
        return "IfNotPresent"
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _default_probe(p):
    if not isinstance(p, dict):
        return
    p.setdefault("timeoutSeconds", 1)
    p.setdefault("periodSeconds", 10)
    p.setdefault("successThreshold", 1)
    p.setdefault("failureThreshold", 3)
    if isinstance(p.get("httpGet"), dict):
        p["httpGet"].setdefault("scheme", "HTTP")
        p["httpGet"].setdefault("path", "/")


def _default_handler(h):
    if isinstance(h, dict) and isinstance(h.get("httpGet"), dict):
        h["httpGet"].setdefault("scheme", "HTTP")
        h["httpGet"].setdefault("path", "/")


def _default_container(c):
    if not isinstance(c, dict):
        return
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _image_pull_policy(c.get("image")))
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        if isinstance(env, dict):
            vf = env.get("valueFrom")
            if isinstance(vf, dict) and isinstance(vf.get("fieldRef"), dict):
                vf["fieldRef"].setdefault("apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(probe))
    lc = c.get("lifecycle")
    if isinstance(lc, dict):
        _default_handler(lc.get("postStart"))
        _default_handler(lc.get("preStop"))


def _default_volume(v):
    if not isinstance(v, dict):
        return
    for src in ("configMap", "secret", "downwardAPI", "projected"):
        if isinstance(v.get(src), dict):
            v[src].setdefault("defaultMode", 420)
    if isinstance(v.get("downwardAPI"), dict):
        for item in v["downwardAPI"].get("items") or []:
            if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
                item["fieldRef"].setdefault("apiVersion", "v1")
    if isinstance(v.get("hostPath"), dict):
        v["hostPath"].setdefault("type", "")
    if "name" in v and len(v) == 1:
        v["emptyDir"] = {}


def _default_pod_spec(spec):
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    if spec.get("serviceAccount") and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            _default_container(c)
    for v in spec.get("volumes") or []:
        _default_volume(v)


def _default_template(tpl):
    if isinstance(tpl, dict):
        _default_pod_spec(tpl.get("spec"))


def _default_pod(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _default_pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    # effects of admission plugins that every real cluster runs
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tols = spec.get("tolerations")
    if tols is None:
        tols = []
    if isinstance(tols, list):
        have = {(t.get("key"), t.get("effect")) for t in tols if isinstance(t, dict)}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if (key, "NoExecute") not in have and not any(
                    isinstance(t, dict) and t.get("operator") == "Exists" and not t.get("key")
                    for t in tols):
                tols.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300})
        spec["tolerations"] = tols
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos_class(spec))


def _qos_class(spec):
    """Pod QoS class as the apiserver computes it (Guaranteed / Burstable / BestEffort)."""
    containers = [c for key in ("initContainers", "containers")
                  for c in (spec.get(key) or []) if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            lv = lim.get(r)
            rv = req.get(r, lv)
            if lv is None or str(lv) != str(rv):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed and containers else "Burstable"


def _default_deployment(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    st = spec.setdefault("strategy", {})
    if isinstance(st, dict):
        st.setdefault("type", "RollingUpdate")
        if st["type"] == "RollingUpdate":
            ru = st.setdefault("rollingUpdate", {})
            if isinstance(ru, dict):
                ru.setdefault("maxUnavailable", "25%")
                ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _default_template(spec.get("template"))


def _default_replicaset(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    _default_template(spec.get("template"))


def _default_daemonset(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    us = spec.setdefault("updateStrategy", {})
    if isinstance(us, dict):
        us.setdefault("type", "RollingUpdate")
        if us["type"] == "RollingUpdate":
            ru = us.setdefault("rollingUpdate", {})
            if isinstance(ru, dict):
                ru.setdefault("maxUnavailable", 1)
                ru.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _default_template(spec.get("template"))


def _default_service(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("sessionAffinity") == "ClientIP":
        cfg = spec.setdefault("sessionAffinityConfig", {})
        if isinstance(cfg, dict):
            cfg.setdefault("clientIP", {}).setdefault("timeoutSeconds", 10800)
    t = spec["type"]
    if t != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("ipFamilies", ["IPv4"])
    if t in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if t == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if "targetPort" not in p and "port" in p:
                p["targetPort"] = p["port"]
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        status.setdefault("loadBalancer", {})


def _default_endpoints(obj):
    for ss in obj.get("subsets") or []:
        if isinstance(ss, dict):
            for p in ss.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")


def _default_secret(obj):
    obj.setdefault("type", "Opaque")


def _default_namespace(obj):
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("finalizers", ["kubernetes"])
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        status.setdefault("phase", "Active")


def _default_hpa(obj):
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("minReplicas", 1)


def _default_rbac_binding(obj):
    for s in obj.get("subjects") or []:
        if isinstance(s, dict):
            if s.get("kind") in ("User", "Group"):
                s.setdefault("apiGroup", "rbac.authorization.k8s.io")
            elif s.get("kind") == "ServiceAccount":
                s.setdefault("apiGroup", "")


def _default_crd(obj):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    conv = spec.setdefault("conversion", {})
    if isinstance(conv, dict):
        conv.setdefault("strategy", "None")


_DEFAULTERS = {
    "Pod": _default_pod,
    "PodTemplate": lambda o: _default_template(o.get("template")),
    "Deployment": _default_deployment,
    "ReplicaSet": _default_replicaset,
    "DaemonSet": _default_daemonset,
    "Service": _default_service,
    "Endpoints": _default_endpoints,
    "Secret": _default_secret,
    "Namespace": _default_namespace,
    "HorizontalPodAutoscaler": _default_hpa,
    "RoleBinding": _default_rbac_binding,
    "ClusterRoleBinding": _default_rbac_binding,
    "CustomResourceDefinition": _default_crd,
}


def default_object(kind, obj):
    """A defaulted copy of obj (unchanged copy for kinds without defaults)."""
    out = copy.deepcopy(obj)
    k = _kind_name(kind)
    if k is None or not isinstance(out, dict):
        return out
    fn = _DEFAULTERS.get(k)
    if fn is not None:
        fn(out)
    return out

