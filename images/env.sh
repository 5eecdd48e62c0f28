#!/usr/bin/env bash
# Tandem's container environment: source this file (bash) before running podman or buildah on
# Tandem's images, so they use the project's settings and storage and nothing global changes:
#   . images/env.sh            then podman run --rm "$TANDEM_IMAGE_AGENT" --version
# Run as a program it prints the same variables as KEY=VALUE lines (for non-shell callers):
#   images/env.sh
#
# Variables it reads (all optional):
#   TANDEM_CONTAINERS_DIR   where the environment lives (default ${XDG_CACHE_HOME:-~/.cache}/
#                           tandem-containers): storage/ holds layers and images, kept between
#                           runs and between fresh clones, so a warm `make images` takes seconds
#
# Variables it exports:
#   CONTAINERS_CONF          the rendered images/containers.conf (runc, ulimits, locks: see there)
#   CONTAINERS_STORAGE_CONF  the rendered images/storage.conf (graphroot and runroot below)
#   BUILDAH_ISOLATION=chroot buildah's RUN steps need no user namespace or runtime on this host
#   TANDEM_CONTAINERS_DIR    as above, absolute
#   TANDEM_CONTAINERS_RUNDIR runtime state and locks ($TANDEM_CONTAINERS_DIR/run; wiped when the
#                            machine has rebooted since it was written)
#   TANDEM_VERSION           the project version, from project(tandem VERSION x.y.z) in the
#                            top-level CMakeLists.txt (the one version source)
#   TANDEM_IMAGE_TAG         the tag of every image: TANDEM_VERSION (each also gets :latest)
#   TANDEM_IMAGE_BASE        tandem-base:bookworm, the debootstrapped Debian base (no tag churn:
#                            scripts/images.sh rebuilds it when older than
#                            TANDEM_BASE_MAX_AGE_DAYS)
#   TANDEM_IMAGE_OPERATOR    tandem-operator:$TANDEM_IMAGE_TAG
#   TANDEM_IMAGE_EPP         tandem-epp:$TANDEM_IMAGE_TAG
#   TANDEM_IMAGE_AGENT       tandem-agent:$TANDEM_IMAGE_TAG
#   TANDEM_IMAGE_ENGINE      tandem-engine:$TANDEM_IMAGE_TAG
#   TANDEM_IMAGE_NAMES       "operator epp agent engine": the Containerfile targets; image
#                            tandem-<name>, binary /usr/local/bin/tandem-<name>
# (Not TANDEM_AGENT_IMAGE / TANDEM_EPP_IMAGE: those are the operator's own flag fallbacks.)

tandem_env__root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

tandem_env__version() {
    sed -n 's/^[[:space:]]*project([[:space:]]*tandem[[:space:]][^)]*VERSION[[:space:]]\{1,\}\([0-9][0-9.]*\).*/\1/p' \
        "$tandem_env__root/CMakeLists.txt" | head -n 1
}

tandem_env__render() { # template output: substitutes @RUNDIR@ @GRAPHROOT@ @RUNROOT@
    local tmp="$2.tmp.$$"
    sed -e "s|@RUNDIR@|$TANDEM_CONTAINERS_RUNDIR|g" \
        -e "s|@GRAPHROOT@|$TANDEM_CONTAINERS_DIR/storage|g" \
        -e "s|@RUNROOT@|$TANDEM_CONTAINERS_RUNDIR/storage|g" "$1" >"$tmp" &&
        if cmp -s "$tmp" "$2"; then rm -f "$tmp"; else mv -f "$tmp" "$2"; fi
}

tandem_env__setup() {
    local dir boot
    dir=${TANDEM_CONTAINERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem-containers}
    mkdir -p "$dir" || return 1
    TANDEM_CONTAINERS_DIR=$(cd "$dir" && pwd)
    TANDEM_CONTAINERS_RUNDIR=$TANDEM_CONTAINERS_DIR/run
    # The run directory is on disk, not a tmpfs: after a reboot its mount and lock state is
    # stale, so it starts over (images and layers in storage/ are kept).
    boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
    if [ -d "$TANDEM_CONTAINERS_RUNDIR" ] &&
        [ "$(cat "$TANDEM_CONTAINERS_RUNDIR/boot_id" 2>/dev/null)" != "$boot" ]; then
        rm -rf "$TANDEM_CONTAINERS_RUNDIR"
    fi
    mkdir -p "$TANDEM_CONTAINERS_RUNDIR/libpod" "$TANDEM_CONTAINERS_DIR/storage" || return 1
    [ -f "$TANDEM_CONTAINERS_RUNDIR/boot_id" ] || echo "$boot" >"$TANDEM_CONTAINERS_RUNDIR/boot_id"
    tandem_env__render "$tandem_env__root/images/containers.conf" \
        "$TANDEM_CONTAINERS_DIR/containers.conf" || return 1
    tandem_env__render "$tandem_env__root/images/storage.conf" \
        "$TANDEM_CONTAINERS_DIR/storage.conf" || return 1

    TANDEM_VERSION=$(tandem_env__version)
    if [ -z "$TANDEM_VERSION" ]; then
        echo "images/env.sh: no project(tandem VERSION x.y.z) in $tandem_env__root/CMakeLists.txt" >&2
        return 1
    fi
    export CONTAINERS_CONF=$TANDEM_CONTAINERS_DIR/containers.conf
    export CONTAINERS_STORAGE_CONF=$TANDEM_CONTAINERS_DIR/storage.conf
    export BUILDAH_ISOLATION=chroot
    export TANDEM_CONTAINERS_DIR TANDEM_CONTAINERS_RUNDIR TANDEM_VERSION
    export TANDEM_IMAGE_TAG=$TANDEM_VERSION
    export TANDEM_IMAGE_BASE=tandem-base:bookworm
    export TANDEM_IMAGE_OPERATOR=tandem-operator:$TANDEM_IMAGE_TAG
    export TANDEM_IMAGE_EPP=tandem-epp:$TANDEM_IMAGE_TAG
    export TANDEM_IMAGE_AGENT=tandem-agent:$TANDEM_IMAGE_TAG
    export TANDEM_IMAGE_ENGINE=tandem-engine:$TANDEM_IMAGE_TAG
    export TANDEM_IMAGE_NAMES="operator epp agent engine"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -eu
    tandem_env__setup
    for v in CONTAINERS_CONF CONTAINERS_STORAGE_CONF BUILDAH_ISOLATION TANDEM_CONTAINERS_DIR \
        TANDEM_CONTAINERS_RUNDIR TANDEM_VERSION TANDEM_IMAGE_TAG TANDEM_IMAGE_BASE \
        TANDEM_IMAGE_OPERATOR TANDEM_IMAGE_EPP TANDEM_IMAGE_AGENT TANDEM_IMAGE_ENGINE \
        TANDEM_IMAGE_NAMES; do
        printf '%s=%s\n' "$v" "${!v}"
    done
else
    tandem_env__setup
fi
