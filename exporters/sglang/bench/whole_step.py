"""The whole engine step with and without the plugin (`scripts/test-engines --bench`): the CPU
part of a step of SGLang's scheduler as the tests' harness plays it (tests/engine.py: SGLang's
own `Req` and `ScheduleBatch`, `Req.update_finish_state`, the model's appends of tokens and
logprobs), at a batch of about 256 decoding requests that finish and are replaced as they go.

Each arm runs in a process of its own (SGLang's hooks are per process): "plain" with the
harness's methods only, "traced" with the tokenscope plugin loaded as SGLang loads it, its
exporter thread running and sending to an endpoint that refuses (sends fail fast and are
counted). A step's "GPU" is a sleep, during which the exporter's thread may run as it would on a
real engine; the figure is the step's time without it: what the scheduler's thread spent, and
waited for the GIL. Rounds alternate which arm goes first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
# The step's GPU part: the exporter's thread gets the GIL while the scheduler waits for it.
GPU_S = 0.005


def arm(traced: bool, batch: int, steps: int, logprobs: int) -> dict:
    """One arm: the scheduler's CPU time per step, in ns; with the plugin, its exporter thread's
    CPU per step recorded, as the exporter counts it."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    os.environ.setdefault("TOKENSCOPE_ENDPOINT", "127.0.0.1:9")
    os.environ.setdefault("TOKENSCOPE_INSTANCE", "bench")
    import engine
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    entered, slept = [], []

    def run_batch(self, batch, *args, **kwargs):
        entered.append(time.perf_counter_ns())
        self.forward_ct += 1
        batch.forward_iter = self.forward_ct
        batch.launch_ts = time.monotonic()
        t = time.perf_counter_ns()
        time.sleep(GPU_S)
        slept.append(time.perf_counter_ns() - t)
        return SimpleNamespace(forward_mode=batch.forward_mode)

    target = engine.TARGET
    HookRegistry.register(f"{target}._add_request_to_queue", engine._queue, HookType.REPLACE)
    HookRegistry.register(f"{target}.run_batch", run_batch, HookType.REPLACE)
    HookRegistry.register(f"{target}.process_batch_result", engine._process_batch_result, HookType.REPLACE)
    HookRegistry.register(f"{target}.run_event_loop", engine._event_loop, HookType.REPLACE)
    if traced:
        load_plugins()  # finds tokenscope's entry point, as SGLang does at startup
    else:
        HookRegistry.apply_hooks()

    # About `batch` requests decoding: that many at first, then one a step, each asking for
    # batch / 2 to 3 * batch / 2 tokens (one a step on average leaves).
    rng = random.Random(1)

    def request(i: int):
        return engine.make_request(f"r{i}", 64, rng.randrange(batch // 2, 3 * batch // 2), logprobs=logprobs)

    arrivals = {0: [request(i) for i in range(batch)]}
    for n in range(1, steps):
        arrivals[n] = [request(batch + n)]
    s = engine.make_scheduler(kv_tokens=1 << 30, prefill_s_per_token=0.0, decode_s=0.0)
    engine.serve(s, arrivals, max_steps=2 * steps + 3 * batch)
    # A step: from one launch to the next, less its GPU part; the first batch's ramp left out.
    cpu = [b - a - gpu for a, b, gpu in zip(entered, entered[1:], slept)]
    out = {"cpu": cpu[batch // 2 : steps]}
    if traced:
        e = engine.exporter(s)
        assert e is not None and e.steps >= steps and not e.record_errors, "the plugin recorded every step"
        out["exporter_ns"] = e.cpu_ns / e.steps
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--logprobs", type=int, default=0)
    ap.add_argument("--arm", choices=["plain", "traced"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.arm:
        print(json.dumps(arm(a.arm == "traced", a.batch, a.steps, a.logprobs)))
        return

    def run(which: str) -> dict:
        cmd = [sys.executable, "-W", "ignore", __file__, "--arm", which, "--batch", str(a.batch)]
        cmd += ["--steps", str(a.steps), "--logprobs", str(a.logprobs)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    plain, traced, rounds, exporter = [], [], [], []
    for r in range(a.rounds):
        medians = {}
        for which in ("plain", "traced") if r % 2 == 0 else ("traced", "plain"):
            out = run(which)
            (plain if which == "plain" else traced).extend(out["cpu"])
            medians[which] = statistics.median(out["cpu"])
            exporter += [out["exporter_ns"]] if "exporter_ns" in out else []
        rounds.append(medians["traced"] - medians["plain"])
    p, t = statistics.median(plain), statistics.median(traced)
    d = t - p
    print(f"SGLang scheduler step (harness, CPU part), batch ~{a.batch} decoding, top-{a.logprobs} logprobs, {a.rounds} rounds:")
    print(f"  plain {p / 1e3:.0f} µs/step, with the plugin {t / 1e3:.0f} µs/step (median; {d / 1e3:+.1f} µs, {d / p * 100:+.1f} %)")
    print(f"  the exporter thread's CPU while it ran: {statistics.median(exporter) / 1e3:.0f} µs/step (median of the rounds)")
    print(f"  difference per round (spread): {', '.join(f'{x / 1e3:+.0f}' for x in rounds)} µs")
    print(f"  share of a 20 ms / 50 ms GPU step: {d / 20e6 * 100:+.2f} % / {d / 50e6 * 100:+.2f} %")


if __name__ == "__main__":
    main()
