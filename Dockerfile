# The Ductile gateway's image: one image for every role of docker-compose.yml (the API node, the
# worker nodes, the scheduler), the command picking the role. The layout is the systemd
# install's (deploy/systemd/): the code and the bundled plugins at /opt/ductile, its virtualenv at
# /opt/ductile/.venv, the config at /etc/ductile, the state at /var/lib/ductile, the `ductile`
# account. docs/deployment.md, "Containers".
FROM python:3.11-slim

# bash (in the base image), jq and restic for the bundled restic_backup plugin; the Python plugins
# run on the gateway's interpreter (/opt/ductile/.venv first on PATH). Debian's current versions:
# the base image is what pins them.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends jq restic \
    && rm -rf /var/lib/apt/lists/*

# A fixed uid: USER names it by number, which an orchestrator's non-root check can read without the
# image's /etc/passwd, and files in a volume keep one owner across rebuilds.
RUN groupadd --system --gid 10001 ductile \
    && useradd --system --uid 10001 --gid ductile --home-dir /var/lib/ductile --shell /usr/sbin/nologin ductile \
    && install -d -o ductile -g ductile -m 0700 /etc/ductile /var/lib/ductile

WORKDIR /opt/ductile
COPY pyproject.toml README.md manage.py ./
COPY ductile_site ductile_site
COPY gateway gateway
COPY ledger ledger
COPY pipelines pipelines
COPY templates templates
COPY static static
COPY plugins plugins
# Editable, as scripts/_env.sh installs it: the settings find templates/ and static/ beside the
# packages. Static files collected and bytecode compiled now, not by each process at run time.
RUN python -m venv .venv \
    && .venv/bin/pip install --no-cache-dir --disable-pip-version-check -e . \
    && .venv/bin/python manage.py collectstatic --noinput --verbosity 0 \
    && .venv/bin/python -m compileall -q -j 0 .venv/lib ductile_site gateway ledger pipelines

ENV PATH="/opt/ductile/.venv/bin:${PATH}" \
    DUCTILE_CONFIG_DIR=/etc/ductile \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/ductile
# api.listen of the config in the shared volume (docs/deployment.md: 0.0.0.0:8081 in a container).
EXPOSE 8081
# /healthz through the CLI's own `api` command: the address is the config's api.listen, and the
# answer is a 503 when the config does not load or the database cannot be read.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["ductile", "api", "/healthz"]
CMD ["ductile", "system", "start"]
