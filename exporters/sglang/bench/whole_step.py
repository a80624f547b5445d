"""The whole engine step with and without the plugin recording (`scripts/test-engines --bench`):
the CPU part of a step of SGLang's scheduler as the tests' harness plays it (tests/engine.py:
SGLang's own `Req` and `ScheduleBatch`, `Req.update_finish_state`, the model's appends of tokens
and logprobs), at a batch of about 256 decoding requests that finish and are replaced as they go,
a prefill on its own every other step (SGLang's default: no mixed chunk).

The plugin is loaded as SGLang loads it, its exporter thread running and sending to an endpoint
that refuses (sends fail fast and are counted). Recording is on and off in alternating blocks of
steps in the one process (off: the scheduler's exporter is swapped for the plugin's `OFF`, as on
a rank that does not export), so both see the same machine: on this shared 2-core box, separate
runs differed by more than the effect. A step's "GPU" is a sleep, during which the exporter's
thread may run as it would on a real engine; a step's figure is its time without it: what the
scheduler's thread spent, and waited for the GIL. Taken apart (`blocks.report_parts`): the
thread's waits (after the GPU part, and during its CPU part), where an exporter holding the GIL
shows, and its own CPU, where this machine's noise is.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "core", "bench"))
import blocks  # noqa: E402

# The step's GPU part: the exporter's thread gets the GIL while the scheduler waits for it.
GPU_S = 0.005


def run(batch: int, steps: int, logprobs: int) -> tuple[list, list, list, list, float, float]:
    """Per step CPU in ns with recording on and off; per pair of blocks, on's median less off's;
    the step taken apart (`blocks.report_parts`); the decoding batch's mean; the exporter
    thread's CPU per step recorded."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    os.environ.setdefault("TOKENSCOPE_ENDPOINT", "127.0.0.1:9")
    os.environ.setdefault("TOKENSCOPE_INSTANCE", "bench")
    import engine
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from tokenscope_sglang import hooks

    entered, slept, woke, recording, decode, cpu_at = [], [], [], [], [], []
    exporter = []

    def run_batch(self, batch_, *args, **kwargs):
        entered.append(time.perf_counter_ns())
        cpu_at.append(time.thread_time_ns())
        on = blocks.recording_on(len(entered) - 1)
        recording.append(on)
        decode.append(batch_.forward_mode.is_decode())
        if not exporter:
            exporter.append(hooks._exporter_of(self))
        self.__dict__["_tokenscope"] = exporter[0] if on else hooks.OFF
        self.forward_ct += 1
        batch_.forward_iter = self.forward_ct
        batch_.launch_ts = time.monotonic()
        t = time.perf_counter_ns()
        woke.append(blocks.gpu_wait(GPU_S))
        slept.append(time.perf_counter_ns() - t)
        return SimpleNamespace(forward_mode=batch_.forward_mode)

    # The harness's methods (REPLACE) with this run_batch, then SGLang's plugin loading, whose
    # hooks wrap them.
    target = engine.TARGET
    HookRegistry.register(f"{target}._add_request_to_queue", engine._queue, HookType.REPLACE)
    HookRegistry.register(f"{target}.run_batch", run_batch, HookType.REPLACE)
    HookRegistry.register(f"{target}.process_batch_result", engine._process_batch_result, HookType.REPLACE)
    HookRegistry.register(f"{target}.run_event_loop", engine._event_loop, HookType.REPLACE)
    load_plugins()

    # About `batch` requests decoding: that many at first, then one every other step, each
    # asking for batch / 2 to 3 * batch / 2 tokens (the decodes step every other step).
    rng = random.Random(1)

    def request(i: int):
        return engine.make_request(f"r{i}", 64, rng.randrange(batch // 2, 3 * batch // 2), logprobs=logprobs)

    arrivals = {0: [request(i) for i in range(batch)]}
    for n in range(2, steps, 2):
        arrivals[n] = [request(batch + n)]
    s = engine.make_scheduler(kv_tokens=1 << 30, prefill_s_per_token=0.0, decode_s=0.0)
    out = engine.serve(s, arrivals, max_steps=2 * steps + 3 * batch)
    # A decode step's CPU (the prefills between them, of one request each, are left out), and
    # of it what the thread itself ran and what it waited for.
    cpu = [b - a - gpu if d else None for a, b, gpu, d in zip(entered, entered[1:], slept, decode)]
    own = [b - a if d else None for a, b, d in zip(cpu_at, cpu_at[1:], decode)]
    waited = [c - o if d else None for c, o, d in zip(cpu, own, decode)]
    woke = [w if d else None for w, d in zip(woke, decode)]
    on, off, pairs = blocks.compare(cpu[:steps], recording)
    parts = blocks.report_parts(recording, woke[:steps], waited[:steps], own[:steps], "  ")
    decoding = [len(c) for c in out.steps[blocks.BLOCK : steps] if len(c) > 1]
    e = exporter[0]
    assert e.steps >= steps // 3 and not e.record_errors, "the plugin recorded the steps it was on for"
    return on, off, pairs, parts, statistics.mean(decoding), e.cpu_ns / e.steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--logprobs", type=int, default=0)
    a = ap.parse_args()
    on, off, pairs, parts, batch, exporter_ns = run(a.batch, a.steps, a.logprobs)
    print(f"SGLang scheduler decode step (harness, CPU part), {batch:.0f} requests on average, top-{a.logprobs} logprobs:")
    print("\n".join(blocks.report(on, off, pairs, "  ") + parts))
    print(f"  the exporter thread's CPU while it recorded: {exporter_ns / 1e3:.0f} µs/step")

if __name__ == "__main__":
    main()
