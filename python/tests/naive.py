"""The oracle of the Python tests: attention written out in torch (scores, mask,
softmax, weighted sum), in float64 for the reference and rounded to a low precision for
the tolerance rule, plus the rule itself (DEVELOPERS.md): error vs float64 at most
2 × the error of naive attention in the same dtype + eps·max|ref|."""
import math

import torch

EPS = {torch.float32: 1e-6, torch.float16: 1e-4, torch.bfloat16: 1e-3}


def visible(sq, sk, causal, window, device):
    """[sq, sk] bool: row i sees key j (bottom-right aligned, flash.hpp's rule)."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    diag = i + sk - sq
    ok = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if causal:
        ok &= j <= diag
    if window[0] >= 0:
        ok &= j >= diag - window[0]
    if window[1] >= 0:
        ok &= j <= diag + window[1]
    return ok


def attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None, round_to=None):
    """q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] -> o [B, Sq, Hq, Dv],
    lse [B, Hq, Sq], computed in q's dtype. round_to: a low-precision dtype every
    intermediate result is rounded to (naive attention "in that dtype" with wider
    accumulation, as GPU matmuls do). Rows that see no key: o = 0, lse = -inf.
    Differentiable (the max shift is detached: softmax does not depend on it)."""
    def r(x):
        return x.to(round_to).to(x.dtype) if round_to is not None else x

    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    k = k.repeat_interleave(hq // hkv, dim=2)
    v = v.repeat_interleave(hq // hkv, dim=2)
    s = r(torch.einsum("bqhd,bkhd->bhqk", q, k) * scale)
    if softcap:
        s = r(softcap * torch.tanh(s / softcap))
    s = s.masked_fill(~visible(sq, sk, causal, window, q.device), float("-inf"))
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    p = r(e / torch.where(den > 0, den, torch.ones_like(den)))
    o = r(torch.einsum("bhqk,bkhd->bqhd", p, v))
    return o, (torch.log(den) + m).squeeze(-1)


def in_dtype(q, k, v, dtype, **kw):
    """Naive attention of the dtype-rounded inputs, evaluated "in dtype"."""
    cast = [t.to(dtype).float() for t in (q, k, v)]
    return attention(*cast, round_to=None if dtype == torch.float32 else dtype, **kw)


def assert_close(ours, ref64, naive_lowp, dtype, what, magnitude=None):
    """The tolerance rule, with the numbers in the message. magnitude: what eps is
    relative to (default max |ref|); gradients pass the largest of dq, dk, dv, as one
    of them can be exactly zero (a single key) while rounding is not (the C++ suite's
    convention, tests/support/compare.hpp)."""
    ours, ref64, naive_lowp = ours.double(), ref64.double(), naive_lowp.double()
    assert ours.shape == ref64.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(ref64.shape)}"
    finite = torch.isfinite(ref64)
    assert torch.equal(torch.isfinite(ours), finite), f"{what}: non-finite where the reference is not"
    if not finite.any():
        return
    err = (ours - ref64)[finite].abs().max().item()
    naive_err = (naive_lowp - ref64)[finite].abs().max().item()
    if magnitude is None:
        magnitude = ref64[finite].abs().max().item()
    bound = 2 * naive_err + EPS[dtype] * magnitude + 1e-30
    assert err <= bound, f"{what}: error {err:.3g} > bound {bound:.3g} (naive {dtype} error {naive_err:.3g})"


def randn(*shape, dtype=torch.float32, device="cpu", gen=None):
    """Fresh random values (never zeros) on the device."""
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
