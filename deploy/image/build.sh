#!/usr/bin/env bash
# The image of the Dockerfile, built without Docker, a daemon or a registry: a Debian
# bookworm root file system made by mmdebstrap from Debian's packages (python3.11 and the
# Essential set, nothing else: no compiler, no apt, no documentation), the dependencies
# installed from requirements.lock with --require-hashes into /opt/venv, written as a
# one-layer OCI image layout by oci.py. Same sources, same packages, same SOURCE_DATE_EPOCH:
# the same bytes (docs/deploy.md#build-the-image).
#
#   deploy/image/build.sh [OUT_DIR]      # default build/image; needs root and mmdebstrap
#
# Writes OUT_DIR/oci (the OCI layout, tag podres-exporter:VERSION) and OUT_DIR/digest.
# Downloads (Debian packages, wheels) are kept in PODRES_IMAGE_CACHE (default
# ~/.cache/podres-exporter-image), outside the repository, so a rebuild fetches nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/deploy/image"
OUT=$(mkdir -p "${1:-$ROOT/build/image}" && cd "${1:-$ROOT/build/image}" && pwd)
CACHE=${PODRES_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/podres-exporter-image}
MIRROR=${PODRES_IMAGE_MIRROR:-http://deb.debian.org/debian}
PYTHON=${PYTHON:-python3}

die() { echo "build.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap --mode=root, and files owned by root in the image)"
command -v mmdebstrap >/dev/null || die "needs mmdebstrap: apt-get install mmdebstrap"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "needs pip for $PYTHON (to fetch the locked wheels)"

# Reproducible: every timestamp of the image is the last commit's, unless told otherwise.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct)}
VERSION=$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$ROOT/pyproject.toml")
TAG="podres-exporter:$VERSION"
mkdir -p "$CACHE/debs" "$CACHE/wheels"
WORK=$(mktemp -d /tmp/podres-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS

# 1. The build stage: the locked wheels (binary only, so nothing is compiled; every hash
# checked) for the image's interpreter (CPython 3.11, glibc 2.36, x86_64), and the project's
# own wheel from the files the Dockerfile copies.
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
platforms=()  # pip before 24 does not widen a glibc version to the older ones itself
for minor in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
"$PYTHON" -m pip download --quiet --require-hashes --no-deps --only-binary=:all: \
  --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none "${platforms[@]}" \
  --dest "$CACHE/wheels" -r "$ROOT/requirements.lock"
mkdir -p "$WORK/src" "$WORK/wheels" "$WORK/project"
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' -cf - \
  requirements.lock pyproject.toml README.md LICENSE exporter reconciler docs | tar -C "$WORK/src" -xf -
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WORK/project" "$WORK/src"
# Only the files the lock names (the cache may hold older ones).
"$PYTHON" - "$ROOT/requirements.lock" "$CACHE/wheels" "$WORK/wheels" <<'PY'
import hashlib, re, shutil, sys
from pathlib import Path
hashes = set(re.findall(r"sha256:([0-9a-f]{64})", Path(sys.argv[1]).read_text()))
for whl in sorted(Path(sys.argv[2]).glob("*.whl")):
    if hashlib.sha256(whl.read_bytes()).hexdigest() in hashes:
        shutil.copy(whl, sys.argv[3])
PY
echo "build.sh: wheels ready ($((SECONDS - start)) s)"

# 2. The runtime stage: python3.11, libstdc++6 (grpcio's extension links it) and Debian's pip
# wheel (used once, then purged) on the Essential set; merged /usr without the usrmerge
# package (which would pull in perl). Documentation, manual pages and translations are never
# unpacked; copyright files are. mmdebstrap's filters run on Debian's own python3 (a
# version manager's shim in PATH costs seconds per package).
cp "$ROOT/requirements.lock" "$WORK/requirements.lock"
PATH=/usr/sbin:/usr/bin:/sbin:/bin nice -n 10 mmdebstrap --quiet --mode=root \
  --variant=essential --format=directory --include=python3.11,libstdc++6,python3-pip-whl \
  --dpkgopt=force-unsafe-io \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --skip=download/empty --skip=essential/unlink \
  --setup-hook="mkdir -p \"\$1\"/var/cache/apt/archives && cp -a '$CACHE/debs/.' \"\$1\"/var/cache/apt/archives/" \
  --customize-hook="cp -a \"\$1\"/var/cache/apt/archives/*.deb '$CACHE/debs/' 2>/dev/null || true" \
  --customize-hook="cp -r '$WORK/wheels' '$WORK/project' '$WORK/requirements.lock' \"\$1\"/tmp/" \
  --customize-hook="SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH sh '$HERE/install.sh' \"\$1\"" \
  bookworm "$WORK/rootfs" "$MIRROR" </dev/null
echo "build.sh: root file system ready ($((SECONDS - start)) s)"

# 3. The image: one layer, the runtime settings of deploy/image/config.json (the
# Dockerfile's USER, ENV, ENTRYPOINT, EXPOSE and LABELs; tests/deploy checks they agree).
digest=$("$PYTHON" "$HERE/oci.py" "$WORK/rootfs" "$OUT/oci" --tag "$TAG" --config "$HERE/config.json")
echo "$digest" > "$OUT/digest"
echo "build.sh: $TAG $digest in $OUT/oci ($((SECONDS - start)) s)"
