#!/usr/bin/env bash
# Runs extproc_e2e.js (grpc-js playing Envoy) against the test server. Exit 77 (skipped) when node
# or the npm packages (scripts/install-deps.sh installs them here) are missing.
set -euo pipefail
server=$1
protos=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1; then
    echo "skipped: node is not installed" >&2
    exit 77
fi
if [ ! -d "$here/node_modules/@grpc/grpc-js" ] || [ ! -d "$here/node_modules/@grpc/proto-loader" ]; then
    echo "skipped: @grpc/grpc-js or @grpc/proto-loader missing (run scripts/install-deps.sh)" >&2
    exit 77
fi
exec node "$here/extproc_e2e.js" "$server" "$protos"
