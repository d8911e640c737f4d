"""flashattn.compat: FlashAttention-2's functions — signatures, shapes, return values,
values and gradients against naive attention, the KV cache update, refusals."""
import inspect

import pytest
import torch

import naive
from flashattn import compat

_COMMON = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
           ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False), ("return_attn_probs", False)]
_REQUIRED = inspect.Parameter.empty
# flash_attn 2.x (flash_attn_interface.py): names and defaults, in order.
SIGNATURES = {
    "flash_attn_func": [("q", _REQUIRED), ("k", _REQUIRED), ("v", _REQUIRED)] + _COMMON,
    "flash_attn_qkvpacked_func": [("qkv", _REQUIRED)] + _COMMON,
    "flash_attn_kvpacked_func": [("q", _REQUIRED), ("kv", _REQUIRED)] + _COMMON,
    "flash_attn_varlen_func": [(n, _REQUIRED) for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k",
                                                         "max_seqlen_q", "max_seqlen_k")]
    + _COMMON + [("block_table", None)],
    "flash_attn_varlen_qkvpacked_func": [(n, _REQUIRED) for n in ("qkv", "cu_seqlens", "max_seqlen")]
    + _COMMON,
    "flash_attn_varlen_kvpacked_func": [(n, _REQUIRED) for n in ("q", "kv", "cu_seqlens_q", "cu_seqlens_k",
                                                                  "max_seqlen_q", "max_seqlen_k")] + _COMMON,
    "flash_attn_with_kvcache": [("q", _REQUIRED), ("k_cache", _REQUIRED), ("v_cache", _REQUIRED),
                                ("k", None), ("v", None), ("rotary_cos", None), ("rotary_sin", None),
                                ("cache_seqlens", None), ("cache_batch_idx", None), ("cache_leftpad", None),
                                ("block_table", None), ("softmax_scale", None), ("causal", False),
                                ("window_size", (-1, -1)), ("softcap", 0.0), ("rotary_interleaved", True),
                                ("alibi_slopes", None), ("num_splits", 0), ("return_softmax_lse", False)],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature_matches_flash_attn(name):
    params = inspect.signature(getattr(compat, name)).parameters.values()
    assert [(p.name, p.default) for p in params] == SIGNATURES[name]


def reference(q, k, v, **mask):
    """(float64 o, float64 lse, float32 naive o) for the tolerance rule."""
    o, lse = naive.attention(q.double(), k.double(), v.double(), **mask)
    low, _ = naive.attention(q.float(), k.float(), v.float(), **mask)
    return o, lse, low


def test_flash_attn_func(device, gen):
    b, sq, sk, hq, hkv, d = 2, 19, 31, 6, 2, 32
    q = naive.randn(b, sq, hq, d, device=device, gen=gen)
    k, v = (naive.randn(b, sk, hkv, d, device=device, gen=gen) for _ in range(2))
    out = compat.flash_attn_func(q, k, v, causal=True, window_size=(9, 0), softcap=5.0)
    ref, ref_lse, low = reference(q, k, v, causal=True, window=(9, 0), softcap=5.0)
    naive.assert_close(out, ref, low, torch.float32, "out")
    out2, lse, probs = compat.flash_attn_func(q, k, v, softmax_scale=0.2, return_attn_probs=True)
    assert out2.shape == (b, sq, hq, d) and lse.shape == (b, hq, sq) and lse.dtype == torch.float32
    assert probs is None  # FlashAttention returns no S_dmask without dropout either
    ref, ref_lse, _ = reference(q, k, v, scale=0.2)
    assert torch.allclose(lse.double(), ref_lse, atol=1e-5)


def test_packed_functions_match_unpacked_and_train(device, gen):
    b, s, h, d = 2, 13, 4, 16
    qkv = naive.randn(b, s, 3, h, d, device=device, gen=gen).requires_grad_()
    out = compat.flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = qkv.detach().unbind(2)
    assert torch.equal(out.detach(), compat.flash_attn_func(q, k, v, causal=True))
    dout = naive.randn(*out.shape, device=device, gen=gen)
    out.backward(dout)
    ref = qkv.detach().double().requires_grad_()
    o, _ = naive.attention(*ref.unbind(2), causal=True)
    o.backward(dout.double())
    assert qkv.grad.shape == qkv.shape and torch.allclose(qkv.grad.double(), ref.grad, atol=1e-5)

    q = naive.randn(b, s, h, d, device=device, gen=gen).requires_grad_()
    kv = naive.randn(b, s + 3, 2, 2, d, device=device, gen=gen).requires_grad_()  # GQA: 2 kv heads
    out, lse, _ = compat.flash_attn_kvpacked_func(q, kv, return_attn_probs=True)
    assert out.shape == (b, s, h, d) and lse.shape == (b, h, s)
    out.sum().backward()
    q2, kv2 = q.detach().double().requires_grad_(), kv.detach().double().requires_grad_()
    naive.attention(q2, *kv2.unbind(2))[0].sum().backward()
    assert torch.allclose(q.grad.double(), q2.grad, atol=1e-5)
    assert torch.allclose(kv.grad.double(), kv2.grad, atol=1e-5)


def _cu(lengths, device):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)


def _per_sequence(fn, q, k, v, cu_q, cu_k):
    """Reference for a packed batch: fn on each sequence, rows concatenated."""
    outs = []
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for i in range(len(cq) - 1):
        outs.append(fn(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]], v[None, ck[i]:ck[i + 1]])[0])
    return torch.cat(outs)


def test_varlen_functions(device, gen):
    lq, lk, h, d = [7, 1, 12], [9, 3, 12], 4, 16
    cu_q, cu_k = _cu(lq, device), _cu(lk, device)
    q = naive.randn(sum(lq), h, d, device=device, gen=gen).requires_grad_()
    k, v = (naive.randn(sum(lk), 2, d, device=device, gen=gen).requires_grad_() for _ in range(2))
    out, lse, probs = compat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 12, 12, causal=True,
                                                    return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (h, sum(lq)) and probs is None
    dout = naive.randn(*out.shape, device=device, gen=gen)
    out.backward(dout)
    xs = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = _per_sequence(lambda *a: naive.attention(*a, causal=True)[0], *xs, cu_q, cu_k)
    ref.backward(dout.double())
    assert torch.allclose(out.detach().double(), ref.detach(), atol=1e-5)
    for leaf, x in zip((q, k, v), xs):
        assert torch.allclose(leaf.grad.double(), x.grad, atol=1e-5)

    # packed qkv and kv variants give the same result on the same data
    qkv = naive.randn(sum(lq), 3, h, d, device=device, gen=gen).requires_grad_()
    out = compat.flash_attn_varlen_qkvpacked_func(qkv, cu_q, 12, causal=True)
    a, b_, c = qkv.detach().unbind(1)
    assert torch.equal(out.detach(), compat.flash_attn_varlen_func(a, b_, c, cu_q, cu_q, 12, 12, causal=True))
    out.sum().backward()
    assert qkv.grad.shape == qkv.shape and torch.isfinite(qkv.grad).all()
    kv = torch.stack([k.detach(), v.detach()], dim=1)
    out = compat.flash_attn_varlen_kvpacked_func(q.detach(), kv, cu_q, cu_k, 12, 12, causal=True)
    assert torch.equal(out, compat.flash_attn_varlen_func(q.detach(), k.detach(), v.detach(), cu_q, cu_k,
                                                          12, 12, causal=True))


def _paged(k, page, gen):
    """[batch, cap, H, D] -> shuffled pages [batch * cap / page, page, H, D] and the table."""
    b, cap = k.shape[:2]
    n = b * cap // page
    order = torch.randperm(n, generator=gen)
    pages = torch.empty(n, page, *k.shape[2:], device=k.device, dtype=k.dtype)
    pages[order] = k.reshape(n, page, *k.shape[2:])
    return pages, order.view(b, cap // page).to(torch.int32).to(k.device)


def test_varlen_with_block_table(device, gen):
    lq, lk, page = [2, 3], [11, 16], 8
    q = naive.randn(sum(lq), 4, 16, device=device, gen=gen)
    k, v = (naive.randn(2, 16, 2, 16, device=device, gen=gen) for _ in range(2))
    pk, table = _paged(k, page, gen)
    pv = torch.empty_like(pk)
    pv[table.view(-1).long()] = v.reshape(-1, page, 2, 16)
    out = compat.flash_attn_varlen_func(q, pk, pv, _cu(lq, device), _cu(lk, device), 3, 16, causal=True,
                                        block_table=table)
    ref = torch.cat([naive.attention(q[None, a:e].double(), k[i:i + 1, :n].double(), v[i:i + 1, :n].double(),
                                     causal=True)[0][0]
                     for i, (a, e, n) in enumerate(((0, 2, 11), (2, 5, 16)))])
    assert torch.allclose(out.double(), ref, atol=1e-5)


@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
def test_with_kvcache_appends_and_attends(paged, device, gen):
    b, cap, hq, hkv, d, new, page = 3, 32, 4, 2, 16, 2, 8
    lens = torch.tensor([0, 17, 30], dtype=torch.int32, device=device)
    k_dense, v_dense = (naive.randn(b, cap, hkv, d, device=device, gen=gen) for _ in range(2))
    q = naive.randn(b, new, hq, d, device=device, gen=gen)
    k_new, v_new = (naive.randn(b, new, hkv, d, device=device, gen=gen) for _ in range(2))
    if paged:
        k_cache, table = _paged(k_dense, page, gen)
        v_cache = torch.empty_like(k_cache)
        v_cache[table.view(-1).long()] = v_dense.reshape(-1, page, hkv, d)
    else:
        k_cache, v_cache, table = k_dense.clone(), v_dense.clone(), None
    before = k_cache.clone()
    out, lse = compat.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens,
                                              block_table=table, causal=True, return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (b, hq, new)
    for i, n in enumerate(lens.tolist()):
        k_dense[i, n:n + new], v_dense[i, n:n + new] = k_new[i], v_new[i]
        ref, ref_lse = naive.attention(q[i:i + 1].double(), k_dense[i:i + 1, :n + new].double(),
                                       v_dense[i:i + 1, :n + new].double(), causal=True)
        assert torch.allclose(out[i:i + 1].double(), ref, atol=1e-5), f"sequence {i}"
        assert torch.allclose(lse[i:i + 1].double(), ref_lse, atol=1e-5), f"sequence {i}"
    # the cache now holds the new rows, and nothing else changed
    cache_view = k_cache if not paged else k_cache[table.long()].reshape(b, cap, hkv, d)
    assert torch.equal(cache_view, k_dense)
    assert (k_cache != before).any(dim=-1).sum() == b * new * hkv


def test_with_kvcache_int_lengths_and_no_lengths(device, gen):
    b, cap, h, d = 2, 10, 2, 8
    q = naive.randn(b, 1, h, d, device=device, gen=gen)
    k_cache, v_cache = (naive.randn(b + 1, cap, h, d, device=device, gen=gen) for _ in range(2))
    out = compat.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=6)
    ref, _ = naive.attention(q.double(), k_cache[:b, :6].double(), v_cache[:b, :6].double())
    assert torch.allclose(out.double(), ref, atol=1e-5)
    full = compat.flash_attn_with_kvcache(q, k_cache, v_cache, num_splits=3)  # whole cache
    ref, _ = naive.attention(q.double(), k_cache[:b].double(), v_cache[:b].double())
    assert torch.allclose(full.double(), ref, atol=1e-5)


@pytest.mark.parametrize("call,argument", [
    (lambda x: compat.flash_attn_func(x, x, x, dropout_p=0.1), "dropout_p"),
    (lambda x: compat.flash_attn_func(x, x, x, alibi_slopes=torch.ones(2)), "alibi_slopes"),
    (lambda x: compat.flash_attn_qkvpacked_func(torch.stack([x] * 3, 2), dropout_p=0.5), "dropout_p"),
    (lambda x: compat.flash_attn_with_kvcache(x, x, x, rotary_cos=x), "rotary_cos"),
    (lambda x: compat.flash_attn_with_kvcache(x, x, x, rotary_sin=x), "rotary_sin"),
    (lambda x: compat.flash_attn_with_kvcache(x, x, x, cache_batch_idx=x), "cache_batch_idx"),
    (lambda x: compat.flash_attn_with_kvcache(x, x, x, cache_leftpad=x), "cache_leftpad"),
    (lambda x: compat.flash_attn_with_kvcache(x, x, x, alibi_slopes=x), "alibi_slopes"),
])
def test_unsupported_arguments_raise_naming_them(call, argument, gen):
    x = naive.randn(1, 4, 2, 8, gen=gen)
    with pytest.raises(NotImplementedError, match=argument):
        call(x)


def test_flash_attn_script(device):
    """A script written for the flash_attn package, its import changed (acceptance)."""
    import flash_attn_script
    errors = flash_attn_script.main(device)
    assert errors and all(err <= bound for err, bound in errors.values()), errors
