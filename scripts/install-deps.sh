#!/usr/bin/env bash
# Installs the Debian packages Tandem builds, tests and runs with (docs/architecture.md plus the
# test tools). Idempotent: when everything is present it prints nothing and touches nothing.
# Runs apt-get through sudo when not root. kubectl and the CUDA toolkit are not installed here:
# kubectl 1.32 is expected on PATH for the e2e tests, and CUDA is optional at build time.
# Node.js runs the engine's reference tests (scripts/install-node-deps.sh installs their npm
# packages); a nodesource nodejs ships npm, Debian's needs the separate npm package.
set -euo pipefail

packages=(
    build-essential cmake pkg-config git
    libcurl4-openssl-dev libjson-c-dev libyaml-dev libssl-dev libuv1-dev
    libh2o-dev libzmq3-dev libmsgpack-dev libucx-dev libpcre2-dev libicu-dev
    libcmocka-dev libxxhash-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
    clang clang-format clang-tidy cppcheck libclang-rt-14-dev
    python3 python3-zmq python3-msgpack python3-yaml python3-jinja2
    curl wrk jq procps iproute2 psmisc nodejs ucx-utils
    podman buildah runc debootstrap prometheus
)

# The ext-proc e2e test's gRPC client (operator/epp/extproc/tests/package.json, pinned by its
# package-lock.json): @grpc/grpc-js and @grpc/proto-loader from the npm registry. A stamp holding
# the lockfile's hash skips the install when nothing changed.
install_extproc_node_deps() {
    local dir stamp want
    dir="$(cd "$(dirname "$0")/.." && pwd)/operator/epp/extproc/tests"
    stamp="$dir/node_modules/.tandem-lock-sha256"
    command -v npm >/dev/null 2>&1 || return 0
    want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    echo "install-deps: installing the ext-proc e2e test's node packages (npm ci)"
    (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$want" >"$stamp"
}

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
if ! command -v npm >/dev/null 2>&1; then
    missing+=(npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
    "$(dirname "$0")/install-node-deps.sh"
    install_extproc_node_deps
    exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo_cmd=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
"$(dirname "$0")/install-node-deps.sh"
install_extproc_node_deps
