"""GPU-specific behaviour: the current stream, CUDA graph capture, realistic shapes on
the tensor-core kernels; and torch.compile through the custom ops (torch >= 2.4, on
every device). Each skips naming what is missing."""
import pytest
import torch

import flashattn
import naive
from conftest import DEVICES, needs_cuda
from flashattn import compat

_HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")
needs_custom_op = pytest.mark.skipif(
    not _HAS_CUSTOM_OP, reason=f"torch.compile route: torch {torch.__version__} has no "
                               "torch.library.custom_op (needs torch >= 2.4)")


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("d", [64, 128], ids=lambda d: f"D{d}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_realistic_shapes(dtype, d, causal, gen):
    b, sq, sk, hq, hkv = 2, 1000, 1100, 8, 2
    q = naive.randn(b, sq, hq, d, device="cuda", gen=gen)
    k, v = (naive.randn(b, sk, hkv, d, device="cuda", gen=gen) for _ in range(2))
    o = flashattn.attention(q.to(dtype), k.to(dtype), v.to(dtype), causal=causal)
    ref, _ = naive.attention(*(t.to(dtype).double() for t in (q, k, v)), causal=causal)
    low, _ = naive.in_dtype(q, k, v, dtype, causal=causal)
    naive.assert_close(o, ref, low, dtype, "o")


@needs_cuda
def test_runs_on_the_current_stream(gen, monkeypatch):
    lib = flashattn._library.load()
    real, seen = lib.flash_attention, []

    def spy(desc, *ptrs):
        seen.append(desc._obj.stream)
        return real(desc, *ptrs)

    monkeypatch.setattr(lib, "flash_attention", spy)
    q = naive.randn(2, 64, 4, 64, device="cuda", gen=gen).half()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o = flashattn.attention(q, q, q, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    assert seen == [side.cuda_stream]
    assert torch.equal(o, flashattn.attention(q, q, q, causal=True))


@needs_cuda
def test_cuda_graph_capture(gen):
    """Warm calls captured in a CUDA graph (no synchronisation or host reads in the
    call), replayed on new inputs: forward, varlen, KV-cache decode with append."""
    b, s, h, d = 2, 128, 4, 64
    q, k, v = (naive.randn(b, s, h, d, device="cuda", gen=gen).half() for _ in range(3))
    cu = torch.tensor([0, 100, 256], dtype=torch.int32, device="cuda")
    cache_k, cache_v = (naive.randn(b, 256, h, d, device="cuda", gen=gen).half() for _ in range(2))
    lens = torch.tensor([10, 200], dtype=torch.int32, device="cuda")
    new_k, new_v = (naive.randn(b, 1, h, d, device="cuda", gen=gen).half() for _ in range(2))

    def step():
        o1 = flashattn.attention(q, k, v, causal=True)
        o2 = compat.flash_attn_varlen_func(q.view(-1, h, d), k.view(-1, h, d), v.view(-1, h, d), cu, cu,
                                           156, 156, causal=True)
        o3 = compat.flash_attn_with_kvcache(q[:, :1], cache_k, cache_v, k=new_k, v=new_v, cache_seqlens=lens,
                                            causal=True)
        return o1, o2, o3

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm: module loads and first-call setup happen outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for t in (q, k, v, new_k, new_v):
        t.copy_(torch.randn_like(t))
    graph.replay()
    torch.cuda.synchronize()
    lens_before = lens.clone()
    expected = step()  # eager, same inputs: writes the same cache rows again
    for name, got, want in zip(("attention", "varlen", "kvcache"), captured, expected):
        assert torch.equal(got, want), name
    assert torch.equal(lens, lens_before)  # like FlashAttention, cache_seqlens is not advanced


@needs_cuda
@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_flash_check_validates_device_arrays(backend, gen, monkeypatch):
    """Device sequence arrays are read by no host code unless FLASH_CHECK=1: then a bad entry
    raises naming the array, the index and the value; without it the kernels clamp what they
    read (no fault; the result is unspecified). hip: the hip-on-cuda module, where present."""
    info = {b.name: b for b in flashattn.backends()}.get(backend)
    if info is None or not info.available:
        pytest.skip(f"{backend} backend unavailable: {getattr(info, 'reason', 'not built')}")
    q = naive.randn(6, 2, 64, device="cuda", gen=gen).half()
    good = torch.tensor([0, 2, 4, 6], dtype=torch.int32, device="cuda")
    bad = torch.tensor([0, 4, 2, 6], dtype=torch.int32, device="cuda")  # decreases at index 2
    kw = {"cu_seqlens_kv": good, "max_seqlen_q": 4, "max_seqlen_kv": 2, "backend": backend}
    monkeypatch.delenv("FLASH_CHECK", raising=False)
    flashattn.attention(q, q, q, cu_seqlens_q=bad, **kw)
    torch.cuda.synchronize()
    monkeypatch.setenv("FLASH_CHECK", "1")
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\] = 2"):
        flashattn.attention(q, q, q, cu_seqlens_q=bad, **kw)
    o = flashattn.attention(q, q, q, cu_seqlens_q=good, **kw)
    ref = flashattn.attention(q.cpu(), q.cpu(), q.cpu(), cu_seqlens_q=good.cpu(), cu_seqlens_kv=good.cpu(),
                              backend="reference")
    assert torch.allclose(o.cpu().float(), ref.float(), atol=1e-2)


@needs_custom_op
@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_keeps_one_graph(device, gen):
    q, k, v = (naive.randn(2, 33, 4, 16, device=device, gen=gen).requires_grad_() for _ in range(3))

    def f(q, k, v):
        return compat.flash_attn_func(q, k, v, causal=True).square().sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    loss = compiled(q, k, v)
    loss.backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    f(q, k, v).backward()
    assert torch.allclose(loss, f(q, k, v))
    for g, t in zip(grads, (q, k, v)):
        assert torch.allclose(g, t.grad, atol=1e-6)


@needs_custom_op
def test_custom_op_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 5, 4, 16)
        k = torch.empty(2, 7, 2, 16)
        v = torch.empty(2, 7, 2, 8)
        o, lse = torch.ops.flashattn.fwd(q, k, v, None, None, None, None, True, -1, -1, 0.0, 0.0, "auto",
                                         True, -1, -1)
    assert o.shape == (2, 5, 4, 8) and lse.shape == (2, 4, 5)
