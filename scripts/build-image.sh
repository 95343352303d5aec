#!/usr/bin/env bash
# The operator's container image, built without a Docker daemon or a registry
# (docs/image.md):
#
#   1. a bookworm root filesystem from Debian packages (mmdebstrap): python3 and what
#      Debian marks essential, no apt; imported into buildah as the base image;
#   2. the Dockerfile built on them with `buildah bud --isolation chroot` (no daemon, no
#      container runtime), every timestamp set to SOURCE_DATE_EPOCH;
#   3. an OCI archive of the image (skopeo copy oci-archive:FILE docker://REGISTRY/... pushes
#      it), its SBOM (syft: SPDX and CycloneDX, Debian and Python packages), and the pinned
#      versions it was made from.
#
# It prints the digest, the size and the SBOM's path, and writes them to OUT/image.env.
# Reproducible: the same commit and the same Debian archive state give the same digest
# (the base is keyed by the archive's InRelease files and cached; the image layer is
# dated by the commit). Run as root; it installs the Debian tools it needs (apt-get) and
# syft (go install) when they are missing.
#
# Environment: OUT (default build/image), IMAGE (default localhost/nodepool-operator:VERSION),
# SOURCE_DATE_EPOCH (default: the last commit's time), IMAGE_SOURCE (the repository's URL,
# for the org.opencontainers.image.source label), DEBIAN_MIRROR, NODEPOOL_IMAGE_CACHE
# (default ~/.cache/nodepool-operator/image), PIP_CERT (a CA bundle pip must trust, passed
# to the build as the secret pip-cert).
set -euo pipefail
# The whole script is read before it runs (main, last line): a checkout during a build
# cannot change what runs.
main() {
script=$(realpath "$0")
cd "$(dirname "$script")/.."
repo=$(pwd)

debian_tools=(mmdebstrap buildah skopeo umoci)
install_command="apt-get install -y ${debian_tools[*]}"
syft_version=v1.57.2
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org}
sources=(
  "deb $mirror/debian $suite main"
  "deb $mirror/debian $suite-updates main"
  "deb $mirror/debian-security $suite-security main"
)

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
out=${OUT:-$repo/build/image}
image=${IMAGE:-localhost/nodepool-operator:$version}
cache=${NODEPOOL_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodepool-operator/image}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
revision=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain -- Dockerfile requirements/runtime.txt pyproject.toml README.md src)" ]; then
  revision="$revision-dirty"
fi

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'build-image: %s\n' "$*" >&2; exit 1; }
started=$(date +%s)

# --- tools -----------------------------------------------------------------------------
missing=()
for tool in "${debian_tools[@]}" curl; do command -v "$tool" > /dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]}; as root: $install_command"
  say "installing ${missing[*]} (apt-get)"
  apt-get update -q > /dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" > /dev/null
fi
[ "$(id -u)" -eq 0 ] || die "run as root: mmdebstrap --mode=root and buildah's chroot isolation need it"
syft=$(command -v syft || true)
if [ -z "$syft" ]; then
  syft=$cache/tools/$syft_version/syft
  [ -x "$syft" ] || command -v go > /dev/null \
    || die "syft is missing and so is go to build it (https://go.dev/dl)"
fi

mkdir -p "$out" "$cache"
work=$(mktemp -d "${TMPDIR:-/tmp}/build-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- the base image, from Debian packages -------------------------------------------------
# The archive's state decides what mmdebstrap installs: its InRelease files key the cached
# base, and the newest of their dates dates the base's files.
archive=$work/archive
mkdir -p "$archive"
for line in "${sources[@]}"; do
  read -r _ url dist _ <<< "$line"
  curl -fsS --retry 3 "$url/dists/$dist/InRelease" > "$archive/$dist.InRelease" \
    || die "cannot read $url/dists/$dist/InRelease"
done
base_epoch=0
for release in "$archive"/*.InRelease; do
  when=$(date -d "$(sed -n 's/^Date: //p' "$release")" +%s)
  [ "$when" -gt "$base_epoch" ] && base_epoch=$when
done
base_key=$( { cat "$archive"/*.InRelease; printf '%s\n' "${sources[@]}"; \
  sed -n '/^# --- the base image,/,/^# --- the image/p' "$script"; } | sha256sum | cut -c1-16)
base_dir=$cache/base-$base_key

deterministic_tar() {  # DIR TARBALL: sorted, numeric owners, times clamped to the archive's
  tar --sort=name --numeric-owner --mtime="@$base_epoch" --clamp-mtime \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --exclude='./dev/*' -C "$1" -cf "$2" .
}

# One build of the base at a time (two builds at once wait for, then reuse, the first).
exec 9> "$cache/base.lock"
flock 9
if [ ! -f "$base_dir/rootfs.tar" ]; then
  say "building the base root filesystem from Debian $suite (mmdebstrap)"
  rm -rf "$base_dir" && mkdir -p "$base_dir"
  root=$work/root
  mkdir -p "$root"
  # Essential packages + python3; documentation and translations left out except the
  # copyright files (the SBOM's licences); merged /usr without usrmerge (which needs perl).
  SOURCE_DATE_EPOCH=$base_epoch mmdebstrap --quiet --mode=root --format=directory \
    --variant=essential --include=python3 \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
    "$suite" "$root" "${sources[@]}" > "$work/mmdebstrap.log" 2>&1 \
    || { tail -40 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
  # dpkg's log and backups hold the time of the install; /dev is the runtime's to fill.
  rm -f "$root"/var/log/dpkg.log "$root"/var/lib/dpkg/*-old "$root"/var/cache/debconf/*-old
  rm -rf "${root:?}"/dev/*
  chroot "$root" dpkg-query -W -f '${Package}=${Version}\n' > "$base_dir/debian-packages.txt"
  deterministic_tar "$root" "$base_dir/rootfs.tar.tmp"
  rm -rf "$root"
  cp "$archive"/*.InRelease "$base_dir/"
  mv "$base_dir/rootfs.tar.tmp" "$base_dir/rootfs.tar"
  # The bases of older archive states are not used again.
  find "$cache" -mindepth 1 -maxdepth 1 -name 'base-*' ! -name "base-$base_key" -exec rm -rf {} +
fi
# The base image is named by its root filesystem's hash: a rebuilt base that differs in
# one byte is imported anew (and changes the image's digest), never hidden by the cache.
base_image=localhost/nodepool-operator-base:$(sha256sum "$base_dir/rootfs.tar" | cut -c1-16)
if ! buildah inspect --type image "$base_image" > /dev/null 2>&1; then
  say "importing the base as $base_image"
  context=$work/base
  mkdir -p "$context"
  ln "$base_dir/rootfs.tar" "$context/rootfs.tar" 2> /dev/null || cp "$base_dir/rootfs.tar" "$context/"
  printf '%s\n' 'FROM scratch' 'ADD rootfs.tar /' \
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    'CMD ["python3"]' > "$context/Containerfile"
  buildah bud --quiet --isolation chroot --timestamp "$base_epoch" --layers=false \
    -f "$context/Containerfile" -t "$base_image" "$context" > /dev/null
fi
flock --unlock 9

# --- the image ----------------------------------------------------------------------------
say "building $image (buildah bud --isolation chroot, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$image" 2> /dev/null || true)
secret=()
# Given, not guessed from a clone's remote: the same commit gives the same digest anywhere.
source_label=()
if [ -n "${IMAGE_SOURCE:-}" ]; then source_label=(--label "org.opencontainers.image.source=$IMAGE_SOURCE"); fi
if [ -n "${PIP_CERT:-}" ] && [ -s "$PIP_CERT" ]; then secret=(--secret "id=pip-cert,src=$PIP_CERT"); fi
buildah bud --quiet --isolation chroot --timestamp "$SOURCE_DATE_EPOCH" --layers=false \
  --pull-never "${secret[@]}" \
  --build-arg "PYTHON_IMAGE=$base_image" \
  --build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.created=$created" \
  "${source_label[@]}" \
  --label "org.opencontainers.image.base.name=debian:$suite ($base_image)" \
  -t "$image" . > /dev/null

# The image this tag named before, when no other name is left on it, would stay in
# buildah's storage forever. (rmi by ID would remove it under its other names too.)
if [ -n "$previous" ] && buildah images --quiet --no-trunc --filter dangling=true | grep -q "$previous"; then
  buildah rmi "$previous" > /dev/null
fi

archive_file=$out/nodepool-operator-$version.oci.tar
rm -f "$archive_file"
skopeo copy --quiet "containers-storage:$image" "oci-archive:$archive_file:$version"
manifest=$(skopeo inspect --raw "oci-archive:$archive_file")
digest=sha256:$(printf '%s' "$manifest" | sha256sum | cut -d' ' -f1)
compressed=$(printf '%s' "$manifest" | python3 -c \
  'import json,sys; print(sum(layer["size"] for layer in json.load(sys.stdin)["layers"]))')
unpacked=$work/unpacked
mkdir -p "$work/layout" && tar -xf "$archive_file" -C "$work/layout"
umoci unpack --image "$work/layout:$version" "$unpacked" > /dev/null
uncompressed=$(du -sb "$unpacked/rootfs" | cut -f1)

if [ ! -x "$syft" ]; then
  say "building syft $syft_version (go install, once)"
  GOBIN=$(dirname "$syft") GOFLAGS=-trimpath go install "github.com/anchore/syft/cmd/syft@$syft_version"
fi
say "SBOM (syft: Debian and Python packages)"
sbom=$out/nodepool-operator-$version.spdx.json
SYFT_CHECK_FOR_APP_UPDATE=false "$syft" scan --quiet "oci-archive:$archive_file" \
  -o "spdx-json=$sbom" -o "cyclonedx-json=$out/nodepool-operator-$version.cdx.json"
cp "$base_dir/debian-packages.txt" "$out/debian-packages.txt"
# What is installed in the image's venv (the lock also names packages of other platforms).
python3 - "$unpacked"/rootfs/opt/venv/lib/python3*/site-packages > "$out/python-packages.txt" <<'PY'
import email.parser, pathlib, re, sys
found = []
for metadata in pathlib.Path(sys.argv[1]).glob("*.dist-info/METADATA"):
    fields = email.parser.Parser().parsestr(metadata.read_text(), headersonly=True)
    found.append(f"{re.sub(r'[-_.]+', '-', fields['Name']).lower()}=={fields['Version']}")
print("\n".join(sorted(found)))
PY
{ for release in "$base_dir"/*.InRelease; do
    printf '%s %s\n' "$(basename "$release" .InRelease)" "$(sed -n 's/^Date: //p' "$release")"
  done; printf '%s\n' "${sources[@]}"; } > "$out/debian-archive.txt"

elapsed=$(( $(date +%s) - started ))
cat > "$out/image.env" <<EOF
IMAGE=$image
DIGEST=$digest
ARCHIVE=$archive_file
SBOM=$sbom
COMPRESSED_BYTES=$compressed
UNCOMPRESSED_BYTES=$uncompressed
SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH
REVISION=$revision
BUILD_SECONDS=$elapsed
EOF
printf 'image:    %s\n' "$image"
printf 'digest:   %s\n' "$digest"
printf 'size:     %s MB compressed (%s layers), %s MB unpacked\n' \
  "$(( (compressed + 500000) / 1000000 ))" \
  "$(printf '%s' "$manifest" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["layers"]))')" \
  "$(( (uncompressed + 500000) / 1000000 ))"
printf 'archive:  %s\n' "$archive_file"
printf 'sbom:     %s\n' "$sbom"
printf 'versions: %s %s %s\n' "$out/debian-packages.txt" "$out/python-packages.txt" "$out/debian-archive.txt"
printf 'took:     %s s\n' "$elapsed"
}

main "$@"; exit
