"""Field trees, apiserver defaulting and typed-field checks for the built-in kinds localkube
serves.  Pure functions.

    unknown_fields(kind, obj) -> list[str]
        Paths of fields the kind does not have, in the style kube's strict decoding prints
        ("spec.template.spec.containers[0].imagee").  Subtrees that are not modelled are
        marked OPEN and never yield an unknown field.
    time_error(kind, obj) -> str or None
        The error kube's typed decoder gives for the first unparsable metav1.Time /
        metav1.MicroTime value of obj (Go's time.Parse message), or None.
    default_object(kind, obj) -> dict
        A copy of obj with the defaults kube-apiserver applies on create/update (defaulting
        functions in k8s.io/kubernetes/pkg/apis/*/v1/defaults.go, plus the visible effect of the
        ServiceAccount, Priority and DefaultTolerationSeconds admission plugins on Pods).
    openapi_schemas(kind) -> (schema, {name: schema})
        An OpenAPI v3 schema for the kind generated from its field tree (types, nested
        properties, a few descriptions) plus the named component schemas it references.
    known_kinds() -> set[str]

Kind may be a Kind ("Deployment"), a plural resource name ("deployments"), or
"events.k8s.io/Event" for the events.k8s.io/v1 form of Event.

Field trees: a dict maps a field name to a subtree; a list [t] is a list of t; a string is a
leaf type: "string", "int32", "int64", "boolean", "number", "time" (metav1.Time),
"microtime" (metav1.MicroTime), "intstr" (IntOrString), "quantity", "[]string", "[]int64",
or one of the markers OPEN (any value) and MAP / MAP_QUANTITY / MAP_BYTES (maps with free keys).
O("a b:int64", sub=...) builds a subtree; a leaf without ":type" gets its type from
_LEAF_TYPES (by field name), else "string".

Namespace defaulting decision: like kube-apiserver, a new Namespace gets spec.finalizers
["kubernetes"] and status.phase "Active".  spec.finalizers are not metadata.finalizers, so
they do not block deletion in the generic store; the namespace controller (localkube's
apiserver cascade) is what honours them.
"""

import calendar
import copy
import json

__all__ = ["unknown_fields", "default_object", "known_kinds", "time_error", "openapi_schemas",
           "go_parse_time", "RFC3339", "RFC3339_MICRO", "OPEN", "MAP", "MAP_QUANTITY",
           "MAP_BYTES"]

OPEN = "<open>"  # any value, never reported
MAP = "<map>"  # map[string]string
MAP_QUANTITY = "<map:quantity>"  # map[string]resource.Quantity
MAP_BYTES = "<map:bytes>"  # map[string][]byte (base64 strings in JSON)

_INT32 = """replicas minReadySeconds revisionHistoryLimit progressDeadlineSeconds updatedReplicas
readyReplicas availableReplicas unavailableReplicas terminatingReplicas collisionCount
fullyLabeledReplicas currentNumberScheduled numberMisscheduled desiredNumberScheduled numberReady
updatedNumberScheduled numberAvailable numberUnavailable leaseDurationSeconds leaseTransitions
initialDelaySeconds timeoutSeconds periodSeconds successThreshold failureThreshold
containerPort hostPort nodePort healthCheckNodePort defaultMode mode weight maxSkew minDomains
minReplicas maxReplicas targetCPUUtilizationPercentage count priority Port port restartCount
exitCode signal deprecatedCount currentReplicas desiredReplicas
currentCPUUtilizationPercentage""".split()
_INT64 = """generation deletionGracePeriodSeconds terminationGracePeriodSeconds
activeDeadlineSeconds runAsUser runAsGroup fsGroup tolerationSeconds sizeBytes
observedGeneration seconds expirationSeconds""".split()
_BOOL = """controller blockOwnerDeletion paused stdin stdinOnce tty optional readOnly privileged
runAsNonRoot readOnlyRootFilesystem allowPrivilegeEscalation automountServiceAccountToken
hostNetwork hostPID hostIPC shareProcessNamespace enableServiceLinks setHostnameAsFQDN hostUsers
publishNotReadyAddresses allocateLoadBalancerNodePorts unschedulable immutable served storage
deprecated preserveUnknownFields hostProcess ready started""".split()
_STRINGS = """finalizers command args values verbs apiGroups resources resourceNames nonResourceURLs
add drop clusterIPs externalIPs loadBalancerSourceRanges ipFamilies hostnames nameservers
searches namespaces matchLabelKeys mismatchLabelKeys podCIDRs volumesInUse shortNames
categories names""".split()
_TIME = """creationTimestamp deletionTimestamp lastTransitionTime lastUpdateTime lastProbeTime
lastHeartbeatTime startTime firstTimestamp lastTimestamp timeAdded time lastScaleTime startedAt
finishedAt deprecatedFirstTimestamp deprecatedLastTimestamp""".split()
_MICROTIME = "acquireTime renewTime eventTime lastObservedTime".split()

_LEAF_TYPES = {}
for _names, _t in ((_INT32, "int32"), (_INT64, "int64"), (_BOOL, "boolean"),
                   (_STRINGS, "[]string"), (_TIME, "time"), (_MICROTIME, "microtime")):
    for _n in _names:
        _LEAF_TYPES[_n] = _t
_LEAF_TYPES.update({"targetPort": "intstr", "maxUnavailable": "intstr", "maxSurge": "intstr",
                    "divisor": "quantity", "sizeLimit": "quantity",
                    "supplementalGroups": "[]int64"})

_NAMED = {}  # id(subtree) -> OpenAPI component name


def O(leaves="", **subs):  # noqa: E743 - a tiny DSL for field trees
    d = {}
    for tok in leaves.split():
        name, _, typ = tok.partition(":")
        d[name] = typ or _LEAF_TYPES.get(name, "string")
    d.update(subs)
    return d


def LIST(t):
    return [t]


def named(name, tree):
    """Marks tree as the OpenAPI component `name` (io.k8s.api.core.v1.Container...)."""
    _NAMED[id(tree)] = name
    return tree


_CORE = "io.k8s.api.core.v1."
_META = "io.k8s.apimachinery.pkg.apis.meta.v1."

OBJECT_REFERENCE = named(_CORE + "ObjectReference",
                         O("kind namespace name uid apiVersion resourceVersion fieldPath"))
OWNER_REFERENCE = named(_META + "OwnerReference",
                        O("apiVersion kind name uid controller blockOwnerDeletion"))
MANAGED_FIELDS_ENTRY = named(_META + "ManagedFieldsEntry",
                             O("manager operation apiVersion time fieldsType subresource",
                               fieldsV1=OPEN))
OBJECT_META = named(_META + "ObjectMeta", O(
    "name generateName namespace selfLink uid resourceVersion generation creationTimestamp "
    "deletionTimestamp deletionGracePeriodSeconds finalizers",
    labels=MAP,
    annotations=MAP,
    ownerReferences=LIST(OWNER_REFERENCE),
    managedFields=LIST(MANAGED_FIELDS_ENTRY),
))
LABEL_SELECTOR = named(_META + "LabelSelector",
                       O(matchLabels=MAP, matchExpressions=LIST(O("key operator values"))))
CONDITION = O("type status lastTransitionTime lastUpdateTime lastProbeTime lastHeartbeatTime "
              "reason message observedGeneration")

HTTP_GET = named(_CORE + "HTTPGetAction",
                 O("path port:intstr host scheme", httpHeaders=LIST(O("name value"))))
EXEC = named(_CORE + "ExecAction", O("command"))
TCP_SOCKET = named(_CORE + "TCPSocketAction", O("port:intstr host"))
PROBE = named(_CORE + "Probe", O(
    "initialDelaySeconds timeoutSeconds periodSeconds successThreshold failureThreshold "
    "terminationGracePeriodSeconds",
    exec=EXEC,
    httpGet=HTTP_GET,
    tcpSocket=TCP_SOCKET,
    grpc=O("port service"),
))
LIFECYCLE_HANDLER = named(_CORE + "LifecycleHandler",
                          O(exec=EXEC, httpGet=HTTP_GET, tcpSocket=TCP_SOCKET, sleep=O("seconds")))
SE_LINUX = O("user role type level")
WINDOWS_OPTIONS = O("gmsaCredentialSpecName gmsaCredentialSpec runAsUserName hostProcess")
SECCOMP = O("type localhostProfile")
RESOURCES = named(_CORE + "ResourceRequirements",
                  O(limits=MAP_QUANTITY, requests=MAP_QUANTITY, claims=LIST(O("name request"))))
CONTAINER_SECURITY_CONTEXT = named(_CORE + "SecurityContext", O(
    "privileged runAsUser runAsGroup runAsNonRoot readOnlyRootFilesystem "
    "allowPrivilegeEscalation procMount",
    capabilities=O("add drop"),
    seLinuxOptions=SE_LINUX,
    windowsOptions=WINDOWS_OPTIONS,
    seccompProfile=SECCOMP,
    appArmorProfile=SECCOMP,
))
KEY_SELECTOR = O("name key optional")
ENV_VAR = named(_CORE + "EnvVar", O(
    "name value",
    valueFrom=O(
        fieldRef=O("apiVersion fieldPath"),
        resourceFieldRef=O("containerName resource divisor"),
        configMapKeyRef=KEY_SELECTOR,
        secretKeyRef=KEY_SELECTOR,
    ),
))
VOLUME_MOUNT = named(_CORE + "VolumeMount", O(
    "name readOnly recursiveReadOnly mountPath subPath mountPropagation subPathExpr"))
CONTAINER = named(_CORE + "Container", O(
    "name image command args workingDir restartPolicy terminationMessagePath "
    "terminationMessagePolicy imagePullPolicy stdin stdinOnce tty",
    ports=LIST(named(_CORE + "ContainerPort",
                     O("name hostPort containerPort protocol hostIP"))),
    envFrom=LIST(O("prefix", configMapRef=O("name optional"), secretRef=O("name optional"))),
    env=LIST(ENV_VAR),
    resources=RESOURCES,
    resizePolicy=LIST(O("resourceName restartPolicy")),
    volumeMounts=LIST(VOLUME_MOUNT),
    volumeDevices=LIST(O("name devicePath")),
    livenessProbe=PROBE,
    readinessProbe=PROBE,
    startupProbe=PROBE,
    lifecycle=O("stopSignal", postStart=LIFECYCLE_HANDLER, preStop=LIFECYCLE_HANDLER),
    securityContext=CONTAINER_SECURITY_CONTEXT,
))
EPHEMERAL_CONTAINER = named(_CORE + "EphemeralContainer",
                            dict(CONTAINER, targetContainerName="string"))

KEY_TO_PATH = O("key path mode")
DOWNWARD_FILE = O("path mode", fieldRef=O("apiVersion fieldPath"),
                  resourceFieldRef=O("containerName resource divisor"))
VOLUME = named(_CORE + "Volume", O(
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
))
NODE_SELECTOR_TERM = O(matchExpressions=LIST(O("key operator values")),
                       matchFields=LIST(O("key operator values")))
POD_AFFINITY_TERM = O("namespaces topologyKey matchLabelKeys mismatchLabelKeys",
                      labelSelector=LABEL_SELECTOR, namespaceSelector=LABEL_SELECTOR)
POD_AFFINITY = O(
    requiredDuringSchedulingIgnoredDuringExecution=LIST(POD_AFFINITY_TERM),
    preferredDuringSchedulingIgnoredDuringExecution=LIST(O("weight",
                                                           podAffinityTerm=POD_AFFINITY_TERM)),
)
AFFINITY = named(_CORE + "Affinity", O(
    nodeAffinity=O(
        requiredDuringSchedulingIgnoredDuringExecution=O(
            nodeSelectorTerms=LIST(NODE_SELECTOR_TERM)),
        preferredDuringSchedulingIgnoredDuringExecution=LIST(O("weight",
                                                               preference=NODE_SELECTOR_TERM)),
    ),
    podAffinity=POD_AFFINITY,
    podAntiAffinity=POD_AFFINITY,
))
POD_SECURITY_CONTEXT = named(_CORE + "PodSecurityContext", O(
    "runAsUser runAsGroup runAsNonRoot supplementalGroups supplementalGroupsPolicy fsGroup "
    "fsGroupChangePolicy seLinuxChangePolicy",
    seLinuxOptions=SE_LINUX,
    windowsOptions=WINDOWS_OPTIONS,
    sysctls=LIST(O("name value")),
    seccompProfile=SECCOMP,
    appArmorProfile=SECCOMP,
))
TOLERATION = named(_CORE + "Toleration", O("key operator value effect tolerationSeconds"))
POD_SPEC = named(_CORE + "PodSpec", O(
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
    tolerations=LIST(TOLERATION),
    hostAliases=LIST(O("ip hostnames")),
    dnsConfig=O("nameservers searches", options=LIST(O("name value"))),
    readinessGates=LIST(O("conditionType")),
    overhead=MAP_QUANTITY,
    topologySpreadConstraints=LIST(O(
        "maxSkew topologyKey whenUnsatisfiable matchLabelKeys minDomains nodeAffinityPolicy "
        "nodeTaintsPolicy", labelSelector=LABEL_SELECTOR)),
    os=O("name"),
    schedulingGates=LIST(O("name")),
    resourceClaims=LIST(O("name resourceClaimName resourceClaimTemplateName")),
    resources=RESOURCES,
))
POD_TEMPLATE_SPEC = named(_CORE + "PodTemplateSpec", O(metadata=OBJECT_META, spec=POD_SPEC))
CONTAINER_STATE = named(_CORE + "ContainerState", O(
    waiting=O("reason message"),
    running=O("startedAt"),
    terminated=O("exitCode signal reason message startedAt finishedAt containerID"),
))
CONTAINER_STATUS = named(_CORE + "ContainerStatus", O(
    "name ready restartCount image imageID containerID started stopSignal",
    state=CONTAINER_STATE,
    lastState=CONTAINER_STATE,
    allocatedResources=MAP_QUANTITY,
    resources=RESOURCES,
    volumeMounts=LIST(O("name mountPath readOnly recursiveReadOnly")),
    user=OPEN,
    allocatedResourcesStatus=LIST(OPEN),
))
POD_STATUS = named(_CORE + "PodStatus", O(
    "phase message reason nominatedNodeName hostIP podIP startTime qosClass resize "
    "observedGeneration",
    conditions=LIST(CONDITION),
    hostIPs=LIST(O("ip")),
    podIPs=LIST(O("ip")),
    initContainerStatuses=LIST(CONTAINER_STATUS),
    containerStatuses=LIST(CONTAINER_STATUS),
    ephemeralContainerStatuses=LIST(CONTAINER_STATUS),
    resourceClaimStatuses=LIST(OPEN),
))


def _top(**fields):
    return O("apiVersion kind", metadata=OBJECT_META, **fields)


ROLLING = O("maxUnavailable maxSurge")
POLICY_RULE = named("io.k8s.api.rbac.v1.PolicyRule",
                    O("verbs apiGroups resources resourceNames nonResourceURLs"))
SUBJECT = named("io.k8s.api.rbac.v1.Subject", O("kind apiGroup name namespace"))
ROLE_REF = named("io.k8s.api.rbac.v1.RoleRef", O("apiGroup kind name"))
EVENT_SERIES = O("count lastObservedTime")

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
            ports=LIST(named(_CORE + "ServicePort",
                             O("name protocol appProtocol port targetPort nodePort"))),
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
    "ConfigMap": _top(data=MAP, binaryData=MAP_BYTES, immutable="boolean"),
    "Secret": _top(data=MAP_BYTES, stringData=MAP, type="string", immutable="boolean"),
    "ServiceAccount": _top(secrets=LIST(OBJECT_REFERENCE), imagePullSecrets=LIST(O("name")),
                           automountServiceAccountToken="boolean"),
    "Event": _top(
        involvedObject=OBJECT_REFERENCE,
        related=OBJECT_REFERENCE,
        source=named(_CORE + "EventSource", O("component host")),
        series=EVENT_SERIES,
        **O("reason message firstTimestamp lastTimestamp count type eventTime action "
            "reportingComponent reportingInstance")
    ),
    "events.k8s.io/Event": _top(
        regarding=OBJECT_REFERENCE,
        related=OBJECT_REFERENCE,
        deprecatedSource=named(_CORE + "EventSource", O("component host")),
        series=EVENT_SERIES,
        **O("eventTime reportingController reportingInstance action reason note type "
            "deprecatedFirstTimestamp deprecatedLastTimestamp deprecatedCount")
    ),
    "Node": _top(
        spec=O("podCIDR podCIDRs providerID unschedulable externalID",
               taints=LIST(named(_CORE + "Taint", O("key value effect timeAdded"))),
               configSource=OPEN),
        status=O(
            "phase volumesInUse",
            capacity=MAP_QUANTITY,
            allocatable=MAP_QUANTITY,
            conditions=LIST(CONDITION),
            addresses=LIST(O("type address")),
            daemonEndpoints=O(kubeletEndpoint=O("Port")),
            nodeInfo=O("machineID systemUUID bootID kernelVersion osImage "
                       "containerRuntimeVersion kubeletVersion kubeProxyVersion operatingSystem "
                       "architecture", swap=O("capacity:int64")),
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
                additionalPrinterColumns=LIST(O("name type format description priority:int32 "
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
    if tree is None or isinstance(tree, str):
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
# Typed time fields (metav1.Time / metav1.MicroTime decoding)

RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"
# (prefix literal, std element) chunks of the two layouts, as Go's nextStdChunk splits them
_CHUNKS = {
    RFC3339: [("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"), (":", "05"),
              ("", "Z07:00")],
    RFC3339_MICRO: [("", "2006"), ("-", "01"), ("-", "02"), ("T", "15"), (":", "04"),
                    (":", "05"), ("", ".000000"), ("", "Z07:00")],
}


def _go_quote(s):
    """Go's time.quote."""
    out = ['"']
    for ch in s:
        if ord(ch) >= 0x80 or ch < " ":
            out.extend("\\x%02x" % b for b in ch.encode("utf-8"))
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


def _isdigit(s, i):
    return i < len(s) and "0" <= s[i] <= "9"


def _getnum(s, fixed):
    if not _isdigit(s, 0):
        return None, s
    if not _isdigit(s, 1):
        if fixed:
            return None, s
        return int(s[0]), s[1:]
    return int(s[:2]), s[2:]


def _atoi(s):
    """Go's time.atoi: an optional sign, then digits only (the empty string is 0)."""
    neg = s[:1] == "-"
    if s[:1] in ("-", "+"):
        s = s[1:]
    if any(not "0" <= c <= "9" for c in s):
        return None
    x = int(s) if s else 0
    return -x if neg else x


def _days_in(month, year):
    if month == 2:
        return 29 if calendar.isleap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def go_parse_time(value, layout=RFC3339):
    """Go's time.Parse(layout, value) for the RFC3339 and RFC3339Micro layouts: None when the
    value parses, else Go's error text (`parsing time "x" as "2006-01-02T15:04:05Z07:00":
    cannot parse "x" as "2006"`)."""
    head = "parsing time " + _go_quote(value)

    def bad(elem, rest):
        return "%s as %s: cannot parse %s as %s" % (head, _go_quote(layout), _go_quote(rest),
                                                   _go_quote(elem))

    v = value
    year = month = day = -1
    for prefix, std in _CHUNKS[layout]:
        for i, ch in enumerate(prefix):
            if not v or v[0] != ch:
                return bad(prefix, v)
            v = v[1:]
        hold = v
        rng = None
        if std == "2006":
            if len(v) < 4 or not _isdigit(v, 0):
                return bad(std, hold)
            year = _atoi(v[:4])
            if year is None:
                return bad(std, hold)
            v = v[4:]
        elif std in ("01", "02", "15", "04", "05"):
            n, v = _getnum(v, std != "15")
            if n is None:
                return bad(std, hold)
            if std == "01":
                month = n
                if not 1 <= n <= 12:
                    rng = "month"
            elif std == "02":
                day = n
            elif std == "15" and n >= 24:
                rng = "hour"
            elif std == "04" and n >= 60:
                rng = "minute"
            elif std == "05":
                if n >= 60:
                    rng = "second"
                elif layout == RFC3339 and len(v) >= 2 and v[0] in ".," and _isdigit(v, 1):
                    n2 = 2
                    while n2 < len(v) and _isdigit(v, n2):
                        n2 += 1
                    v = v[n2:]
        elif std == ".000000":
            if len(v) < 7 or v[0] not in ".," or _atoi(v[1:7]) is None:
                return bad(std, hold)
            if _atoi(v[1:7]) < 0:
                rng = "fractional second"
            v = v[7:]
        elif std == "Z07:00":
            if v[:1] == "Z":
                v = v[1:]
            else:
                if len(v) < 6 or v[3] != ":":
                    return bad(std, hold)
                sign, hh, mm, v = v[0], v[1:3], v[4:6], v[6:]
                hr, _ = _getnum(hh, True)
                mi, _ = _getnum(mm, True) if hr is not None else (None, "")
                if hr is None or mi is None or sign not in "+-":
                    return bad(std, hold)
                if hr > 24:
                    rng = "time zone offset hour"
                if mi > 60:
                    rng = "time zone offset minute"
        if rng:
            return "%s: %s out of range" % (head, rng)
    if v:
        return "%s: extra text: %s" % (head, _go_quote(v))
    if day < 1 or day > _days_in(month, year):
        return "%s: day out of range" % head
    return None


def _json_kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    return "string"


def _time_walk(v, tree, path):
    if isinstance(tree, str):
        if tree in ("time", "microtime") and v is not None:
            if not isinstance(v, str):
                return "json: cannot unmarshal %s into Go value of type string" % _json_kind(v)
            return go_parse_time(v, RFC3339 if tree == "time" else RFC3339_MICRO)
        return None
    if isinstance(tree, list):
        if isinstance(v, list):
            for x in v:
                e = _time_walk(x, tree[0], path)
                if e:
                    return e
        return None
    if isinstance(tree, dict) and isinstance(v, dict):
        for k, x in v.items():
            sub = tree.get(k)
            if sub is not None:
                e = _time_walk(x, sub, path)
                if e:
                    return e
    return None


def time_error(kind, obj):
    """kube's typed-decoding error for the first unparsable metav1.Time / MicroTime of obj."""
    k = _kind_name(kind)
    if k is None or not isinstance(obj, dict):
        return None
    return _time_walk(obj, _TREES[k], "")


# --------------------------------------------------------------------------------------------
# events.k8s.io/v1 <-> core/v1 Event (k8s.io/kubernetes/pkg/apis/events/v1/conversion.go)

# events.k8s.io/v1 field selector -> the core field it reads
EVENTS_V1_FIELD_LABELS = {
    "reason": "reason",
    "regarding.kind": "involvedObject.kind",
    "regarding.namespace": "involvedObject.namespace",
    "regarding.name": "involvedObject.name",
    "regarding.uid": "involvedObject.uid",
    "regarding.apiVersion": "involvedObject.apiVersion",
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
    "type": "type",
    "metadata.namespace": "metadata.namespace",
    "metadata.name": "metadata.name",
}


def event_to_v1(ev):
    """A stored core/v1 Event as events.k8s.io/v1 serves it (Go's JSON: the non-pointer time
    fields are null when unset, deprecatedSource is {} when empty, omitempty strings go)."""
    out = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
           "metadata": ev.get("metadata") or {}, "eventTime": ev.get("eventTime")}
    if ev.get("series") is not None:
        out["series"] = ev["series"]
    for src, dst in (("reportingComponent", "reportingController"),
                     ("reportingInstance", "reportingInstance"), ("action", "action"),
                     ("reason", "reason")):
        if ev.get(src):
            out[dst] = ev[src]
    out["regarding"] = ev.get("involvedObject") or {}
    if ev.get("related") is not None:
        out["related"] = ev["related"]
    if ev.get("message"):
        out["note"] = ev["message"]
    if ev.get("type"):
        out["type"] = ev["type"]
    out["deprecatedSource"] = ev.get("source") or {}
    out["deprecatedFirstTimestamp"] = ev.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = ev.get("lastTimestamp")
    if ev.get("count"):
        out["deprecatedCount"] = ev["count"]
    return out


def event_from_v1(ev):
    """An events.k8s.io/v1 Event body as the core/v1 Event that is stored."""
    out = {"apiVersion": "v1", "kind": "Event", "metadata": ev.get("metadata") or {},
           "involvedObject": ev.get("regarding") or {}}
    for src, dst in (("reason", "reason"), ("note", "message")):
        if ev.get(src) is not None:
            out[dst] = ev[src]
    out["source"] = ev.get("deprecatedSource") or {}
    out["firstTimestamp"] = ev.get("deprecatedFirstTimestamp")
    out["lastTimestamp"] = ev.get("deprecatedLastTimestamp")
    if ev.get("deprecatedCount") is not None:
        out["count"] = ev["deprecatedCount"]
    for k in ("type", "eventTime", "series", "action", "related"):
        if ev.get(k) is not None:
            out[k] = ev[k]
    out["eventTime"] = ev.get("eventTime")
    out["reportingComponent"] = ev.get("reportingController") or ""
    out["reportingInstance"] = ev.get("reportingInstance") or ""
    return out


# --------------------------------------------------------------------------------------------
# OpenAPI v3 schemas generated from the field trees (what `kubectl explain` reads)

_TIME_REF = _META + "Time"
_MICROTIME_REF = _META + "MicroTime"
_INTSTR_REF = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY_REF = "io.k8s.apimachinery.pkg.api.resource.Quantity"

_PRIMITIVE_COMPONENTS = {
    _TIME_REF: {"description": "Time is a wrapper around time.Time which supports correct "
                "marshaling to YAML and JSON.  Wrappers are provided for many of the factory "
                "methods that the time package offers.", "type": "string",
                "format": "date-time"},
    _MICROTIME_REF: {"description": "MicroTime is version of Time with microsecond level "
                     "precision.", "type": "string", "format": "date-time"},
    _INTSTR_REF: {"description": "IntOrString is a type that can hold an int32 or a string.  "
                  "When used in JSON or YAML marshalling and unmarshalling, it produces or "
                  "consumes the inner type.  This allows you to have, for example, a JSON field "
                  "that can accept a name or number.", "x-kubernetes-int-or-string": True,
                  "anyOf": [{"type": "integer"}, {"type": "string"}]},
    _QUANTITY_REF: {"description": "Quantity is a fixed-point representation of a number. It "
                    "provides convenient marshaling/unmarshaling in JSON and YAML, in addition "
                    "to String() and AsInt64() accessors.",
                    "oneOf": [{"type": "string"}, {"type": "number"}]},
}

_LEAF_REFS = {"time": _TIME_REF, "microtime": _MICROTIME_REF, "intstr": _INTSTR_REF,
              "quantity": _QUANTITY_REF}
_LEAF_SCHEMAS = {
    "string": {"type": "string"},
    "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"},
    "boolean": {"type": "boolean"},
    "number": {"type": "number", "format": "double"},
    "[]string": {"type": "array", "items": {"type": "string", "default": ""}},
    "[]int64": {"type": "array", "items": {"type": "integer", "format": "int64", "default": 0}},
    OPEN: {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    MAP: {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
    MAP_QUANTITY: {"type": "object",
                   "additionalProperties": {"$ref": "#/components/schemas/" + _QUANTITY_REF}},
    MAP_BYTES: {"type": "object", "additionalProperties": {"type": "string", "format": "byte"}},
}

_KIND_DESCRIPTIONS = {
    "Namespace": "Namespace provides a scope for Names. Use of multiple namespaces is optional.",
    "Pod": "Pod is a collection of containers that can run on your host. This resource is "
           "created by clients and scheduled onto hosts.",
    "Service": "Service is a named abstraction of software service (for example, mysql) "
               "consisting of local port (for example 3306) that the proxy listens on, and the "
               "selector that determines which pods will answer requests sent through the "
               "proxy.",
    "Endpoints": "Endpoints is a collection of endpoints that implement the actual service.",
    "ConfigMap": "ConfigMap holds configuration data for pods to consume.",
    "Secret": "Secret holds secret data of a certain type. The total bytes of the values in "
              "the Data field must be less than MaxSecretSize bytes.",
    "ServiceAccount": "ServiceAccount binds together: * a name, understood by users, and "
                      "perhaps by peripheral systems, for an identity * a principal that can be "
                      "authenticated and authorized * a set of secrets",
    "Event": "Event is a report of an event somewhere in the cluster.",
    "events.k8s.io/Event": "Event is a report of an event somewhere in the cluster. It "
                           "generally denotes some state change in the system.",
    "Node": "Node is a worker node in Kubernetes. Each node will have a unique identifier in "
            "the cache (i.e. in etcd).",
    "Deployment": "Deployment enables declarative updates for Pods and ReplicaSets.",
    "ReplicaSet": "ReplicaSet ensures that a specified number of pod replicas are running at "
                  "any given time.",
    "DaemonSet": "DaemonSet represents the configuration of a daemon set.",
    "Lease": "Lease defines a lease concept.",
    "Role": "Role is a namespaced, logical grouping of PolicyRules that can be referenced as a "
            "unit by a RoleBinding.",
    "ClusterRole": "ClusterRole is a cluster level, logical grouping of PolicyRules that can be "
                   "referenced as a unit by a RoleBinding or ClusterRoleBinding.",
    "RoleBinding": "RoleBinding references a role, but does not contain it.",
    "ClusterRoleBinding": "ClusterRoleBinding references a ClusterRole, but not contain it.",
    "HorizontalPodAutoscaler": "HorizontalPodAutoscaler is the configuration for a horizontal "
                               "pod autoscaler, which automatically manages the replica count "
                               "of any resource implementing the scale subresource based on "
                               "the metrics specified.",
    "CustomResourceDefinition": "CustomResourceDefinition represents a resource that should be "
                                "exposed on the API server.  Its name MUST be in the format "
                                "<.spec.name>.<.spec.group>.",
}

_API_CONV = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
# field descriptions: (owner schema's short name or "*", field) -> text
_FIELD_DESCRIPTIONS = {
    ("*", "apiVersion"): "APIVersion defines the versioned schema of this representation of an "
    "object. Servers should convert recognized schemas to the latest internal value, and may "
    "reject unrecognized values. More info: " + _API_CONV + "#resources",
    ("*", "kind"): "Kind is a string value representing the REST resource this object "
    "represents. Servers may infer this from the endpoint the client submits requests to. "
    "Cannot be updated. In CamelCase. More info: " + _API_CONV + "#types-kinds",
    ("*", "metadata"): "Standard object's metadata. More info: " + _API_CONV + "#metadata",
    ("*", "spec"): "Specification of the desired behavior. More info: " + _API_CONV +
    "#spec-and-status",
    ("*", "status"): "Most recently observed status. Read-only. More info: " + _API_CONV +
    "#spec-and-status",
    ("DeploymentSpec", "replicas"): "Number of desired pods. This is a pointer to distinguish "
    "between explicit zero and not specified. Defaults to 1.",
    ("DeploymentSpec", "selector"): "Label selector for pods. Existing ReplicaSets whose pods "
    "are selected by this will be the ones affected by this deployment. It must match the pod "
    "template's labels.",
    ("DeploymentSpec", "template"): "Template describes the pods that will be created. The only "
    "allowed template.spec.restartPolicy value is \"Always\".",
    ("DeploymentSpec", "strategy"): "The deployment strategy to use to replace existing pods "
    "with new ones.",
    ("DeploymentSpec", "minReadySeconds"): "Minimum number of seconds for which a newly created "
    "pod should be ready without any of its container crashing, for it to be considered "
    "available. Defaults to 0 (pod will be considered available as soon as it is ready)",
    ("DeploymentSpec", "paused"): "Indicates that the deployment is paused.",
    ("DeploymentSpec", "revisionHistoryLimit"): "The number of old ReplicaSets to retain to "
    "allow rollback. This is a pointer to distinguish between explicit zero and not specified. "
    "Defaults to 10.",
    ("DeploymentSpec", "progressDeadlineSeconds"): "The maximum time in seconds for a "
    "deployment to make progress before it is considered to be failed. The deployment "
    "controller will continue to process failed deployments and a condition with a "
    "ProgressDeadlineExceeded reason will be surfaced in the deployment status. Note that "
    "progress will not be estimated during the time a deployment is paused. Defaults to 600s.",
    ("ReplicaSetSpec", "replicas"): "Replicas is the number of desired pods. This is a pointer "
    "to distinguish between explicit zero and unspecified. Defaults to 1.",
    ("PodSpec", "containers"): "List of containers belonging to the pod. Containers cannot "
    "currently be added or removed. There must be at least one container in a Pod. Cannot be "
    "updated.",
    ("PodSpec", "initContainers"): "List of initialization containers belonging to the pod. "
    "Init containers are executed in order prior to containers being started.",
    ("PodSpec", "volumes"): "List of volumes that can be mounted by containers belonging to "
    "the pod.",
    ("PodSpec", "nodeName"): "NodeName indicates in which node this pod is scheduled.",
    ("PodSpec", "nodeSelector"): "NodeSelector is a selector which must be true for the pod to "
    "fit on a node. Selector which must match a node's labels for the pod to be scheduled on "
    "that node.",
    ("PodSpec", "restartPolicy"): "Restart policy for all containers within the pod. One of "
    "Always, OnFailure, Never. Default to Always.",
    ("PodSpec", "terminationGracePeriodSeconds"): "Optional duration in seconds the pod needs "
    "to terminate gracefully. Defaults to 30 seconds.",
    ("Container", "name"): "Name of the container specified as a DNS_LABEL. Each container in a "
    "pod must have a unique name (DNS_LABEL). Cannot be updated.",
    ("Container", "image"): "Container image name. More info: "
    "https://kubernetes.io/docs/concepts/containers/images",
    ("Container", "command"): "Entrypoint array. Not executed within a shell. The container "
    "image's ENTRYPOINT is used if this is not provided.",
    ("Container", "args"): "Arguments to the entrypoint. The container image's CMD is used if "
    "this is not provided.",
    ("Container", "env"): "List of environment variables to set in the container. Cannot be "
    "updated.",
    ("Container", "ports"): "List of ports to expose from the container.",
    ("Container", "resources"): "Compute Resources required by this container. Cannot be "
    "updated.",
    ("Container", "readinessProbe"): "Periodic probe of container service readiness. Container "
    "will be removed from service endpoints if the probe fails.",
    ("Container", "livenessProbe"): "Periodic probe of container liveness. Container will be "
    "restarted if the probe fails.",
    ("ConfigMap", "data"): "Data contains the configuration data. Each key must consist of "
    "alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use "
    "the BinaryData field. The keys stored in Data must not overlap with the keys in the "
    "BinaryData field, this is enforced during validation process.",
    ("ConfigMap", "binaryData"): "BinaryData contains the binary data. Each key must consist of "
    "alphanumeric characters, '-', '_' or '.'. BinaryData can contain byte sequences that are "
    "not in the UTF-8 range. The keys stored in BinaryData must not overlap with the ones in the "
    "Data field, this is enforced during validation process.",
    ("ConfigMap", "immutable"): "Immutable, if set to true, ensures that data stored in the "
    "ConfigMap cannot be updated (only object metadata can be modified). If not set to true, "
    "the field can be modified at any time. Defaulted to nil.",
    ("Secret", "data"): "Data contains the secret data. Each key must consist of alphanumeric "
    "characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded "
    "string, representing the arbitrary (possibly non-string) data value here.",
    ("Secret", "stringData"): "stringData allows specifying non-binary secret data in string "
    "form. It is provided as a write-only input field for convenience. All keys and values are "
    "merged into the data field on write, overwriting any existing values.",
    ("Secret", "type"): "Used to facilitate programmatic handling of secret data.",
    ("LeaseSpec", "holderIdentity"): "holderIdentity contains the identity of the holder of a "
    "current lease.",
    ("LeaseSpec", "leaseDurationSeconds"): "leaseDurationSeconds is a duration that candidates "
    "for a lease need to wait to force acquire it. This is measured against the time of last "
    "observed renewTime.",
    ("LeaseSpec", "acquireTime"): "acquireTime is a time when the current lease was acquired.",
    ("LeaseSpec", "renewTime"): "renewTime is a time when the current holder of a lease has "
    "last updated the lease.",
    ("LeaseSpec", "leaseTransitions"): "leaseTransitions is the number of transitions of a "
    "lease between holders.",
    ("ObjectMeta", "name"): "Name must be unique within a namespace. Is required when creating "
    "resources, although some resources may allow a client to request the generation of an "
    "appropriate name automatically. Cannot be updated.",
    ("ObjectMeta", "namespace"): "Namespace defines the space within which each name must be "
    "unique. An empty namespace is equivalent to the \"default\" namespace.",
    ("ObjectMeta", "labels"): "Map of string keys and values that can be used to organize and "
    "categorize (scope and select) objects.",
    ("ObjectMeta", "annotations"): "Annotations is an unstructured key value map stored with a "
    "resource that may be set by external tools to store and retrieve arbitrary metadata.",
    ("ObjectMeta", "generateName"): "GenerateName is an optional prefix, used by the server, to "
    "generate a unique name ONLY IF the Name field has not been provided.",
    ("ObjectMeta", "uid"): "UID is the unique in time and space value for this object. It is "
    "typically generated by the server on successful creation of a resource and is not allowed "
    "to change on PUT operations.",
    ("ObjectMeta", "resourceVersion"): "An opaque value that represents the internal version of "
    "this object that can be used by clients to determine when objects have changed.",
    ("ObjectMeta", "creationTimestamp"): "CreationTimestamp is a timestamp representing the "
    "server time when this object was created. Populated by the system. Read-only.",
}

_REQUIRED = {
    "Container": ["name"], "EphemeralContainer": ["name"], "PodSpec": ["containers"],
    "DeploymentSpec": ["selector", "template"], "ReplicaSetSpec": ["selector"],
    "DaemonSetSpec": ["selector", "template"], "OwnerReference": ["apiVersion", "kind", "name",
                                                                  "uid"],
    "EnvVar": ["name"], "ContainerPort": ["containerPort"], "ServicePort": ["port"],
    "Volume": ["name"], "VolumeMount": ["name", "mountPath"], "PolicyRule": ["verbs"],
    "Subject": ["kind", "name"], "RoleRef": ["apiGroup", "kind", "name"],
    "Taint": ["key", "effect"], "HTTPGetAction": ["port"], "TCPSocketAction": ["port"],
    "RoleBinding": ["roleRef"], "ClusterRoleBinding": ["roleRef"], "Event": ["metadata",
                                                                             "involvedObject"],
}


def _described(schema, owner, field):
    desc = _FIELD_DESCRIPTIONS.get((owner, field)) or _FIELD_DESCRIPTIONS.get(("*", field))
    if desc is None:
        return schema
    if "$ref" in schema:
        return {"allOf": [schema], "description": desc}
    out = dict(schema)
    out["description"] = desc
    return out


class _OpenAPIBuilder:
    def __init__(self, prefix):
        self.prefix = prefix  # "io.k8s.api.apps.v1." for the kind-specific Spec/Status names
        self.components = {}

    def ref(self, name):
        return {"$ref": "#/components/schemas/" + name}

    def leaf(self, t):
        if t in _LEAF_REFS:
            name = _LEAF_REFS[t]
            self.components.setdefault(name, copy.deepcopy(_PRIMITIVE_COMPONENTS[name]))
            return self.ref(name)
        if t == MAP_QUANTITY:
            self.components.setdefault(_QUANTITY_REF,
                                       copy.deepcopy(_PRIMITIVE_COMPONENTS[_QUANTITY_REF]))
        return copy.deepcopy(_LEAF_SCHEMAS.get(t, _LEAF_SCHEMAS["string"]))

    def schema(self, tree, name=None):
        """The schema of a subtree; named subtrees become components and are referenced."""
        if isinstance(tree, str) or tree is None:
            return self.leaf(tree or "string")
        if isinstance(tree, list):
            item = self.schema(tree[0])
            if "$ref" in item:
                item = {"allOf": [item], "default": {}}
            return {"type": "array", "items": item}
        name = name or _NAMED.get(id(tree))
        if name is None:
            return self.object(tree, None)
        if name not in self.components:
            self.components[name] = {}  # placeholder: breaks reference cycles
            self.components[name] = self.object(tree, name.rsplit(".", 1)[-1])
        return self.ref(name)

    def object(self, tree, owner):
        props = {}
        for field in sorted(tree):
            sub = tree[field]
            sub_name = None
            if owner is not None and field in ("spec", "status") and isinstance(sub, dict) and \
                    id(sub) not in _NAMED and self.kind_owner == owner:
                sub_name = self.prefix + owner + field.capitalize()
            props[field] = _described(self.schema(sub, sub_name), owner or "", field)
        out = {"type": "object", "properties": props}
        req = _REQUIRED.get(owner or "")
        if req:
            out["required"] = [r for r in req if r in props]
        return out


def openapi_schemas(kind, schema_name):
    """(schema of the kind, {component name: schema}) for a built-in kind; schema_name is the
    kind's own component name (io.k8s.api.apps.v1.Deployment), whose package prefix also names
    the kind's Spec/Status components.  None for kinds without a field tree."""
    k = _kind_name(kind)
    if k is None:
        return None
    short = schema_name.rsplit(".", 1)[-1]
    b = _OpenAPIBuilder(schema_name[:-len(short)])
    b.kind_owner = short
    sch = b.object(_TREES[k], short)
    desc = _KIND_DESCRIPTIONS.get(k)
    if desc:
        sch = dict(sch, description=desc)
    return sch, b.components


def object_meta_components():
    """The ObjectMeta component and what it references (custom resource documents use it)."""
    b = _OpenAPIBuilder("")
    b.kind_owner = None
    b.schema(OBJECT_META)
    return b.components


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


def _default_event(obj):
    """Not defaulting as such: what Go's JSON encoder writes for a core/v1 Event whose fields are
    unset (non-pointer structs and metav1 times without omitempty effect)."""
    if obj.get("apiVersion") not in (None, "v1"):
        return
    obj.setdefault("involvedObject", {})
    obj.setdefault("source", {})
    for k in ("firstTimestamp", "lastTimestamp", "eventTime"):
        obj.setdefault(k, None)
    obj.setdefault("reportingComponent", "")
    obj.setdefault("reportingInstance", "")


_DEFAULTERS = {
    "Event": _default_event,
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

