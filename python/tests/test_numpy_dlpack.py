"""Inputs other than torch tensors: numpy arrays (outputs come back as numpy), and any
object with only __dlpack__ / __dlpack_device__ (outputs through its framework's
from_dlpack: here this module's, standing in for cupy's or jax's)."""
import numpy as np
import pytest
import torch

import flashattn
import naive


class DLPackOnly:
    """An array of an unknown framework: nothing but the DLPack protocol."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, stream=None):
        return self.inner.__dlpack__(stream=stream) if stream is not None else self.inner.__dlpack__()

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def from_dlpack(x):
    """This module's from_dlpack: flashattn hands outputs for DLPackOnly inputs to the
    input's top-level module's from_dlpack, as it would to cupy.from_dlpack."""
    return DLPackOnly(torch.from_dlpack(x))


def arrays(gen, *shapes, dtype=np.float32):
    return [naive.randn(*s, gen=gen).numpy().astype(dtype) for s in shapes]


def reference(q, k, v, **mask):
    t = [torch.from_numpy(np.ascontiguousarray(x)).float() for x in (q, k, v)]
    ref, lse = naive.attention(*(x.double() for x in t), **mask)
    low, _ = naive.in_dtype(*t, torch.float32 if q.dtype == np.float32 else torch.float16, **mask)
    return ref, lse, low


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: d.__name__)
def test_numpy_forward(dtype, gen):
    q, k, v = arrays(gen, (2, 9, 4, 16), (2, 14, 2, 16), (2, 14, 2, 8), dtype=dtype)
    o, lse = flashattn.attention(q, k, v, causal=True, return_lse=True)
    assert isinstance(o, np.ndarray) and o.dtype == dtype and o.shape == (2, 9, 4, 8)
    assert isinstance(lse, np.ndarray) and lse.dtype == np.float32 and lse.shape == (2, 4, 9)
    ref, ref_lse, low = reference(q, k, v, causal=True)
    naive.assert_close(torch.from_numpy(o), ref, low, torch.float32 if dtype == np.float32 else torch.float16,
                       "o")


def test_numpy_strided_views(gen):
    qb, kv = arrays(gen, (2, 3, 11, 8), (2, 13, 2, 3, 8))
    q, k, v = qb.transpose(0, 2, 1, 3), kv[:, :, 0], kv[:, :, 1]
    assert not q.flags.c_contiguous and not k.flags.c_contiguous
    o = flashattn.attention(q, k, v)
    ref, _, low = reference(q, k, v)
    naive.assert_close(torch.from_numpy(o), ref, low, torch.float32, "o")


def test_numpy_backward_packed_and_merge(gen):
    q, k, v = arrays(gen, (2, 7, 2, 8), (2, 7, 2, 8), (2, 7, 2, 8))
    o, lse = flashattn.attention(q, k, v, return_lse=True)
    dout, = arrays(gen, (2, 7, 2, 8))
    grads = flashattn.attention_backward(q, k, v, o, dout, lse)
    assert all(isinstance(g, np.ndarray) and g.shape == x.shape for g, x in zip(grads, (q, k, v)))
    ts = [torch.from_numpy(x).double().requires_grad_() for x in (q, k, v)]
    naive.attention(*ts)[0].backward(torch.from_numpy(dout).double())
    for g, t in zip(grads, ts):
        assert np.allclose(g, t.grad.numpy(), atol=1e-5)
    # packed rows with the cu_seqlens as a Python list (host memory)
    rows = q.reshape(14, 2, 8)
    packed = flashattn.attention(rows, rows, rows, cu_seqlens_q=[0, 3, 14], cu_seqlens_kv=[0, 3, 14])
    assert isinstance(packed, np.ndarray) and packed.shape == (14, 2, 8)
    merged = flashattn.merge_partials(np.stack([o, o]), np.stack([lse, lse]))
    assert np.allclose(merged, o, atol=1e-6)


def test_dlpack_only_objects(gen):
    q, k, v = arrays(gen, (1, 5, 2, 8), (1, 6, 2, 8), (1, 6, 2, 8))
    o = flashattn.attention(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=True)
    assert isinstance(o, DLPackOnly)
    ref, _, low = reference(q, k, v, causal=True)
    naive.assert_close(o.inner, ref, low, torch.float32, "o")


def test_dlpack_only_bf16_strided(gen):
    # bf16 (DLPack code 4) and a strided view (explicit DLPack strides) via torch's exporter
    base = naive.randn(1, 2, 9, 16, gen=gen).to(torch.bfloat16)
    q = base.transpose(1, 2)
    o = flashattn.attention(DLPackOnly(q), DLPackOnly(q), DLPackOnly(q))
    assert torch.equal(o.inner, flashattn.attention(q, q, q))


def test_dlpack_rejects_non_arrays():
    with pytest.raises(ValueError, match="__dlpack__"):
        flashattn.attention([[1.0]], [[1.0]], [[1.0]])
