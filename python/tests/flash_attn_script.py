"""A program written for the flash_attn package (forward, backward, varlen, KV cache with
a paged cache), with one change: the import below (was `from flash_attn import ...`).
Checks each result against torch's math SDPA (naive attention on torch < 2.0, which has
no SDPA) in float64, under the tolerance rule. Run: python flash_attn_script.py [cuda]."""
import math
import sys

import torch

from flashattn.compat import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache


def sdpa64(q, k, v, causal):
    """Reference: [B, S, H, D] in, float64 math attention out (GQA by repeating kv)."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    sq, sk = q.shape[2], k.shape[2]
    mask = None
    if causal:  # flash_attn's causal mask is bottom-right aligned
        i = torch.arange(sq, device=q.device)[:, None]
        mask = torch.arange(sk, device=q.device)[None, :] <= i + sk - sq
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is not None:
        o = sdpa(q, k, v, attn_mask=mask)
    else:
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        o = torch.softmax(s, -1) @ v
    return o.transpose(1, 2)


def check(name, ours, ref, lowp, errors):
    """Tolerance rule: |ours - ref| <= 2 |lowp - ref| + 1e-3 max|ref| (bf16 eps)."""
    err = (ours.double() - ref).abs().max().item()
    bound = 2 * (lowp.double() - ref).abs().max().item() + 1e-3 * ref.abs().max().item()
    errors[name] = (err, bound)


def main(device="cuda"):
    torch.manual_seed(0)
    dt = torch.bfloat16
    errors = {}
    # 1. forward + backward, GQA, causal
    q = torch.randn(2, 64, 8, 64, device=device, dtype=dt, requires_grad=True)
    k = torch.randn(2, 96, 2, 64, device=device, dtype=dt, requires_grad=True)
    v = torch.randn(2, 96, 2, 64, device=device, dtype=dt, requires_grad=True)
    out = flash_attn_func(q, k, v, causal=True)
    out.float().square().sum().backward()
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = sdpa64(*ref_in, causal=True)
    ref.square().sum().backward()
    low_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    low = sdpa64(*low_in, causal=True).to(dt)  # rounded like a bf16 kernel's output
    check("forward", out, ref.detach(), low, errors)
    for name, ours, r, lo in zip(("dq", "dk", "dv"), (q, k, v), ref_in, low_in):
        lo_grad = torch.autograd.grad(sdpa64(*low_in, causal=True).to(dt).float().square().sum(),
                                      lo, retain_graph=True)[0].to(dt)
        check(name, ours.grad, r.grad, lo_grad, errors)
    # 2. varlen: three sequences packed
    lens = [17, 64, 5]
    cu = torch.tensor([0, 17, 81, 86], dtype=torch.int32, device=device)
    qp, kp, vp = (torch.randn(86, 4, 64, device=device, dtype=dt) for _ in range(3))
    outp = flash_attn_varlen_func(qp, kp, vp, cu, cu, max(lens), max(lens), causal=True)
    refp = torch.cat([sdpa64(qp[None, a:a + n], kp[None, a:a + n], vp[None, a:a + n], True)[0]
                      for a, n in zip((0, 17, 81), lens)])
    lowp = torch.cat([sdpa64(qp[None, a:a + n].float(), kp[None, a:a + n].float(), vp[None, a:a + n].float(),
                             True)[0].to(dt) for a, n in zip((0, 17, 81), lens)])
    check("varlen", outp, refp, lowp, errors)
    # 3. decode step against a paged cache: append one token, attend
    page, pages_per_seq, b = 16, 4, 2
    k_cache = torch.randn(b * pages_per_seq, page, 2, 64, device=device, dtype=dt)
    v_cache = torch.randn_like(k_cache)
    table = torch.randperm(b * pages_per_seq, device=device).to(torch.int32).view(b, pages_per_seq)
    seqlens = torch.tensor([20, 47], dtype=torch.int32, device=device)
    qd = torch.randn(b, 1, 8, 64, device=device, dtype=dt)
    kn, vn = torch.randn(b, 1, 2, 64, device=device, dtype=dt), torch.randn(b, 1, 2, 64, device=device, dtype=dt)
    outd = flash_attn_with_kvcache(qd, k_cache, v_cache, k=kn, v=vn, cache_seqlens=seqlens,
                                   block_table=table, causal=True)
    dense_k = k_cache[table.long()].reshape(b, -1, 2, 64)
    dense_v = v_cache[table.long()].reshape(b, -1, 2, 64)
    refd = torch.cat([sdpa64(qd[i:i + 1], dense_k[i:i + 1, :n + 1], dense_v[i:i + 1, :n + 1], True)
                      for i, n in enumerate(seqlens.tolist())])
    lowd = torch.cat([sdpa64(qd[i:i + 1].float(), dense_k[i:i + 1, :n + 1].float(),
                             dense_v[i:i + 1, :n + 1].float(), True).to(dt)
                      for i, n in enumerate(seqlens.tolist())])
    check("kvcache paged", outd, refd, lowd, errors)
    assert torch.equal(dense_k[0, 20], kn[0, 0]) and torch.equal(dense_v[1, 47], vn[1, 0])
    return errors


if __name__ == "__main__":
    results = main(sys.argv[1] if len(sys.argv) > 1 else "cuda")
    for name, (err, bound) in results.items():
        print(f"{name:14s} error {err:.3g}  bound {bound:.3g}  {'ok' if err <= bound else 'FAIL'}")
    sys.exit(0 if all(e <= b for e, b in results.values()) else 1)
