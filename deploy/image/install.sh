#!/bin/sh
# The Dockerfile's runtime RUN step, run by build.sh inside the new root file system ($1):
# a venv with the locked wheels and the project's, checked, then everything the build
# brought in removed. The Dockerfile runs the same commands with ROOT=/.
set -eu
ROOT=$1
run() { chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PIP_NO_CACHE_DIR=1 \
  PIP_DISABLE_PIP_VERSION_CHECK=1 SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" "$@"; }
pip=$(cd "$ROOT" && ls usr/share/python-wheels/pip-*.whl)
run python3.11 -m venv --without-pip /opt/venv
run /opt/venv/bin/python "/$pip/pip" install --quiet --no-index --find-links /tmp/wheels \
  --require-hashes -r /tmp/requirements.lock
whl=$(cd "$ROOT/tmp/project" && ls podres_exporter-*.whl)
run /opt/venv/bin/python "/$pip/pip" install --quiet --no-index --no-deps "/tmp/project/$whl"
run /opt/venv/bin/python "/$pip/pip" check
run /opt/venv/bin/podres-exporter --version
run dpkg --purge python3-pip-whl ca-certificates openssl >/dev/null
rm -rf "$ROOT"/tmp/* "$ROOT"/var/cache/* "$ROOT"/var/log/* "$ROOT"/var/lib/apt/lists/* \
  "$ROOT"/var/lib/dpkg/*-old "$ROOT"/etc/*-
