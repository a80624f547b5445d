"""What the recorders share (`tokenscope_exporter.record`), on its own: the tenant read from a
request's trace headers, block hashes folded to 64 bits, and the wire encoding of the new fields."""

from __future__ import annotations

import hashlib

from tokenscope_exporter import wire
from tokenscope_exporter.record import BLOCK_HASHES, fold_hashes, tenant_of


def test_the_tenant_comes_from_baggage_or_tracestate_and_nothing_else():
    assert tenant_of(None) == "" and tenant_of({}) == ""
    assert tenant_of({"tracestate": "rojo=00f067aa0ba902b7,tenant=acme"}) == "acme"
    # Baggage values are percent-encoded and may carry properties after a semicolon.
    assert tenant_of({"baggage": "user=7, tenant=ac%20me;ttl=3"}) == "ac me"
    # Baggage first: it is the header meant for such entries.
    assert tenant_of({"baggage": "tenant=b", "tracestate": "tenant=t"}) == "b"
    assert tenant_of({"tracestate": "tenantx=no,xtenant=no"}) == ""
    assert tenant_of({"baggage": "org=globex"}, key="org") == "globex"
    assert len(tenant_of({"baggage": "tenant=" + "x" * 1000})) == 256


def test_block_hashes_fold_to_64_bits_and_keep_the_chain_start():
    digests = [hashlib.sha256(bytes([i])).digest() for i in range(100)]
    folded = fold_hashes(digests)
    assert len(folded) == BLOCK_HASHES
    assert folded[0] == int.from_bytes(digests[0][:8], "little")
    assert all(0 <= h < 1 << 64 for h in folded)
    assert fold_hashes([-1, 5]) == [(1 << 64) - 1, 5]


def test_a_prefix_cache_is_encoded_as_trace_proto_says():
    body = wire.prefix_cache(96, 0, 32, 16, [1, (1 << 64) - 1], 9)
    # gpu_tokens=96, external_tokens=32, block_size=16, block_hashes packed fixed64, blocks=9.
    assert body == bytes([0x08, 96, 0x18, 32, 0x20, 16, 0x2A, 16]) + (1).to_bytes(8, "little") + b"\xff" * 8 + bytes([0x30, 9])


def test_logprob_rows_of_several_widths_come_back_one_per_token_in_step_order():
    """vLLM's logprob arrays are as wide as the batch's largest top-k: when a request asking
    for more joins, the widths change; each token keeps its own row, in the order it was made."""
    from types import SimpleNamespace

    import numpy as np

    from tokenscope_vllm.recorder import Record, StepLogprobs

    lp = StepLogprobs()
    r = Record(request_id="r", arrival_ns=0, queued_ns=0, prompt_tokens=4, sampling=None)
    lp.want(r)

    def step(it: int, k: int, ids: list):
        # Row i: the sampled token's logprob -it, then k candidates it*10 + j.
        rows = len(ids)
        arrays = SimpleNamespace(
            logprob_token_ids=np.array([[it] + [it * 10 + j for j in range(k)]] * rows, dtype=np.int64),
            logprobs=np.array([[-float(it)] + [-0.1 * j for j in range(k)]] * rows, dtype=np.float32),
            sampled_token_ranks=np.full(rows, it, dtype=np.int64),
        )
        lp.add(it, ids, arrays)

    step(1, 3, ["r", "other"])
    step(2, 5, ["other", "r"])  # a top-5 request joined: wider rows
    step(3, 3, ["r"])
    step(4, 5, ["r", "other"])
    lp.rows(r)  # the width-5 rows come after the width-3 ones
    making = [SimpleNamespace(iteration_id=it) for it in (1, 2, 3, 4)]
    StepLogprobs.columns(r, making, len(making))
    assert r.logprobs == [-1.0, -2.0, -3.0, -4.0]
    assert r.ranks == [1, 2, 3, 4]
    assert r.candidate_counts == [3, 5, 3, 5]
    assert r.candidate_ids == [10, 11, 12, 20, 21, 22, 23, 24, 30, 31, 32, 40, 41, 42, 43, 44]


def test_each_request_gets_its_own_logprob_rows_of_every_step_as_requests_come_and_go():
    """Requests joining and leaving batches of several widths, the tables trimmed as they go:
    each finished request's rows are its rows of the steps it ran in, as read step by step."""
    import random
    from types import SimpleNamespace

    import numpy as np

    from tokenscope_vllm.recorder import Record, StepLogprobs

    rng = random.Random(5)
    lp, alive, expected, checked, it = StepLogprobs(), [], {}, 0, 0
    for n in range(3000):
        if not alive or rng.random() < 0.3:
            r = Record(request_id=f"r{n}", arrival_ns=0, queued_ns=0, prompt_tokens=4, sampling=None)
            lp.want(r)
            alive.append(r)
            expected[r.request_id] = []
        batch = [r for r in alive if rng.random() < 0.9] + [None] * rng.randrange(0, 2)  # None: no logprobs asked
        if not batch:
            continue
        it += 1 + rng.randrange(0, 2)
        k = rng.choice([1, 1, 1, 3])
        ids = np.array([[it * 100 + j for j in range(k)] + [i] for i in range(len(batch))], dtype=np.int64)
        lps = -ids.astype(np.float32)
        ranks = np.arange(len(batch), dtype=np.int64) + it
        lp.add(it, [r.request_id if r else f"x{it}" for r in batch], SimpleNamespace(logprob_token_ids=ids, logprobs=lps, sampled_token_ranks=ranks))
        for i, r in enumerate(batch):
            if r is not None:
                expected[r.request_id].append((it, ids[i].tolist(), ranks[i]))
        if len(alive) > 3 and rng.random() < 0.3:  # one finishes
            r = alive.pop(rng.randrange(len(alive)))
            lp.rows(r)
            lp.done(r)
            got = sorted(
                (int(a), list(map(int, b)), int(c)) for piece in r.lp_chunks for a, b, c in zip(piece[0], piece[1], piece[3])
            )
            assert got == sorted((a, b, int(c)) for a, b, c in expected.pop(r.request_id)), (n, r.request_id)
            checked += 1
    assert checked > 300 and sum(t.n for t in lp.tables.values()) < 3000 * 4, "checked, and the tables trimmed"


def _window_scenario(rng, cap):
    """A step window fed as the recorders feed it: decode batches that stay the same for a while
    (one id set shared by consecutive steps, or vLLM's new dict each step), requests joining and
    leaving, a new request's prefill in a step of its own between decode steps (SGLang), the
    batch dropping at once to a few requests, steps where some made no token, dropped steps
    (gaps); and the records of the requests alive at the end."""
    from types import SimpleNamespace as NS

    from tokenscope_exporter.record import RequestRecord, StepWindow

    window, records, alive, ran = StepWindow(cap=cap), {}, [], frozenset()
    it, next_req, churn = 1000, 0, rng.choice([0.01, 0.2, 0.5])
    as_dict, alone = rng.random() < 0.3, rng.random() < 0.5

    def keep(ran, silent=frozenset()):
        nonlocal it
        it += 1 + (rng.random() < churn / 4) * rng.randrange(1, 4)  # now and then a dropped step
        window.keep(NS(iteration_id=it, start_ns=it * 10, end_ns=it * 10 + 7, ran=ran, silent=silent), records)

    for _ in range(rng.randrange(1, 400)):
        if not alive or rng.random() < churn:  # one joins
            rid = f"r{next_req}"
            next_req += 1
            records[rid] = RequestRecord(rid, 0, 0, 8, None, first_iteration=it + 1)
            if alone:
                keep(frozenset((rid,)))  # its prefill on its own
            alive.append(rid)
            ran = frozenset(alive)
        if len(alive) > 1 and rng.random() < churn / 2:  # one leaves
            alive.remove(rng.choice(alive))
            ran = frozenset(alive)
        if len(alive) > 8 and rng.random() < 0.01:  # most leave at once
            del alive[: len(alive) - rng.randrange(1, 4)]
            ran = frozenset(alive)
        silent = {rng.choice(alive)} if rng.random() < churn / 2 else set()
        keep(dict.fromkeys(alive, 1) if as_dict else ran, silent)
        if cap > 1000 and rng.random() < 0.1:  # a recorder behind the engine looks early
            window.making(records[rng.choice(alive)])
    return window, records


def test_the_steps_that_made_a_requests_tokens_are_followed_as_found_one_by_one():
    import random

    rng = random.Random(21)
    streams = sides = 0
    for case in range(400):
        window, records = _window_scenario(rng, cap=rng.choice([64, 8192]))
        streams += len(window.stream) > len(window.steps) // 2
        sides += sum(map(len, window.side.values())) > 0
        for r in records.values():
            start = max(0, r.first_iteration - window.base)
            expected = [s for s in window.steps[start:] if r.request_id in s.made_by]
            assert window.making(r) == expected, (case, r.request_id)
    assert streams > 100 and sides > 100, (streams, sides)


def test_token_times_sliced_from_the_window_or_its_stream_equal_the_steps_joined():
    import random

    rng = random.Random(22)
    checked = from_stream = 0
    for case in range(200):
        window, records = _window_scenario(rng, cap=8192)
        for r in records.values():
            making = window.making(r)
            for handoff in (0, 1):
                r.handoff, r.handoff_ns = handoff, 5
                r.token_ids = [7] * (len(making) + handoff)
                r.time_tokens(making, window)
                sliced = wire._tokens(r)
                r.time_tokens(making)  # no window: each step's packed row, joined
                assert wire._tokens(r) == sliced, (case, r.request_id)
                checked += window.columns(making, r.request_id) is not None
                from_stream += window.columns(making) is None and window.columns(making, r.request_id) is not None
    assert checked > 100, "most requests ran in consecutive steps"
    assert from_stream > 100, "many ran in every main step, after a prefill of their own"
