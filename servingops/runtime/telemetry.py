"""OpenTelemetry set-up: spans go to an OTLP endpoint when one is configured, nowhere otherwise."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

_configured = False


def configure_tracing(service_name: str) -> TracerProvider:
    """Install a TracerProvider once per process.

    The exporter is chosen by the standard OTEL_EXPORTER_OTLP_ENDPOINT /
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables; without them spans are created (so trace ids
    still link bridge signals to workflows in logs) but not exported.
    """
    global _configured
    provider = trace.get_tracer_provider()
    if _configured and isinstance(provider, TracerProvider):
        return provider
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _configured = True
    return provider
