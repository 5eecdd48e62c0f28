#!/usr/bin/env bash
# Builds Tandem's container images (docs/images.md): the Debian bookworm base
# tandem-base:bookworm (debootstrap --variant=minbase from this machine's Debian mirror, imported
# into podman), then tandem-operator, tandem-epp, tandem-agent and tandem-engine from the one
# multi-stage images/Containerfile, each tagged :<version> (project(VERSION) in CMakeLists.txt)
# and :latest, and saved as an OCI archive BUILD_DIR/images/tandem-<name>-<version>.tar for
# `kind load image-archive` or `ctr -n k8s.io images import`.
#
#   scripts/images.sh [--rebuild-base] [--rebuild] [--no-save] [BUILD_DIR]     (make images)
#
# --rebuild-base debootstraps the base again; --rebuild also drops the compile cache and every
# cached layer of the build stage; --no-save skips the OCI archives.
# BUILD_DIR defaults to build/. Podman and buildah run with the project's containers.conf and
# storage.conf (images/env.sh); layers are cached there, so a rebuild without source changes
# takes seconds. Environment:
#   TANDEM_BASE_MAX_AGE_DAYS       rebuild the base when it is older (default 30: security fixes)
#   TANDEM_DEBIAN_MIRROR           Debian mirror (default: this machine's apt sources)
#   TANDEM_DEBIAN_SECURITY_MIRROR  Debian security mirror (default: this machine's apt sources)
#   TANDEM_IMAGE_SOURCE            org.opencontainers.image.source (default: git remote origin)
#   TANDEM_IMAGE_LICENSES          org.opencontainers.image.licenses (default NOASSERTION: the
#                                  repository declares no license yet)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rebuild_base=0
rebuild=0
save=1
build_dir=
while [ $# -gt 0 ]; do
    case "$1" in
        --rebuild-base) rebuild_base=1 ;;
        --rebuild) rebuild=1 ;;
        --no-save) save=0 ;;
        -h | --help)
            sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        -*)
            echo "images: unknown option $1 (see --help)" >&2
            exit 2
            ;;
        *)
            [ -z "$build_dir" ] || { echo "images: one BUILD_DIR only" >&2; exit 2; }
            build_dir=$1
            ;;
    esac
    shift
done
build_dir=${build_dir:-$root/build}
max_age_days=${TANDEM_BASE_MAX_AGE_DAYS:-30}
case "$max_age_days" in
    '' | *[!0-9]*) echo "images: TANDEM_BASE_MAX_AGE_DAYS must be a number of days" >&2; exit 2 ;;
esac

missing=()
for tool in podman buildah debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "images: ${missing[*]} not found: install them with scripts/install-deps.sh" >&2
    exit 1
fi
PATH=$PATH:/usr/sbin:/sbin

# shellcheck source=images/env.sh
. "$root/images/env.sh"
version=$TANDEM_VERSION
out_dir=$(mkdir -p "$build_dir/images" && cd "$build_dir/images" && pwd)
cache_version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$cache_version" ] && [ "$cache_version" != "$version" ]; then
    echo "images: note: $build_dir was configured for version $cache_version;" \
        "CMakeLists.txt says $version (the images use $version)" >&2
fi

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
t_start=$(now)

# The mirror of the first apt source (deb822 .sources or one-line sources.list) whose suites
# include $1 (bookworm or bookworm-security).
apt_mirror() {
    local suite=$1 f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$suite" '
            function flush() { if (uri != "" && hit) { print uri; found = 1; exit } uri = ""; hit = 0 }
            /^[[:space:]]*$/ { flush(); next }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
            END { if (!found) flush() }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v suite="$suite" '$1 == "deb" {
                i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit } }' "$f"
    done
}

# Builds tandem-base:bookworm unless it exists and is younger than max_age_days.
build_base() {
    local created age_days
    if [ "$rebuild_base" = 0 ] &&
        created=$(podman image inspect --format '{{.Created.Unix}}' "$TANDEM_IMAGE_BASE" 2>/dev/null); then
        age_days=$((($(date +%s) - created) / 86400))
        if [ "$age_days" -lt "$max_age_days" ]; then
            echo "images: base $TANDEM_IMAGE_BASE is $age_days day(s) old (rebuilt after $max_age_days)"
            return 0
        fi
        echo "images: base $TANDEM_IMAGE_BASE is $age_days day(s) old: rebuilding"
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "images: debootstrap needs root to build the base image $TANDEM_IMAGE_BASE" >&2
        exit 1
    fi
    local mirror security t0 rootfs
    mirror=${TANDEM_DEBIAN_MIRROR:-$(apt_mirror bookworm | head -n 1)}
    security=${TANDEM_DEBIAN_SECURITY_MIRROR:-$(apt_mirror bookworm-security | head -n 1)}
    mirror=${mirror:-http://deb.debian.org/debian}
    security=${security:-http://deb.debian.org/debian-security}
    t0=$(now)
    rootfs=$out_dir/base-rootfs
    rm -rf "$rootfs"
    echo "images: debootstrap --variant=minbase bookworm from $mirror"
    if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$out_dir/debootstrap.log" 2>&1; then
        tail -n 20 "$out_dir/debootstrap.log" >&2
        echo "images: debootstrap failed (log: $out_dir/debootstrap.log)" >&2
        exit 1
    fi
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # Slim by default, like Debian's own container images: no recommends, no docs beyond the
    # copyright files, no man pages or translations, no apt lists left behind.
    cat >"$rootfs/etc/apt/apt.conf.d/90tandem-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOF
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/90tandem-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
    find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/* "$rootfs"/debootstrap
    podman rmi -f "$TANDEM_IMAGE_BASE" >/dev/null 2>&1 || true
    tar --numeric-owner -C "$rootfs" -c . |
        podman import -q --change 'CMD ["/bin/bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --message "debootstrap --variant=minbase bookworm $mirror" - "$TANDEM_IMAGE_BASE" >/dev/null
    rm -rf "$rootfs"
    echo "images: built $TANDEM_IMAGE_BASE in $(elapsed "$t0")"
}

build_base

# OCI labels: the revision is the commit (with -dirty for uncommitted changes); created is the
# commit's time, so a rebuild of the same tree keeps every layer.
revision=unknown
created=1970-01-01T00:00:00Z
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
    created=$(git -C "$root" log -1 --format=%cI 2>/dev/null || echo "$created")
    if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        revision=$revision-dirty
    fi
fi
source_url=${TANDEM_IMAGE_SOURCE:-$(git -C "$root" remote get-url origin 2>/dev/null || true)}
licenses=${TANDEM_IMAGE_LICENSES:-NOASSERTION}

bud() { # log_file buildah-bud-args...
    local log=$1
    shift
    if ! buildah bud --layers --force-rm --isolation chroot -f "$root/images/Containerfile" \
        --build-arg "BASE_IMAGE=$TANDEM_IMAGE_BASE" "$@" "$root" >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "images: buildah bud $* failed (log: $log)" >&2
        exit 1
    fi
}

# The compile, once: one snapshot of the tree for all four images. Buildah keeps the build
# stage's cache mount (/build, the CMake tree) under TMPDIR: ours, next to the layers.
export TMPDIR=$TANDEM_CONTAINERS_DIR/tmp
mkdir -p "$TMPDIR"
build_flags=()
if [ "$rebuild" = 1 ]; then
    rm -rf "$TMPDIR"/buildah-cache-*
    build_flags=(--no-cache)
fi
t0=$(now)
bud "$out_dir/tandem-build.build.log" --target build ${build_flags[@]+"${build_flags[@]}"} \
    -t "tandem-build:$version"
echo "images: tandem-build:$version (the build stage) in $(elapsed "$t0")"

printf '%-24s %-8s %-14s %s\n' IMAGE SIZE ID "ARCHIVE" >"$out_dir/summary.txt"
for name in $TANDEM_IMAGE_NAMES; do
    t0=$(now)
    image=tandem-$name
    bud "$out_dir/$image.build.log" --target "$name" --build-arg "BUILT=tandem-build:$version" \
        --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
        --build-arg "CREATED=$created" --build-arg "SOURCE=$source_url" \
        --build-arg "LICENSES=$licenses" -t "$image:$version" -t "$image:latest"
    id=$(podman image inspect --format '{{.Id}}' "$image:$version")
    size=$(podman image inspect --format '{{.Size}}' "$image:$version")
    archive=$out_dir/$image-$version.tar
    how=built
    if [ "$save" = 1 ]; then
        if [ -f "$archive" ] && [ "$(cat "$archive.id" 2>/dev/null)" = "$id" ]; then
            how="built (archive up to date)"
        else
            rm -f "$archive" "$archive.id"
            # Named as containerd (kind, ctr import) spells the pods' "tandem-agent:<version>":
            # docker.io/library/..., not podman's localhost/... (tagged only while saving).
            podman tag "$image:$version" "docker.io/library/$image:$version"
            podman save -q --format oci-archive -o "$archive.tmp" \
                "docker.io/library/$image:$version" >/dev/null
            podman untag "$image:$version" "docker.io/library/$image:$version"
            mv -f "$archive.tmp" "$archive"
            echo "$id" >"$archive.id"
            how="built and saved"
        fi
    fi
    echo "images: $image:$version (also :latest) $how in $(elapsed "$t0")"
    printf '%-24s %-8s %-14s %s\n' "$image:$version" "$((size / 1000000)) MB" "${id:0:12}" \
        "$([ "$save" = 1 ] && echo "$archive" || echo -)" >>"$out_dir/summary.txt"
done
cat "$out_dir/summary.txt"
# Untagged images no build uses any more (the layers of earlier compiles and snapshots); the
# layer cache of the current build is kept, as its images are parents of tagged ones.
pruned=$(podman image prune -f 2>/dev/null | grep -c . || true)
[ "$pruned" = 0 ] || echo "images: pruned $pruned unused intermediate image(s)"
echo "images: done in $(elapsed "$t_start")"
