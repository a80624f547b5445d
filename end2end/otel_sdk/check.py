"""Drives tokenscope's OTLP receivers with the real OpenTelemetry Python SDK.

Emits vLLM-shaped spans (llm_request with LoongSuite token events) and SGLang-shaped spans (stage
spans exported before their root, in separate exports) over OTLP/gRPC and OTLP/HTTP, then reads
the requests back through tokenscope's query API, and `/metrics` through Prometheus's own parser
(prometheus_client): OpenMetrics with exemplars naming those requests, and the 0.0.4 format.
scripts/test runs it against the e2e server (TOKENSCOPE_E2E_URL, TOKENSCOPE_E2E_GRPC).
"""

import json
import math
import os
import sys
import time
import urllib.error
import urllib.request

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, set_span_in_context

HTTP = os.environ["TOKENSCOPE_E2E_URL"]
GRPC = os.environ["TOKENSCOPE_E2E_GRPC"]
MS = 1_000_000
T0 = time.time_ns() - 60_000 * MS  # a minute ago, so the spans look like real, recent requests


def tracer(exporter, resource):
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, provider.get_tracer("tokenscope-e2e")


def emit_vllm(tr, rid, t0):
    """The span vLLM's output processor makes, plus the LoongSuite token events."""
    span = tr.start_span("llm_request", kind=SpanKind.SERVER, start_time=t0)
    span.set_attributes({
        "gen_ai.latency.time_to_first_token": 0.1,
        "gen_ai.latency.e2e": 0.16,
        "gen_ai.latency.time_in_queue": 0.02,
        "gen_ai.latency.time_in_model_prefill": 0.07,
        "gen_ai.usage.prompt_tokens": 512,
        "gen_ai.usage.completion_tokens": 3,
        "gen_ai.request.id": rid,
        "gen_ai.request.temperature": 0.8,
        "gen_ai.response.model": "llama-3.1-8b",
        "gen_ai.response.finish_reasons": ["stop"],
    })
    tokens = [
        (100, [11, 12], ["Hi", "Hello"], [-0.1, -2.5]),
        (130, [13, 14, 13], [" there", " you", " there"], [-0.7, -0.6, -0.7]),  # rank 2, repeated
        (160, [2, 15], ["</s>", "!"], [-2.3, -0.2]),  # EOS sampled at rank 2
    ]
    for at, ids, texts, lps in tokens:
        span.add_event("gen_ai.token.scheduled", {"gen_ai.iteration.batch_size": 8,
                                                  "gen_ai.iteration.waiting_requests": 1},
                       timestamp=t0 + (at - 20) * MS)
        span.add_event("gen_ai.token.generated", {
            "gen_ai.response.candidate.token_ids": ids,
            "gen_ai.response.candidate.decoded_tokens": texts,
            "gen_ai.response.candidate.logprobs": lps,
        }, timestamp=t0 + at * MS)
    span.end(end_time=t0 + 161 * MS)


def emit_sglang(provider, tr, rid, t0):
    """SGLang's span tree; stage spans are flushed in two exports before the root's."""
    room = tr.start_span("Bootstrap Room 0x0", start_time=t0, attributes={"bootstrap_room": "0x0"})
    root = tr.start_span(f" Req {rid[:8]}", context=set_span_in_context(room), start_time=t0, attributes={"rid": rid})
    thread = tr.start_span("Scheduler [TP 0] (host:abcdef12 | pid:7)", context=set_span_in_context(root),
                           start_time=t0, attributes={"tp_rank": 0, "host_id": "abcdef12", "pid": 7,
                                                      "thread_label": "Scheduler"})
    ctx = set_span_in_context(thread)
    for name, start, end in [("request_process", 1, 2), ("prefill_waiting", 2, 52), ("prefill_forward", 52, 90)]:
        tr.start_span(name, context=ctx, start_time=t0 + start * MS).end(end_time=t0 + end * MS)
    provider.force_flush()
    decode = tr.start_span("decode_loop", context=ctx, start_time=t0 + 90 * MS, attributes={"decode_ct": 9})
    decode.end(end_time=t0 + 290 * MS)
    thread.end(end_time=t0 + 290 * MS)
    provider.force_flush()
    root.set_attributes({"gen_ai.usage.prompt_tokens": 2048, "gen_ai.usage.completion_tokens": 11,
                         "gen_ai.response.model": "qwen3-8b"})
    root.end(end_time=t0 + 290 * MS)
    room.end(end_time=t0 + 290 * MS)
    provider.force_flush()


def grpc_gzip():
    from grpc import Compression
    return Compression.Gzip


def get(rid):
    deadline = time.time() + 15
    while True:
        try:
            with urllib.request.urlopen(f"{HTTP}/api/v1/requests/{rid}") as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            if e.code != 404 or time.time() > deadline:
                raise


def close(a, b):
    return a is not None and abs(a - b) < 1e-6


def check_vllm(rid):
    d = get(rid)
    t = d["tokens"]
    assert d["engine"] == "vllm" and d["model"] == "llama-3.1-8b", d
    assert close(d["ttft_ms"], 100) and close(d["tpot_ms"], 30) and close(d["queue_ms"], 20), d
    assert [x["rank"] for x in t] == [1, 2, 2], t
    assert [c["token_id"] for c in t[1]["candidates"]] == [14, 13], t[1]
    assert t[2]["special"] == "eos" and t[2]["is_special"], t[2]
    assert abs(math.exp(t[2]["logprob"]) - 0.1) < 0.001, t[2]
    assert t[0]["batch_size"] == 8 and t[0]["waiting"] == 1, t[0]


def check_sglang(rid):
    d = get(rid)
    assert d["engine"] == "sglang" and d["model"] == "qwen3-8b", d
    assert close(d["ttft_ms"], 90) and close(d["queue_ms"], 50) and close(d["tpot_ms"], 20), d


def check_metrics(rids):
    """The latency histograms parse as OpenMetrics, and their exemplars name requests that were sent."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
    from prometheus_client.parser import text_string_to_metric_families as text_format

    req = urllib.request.Request(f"{HTTP}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text"), resp.headers
        families = {f.name: f for f in openmetrics(resp.read().decode())}  # raises on any error
    exemplars = {}
    for name in ("tokenscope_request_ttft_seconds", "tokenscope_request_tpot_seconds"):
        assert families[name].type == "histogram", families[name]
        for sample in families[name].samples:
            if sample.exemplar is not None:
                exemplars[sample.exemplar.labels["request_id"]] = sample.labels["instance"]
    missing = [rid for rid in rids if rid not in exemplars]
    # Each request is the last in its bucket unless a later one fell there too: at least one is.
    assert len(missing) < len(rids), f"no exemplar names {rids}: {exemplars}"
    for rid, instance in exemplars.items():
        if rid in rids:
            assert get(rid)["instance"] == instance, (rid, instance)
    with urllib.request.urlopen(f"{HTTP}/metrics") as resp:
        plain = {f.name for f in text_format(resp.read().decode())}
    assert "tokenscope_request_ttft_seconds" in plain, plain


def main():
    results = []
    stamp = str(time.time_ns())[-9:]
    cases = []

    provider, tr = tracer(GrpcExporter(endpoint=GRPC, insecure=True), {"service.name": "vllm", "service.instance.id": "sdk-grpc"})
    emit_vllm(tr, f"sdk-vllm-grpc-{stamp}", T0)
    provider.force_flush()
    cases.append(("vLLM over OTLP/gRPC", lambda: check_vllm(f"sdk-vllm-grpc-{stamp}")))

    provider, tr = tracer(HttpExporter(endpoint=f"{HTTP}/v1/traces"), {"service.name": "vllm", "service.instance.id": "sdk-http"})
    emit_vllm(tr, f"sdk-vllm-http-{stamp}", T0 + 1000 * MS)
    provider.force_flush()
    cases.append(("vLLM over OTLP/HTTP", lambda: check_vllm(f"sdk-vllm-http-{stamp}")))

    # gzip-compressed bodies, as exporters send with OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=gzip
    exporter = HttpExporter(endpoint=f"{HTTP}/v1/traces", compression=HttpCompression.Gzip)
    provider, tr = tracer(exporter, {"service.name": "sglang", "host.name": "sdk-node"})
    emit_sglang(provider, tr, f"sgl{stamp}http", T0 + 2000 * MS)
    cases.append(("SGLang over OTLP/HTTP (gzip), three exports", lambda: check_sglang(f"sgl{stamp}http")))

    exporter = GrpcExporter(endpoint=GRPC, insecure=True, compression=grpc_gzip())
    provider, tr = tracer(exporter, {"service.name": "sglang", "host.name": "sdk-node-2"})
    emit_sglang(provider, tr, f"sgl{stamp}grpc", T0 + 3000 * MS)
    cases.append(("SGLang over OTLP/gRPC (gzip), three exports", lambda: check_sglang(f"sgl{stamp}grpc")))

    sent = [f"sdk-vllm-grpc-{stamp}", f"sdk-vllm-http-{stamp}", f"sgl{stamp}http", f"sgl{stamp}grpc"]
    cases.append(("/metrics: OpenMetrics exemplars name the requests just sent", lambda: check_metrics(sent)))

    for name, check in cases:
        try:
            check()
            results.append(True)
            print(f"  ok    {name}")
        except Exception as e:  # report every case, then fail
            results.append(False)
            print(f"  FAIL  {name}: {e!r}")
    passed = sum(results)
    print(f"otel-sdk: {passed} passed, {len(results) - passed} failed")
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
