"""A KV connector for the tests: the scheduler's side of a PD decode instance, whose requests'
prompt KV caches "arrive" from a prefill instance a set time after vLLM starts loading them.

vLLM's own connectors (NIXL, Mooncake) need their transfer libraries and a GPU for their worker
side; the scheduler's side, which is all the plugin sees, is the same contract: a request whose
`kv_transfer_params` say `do_remote_prefill` has its prompt loaded asynchronously (all but its last
token, which the decode instance computes again to sample from), and the workers report it
received in a step's `KVConnectorOutput.finished_recving` (`received()` here, for `engine.drive`).
"""

from __future__ import annotations

import time

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata


class RemotePrefill(KVConnectorBase_V1):
    # Seconds a transfer takes, by request id (0.05 otherwise); set by the test.
    took: dict = {}
    # Request id -> when its load started, until it is reported received.
    loading: dict = {}

    # --- the scheduler's side -----------------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens, *args, **kwargs):
        params = request.kv_transfer_params or {}
        if not params.get("do_remote_prefill"):
            return 0, False
        count = request.num_prompt_tokens - 1 - num_computed_tokens
        return (count, True) if count > 0 else (0, False)

    def update_state_after_alloc(self, request, blocks, num_external_tokens, *args, **kwargs):
        if num_external_tokens:
            RemotePrefill.loading[request.request_id] = time.monotonic()
            request.kv_transfer_params = {**request.kv_transfer_params, "do_remote_prefill": False}

    def build_connector_meta(self, *args, **kwargs):
        return KVConnectorMetadata()

    @classmethod
    def received(cls) -> set:
        """The loads that are done by now (the workers' `finished_recving`)."""
        now = time.monotonic()
        done = {rid for rid, t in cls.loading.items() if now - t >= cls.took.get(rid, 0.05)}
        for rid in done:
            del cls.loading[rid]
        return done

    # --- the workers' side: not run here ------------------------------------------------------

    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        pass
