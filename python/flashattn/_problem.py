"""Turns argument tensors and options into a flash_attention_desc.

Every size the C API is given comes from a tensor's shape, and every shape is checked
against the others here: the C API sees only pointers and sizes, so a v shorter than
k, or a cu_seqlens array of the wrong length, would otherwise be read out of bounds.
What the library validates itself (masks, strides overlapping, array contents in host
memory) is left to it, so its messages reach the caller unchanged.

A descriptor depends only on the arguments' shapes, strides, dtypes, devices and the
options, never on their data, so it is built once per such signature and copied on
later calls (the per-call host overhead budget is a few microseconds); the pointers,
the stream and the host-array checks that read data are redone on every call."""
import sys

from . import _abi
from ._arrays import int32_array, view
from ._errors import invalid

# Every option describe() reads, with attention()'s defaults.
DEFAULTS = dict(causal=False, window=(-1, -1), softcap=0.0, scale=None, backend=None, deterministic=True,
                cu_seqlens_q=None, cu_seqlens_kv=None, seqlens_kv=None, block_table=None,
                max_seqlen_q=None, max_seqlen_kv=None, stream=None)
ARRAYS = ("cu_seqlens_q", "cu_seqlens_kv", "seqlens_kv", "block_table")
_MAX_CACHED = 1024
_cache = {}


class Problem:
    """One call's descriptor, argument views (which keep the arguments alive), and the
    shapes of its outputs."""

    __slots__ = ("desc", "q", "k", "v", "o_shape", "lse_shape")

    def __init__(self, desc, q, k, v, o_shape, lse_shape):
        self.desc, self.q, self.k, self.v = desc, q, k, v
        self.o_shape, self.lse_shape = o_shape, lse_shape


def describe(q, k, v, opts):
    """Problem for attention of q over k, v with options `opts` (all keys of DEFAULTS)."""
    qv = view(q, "q")
    stream = opts["stream"]
    if stream is None:
        stream = current_stream(qv)
    kv, vv = view(k, "k", stream), view(v, "v", stream)
    arrays = None
    if (opts["cu_seqlens_q"] is not None or opts["cu_seqlens_kv"] is not None
            or opts["seqlens_kv"] is not None or opts["block_table"] is not None):
        arrays = {name: int32_array(opts[name], name, qv) for name in ARRAYS if opts[name] is not None}
    window = opts["window"]
    key = (qv.shape, qv.strides, qv.dtype, qv.device, qv.index, kv.shape, kv.strides, kv.dtype, kv.device,
           kv.index, vv.shape, vv.strides, vv.dtype, vv.device, vv.index, opts["causal"], window[0], window[1],
           opts["softcap"], opts["scale"], opts["backend"], opts["deterministic"], opts["max_seqlen_q"],
           opts["max_seqlen_kv"],
           None if arrays is None else tuple((n, a.shape, a.strides) for n, a in arrays.items()))
    entry = _cache.get(key)
    if entry is None:
        entry = _build(qv, kv, vv, arrays or {}, opts)
        if len(_cache) >= _MAX_CACHED:
            _cache.clear()
        _cache[key] = entry
    template, o_shape, lse_shape = entry
    d = _abi.Desc.from_buffer_copy(template)  # a copy: concurrent callers never share one
    d.stream = stream
    if arrays is not None:
        for name, a in arrays.items():
            setattr(d, name, a.ptr)
        for name, rows, what in (("cu_seqlens_q", qv.shape[0], "q.shape[0]"),
                                 ("cu_seqlens_kv", kv.shape[0], "k.shape[0]")):
            if name in arrays:
                _check_total(arrays[name], d.batch, rows, name, what)
    return Problem(d, qv, kv, vv, o_shape, lse_shape), arrays


def _backend_id(backend):
    if backend is None:
        return 0
    try:
        return _abi.BACKEND_IDS[str(backend).lower()]
    except KeyError:
        raise invalid("backend", repr(backend),
                      "allowed: None, 'auto', 'reference', 'cpu', 'cuda', 'hip'") from None


def current_stream(v):
    """The framework's current stream on v's device (0 = host, or the legacy default)."""
    if v.device == "cpu":
        return 0
    torch = sys.modules.get("torch")
    if v.kind == "torch" or (torch is not None and torch.cuda.is_available()):
        return torch.cuda.current_stream(v.index).cuda_stream
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        return cupy.cuda.get_current_stream().ptr
    return 0


def _set_strides(field, v, name, rows_dims):
    """Element strides of v into a flash_strides; rows_dims = 2 for [B, S, H, D] (batch
    and seq dims), 1 for packed rows [total, H, D] (no batch stride)."""
    s = v.strides
    if v.shape[-1] > 1 and s[-1] != 1:
        raise invalid(f"{name}.stride(-1)", s[-1], "the last (head_dim) dimension must be contiguous (stride 1)")
    if rows_dims == 2:
        field.batch, field.seq, field.head = s[0], s[1], s[2]
    else:
        field.batch, field.seq, field.head = 0, s[0], s[1]


def _require_ndim(v, name, ndim, layout):
    if len(v.shape) != ndim:
        raise invalid(f"{name}.shape", list(v.shape), f"must be {layout}")


def _same_kind(v, q, name):
    if v.dtype != q.dtype:
        raise invalid(f"{name}.dtype", v.dtype, f"must equal q.dtype ({q.dtype})")
    if v.device != q.device or v.index != q.index:
        raise invalid(f"{name}.device", v.device if v.index is None else f"{v.device}:{v.index}",
                      f"must be q's device ({q.device}{'' if q.index is None else ':' + str(q.index)})")


def _build(qv, kv, vv, arrays, opts):
    """(descriptor template without pointers or stream, o shape, lse shape); raises for
    shapes that do not fit together."""
    if qv.dtype not in _abi.DTYPES:
        raise invalid("q.dtype", qv.dtype, "allowed: float32, float16, bfloat16")
    _same_kind(kv, qv, "k")
    _same_kind(vv, qv, "v")
    d = _abi.Desc()
    max_q, max_kv = opts["max_seqlen_q"], opts["max_seqlen_kv"]

    # q: [batch, seqlen_q, heads_q, dim], or packed rows [total_q, heads_q, dim].
    cu_q = arrays.get("cu_seqlens_q")
    if cu_q is not None:
        _require_ndim(qv, "q", 3, "[total_q, heads_q, head_dim] with cu_seqlens_q")
        _require_ndim(cu_q, "cu_seqlens_q", 1, "[batch + 1]")
        batch = cu_q.shape[0] - 1
        if batch < 0:
            raise invalid("cu_seqlens_q.shape", list(cu_q.shape), "must be [batch + 1] with batch >= 0")
        d.seqlen_q = qv.shape[0] if max_q is None else int(max_q)
        _set_strides(d.q_stride, qv, "q", 1)
    else:
        _require_ndim(qv, "q", 4, "[batch, seqlen_q, heads_q, head_dim] (or [total_q, heads_q, "
                      "head_dim] with cu_seqlens_q)")
        batch, d.seqlen_q = qv.shape[0], qv.shape[1]
        _set_strides(d.q_stride, qv, "q", 2)
    heads_q, head_dim = qv.shape[-2], qv.shape[-1]

    # k, v: [batch, seqlen_kv, heads_kv, dim], packed rows with cu_seqlens_kv, or pages
    # [num_pages, page_size, heads_kv, dim] with block_table.
    bt, cu_kv = arrays.get("block_table"), arrays.get("cu_seqlens_kv")
    if bt is not None:
        _require_ndim(kv, "k", 4, "[num_pages, page_size, heads_kv, head_dim] with block_table")
        _require_ndim(bt, "block_table", 2, "[batch, pages_per_seq]")
        if bt.shape[0] != batch:
            raise invalid("block_table.shape[0]", bt.shape[0], f"must be batch = {batch}")
        d.num_pages, d.page_size, d.pages_per_seq = kv.shape[0], kv.shape[1], bt.shape[1]
        d.seqlen_kv = d.pages_per_seq * d.page_size if max_kv is None else int(max_kv)
        _set_strides(d.k_stride, kv, "k", 2)
    elif cu_kv is not None:
        _require_ndim(kv, "k", 3, "[total_kv, heads_kv, head_dim] with cu_seqlens_kv")
        if cu_kv.shape != (batch + 1,):
            raise invalid("cu_seqlens_kv.shape", list(cu_kv.shape), f"must be [batch + 1] = [{batch + 1}]")
        d.seqlen_kv = kv.shape[0] if max_kv is None else int(max_kv)
        _set_strides(d.k_stride, kv, "k", 1)
    else:
        _require_ndim(kv, "k", 4, "[batch, seqlen_kv, heads_kv, head_dim] (packed rows need "
                      "cu_seqlens_kv, pages block_table)")
        if kv.shape[0] != batch:
            raise invalid("k.shape[0]", kv.shape[0], f"must be batch = {batch}")
        d.seqlen_kv = kv.shape[1]
        _set_strides(d.k_stride, kv, "k", 2)
    if vv.shape[:-1] != kv.shape[:-1]:
        raise invalid("v.shape", list(vv.shape), f"must match k.shape {list(kv.shape)} except the last dim")
    if kv.shape[-1] != head_dim:
        raise invalid("k.shape[-1]", kv.shape[-1], f"must be q's head_dim = {head_dim}")
    _set_strides(d.v_stride, vv, "v", len(vv.shape) - 2)
    lens = arrays.get("seqlens_kv")
    if lens is not None and lens.shape != (batch,):
        raise invalid("seqlens_kv.shape", list(lens.shape), f"must be [batch] = [{batch}]")

    d.batch, d.heads_q, d.heads_kv, d.head_dim = batch, heads_q, kv.shape[-2], head_dim
    d.head_dim_v = vv.shape[-1]
    d.dtype = _abi.DTYPES[qv.dtype]
    scale = opts["scale"]
    d.scale = 0.0 if scale is None else scale
    d.causal = 1 if opts["causal"] else 0
    d.window_left, d.window_right = opts["window"]
    d.softcap = opts["softcap"]
    d.backend = _backend_id(opts["backend"])
    d.deterministic = 1 if opts["deterministic"] else 0
    o_shape = tuple(qv.shape[:-1]) + (d.head_dim_v,)
    # lse: [batch, heads_q, seqlen_q], or [heads_q, total_q] for packed rows.
    lse_shape = (heads_q, qv.shape[0]) if cu_q is not None else (batch, heads_q, d.seqlen_q)
    return d, o_shape, lse_shape


def _check_total(arr, batch, total, name, total_name):
    """cu[batch] <= total rows, read when the array is in host memory (the descriptor
    has no total field, so the library cannot check it). Device arrays are not read:
    that would synchronise; like FlashAttention, their contents are the caller's."""
    if arr.device != "cpu" or batch < 0:
        return
    last = int(arr.obj[batch])
    if last > total:
        raise invalid(f"{name}[{batch}]", last, f"must be <= {total_name} = {total} (the rows it indexes)")
