"""Drives vLLM's real scheduler on CPU, the way vLLM's own scheduler tests do: a tiny model config
(no weights, no tokenizer), a KV-cache config by hand, and model-runner outputs made up step by
step. Records what the scheduler itself reported, to compare with what tokenscope stored.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, LogprobsLists, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

BLOCK = 16
EOS = 2

# A Llama-shaped config: the scheduler reads lengths and dtypes, never weights.
TINY_MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
    "bos_token_id": 1,
    "eos_token_id": EOS,
}


def model_dir() -> str:
    d = os.path.join(tempfile.gettempdir(), "tokenscope-vllm-tiny")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(TINY_MODEL, f)
    # A word-level tokenizer: token i reads "w<i>".
    path = os.path.join(d, "tokenizer.json")
    if not os.path.exists(path):
        from tokenizers import Tokenizer, models

        vocab = {f"w{i}": i for i in range(TINY_MODEL["vocab_size"])}
        Tokenizer(models.WordLevel(vocab, unk_token="w0")).save(path)
    return d


def make_scheduler(
    cls, max_num_seqs=16, max_num_batched_tokens=256, num_blocks=1000, log_stats=True, spec_tokens=0, pd_decode=False
):
    """`spec_tokens`: speculative decoding with that many draft tokens a step (vLLM's n-gram
    method's config: the scheduler only needs the count; `drive` makes the drafts). `pd_decode`:
    a PD decode instance, its prompts' KV caches loaded by a KV connector (`remote_kv`)."""
    sc = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=4096,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
    )
    mc = ModelConfig(model=model_dir(), dtype="float16", seed=42, skip_tokenizer_init=True)
    cc = CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, cache_dtype="auto")
    spec = None
    if spec_tokens:
        from vllm.config import ParallelConfig, SpeculativeConfig

        spec = SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=spec_tokens,
            prompt_lookup_max=3,
            prompt_lookup_min=1,
            target_model_config=mc,
            target_parallel_config=ParallelConfig(),
        )
    kv_transfer = None
    if pd_decode:
        from vllm.config import KVTransferConfig

        kv_transfer = KVTransferConfig(kv_connector="RemotePrefill", kv_role="kv_consumer", kv_connector_module_path="remote_kv")
    vc = VllmConfig(
        scheduler_config=sc,
        model_config=mc,
        cache_config=cc,
        device_config=DeviceConfig(device="cpu"),
        speculative_config=spec,
        kv_transfer_config=kv_transfer,
    )
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    cc.num_gpu_blocks = num_blocks
    return cls(
        vllm_config=vc,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=BLOCK,
        log_stats=log_stats,
    )


_block_hasher = None


def block_hasher():
    """What vLLM's `EngineCore` hands each request when prefix caching is on: the function that
    computes its block-hash chain (sha256, vLLM's default)."""
    global _block_hasher
    if _block_hasher is None:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        fn = get_hash_fn_by_name("sha256")
        init_none_hash(fn)
        _block_hasher = get_request_block_hasher(BLOCK, fn)
    return _block_hasher


def make_request(
    request_id: str,
    prompt_len: int,
    max_tokens: int,
    logprobs: int | None = None,
    prompt: list | None = None,
    remote_prefill: bool = False,
    **kwargs,
) -> Request:
    """A request as vLLM's engine core makes it (block hashes included); `kwargs`: `Request`'s own
    (`lora_request`, `priority`, `trace_headers`). `remote_prefill`: prefilled on a PD prefill
    instance, as vLLM's PD proxy hands it to the decode instance (`kv_transfer_params`)."""
    sp = SamplingParams(max_tokens=max_tokens, logprobs=logprobs, temperature=0.7, ignore_eos=False)
    if remote_prefill:
        sp.extra_args = {"kv_transfer_params": {"do_remote_prefill": True, "remote_engine_id": "prefill-0"}}
    # What vLLM's input processing does with the model's generation config.
    sp.update_from_generation_config({}, eos_token_id=EOS)
    return Request(
        request_id=request_id,
        # Prompts of their own (seeded by the id): the prefix cache serves only what is shared.
        prompt_token_ids=prompt or [100 + (i + 37 * sum(map(ord, request_id))) % 500 for i in range(prompt_len)],
        sampling_params=sp,
        pooling_params=None,
        block_hasher=block_hasher(),
        **kwargs,
    )


@dataclass
class Run:
    """What the scheduler reported: each step's tokens per request, each request's tokens."""

    steps: list = field(default_factory=list)  # [{req_id: num_scheduled_tokens}]
    # Speculative decoding: (step, req_id) -> (drafts verified, accepted), as the model decided.
    drafts: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)  # req_id -> [token ids]
    finished: dict = field(default_factory=dict)  # req_id -> FinishReason
    preempted: set = field(default_factory=set)


def sample(step: int, req_id: str) -> int:
    return 1000 + (step * 7 + len(req_id)) % 300


def drive(
    scheduler,
    arrivals: dict[int, list[Request]],
    eos_after: dict[str, int] | None = None,
    prefill_s_per_token: float = 40e-6,
    decode_s: float = 0.004,
    max_steps: int = 2000,
    aborts: dict[int, list[str]] | None = None,
    overlap: bool = False,
) -> Run:
    """Runs the scheduler to completion: requests in `arrivals[k]` are added before step k, those in
    `aborts[k]` aborted there (a client went away); each step "computes" for a time that grows with
    its prefill tokens; a request samples a token when its prompt is done; `eos_after[id]` = n ends
    it with EOS as its n-th token.

    `overlap`: as vLLM's `EngineCore.step_with_batch_queue` runs async scheduling (a batch queue of
    two): step k+1 is scheduled while step k computes, before k's output is applied, and the
    "GPU" computes the steps one after the other. Aborts come, as there, just before an output is
    applied."""
    run = Run()
    eos_after, aborts = eos_after or {}, aborts or {}
    added = [r for rs in arrivals.values() for r in rs]
    # Scheduled steps whose output is not applied yet, newest first: (output, tokens, samples, done at).
    queue: deque = deque()
    depth = 2 if overlap else 1
    gpu_free = time.monotonic()
    step = 0
    for _ in range(max_steps * 2):
        for r in arrivals.pop(step, []):
            scheduler.add_request(r)
        if scheduler.has_requests():
            so = scheduler.schedule()
            if so.total_num_scheduled_tokens:
                counts = dict(so.num_scheduled_tokens)
                run.steps.append(counts)
                reqs = {rid: scheduler.requests[rid] for rid in counts}
                prefill = sum(n for rid, n in counts.items() if reqs[rid].num_computed_tokens - n < reqs[rid].num_prompt_tokens)
                # What vLLM's model runner will sample: a token for each request not short of its prompt.
                samples = [rid for rid in counts if not reqs[rid].is_prefill_chunk]
                gpu_free = max(time.monotonic(), gpu_free) + decode_s + prefill * prefill_s_per_token
                queue.appendleft((so, list(counts), samples, gpu_free))
                step += 1
                if len(queue) < depth:
                    continue
        if not queue:
            if not arrivals and not scheduler.has_requests():
                break
            if scheduler.connector is not None and scheduler.has_requests():
                # Only KV loads in flight: vLLM's workers still run the step, and report the
                # loads that are done.
                time.sleep(decode_s)
                scheduler.update_from_output(so, model_runner_output([], [], None))
            step += 1  # nothing to run: time passes until the next arrival
            continue
        so, ids, samples, done_at = queue.pop()
        time.sleep(max(0.0, done_at - time.monotonic()))
        for rid in aborts.pop(step, []):
            scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
        spec = so.scheduled_spec_decode_tokens
        mro = _model_output(ids, set(samples), run.tokens, eos_after, step, spec, run.drafts)
        outputs = scheduler.update_from_output(so, mro)
        if scheduler.num_spec_tokens:
            # What a drafter proposes for the next step: k tokens for each request that sampled.
            k = scheduler.num_spec_tokens
            drafting = [rid for rid, row in zip(mro.req_ids, mro.sampled_token_ids) if row and rid in scheduler.requests]
            scheduler.update_draft_token_ids(DraftTokenIds(drafting, [[3000 + j for j in range(k)] for _ in drafting]))
        for eco in outputs.values():
            for o in eco.outputs:
                run.tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
                if o.finish_reason is not None:
                    run.finished[o.request_id] = o.finish_reason
    run.preempted = {r.request_id for r in added if r.num_preemptions}
    return run


def sampled_logprob(token_id: int) -> float:
    """The logprob the made-up model gives the token it sampled: tells each token's row apart."""
    return -0.5 - (token_id % 7) * 0.01


def _model_output(
    ids: list, samples: set, tokens: dict, eos_after: dict, step: int, spec: dict | None = None, drafts: dict | None = None
) -> ModelRunnerOutput:
    """A step's output: the next token of each request that samples (EOS when `eos_after` says),
    with top-3 logprobs (the sampled one's from `sampled_logprob`) and a rank of 2. `tokens`: what the scheduler reported so far (every
    earlier step's output has been applied). `spec`: the step's draft tokens per request; the
    first `(step + len(id)) % (k + 1)` of them are accepted, then the model samples its own,
    recorded in `drafts`; the logprobs then have a row per token made, the requests' rows found
    by `cu_num_generated_tokens` (as vLLM's sampler lays them out under speculation)."""
    sampled = []
    for rid in ids:
        if rid not in samples:
            sampled.append([])  # a partial prefill samples nothing
            continue
        n = len(tokens.get(rid, ())) + 1
        draft = (spec or {}).get(rid)
        if draft:
            accepted = (step + len(rid)) % (len(draft) + 1)
            drafts[(step, rid)] = (len(draft), accepted)
            sampled.append(list(draft[:accepted]) + [sample(step, rid)])
            continue
        sampled.append([EOS if eos_after.get(rid) == n else sample(step, rid)])
    k = 3
    if spec:
        made = [tok for row in sampled for tok in row]
        cu = [0]
        for row in sampled:
            cu.append(cu[-1] + len(row))
        lp_ids = np.array([[tok] + [1000 + j for j in range(k)] for tok in made], dtype=np.int64).reshape(-1, k + 1)
        lps = np.array([[sampled_logprob(tok)] + [-0.1 - 0.5 * j for j in range(k)] for tok in made], dtype=np.float32).reshape(-1, k + 1)
        ranks = np.array([2 for _ in made], dtype=np.int64)
        return model_runner_output(ids, sampled, LogprobsLists(lp_ids, lps, ranks, cu))
    lp_ids = np.array([[row[0] if row else 0] + [1000 + j for j in range(k)] for row in sampled], dtype=np.int64)
    lps = np.array([[sampled_logprob(row[0] if row else 0)] + [-0.1 - 0.5 * j for j in range(k)] for row in sampled], dtype=np.float32)
    ranks = np.array([2 for _ in sampled], dtype=np.int64)
    return model_runner_output(ids, sampled, LogprobsLists(lp_ids, lps, ranks))


def model_runner_output(ids: list, sampled: list, logprobs) -> ModelRunnerOutput:
    """vLLM's `ModelRunnerOutput`: 0.33 is also given the index of each request id, which 0.34
    derives. With a KV connector (`remote_kv`), the loads the workers finished by now."""
    index = {"req_id_to_index": {rid: i for i, rid in enumerate(ids)}} if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__ else {}
    kv = None
    if "remote_kv" in sys.modules:
        from vllm.v1.outputs import KVConnectorOutput

        received = sys.modules["remote_kv"].RemotePrefill.received()
        kv = KVConnectorOutput(finished_recving=received) if received else None
    return ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled, logprobs=logprobs, kv_connector_output=kv, **index)
