"""What the plugin costs per engine step at a batch of decoding requests, with SGLang's own `Req`
and `ScheduleBatch` objects (`scripts/test-engines --bench`).

- On the scheduler's thread: what the two per-step hooks add around SGLang's methods (building
  the step's event, reading the clock, appending to the buffer).
- On the exporter's thread: recording a step (its start and its end) and, as requests finish,
  encoding them; its CPU time per step.

Nothing listens at the endpoint: sends fail fast and are counted, as when tokenscope is down.
"""

from __future__ import annotations

import argparse
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

    # The exporter's side: the recorder over the same steps, every request finishing at the end.
    rec = Recorder(Texts())
    for req in reqs:
        rec.queued(req, time.time_ns())
    batch = ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.EXTEND, prefix_lens=[0] * len(reqs), extend_lens=[64] * len(reqs))
    started = time.thread_time_ns()
    rec.launched(
        0, batch.forward_mode, tuple(reqs), batch.prefix_lens, batch.extend_lens, None, None, time.time_ns(), len(reqs), 0, 0.5
    )
    rec.processed(0, time.time_ns())
    for n in range(1, args.steps + 1):
        for req in reqs:
            req.output_ids.append(100 + n % 1000)
            if args.logprobs:
                _logprobs(req, args.logprobs)
        if n == args.steps:
            for req in reqs:
                req.update_finish_state()
        rec.launched(n, ForwardMode.DECODE, tuple(reqs), None, None, None, None, time.time_ns(), len(reqs), 0, 0.5)
        rec.processed(n, time.time_ns())
    cpu = time.thread_time_ns() - started
    requests, iterations = rec.take()
    assert len(requests) == len(reqs) and len(iterations) == args.steps + 1, (len(requests), len(iterations))
    # The model's part (appending tokens) ran on this thread too: subtract it.
    started = time.thread_time_ns()
    for n in range(args.steps):
        for req in reqs:
            req.output_ids.append(1)
            if args.logprobs:
                _logprobs(req, args.logprobs)
    model = time.thread_time_ns() - started

    hook = statistics.median(hook_ns) / 1000
    per_step = (cpu - model) / args.steps / 1000
    print(
        f"SGLang plugin, batch {args.batch} decoding, top-{args.logprobs} logprobs, {args.steps} steps: "
        f"hooks on the scheduler's thread {hook:.1f} µs/step (median); "
        f"exporter thread {per_step:.0f} µs CPU/step, requests encoded included"
    )


if __name__ == "__main__":
    main()
