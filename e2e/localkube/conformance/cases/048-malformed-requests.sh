#!/usr/bin/env bash
# 048-malformed-requests: malformed JSON → 400 BadRequest Status; an unknown Content-Type on
# POST/PUT or an unknown patch type → 415 UnsupportedMediaType; a body over the 3 MiB request
# limit → 413 RequestEntityTooLarge; an unknown resource or group → 404; a method a path does not
# support → 405 MethodNotAllowed; every error is a proper Status object.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"'
expect_status_error 400 BadRequest
api POST "$CM" 'this is not json'
expect_status_error 400 BadRequest
api POST "$CM" '[1,2,3]'
expect_code 400 "a JSON array as an object"
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok"},"data":{"a":1}}'
expect_status_error 400 BadRequest
api GET "$CM/ok"
expect_code 404 "nothing stored from a bad body"

api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}' text/plain
expect_status_error 415 UnsupportedMediaType
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}' application/xml
expect_status_error 415 UnsupportedMediaType
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"good"}}'
expect_code 201 "create good"
api PATCH "$CM/good" '{"data":{"a":"b"}}' application/x-weird-patch
expect_status_error 415 UnsupportedMediaType
api PATCH "$CM/good" '{"data":{"a":"b"}}' application/json
expect_status_error 415 UnsupportedMediaType
api PATCH "$CM/good" 'not json' application/merge-patch+json
expect_status_error 400 BadRequest
api PATCH "$CM/good" '{"op":"add"}' application/json-patch+json
expect_status_error 400 BadRequest
api PUT "$CM/good" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"good"}}' text/plain
expect_status_error 415 UnsupportedMediaType

# 3.5 MiB: over kube-apiserver's 3 MiB request body limit
python3 -c '
import json, sys
json.dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge"},
           "data": {"blob": "x" * (3 * 1024 * 1024 + 512 * 1024)}}, open(sys.argv[1], "w"))' "$CASE_DIR/huge.json"
api POST "$CM" "@$CASE_DIR/huge.json"
expect_status_error 413 RequestEntityTooLarge
api GET "$CM/huge"
expect_code 404 "nothing stored from an oversized body"
# just under 1 MiB of data (the object size etcd allows) is fine
python3 -c '
import json, sys
json.dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
           "data": {"blob": "x" * (900 * 1024)}}, open(sys.argv[1], "w"))' "$CASE_DIR/big.json"
api POST "$CM" "@$CASE_DIR/big.json"
expect_code 201 "a 900 KiB ConfigMap"

# unknown paths and resources
api GET "/api/v1/namespaces/$NS/nosuchresources"
expect_status_error 404 NotFound
api GET /apis/no.such.group/v1/things
expect_code 404 "unknown group"
api GET /totally/unknown/path
expect_code 404 "unknown path"
# POST to a named object, DELETE of a whole discovery doc
api POST "$CM/good" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"good"}}'
expect_status_error 405 MethodNotAllowed
