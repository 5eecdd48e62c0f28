#!/usr/bin/env bash
# The one version source (docs/images.md): project(tandem VERSION x.y.z) in CMakeLists.txt. Fails
# when anything that names Tandem's images disagrees with it:
#   * the image tags in manifests/ (operator.yaml, agent-daemonset.yaml, kustomization.yaml's
#     images: newTag) — no tandem-*:latest there, no other version;
#   * the operator's compiled-in default agent and EPP images (its --help) and its --version;
#   * images/env.sh (what scripts/images.sh tags the images with).
#   images/tests/versions.sh CMAKE_PROJECT_VERSION TANDEM_OPERATOR_BINARY
set -euo pipefail
want=${1:?usage: versions.sh VERSION TANDEM_OPERATOR}
operator=${2:?usage: versions.sh VERSION TANDEM_OPERATOR}
root=$(cd "$(dirname "$0")/../.." && pwd)
fail=0
bad() {
    echo "versions: $*" >&2
    fail=1
}

src=$(sed -n 's/^[[:space:]]*project([[:space:]]*tandem[[:space:]][^)]*VERSION[[:space:]]\{1,\}\([0-9][0-9.]*\).*/\1/p' \
    "$root/CMakeLists.txt")
[ "$src" = "$want" ] || bad "CMakeLists.txt project(VERSION) is '$src', the build was configured with '$want'"

# Every image: line of a Tandem image in manifests/ carries :$want.
found=0
while IFS= read -r line; do
    found=$((found + 1))
    file=${line%%:*}
    ref=$(sed -E 's/.*image:[[:space:]]*"?([^"[:space:]]+)"?.*/\1/' <<<"${line#*:*:}")
    case "$ref" in
        tandem-operator:"$want" | tandem-agent:"$want" | tandem-epp:"$want" | tandem-engine:"$want") ;;
        *) bad "${file#"$root"/}: image $ref, want tag :$want" ;;
    esac
done < <(grep -rnE '^[[:space:]]*(-[[:space:]]+)?image:[[:space:]]*"?tandem-(operator|agent|epp|engine)([:@"[:space:]]|$)' \
    "$root/manifests" --include='*.yaml' || true)
[ "$found" -ge 2 ] || bad "found $found tandem-* image: lines in manifests/ (want the operator's and the agent's)"
for name in operator agent; do
    grep -rqE "image:[[:space:]]*\"?tandem-$name:$want\"?[[:space:]]*$" "$root/manifests" --include='*.yaml' ||
        bad "manifests/: no image tandem-$name:$want"
done

# kustomization.yaml: each images: entry's newTag.
kust=$root/manifests/kustomization.yaml
tags=$(awk '/^images:/ { on = 1; next } on && /^[^[:space:]-]/ { on = 0 }
            on && /newTag:/ { sub(/.*newTag:[[:space:]]*/, ""); gsub(/"/, ""); print }' "$kust")
[ -n "$tags" ] || bad "${kust#"$root"/}: no images: newTag entries"
for t in $tags; do
    [ "$t" = "$want" ] || bad "${kust#"$root"/}: newTag $t, want $want"
done

# The operator binary: its version and its default images.
out=$("$operator" --version) || bad "$operator --version failed"
[ "$out" = "tandem-operator $want" ] || bad "$operator --version printed '$out', want 'tandem-operator $want'"
help=$("$operator" --help 2>&1 || true)
for name in agent epp; do
    grep -q "tandem-$name:$want)" <<<"$help" ||
        bad "tandem-operator --help does not name the default image tandem-$name:$want"
done
if grep -q "tandem-[a-z]*:latest" <<<"$help"; then
    bad "tandem-operator --help still names a :latest image"
fi

# images/env.sh, in a scratch environment directory.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
env_out=$(TANDEM_CONTAINERS_DIR=$scratch "$root/images/env.sh") || bad "images/env.sh failed"
for kv in "TANDEM_VERSION=$want" "TANDEM_IMAGE_AGENT=tandem-agent:$want" \
    "TANDEM_IMAGE_EPP=tandem-epp:$want" "TANDEM_IMAGE_OPERATOR=tandem-operator:$want" \
    "TANDEM_IMAGE_ENGINE=tandem-engine:$want"; do
    grep -qxF "$kv" <<<"$env_out" || bad "images/env.sh does not print $kv"
done

[ "$fail" = 0 ] && echo "versions: $want everywhere (CMakeLists.txt, manifests/, tandem-operator, images/env.sh)"
exit "$fail"
