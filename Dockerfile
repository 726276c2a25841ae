# subagentd as a container: JSON-RPC on stdin/stdout (run with -i), the database on a volume.
#   docker build -t subagentd . && docker run -i --rm -v subagentd-data:/data subagentd
#   docker run --rm -v subagentd-data:/data subagentd inspect     (also: stats, schema, --version)
FROM python:3.11-slim

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
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

# The database every command uses unless given --db (SUBAGENTD_DB is the --db option's variable).
ENV SUBAGENTD_DB=/data/subagentd.db

# `docker run -i IMAGE` serves (serve is the default command); `docker run IMAGE inspect`,
# `... stats`, `... schema`, `... --version` run those commands; serve options may follow.
ENTRYPOINT ["subagentd"]
