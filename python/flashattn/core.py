"""The core functions: attention, attention_backward, merge_partials, explain, backends.

Each call builds one descriptor, allocates only its outputs (in the input's framework),
and makes one C call on the framework's current stream: no synchronisation and no
other allocation, so a warm call can be captured in a CUDA graph."""
import collections
import ctypes
import sys

from . import _abi, _library
from ._arrays import empty, empty_strided, finish, int32_array, view
from ._errors import invalid, raise_status
from ._problem import DEFAULTS, _backend_id, current_stream, describe

BackendInfo = collections.namedtuple("BackendInfo", "name available reason detail")
Plan = collections.namedtuple("Plan", "backend kernel reason")


# Bound by _autograd when it is imported (flashattn/__init__ imports it when torch is
# loaded first, else the first call with torch tensors does). torch.compile then traces
# plain references to these two functions rather than the sys.modules lookups below.
compiling = None  # torch.compiler.is_compiling (torch >= 2.1)
attention_torch = None  # _autograd.attention_torch: (o, lse) through autograd / the custom op


def torch_route(*tensors):
    """True when torch tensors need the autograd route: one requires grad, or
    torch.compile is tracing (the custom op keeps the graph whole)."""
    if compiling is not None and compiling():
        return True
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensors[0], torch.Tensor):
        return False
    if attention_torch is None:
        from . import _autograd  # noqa: F401  (binds compiling and attention_torch)
    for t in tensors:
        if t.requires_grad:
            return torch.is_grad_enabled()
    return False


def attention(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None, return_lse=False,
              backend=None, deterministic=True, cu_seqlens_q=None, cu_seqlens_kv=None,
              seqlens_kv=None, block_table=None, max_seqlen_q=None, max_seqlen_kv=None,
              stream=None):
    """softmax(q·kᵀ·scale)·v without the score matrix in memory.

    q: [batch, seqlen_q, heads_q, head_dim], or [total_q, heads_q, head_dim] with
    cu_seqlens_q (int32 [batch + 1]); k, v: [batch, seqlen_kv, heads_kv, head_dim(_v)],
    [total_kv, ...] with cu_seqlens_kv, or pages [num_pages, page_size, heads_kv, ...]
    with block_table (int32 [batch, pages_per_seq]); seqlens_kv (int32 [batch]) limits the
    keys each sequence sees. Any object with __dlpack__; strides honoured (the last dim
    contiguous). window = (left, right), -1 unbounded; scale None = 1/sqrt(head_dim);
    softcap 0 = off; backend None/'auto', 'reference', 'cpu', 'cuda', 'hip'.
    max_seqlen_q/kv: the longest sequence (default: an upper bound, so nothing is read
    from device arrays). stream: a CUDA/HIP stream handle (default: the framework's
    current stream). Returns o [..., heads_q, head_dim_v] in q's framework, and with
    return_lse the f32 lse [batch, heads_q, seqlen_q] ([heads_q, total_q] for packed q).
    torch tensors that require grad go through autograd (deterministic: the backward's)."""
    opts = {"causal": causal, "window": window, "softcap": softcap, "scale": scale, "backend": backend,
            "deterministic": deterministic, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_kv": cu_seqlens_kv,
            "seqlens_kv": seqlens_kv, "block_table": block_table, "max_seqlen_q": max_seqlen_q,
            "max_seqlen_kv": max_seqlen_kv, "stream": stream}
    if torch_route(q, k, v):
        o, lse = attention_torch(opts, "q,k,v", q, k, v)
    else:
        o, lse = forward(q, k, v, return_lse, opts)
    return (o, lse) if return_lse else o


def forward(q, k, v, with_lse, opts):
    """(o, lse or None) without autograd; opts has every key of _problem.DEFAULTS."""
    lib = _library.loaded or _library.load()
    p, _arrays = describe(q, k, v, opts)
    qv = p.q
    o, o_ptr = empty(qv, p.o_shape, qv.dtype)
    lse = None
    if with_lse:
        lse, p.desc.lse = empty(qv, p.lse_shape, "f32")
    if qv.index is None:  # host memory: no device to select
        status = lib.flash_attention(ctypes.byref(p.desc), qv.ptr, p.k.ptr, p.v.ptr, o_ptr)
    else:
        with _device_of(qv):
            status = lib.flash_attention(ctypes.byref(p.desc), qv.ptr, p.k.ptr, p.v.ptr, o_ptr)
    if status:
        raise_status(lib, status)
    if qv.kind == "dlpack":
        return finish(o, qv), (finish(lse, qv) if with_lse else None)
    return o, lse


def options(**given):
    """attention's option dict: DEFAULTS updated with `given`."""
    opts = dict(DEFAULTS)
    opts.update(given)
    return opts


def attention_backward(q, k, v, o, dout, lse, *, causal=False, window=(-1, -1), softcap=0.0,
                       scale=None, backend=None, deterministic=True, cu_seqlens_q=None,
                       cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None, dq=None,
                       dk=None, dv=None, stream=None):
    """Gradients (dq, dk, dv) of attention for upstream gradient dout.

    o and lse are the forward's (same options). dout must have o's strides; dq/dk/dv
    (allocated when not given) have q/k/v's strides, as flash's backward takes one
    stride set per tensor pair. dk/dv are summed over the query heads sharing a kv head.
    deterministic=False lets the cuda backend add dQ partials with unordered atomics."""
    lib = _library.load()
    opts = options(causal=causal, window=window, softcap=softcap, scale=scale, backend=backend,
                   deterministic=deterministic, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                   max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv, stream=stream)
    p, _arrays = describe(q, k, v, opts)
    d, qv = p.desc, p.q
    ov, gv, lv = view(o, "o", d.stream), view(dout, "dout", d.stream), view(lse, "lse", d.stream)
    for name, t in (("o", ov), ("dout", gv), ("lse", lv)):
        _same_device(t, qv, name)
    for name, t in (("o", ov), ("dout", gv)):
        if tuple(t.shape) != p.o_shape or t.dtype != qv.dtype:
            raise invalid(f"{name}", f"{t.dtype} {list(t.shape)}", f"must be {qv.dtype} {list(p.o_shape)}")
    if gv.strides != ov.strides:
        raise invalid("dout.strides", gv.strides, f"must equal o's strides {ov.strides} (the backward "
                      "reads dout with o_stride); pass dout.contiguous() for a contiguous o")
    _set_o_strides(d, ov)
    if tuple(lv.shape) != p.lse_shape or lv.dtype != "f32" or not _contiguous(lv):
        raise invalid("lse", f"{lv.dtype} {list(lv.shape)}", f"must be contiguous f32 {list(p.lse_shape)} "
                      "(the forward's)")
    grads, ptrs = [], []
    for name, given, src in (("dq", dq, qv), ("dk", dk, p.k), ("dv", dv, p.v)):
        if given is None:
            t, ptr = _like(src)
        else:
            t, tv = given, view(given, name, d.stream)
            _same_device(tv, qv, name)
            if tv.shape != src.shape or tv.strides != src.strides or tv.dtype != src.dtype:
                raise invalid(name, f"{tv.dtype} {list(tv.shape)} strides {tv.strides}",
                              f"must have the dtype, shape and strides of {name[1]} "
                              f"({src.dtype} {list(src.shape)} strides {src.strides})")
            ptr = tv.ptr
        grads.append(t)
        ptrs.append(ptr)
    with _device_of(qv):
        status = lib.flash_attention_backward(ctypes.byref(d), qv.ptr, p.k.ptr, p.v.ptr, ov.ptr, gv.ptr,
                                              lv.ptr, ptrs[0], ptrs[1], ptrs[2])
    if status:
        raise_status(lib, status)
    return tuple(finish(g, qv) for g in grads)


def _same_device(t, q, name):
    if t.device != q.device or t.index != q.index:
        raise invalid(f"{name}.device", t.device if t.index is None else f"{t.device}:{t.index}",
                      f"must be q's device ({q.device}{'' if q.index is None else ':' + str(q.index)})")


def _like(src):
    """A gradient buffer with src's strides: empty_like keeps the strides of dense
    layouts (e.g. [B, H, S, D] transposed); a view with gaps (a slice of a packed qkv)
    gets a buffer spanning the same gaps."""
    if src.kind == "torch":
        t = sys.modules["torch"].empty_like(src.obj)
        if t.stride() == src.strides:
            return t, t.data_ptr()
    return empty_strided(src, src.shape, src.strides, src.dtype)


def _set_o_strides(d, ov):
    s = ov.strides
    if ov.shape[-1] > 1 and s[-1] != 1:
        raise invalid("o.stride(-1)", s[-1], "the last dimension must be contiguous (stride 1)")
    if len(s) == 4:
        d.o_stride.batch, d.o_stride.seq, d.o_stride.head = s[0], s[1], s[2]
    else:
        d.o_stride.batch, d.o_stride.seq, d.o_stride.head = 0, s[0], s[1]


def _contiguous(v):
    acc = 1
    for n, s in zip(reversed(v.shape), reversed(v.strides)):
        if n > 1 and s != acc:
            return False
        acc *= n
    return True


def merge_partials(o_parts, lse_parts, *, cu_seqlens_q=None, max_seqlen_q=None, return_lse=False,
                   backend=None, stream=None):
    """Combines attention of the same queries over disjoint key sets:
    lse = ln Σ exp(lse_i), o = Σ exp(lse_i − lse)·o_i.

    o_parts: contiguous [parts, batch, seqlen_q, heads_q, head_dim_v] (or [parts, total_q,
    heads_q, head_dim_v] with cu_seqlens_q); lse_parts: contiguous f32 [parts, batch,
    heads_q, seqlen_q] (or [parts, heads_q, total_q]), as attention(return_lse=True) gives
    them, stacked. Returns o (and lse with return_lse)."""
    lib = _library.load()
    pv = view(o_parts, "o_parts")
    s = stream if stream is not None else current_stream(pv)
    lv = view(lse_parts, "lse_parts", s)
    if pv.dtype not in _abi.DTYPES:
        raise invalid("o_parts.dtype", pv.dtype, "allowed: float32, float16, bfloat16")
    d = _abi.Desc()
    cu = None
    if cu_seqlens_q is not None:
        if len(pv.shape) != 4:
            raise invalid("o_parts.shape", list(pv.shape), "must be [parts, total_q, heads_q, head_dim_v] "
                          "with cu_seqlens_q")
        cu = int32_array(cu_seqlens_q, "cu_seqlens_q", pv)
        parts, total, heads, dim = pv.shape
        d.batch, d.cu_seqlens_q = cu.shape[0] - 1, cu.ptr
        d.seqlen_q = total if max_seqlen_q is None else int(max_seqlen_q)
        want_lse, o_shape = (parts, heads, total), (total, heads, dim)
    else:
        if len(pv.shape) != 5:
            raise invalid("o_parts.shape", list(pv.shape), "must be [parts, batch, seqlen_q, heads_q, head_dim_v]")
        parts, d.batch, d.seqlen_q, heads, dim = pv.shape
        want_lse, o_shape = (parts, d.batch, heads, d.seqlen_q), tuple(pv.shape[1:])
    if not _contiguous(pv):
        raise invalid("o_parts.strides", pv.strides, "must be contiguous (packed parts, stacked)")
    if tuple(lv.shape) != want_lse or lv.dtype != "f32" or not _contiguous(lv):
        raise invalid("lse_parts", f"{lv.dtype} {list(lv.shape)}", f"must be contiguous f32 {list(want_lse)}")
    d.heads_q, d.heads_kv, d.head_dim, d.head_dim_v = heads, 1, dim, dim
    d.dtype, d.backend, d.stream = _abi.DTYPES[pv.dtype], _backend_id(backend), s
    d.window_left = d.window_right = -1
    o, o_ptr = empty(pv, o_shape, pv.dtype)
    lse, lse_ptr = empty(pv, want_lse[1:], "f32") if return_lse else (None, None)
    with _device_of(pv):
        status = lib.flash_merge_partials(ctypes.byref(d), parts, pv.ptr, lv.ptr, o_ptr, lse_ptr)
    if status:
        raise_status(lib, status)
    return (finish(o, pv), finish(lse, pv)) if return_lse else finish(o, pv)


def explain(q, k, v, *, backward=False, **given):
    """What attention (backward=True: its backward) would run for these arguments,
    without running it: Plan(backend, kernel, reason). Raises as the call would.
    Takes attention's keyword options (causal, window, cu_seqlens_q, ...)."""
    lib = _library.load()
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"explain() got unexpected keyword arguments {sorted(unknown)}")
    p, _arrays = describe(q, k, v, options(**given))
    backend, kernel, reason = ctypes.c_int32(), ctypes.c_char_p(), ctypes.c_char_p()
    status = lib.flash_explain(ctypes.byref(p.desc), 1 if backward else 0, p.q.ptr,
                               ctypes.byref(backend), ctypes.byref(kernel), ctypes.byref(reason))
    if status:
        raise_status(lib, status)
    return Plan(_abi.BACKENDS[backend.value], kernel.value.decode(), reason.value.decode())


def backends():
    """Every backend this build of libflashattn knows: BackendInfo(name, available,
    reason it is unavailable, detail such as the device or SIMD target)."""
    lib = _library.load()
    out = []
    for i in range(lib.flash_backend_count()):
        b, avail = ctypes.c_int32(), ctypes.c_int32()
        reason, detail = ctypes.c_char_p(), ctypes.c_char_p()
        status = lib.flash_backend_info(i, ctypes.byref(b), ctypes.byref(avail), ctypes.byref(reason),
                                        ctypes.byref(detail))
        if status:
            raise_status(lib, status)
        out.append(BackendInfo(_abi.BACKENDS[b.value], bool(avail.value), reason.value.decode(),
                               detail.value.decode()))
    return out


def version():
    """libflashattn's version, "MAJOR.MINOR.PATCH"."""
    return _library.load().flash_version().decode()


class _NoDevice:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NO_DEVICE = _NoDevice()


def _device_of(v):
    """The GPU backends launch on the current device: make it q's for a torch tensor on
    another GPU (a no-op, and no torch call, in the common case)."""
    if v.kind != "torch" or v.index is None:
        return _NO_DEVICE
    torch = sys.modules["torch"]
    if v.index == torch.cuda.current_device():
        return _NO_DEVICE
    return torch.cuda.device(v.index)
