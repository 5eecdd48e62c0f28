#!/usr/bin/env bash
# 021-watch-too-old-rv: a watch from a resourceVersion older than the server keeps (RV 1 on a
# real cluster; on localkube after compaction) answers 200 + ERROR 410 Expired; GET/LIST with an
# exact old RV and resourceVersionMatch=Exact is 410 too; a malformed RV is rejected;
# resourceVersionMatch without resourceVersion is 422.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
if is_localkube; then
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t0"}}'
    fault '{"type":"expire"}'
    clear_faults
fi
watch_open old "$CM?watch=1&resourceVersion=1" 30
assert_eq "$(watch_status old)" 200 "too-old watch answers 200"
wait_for 15 "too-old watch stream to close" bash -c "! kill -0 ${BG_PID[w.old]} 2>/dev/null"
ev=$(watch_events old)
assert_jq '.type == "ERROR" and .object.code == 410 and .object.reason == "Expired" and .object.kind == "Status"' "ERROR 410 Expired for resourceVersion=1 (got: $(watch_summary old))" "$(printf '%s\n' "$ev" | head -1)"

api GET "$CM?resourceVersion=1&resourceVersionMatch=Exact"
expect_status_error 410 Expired

api GET "$CM?resourceVersion=abc&watch=1"
case "$STATUS" in 400 | 422) ;; *) fail "a malformed resourceVersion must be rejected with 400 or 422; $(last_response)" ;; esac
assert_jq '.kind == "Status" and .status == "Failure" and (.message | contains("abc"))' "malformed resourceVersion Status names the value"
api GET "$CM?resourceVersionMatch=Exact"
expect_code 422 "resourceVersionMatch without resourceVersion"
assert_jq '.kind == "Status" and .reason == "Invalid" and (.message | contains("resourceVersionMatch"))' "resourceVersionMatch without resourceVersion is Invalid"
