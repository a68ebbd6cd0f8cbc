"""Test hygiene for pytest over tests/ and nbval over notebooks/ (both load this file).

A warm Inductor cache silently skips lowering, so the IR we test for would never appear: every
test run gets its own Inductor and Triton cache directories. The variables are set here, at
import, before torch is imported, and nbval's kernels inherit them.
"""

from __future__ import annotations

import os
import random
import tempfile

_RUN_DIR = tempfile.mkdtemp(prefix="labkit-run-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_RUN_DIR, "inductor")
os.environ["TRITON_CACHE_DIR"] = os.path.join(_RUN_DIR, "triton")
os.environ.setdefault("LABKIT_CACHE_DIR", os.path.join(_RUN_DIR, "labkit"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PYTHONHASHSEED", "0")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """One ``taskN_M`` marker per exercise task, from the rubric (its only list)."""
    from labkit.grading.rubric import load

    for line in load().markers():
        config.addinivalue_line("markers", line)


def pytest_report_header(config: pytest.Config) -> list[str]:
    import platform

    import torch

    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = "not installed"
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"
    return [
        f"labkit: torch {torch.__version__}, triton {tv}, python {platform.python_version()}, {cuda}",
        f"labkit: caches under {_RUN_DIR}",
    ]


@pytest.fixture(autouse=True)
def _fixed_seeds() -> None:
    """Every test starts from the same random state."""
    import torch

    random.seed(0)
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """Pin torch to one thread for the test (timing and determinism)."""
    from labkit.bench import pinned_threads

    with pinned_threads(1):
        yield
