"""Records vLLM's scheduler steps (which requests ran in each step, what each computed, every
token with its logprobs) and ships them to tokenscope's native gRPC ingest."""

from .scheduler import TracingAsyncScheduler, TracingScheduler

__all__ = ["TracingScheduler", "TracingAsyncScheduler"]
