"""PyTorch autograd for flashattn.attention and the compat functions.

Two routes to the same kernels:
- eager (every torch): a torch.autograd.Function; its backward writes the gradients of
  a packed qkv / kv straight into one buffer when the packing allows (as FlashAttention
  does), so packed layouts cost no extra gradient copies;
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
        o, lse = core.forward(q, k, v, True, **options)
        ctx.save_for_backward(*tensors, o, lse)
        ctx.options, ctx.packing = options, packing
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        *tensors, o, lse = ctx.saved_tensors
        _refuse_forward_only(ctx.options)
        q, k, v = split(ctx.packing, tensors)
        # One gradient buffer per input (dqkv for a packed qkv); its q/k/v views are
        # handed to the backward when they have q/k/v's strides, as it requires.
        grads = [torch.empty_like(t) for t in tensors]
        views = split(ctx.packing, grads)
        given = [g if g.stride() == x.stride() else None for g, x in zip(views, (q, k, v))]
        if dout.stride() != o.stride():  # e.g. the expanded ones of loss = o.sum()
            dout = dout.contiguous()
        options = {key: ctx.options[key] for key in _BACKWARD_KEYS}
        out = core.attention_backward(q, k, v, o, dout, lse, dq=given[0], dk=given[1], dv=given[2],
                                      **options)
        for buffer, result in zip(views, out):
            if result is not buffer:
                buffer.copy_(result)
        return (None, None) + tuple(grads)


def _compiling():
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()


def attention_torch(options, packing, *tensors):
    """(o, lse) with autograd, for torch tensors; the custom op while compiling."""
    if _ops is not None and _compiling():
        q, k, v = split(packing, tensors)
        return _ops.forward(q, k, v, options)
    return AttentionFunction.apply(options, packing, *tensors)


def attention_with_grad(q, k, v, options):
    return attention_torch(options, "q,k,v", q, k, v)


_ops = None
if hasattr(torch.library, "custom_op"):  # torch >= 2.4
    from . import _custom_ops as _ops
