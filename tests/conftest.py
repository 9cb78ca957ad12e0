"""Shared test setup: hypothesis profiles (CI runs more examples), the gpu marker, one torch thread."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
import robotrl.sim  # noqa: F401 - chooses MUJOCO_GL before any test module imports mujoco
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip gpu tests when no CUDA device is present (they still run on a GPU host)."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread for tiny networks: on a shared 2-core machine more threads are many times slower.

    Modules of torch tests take it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Test-only helpers importable from every test folder (e.g. ``from learner_doubles import ...``).
sys.path.insert(0, os.path.dirname(__file__))
