# podres-exporter image: the CLI with PostgreSQL support, run as `podres-exporter serve` by
# default (the DaemonSet) or `podres-exporter api` (the optional central API).
#
#   docker build -t podres-exporter:0.1.0 .
#
# The same image as deploy/image/build.sh, which CI builds and runs without Docker: Debian
# bookworm's python3.11, the dependencies pinned with their hashes in requirements.lock
# (`make lock` writes it from pyproject.toml; pip refuses any file whose hash is not listed),
# installed into /opt/venv by the same script (deploy/image/install.sh), no compiler, no
# pip, no cache. tests/deploy/test_image.py checks that both give the image the same user,
# environment, entry point, port and labels. See docs/deploy.md.

FROM debian:bookworm-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3-pip-whl python3-setuptools-whl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 builder
USER builder
WORKDIR /home/builder/src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --chown=builder:builder requirements.lock pyproject.toml README.md LICENSE ./
# Binary wheels only: nothing is compiled. Every file's hash is checked.
RUN python3.11 /usr/share/python-wheels/pip-*.whl/pip download --require-hashes --no-deps \
      --only-binary=:all: --dest /home/builder/wheels -r requirements.lock
COPY --chown=builder:builder exporter ./exporter
COPY --chown=builder:builder reconciler ./reconciler
COPY --chown=builder:builder docs ./docs
RUN python3.11 /usr/share/python-wheels/pip-*.whl/pip wheel --no-deps \
      --wheel-dir /home/builder/project .

FROM debian:bookworm-slim
ARG SOURCE_DATE_EPOCH=0
LABEL org.opencontainers.image.title="podres-exporter" \
      org.opencontainers.image.description="Exporter for Kubernetes Pod-Level Resource Managers" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/podres-exporter/podres-exporter"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 libstdc++6 python3-pip-whl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /home/builder/wheels /tmp/wheels
COPY --from=build /home/builder/project /tmp/project
COPY requirements.lock /tmp/requirements.lock
COPY deploy/image/install.sh /usr/local/lib/podres-install.sh
# install.sh: the venv from the locked wheels (--require-hashes, no index), pip check,
# podres-exporter --version, then pip, the wheels and every cache removed.
RUN sh /usr/local/lib/podres-install.sh / && rm /usr/local/lib/podres-install.sh
# Unprivileged by default. The DaemonSet sets runAsUser: 0 (the kubelet's PodResources
# socket is root-only) with every capability dropped; the api Deployment runs as 65534.
USER 65534:65534
EXPOSE 9847
ENTRYPOINT ["podres-exporter", "serve"]
