"""Records SGLang's scheduler steps (which requests ran in each step, what each computed, every
token with its logprobs) and ships them to tokenscope's native gRPC ingest.

Installed next to SGLang, the package registers itself under SGLang's `sglang.srt.plugins` entry
point group: every scheduler process calls `register()`, which hooks the scheduler's methods
through SGLang's own `HookRegistry`. Nothing in SGLang's code or command line changes.
"""

from .hooks import register

__all__ = ["register"]
