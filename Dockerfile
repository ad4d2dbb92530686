# skyroute: one image for the gateway (`skyroute serve`) and the autoscaler sidecar
# (`skyroute autoscale`); the command picks the process.
#
#   docker build -t skyroute .
#   docker run --rm -p 8080:8080 -e SKYROUTE_REDIS_URL=redis://... -e SKYROUTE_POLICY=/policy/policy.yaml \
#     -v "$PWD/policy:/policy:ro" skyroute serve
#
# Runtime dependencies all ship as manylinux wheels, so neither stage needs a compiler;
# `--only-binary=:all:` makes a missing wheel fail the build instead of pulling one in.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/skyroute
COPY pyproject.toml README.md ./
COPY base/ base/
COPY router/ router/
COPY live/ live/
COPY store/ store/
COPY adapters/ adapters/
COPY simengine/ simengine/
COPY gateway/ gateway/
COPY pricing/ pricing/
COPY autoscaler/ autoscaler/
COPY simulator/ simulator/
COPY skyroute/ skyroute/
# Build skyroute's own (pure-Python) wheel, then install it and its dependencies from wheels
# into a virtualenv that is copied whole into the runtime stage.
# The gateway and the sidecar: the `autoscaler` extra (cloud SDKs and the solver); no
# simulator, plots or simulated engines.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/skyroute/bin/pip install --only-binary=:all: --find-links /wheels "skyroute[autoscaler]" \
    && /opt/skyroute/bin/python -m compileall -q /opt/skyroute/lib

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="skyroute" \
      org.opencontainers.image.description="Multi-cloud LLM inference routing gateway and autoscaler sidecar" \
      org.opencontainers.image.licenses="Apache-2.0"
# uid/gid 10001 match the Helm chart's podSecurityContext (runAsNonRoot, runAsUser 10001).
RUN groupadd --system --gid 10001 skyroute \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin skyroute
COPY --from=build /opt/skyroute /opt/skyroute
ENV PATH=/opt/skyroute/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SKYROUTE_HOST=0.0.0.0 \
    SKYROUTE_PORT=8080
# The root filesystem may be read-only (the chart makes it so); only /tmp needs to be writable.
WORKDIR /tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["skyroute"]
CMD ["serve"]
