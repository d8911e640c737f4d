"""Gradients: flashattn.attention_backward and loss.backward() through flashattn.attention,
against torch autograd through naive attention in float64 (tolerance rule)."""
import pytest
import torch

import flashattn
import naive

SHAPES = [(1, 1, 1, 1, 1, 8, 8), (2, 17, 33, 4, 2, 16, 16), (1, 45, 23, 3, 1, 32, 24)]
MASKS = [dict(), dict(causal=True), dict(window=(4, 2), softcap=3.0)]


def leaves(shape, device, gen, dtype=torch.float32):
    b, sq, sk, hq, hkv, d, dv = shape
    return [naive.randn(*s, device=device, gen=gen).to(dtype).requires_grad_()
            for s in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, dv))]


def naive_grads(q, k, v, dout, dtype, **mask):
    """(float64 gradients, gradients of naive attention "in dtype")."""
    out = []
    for compute, round_to in ((torch.float64, None), (torch.float32, None if dtype == torch.float32 else dtype)):
        xs = [t.detach().to(compute).requires_grad_() for t in (q, k, v)]
        o, _ = naive.attention(*xs, round_to=round_to, **mask)
        o.backward(dout.to(compute))
        out.append([x.grad for x in xs])
    return out


def check_grads(grads, q, k, v, dout, dtype, **mask):
    ref, low = naive_grads(q, k, v, dout, dtype, **mask)
    magnitude = max(r.abs().max().item() for r in ref)
    for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref, low):
        assert g.shape == r.shape and g.dtype == dtype, name
        naive.assert_close(g, r, lo, dtype, name, magnitude)


@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_attention_backward_matches_autograd(shape, mask, device, gen):
    q, k, v = (t.detach() for t in leaves(shape, device, gen))
    o, lse = flashattn.attention(q, k, v, return_lse=True, **mask)
    dout = naive.randn(*o.shape, device=device, gen=gen)
    grads = flashattn.attention_backward(q, k, v, o, dout, lse, **mask)
    check_grads(grads, q, k, v, dout, torch.float32, **mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_loss_backward(dtype, device, gen):
    shape, mask = (2, 17, 33, 4, 2, 16, 16), dict(causal=True)
    q, k, v = leaves(shape, device, gen, dtype)
    o = flashattn.attention(q, k, v, **mask)
    assert o.requires_grad and o.grad_fn is not None
    dout = naive.randn(*o.shape, device=device, gen=gen).to(dtype)
    (o.float() * dout.float()).sum().backward()
    check_grads([q.grad, k.grad, v.grad], q, k, v, dout.float(), dtype, **mask)


def test_backward_of_strided_views(device, gen):
    """Inputs that are views (bhsd transpose, slices of a packed kv): gradients reach
    the leaves with the right values; dout of o.sum() is an expanded (stride-0) tensor."""
    b, s, h, d = 2, 11, 3, 8
    qb = naive.randn(b, h, s, d, device=device, gen=gen).requires_grad_()
    kv = naive.randn(b, s, 2, h, d, device=device, gen=gen).requires_grad_()
    q, k, v = qb.transpose(1, 2), kv[:, :, 0], kv[:, :, 1]
    flashattn.attention(q, k, v, causal=True).sum().backward()
    q2, kv2 = qb.detach().double().requires_grad_(), kv.detach().double().requires_grad_()
    o2, _ = naive.attention(q2.transpose(1, 2), kv2[:, :, 0], kv2[:, :, 1], causal=True)
    o2.sum().backward()
    assert torch.allclose(qb.grad.double(), q2.grad, atol=1e-5)
    assert torch.allclose(kv.grad.double(), kv2.grad, atol=1e-5)


def test_packed_batch_backward(device, gen):
    lens = [6, 1, 13]
    cu = torch.tensor([0, 6, 7, 20], dtype=torch.int32, device=device)
    q, k, v = (naive.randn(20, 2, 8, device=device, gen=gen).requires_grad_() for _ in range(3))
    o = flashattn.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=13,
                            max_seqlen_kv=13, causal=True)
    dout = naive.randn(*o.shape, device=device, gen=gen)
    o.backward(dout)
    start = 0
    for n in lens:
        rows = slice(start, start + n)
        xs = [t.detach()[None, rows].double().requires_grad_() for t in (q, k, v)]
        ref, _ = naive.attention(*xs, causal=True)
        ref.backward(dout[None, rows].double())
        for name, leaf, x in zip("qkv", (q, k, v), xs):
            assert torch.allclose(leaf.grad[rows].double(), x.grad[0], atol=1e-5), f"d{name} rows {rows}"
        start += n


def test_backward_is_deterministic(device, gen):
    q, k, v = (t.detach() for t in leaves((2, 33, 47, 4, 1, 16, 16), device, gen))
    o, lse = flashattn.attention(q, k, v, return_lse=True, causal=True)
    dout = naive.randn(*o.shape, device=device, gen=gen)
    first = flashattn.attention_backward(q, k, v, o, dout, lse, causal=True)
    again = flashattn.attention_backward(q, k, v, o, dout, lse, causal=True)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_cache_fields_refused_in_backward(gen):
    q, k, v = leaves((2, 3, 8, 2, 2, 8, 8), "cpu", gen)
    o = flashattn.attention(q, k, v, seqlens_kv=torch.tensor([8, 5], dtype=torch.int32))
    with pytest.raises(ValueError, match="seqlens_kv"):
        o.sum().backward()


def test_no_grad_skips_autograd(gen):
    q, k, v = leaves((1, 3, 3, 1, 1, 8, 8), "cpu", gen)
    with torch.no_grad():
        assert flashattn.attention(q, k, v).grad_fn is None
