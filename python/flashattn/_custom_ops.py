"""flashattn::fwd and flashattn::bwd as torch.library custom ops (torch >= 2.4 only;
imported by _autograd when torch.library.custom_op exists), so torch.compile traces
attention as one opaque node with known output shapes instead of breaking the graph.

Optional options travel as sentinels the schema can carry: scale 0.0 = default,
max_seqlen -1 = upper bound, backend as its name. fwd carries `deterministic` although
only the backward uses it, so the autograd context can read it from fwd's inputs."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import core


def _unpack(scale, max_seqlen_q, max_seqlen_kv):
    return (None if scale == 0.0 else scale, None if max_seqlen_q < 0 else max_seqlen_q,
            None if max_seqlen_kv < 0 else max_seqlen_kv)


@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor],
        cu_seqlens_kv: Optional[Tensor], seqlens_kv: Optional[Tensor], block_table: Optional[Tensor],
        causal: bool, window_left: int, window_right: int, softcap: float, scale: float,
        backend: str, deterministic: bool, max_seqlen_q: int,
        max_seqlen_kv: int) -> Tuple[Tensor, Tensor]:
    scale_, mq, mk = _unpack(scale, max_seqlen_q, max_seqlen_kv)
    opts = core.options(causal=causal, window=(window_left, window_right), softcap=softcap, scale=scale_,
                        backend=backend, deterministic=deterministic, cu_seqlens_q=cu_seqlens_q,
                        cu_seqlens_kv=cu_seqlens_kv, seqlens_kv=seqlens_kv, block_table=block_table,
                        max_seqlen_q=mq, max_seqlen_kv=mk)
    return core.forward(q, k, v, True, opts)


@fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_kv, seqlens_kv, block_table, causal, window_left,
      window_right, softcap, scale, backend, deterministic, max_seqlen_q, max_seqlen_kv):
    o = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    if cu_seqlens_q is not None:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return o, lse


def _grad_like(x):
    """The gradient layout core.attention_backward allocates: x's strides."""
    g = torch.empty_like(x)
    return g if g.stride() == x.stride() else torch.empty_strided(x.shape, x.stride(), dtype=x.dtype,
                                                                   device=x.device)


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
        cu_seqlens_q: Optional[Tensor], cu_seqlens_kv: Optional[Tensor], causal: bool,
        window_left: int, window_right: int, softcap: float, scale: float, backend: str,
        deterministic: bool, max_seqlen_q: int, max_seqlen_kv: int) -> Tuple[Tensor, Tensor, Tensor]:
    scale_, mq, mk = _unpack(scale, max_seqlen_q, max_seqlen_kv)
    if dout.stride() != o.stride():
        dout = dout.contiguous()
    return core.attention_backward(q, k, v, o, dout, lse, causal=causal,
                                   window=(window_left, window_right), softcap=softcap, scale=scale_,
                                   backend=backend, deterministic=deterministic,
                                   cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                                   max_seqlen_q=mq, max_seqlen_kv=mk)


@bwd.register_fake
def _(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_kv, causal, window_left, window_right,
      softcap, scale, backend, deterministic, max_seqlen_q, max_seqlen_kv):
    return _grad_like(q), _grad_like(k), _grad_like(v)


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_kv, seqlens_kv, block_table, causal, wl, wr, softcap, scale, backend,
     deterministic, mq, mk) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_kv)
    ctx.forward_only = seqlens_kv is not None or block_table is not None
    ctx.scalars = (causal, wl, wr, softcap, scale, backend, deterministic, mq, mk)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, _dlse):
    q, k, v, o, lse, cu_q, cu_kv = ctx.saved_tensors
    if ctx.forward_only:
        from ._autograd import _refuse_forward_only
        _refuse_forward_only({"block_table": True})
    dq, dk, dv = bwd(dout, q, k, v, o, lse, cu_q, cu_kv, *ctx.scalars)
    return (dq, dk, dv) + (None,) * 13


fwd.register_autograd(_backward, setup_context=_setup_context)


def forward(q, k, v, options):
    """(o, lse) through the custom op, from attention's options dict."""
    wl, wr = options["window"]
    scale = options["scale"]
    mq, mk = options.get("max_seqlen_q"), options.get("max_seqlen_kv")
    return fwd(q, k, v, options.get("cu_seqlens_q"), options.get("cu_seqlens_kv"),
               options.get("seqlens_kv"), options.get("block_table"), bool(options["causal"]),
               int(wl), int(wr), float(options["softcap"]), 0.0 if scale is None else float(scale),
               str(options["backend"] or "auto"), bool(options["deterministic"]),
               -1 if mq is None else int(mq),
               -1 if mk is None else int(mk))
