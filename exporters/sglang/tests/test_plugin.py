"""The plugin loaded by SGLang's own plugin loader, its hooks on SGLang's `Scheduler`, fed SGLang's
own requests and batches (`engine`), shipping to a real tokenscope.

Needs `TOKENSCOPE_GRPC` and `TOKENSCOPE_HTTP` of a running server: `scripts/test-engines` starts
one, and installs SGLang and the plugin (its entry point must be installed to be found).
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


@pytest.fixture(scope="module", params=["normal", "overlap"])
def scenario(plugins, request):
    """Four short requests decoding; a 1,200-token prompt prefilled in 256-token chunks that hold
    their decoding back (SGLang's default); a late request prefilled with the running decodes
    (mixed chunk); a KV pool small enough that a request is retracted and recomputed. Under
    SGLang's normal event loop and under its overlap scheduler (its default), where each step's
    output is processed after the next step has been launched."""
    instance = f"sglang-{request.param}-{os.getpid()}-{time.time_ns()}"
    engine.start(instance, GRPC)
    s = engine.make_scheduler(kv_tokens=1400, eos_after={"short-1": 12})
    shorts = [engine.make_request(f"short-{i}", 40, 120, logprobs=3 if i == 0 else 0) for i in range(4)]
    arrivals = {
        0: shorts,
        3: [engine.make_request("long", 1200, 30)],
        4: [engine.make_request("gone", 300, 20)],  # no room: waits, and its client gives up
        14: [engine.make_request("late", 100, 20, lora_id="sql-adapter", priority=3)],
    }
    run = engine.serve(s, arrivals, mixed_from=14, overlap=request.param == "overlap", aborts={8: "gone"})
    # No flush here: the plugin sends what it holds when the event loop returns.
    return instance, run, engine.exporter(s).stats()


def test_sglangs_loader_applies_the_hooks(plugins):
    from sglang.srt.plugins.hook_registry import HookRegistry

    hooked_methods = ("_add_request_to_queue", "run_batch", "process_batch_result", "run_event_loop", "_release_aborted_request")
    for method in hooked_methods:
        assert f"{engine.TARGET}.{method}" in HookRegistry._patched, method
        # The plugin's AROUND wrapper (around the model's REPLACE, where the test made one).
        assert getattr(getattr(plugins, method), "__wrapped__", None) is not None, method


def test_every_request_and_step_arrives(scenario):
    instance, run, stats = scenario
    assert stats["dropped_events"] == 0 and stats["dropped_requests"] == 0, stats
    assert stats["record_errors"] == 0, stats
    assert stats["rejected_requests"] == 0 and stats["rejected_iterations"] == 0, stats
    assert stats["sent_requests"] == 7, stats
    assert stats["sent_iterations"] == len(run.steps), stats
    listed = api("/api/v1/requests", instance=instance, limit=50)["requests"]
    assert run.aborted == ["gone"]
    assert sorted(r["request_id"] for r in listed) == sorted([*run.tokens, "gone"])
    assert {r["engine"] for r in listed} == {"sglang"}
    gone = api("/api/v1/requests/gone", instance=instance)
    assert gone["finish_reason"] == "abort" and gone["output_tokens"] == 0, gone
    # Given up on while the long prompt had the engine and the KV cache. This engine plays its
    # steps in milliseconds, and a client that gives up within the SLOs is no incident; with SLOs
    # shorter than its wait, the diagnosis says why it got no answer.
    dx = api("/api/v1/requests/gone/diagnosis", instance=instance, ttft_ms=1, stall_ms=1)
    assert dx["verdict"] == "degraded", dx
    assert dx["findings"][0]["summary"].startswith("No first token: aborted after"), dx


def test_step_compositions_are_the_engines(scenario):
    instance, run, _ = scenario
    listed = api("/api/v1/requests", instance=instance, limit=50)["requests"]
    start_ns = min(r["arrival_ns"] for r in listed) - 10**9
    end_ns = max(r["arrival_ns"] + int(r["e2e_ms"] * 1e6) for r in listed) + 10**9
    lane = api("/api/v1/waterfall", instance=instance, **{"from": start_ns, "to": end_ns, "width_px": 4000})["lane"]
    assert lane["lod"] == "steps", lane["lod"]
    stored = [(s["prefill_tokens"], s["decode_tokens"], s["batch_size"]) for s in lane["steps"]]
    reported = [
        (
            sum(t for phase, t in step.values() if phase == "prefill"),
            sum(t for phase, t in step.values() if phase == "decode"),
            len(step),
        )
        for step in run.steps
    ]
    assert stored == reported
    # Chunks held decoding back (prefill-only steps of 256), and the late request was prefilled
    # with the decodes in one step.
    assert sum(1 for p, d, _ in stored if p == 256 and d == 0) >= 4, stored[:12]
    assert any(p > 0 and d > 0 for p, d, _ in stored), stored


def test_tokens_logprobs_and_eos_are_the_engines(scenario):
    instance, run, _ = scenario
    for rid, tokens in run.tokens.items():
        d = api(f"/api/v1/requests/{urllib.parse.quote(rid)}", instance=instance)
        assert [t["token_id"] for t in d["tokens"]] == tokens, rid
        assert d["engine"] == "sglang"
        steps = [t["iteration"] for t in d["tokens"]]
        assert None not in steps and steps == sorted(set(steps)), rid
        # Each token on the step that made it: step ids and SGLang's forward_iter both count
        # launched steps, so their distances from the first token's agree.
        made = run.made[rid]
        assert [x - steps[0] for x in steps] == [m - made[0] for m in made], rid
        assert all(t["emitted_ns"] and t["scheduled_ns"] < t["emitted_ns"] for t in d["tokens"]), rid
    long = api("/api/v1/requests/long", instance=instance)
    chunks = [s for s in long["stages"] if s["kind"] == "prefill"]
    assert len(chunks) >= 5 and sum(c["tokens"] for c in chunks) >= 1200, chunks
    # 4 × 256 + 176: the fifth chunk finishes the prompt and samples the first token.
    assert [c["tokens"] for c in chunks[:5]] == [256, 256, 256, 256, 176], chunks
    assert long["tokens"][0]["iteration"] == chunks[4]["iteration"], (long["tokens"][0], chunks)
    assert long["prompt_tokens"] == 1200
    assert long["finish_reason"] == "length" and long["output_tokens"] == 30
    assert long["ttft_ms"] is not None and long["ttft_ms"] > 0
    with_lp = api("/api/v1/requests/short-0", instance=instance)
    first = with_lp["tokens"][0]
    assert abs(first["logprob"] + 0.5) < 1e-3, first
    assert [c["token_id"] for c in first["candidates"]] == [1000, 1001, 1002]
    assert with_lp["sampling"]["temperature"] == pytest.approx(0.7)
    assert with_lp["sampling"]["max_tokens"] == 120
    eos = api("/api/v1/requests/short-1", instance=instance)
    assert eos["finish_reason"] == "stop"
    assert eos["tokens"][-1]["special"] == "eos" and len(eos["tokens"]) == 12


def test_lora_adapter_and_priority_are_the_requests(scenario):
    instance, _, _ = scenario
    late = api("/api/v1/requests/late", instance=instance)
    assert (late["lora_adapter"], late["priority"]) == ("sql-adapter", 3), late
    assert "lora_adapter" not in api("/api/v1/requests/short-0", instance=instance)


def test_retraction_is_recorded(scenario):
    instance, run, _ = scenario
    assert run.retracted, "the scenario must retract someone"
    for rid in set(run.retracted):
        d = api(f"/api/v1/requests/{urllib.parse.quote(rid)}", instance=instance)
        assert d["preemptions"] >= 1, rid
        retracted = [s for s in d["stages"] if s["kind"] == "preempted"]
        # Made room for no one request; it computes its prompt and output again.
        assert retracted and all("by" not in s and s["tokens"] > d["prompt_tokens"] for s in retracted), d["stages"]


def test_diagnosis_names_the_long_prompt(scenario):
    instance, _, _ = scenario
    victims = []
    for rid in ("short-0", "short-2", "short-3"):
        dx = api(f"/api/v1/requests/{rid}/diagnosis", instance=instance, tpot_ms=50, stall_ms=12)
        causes = {f["cause"]: f for f in dx["findings"]}
        if "prefill_interrupted_decode" in causes:
            victims.append(rid)
            assert "long" in causes["prefill_interrupted_decode"]["culprits"], causes
    assert victims, "no short request was found held back by the long prompt's prefill"


def test_a_priority_preemption_names_the_request_it_made_room_for(plugins):
    """With priority scheduling and preemption, an urgent request that does not fit evicts
    running requests of a lower priority: each victim's preemption names it, with the tokens the
    victim computes again (its prompt and what it had made: SGLang frees all of its KV)."""
    instance = f"sglang-priority-{os.getpid()}-{time.time_ns()}"
    engine.start(instance, GRPC)
    s = engine.make_scheduler(kv_tokens=1000)
    s.enable_priority_preemption = True
    arrivals = {
        0: [engine.make_request(f"low-{i}", 250, 60, priority=0) for i in range(3)],
        6: [engine.make_request("urgent", 400, 10, priority=5)],
    }
    run = engine.serve(s, arrivals)
    assert run.preempted and {by for by, _ in run.preempted.values()} == {"urgent"}, run.preempted
    assert engine.exporter(s).stats()["record_errors"] == 0
    for rid, (by, had) in run.preempted.items():
        d = api(f"/api/v1/requests/{rid}", instance=instance)
        assert [t["token_id"] for t in d["tokens"]] == run.tokens[rid], rid
        preempted = [st for st in d["stages"] if st["kind"] == "preempted"]
        assert [(st.get("by"), st["tokens"]) for st in preempted] == [(by, had)], d["stages"]
    urgent = api("/api/v1/requests/urgent", instance=instance)
    assert not [st for st in urgent["stages"] if st["kind"] == "preempted"], urgent["stages"]


def test_speculative_decoding_drafts_and_accepted_per_step_and_token(plugins):
    """With speculative decoding each decode step verifies each request's drafts: the stored
    step says how many each had and accepted, each token whether it was an accepted draft or the
    target model's, as the (made-up) model decided; a step that accepts past the length limit
    or an EOS is cut where SGLang cuts what the client gets."""
    instance = f"sglang-spec-{os.getpid()}-{time.time_ns()}"
    engine.start(instance, GRPC)
    s = engine.make_scheduler(decode_s=0.001, spec_drafts=3, eos_after={"spec-1": 17})
    arrivals = {0: [engine.make_request(f"spec-{i}", 40, 30, logprobs=3 if i == 2 else 0) for i in range(3)]}
    run = engine.serve(s, arrivals)
    assert engine.exporter(s).stats()["record_errors"] == 0
    drafts = run.drafts
    assert any(a < d for d, a in drafts.values()) and any(a == d for d, a in drafts.values()), drafts
    for rid in ("spec-0", "spec-1", "spec-2"):
        d = api(f"/api/v1/requests/{rid}", instance=instance)
        tokens = d["tokens"]
        assert [t["token_id"] for t in tokens] == run.tokens[rid], rid
        assert [t["iteration"] for t in tokens][1:] and all(t["emitted_ns"] for t in tokens), tokens[:3]
        # Every step that verified drafts for it, with its counts, up to the one that finished it.
        steps = {}
        for t in tokens[1:]:
            steps.setdefault(t["iteration"], []).append(t)
        got = [(ts[0]["step_draft"]["proposed"], ts[0]["step_draft"]["accepted"]) for ts in steps.values()]
        mine = [v for (_, r), v in sorted(drafts.items()) if r == rid][: len(got)]
        assert got == mine, f"{rid}: {got} {mine}"
        for ts in steps.values():
            accepted = ts[0]["step_draft"]["accepted"]
            flags = [t["accepted_draft"] for t in ts]
            assert flags == [True] * accepted + [False] * (len(ts) - accepted) or len(ts) <= accepted, (rid, flags, accepted)
    assert len(run.tokens["spec-0"]) == 30 and run.tokens["spec-1"][-1] == engine.EOS, run.tokens
    lp = api("/api/v1/requests/spec-2", instance=instance)["tokens"]
    assert len(lp) == 30 and all(round(t["logprob"], 3) == -0.5 for t in lp), lp[:3]


def test_a_pd_decode_part_finishes_with_its_handoff_token(plugins):
    """On a PD decode instance each request's first token comes with its KV cache from the
    prefill instance, appended by SGLang outside any step: the part still finishes when its last
    step does, the handed-off token first (no step here), and the transfer is a stage."""
    from sglang.srt.disaggregation.utils import DisaggregationMode

    instance = f"sglang-pd-decode-{os.getpid()}-{time.time_ns()}"
    engine.start(instance, GRPC)
    s = engine.make_scheduler()
    s.disaggregation_mode = DisaggregationMode.DECODE
    run = engine.serve(s, {0: [engine.make_request("pd-1", 300, 12)], 3: [engine.make_request("pd-2", 200, 8)]})
    stats = engine.exporter(s).stats()
    assert stats["sent_requests"] == 2 and stats["record_errors"] == 0, stats
    for rid, n in (("pd-1", 12), ("pd-2", 8)):
        d = api(f"/api/v1/requests/{rid}", instance=instance)
        assert d["role"] == "decode"
        assert [t["token_id"] for t in d["tokens"]] == run.tokens[rid] and len(run.tokens[rid]) == n, d["tokens"]
        first, rest = d["tokens"][0], d["tokens"][1:]
        assert first["token_id"] == engine.HANDOFF and first["iteration"] is None, first
        assert all(t["iteration"] for t in rest) and all(t["emitted_ns"] for t in d["tokens"]), d["tokens"]
        assert d["ttft_ms"] is not None
        kv = [st for st in d["stages"] if st["kind"] == "kv_transfer"]
        assert len(kv) == 1 and 45 <= (kv[0]["end_ns"] - kv[0]["start_ns"]) / 1e6 <= 80, d["stages"]


def test_a_tokenscope_that_is_down_costs_drops_not_the_engine(plugins):
    engine.start("nowhere", "127.0.0.1:9")
    s = engine.make_scheduler()
    started = time.monotonic()
    run = engine.serve(s, {0: [engine.make_request("a", 30, 5)]})
    assert len(run.tokens["a"]) == 5
    assert time.monotonic() - started < 8, "a dead endpoint held up the engine's shutdown"
    stats = engine.exporter(s).stats()
    assert stats["sent_requests"] == 0 and stats["dropped_requests"] == 1, stats


def test_only_the_first_rank_of_a_group_exports(plugins):
    from sglang.srt.runtime_context import get_parallel

    # Tensor-parallel ranks run the same steps as rank 0: they would send every step twice.
    with get_parallel().override(tp_size=2, attn_tp_size=2, tp_rank=1, attn_tp_rank=1):
        assert engine.exporter(engine.make_scheduler()) is None
    with get_parallel().override(tp_size=2, attn_tp_size=2, tp_rank=0, attn_tp_rank=0):
        ts = engine.exporter(engine.make_scheduler())
        assert ts is not None
        ts.close()
