"""PyTorch autograd for flashattn.attention and the compat functions.

Two routes to the same kernels:
- eager (every torch): a torch.autograd.Function taking q, k, v or FlashAttention's
  packed qkv / kv, returning the packed gradient (dqkv) for packed inputs;
- torch.compile (torch >= 2.4): torch.library.custom_op ops flashattn::fwd / ::bwd with
  fake implementations, so the compiler keeps attention as one node instead of
  breaking the graph at the ctypes call. Older torch (Debian's 1.13) has no custom_op
  and uses the Function only."""
import torch

from . import core

_FORWARD_ONLY = ("seqlens_kv", "block_table")
_BACKWARD_KEYS = ("causal", "window", "softcap", "scale", "backend", "deterministic",
                  "cu_seqlens_q", "cu_seqlens_kv", "max_seqlen_q", "max_seqlen_kv")


def split(packing, tensors):
    """(q, k, v) from the differentiable inputs: 'q,k,v'; 'qkv' = one [..., 3, H, D];
    'q,kv' = q and one [..., 2, H, D] (FlashAttention's packed layouts)."""
    if packing == "qkv":
        return tensors[0].unbind(-3)
    if packing == "q,kv":
        return (tensors[0],) + tuple(tensors[1].unbind(-3))
    return tuple(tensors)


def _refuse_forward_only(options):
    for name in _FORWARD_ONLY:
        if options.get(name) is not None:
            from ._errors import invalid
            raise invalid(name, "set in a backward", "paged caches and cache lengths are forward-only "
                          "(inference); train on packed batches (cu_seqlens_q / cu_seqlens_kv) or dense k/v")


class AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, options, packing, *tensors):
        q, k, v = split(packing, tensors)
        o, lse = core.forward(q, k, v, True, options)
        ctx.save_for_backward(*tensors, o, lse)
        ctx.options, ctx.packing = options, packing
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        *tensors, o, lse = ctx.saved_tensors
        _refuse_forward_only(ctx.options)
        inputs, buffers = zip(*(_with_gradient_buffer(x) for x in split(ctx.packing, tensors)))
        if dout.stride() != o.stride():  # e.g. the expanded ones of loss = o.sum()
            dout = dout.contiguous()
        options = {key: ctx.options[key] for key in _BACKWARD_KEYS}
        dq, dk, dv = core.attention_backward(*inputs, o, dout, lse, dq=buffers[0], dk=buffers[1],
                                             dv=buffers[2], **options)
        if ctx.packing == "qkv":
            grads = (torch.stack((dq, dk, dv), dim=-3),)
        elif ctx.packing == "q,kv":
            grads = (dq, torch.stack((dk, dv), dim=-3))
        else:
            grads = (dq, dk, dv)
        return (None, None) + grads


def _with_gradient_buffer(x):
    """(input, gradient buffer) for the backward, which needs the buffer to have the
    input's strides. Dense layouts (contiguous, or a transposed [B, H, S, D]) keep theirs.
    A view with gaps (q of a packed qkv) is copied to a contiguous tensor instead: a
    buffer with its strides would span the gaps (3x the memory for qkv), and the library
    refuses gradient buffers whose address ranges interleave (so dq, dk, dv cannot be
    views of one dqkv); the packed gradient is stacked afterwards."""
    g = torch.empty_like(x)
    if g.stride() == x.stride():
        return x, g
    x = x.contiguous()
    return x, torch.empty_like(x)


def attention_torch(options, packing, *tensors):
    """(o, lse) with autograd, for torch tensors; the custom op while compiling."""
    if _ops is not None and core.compiling is not None and core.compiling():
        q, k, v = split(packing, tensors)
        return _ops.forward(q, k, v, options)
    return AttentionFunction.apply(options, packing, *tensors)


_ops = None
if hasattr(torch.library, "custom_op"):  # torch >= 2.4
    from . import _custom_ops as _ops

core.attention_torch = attention_torch
core.compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
