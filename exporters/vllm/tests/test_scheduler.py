"""The plugin inside vLLM's real scheduler, on CPU, shipping to a real tokenscope.

Needs `TOKENSCOPE_GRPC` (host:port of the native gRPC ingest) and `TOKENSCOPE_HTTP` (the API's
base URL) of a running server: `scripts/test-engines` starts one.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request

import pytest

import engine

GRPC = os.environ.get("TOKENSCOPE_GRPC")
HTTP = os.environ.get("TOKENSCOPE_HTTP")
pytestmark = pytest.mark.skipif(not (GRPC and HTTP), reason="needs a running tokenscope")


def api(path: str, **params) -> dict:
    q = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    with urllib.request.urlopen(f"{HTTP}{path}?{q}", timeout=30) as r:
        return json.load(r)


def run_scenario(instance: str, cls_name: str = "TracingScheduler", num_blocks: int = 90, flush_interval_s: float = 0.5, overlap: bool = False):
    """Four short requests decoding, then a 1,200-token prompt prefilled in 256-token chunks
    under them, then one more; KV cache for 1,440 tokens, so that the answers' growth preempts
    the long request. One more short request's client goes away at step 20 (an abort)."""
    os.environ["TOKENSCOPE_ENDPOINT"] = GRPC
    os.environ["TOKENSCOPE_FLUSH_INTERVAL_S"] = str(flush_interval_s)
    os.environ["TOKENSCOPE_INSTANCE"] = instance
    # The scheduler runs without a tokenizer (as vLLM's own tests do); the exporter loads one.
    os.environ["TOKENSCOPE_TOKENIZER"] = engine.model_dir()
    import tokenscope_vllm

    scheduler = engine.make_scheduler(getattr(tokenscope_vllm, cls_name), num_blocks=num_blocks)
    del os.environ["TOKENSCOPE_FLUSH_INTERVAL_S"]  # read once, by the exporter just made
    shorts = [engine.make_request(f"short-{i}", 40, 120, logprobs=3 if i == 0 else None) for i in range(4)]
    arrivals = {
        0: shorts + [engine.make_request("gone", 40, 120)],
        3: [engine.make_request("long", 1200, 30)],
        12: [engine.make_request("late", 100, 20)],
    }
    run = engine.drive(
        scheduler, arrivals, eos_after={"short-1": 12}, prefill_s_per_token=60e-6, aborts={20: ["gone"]}, overlap=overlap
    )
    assert scheduler.tokenscope.flush(timeout_s=20), scheduler.tokenscope.stats()
    stats = scheduler.tokenscope.stats()
    stats["renumbered_steps"] = scheduler.tokenscope.recorder.refs.renumbered
    scheduler.tokenscope.close()
    return run, stats


@pytest.fixture(scope="module", params=["TracingScheduler", "TracingAsyncScheduler"])
def scenario(request):
    instance = f"vllm-cpu-{request.param}-{os.getpid()}-{time.time_ns()}"
    # The async scheduler runs as vLLM runs it: step k+1 scheduled while step k computes, so the
    # steps overlap. Sending at every poll, steps launched before a send end after it, and their
    # batches go in the next export.
    is_async = "Async" in request.param
    run, stats = run_scenario(instance, request.param, flush_interval_s=0 if is_async else 0.5, overlap=is_async)
    return instance, run, stats


def test_every_request_and_step_arrives(scenario):
    instance, run, stats = scenario
    assert stats["dropped_events"] == 0 and stats["dropped_requests"] == 0, stats
    assert stats["record_errors"] == 0, stats
    assert stats["rejected_requests"] == 0 and stats["rejected_iterations"] == 0, stats
    assert stats["sent_requests"] == 7, stats
    assert stats["hook_errors"] == 0 and stats["export_errors"] == 0 and stats["on"], stats
    assert stats["sent_iterations"] == len(run.steps), stats
    if "Async" in instance:
        assert stats["renumbered_steps"] > 0, stats
    # Texts went by id, each once, and the server had every one it was meant to.
    assert stats["sent_texts"] > 0 and stats["texts_missing"] == 0, stats
    listed = api("/api/v1/requests", instance=instance, limit=50)
    assert sorted(r["request_id"] for r in listed["requests"]) == sorted(run.tokens)


def test_step_compositions_are_the_schedulers(scenario):
    instance, run, _ = scenario
    # Every step the scheduler ran, in order, with the tokens it scheduled: prefill tokens are
    # those of chunks, decode tokens one per decoding request.
    listed = api("/api/v1/requests", instance=instance, limit=50)["requests"]
    start = min(r["arrival_ns"] for r in listed) - 10**9
    end = max(r["arrival_ns"] + int(r["e2e_ms"] * 1e6) for r in listed) + 10**9
    wf = api("/api/v1/waterfall", instance=instance, **{"from": start, "to": end, "width_px": 4000})
    lane = wf["lane"]
    assert lane["lod"] == "steps", lane["lod"]
    stored = [(s["prefill_tokens"] + s["decode_tokens"], s["batch_size"]) for s in lane["steps"]]
    reported = [(sum(step.values()), len(step)) for step in run.steps]
    assert stored == reported
    # The long prompt's chunks were interleaved with the short requests' decoding.
    mixed = [s for s in lane["steps"] if s["prefill_tokens"] >= 176 and s["decode_tokens"] > 0]
    assert mixed, lane["steps"][:10]


def test_tokens_logprobs_and_eos_are_the_schedulers(scenario):
    instance, run, _ = scenario
    for rid, tokens in run.tokens.items():
        d = api(f"/api/v1/requests/{urllib.parse.quote(rid)}", instance=instance)
        assert [t["token_id"] for t in d["tokens"]] == tokens, rid
        assert d["output_tokens"] == len(tokens)
        assert d["engine"] == "vllm"
        # One step per token, in order, each token emitted when its step ended.
        steps = [t["iteration"] for t in d["tokens"]]
        assert None not in steps and steps == sorted(set(steps)), rid
        assert all(t["emitted_ns"] and t["scheduled_ns"] < t["emitted_ns"] for t in d["tokens"]), rid
    long = api("/api/v1/requests/long", instance=instance)
    chunks = [s for s in long["stages"] if s["kind"] == "prefill"]
    assert len(chunks) >= 4 and sum(c["tokens"] for c in chunks) >= 1200, chunks
    assert long["prompt_tokens"] == 1200
    assert long["finish_reason"] == "length"
    assert long["ttft_ms"] is not None and long["ttft_ms"] > 0
    with_lp = api("/api/v1/requests/short-0", instance=instance)
    first = with_lp["tokens"][0]
    assert abs(first["logprob"] - engine.sampled_logprob(first["token_id"])) < 1e-3 and first["rank"] == 2, first
    assert [c["token_id"] for c in first["candidates"]] == [1000, 1001, 1002]
    # Every token has its own row of the steps' arrays: the one it was sampled with.
    lp = [(t["token_id"], round(t["logprob"], 3), t["rank"]) for t in with_lp["tokens"]]
    assert lp == [(t, round(engine.sampled_logprob(t), 3), 2) for t in run.tokens["short-0"]], lp
    assert all([c["token_id"] for c in t["candidates"]] == [1000, 1001, 1002] for t in with_lp["tokens"])
    # Texts from the model's tokenizer, loaded by the exporter.
    assert first["text"] == f"w{first['token_id']}", first
    assert [c["text"] for c in first["candidates"]] == ["w1000", "w1001", "w1002"]
    assert with_lp["sampling"]["temperature"] == pytest.approx(0.7)
    assert with_lp["sampling"]["max_tokens"] == 120
    eos = api("/api/v1/requests/short-1", instance=instance)
    assert eos["finish_reason"] == "stop"
    assert eos["tokens"][-1]["special"] == "eos"
    assert len(eos["tokens"]) == 12


def test_steps_overlap_under_async_scheduling(scenario):
    instance, run, _ = scenario
    if "Async" not in instance:
        pytest.skip("the plain scheduler's steps follow each other")
    # As vLLM runs it, most steps are scheduled before the previous one's output is in.
    listed = api("/api/v1/requests", instance=instance, limit=50)["requests"]
    start = min(r["arrival_ns"] for r in listed) - 10**9
    end = max(r["arrival_ns"] + int(r["e2e_ms"] * 1e6) for r in listed) + 10**9
    steps = api("/api/v1/waterfall", instance=instance, **{"from": start, "to": end, "width_px": 4000})["lane"]["steps"]
    overlapping = sum(1 for a, b in zip(steps, steps[1:]) if b["start_ns"] < a["end_ns"])
    assert overlapping > len(steps) // 2, (overlapping, len(steps))


def test_an_aborted_request_is_recorded(scenario):
    instance, run, _ = scenario
    d = api("/api/v1/requests/gone", instance=instance)
    assert d["finish_reason"] == "abort", d["finish_reason"]
    assert [t["token_id"] for t in d["tokens"]] == run.tokens["gone"]
    assert 10 <= len(run.tokens["gone"]) < 120


def test_preemption_is_recorded(scenario):
    instance, run, _ = scenario
    assert run.preempted, "the scenario must preempt someone"
    for rid in run.preempted:
        d = api(f"/api/v1/requests/{rid}", instance=instance)
        assert d["preemptions"] >= 1, rid
        preempted = [s for s in d["stages"] if s["kind"] == "preempted"]
        assert preempted, d["stages"]
        # Evicted to make room for a short request's next tokens, with what it had computed.
        for s in preempted:
            assert s["by"] in {"short-0", "short-2", "short-3", "gone", "late"}, s
            assert s["tokens"] and s["tokens"] > 0, s


def test_diagnosis_names_the_long_prompt(scenario):
    instance, run, _ = scenario
    # Steps carrying a 256-token chunk take ~19 ms, decode-only ones ~4 ms: a short request that
    # decoded through the chunks watched its stream stop while the long prompt prefilled. (The
    # stall threshold, not the mean: on a loaded machine decode steps vary too much for a
    # 5 ms TPOT SLO to be fair.)
    victims, said = [], {}
    for rid in ("short-0", "short-2", "short-3"):
        dx = api(f"/api/v1/requests/{rid}/diagnosis", instance=instance, tpot_ms=50, stall_ms=12)
        causes = {f["cause"]: f for f in dx["findings"]}
        said[rid] = [(f["cause"], f["culprits"], f["summary"]) for f in dx["findings"]]
        if "prefill_interrupted_decode" in causes:
            victims.append(rid)
            assert "long" in causes["prefill_interrupted_decode"]["culprits"], causes
    assert victims, f"no short request was found slowed by the long prompt's prefill: {said}"


def test_who_asked_and_what_the_prefix_cache_served():
    """The LoRA adapter, the priority and the tenant (from the request's W3C tracestate, which
    vLLM passes on), and the prefix cache: requests sharing a prompt's start share the start of
    their block-hash chains, and the later one is served those blocks from the cache."""
    from vllm.lora.request import LoRARequest

    instance = f"vllm-signals-{os.getpid()}-{time.time_ns()}"
    os.environ["TOKENSCOPE_ENDPOINT"] = GRPC
    os.environ["TOKENSCOPE_INSTANCE"] = instance
    import tokenscope_vllm

    s = engine.make_scheduler(tokenscope_vllm.TracingScheduler)
    system = [7 + i % 300 for i in range(96)]  # six blocks of a shared "system prompt"
    headers = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "rojo=00f067aa0ba902b7,tenant=acme"}
    arrivals = {
        0: [engine.make_request("first", 0, 4, prompt=system + [900 + i for i in range(40)])],
        3: [
            engine.make_request("second", 0, 4, prompt=system + [1900 + i for i in range(40)]),
            engine.make_request(
                "adapted", 30, 4, lora_request=LoRARequest("sql-adapter", 1, "/nowhere"), priority=3, trace_headers=headers
            ),
        ],
    }
    engine.drive(s, arrivals, decode_s=0.001)
    assert s.tokenscope.flush(timeout_s=20), s.tokenscope.stats()
    s.tokenscope.close()
    first, second = (api(f"/api/v1/requests/{rid}", instance=instance) for rid in ("first", "second"))
    a, b = first["prefix_cache"], second["prefix_cache"]
    assert a["blocks"] == b["blocks"] == 136 // engine.BLOCK and a["block_size"] == engine.BLOCK, (a, b)
    assert a["block_hashes"][:6] == b["block_hashes"][:6] and a["block_hashes"][6:] != b["block_hashes"][6:], (a, b)
    assert first["cached_tokens"] == 0 and second["cached_tokens"] == 96 and b["gpu_tokens"] == 96, (first, second)
    adapted = api("/api/v1/requests/adapted", instance=instance)
    assert (adapted["lora_adapter"], adapted["priority"], adapted["tenant"]) == ("sql-adapter", 3, "acme"), adapted
    assert "lora_adapter" not in first and first["priority"] == 0 and "tenant" not in first, first


def test_speculative_decoding_drafts_and_accepted_per_step_and_token():
    """With speculative decoding each step verifies the requests' draft tokens: the stored step
    says how many each had and accepted, and each token whether it was an accepted draft or the
    target model's own, as the (made-up) model decided."""
    instance = f"vllm-spec-{os.getpid()}-{time.time_ns()}"
    os.environ["TOKENSCOPE_ENDPOINT"] = GRPC
    os.environ["TOKENSCOPE_INSTANCE"] = instance
    import tokenscope_vllm

    s = engine.make_scheduler(tokenscope_vllm.TracingScheduler, spec_tokens=3)
    # spec-2 asks for logprobs: under speculation vLLM slices them per request, several rows each.
    arrivals = {0: [engine.make_request(f"spec-{i}", 40, 30, logprobs=3 if i == 2 else None) for i in range(3)]}
    run = engine.drive(s, arrivals, decode_s=0.001)
    assert s.tokenscope.flush(timeout_s=20), s.tokenscope.stats()
    s.tokenscope.close()
    assert run.drafts and any(a < d for d, a in run.drafts.values()) and any(a == d for d, a in run.drafts.values()), run.drafts
    for rid in ("spec-0", "spec-1", "spec-2"):
        d = api(f"/api/v1/requests/{rid}", instance=instance)
        mine = [v for (_, r), v in run.drafts.items() if r == rid]
        tokens = d["tokens"]
        assert len(tokens) == len(run.tokens[rid]) == 30, (rid, len(tokens))
        # Every step that verified drafts for it, with its counts; a step's last token is the
        # target model's (possibly cut by max_tokens: then fewer tokens than accepted + 1).
        steps = {}
        for t in tokens[1:]:
            steps.setdefault(t["iteration"], []).append(t)
        got = [(t[0]["step_draft"]["proposed"], t[0]["step_draft"]["accepted"]) for t in steps.values()]
        assert sorted(got) == sorted(mine), f"{rid}: {got} {mine}"
        for ts in steps.values():
            accepted = ts[0]["step_draft"]["accepted"]
            flags = [t["accepted_draft"] for t in ts]
            assert flags == [True] * accepted + [False] * (len(ts) - accepted) or len(ts) <= accepted, (rid, flags, accepted)
    # Each token of spec-2 with its own row: its logprob and candidates, accepted drafts included.
    lp = api("/api/v1/requests/spec-2", instance=instance)["tokens"]
    assert [(t["token_id"], round(t["logprob"], 3)) for t in lp] == [(t, round(engine.sampled_logprob(t), 3)) for t in run.tokens["spec-2"]], lp[:5]
    assert all([c["token_id"] for c in t["candidates"]] == [1000, 1001, 1002] for t in lp), lp[:3]


def test_a_pd_decode_request_waits_for_its_kv_cache():
    """On a PD decode instance vLLM's KV connector loads each prompt's KV cache from the prefill
    instance: the transfer is a stage as long as the connector took, with the blocks vLLM
    allocated for it, and a transfer past its threshold is what the diagnosis names."""
    import remote_kv
    import tokenscope_vllm

    instance = f"vllm-pd-decode-{os.getpid()}-{time.time_ns()}"
    os.environ["TOKENSCOPE_ENDPOINT"] = GRPC
    os.environ["TOKENSCOPE_INSTANCE"] = instance
    remote_kv.RemotePrefill.took = {"pd-fast": 0.05, "pd-slow": 0.6}
    s = engine.make_scheduler(tokenscope_vllm.TracingScheduler, pd_decode=True)
    arrivals = {
        0: [engine.make_request("pd-fast", 300, 8, remote_prefill=True)],
        2: [engine.make_request("pd-slow", 200, 8, remote_prefill=True), engine.make_request("local", 40, 8)],
    }
    run = engine.drive(s, arrivals, decode_s=0.002)
    assert s.tokenscope.flush(timeout_s=20), s.tokenscope.stats()
    s.tokenscope.close()
    for rid, prompt, took in (("pd-fast", 300, 0.05), ("pd-slow", 200, 0.6)):
        d = api(f"/api/v1/requests/{rid}", instance=instance)
        assert d["role"] == "decode" and [t["token_id"] for t in d["tokens"]] == run.tokens[rid], d
        kv = [st for st in d["stages"] if st["kind"] == "kv_transfer"]
        assert len(kv) == 1, d["stages"]
        ms = (kv[0]["end_ns"] - kv[0]["start_ns"]) / 1e6
        # All but the prompt's last token came from the prefill instance, in whole blocks.
        assert kv[0]["blocks"] == -(-(prompt - 1) // engine.BLOCK), kv[0]
        assert took * 1000 <= ms <= took * 1000 + 250, (rid, ms)
        first = d["stages"].index(kv[0])
        assert all(st["start_ns"] >= kv[0]["end_ns"] for st in d["stages"][first + 1 :] if st["kind"] != "queued"), d["stages"]
        # Prefilled there: here it computes its prompt's last token again, to sample from.
        assert sum(st["tokens"] for st in d["stages"] if st["kind"] == "prefill") == 1, d["stages"]
    local = api("/api/v1/requests/local", instance=instance)
    assert not [st for st in local["stages"] if st["kind"] == "kv_transfer"], local["stages"]
    slow = api("/api/v1/requests/pd-slow/diagnosis", instance=instance, ttft_ms=300, kv_transfer_ms=300)
    causes = [f["cause"] for f in slow["findings"]]
    assert causes[:1] == ["kv_transfer_slow"], slow["findings"]
    fast = api("/api/v1/requests/pd-fast/diagnosis", instance=instance, ttft_ms=300, kv_transfer_ms=300)
    assert "kv_transfer_slow" not in [f["cause"] for f in fast["findings"]], fast["findings"]


def test_a_tokenscope_that_is_down_costs_drops_not_the_engine():
    os.environ["TOKENSCOPE_ENDPOINT"] = "127.0.0.1:9"
    os.environ["TOKENSCOPE_INSTANCE"] = "nowhere"
    import tokenscope_vllm

    scheduler = engine.make_scheduler(tokenscope_vllm.TracingScheduler)
    run = engine.drive(scheduler, {0: [engine.make_request("a", 30, 5)]}, decode_s=0)
    assert run.tokens["a"] and len(run.tokens["a"]) == 5
    scheduler.tokenscope.flush(timeout_s=10)
    stats = scheduler.tokenscope.stats()
    scheduler.tokenscope.close()
    assert stats["sent_requests"] == 0 and stats["dropped_requests"] == 1, stats


def test_a_wrong_ingest_key_costs_drops_not_the_engine():
    os.environ["TOKENSCOPE_ENDPOINT"] = GRPC
    os.environ["TOKENSCOPE_INSTANCE"] = "wrong-key"
    key = os.environ["TOKENSCOPE_INGEST_KEY"]
    os.environ["TOKENSCOPE_INGEST_KEY"] = "not-the-servers-key-0000"
    try:
        import tokenscope_vllm

        scheduler = engine.make_scheduler(tokenscope_vllm.TracingScheduler)
        run = engine.drive(scheduler, {0: [engine.make_request("k", 30, 5)]}, decode_s=0)
        assert len(run.tokens["k"]) == 5
        scheduler.tokenscope.flush(timeout_s=10)
        stats = scheduler.tokenscope.stats()
        scheduler.tokenscope.close()
    finally:
        os.environ["TOKENSCOPE_INGEST_KEY"] = key
    assert stats["sent_requests"] == 0 and stats["dropped_requests"] == 1, stats
