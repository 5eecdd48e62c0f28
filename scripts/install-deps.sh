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
    libcmocka-dev
    clang clang-format clang-tidy cppcheck libclang-rt-14-dev
    python3 python3-zmq python3-msgpack python3-yaml python3-jinja2
    curl wrk jq procps iproute2 psmisc nodejs ucx-utils
)

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
