"""What the plugin costs vLLM per engine step, measured on vLLM's real scheduler (CPU).

A batch of `--batch` requests decoding, one token each per step: the time of `schedule()` plus
`update_from_output()` with vLLM's plain `Scheduler` and with `TracingScheduler`, alternating runs,
medians per step. The exporter thread runs meanwhile (it shares the GIL with the engine loop, so
its work shows in the engine's step time too); its own CPU per step is printed beside.

    scripts/test-engines --bench      (or: PYTHONPATH=.:tests python bench/overhead.py)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import engine  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.outputs import LogprobsLists, ModelRunnerOutput  # noqa: E402

import tokenscope_vllm  # noqa: E402


def steps(cls, batch: int, n: int, logprobs: int | None, exporter: bool = True) -> tuple[list[int], object]:
    # The hooks alone: a buffer of size 0 drops every event (kept, they would pile up).
    os.environ["TOKENSCOPE_BUFFER_EVENTS"] = "65536" if exporter else "0"
    s = engine.make_scheduler(cls, max_num_seqs=batch, max_num_batched_tokens=16384, num_blocks=40000)
    for i in range(batch):
        s.add_request(engine.make_request(f"req-{i:04d}-{'x' * 24}", 64, 100000, logprobs=logprobs))
    times = []
    for k in range(n + 20):
        t0 = time.perf_counter_ns()
        so = s.schedule()
        t1 = time.perf_counter_ns()
        ids = list(so.num_scheduled_tokens)
        sampled = [[1000 + (k + i) % 300] for i in range(len(ids))]
        lp = None
        if logprobs:
            lp = LogprobsLists(
                np.tile(np.arange(1000, 1001 + logprobs, dtype=np.int64), (len(ids), 1)),
                np.full((len(ids), logprobs + 1), -0.5, dtype=np.float32),
                np.ones(len(ids), dtype=np.int64),
            )
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
            logprobs=lp,
        )
        t2 = time.perf_counter_ns()
        s.update_from_output(so, mro)
        t3 = time.perf_counter_ns()
        if k >= 20:  # past the prefill of the batch
            times.append((t1 - t0) + (t3 - t2))
    return times, s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--logprobs", type=int, default=0, help="top-k logprobs per token (0: none)")
    a = ap.parse_args()
    os.environ.setdefault("TOKENSCOPE_ENDPOINT", "127.0.0.1:9")  # nothing listens: sends fail fast
    os.environ.setdefault("TOKENSCOPE_INSTANCE", "bench")
    lp = a.logprobs or None
    plain, hooks, traced, exporter_cpu = [], [], [], []
    for _ in range(a.rounds):
        t, _s = steps(Scheduler, a.batch, a.steps, lp)
        plain += t
        t, _s = steps(tokenscope_vllm.TracingScheduler, a.batch, a.steps, lp, exporter=False)
        hooks += t
        t, s = steps(tokenscope_vllm.TracingScheduler, a.batch, a.steps, lp)
        traced += t
        s.tokenscope.flush(timeout_s=60)
        st = s.tokenscope.stats()
        exporter_cpu.append(st["cpu_ns"] / max(1, st["steps"]))
        s.tokenscope.close()
    p, h, t = statistics.median(plain), statistics.median(hooks), statistics.median(traced)
    print(f"vLLM scheduler, batch {a.batch} decoding, logprobs {a.logprobs}, {a.rounds}×{a.steps} steps per class")
    print(f"  schedule + update_from_output, plain Scheduler:      median {p / 1e3:8.1f} µs/step")
    print(f"  TracingScheduler, hooks only (events dropped):       median {h / 1e3:8.1f} µs/step  ({(h - p) / 1e3:+.1f})")
    print(f"  TracingScheduler with its exporter thread running:   median {t / 1e3:8.1f} µs/step  ({(t - p) / 1e3:+.1f})")
    print(f"  exporter thread CPU (record + encode), per step:            {statistics.median(exporter_cpu) / 1e3:8.1f} µs")


if __name__ == "__main__":
    main()
