"""Sends vLLM-shaped requests to tokenscope with the OpenTelemetry Python SDK, one at a time, for
the live benchmark (end2end/bench/live.mjs): each span is exported as it ends (a simple span
processor over OTLP/gRPC), and a line `{"id": ..., "sent_ms": ...}` says when its export began,
in milliseconds since the epoch (the browser's clock on the same machine).

usage: live_send.py GRPC_ENDPOINT INSTANCE COUNT INTERVAL_S [PREFIX]
"""

import json
import sys
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

MS = 1_000_000


def main():
    endpoint, instance, count, interval = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    prefix = sys.argv[5] if len(sys.argv) > 5 else "live"
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm", "service.instance.id": instance}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    tr = provider.get_tracer("tokenscope-live-bench")
    for k in range(count):
        rid = f"{prefix}-{k:04d}"
        end = time.time_ns()
        t0 = end - 160 * MS
        span = tr.start_span("llm_request", kind=SpanKind.SERVER, start_time=t0)
        span.set_attributes({
            "gen_ai.latency.time_to_first_token": 0.1,
            "gen_ai.latency.e2e": 0.16,
            "gen_ai.latency.time_in_queue": 0.02,
            "gen_ai.usage.prompt_tokens": 512,
            "gen_ai.usage.completion_tokens": 3,
            "gen_ai.request.id": rid,
            "gen_ai.response.model": "llama-3.1-8b",
            "gen_ai.response.finish_reasons": ["stop"],
        })
        sent_ms = time.time() * 1000
        span.end(end_time=end)
        print(json.dumps({"id": rid, "sent_ms": sent_ms}), flush=True)
        time.sleep(interval)
    provider.shutdown()


if __name__ == "__main__":
    main()
