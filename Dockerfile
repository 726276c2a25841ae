# subagentd as a container: JSON-RPC on stdin/stdout (run with -i), the database on a volume.
#   docker build -t subagentd . && docker run -i --rm -v subagentd-data:/data subagentd
FROM python:3.11-slim

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY subagentd/ subagentd/
RUN pip install --no-cache-dir . \
    && rm -rf /src

# A non-root user owns /data, so a fresh named volume mounted there is writable by it; mode 0700
# (a new named volume copies the directory's owner and mode) keeps the sessions private, and
# subagentd creates the database itself 0600 (its -wal and -shm files follow).
RUN useradd --create-home --uid 10001 --user-group subagentd \
    && mkdir -p /data \
    && chown subagentd:subagentd /data \
    && chmod 0700 /data
USER subagentd
WORKDIR /data
VOLUME /data

# `serve` is the default command; arguments given to `docker run` are appended as serve options.
ENTRYPOINT ["subagentd", "--db", "/data/subagentd.db"]
