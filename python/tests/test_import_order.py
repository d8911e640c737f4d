"""Import order: torch imported after flashattn has probed every backend (the GPU
machine's torch 2.11 + CUDA crashed there before flashattn imported torch first,
_library._import_torch_first). Runs in a fresh interpreter so the order is real."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")


def run(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_torch_after_backends_probe():
    r = run("import flashattn; flashattn.backends(); import torch; "
            "print(torch.device('cpu'), torch.ones(2).sum().item())")
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert "cpu 2.0" in r.stdout


def test_library_load_imports_torch_first():
    r = run("import sys, flashattn; flashattn.backends(); print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
    r = run("import sys, flashattn; flashattn.backends(); print('torch' in sys.modules)",
            FLASHATTN_NO_TORCH_FIRST="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
