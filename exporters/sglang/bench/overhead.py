"""What the plugin costs per engine step at a batch of decoding requests, with SGLang's own `Req`
and `ScheduleBatch` objects (`scripts/test-engines --bench`).

- On the scheduler's thread: what the two per-step hooks add around SGLang's methods (building
  the step's event, reading the clock, appending to the buffer).
- On the exporter's thread: recording a step (its start and its end) and, as requests finish,
  encoding them; its CPU time per step, with its share of the garbage collector's (by the
  objects it allocates, against the model's). One batch that all finishes at the end, or with
  `--churn` requests coming and going: one arriving before each decode step (its prefill a
  step of its own) and about one finishing, the figure per decode step (prefills included).

Nothing listens at the endpoint: sends fail fast and are counted, as when tokenscope is down.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
os.environ.setdefault("TOKENSCOPE_ENDPOINT", "127.0.0.1:9")
os.environ.setdefault("TOKENSCOPE_INSTANCE", "bench")
import engine  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_LENGTH, ScheduleBatch  # noqa: E402
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
    ap.add_argument("--churn", action="store_true", help="requests coming and going (default: one batch throughout)")
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
    if args.churn:
        model_allocs, finished, ended = _churn(args, rec, timed)
    else:
        model_allocs, finished, ended = _steady(args, reqs, rec, timed)
    gc.enable()
    requests, iterations = rec.take()
    assert len(requests) == finished and len(iterations) == ended, (len(requests), len(iterations))
    # What a collection costs per object allocated, over the model's own steps on a heap like it.
    ns_per_alloc = _collector_ns_per_alloc(reqs, args)
    own = timed.ns / args.steps / 1000
    gc_share = timed.allocs * ns_per_alloc / args.steps / 1000
    hook = statistics.median(hook_ns) / 1000
    shape = f"about {args.batch} decoding, one arriving a step" if args.churn else f"batch {args.batch} decoding"
    print(
        f"SGLang plugin, {shape}, top-{args.logprobs} logprobs, {args.steps} steps: "
        f"hooks on the scheduler's thread {hook:.1f} µs/step (median); "
        f"exporter thread {own + gc_share:.0f} µs CPU/step, requests encoded included "
        f"({own:.0f} its own, {gc_share:.1f} its share of the collector's: {timed.allocs / args.steps:.0f} objects "
        f"a step against the model's {model_allocs / args.steps:.0f})"
    )


def _steady(args, reqs, rec, timed) -> tuple[int, int, int]:
    """The batch's prefill, then `steps` decode steps of the same requests, which all finish in
    the last. Returns the objects the model allocated, the requests finished and the steps."""
    for req in reqs:
        rec.queued(req, time.time_ns())
    timed(rec.launched, 0, ForwardMode.EXTEND, tuple(reqs), [0] * len(reqs), [64] * len(reqs), None, None, time.time_ns(), len(reqs), 0, 0.5)
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
    return model_allocs, len(reqs), args.steps + 1


def _churn(args, rec, timed) -> tuple[int, int, int]:
    """Requests coming and going: a batch of about `batch` decoding, each asking for batch / 2 to
    3 * batch / 2 tokens, and before each decode step one arriving, prefilled in a step of its
    own (SGLang's default: no mixed chunk); what still runs finishes in the last step. Returns as
    `_steady` does; `steps` counts the decode steps."""
    rng = random.Random(1)

    def request(i: int):
        return engine.make_request(f"r{i}", 64, rng.randrange(args.batch // 2, 3 * args.batch // 2), logprobs=args.logprobs)

    # Finished requests are kept: who frees SGLang's objects (its per-token lists) is not the
    # recorder's cost, and the scheduler drops them first in any case.
    running, done, step, model_allocs, arrived = [], [], 0, 0, 0
    for n in range(args.steps):
        new = [request(i) for i in range(args.batch)] if n == 0 else [request(args.batch + n)]
        arrived += len(new)
        before = gc.get_count()[0]
        for req in new:
            rec.queued(req, time.time_ns())
            req.output_ids.append(100)  # the prefill's token
            req.update_finish_state()
        model_allocs += gc.get_count()[0] - before
        lens = [0] * len(new), [64] * len(new)
        timed(rec.launched, step, ForwardMode.EXTEND, tuple(new), *lens, None, None, time.time_ns(), len(running), 0, 0.5)
        timed(rec.processed, step, time.time_ns())
        running += new
        step += 1
        before = gc.get_count()[0]
        for req in running:
            req.output_ids.append(100 + n % 1000)
            if args.logprobs:
                _logprobs(req, args.logprobs)
            if n == args.steps - 1:
                req.to_finish = FINISH_LENGTH(length=len(req.output_ids))
            req.update_finish_state()
        model_allocs += gc.get_count()[0] - before
        timed(rec.launched, step, ForwardMode.DECODE, tuple(running), None, None, None, None, time.time_ns(), len(running), 0, 0.5)
        timed(rec.processed, step, time.time_ns())
        done += [r for r in running if r.finished_reason is not None]
        running = [r for r in running if r.finished_reason is None]
        step += 1
    return model_allocs, arrived, step


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
