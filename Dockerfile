# One image for the AGN operator, the consumer gateway and the fake provider; the
# Deployments pick the program (`python -m agn.operator | agn.gateway | agn.provider`).
# `python -m xtask env up --runtime kind` builds it as agn:dev from the public Python image.
# `scripts/build-image.sh` builds the same image with no registry at all: a Debian base made
# with debootstrap and the wheels built on the host (README, "The container image").
#
# Build arguments (both work with the classic builder and with BuildKit):
#   BASE    the image to build on: a Debian-like image with python3 (>= 3.11) on PATH.
#   WHEELS  a folder of the build context holding deps/ (a wheel of every dependency, plus
#           pip's own wheel to install them with) and app/ (the project's wheel); the install
#           then uses no index. Empty (the default): pip installs from PyPI.
ARG BASE=python:3.11.11-slim-bookworm

# -- install: everything the programs need goes into one venv, so the runtime stage copies a
#    single folder and neither pip, the wheels nor the sources end up in the image.
FROM ${BASE} AS install
ARG WHEELS=
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv --without-pip /opt/agn
# The dependencies get their own layer, so a code change does not reinstall them. The
# pyproject.toml in each COPY below is there so that the COPY has a source without wheels.
COPY pyproject.toml ${WHEELS:+${WHEELS}/deps} /wheels/deps/
RUN if [ -n "$WHEELS" ]; then \
      pip=$(echo /wheels/deps/pip-*.whl) \
      && /opt/agn/bin/python "$pip/pip" install --no-index --no-deps \
           $(find /wheels/deps -name '*.whl' ! -name 'pip-*'); \
    fi
# README.md* (a glob) keeps the build working while the README is absent.
COPY pyproject.toml README.md* /src/
COPY agn /src/agn
COPY xtask /src/xtask
COPY pyproject.toml ${WHEELS:+${WHEELS}/app} /wheels/app/
# The import check fails the build, not a pod, when a wheel does not fit the base (its libc,
# its Python). Recent kubernetes releases ship a second, asyncio copy of the generated client
# (kubernetes/aio, ~70 MB with bytecode) that nothing imports, the sync client included.
RUN if [ -n "$WHEELS" ]; then \
      pip=$(echo /wheels/deps/pip-*.whl) \
      && /opt/agn/bin/python "$pip/pip" install --no-index --find-links /wheels/deps /wheels/app/*.whl; \
    else \
      python3 -m pip --python /opt/agn/bin/python install /src; \
    fi \
    && /opt/agn/bin/python -c "import kubernetes.client, yaml, agn.operator.__main__, agn.gateway.__main__, agn.provider.__main__" \
    && rm -rf /opt/agn/lib/python3*/site-packages/kubernetes/aio

# -- runtime
FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/agn/bin:$PATH
# Non-root, numeric so Kubernetes can verify runAsNonRoot (the manifests use the same uid).
# Written directly: a minimal Debian base has no useradd.
RUN echo 'agn:x:10001:10001:agn:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'agn:x:10001:' >> /etc/group
COPY --from=install /opt/agn /opt/agn
USER 10001:10001

EXPOSE 8080
ENTRYPOINT ["python", "-m"]
CMD ["agn.provider", "--name", "demo", "--host", "0.0.0.0", "--port", "8080"]
