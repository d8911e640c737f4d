"""Shared fixtures: the device parameter (CUDA cases skip naming what is missing),
random generators, and the library's backends."""
import os
import sys
import zlib

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: apt-get install python3-torch)")
import flashattn  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # naive.py


def _cuda_missing():
    """Why CUDA tests cannot run here, or None."""
    if not torch.cuda.is_available():
        return (f"CUDA: torch {torch.__version__} reports torch.cuda.is_available() = False "
                f"(no GPU or a CPU-only torch build)")
    cuda = {b.name: b for b in flashattn.backends()}["cuda"]
    if not cuda.available:
        return f"CUDA: libflashattn's cuda backend is unavailable: {cuda.reason}"
    return None


CUDA_MISSING = _cuda_missing()
needs_cuda = pytest.mark.skipif(CUDA_MISSING is not None, reason=str(CUDA_MISSING))
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def gen(request):
    """A generator seeded from the test's name: reproducible, different per test."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    return g


def host_backends():
    """Backends that run host memory here (reference, and cpu when built)."""
    return [b.name for b in flashattn.backends() if b.available and b.name in ("reference", "cpu")]


def pytest_report_header(config):
    """What is under test: which package and library, with which torch."""
    lines = [f"flashattn {flashattn.__file__}", f"libflashattn {flashattn.version()} {flashattn.library_path()}",
             f"torch {torch.__version__}, custom_op: {hasattr(torch.library, 'custom_op')}"]
    lines += [f"backend {b.name}: " + (b.detail if b.available else "unavailable: " + b.reason)
              for b in flashattn.backends()]
    return lines
