"""Tests for lk.builtin_schemas (unknown-field detection and defaulting of built-in kinds)."""

import copy
import unittest

from lk.builtin_schemas import (RFC3339, RFC3339_MICRO, default_object, event_from_v1,
                                event_to_v1, go_parse_time, known_kinds, openapi_schemas,
                                time_error, unknown_fields)

META = {"name": "x", "namespace": "default", "labels": {"a": "b"},
        "annotations": {"k/v": "w"}, "uid": "u", "resourceVersion": "5", "generation": 2,
        "creationTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["f"],
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r",
                             "uid": "u2", "controller": True, "blockOwnerDeletion": True}],
        "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                           "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:data": {}}}]}

CONTAINER = {
    "name": "main", "image": "nginx:1.25", "command": ["/bin/sh"], "args": ["-c", "x"],
    "workingDir": "/", "imagePullPolicy": "IfNotPresent",
    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP", "hostPort": 0}],
    "env": [{"name": "A", "value": "1"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                         "optional": True}}},
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
            {"name": "R", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu",
                                                             "divisor": "1m"}}}],
    "envFrom": [{"configMapRef": {"name": "c"}, "prefix": "P_"}, {"secretRef": {"name": "s"}}],
    "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}, "requests": {"memory": "1Gi"}},
    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True, "subPath": "x"}],
    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP",
                                  "httpHeaders": [{"name": "X", "value": "y"}]},
                      "initialDelaySeconds": 1, "periodSeconds": 2, "timeoutSeconds": 1,
                      "successThreshold": 1, "failureThreshold": 3},
    "readinessProbe": {"tcpSocket": {"port": "http"}},
    "startupProbe": {"exec": {"command": ["true"]}, "failureThreshold": 30},
    "lifecycle": {"preStop": {"sleep": {"seconds": 5}},
                  "postStart": {"exec": {"command": ["x"]}}},
    "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "seccompProfile": {"type": "RuntimeDefault"}},
    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    "stdin": False, "tty": False,
}

POD_SPEC = {
    "containers": [CONTAINER],
    "initContainers": [{"name": "init", "image": "busybox", "restartPolicy": "Always"}],
    "volumes": [
        {"name": "data", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "cfg", "configMap": {"name": "c", "items": [{"key": "k", "path": "p"}],
                                      "defaultMode": 420}},
        {"name": "sec", "secret": {"secretName": "s", "optional": True}},
        {"name": "host", "hostPath": {"path": "/tmp", "type": "Directory"}},
        {"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}},
        {"name": "proj", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"downwardAPI": {"items": [{"path": "labels",
                                        "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}},
        {"name": "csi", "csi": {"driver": "x", "anything": {"goes": 1}}},
    ],
    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
    "nodeSelector": {"kubernetes.io/os": "linux"}, "serviceAccountName": "sa",
    "nodeName": "n", "hostNetwork": False, "schedulerName": "default-scheduler",
    "securityContext": {"fsGroup": 2000, "sysctls": [{"name": "a", "value": "b"}]},
    "imagePullSecrets": [{"name": "reg"}],
    "affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "k", "operator": "In", "values": ["v"]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "x"}},
                "topologyKey": "kubernetes.io/hostname"}}]}},
    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
    "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["a"]}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                   "whenUnsatisfiable": "DoNotSchedule",
                                   "labelSelector": {"matchLabels": {"a": "b"}}}],
    "priorityClassName": "high", "readinessGates": [{"conditionType": "x"}],
    "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
}

VALID = {
    "Pod": {"apiVersion": "v1", "kind": "Pod", "metadata": META, "spec": POD_SPEC,
            "status": {"phase": "Running", "podIP": "127.0.1.1", "podIPs": [{"ip": "127.0.1.1"}],
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastTransitionTime": "x"}],
                       "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                              "state": {"running": {
                                                  "startedAt": "2024-01-01T00:00:00Z"}}}],
                       "resourceClaimStatuses": [{"name": "c", "anything": 1}]}},
    "Deployment": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": META, "spec": {
        "replicas": 2, "selector": {"matchLabels": {"a": "b"},
                                    "matchExpressions": [{"key": "k", "operator": "Exists"}]},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": POD_SPEC},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1,
                                                                "maxUnavailable": "25%"}},
        "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600, "minReadySeconds": 0,
        "paused": False},
        "status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                   "updatedReplicas": 2, "observedGeneration": 1,
                   "conditions": [{"type": "Available", "status": "True", "reason": "x",
                                   "message": "y", "lastUpdateTime": "t",
                                   "lastTransitionTime": "t"}]}},
    "ReplicaSet": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": META,
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                            "template": {"metadata": {}, "spec": POD_SPEC}},
                   "status": {"replicas": 1, "fullyLabeledReplicas": 1}},
    "DaemonSet": {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": META,
                  "spec": {"selector": {"matchLabels": {"a": "b"}},
                           "template": {"spec": POD_SPEC},
                           "updateStrategy": {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 1}}},
                  "status": {"numberReady": 1, "desiredNumberScheduled": 1}},
    "Service": {"apiVersion": "v1", "kind": "Service", "metadata": META, "spec": {
        "type": "ClusterIP", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
        "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP",
                   "appProtocol": "http"}],
        "selector": {"app": "x"}, "sessionAffinity": "None", "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}},
    "Endpoints": {"apiVersion": "v1", "kind": "Endpoints", "metadata": META, "subsets": [{
        "addresses": [{"ip": "127.0.1.1", "nodeName": "n",
                       "targetRef": {"kind": "Pod", "name": "p", "namespace": "d", "uid": "u"}}],
        "notReadyAddresses": [{"ip": "127.0.1.2"}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]},
    "ConfigMap": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": META,
                  "data": {"a": "b"}, "binaryData": {"c": "ZA=="}, "immutable": False},
    "Secret": {"apiVersion": "v1", "kind": "Secret", "metadata": META, "type": "Opaque",
               "data": {"a": "Yg=="}, "stringData": {"b": "c"}},
    "ServiceAccount": {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": META,
                       "secrets": [{"name": "s"}], "imagePullSecrets": [{"name": "r"}],
                       "automountServiceAccountToken": True},
    "Event": {"apiVersion": "v1", "kind": "Event", "metadata": META,
              "involvedObject": {"kind": "Pod", "name": "p", "namespace": "d", "uid": "u",
                                 "apiVersion": "v1", "fieldPath": "spec.containers{main}"},
              "reason": "Started", "message": "m", "source": {"component": "kubelet",
                                                              "host": "n"},
              "firstTimestamp": "t", "lastTimestamp": "t", "count": 1, "type": "Normal",
              "reportingComponent": "kubelet", "reportingInstance": "n"},
    "events.k8s.io/Event": {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": META,
                            "regarding": {"kind": "Pod", "name": "p", "namespace": "d"},
                            "note": "m", "reason": "Started", "type": "Normal",
                            "action": "Start", "eventTime": "2024-01-01T00:00:00.000000Z",
                            "reportingController": "kubelet", "reportingInstance": "n",
                            "series": {"count": 2,
                                       "lastObservedTime": "2024-01-01T00:00:01.000000Z"},
                            "deprecatedSource": {}, "deprecatedFirstTimestamp": None,
                            "deprecatedLastTimestamp": None, "deprecatedCount": 1},
    "Node": {"apiVersion": "v1", "kind": "Node", "metadata": META,
             "spec": {"podCIDR": "10.0.0.0/24", "unschedulable": False,
                      "taints": [{"key": "k", "effect": "NoSchedule"}]},
             "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"},
                        "conditions": [{"type": "Ready", "status": "True",
                                        "lastHeartbeatTime": "t"}],
                        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                        "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian"},
                        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}},
    "Namespace": {"apiVersion": "v1", "kind": "Namespace", "metadata": META,
                  "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}},
    "Lease": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": META,
              "spec": {"holderIdentity": "h", "leaseDurationSeconds": 15,
                       "acquireTime": "t", "renewTime": "t", "leaseTransitions": 1}},
    "Role": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": META,
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    "ClusterRole": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": META, "rules": [{"nonResourceURLs": ["/x"], "verbs": ["get"]}],
                    "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}},
    "RoleBinding": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": META, "subjects": [{"kind": "ServiceAccount", "name": "s",
                                                    "namespace": "d"}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                "name": "r"}},
    "ClusterRoleBinding": {"apiVersion": "rbac.authorization.k8s.io/v1",
                           "kind": "ClusterRoleBinding", "metadata": META,
                           "subjects": [{"kind": "User", "name": "u"}],
                           "roleRef": {"kind": "ClusterRole", "name": "r", "apiGroup": "x"}},
    "HorizontalPodAutoscaler": {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": META,
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                 "minReplicas": 1, "maxReplicas": 3,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu"}}]},
        "status": {"anything": 1}},
    "CustomResourceDefinition": {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": META,
        "spec": {"group": "x.io", "scope": "Namespaced",
                 "names": {"plural": "things", "singular": "thing", "kind": "Thing",
                           "listKind": "ThingList", "shortNames": ["th"], "categories": ["all"]},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "x": 1}},
                               "subresources": {"status": {},
                                                "scale": {"specReplicasPath": ".spec.r",
                                                          "statusReplicasPath": ".status.r"}},
                               "additionalPrinterColumns": [{"name": "R", "type": "integer",
                                                             "jsonPath": ".spec.r"}],
                               "selectableFields": [{"jsonPath": ".spec.color"}]}],
                 "conversion": {"strategy": "None"}},
        "status": {"acceptedNames": {}, "storedVersions": ["v1"]}},
}


class UnknownFieldsTest(unittest.TestCase):
    def test_valid_objects_have_no_unknown_fields(self):
        self.assertEqual(set(VALID), known_kinds() - {"PodTemplate"})
        for kind, obj in VALID.items():
            with self.subTest(kind=kind):
                self.assertEqual(unknown_fields(kind, obj), [])

    CASES = [
        ("Deployment", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(imagee=1),
         ["spec.template.spec.containers[0].imagee"]),
        ("deployments", lambda o: o["spec"].update(replica=1), ["spec.replica"]),
        ("Pod", lambda o: o["spec"]["containers"][0]["ports"][0].update(port=1),
         ["spec.containers[0].ports[0].port"]),
        ("Pod", lambda o: o["spec"]["containers"][0]["livenessProbe"].update(httpget={}),
         ["spec.containers[0].livenessProbe.httpget"]),
        ("Pod", lambda o: o["spec"]["containers"][0]["securityContext"].update(runAsRoot=True),
         ["spec.containers[0].securityContext.runAsRoot"]),
        ("Pod", lambda o: o["spec"]["volumes"][1]["configMap"].update(nam="x"),
         ["spec.volumes[1].configMap.nam"]),
        ("Pod", lambda o: o["spec"]["containers"][0]["env"][1]["valueFrom"]["fieldRef"].update(
            path=1), ["spec.containers[0].env[1].valueFrom.fieldRef.path"]),
        ("Service", lambda o: o["spec"]["ports"][0].update(targetport=1),
         ["spec.ports[0].targetport"]),
        ("Service", lambda o: o.update(specs={}), ["specs"]),
        ("ConfigMap", lambda o: o["metadata"].update(label={}), ["metadata.label"]),
        ("Namespace", lambda o: o["spec"].update(x=1), ["spec.x"]),
        ("Lease", lambda o: o["spec"].update(holder="h"), ["spec.holder"]),
        ("Node", lambda o: o["status"]["nodeInfo"].update(foo=1), ["status.nodeInfo.foo"]),
        ("Endpoints", lambda o: o["subsets"][0]["addresses"][0].update(port=1),
         ["subsets[0].addresses[0].port"]),
        ("Role", lambda o: o["rules"][0].update(verb=["x"]), ["rules[0].verb"]),
        ("CustomResourceDefinition",
         lambda o: o["spec"]["versions"][0].update(servedd=True),
         ["spec.versions[0].servedd"]),
        ("Deployment", lambda o: (o["spec"].update(a=1), o["spec"].update(b=2)),
         ["spec.a", "spec.b"]),
        # open subtrees never report
        ("Pod", lambda o: o["spec"]["volumes"][6]["csi"].update(whatever=1), []),
        ("Pod", lambda o: o["status"]["resourceClaimStatuses"][0].update(whatever=1), []),
        # container statuses are modelled (kubelet writes only known fields)
        ("Pod", lambda o: o["status"]["containerStatuses"][0].update(whatever=1),
         ["status.containerStatuses[0].whatever"]),
        ("Pod", lambda o: o["metadata"]["labels"].update(anything="x"), []),
        ("CustomResourceDefinition",
         lambda o: o["spec"]["versions"][0]["schema"]["openAPIV3Schema"].update(y=1), []),
    ]

    def test_cases(self):
        for kind, mutate, want in self.CASES:
            with self.subTest(kind=kind, want=want):
                o = copy.deepcopy(VALID[{"deployments": "Deployment"}.get(kind, kind)])
                mutate(o)
                self.assertEqual(unknown_fields(kind, o), want)

    def test_unmodelled_kind_and_odd_values(self):
        self.assertEqual(unknown_fields("Widget", {"x": 1}), [])
        self.assertEqual(unknown_fields("Pod", "nope"), [])
        # wrong types are not unknown fields (validation reports them)
        self.assertEqual(unknown_fields("Pod", {"spec": {"containers": "x"}}), [])


class DefaultTest(unittest.TestCase):
    def test_deployment(self):
        d = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
             "spec": {"selector": {"matchLabels": {"a": "b"}},
                      "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
                          "containers": [{"name": "c", "image": "nginx",
                                          "ports": [{"containerPort": 80}],
                                          "readinessProbe": {"httpGet": {"port": 80}}}]}}}}
        before = copy.deepcopy(d)
        out = default_object("Deployment", d)
        self.assertEqual(d, before, "input mutated")
        spec = out["spec"]
        self.assertEqual(spec["replicas"], 1)
        self.assertEqual(spec["strategy"], {"type": "RollingUpdate", "rollingUpdate": {
            "maxUnavailable": "25%", "maxSurge": "25%"}})
        self.assertEqual(spec["revisionHistoryLimit"], 10)
        self.assertEqual(spec["progressDeadlineSeconds"], 600)
        ps = spec["template"]["spec"]
        self.assertEqual(ps["restartPolicy"], "Always")
        self.assertEqual(ps["dnsPolicy"], "ClusterFirst")
        self.assertEqual(ps["terminationGracePeriodSeconds"], 30)
        self.assertEqual(ps["schedulerName"], "default-scheduler")
        self.assertEqual(ps["securityContext"], {})
        self.assertNotIn("serviceAccountName", ps)  # admission only touches Pods
        c = ps["containers"][0]
        self.assertEqual(c["terminationMessagePath"], "/dev/termination-log")
        self.assertEqual(c["terminationMessagePolicy"], "File")
        self.assertEqual(c["imagePullPolicy"], "Always")
        self.assertEqual(c["ports"], [{"containerPort": 80, "protocol": "TCP"}])
        self.assertEqual(c["readinessProbe"], {
            "httpGet": {"port": 80, "scheme": "HTTP", "path": "/"}, "timeoutSeconds": 1,
            "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        # explicit values win; Recreate gets no rollingUpdate
        d["spec"]["replicas"] = 0
        d["spec"]["strategy"] = {"type": "Recreate"}
        out = default_object("deployments", d)
        self.assertEqual(out["spec"]["replicas"], 0)
        self.assertEqual(out["spec"]["strategy"], {"type": "Recreate"})

    def test_image_pull_policy(self):
        cases = [("nginx", "Always"), ("nginx:latest", "Always"), ("nginx:1.25", "IfNotPresent"),
                 ("registry:5000/app", "Always"), ("registry:5000/app:v1", "IfNotPresent"),
                 ("app@sha256:abc", "IfNotPresent"), ("localhost:5000/x:latest", "Always")]
        for image, want in cases:
            with self.subTest(image=image):
                out = default_object("Pod", {"spec": {"containers": [{"name": "c",
                                                                       "image": image}]}})
                self.assertEqual(out["spec"]["containers"][0]["imagePullPolicy"], want)
        out = default_object("Pod", {"spec": {"containers": [
            {"name": "c", "image": "x", "imagePullPolicy": "Never"}]}})
        self.assertEqual(out["spec"]["containers"][0]["imagePullPolicy"], "Never")

    def test_pod_admission_effects(self):
        out = default_object("Pod", {"metadata": {"name": "p"},
                                     "spec": {"containers": [{"name": "c", "image": "x:1"}]}})
        spec = out["spec"]
        self.assertEqual(spec["serviceAccountName"], "default")
        self.assertEqual(spec["serviceAccount"], "default")
        self.assertEqual(spec["priority"], 0)
        self.assertEqual(spec["enableServiceLinks"], True)
        self.assertEqual([t["key"] for t in spec["tolerations"]],
                         ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"])
        self.assertEqual(out["status"], {"phase": "Pending", "qosClass": "BestEffort"})
        g = default_object("Pod", {"spec": {"containers": [{
            "name": "c", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}})
        self.assertEqual(g["status"]["qosClass"], "Guaranteed")
        b = default_object("Pod", {"spec": {"containers": [{
            "name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}})
        self.assertEqual(b["status"]["qosClass"], "Burstable")

    def test_volumes(self):
        out = default_object("Pod", {"spec": {"containers": [], "volumes": [
            {"name": "a"}, {"name": "b", "configMap": {"name": "c"}},
            {"name": "c", "secret": {"secretName": "s", "defaultMode": 256}},
            {"name": "d", "hostPath": {"path": "/x"}}]}})
        v = out["spec"]["volumes"]
        self.assertEqual(v[0], {"name": "a", "emptyDir": {}})
        self.assertEqual(v[1]["configMap"]["defaultMode"], 420)
        self.assertEqual(v[2]["secret"]["defaultMode"], 256)
        self.assertEqual(v[3]["hostPath"]["type"], "")

    def test_service(self):
        out = default_object("Service", {"spec": {"ports": [{"port": 80},
                                                            {"port": 81, "targetPort": "web",
                                                             "protocol": "UDP"}]}})
        s = out["spec"]
        self.assertEqual(s["type"], "ClusterIP")
        self.assertEqual(s["sessionAffinity"], "None")
        self.assertEqual(s["ports"], [{"port": 80, "protocol": "TCP", "targetPort": 80},
                                      {"port": 81, "targetPort": "web", "protocol": "UDP"}])
        self.assertEqual(s["internalTrafficPolicy"], "Cluster")
        self.assertNotIn("externalTrafficPolicy", s)
        lb = default_object("Service", {"spec": {"type": "LoadBalancer", "ports": []}})["spec"]
        self.assertEqual(lb["externalTrafficPolicy"], "Cluster")
        self.assertTrue(lb["allocateLoadBalancerNodePorts"])
        en = default_object("Service", {"spec": {"type": "ExternalName",
                                                 "externalName": "x"}})["spec"]
        self.assertNotIn("ipFamilies", en)

    def test_other_kinds(self):
        self.assertEqual(default_object("Secret", {"data": {}})["type"], "Opaque")
        self.assertEqual(default_object("Secret", {"type": "kubernetes.io/tls"})["type"],
                         "kubernetes.io/tls")
        ns = default_object("Namespace", {"metadata": {"name": "n"}})
        self.assertEqual(ns["spec"], {"finalizers": ["kubernetes"]})
        self.assertEqual(ns["status"], {"phase": "Active"})
        self.assertEqual(default_object("ReplicaSet", {"spec": {}})["spec"]["replicas"], 1)
        ds = default_object("DaemonSet", {"spec": {"template": {"spec": {"containers": []}}}})
        self.assertEqual(ds["spec"]["updateStrategy"], {
            "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        self.assertEqual(ds["spec"]["template"]["spec"]["restartPolicy"], "Always")
        ep = default_object("Endpoints", {"subsets": [{"ports": [{"port": 1}]}]})
        self.assertEqual(ep["subsets"][0]["ports"][0]["protocol"], "TCP")
        crd = default_object("CustomResourceDefinition",
                             {"spec": {"names": {"kind": "Thing", "plural": "things"}}})
        self.assertEqual(crd["spec"]["names"]["listKind"], "ThingList")
        self.assertEqual(crd["spec"]["names"]["singular"], "thing")
        self.assertEqual(crd["spec"]["conversion"], {"strategy": "None"})
        rb = default_object("RoleBinding", {"subjects": [{"kind": "User", "name": "u"}]})
        self.assertEqual(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io")
        self.assertEqual(default_object("ConfigMap", {"data": {"a": "b"}}), {"data": {"a": "b"}})
        self.assertEqual(default_object("Widget", {"x": 1}), {"x": 1})

    def test_idempotent(self):
        for kind, obj in VALID.items():
            with self.subTest(kind=kind):
                once = default_object(kind, obj)
                self.assertEqual(default_object(kind, once), once)



class TimeFieldsTest(unittest.TestCase):
    """metav1.Time / MicroTime decoding: Go's time.Parse error texts."""

    def test_go_parse_time(self):
        ok = ["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123Z", "2024-01-02T03:04:05+02:00",
              "2024-02-29T00:00:00Z"]
        for v in ok:
            self.assertIsNone(go_parse_time(v, RFC3339), v)
        self.assertIsNone(go_parse_time("2024-01-02T03:04:05.123456Z", RFC3339_MICRO))
        cases = [
            ("not-a-time", RFC3339_MICRO, 'parsing time "not-a-time" as '
             '"2006-01-02T15:04:05.000000Z07:00": cannot parse "not-a-time" as "2006"'),
            ("not-a-time", RFC3339, 'parsing time "not-a-time" as "2006-01-02T15:04:05Z07:00": '
             'cannot parse "not-a-time" as "2006"'),
            ("", RFC3339, 'parsing time "" as "2006-01-02T15:04:05Z07:00": cannot parse "" as '
             '"2006"'),
            ("2024-01-02 03:04:05Z", RFC3339, 'parsing time "2024-01-02 03:04:05Z" as '
             '"2006-01-02T15:04:05Z07:00": cannot parse " 03:04:05Z" as "T"'),
            ("2024-01-02T03:04:05Z", RFC3339_MICRO, 'parsing time "2024-01-02T03:04:05Z" as '
             '"2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"'),
            ("2024-13-02T03:04:05Z", RFC3339, 'parsing time "2024-13-02T03:04:05Z": month out '
             'of range'),
            ("2023-02-29T03:04:05Z", RFC3339, 'parsing time "2023-02-29T03:04:05Z": day out of '
             'range'),
            ("2024-01-02T03:04:05Zjunk", RFC3339, 'parsing time "2024-01-02T03:04:05Zjunk": '
             'extra text: "junk"'),
            ("2024-01-02T03:04:05", RFC3339, 'parsing time "2024-01-02T03:04:05" as '
             '"2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"'),
        ]
        for v, layout, want in cases:
            self.assertEqual(go_parse_time(v, layout), want, v)

    def test_time_error_walks_typed_fields(self):
        lease = {"spec": {"renewTime": "2024-01-02T03:04:05.000001Z", "acquireTime": None}}
        self.assertIsNone(time_error("Lease", lease))
        lease["spec"]["renewTime"] = "not-a-time"
        self.assertIn('cannot parse "not-a-time" as "2006"', time_error("leases", lease))
        pod = copy.deepcopy(VALID["Pod"])
        pod["status"]["conditions"][0]["lastTransitionTime"] = "2024-01-01T00:00:00Z"
        self.assertIsNone(time_error("Pod", pod))
        pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = "soon"
        self.assertIn('"soon"', time_error("Pod", pod))
        ev = {"firstTimestamp": 5}
        self.assertEqual(time_error("Event", ev),
                         "json: cannot unmarshal number into Go value of type string")
        self.assertIsNone(time_error("Widget", {"spec": {"renewTime": "x"}}))


class EventConversionTest(unittest.TestCase):
    def test_round_trip(self):
        core = copy.deepcopy(VALID["Event"])
        core["eventTime"] = None
        v1 = event_to_v1(core)
        self.assertEqual(v1["apiVersion"], "events.k8s.io/v1")
        self.assertEqual(v1["regarding"], core["involvedObject"])
        self.assertEqual((v1["note"], v1["reason"], v1["type"]), ("m", "Started", "Normal"))
        self.assertEqual(v1["deprecatedSource"], {"component": "kubelet", "host": "n"})
        self.assertEqual((v1["deprecatedFirstTimestamp"], v1["deprecatedCount"]), ("t", 1))
        self.assertEqual(v1["reportingController"], "kubelet")
        self.assertIsNone(v1["eventTime"])
        self.assertEqual(unknown_fields("events.k8s.io/Event", v1), [])
        back = event_from_v1(v1)
        for k in ("involvedObject", "reason", "message", "source", "firstTimestamp",
                  "lastTimestamp", "count", "type", "reportingComponent", "reportingInstance"):
            self.assertEqual(back[k], core[k], k)

    def test_new_style_event(self):
        v1 = VALID["events.k8s.io/Event"]
        core = event_from_v1(v1)
        self.assertEqual(core["message"], "m")
        self.assertEqual(core["series"], v1["series"])
        self.assertEqual(core["source"], {})
        self.assertEqual(core["reportingComponent"], "kubelet")
        self.assertEqual(unknown_fields("Event", core), [])


class OpenAPITest(unittest.TestCase):
    def test_deployment_schema(self):
        sch, comps = openapi_schemas("Deployment", "io.k8s.api.apps.v1.Deployment")
        self.assertIn("Deployment enables", sch["description"])
        spec_ref = sch["properties"]["spec"]["allOf"][0]["$ref"]
        self.assertEqual(spec_ref, "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec")
        spec = comps["io.k8s.api.apps.v1.DeploymentSpec"]
        self.assertEqual(spec["properties"]["replicas"]["type"], "integer")
        self.assertIn("Number of desired pods", spec["properties"]["replicas"]["description"])
        self.assertEqual(spec["required"], ["selector", "template"])
        podspec = comps["io.k8s.api.core.v1.PodSpec"]
        items = podspec["properties"]["containers"]["items"]
        self.assertEqual(items["allOf"][0]["$ref"], "#/components/schemas/io.k8s.api.core.v1."
                         "Container")
        container = comps["io.k8s.api.core.v1.Container"]
        self.assertEqual(container["properties"]["command"]["items"]["type"], "string")
        self.assertIn("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", comps)

    def test_configmap_and_lease_types(self):
        sch, comps = openapi_schemas("ConfigMap", "io.k8s.api.core.v1.ConfigMap")
        p = sch["properties"]
        self.assertEqual(p["data"]["additionalProperties"]["type"], "string")
        self.assertEqual(p["binaryData"]["additionalProperties"]["format"], "byte")
        self.assertEqual(p["immutable"]["type"], "boolean")
        _, comps = openapi_schemas("Lease", "io.k8s.api.coordination.v1.Lease")
        spec = comps["io.k8s.api.coordination.v1.LeaseSpec"]
        self.assertEqual(spec["properties"]["renewTime"]["allOf"][0]["$ref"],
                         "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime")
        self.assertEqual(comps["io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"]["format"],
                         "date-time")
        self.assertIsNone(openapi_schemas("Widget", "x.Widget"))


if __name__ == "__main__":
    unittest.main()
