#!/usr/bin/env bash
# e2e: Tandem's container images (docs/images.md). Runs scripts/images.sh BUILD_DIR (a cold build
# debootstraps the base and compiles; a warm one reuses every layer), then for each of
# tandem-operator, tandem-epp, tandem-agent and tandem-engine:
#   * `IMAGE --version` (through the ENTRYPOINT, as the operator's args-only pods run it) prints
#     "tandem-<name> VERSION";
#   * the container's user is not root (uid and gid 65532), the entrypoint is
#     /usr/local/bin/tandem-<name>, the OCI labels carry title, version, revision and created;
#   * `ldd` on the binary inside the image finds every library;
#   * BUILD_DIR/images/tandem-<name>-VERSION.tar is an OCI archive (oci-layout, index.json naming
#     the image docker.io/library/tandem-<name>:VERSION, as containerd resolves the manifests'
#     short names) that `podman load` takes into an empty storage, and the loaded image runs.
#   images/tests/smoke.sh BUILD_DIR VERSION
# Exit 77 when podman, buildah or debootstrap is missing, or the base image must be built and
# this is not root (debootstrap). Holds the ctest resource lock "podman".
set -euo pipefail
build=$(cd "${1:?usage: smoke.sh BUILD_DIR VERSION}" && pwd)
version=${2:?usage: smoke.sh BUILD_DIR VERSION}
root=$(cd "$(dirname "$0")/../.." && pwd)
PATH=$PATH:/usr/sbin:/sbin
fail() {
    echo "FAIL [images]: $*" >&2
    exit 1
}
for tool in podman buildah debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || { echo "skip: $tool not found (scripts/install-deps.sh installs it)"; exit 77; }
done
. "$root/images/env.sh"
[ "$TANDEM_VERSION" = "$version" ] ||
    fail "images/env.sh says version $TANDEM_VERSION, the build was configured with $version"
if [ "$(id -u)" -ne 0 ] && ! podman image exists "$TANDEM_IMAGE_BASE" 2>/dev/null; then
    echo "skip: the base image $TANDEM_IMAGE_BASE needs debootstrap, which needs root"
    exit 77
fi

scratch=$(mktemp -d)
cleanup() {
    # the scratch storage of the load check: its own podman environment, removed with it
    if [ -d "$scratch/containers/storage" ]; then
        (TANDEM_CONTAINERS_DIR=$scratch/containers && . "$root/images/env.sh" &&
            podman rmi -a -f >/dev/null 2>&1) || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT

t0=$(date +%s)
timeout 3000 "$root/scripts/images.sh" "$build" >"$scratch/images.log" 2>&1 ||
    { cat "$scratch/images.log" >&2; fail "scripts/images.sh $build failed"; }
echo "images: scripts/images.sh took $(($(date +%s) - t0)) s"
grep '^images: ' "$scratch/images.log" || true

run() { timeout 120 podman run --rm --network none "$@"; }

for name in $TANDEM_IMAGE_NAMES; do
    image=tandem-$name:$version
    bin=/usr/local/bin/tandem-$name
    podman image exists "$image" || fail "$image was not built"
    podman image exists "tandem-$name:latest" || fail "tandem-$name:latest was not tagged"
    [ "$(podman image inspect --format '{{.Id}}' "$image")" = \
        "$(podman image inspect --format '{{.Id}}' "tandem-$name:latest")" ] ||
        fail "tandem-$name:latest is not $image"

    out=$(run "$image" --version 2>&1) || fail "$image --version failed: $out"
    [ "$out" = "tandem-$name $version" ] || fail "$image --version printed '$out'"

    uid=$(run --entrypoint id "$image" -u) || fail "$image: id -u failed"
    gid=$(run --entrypoint id "$image" -g) || fail "$image: id -g failed"
    [ "$uid" != 0 ] || fail "$image runs as root"
    [ "$uid:$gid" = 65532:65532 ] || fail "$image runs as $uid:$gid, want 65532:65532"

    libs=$(run --entrypoint /usr/bin/ldd "$image" "$bin" 2>&1) || fail "$image: ldd $bin failed: $libs"
    if grep -q "not found" <<<"$libs"; then
        fail "$image: missing libraries: $(grep "not found" <<<"$libs" | tr -s ' \t\n' ' ')"
    fi

    meta=$(podman image inspect --format \
        '{{json .Config.Entrypoint}}|{{.Config.User}}|{{index .Labels "org.opencontainers.image.title"}}|{{index .Labels "org.opencontainers.image.version"}}' \
        "$image")
    [ "$meta" = "[\"$bin\"]|65532:65532|tandem-$name|$version" ] ||
        fail "$image: entrypoint|user|title|version is '$meta'"
    for label in revision created source licenses description; do
        podman image inspect --format "{{index .Labels \"org.opencontainers.image.$label\"}}" "$image" |
            grep -q . || [ "$label" = source ] || fail "$image: label org.opencontainers.image.$label is empty"
    done

    archive=$build/images/tandem-$name-$version.tar
    [ -s "$archive" ] || fail "no archive $archive"
    list=$(tar -tf "$archive") || fail "$archive is not a tar archive"
    for f in oci-layout index.json; do
        grep -qx "$f" <<<"$list" || fail "$archive has no $f"
    done
    tar -xOf "$archive" index.json |
        grep -q "\"org.opencontainers.image.ref.name\": *\"docker.io/library/tandem-$name:$version\"" ||
        fail "$archive: index.json does not name docker.io/library/tandem-$name:$version"
    if podman image exists "docker.io/library/tandem-$name:$version"; then
        fail "the save-time tag docker.io/library/tandem-$name:$version was left behind"
    fi
    echo "images: $image ok ($(podman image inspect --format '{{.Size}}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
done

# The archives load into an empty storage (a podman environment of its own) and run from there.
(
    TANDEM_CONTAINERS_DIR=$scratch/containers
    . "$root/images/env.sh"
    for name in $TANDEM_IMAGE_NAMES; do
        archive=$build/images/tandem-$name-$version.tar
        loaded=$(timeout 300 podman load -q -i "$archive" 2>&1) || fail "podman load -i $archive: $loaded"
        out=$(run "tandem-$name:$version" --version 2>&1) ||
            fail "tandem-$name:$version loaded from $archive does not run: $out ($loaded)"
        [ "$out" = "tandem-$name $version" ] || fail "loaded tandem-$name:$version --version printed '$out'"
    done
    echo "images: the archives load into an empty storage and run"
)
echo "PASS: images"
