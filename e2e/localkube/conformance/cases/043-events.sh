#!/usr/bin/env bash
# 043-events: core/v1 Events can be created, listed by involvedObject field selectors and shown
# by `kubectl events --for` and `kubectl get events`; events.k8s.io/v1 serves the same objects.
. "$(dirname "$0")/../lib.sh"

kcm "$NS" subject
uid=$(kn get configmap subject -o jsonpath='{.metadata.uid}')
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ev() { # name reason type involved-name
    api POST "/api/v1/namespaces/$NS/events" '{"apiVersion":"v1","kind":"Event","metadata":{"name":"'"$1"'"},"involvedObject":{"apiVersion":"v1","kind":"ConfigMap","name":"'"$4"'","namespace":"'"$NS"'","uid":"'"$uid"'"},"reason":"'"$2"'","message":"conformance '"$2"'","type":"'"$3"'","source":{"component":"lkc"},"firstTimestamp":"'"$now"'","lastTimestamp":"'"$now"'","count":1}'
    expect_code 201 "create event $1"
}
ev e1 Tested Normal subject
ev e2 Broken Warning subject
ev e3 Other Normal someone-else

api GET "/api/v1/namespaces/$NS/events?fieldSelector=$(jq -rn '"involvedObject.kind=ConfigMap,involvedObject.name=subject"|@uri')"
expect_code 200 "events by involvedObject"
assert_eq "$(names_of "$BODY")" "e1 e2" "events for the subject"
api GET "/api/v1/namespaces/$NS/events?fieldSelector=type%3DWarning"
assert_eq "$(names_of "$BODY")" "e2" "events by type"
api GET "/api/v1/namespaces/$NS/events?fieldSelector=reason%3DOther"
assert_eq "$(names_of "$BODY")" "e3" "events by reason"
api GET "/api/v1/namespaces/$NS/events?fieldSelector=involvedObject.uid%3D$uid"
assert_eq "$(names_of "$BODY")" "e1 e2 e3" "events by involvedObject.uid"

kok "kubectl events --for" -n "$NS" events --for configmap/subject
assert_contains "$KOUT" "Tested" "kubectl events shows the Normal event"
assert_contains "$KOUT" "Broken" "kubectl events shows the Warning event"
assert_not_contains "$KOUT" "conformance Other" "kubectl events --for filters by object"
kok "kubectl events --types=Warning" -n "$NS" events --types=Warning
assert_contains "$KOUT" "Broken" "Warning events"
assert_not_contains "$KOUT" "Tested" "--types=Warning hides Normal"
kok "kubectl get events" -n "$NS" get events
assert_match "$KOUT" '^LAST SEEN +TYPE +REASON +OBJECT +MESSAGE' "events table header"
assert_match "$KOUT" 'Warning +Broken +configmap/subject +conformance Broken' "events table row"

api GET "/apis/events.k8s.io/v1/namespaces/$NS/events/e2"
expect_code 200 "events.k8s.io/v1 view of a core event"
assert_jq '.apiVersion == "events.k8s.io/v1" and .kind == "Event" and .reason == "Broken" and .type == "Warning" and .regarding.name == "subject" and .note == "conformance Broken"' "events.k8s.io/v1 field mapping"
