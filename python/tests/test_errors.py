"""Errors: flash's status codes as Python exceptions carrying its message, the
package's own argument checks, the ctypes descriptor layout, a missing library."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import flashattn
from flashattn import _abi, _library


def qkv(*shape, dtype=torch.float32):
    return [torch.randn(*shape).to(dtype) + 0.5 for _ in range(3)]


def test_exception_classes():
    assert issubclass(flashattn.InvalidArgument, ValueError)
    assert issubclass(flashattn.Unsupported, NotImplementedError)
    assert issubclass(flashattn.BackendError, RuntimeError)
    for cls in (flashattn.InvalidArgument, flashattn.Unsupported, flashattn.BackendError):
        assert issubclass(cls, flashattn.Error)


@pytest.mark.parametrize("kwargs,match", [
    (dict(window=(-2, -1)), "window_left = -2"),
    (dict(scale=-1.0), "scale"),
    (dict(softcap=float("nan")), "softcap"),
])
def test_library_messages_reach_python(kwargs, match):
    q, k, v = qkv(1, 4, 2, 8)
    with pytest.raises(flashattn.InvalidArgument, match=match) as info:
        flashattn.attention(q, k, v, **kwargs)
    assert str(info.value).startswith("flash:")


def test_gqa_heads_must_divide():
    q = torch.randn(1, 4, 3, 8)
    k = torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match="heads_q"):
        flashattn.attention(q, k, k)


def test_unavailable_backend_is_unsupported():
    missing = [b for b in flashattn.backends() if not b.available]
    if not missing:
        pytest.skip("every backend is available in this build")
    q, k, v = qkv(1, 4, 2, 8)
    with pytest.raises(NotImplementedError, match=missing[0].name):
        flashattn.attention(q, k, v, backend=missing[0].name)


def test_host_array_contents_checked():
    q = torch.randn(6, 2, 8)
    with pytest.raises(ValueError, match="cu_seqlens_q"):  # decreasing: the library names the index
        flashattn.attention(q, q, q, cu_seqlens_q=torch.tensor([0, 4, 2, 6], dtype=torch.int32),
                            cu_seqlens_kv=torch.tensor([0, 2, 4, 6], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\] = 9"):  # beyond q's rows: checked here
        flashattn.attention(q, q, q, cu_seqlens_q=torch.tensor([0, 4, 9], dtype=torch.int32),
                            cu_seqlens_kv=torch.tensor([0, 4, 6], dtype=torch.int32))


@pytest.mark.parametrize("make,match", [
    (lambda: qkv(1, 4, 2, 8, dtype=torch.float64), "q.dtype = torch.float64"),
    (lambda: [torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8).half(), torch.randn(1, 4, 2, 8)], "k.dtype"),
    (lambda: qkv(4, 2, 8), r"q.shape = \[4, 2, 8\]"),
    (lambda: [torch.randn(1, 4, 2, 8), torch.randn(1, 5, 2, 8), torch.randn(1, 6, 2, 8)], "v.shape"),
    (lambda: [torch.randn(1, 4, 2, 8), torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8)], r"k.shape\[0\]"),
    (lambda: [torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 4), torch.randn(1, 4, 2, 8)], r"k.shape\[-1\]"),
    (lambda: [torch.randn(1, 4, 2, 16)[..., ::2], torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)],
     r"q.stride\(-1\)"),
    (lambda: [torch.randn(1, 4, 2, 8), torch.randn(1, 1, 2, 8).expand(1, 4, 2, 8),
              torch.randn(1, 4, 2, 8)], "k_stride.seq"),
])
def test_argument_checks(make, match):
    with pytest.raises(ValueError, match=match):
        flashattn.attention(*make())


def test_sequence_array_checks():
    q = torch.randn(6, 2, 8)
    with pytest.raises(ValueError, match="cu_seqlens_q.dtype = torch.int64"):
        flashattn.attention(q, q, q, cu_seqlens_q=torch.tensor([0, 6]), cu_seqlens_kv=torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="cu_seqlens_kv.shape"):
        flashattn.attention(q, q, q, cu_seqlens_q=[0, 6], cu_seqlens_kv=[0, 3, 6])
    with pytest.raises(ValueError, match="block_table.shape"):
        k = torch.randn(4, 8, 2, 8)
        flashattn.attention(torch.randn(2, 1, 2, 8), k, k, block_table=torch.zeros(3, 2, dtype=torch.int32),
                            seqlens_kv=torch.tensor([1, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="block_table"):  # page id out of range: the library's check
        k = torch.randn(4, 8, 2, 8)
        flashattn.attention(torch.randn(2, 1, 2, 8), k, k, block_table=torch.tensor([[0, 9], [1, 2]], dtype=torch.int32),
                            seqlens_kv=torch.tensor([16, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="backend = 'tpu'"):
        flashattn.attention(*qkv(1, 2, 1, 8), backend="tpu")


def test_backward_argument_checks():
    q, k, v = qkv(1, 5, 2, 8)
    o, lse = flashattn.attention(q, k, v, return_lse=True)
    dout = torch.randn(1, 2, 5, 8).transpose(1, 2)
    with pytest.raises(ValueError, match="dout.strides"):
        flashattn.attention_backward(q, k, v, o, dout, lse)
    with pytest.raises(ValueError, match="lse"):
        flashattn.attention_backward(q, k, v, o, o, lse[:, :1])
    with pytest.raises(ValueError, match="dq"):
        flashattn.attention_backward(q, k, v, o, o, lse, dq=torch.empty(1, 2, 5, 8).transpose(1, 2))
    with pytest.raises(ValueError, match="dk"):  # an output overlapping an input: the library's check
        flashattn.attention_backward(q, k, v, o, o, lse, dk=v)


def test_merge_argument_checks():
    o = torch.randn(2, 1, 3, 2, 8)
    lse = torch.randn(2, 1, 2, 3)
    with pytest.raises(ValueError, match="o_parts.strides"):
        flashattn.merge_partials(o.transpose(2, 3).contiguous().transpose(2, 3), lse)
    with pytest.raises(ValueError, match="lse_parts"):
        flashattn.merge_partials(o, lse[:, :, :1])


def test_numpy_byte_strides():
    a = np.zeros(64, dtype=np.float32)
    odd = np.lib.stride_tricks.as_strided(a, (1, 2, 1, 4), (64, 10, 16, 4))
    with pytest.raises(ValueError, match="strides"):
        flashattn.attention(odd, odd, odd)


def test_descriptor_layout_matches_the_library():
    """flash_desc_init writes exactly sizeof(Desc) bytes and the defaults land on the
    fields ctypes thinks they are (a layout mismatch would fail here, not silently)."""
    lib = _library.load()
    pad = 64
    raw = (ctypes.c_uint8 * (ctypes.sizeof(_abi.Desc) + pad))(*([0xAB] * (ctypes.sizeof(_abi.Desc) + pad)))
    desc = _abi.Desc.from_buffer(raw)
    lib.flash_desc_init(ctypes.byref(desc))
    assert bytes(raw[ctypes.sizeof(_abi.Desc):]) == b"\xab" * pad
    assert (desc.batch, desc.heads_q, desc.heads_kv, desc.window_left, desc.window_right,
            desc.deterministic, desc.num_pages, desc.head_dim) == (1, 1, 1, -1, -1, 1, 0, 0)


def test_missing_library_lists_what_was_tried(tmp_path):
    env = dict(os.environ, FLASHATTN_LIBRARY=str(tmp_path / "nowhere" / "libflashattn.so"))
    run = subprocess.run([sys.executable, "-c", "import flashattn; flashattn.backends()"], env=env,
                         capture_output=True, text=True)
    assert run.returncode != 0
    assert "libflashattn.so not found" in run.stderr and str(tmp_path / "nowhere") in run.stderr
    # importing works without the library: only calls need it
    run = subprocess.run([sys.executable, "-c", "import flashattn, flashattn.compat"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_flashattn_root_prefix_is_searched(tmp_path):
    """FLASHATTN_ROOT=<prefix> finds <prefix>/lib/libflashattn.so (the CMake install layout)."""
    if _library._install_dir():
        pytest.skip("this copy was installed by CMake: the library directory it recorded is searched first")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libflashattn.so").symlink_to(flashattn.library_path())
    env = {k: v for k, v in os.environ.items() if k != "FLASHATTN_LIBRARY"}
    env["FLASHATTN_ROOT"] = str(tmp_path)
    run = subprocess.run([sys.executable, "-c", "import flashattn; print(flashattn.library_path())"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(tmp_path / "lib" / "libflashattn.so")
