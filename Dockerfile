# One image for the AGN operator, the consumer gateway and the fake provider; the
# Deployments pick the program (`python -m agn.operator | agn.gateway | agn.provider`).
# Built by `python -m xtask env up --runtime kind` as agn:dev and loaded into kind.
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# README.md* (a glob) keeps the build working while the README is absent.
COPY pyproject.toml README.md* ./
COPY agn ./agn
COPY xtask ./xtask
RUN pip install . && rm -rf /src/build

# Non-root, numeric so Kubernetes can verify runAsNonRoot (the manifests use the same uid).
RUN groupadd --system --gid 10001 agn && useradd --system --uid 10001 --gid agn --no-create-home agn
USER 10001:10001

EXPOSE 8080
ENTRYPOINT ["python", "-m"]
CMD ["agn.provider", "--name", "demo", "--host", "0.0.0.0", "--port", "8080"]
