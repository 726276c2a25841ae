"""OpenTelemetry traces (the `otel` extra): core's tracing hooks as spans (`traces.py`) and
sending them (`export.py`). Imported only when OTEL_* asks for traces.
"""
