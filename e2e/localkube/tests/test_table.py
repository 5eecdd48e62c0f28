"""Tests for lk.table (meta.k8s.io/v1 Table responses)."""

import time
import unittest

from lk.table import human_duration, parse_time, to_table, translate_timestamp_since

NOW = 1_700_000_000.0


def ts(ago):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - ago))


def names(table):
    return [c["name"] for c in table["columnDefinitions"]]


def cells(table, i=0):
    return table["rows"][i]["cells"]


class DurationTest(unittest.TestCase):
    CASES = [
        (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (1, "1s"), (59, "59s"), (119, "119s"),
        (120, "2m"), (182, "3m2s"), (540, "9m"), (599, "9m59s"), (600, "10m"),
        (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (7 * 3600 + 59 * 60, "7h59m"),
        (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (2 * 86400 + 3 * 3600, "2d3h"),
        (8 * 86400, "8d"), (400 * 86400, "400d"), (2 * 365 * 86400, "2y"),
        (3 * 365 * 86400 + 5 * 86400, "3y5d"), (9 * 365 * 86400, "9y"),
    ]

    def test_human_duration(self):
        for secs, want in self.CASES:
            with self.subTest(secs=secs):
                self.assertEqual(human_duration(secs), want)

    def test_timestamps(self):
        self.assertEqual(translate_timestamp_since(ts(65), NOW), "65s")
        self.assertEqual(translate_timestamp_since(None, NOW), "<unknown>")
        self.assertEqual(translate_timestamp_since("garbage", NOW), "<unknown>")
        self.assertEqual(parse_time("2024-01-01T00:00:00Z"), 1704067200.0)
        self.assertEqual(parse_time("2024-01-01T01:00:00+01:00"), 1704067200.0)
        self.assertEqual(parse_time("2024-01-01T00:00:00.500000Z"), 1704067200.5)


def pod(name="p", phase="Running", statuses=None, init=None, init_statuses=None,
        deletion=None, conditions=None, node="localkube-node-1", ip="127.0.1.2", age=300):
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": "default", "creationTimestamp": ts(age),
                      "uid": "u", "resourceVersion": "7"},
         "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
         "status": {"phase": phase}}
    if node:
        p["spec"]["nodeName"] = node
    if ip:
        p["status"]["podIP"] = ip
    if statuses is not None:
        p["status"]["containerStatuses"] = statuses
    if init is not None:
        p["spec"]["initContainers"] = init
    if init_statuses is not None:
        p["status"]["initContainerStatuses"] = init_statuses
    if deletion:
        p["metadata"]["deletionTimestamp"] = deletion
    if conditions is not None:
        p["status"]["conditions"] = conditions
    return p


def running(name, ready=True, restarts=0, last=None):
    s = {"name": name, "ready": ready, "restartCount": restarts, "state": {"running": {}}}
    if last is not None:
        s["lastState"] = {"terminated": {"finishedAt": ts(last), "exitCode": 1}}
    return s


class PodTableTest(unittest.TestCase):
    INFO = {"kind": "Pod", "group": "", "version": "v1", "plural": "pods"}

    def row(self, p):
        return cells(to_table(self.INFO, [p], now=NOW))

    def test_columns(self):
        t = to_table(self.INFO, [pod()], now=NOW)
        self.assertEqual(t["kind"], "Table")
        self.assertEqual(t["apiVersion"], "meta.k8s.io/v1")
        self.assertEqual(names(t), ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node",
                                    "Nominated Node", "Readiness Gates"])
        self.assertEqual(t["columnDefinitions"][0]["format"], "name")
        self.assertEqual([c["priority"] for c in t["columnDefinitions"]],
                         [0, 0, 0, 0, 0, 1, 1, 1, 1])
        narrow = to_table(self.INFO, [pod()], now=NOW, wide=False)
        self.assertEqual(names(narrow), ["Name", "Ready", "Status", "Restarts", "Age"])
        self.assertEqual(len(cells(narrow)), 5)

    def test_status_cases(self):
        cases = [
            (pod(), ["p", "0/2", "Running", "0", "5m", "127.0.1.2", "localkube-node-1",
                     "<none>", "<none>"]),
            (pod(phase="Pending", node=None, ip=None),
             ["p", "0/2", "Pending", "0", "5m", "<none>", "<none>", "<none>", "<none>"]),
            (pod(statuses=[running("a"), running("b")]),
             ["p", "2/2", "Running", "0", "5m", "127.0.1.2", "localkube-node-1", "<none>",
              "<none>"]),
            (pod(statuses=[running("a", restarts=3, last=65),
                           {"name": "b", "restartCount": 1,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
             ["p", "1/2", "CrashLoopBackOff", "4 (65s ago)", "5m", "127.0.1.2",
              "localkube-node-1", "<none>", "<none>"]),
            (pod(statuses=[{"name": "a", "state": {"terminated": {"exitCode": 2}}},
                           running("b")]),
             ["p", "1/2", "ExitCode:2", "0", "5m", "127.0.1.2", "localkube-node-1", "<none>",
              "<none>"]),
            (pod(statuses=[{"name": "a", "state": {"terminated": {"exitCode": 0,
                                                                  "signal": 9}}}]),
             ["p", "0/2", "Signal:9", "0", "5m", "127.0.1.2", "localkube-node-1", "<none>",
              "<none>"]),
            (pod(phase="Succeeded",
                 statuses=[{"name": "a", "state": {"terminated": {"exitCode": 0,
                                                                  "reason": "Completed"}}}]),
             ["p", "0/2", "Completed", "0", "5m", "127.0.1.2", "localkube-node-1", "<none>",
              "<none>"]),
            (pod(deletion=ts(1), statuses=[running("a"), running("b")]),
             ["p", "2/2", "Terminating", "0", "5m", "127.0.1.2", "localkube-node-1", "<none>",
              "<none>"]),
            (pod(phase="Pending", init=[{"name": "i1"}, {"name": "i2"}],
                 init_statuses=[{"name": "i1", "state": {"terminated": {"exitCode": 0}}},
                                {"name": "i2", "state": {"running": {}}}]),
             ["p", "0/2", "Init:1/2", "0", "5m", "127.0.1.2", "localkube-node-1", "<none>",
              "<none>"]),
            (pod(phase="Pending", init=[{"name": "i1"}],
                 init_statuses=[{"name": "i1", "restartCount": 2,
                                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
             ["p", "0/2", "Init:CrashLoopBackOff", "2", "5m", "127.0.1.2", "localkube-node-1",
              "<none>", "<none>"]),
            (pod(phase="Pending", init=[{"name": "i1"}],
                 init_statuses=[{"name": "i1", "state": {"terminated": {"exitCode": 3}}}]),
             ["p", "0/2", "Init:ExitCode:3", "0", "5m", "127.0.1.2", "localkube-node-1",
              "<none>", "<none>"]),
            (pod(phase="Pending", node=None, ip=None,
                 conditions=[{"type": "PodScheduled", "status": "False",
                              "reason": "SchedulingGated"}]),
             ["p", "0/2", "SchedulingGated", "0", "5m", "<none>", "<none>", "<none>",
              "<none>"]),
        ]
        for p, want in cases:
            with self.subTest(want=want[2]):
                self.assertEqual(self.row(p), want)

    def test_sidecar_and_gates(self):
        p = pod(init=[{"name": "side", "restartPolicy": "Always"}],
                init_statuses=[{"name": "side", "started": True, "ready": True,
                                "state": {"running": {}}}],
                statuses=[running("a"), running("b")],
                conditions=[{"type": "Initialized", "status": "True"},
                            {"type": "x", "status": "True"}])
        p["spec"]["readinessGates"] = [{"conditionType": "x"}, {"conditionType": "y"}]
        c = self.row(p)
        self.assertEqual(c[1], "3/3")
        self.assertEqual(c[8], "1/2")

    def test_completed_condition(self):
        t = to_table(self.INFO, [pod(phase="Succeeded"), pod(phase="Failed"), pod()], now=NOW)
        self.assertEqual(t["rows"][0]["conditions"][0]["type"], "Completed")
        self.assertEqual(t["rows"][1]["conditions"][0]["message"], "The pod failed.")
        self.assertNotIn("conditions", t["rows"][2])

    def test_include_object(self):
        p = pod()
        meta = to_table(self.INFO, [p], now=NOW)["rows"][0]["object"]
        self.assertEqual(meta, {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                "metadata": p["metadata"]})
        self.assertEqual(to_table(self.INFO, [p], "Object", now=NOW)["rows"][0]["object"], p)
        self.assertNotIn("object", to_table(self.INFO, [p], "None", now=NOW)["rows"][0])
        with self.assertRaises(ValueError):
            to_table(self.INFO, [p], "Everything")

    def test_headers_and_metadata(self):
        t = to_table(self.INFO, [pod()], no_headers=True, now=NOW, resource_version=42,
                     continue_token="abc")
        self.assertEqual(t["columnDefinitions"], [])
        self.assertEqual(t["metadata"], {"resourceVersion": "42", "continue": "abc"})
        self.assertEqual(len(cells(t)), 9)
        empty = to_table(self.INFO, [], now=NOW)
        self.assertEqual(empty["rows"], [])
        self.assertEqual(len(empty["columnDefinitions"]), 9)


class WorkloadTablesTest(unittest.TestCase):
    TEMPLATE = {"spec": {"containers": [{"name": "a", "image": "img-a"},
                                        {"name": "b", "image": "img-b"}]}}

    def test_deployment(self):
        d = {"metadata": {"name": "web", "creationTimestamp": ts(7200)},
             "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                      "template": self.TEMPLATE},
             "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}
        t = to_table({"plural": "deployments"}, [d], now=NOW)
        self.assertEqual(names(t), ["Name", "Ready", "Up-to-date", "Available", "Age",
                                    "Containers", "Images", "Selector"])
        self.assertEqual(cells(t), ["web", "2/3", 3, 2, "120m", "a,b", "img-a,img-b",
                                    "app=web"])
        d2 = {"metadata": {"name": "x"}, "spec": {}, "status": {}}
        self.assertEqual(cells(to_table({"plural": "deployments"}, [d2], now=NOW))[1:5],
                         ["0/1", 0, 0, "<unknown>"])

    def test_replicaset_daemonset(self):
        rs = {"metadata": {"name": "web-abc", "creationTimestamp": ts(30)},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                       "template": self.TEMPLATE},
              "status": {"replicas": 2, "readyReplicas": 1}}
        self.assertEqual(cells(to_table({"plural": "replicasets"}, [rs], now=NOW)),
                         ["web-abc", 2, 2, 1, "30s", "a,b", "img-a,img-b", "a=b"])
        ds = {"metadata": {"name": "agent", "creationTimestamp": ts(30)},
              "spec": {"selector": {"matchLabels": {"a": "b"}},
                       "template": {"spec": {"nodeSelector": {"z": "1", "os": "linux"},
                                             "containers": []}}},
              "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                         "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2}}
        t = to_table({"plural": "daemonsets"}, [ds], now=NOW)
        self.assertEqual(names(t)[:8], ["Name", "Desired", "Current", "Ready", "Up-to-date",
                                        "Available", "Node Selector", "Age"])
        self.assertEqual(cells(t)[:8], ["agent", 3, 3, 2, 3, 2, "os=linux,z=1", "30s"])


class ServiceTablesTest(unittest.TestCase):
    def svc(self, **spec):
        return {"metadata": {"name": "s", "creationTimestamp": ts(10)}, "spec": spec}

    def test_services(self):
        info = {"plural": "services"}
        t = to_table(info, [self.svc(type="ClusterIP", clusterIP="10.96.0.10",
                                     ports=[{"port": 80, "protocol": "TCP"},
                                            {"port": 53, "protocol": "UDP"}],
                                     selector={"app": "dns"})], now=NOW)
        self.assertEqual(names(t), ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)",
                                    "Age", "Selector"])
        self.assertEqual(cells(t), ["s", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,53/UDP",
                                    "10s", "app=dns"])
        cases = [
            (self.svc(type="NodePort", clusterIP="10.0.0.1",
                      ports=[{"port": 80, "nodePort": 30080, "protocol": "TCP"}]),
             ["NodePort", "10.0.0.1", "<none>", "80:30080/TCP"]),
            (self.svc(type="LoadBalancer", clusterIP="10.0.0.2", ports=[]),
             ["LoadBalancer", "10.0.0.2", "<pending>", "<none>"]),
            (self.svc(type="ExternalName", externalName="example.com"),
             ["ExternalName", "<none>", "example.com", "<none>"]),
            (self.svc(clusterIP="None", externalIPs=["1.2.3.4"], ports=[{"port": 1}]),
             ["ClusterIP", "None", "1.2.3.4", "1/TCP"]),
        ]
        for obj, want in cases:
            with self.subTest(want=want):
                self.assertEqual(cells(to_table(info, [obj], now=NOW))[1:5], want)
        lb = self.svc(type="LoadBalancer", clusterIP="10.0.0.2")
        lb["status"] = {"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "h"}]}}
        self.assertEqual(cells(to_table(info, [lb], now=NOW))[3], "5.6.7.8,h")

    def test_endpoints(self):
        def ep(subsets):
            return {"metadata": {"name": "e", "creationTimestamp": ts(5)}, "subsets": subsets}

        info = {"plural": "endpoints"}
        cases = [
            (ep([]), "<none>"),
            (ep([{"addresses": [{"ip": "127.0.1.1"}, {"ip": "127.0.1.2"}],
                  "ports": [{"port": 8000}]}]), "127.0.1.1:8000,127.0.1.2:8000"),
            (ep([{"addresses": [{"ip": "127.0.1.%d" % i} for i in range(5)],
                  "ports": [{"port": 80}]}]),
             "127.0.1.0:80,127.0.1.1:80,127.0.1.2:80 + 2 more..."),
            (ep([{"addresses": [{"ip": "10.0.0.1"}]}]), "10.0.0.1"),
            (ep([{"addresses": [{"ip": "::1"}], "ports": [{"port": 80}]}]), "[::1]:80"),
        ]
        for obj, want in cases:
            with self.subTest(want=want):
                self.assertEqual(cells(to_table(info, [obj], now=NOW)), ["e", want, "5s"])


class SimpleTablesTest(unittest.TestCase):
    def test_config_and_secrets(self):
        cm = {"metadata": {"name": "c", "creationTimestamp": ts(3)},
              "data": {"a": "1", "b": "2"}, "binaryData": {"c": "eA=="}}
        t = to_table({"plural": "configmaps"}, [cm], now=NOW)
        self.assertEqual(names(t), ["Name", "Data", "Age"])
        self.assertEqual(cells(t), ["c", 3, "3s"])
        s = {"metadata": {"name": "s", "creationTimestamp": ts(3)}, "type": "Opaque",
             "data": {"a": "eA=="}}
        t = to_table({"plural": "secrets"}, [s], now=NOW)
        self.assertEqual(names(t), ["Name", "Type", "Data", "Age"])
        self.assertEqual(cells(t), ["s", "Opaque", 1, "3s"])

    def test_namespaces_nodes_leases(self):
        ns = {"metadata": {"name": "default", "creationTimestamp": ts(100000)},
              "status": {"phase": "Active"}}
        self.assertEqual(cells(to_table({"plural": "namespaces"}, [ns], now=NOW)),
                         ["default", "Active", "27h"])
        node = {"metadata": {"name": "localkube-node-1", "creationTimestamp": ts(60),
                             "labels": {"node-role.kubernetes.io/control-plane": "",
                                        "node-role.kubernetes.io/worker": ""}},
                "spec": {"unschedulable": True},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                           "nodeInfo": {"kubeletVersion": "v1.32.0-localkube",
                                        "osImage": "Debian"}}}
        t = to_table({"plural": "nodes"}, [node], now=NOW)
        self.assertEqual(names(t)[:5], ["Name", "Status", "Roles", "Age", "Version"])
        self.assertEqual(cells(t), ["localkube-node-1", "Ready,SchedulingDisabled",
                                    "control-plane,worker", "60s", "v1.32.0-localkube",
                                    "127.0.0.1", "<none>", "Debian", "<unknown>", "<unknown>"])
        node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
        node["metadata"]["labels"] = {}
        del node["spec"]["unschedulable"]
        self.assertEqual(cells(to_table({"plural": "nodes"}, [node], now=NOW))[1:3],
                         ["Unknown", "<none>"])
        lease = {"metadata": {"name": "l", "creationTimestamp": ts(1)},
                 "spec": {"holderIdentity": "op-1"}}
        self.assertEqual(cells(to_table({"plural": "leases"}, [lease], now=NOW)),
                         ["l", "op-1", "1s"])
        self.assertEqual(cells(to_table({"plural": "leases"}, [{"metadata": {"name": "m"}}],
                                        now=NOW)), ["m", "", "<unknown>"])

    def test_events_and_accounts(self):
        ev = {"metadata": {"name": "p.1"}, "type": "Warning", "reason": "BackOff",
              "message": "Back-off restarting", "count": 4, "firstTimestamp": ts(600),
              "lastTimestamp": ts(30), "involvedObject": {"kind": "Pod", "name": "p",
                                                          "fieldPath": "spec.containers{a}"},
              "source": {"component": "kubelet", "host": "n1"}}
        t = to_table({"plural": "events"}, [ev], now=NOW)
        self.assertEqual(names(t)[:5], ["Last Seen", "Type", "Reason", "Object", "Subobject"])
        self.assertEqual(cells(t), ["30s (x4 over 10m)", "Warning", "BackOff", "pod/p",
                                    "spec.containers{a}", "kubelet, n1", "Back-off restarting",
                                    "10m", 4, "p.1"])
        sa = {"metadata": {"name": "default", "creationTimestamp": ts(2)}, "secrets": []}
        self.assertEqual(cells(to_table({"plural": "serviceaccounts"}, [sa], now=NOW)),
                         ["default", 0, "2s"])

    def test_default_table(self):
        crd = {"metadata": {"name": "things.x.io", "creationTimestamp": "2024-05-06T07:08:09Z"}}
        for plural in ("customresourcedefinitions", "widgets", "roles"):
            with self.subTest(plural=plural):
                t = to_table({"plural": plural}, [crd], now=NOW)
                self.assertEqual(names(t), ["Name", "Created At"])
                self.assertEqual(t["columnDefinitions"][1]["type"], "date")
                self.assertEqual(cells(t), ["things.x.io", "2024-05-06T07:08:09Z"])


class CustomResourceTableTest(unittest.TestCase):
    COLS = [
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
        {"name": "Enabled", "type": "boolean", "jsonPath": ".spec.enabled"},
        {"name": "Ready", "type": "string",
         "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Count", "type": "string", "jsonPath": ".spec.replicas"},
        {"name": "Started", "type": "date", "jsonPath": ".status.startTime"},
        {"name": "Detail", "type": "string", "jsonPath": ".spec.detail", "priority": 1,
         "description": "custom description", "format": "byte"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    def info(self, cols):
        return {"kind": "Thing", "group": "x.io", "version": "v1", "plural": "things",
                "printerColumns": cols}

    def obj(self, **spec):
        return {"apiVersion": "x.io/v1", "kind": "Thing",
                "metadata": {"name": "t1", "creationTimestamp": ts(90)}, "spec": spec,
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "startTime": ts(3600 * 5)}}

    def test_columns_and_cells(self):
        t = to_table(self.info(self.COLS), [self.obj(replicas=3, ratio=1, enabled=True,
                                                     detail="d")], now=NOW)
        self.assertEqual(names(t), ["Name", "Replicas", "Ratio", "Enabled", "Ready", "Count",
                                    "Started", "Detail", "Age"])
        d = t["columnDefinitions"]
        self.assertEqual(d[1]["description"],
                         "Custom resource definition column (in JSONPath format): .spec.replicas")
        self.assertEqual(d[7], {"name": "Detail", "type": "string", "format": "byte",
                                "description": "custom description", "priority": 1})
        self.assertEqual(cells(t), ["t1", 3, 1.0, True, "True", "3", "5h", "d", "90s"])
        narrow = to_table(self.info(self.COLS), [self.obj(replicas=3)], now=NOW, wide=False)
        self.assertNotIn("Detail", names(narrow))

    def test_mismatched_types_are_omitted(self):
        t = to_table(self.info(self.COLS), [self.obj(replicas="three", ratio="x", enabled="yes",
                                                     detail={"a": 1})], now=NOW)
        c = cells(t)
        self.assertEqual(c[1:4], [None, None, None])
        self.assertEqual(c[5], "three")
        self.assertEqual(c[7], '{"a":1}')
        t = to_table(self.info(self.COLS), [self.obj()], now=NOW)
        self.assertEqual(cells(t)[1], None)  # missing value
        bad_date = self.obj()
        bad_date["status"]["startTime"] = "not a time"
        self.assertEqual(cells(to_table(self.info(self.COLS), [bad_date], now=NOW))[6],
                         "<invalid>")

    def test_float_integer(self):
        t = to_table(self.info(self.COLS[:1]), [self.obj(replicas=2.0)], now=NOW)
        self.assertEqual(cells(t), ["t1", 2])

    def test_default_age_column(self):
        t = to_table(self.info([]), [self.obj()], now=NOW)
        self.assertEqual(names(t), ["Name", "Age"])
        # a CRD version without additionalPrinterColumns (printerColumns None) too
        t2 = to_table(self.info(None), [self.obj()], now=NOW)
        self.assertEqual(t2, t)
        # but a built-in group with an unknown plural gets the default table
        self.assertEqual(names(to_table({"group": "apps", "plural": "statefulsets",
                                         "printerColumns": None}, [self.obj()], now=NOW)),
                         ["Name", "Created At"])
        self.assertEqual(t["columnDefinitions"][1]["type"], "date")
        self.assertEqual(cells(t), ["t1", "90s"])

    def test_bad_jsonpath_gives_empty_cell(self):
        t = to_table(self.info([{"name": "X", "type": "string", "jsonPath": ".a["}]),
                     [self.obj()], now=NOW)
        self.assertEqual(cells(t), ["t1", None])


if __name__ == "__main__":
    unittest.main()
