# podres-exporter image: the CLI with PostgreSQL support, run as `podres-exporter serve` by
# default (the DaemonSet) or `podres-exporter api` (the optional central API).
#
#   docker build -t podres-exporter:0.1.0 .
#
# See docs/deploy.md. Two stages: wheels are built as an unprivileged user; the runtime
# stage installs only those wheels (no compiler, no network, no cache) into /opt/venv.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN useradd --create-home --uid 10001 builder
USER builder
WORKDIR /home/builder/src
COPY --chown=builder:builder pyproject.toml README.md ./
COPY --chown=builder:builder exporter ./exporter
COPY --chown=builder:builder reconciler ./reconciler
RUN python -m pip wheel --wheel-dir /home/builder/wheels ".[postgres]"

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
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /tmp/wheels "podres-exporter[postgres]" \
    && rm -rf /tmp/wheels \
    && podres-exporter --version
# Unprivileged by default. The DaemonSet sets runAsUser: 0 (the kubelet's PodResources
# socket is root-only) with every capability dropped; the api Deployment runs as 65534.
USER 65534:65534
EXPOSE 9847
ENTRYPOINT ["podres-exporter", "serve"]
