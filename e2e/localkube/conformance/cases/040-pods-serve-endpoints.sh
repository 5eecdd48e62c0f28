#!/usr/bin/env bash
# 040-pods-serve-endpoints: a Deployment of pods running `python3 -m http.server --bind
# $(POD_IP)`: each pod is scheduled to a node, gets its own IP (downward API POD_IP matches
# status.podIP), becomes Ready via its readiness probe and answers HTTP on its IP; the Service's
# Endpoints list exactly the ready pod IPs and follow a scale-up and a pod deletion.
. "$(dirname "$0")/../lib.sh"

http_server_deployment web 2 >"$CASE_DIR/d.yaml"
cat >>"$CASE_DIR/d.yaml" <<YAML
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - name: http
    port: 80
    targetPort: 8080
YAML
kok "apply" -n "$NS" apply -f "$CASE_DIR/d.yaml"
kok "rollout status" -n "$NS" rollout status deployment/web --timeout=120s

pods=$(kjson -n "$NS" get pods -l app=web)
assert_jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length == 2' "two pods" "$pods"
assert_jq 'all(.items[]; (.spec.nodeName | length) > 0)' "pods are scheduled (spec.nodeName)" "$pods"
assert_jq 'all(.items[]; .status.phase == "Running")' "pods Running" "$pods"
assert_jq 'all(.items[]; .status.conditions | map(select(.type == "Ready")) | .[0].status == "True")' "pods Ready condition" "$pods"
assert_jq 'all(.items[]; .status.containerStatuses[0].ready == true and .status.containerStatuses[0].name == "web")' "containerStatuses ready" "$pods"
assert_jq 'all(.items[]; (.status.podIP | length) > 0 and .status.podIPs[0].ip == .status.podIP)' "podIP and podIPs" "$pods"
assert_jq 'all(.items[]; (.status.hostIP | length) > 0 and (.status.startTime | length) > 0)' "hostIP and startTime" "$pods"
assert_jq '[.items[].status.podIP] | unique | length == 2' "distinct pod IPs" "$pods"
assert_jq 'all(.items[]; .metadata.ownerReferences[0].kind == "ReplicaSet")' "pods owned by the ReplicaSet" "$pods"
if is_localkube; then
    assert_jq 'all(.items[]; .status.podIP | test("^127\\.[0-9]+\\.[0-9]+\\.[0-9]+$")) and all(.items[]; .status.podIP != "127.0.0.1")' "localkube pod IPs are 127.x.y.z, not 127.0.0.1" "$pods"
fi

# each pod answers HTTP on its own IP (POD_IP came from the downward API)
for p in $(printf '%s' "$pods" | jq -r '.items[].metadata.name'); do
    ip=$(printf '%s' "$pods" | jq -r --arg p "$p" '.items[] | select(.metadata.name == $p) | .status.podIP')
    if is_localkube; then
        code=$(curl -sS -o "$CASE_DIR/page" -w '%{http_code}' --max-time 10 "http://$ip:8080/" || true)
    else
        # a real cluster's pod network is not reachable from here: go through the API server's pod proxy
        code=$(curl -sS -o "$CASE_DIR/page" -w '%{http_code}' --max-time 10 "$PROXY/api/v1/namespaces/$NS/pods/$p:8080/proxy/" || true)
    fi
    assert_eq "$code" 200 "HTTP GET / of pod $p ($ip)"
    assert_contains "$(cat "$CASE_DIR/page")" "Directory listing" "python http.server page from pod $p"
done

# Endpoints list the ready pod IPs
ep_ips() { kn get endpoints web -o json | jq -r '[.subsets[]?.addresses[]?.ip] | sort | join(" ")'; }
pod_ips() { kn get pods -l app=web -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | select(any(.status.conditions[]?; .type == "Ready" and .status == "True")) | .status.podIP] | sort | join(" ")'; }
wait_for 60 "Endpoints = ready pod IPs" out_is "$(pod_ips)" ep_ips
ep=$(kjson -n "$NS" get endpoints web)
assert_jq '.subsets[0].ports[0].port == 8080 and .subsets[0].ports[0].name == "http" and .subsets[0].ports[0].protocol == "TCP"' "Endpoints port follows targetPort" "$ep"
assert_jq 'all(.subsets[0].addresses[]; .targetRef.kind == "Pod" and (.targetRef.name | startswith("web-")))' "Endpoints targetRefs" "$ep"

kok "scale to 3" -n "$NS" scale deployment/web --replicas=3
kok "rollout status" -n "$NS" rollout status deployment/web --timeout=120s
three() { [ "$(ep_ips | wc -w)" = 3 ] && [ "$(ep_ips)" = "$(pod_ips)" ]; }
wait_for 60 "Endpoints with 3 addresses" three

victim=$(kn get pods -l app=web -o jsonpath='{.items[0].metadata.name}')
vip=$(kn get pod "$victim" -o jsonpath='{.status.podIP}')
kok "delete a pod" -n "$NS" delete pod "$victim" --wait=false
not_listed() { ! ep_ips | grep -qw "$vip"; }
wait_for 60 "deleted pod's IP leaves the Endpoints" not_listed
wait_for 120 "replacement pod ready, 3 endpoints" three
