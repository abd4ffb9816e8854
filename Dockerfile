# podres-exporter image: the CLI with PostgreSQL support, run as `podres-exporter serve` by
# default (the DaemonSet) or `podres-exporter api` (the optional central API).
#
#   docker build -t podres-exporter:0.1.0 .
#
# See docs/deploy.md. Two stages: wheels are fetched and built as an unprivileged user; the
# runtime stage installs only those wheels (no compiler, no network, no cache) into
# /opt/venv. Every dependency is the version and file pinned, with its hashes, in
# requirements.lock (`make lock` writes it from pyproject.toml), so two builds install the
# same bytes: pip refuses any file whose hash is not listed.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN useradd --create-home --uid 10001 builder
USER builder
WORKDIR /home/builder/src
COPY --chown=builder:builder requirements.lock pyproject.toml README.md LICENSE ./
RUN python -m pip wheel --require-hashes --no-deps --wheel-dir /home/builder/wheels \
      -r requirements.lock
COPY --chown=builder:builder exporter ./exporter
COPY --chown=builder:builder reconciler ./reconciler
RUN python -m pip wheel --no-deps --wheel-dir /home/builder/project .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="podres-exporter" \
      org.opencontainers.image.description="Exporter for Kubernetes Pod-Level Resource Managers" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
COPY --from=build /home/builder/wheels /tmp/wheels
COPY --from=build /home/builder/project /tmp/project
COPY requirements.lock /tmp/requirements.lock
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /tmp/wheels --require-hashes \
         -r /tmp/requirements.lock \
    && /opt/venv/bin/pip install --no-index --no-deps /tmp/project/podres_exporter-*.whl \
    && /opt/venv/bin/pip check \
    && rm -rf /tmp/wheels /tmp/project /tmp/requirements.lock \
    && podres-exporter --version
# Unprivileged by default. The DaemonSet sets runAsUser: 0 (the kubelet's PodResources
# socket is root-only) with every capability dropped; the api Deployment runs as 65534.
USER 65534:65534
EXPOSE 9847
ENTRYPOINT ["podres-exporter", "serve"]
