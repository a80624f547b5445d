"""Recording on and off in alternating blocks of one engine's steps: how the engine benches
(`exporters/vllm/bench/overhead.py` item 4, `exporters/sglang/bench/whole_step.py`) compare a
step with the plugin recording against one without, on the same machine at the same time."""

from __future__ import annotations

import statistics
import time

# Steps a block; the first few of each are left out (the exporter drains the block before's).
BLOCK, SETTLE = 100, 20


def recording_on(step: int) -> bool:
    """Whether step `step` (from 0) records: the first block does, the next does not, and so on."""
    return step // BLOCK % 2 == 0


def compare(times: list, recording: list) -> tuple[list, list, list]:
    """Steps' times (None: a step left out) with recording on and off, the first block left out
    (the ramp), and per pair of blocks (an on block, then the off one after it) the difference of
    their medians."""
    on, off, pairs = [], [], []
    for start in range(BLOCK, len(times) - BLOCK + 1, BLOCK):
        block = [t for t in times[start + SETTLE : start + BLOCK] if t is not None]
        (on if recording[start] else off).extend(block)
        if not recording[start] and start >= 3 * BLOCK:
            before = [t for t in times[start - BLOCK + SETTLE : start] if t is not None]
            pairs.append(statistics.median(before) - statistics.median(block))
    return on, off, pairs


def mean_interval(xs: list) -> tuple[float, float]:
    """The mean of `xs` and the half-width of its 95 % interval (normal approximation)."""
    return statistics.mean(xs), 1.96 * statistics.stdev(xs) / len(xs) ** 0.5


def report(on: list, off: list, pairs: list, indent: str) -> list[str]:
    """What `compare` found, as the benches print it: the medians, the pairs' quartiles, and
    their mean with its interval, in µs and as a share of the step without recording."""
    p, t = statistics.median(off), statistics.median(on)
    d = t - p
    q = ", ".join(f"{x / 1e3:+.0f}" for x in statistics.quantiles(pairs, n=4))
    m, half = mean_interval(pairs)
    return [
        f"{indent}recording off {p / 1e3:.0f} µs/step, on {t / 1e3:.0f} µs/step (medians; {d / 1e3:+.1f} µs, {d / p * 100:+.1f} %)",
        f"{indent}on less off, blocks of {BLOCK} steps side by side: quartiles {q} µs ({len(pairs)} pairs)",
        f"{indent}on less off, mean of the pairs (95 % interval): {m / 1e3:+.0f} ± {half / 1e3:.0f} µs "
        f"({m / p * 100:+.1f} ± {half / p * 100:.1f} %)",
        f"{indent}share of a 20 ms / 50 ms GPU step (medians): {d / 20e6 * 100:+.2f} % / {d / 50e6 * 100:+.2f} %",
    ]


def gpu_wait(seconds: float) -> int:
    """A step's GPU part: a sleep, the GIL released as a CUDA sync releases it. Returns how long
    past `seconds` the thread took to run again: the OS's wake-up, and the wait for the GIL when
    another thread (the exporter's) holds it."""
    t = time.perf_counter_ns()
    time.sleep(seconds)
    return time.perf_counter_ns() - t - int(seconds * 1e9)


def report_parts(recording: list, woke: list, waited: list, own: list, indent: str) -> list[str]:
    """The step taken apart, on less off as mean of the pairs with its 95 % interval (µs): how
    long the engine's thread waited to run again after the GPU part (`woke`, `gpu_wait`) and,
    during its CPU part, for anything but its own work (`waited`: wall less thread CPU time: the
    GIL, or the OS), both where an exporter that holds the GIL shows; and the thread's own CPU
    (`own`), where the hooks' work is, and this machine's noise."""

    def pairs(xs):
        m, half = mean_interval(compare(xs, recording)[2])
        return f"{m / 1e3:+.1f} ± {half / 1e3:.1f} µs"

    return [
        f"{indent}taken apart, on less off, mean of the pairs (95 % interval):",
        f"{indent}  waiting to run again after the GPU part: {pairs(woke)}",
        f"{indent}  waiting during the CPU part (GIL, OS):   {pairs(waited)}",
        f"{indent}  the engine thread's own CPU:             {pairs(own)}",
    ]
