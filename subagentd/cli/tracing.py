"""Whether a serving process traces (the standard OTEL_* environment), and starting its tracer:
OpenTelemetry is imported only then (subagentd/otel/traces.py, the `otel` extra)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from subagentd.core.service import Service
    from subagentd.core.store import Store

log = logging.getLogger("subagentd")


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard environment asks for traces: an OTLP endpoint, or `otlp` among
    OTEL_TRACES_EXPORTER; never with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [e.strip() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")]
    if "none" in exporters:
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return bool(endpoint) or "otlp" in exporters


def start_tracing(service: Service, store: Store) -> None:
    """Give core the OpenTelemetry tracer when the environment asks for traces (a warning, and
    no traces, when the `otel` extra is not installed)."""
    if not configured():
        return
    try:
        from subagentd.otel import traces as otel
    except ImportError as exc:
        from subagentd.extras import install_hint

        log.warning(
            "OTEL_* asks for traces but OpenTelemetry is not installed (%s): %s;"
            " serving without traces",
            exc,
            install_hint("otel"),
        )
        return
    service.trace_with(otel.start(store))
    log.info("tracing: OpenTelemetry spans exported over OTLP/HTTP")
