"""Recording on and off in alternating blocks of one engine's steps: how the engine benches
(`exporters/vllm/bench/overhead.py` item 4, `exporters/sglang/bench/whole_step.py`) compare a
step with the plugin recording against one without, on the same machine at the same time."""

from __future__ import annotations

import statistics

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
