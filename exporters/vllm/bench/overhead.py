"""What the plugin costs vLLM per engine step, measured on vLLM's real scheduler (CPU).

A batch of `--batch` requests decoding, one token each per step, the model's output made up.
Three figures:

1. the hooks on the engine's thread: what `TracingScheduler` adds to `schedule()` and
   `update_from_output()` (a clock read, the batch counts, the KV usage, an append), timed per
   call on a live scheduler;
2. the exporter thread's CPU per step in steady decoding, recording and encoding the events of
   1,000 steps, drained every 5 (its thread's 50 ms at 10 ms a step; it also frees vLLM's step
   objects, which the engine's thread then no longer does); then with requests coming and going, one arriving before each step (its
   prefill in the step, beside the decodes) and about one finishing;
3. the engine's whole step, plain `Scheduler` against `TracingScheduler` with its exporter thread
   running, medians of alternating runs. On this CPU-only loop both threads want the GIL all
   the time, so this is the worst case; the figure is noisy (separate scheduler instances differ
   by more than the plugin costs);
4. the engine's step as on a GPU: each step followed by a 5 ms wait (the model's forward, during
   which the exporter's thread may run), the step's own time measured; one `TracingScheduler`
   recording on and off in alternating blocks of 100 steps (off: its exporter swapped for `OFF`,
   as when recording is off), so both halves see the same machine and the same scheduler; and
   the step taken apart (`blocks.report_parts`): the engine thread's waits, where an exporter
   holding the GIL shows, apart from its own CPU, where this machine's noise is.

    scripts/test-engines --bench      (or, the exporter from its source: PYTHONPATH=../core:.:tests python bench/overhead.py)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "core", "bench"))
os.environ.setdefault("TOKENSCOPE_ENDPOINT", "127.0.0.1:9")  # nothing listens: sends fail fast
os.environ.setdefault("TOKENSCOPE_INSTANCE", "bench")
import blocks  # noqa: E402
import engine  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.outputs import LogprobsLists  # noqa: E402

import tokenscope_vllm  # noqa: E402
from tokenscope_exporter import OFF, wire  # noqa: E402


# Speculative decoding (`--spec K`): K drafts a step for every request, of which each step
# accepts `k % (K + 1)` (request k's): a spread from none to all.
SPEC = 0


def scheduler(cls, batch: int, logprobs: int | None, churn: random.Random | None = None):
    """A scheduler with `batch` requests to decode: for ever, or with `churn`, each for batch / 2
    to 3 * batch / 2 tokens (room for twice the batch: the bench adds one a step)."""
    s = engine.make_scheduler(cls, max_num_seqs=2 * batch, max_num_batched_tokens=16384, num_blocks=80000, spec_tokens=SPEC)
    for i in range(batch):
        s.add_request(request(i, batch, logprobs, churn))
    return s


def request(i: int, batch: int, logprobs: int | None, churn: random.Random | None):
    tokens = churn.randrange(batch // 2, 3 * batch // 2) if churn else 100000
    return engine.make_request(f"req-{i:04d}-{'x' * 24}", 64, tokens, logprobs=logprobs)


def step(s, k: int, logprobs: int | None, own: list | None = None) -> int:
    """One engine step; returns the scheduler's own time in it (ns), and appends to `own` the
    thread CPU time of the same parts."""
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    so = s.schedule()
    t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
    ids = list(so.num_scheduled_tokens)
    lp = None
    if logprobs:
        lp = LogprobsLists(
            np.tile(np.arange(1000, 1001 + logprobs, dtype=np.int64), (len(ids), 1)),
            np.full((len(ids), logprobs + 1), -0.5, dtype=np.float32),
            np.ones(len(ids), dtype=np.int64),
        )
    spec = so.scheduled_spec_decode_tokens
    rows = [[1000 + (k + i + j) % 300 for j in range(1 + (i % (SPEC + 1) if rid in spec else 0))] for i, rid in enumerate(ids)]
    mro = engine.model_runner_output(ids, rows, lp)
    c2, t2 = time.thread_time_ns(), time.perf_counter_ns()
    s.update_from_output(so, mro)
    if SPEC:
        s.update_draft_token_ids(engine.DraftTokenIds(ids, [[3000 + j for j in range(SPEC)] for _ in ids]))
    t3 = time.perf_counter_ns()
    if own is not None:
        own.append((c1 - c0) + (time.thread_time_ns() - c2))
    return (t1 - t0) + (t3 - t2)


def stopped(e):
    """The exporter with its thread stopped and its buffer open: this benchmark drains by hand."""
    rec = e.recorder
    e.close()
    e.recorder, e.capacity, e.on = rec, 1 << 30, True
    return e


def hooks_per_step(batch: int) -> float:
    """The engine thread's added work per step: the two hooks' pushes, timed on a live scheduler."""
    s = scheduler(tokenscope_vllm.TracingScheduler, batch, None)
    for k in range(30):
        step(s, k, None)
    e, so, n = stopped(s.tokenscope), s.schedule(), 20000
    t = time.perf_counter_ns()
    for _ in range(n):
        e.push(s._step_event(so, time.time_ns()))
        e.push(s._update_event(so, {}, time.time_ns()))
        e.events.clear()
    return (time.perf_counter_ns() - t) / n


# The exporter drains what the engine's thread handed it every 50 ms: 5 steps of 10 ms.
DRAIN_EVERY = 5


def exporter_per_step(batch: int, logprobs: int | None, steps: int, churn: bool = False) -> float:
    """The exporter's CPU per step over 1,000 steps, drained as its thread drains. With `churn`,
    requests come and go: one arrives before each step (prefilled in it, beside the decodes)
    and about one finishes."""
    rng = random.Random(1) if churn else None
    s = scheduler(tokenscope_vllm.TracingScheduler, batch, logprobs, rng)
    e = stopped(s.tokenscope)  # events wait in the buffer
    n = batch
    for k in range(30):
        step(s, k, logprobs)
    e._drain()  # the batch's arrival and prefill
    before, cpu = e.steps, 0
    for k in range(steps):
        if churn:
            s.add_request(request(n, batch, logprobs, rng))
            n += 1
        step(s, k, logprobs)
        if k % DRAIN_EVERY == DRAIN_EVERY - 1 or k == steps - 1:
            t = time.thread_time_ns()
            e._drain()
            cpu += time.thread_time_ns() - t
    return cpu / (e.steps - before)


def engine_steps(cls, batch: int, steps: int, logprobs: int | None) -> list[int]:
    s = scheduler(cls, batch, logprobs)
    times = [step(s, k, logprobs) for k in range(steps + 30)][30:]
    if hasattr(s, "tokenscope"):
        s.tokenscope.close()
    return times


# Item 4: the GPU's part of a step.
GPU_S = 0.005


def gpu_steps(batch: int, steps: int, logprobs: int | None) -> tuple[list, list, list, list]:
    """Step times (ns) with recording on and off, per pair of blocks on less off (`blocks`), and
    the step taken apart (`blocks.report_parts`)."""
    s = scheduler(tokenscope_vllm.TracingScheduler, batch, logprobs)
    real = s.tokenscope
    times, own, woke, recording = [], [], [], []
    for k in range(steps):
        on = blocks.recording_on(k)
        s.tokenscope = real if on else OFF
        times.append(step(s, k, logprobs, own))
        recording.append(on)
        woke.append(blocks.gpu_wait(GPU_S))
    s.tokenscope = real
    real.close()
    waited = [t - o for t, o in zip(times, own)]
    return (*blocks.compare(times, recording), blocks.report_parts(recording, woke, waited, own, "     "))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpu-steps", type=int, default=8000, help="steps of item 4")
    ap.add_argument("--logprobs", type=int, default=0, help="top-k logprobs per token (0: none)")
    ap.add_argument("--spec", type=int, default=0, help="speculative decoding: draft tokens a step (0: none)")
    ap.add_argument("--only-exporter", action="store_true", help="items 1 and 2 only")
    a = ap.parse_args()
    global SPEC
    SPEC = a.spec
    lp = a.logprobs or None
    native = "built" if wire._pack_rows is not None else "not built: the Python fallback"
    print(f"vLLM scheduler (CPU), batch {a.batch} decoding, logprobs {a.logprobs}, drafts {a.spec}; exporter's native part {native}")
    print(f"  1. hooks on the engine's thread:                    {hooks_per_step(a.batch) / 1e3:8.1f} µs/step")
    cpu = [exporter_per_step(a.batch, lp, a.steps) for _ in range(a.rounds)]
    print(f"  2. exporter thread CPU, steady decoding:            {statistics.median(cpu) / 1e3:8.1f} µs/step")
    cpu = [exporter_per_step(a.batch, lp, a.steps, churn=True) for _ in range(a.rounds)]
    print(f"     requests coming and going (one in a step):       {statistics.median(cpu) / 1e3:8.1f} µs/step")
    if a.only_exporter:
        return
    plain, traced, rounds = [], [], []
    for r in range(a.rounds):
        # Which goes first alternates: a process's later schedulers run slower than its first.
        order = [(plain, Scheduler), (traced, tokenscope_vllm.TracingScheduler)]
        medians = {}
        for out, cls in order if r % 2 == 0 else reversed(order):
            times = engine_steps(cls, a.batch, a.steps, lp)
            out += times
            medians[cls] = statistics.median(times)
        rounds.append(medians[tokenscope_vllm.TracingScheduler] - medians[Scheduler])
    p, t = statistics.median(plain), statistics.median(traced)
    d = t - p
    print(f"  3. engine step, plain Scheduler:                    {p / 1e3:8.1f} µs/step (median)")
    print(f"     with TracingScheduler and its exporter thread:   {t / 1e3:8.1f} µs/step ({d / 1e3:+.1f}, {d / p * 100:+.1f} %)")
    print(f"     difference per round (spread):                   {', '.join(f'{x / 1e3:+.0f}' for x in rounds)} µs")
    print(f"     share of a 20 ms / 50 ms GPU step:               {d / 20e6 * 100:+.2f} % / {d / 50e6 * 100:+.2f} %")
    on, off, pairs, parts = gpu_steps(a.batch, a.gpu_steps, lp)
    print(f"  4. engine step with a {GPU_S * 1e3:.0f} ms GPU wait, recording on and off in blocks of one scheduler:")
    print("\n".join(blocks.report(on, off, pairs, "     ") + parts))

if __name__ == "__main__":
    main()
