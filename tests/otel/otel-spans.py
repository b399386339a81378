"""A program under the real OpenTelemetry SDK (PyPI opentelemetry-sdk) whose spans reach fleetprof.

A span processor hands each span the tracer starts to the agent with its ids and name
(fleetprof_span_begin_ids, by ctypes) and ends it there when the tracer ends it
(fleetprof_span_end); the SDK's in-memory exporter keeps what the tracer exported, written to
OUT as "trace_id span_id name" lines (hex, as W3C writes them). Run under the agent:
  FLEETPROF_OUTPUT=DIR LD_PRELOAD=libfleetprof.so python otel-spans.py LIB OUT N
"""
import ctypes
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class FleetprofSpans(SpanProcessor):
    """Begins and ends a fleetprof span with each OpenTelemetry span, on the same thread."""

    def __init__(self, lib):
        self.begin = lib.fleetprof_span_begin_ids
        self.begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
        self.begin.restype = ctypes.c_int
        self.end = lib.fleetprof_span_end
        self.end.restype = ctypes.c_int

    def on_start(self, span, parent_context=None):
        c = span.get_span_context()
        rc = self.begin(c.trace_id.to_bytes(16, "big"), c.span_id.to_bytes(8, "big"),
                        span.name.encode())
        if rc != 0:
            raise RuntimeError(f"fleetprof_span_begin_ids returned {rc}")

    def on_end(self, span):
        rc = self.end()
        if rc != 0:
            raise RuntimeError(f"fleetprof_span_end returned {rc}")


def burn(n):
    x = 1
    for i in range(n):
        x = (x * 6364136223846793005 + i) & 0xFFFFFFFFFFFFFFFF
    return x


def main():
    lib = ctypes.CDLL(sys.argv[1])
    out, n = sys.argv[2], int(sys.argv[3])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(FleetprofSpans(lib))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("otel-spans")
    for i in range(n):
        name = "GET /item" if i % 2 else "POST /order"
        with tracer.start_as_current_span(name):
            burn(2000)
            with tracer.start_as_current_span("db query"):
                burn(1000)
    provider.shutdown()
    with open(out, "w") as f:
        for s in exporter.get_finished_spans():
            c = s.get_span_context()
            f.write(f"{c.trace_id:032x} {c.span_id:016x} {s.name}\n")


if __name__ == "__main__":
    main()
