"""flashattn.attention forward against naive attention in float64 (tolerance rule),
on the cpu/reference backends here and on cuda where available."""
import pytest
import torch

import flashattn
import naive
from conftest import host_backends

# (batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim, head_dim_v): odd sizes,
# Sq < Sk and Sq > Sk, GQA and MQA; head dims multiples of 8 so cuda runs them too.
SHAPES = [(1, 1, 1, 1, 1, 8, 8), (2, 17, 33, 4, 2, 16, 16), (1, 113, 77, 3, 1, 32, 24),
          (3, 40, 129, 8, 8, 64, 64)]
MASKS = [dict(), dict(causal=True), dict(window=(5, 3)), dict(causal=True, window=(7, -1), softcap=2.0)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def run_case(shape, mask, dtype, device, gen, **extra):
    b, sq, sk, hq, hkv, d, dv = shape
    q = naive.randn(b, sq, hq, d, device=device, gen=gen)
    k = naive.randn(b, sk, hkv, d, device=device, gen=gen)
    v = naive.randn(b, sk, hkv, dv, device=device, gen=gen)
    q_, k_, v_ = (t.to(dtype) for t in (q, k, v))
    o, lse = flashattn.attention(q_, k_, v_, return_lse=True, **mask, **extra)
    assert o.dtype == dtype and o.device == q_.device and o.shape == (b, sq, hq, dv)
    assert lse.dtype == torch.float32 and lse.shape == (b, hq, sq)
    ref_o, ref_lse = naive.attention(*(t.to(dtype).double() for t in (q, k, v)), **mask)
    low_o, low_lse = naive.in_dtype(q, k, v, dtype, **mask)
    naive.assert_close(o, ref_o, low_o, dtype, "o")
    naive.assert_close(lse, ref_lse, low_lse, torch.float32 if dtype == torch.float32 else dtype, "lse")
    return o


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_naive(shape, mask, dtype, device, gen):
    run_case(shape, mask, dtype, device, gen)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_forced_host_backend(backend, gen):
    if backend not in host_backends():
        pytest.skip(f"backend {backend} is not available in this build")
    run_case((2, 9, 14, 2, 1, 8, 8), dict(causal=True), torch.float32, "cpu", gen, backend=backend)
    plan = flashattn.explain(*(torch.randn(1, 2, 1, 8) for _ in range(3)), backend=backend)
    assert plan.backend == backend


@pytest.mark.parametrize("d,dv", [(1, 1), (3, 5), (17, 9)])
def test_odd_head_dims_on_host(d, dv, gen):
    # The cuda backend takes multiples of 8 only (README); host backends take any size.
    run_case((2, 7, 11, 2, 1, d, dv), dict(causal=True), torch.float32, "cpu", gen)


def test_scale_and_rows_without_keys(device, gen):
    # Sq > Sk with causal: the first rows see no key (o = 0, lse = -inf); a custom scale.
    o = run_case((1, 9, 4, 2, 2, 8, 8), dict(causal=True, scale=0.3), torch.float32, device, gen)
    assert torch.all(o[:, :5] == 0)


def test_strided_views_pass_without_copies(device, gen, monkeypatch):
    """bhsd-transposed q, every-other-head k, v sliced from a packed kv: the pointers and
    element strides reach the C call unchanged (no hidden contiguous())."""
    b, sq, sk, h, d = 2, 13, 21, 4, 16
    q = naive.randn(b, h, sq, d, device=device, gen=gen).transpose(1, 2)
    k = naive.randn(b, sk, 2 * h, d, device=device, gen=gen)[:, :, ::2]
    v = naive.randn(b, sk, 2, h, d, device=device, gen=gen)[:, :, 1]
    lib = flashattn._library.load()
    seen = {}
    real = lib.flash_attention

    def spy(desc, qp, kp, vp, op):
        d_ = desc._obj
        seen.update(q=(qp, d_.q_stride.batch, d_.q_stride.seq, d_.q_stride.head),
                    k=(kp, d_.k_stride.batch, d_.k_stride.seq, d_.k_stride.head),
                    v=(vp, d_.v_stride.batch, d_.v_stride.seq, d_.v_stride.head))
        return real(desc, qp, kp, vp, op)

    monkeypatch.setattr(lib, "flash_attention", spy)
    o = flashattn.attention(q, k, v, causal=True)
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert seen[name] == (t.data_ptr(),) + tuple(t.stride()[:3]), name
    ref, _ = naive.attention(q.double(), k.double(), v.double(), causal=True)
    low, _ = naive.in_dtype(q, k, v, torch.float32, causal=True)
    naive.assert_close(o, ref, low, torch.float32, "o")


def packed(lengths, *rest, device, gen):
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)
    return naive.randn(sum(lengths), *rest, device=device, gen=gen), cu


def per_sequence(q, k, v, cu_q, cu_k, **mask):
    """Reference for packed batches: each sequence on its own."""
    outs, lses = [], []
    for i in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        o, lse = naive.attention(q[None, qs].double(), k[None, ks].double(), v[None, ks].double(), **mask)
        outs.append(o[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window=(3, 0))], ids=str)
def test_packed_batch(mask, device, gen):
    lens_q, lens_k = [5, 1, 17, 0], [9, 4, 17, 3]
    q, cu_q = packed(lens_q, 4, 16, device=device, gen=gen)
    k, cu_k = packed(lens_k, 2, 16, device=device, gen=gen)
    v = naive.randn(k.shape[0], 2, 8, device=device, gen=gen)
    o, lse = flashattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_k, max_seqlen_q=17,
                                 max_seqlen_kv=17, return_lse=True, **mask)
    assert o.shape == (q.shape[0], 4, 8) and lse.shape == (4, q.shape[0])
    ref_o, ref_lse = per_sequence(q.cpu(), k.cpu(), v.cpu(), cu_q.tolist(), cu_k.tolist(), **mask)
    assert torch.allclose(o.cpu().double(), ref_o, atol=2e-5)
    assert torch.allclose(lse.cpu().double(), ref_lse, atol=2e-5)


def test_packed_batch_default_max_seqlen(device, gen):
    # Without max_seqlen the total rows are the bound: nothing read from the arrays.
    q, cu = packed([3, 8], 2, 8, device=device, gen=gen)
    k, v = naive.randn(*q.shape, device=device, gen=gen), naive.randn(*q.shape, device=device, gen=gen)
    o = flashattn.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, causal=True)
    ref, _ = per_sequence(q.cpu(), k.cpu(), v.cpu(), cu.tolist(), cu.tolist(), causal=True)
    assert torch.allclose(o.cpu().double(), ref, atol=2e-5)


@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
def test_kv_cache_lengths(paged, device, gen):
    b, sq, cap, hq, hkv, d, page = 3, 2, 24, 4, 2, 16, 8
    lens = [5, 24, 13]
    q = naive.randn(b, sq, hq, d, device=device, gen=gen)
    k = naive.randn(b, cap, hkv, d, device=device, gen=gen)
    v = naive.randn(b, cap, hkv, d, device=device, gen=gen)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=device)
    args = dict(seqlens_kv=seqlens)
    kc, vc = k, v
    if paged:  # the same keys, scattered over shuffled pages
        n = b * cap // page
        order = torch.randperm(n, generator=gen)
        table = order.view(b, cap // page).to(torch.int32).to(device)
        kc = torch.empty(n, page, hkv, d, device=device)
        vc = torch.empty(n, page, hkv, d, device=device)
        kc[order] = k.reshape(n, page, hkv, d)
        vc[order] = v.reshape(n, page, hkv, d)
        args["block_table"] = table
    o = flashattn.attention(q, kc, vc, causal=True, **args)
    for i, n in enumerate(lens):
        ref, _ = naive.attention(q[i:i + 1].double(), k[i:i + 1, :n].double(), v[i:i + 1, :n].double(),
                                 causal=True)
        assert torch.allclose(o[i:i + 1].double(), ref, atol=2e-5), f"sequence {i}"


def test_merge_partials(device, gen):
    b, sq, sk, h, d = 2, 5, 30, 3, 16
    q = naive.randn(b, sq, h, d, device=device, gen=gen)
    k = naive.randn(b, sk, h, d, device=device, gen=gen)
    v = naive.randn(b, sk, h, d, device=device, gen=gen)
    full, full_lse = flashattn.attention(q, k, v, return_lse=True)
    parts = [flashattn.attention(q, k[:, a:e], v[:, a:e], return_lse=True) for a, e in ((0, 11), (11, 30))]
    o, lse = flashattn.merge_partials(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]),
                                      return_lse=True)
    assert torch.allclose(o, full, atol=1e-5) and torch.allclose(lse, full_lse, atol=1e-5)
    assert flashattn.merge_partials(torch.stack([p[0] for p in parts]),
                                    torch.stack([p[1] for p in parts])).shape == full.shape


def test_merge_partials_packed(device, gen):
    q, cu = packed([4, 7], 2, 8, device=device, gen=gen)
    k = naive.randn(*q.shape, device=device, gen=gen)
    halves = [flashattn.attention(q, k, k, cu_seqlens_q=cu, cu_seqlens_kv=cu, return_lse=True)
              for _ in range(2)]
    o = flashattn.merge_partials(torch.stack([h[0] for h in halves]), torch.stack([h[1] for h in halves]),
                                 cu_seqlens_q=cu)
    # Two identical parts merge to the same output.
    assert torch.allclose(o, halves[0][0], atol=1e-6)


def test_backends_and_explain(gen):
    infos = flashattn.backends()
    names = [b.name for b in infos]
    assert names[:2] == ["reference", "cpu"] and {"cuda", "hip"} <= set(names)
    assert all(b.available or b.reason for b in infos), "an unavailable backend must say why"
    q = naive.randn(1, 4, 2, 8, gen=gen)
    plan = flashattn.explain(q, q, q, causal=True)
    assert plan.backend in ("cpu", "reference") and plan.kernel and plan.reason
    assert flashattn.explain(q, q, q, backward=True).kernel
    assert flashattn.version().count(".") == 2
