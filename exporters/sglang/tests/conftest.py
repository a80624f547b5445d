"""The fixture the SGLang plugin's test modules share: the plugin loaded by SGLang's own loader."""

from __future__ import annotations

import pytest

import engine


@pytest.fixture(scope="session")
def plugins():
    """SGLang's `Scheduler` with the model's methods and the plugin's hooks applied."""
    engine.install_plugins()
    from sglang.srt.managers.scheduler import Scheduler

    return Scheduler
