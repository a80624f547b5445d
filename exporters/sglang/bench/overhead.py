"""What the plugin costs per engine step at a batch of decoding requests, with SGLang's own `Req`
and `ScheduleBatch` objects (`scripts/test-engines --bench`).

- On the scheduler's thread: what the two per-step hooks add around SGLang's methods (building
  the step's event, reading the clock, appending to the buffer).
- On the exporter's thread: recording a step (its start and its end) and, as requests finish,
  encoding them; its CPU time per step, with its share of the garbage collector's (by the
  objects it allocates, against the model's).

Nothing listens at the endpoint: sends fail fast and are counted, as when tokenscope is down.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
os.environ.setdefault("TOKENSCOPE_ENDPOINT", "127.0.0.1:9")
os.environ.setdefault("TOKENSCOPE_INSTANCE", "bench")
import engine  # noqa: E402
from sglang.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402

from tokenscope_exporter import Texts  # noqa: E402
from tokenscope_sglang import hooks  # noqa: E402
from tokenscope_sglang.recorder import Recorder  # noqa: E402


def _logprobs(req, k: int) -> None:
    lp = req.logprob
    if lp.output_token_logprobs_val is None:
        lp.output_token_logprobs_val, lp.output_top_logprobs_val, lp.output_top_logprobs_idx = [], [], []
    lp.output_token_logprobs_val.append(-0.5)
    lp.output_top_logprobs_val.append([-0.1] * k)
    lp.output_top_logprobs_idx.append(list(range(k)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--logprobs", type=int, default=0)
    args = ap.parse_args()

    s = engine.make_scheduler(kv_tokens=1 << 30)
    reqs = [engine.make_request(f"r{i}", 64, args.steps, logprobs=args.logprobs) for i in range(args.batch)]
    s.running_batch = ScheduleBatch(reqs=list(reqs))

    # The scheduler's side: the hooks' own work, around a method that does nothing.
    hook_ns = []
    sink = []
    for n in range(args.steps):
        batch = ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.DECODE)
        batch.forward_iter = n
        t0 = time.perf_counter_ns()
        start = time.time_ns()
        sink.append(hooks._launched_event(s, batch, start))
        sink.append(("processed", batch.forward_iter, time.time_ns()))
        hook_ns.append(time.perf_counter_ns() - t0)
    sink.clear()

    # The exporter's side: the recorder over the same steps, every request finishing at the end,
    # its calls timed as they run between the model's (as vLLM's bench times its exporter's
    # drain). The collector runs in whichever thread allocates past its threshold, and the
    # model's per-token lists are most of what it walks: it is off while the calls are timed and
    # the recorder's allocations counted, and its cost is charged after by that count.
    rec = Recorder(Texts())
    timed = Timed()
    gc.collect()
    gc.disable()
    for req in reqs:
        rec.queued(req, time.time_ns())
    batch = ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.EXTEND, prefix_lens=[0] * len(reqs), extend_lens=[64] * len(reqs))
    timed(
        rec.launched,
        0,
        batch.forward_mode,
        tuple(reqs),
        batch.prefix_lens,
        batch.extend_lens,
        None,
        None,
        time.time_ns(),
        len(reqs),
        0,
        0.5,
    )
    timed(rec.processed, 0, time.time_ns())
    model_allocs = 0
    for n in range(1, args.steps + 1):
        before = gc.get_count()[0]
        for req in reqs:
            req.output_ids.append(100 + n % 1000)
            if args.logprobs:
                _logprobs(req, args.logprobs)
        if n == args.steps:
            for req in reqs:
                req.update_finish_state()
        model_allocs += gc.get_count()[0] - before
        timed(rec.launched, n, ForwardMode.DECODE, tuple(reqs), None, None, None, None, time.time_ns(), len(reqs), 0, 0.5)
        timed(rec.processed, n, time.time_ns())
    gc.enable()
    requests, iterations = rec.take()
    assert len(requests) == len(reqs) and len(iterations) == args.steps + 1, (len(requests), len(iterations))
    # What a collection costs per object allocated, over the model's own steps on a heap like it.
    ns_per_alloc = _collector_ns_per_alloc(reqs, args)
    own = timed.ns / args.steps / 1000
    gc_share = timed.allocs * ns_per_alloc / args.steps / 1000
    hook = statistics.median(hook_ns) / 1000
    print(
        f"SGLang plugin, batch {args.batch} decoding, top-{args.logprobs} logprobs, {args.steps} steps: "
        f"hooks on the scheduler's thread {hook:.1f} µs/step (median); "
        f"exporter thread {own + gc_share:.0f} µs CPU/step, requests encoded included "
        f"({own:.0f} its own, {gc_share:.1f} its share of the collector's: {timed.allocs / args.steps:.0f} objects "
        f"a step against the model's {model_allocs / args.steps:.0f})"
    )


class Timed:
    """Calls timed on this thread's CPU clock, with the objects the collector tracks that they
    left allocated (`gc.get_count`, with the collector off)."""

    def __init__(self) -> None:
        self.ns = self.allocs = 0

    def __call__(self, f, *args) -> None:
        before, t = gc.get_count()[0], time.thread_time_ns()
        f(*args)
        self.ns += time.thread_time_ns() - t
        self.allocs += gc.get_count()[0] - before


def _collector_ns_per_alloc(reqs, args) -> float:
    """The collector's CPU per object allocated, over the model's part of as many steps again,
    collections timed by `gc.callbacks`."""
    spent, started = [0], [0]

    def on_gc(phase, info) -> None:
        if phase == "start":
            started[0] = time.thread_time_ns()
        else:
            spent[0] += time.thread_time_ns() - started[0]

    gc.disable()
    allocs = gc.get_count()[0]
    for _ in range(args.steps):
        for req in reqs:
            req.output_ids.append(1)
            if args.logprobs:
                _logprobs(req, args.logprobs)
    allocs = gc.get_count()[0] - allocs
    # The same again with the collector on (the counts above are exact only with it off).
    gc.callbacks.append(on_gc)
    gc.enable()
    for _ in range(args.steps):
        for req in reqs:
            req.output_ids.append(1)
            if args.logprobs:
                _logprobs(req, args.logprobs)
    gc.callbacks.remove(on_gc)
    return spent[0] / max(allocs, 1)


if __name__ == "__main__":
    main()
