"""Turns argument tensors and options into a flash_attention_desc.

Every size the C API is given comes from a tensor's shape, and every shape is checked
against the others here: the C API sees only pointers and sizes, so a v shorter than
k, or a cu_seqlens array of the wrong length, would otherwise be read out of bounds.
What the library validates itself (masks, strides overlapping, array contents in host
memory) is left to it, so its messages reach the caller unchanged."""
import sys

from . import _abi
from ._arrays import int32_array, view
from ._errors import invalid


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


def describe(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, scale=None, backend=None,
             deterministic=True, cu_seqlens_q=None, cu_seqlens_kv=None, seqlens_kv=None,
             block_table=None, max_seqlen_q=None, max_seqlen_kv=None, stream=None):
    """(desc, views) for attention of q over k, v; views = [q, k, v, arrays...] so the
    caller keeps every argument alive across the call."""
    qv = view(q, "q")
    s = stream if stream is not None else current_stream(qv)
    kv, vv = view(k, "k", s), view(v, "v", s)
    if qv.dtype not in _abi.DTYPES:
        raise invalid("q.dtype", qv.dtype, "allowed: float32, float16, bfloat16")
    _same_kind(kv, qv, "k")
    _same_kind(vv, qv, "v")
    d = _abi.Desc()
    keep = [qv, kv, vv]

    # q: [batch, seqlen_q, heads_q, dim], or packed rows [total_q, heads_q, dim].
    if cu_seqlens_q is not None:
        _require_ndim(qv, "q", 3, "[total_q, heads_q, head_dim] with cu_seqlens_q")
        cu_q = int32_array(cu_seqlens_q, "cu_seqlens_q", qv)
        _require_ndim(cu_q, "cu_seqlens_q", 1, "[batch + 1]")
        batch = cu_q.shape[0] - 1
        if batch < 0:
            raise invalid("cu_seqlens_q.shape", list(cu_q.shape), "must be [batch + 1] with batch >= 0")
        _check_total(cu_q, batch, qv.shape[0], "cu_seqlens_q", "q.shape[0]")
        d.cu_seqlens_q = cu_q.ptr
        d.seqlen_q = qv.shape[0] if max_seqlen_q is None else max_seqlen_q
        _set_strides(d.q_stride, qv, "q", 1)
        keep.append(cu_q)
    else:
        _require_ndim(qv, "q", 4, "[batch, seqlen_q, heads_q, head_dim] (or [total_q, heads_q, "
                      "head_dim] with cu_seqlens_q)")
        batch, d.seqlen_q = qv.shape[0], qv.shape[1]
        _set_strides(d.q_stride, qv, "q", 2)
    heads_q, head_dim = qv.shape[-2], qv.shape[-1]

    # k, v: [batch, seqlen_kv, heads_kv, dim], packed rows with cu_seqlens_kv, or pages
    # [num_pages, page_size, heads_kv, dim] with block_table.
    if block_table is not None:
        _require_ndim(kv, "k", 4, "[num_pages, page_size, heads_kv, head_dim] with block_table")
        bt = int32_array(block_table, "block_table", qv)
        _require_ndim(bt, "block_table", 2, "[batch, pages_per_seq]")
        if bt.shape[0] != batch:
            raise invalid("block_table.shape[0]", bt.shape[0], f"must be batch = {batch}")
        d.block_table, d.num_pages, d.page_size, d.pages_per_seq = bt.ptr, kv.shape[0], kv.shape[1], bt.shape[1]
        d.seqlen_kv = d.pages_per_seq * d.page_size if max_seqlen_kv is None else max_seqlen_kv
        _set_strides(d.k_stride, kv, "k", 2)
        keep.append(bt)
    elif cu_seqlens_kv is not None:
        _require_ndim(kv, "k", 3, "[total_kv, heads_kv, head_dim] with cu_seqlens_kv")
        cu_kv = int32_array(cu_seqlens_kv, "cu_seqlens_kv", qv)
        if cu_kv.shape != (batch + 1,):
            raise invalid("cu_seqlens_kv.shape", list(cu_kv.shape), f"must be [batch + 1] = [{batch + 1}]")
        _check_total(cu_kv, batch, kv.shape[0], "cu_seqlens_kv", "k.shape[0]")
        d.cu_seqlens_kv = cu_kv.ptr
        d.seqlen_kv = kv.shape[0] if max_seqlen_kv is None else max_seqlen_kv
        _set_strides(d.k_stride, kv, "k", 1)
        keep.append(cu_kv)
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
    if seqlens_kv is not None:
        lens = int32_array(seqlens_kv, "seqlens_kv", qv)
        if lens.shape != (batch,):
            raise invalid("seqlens_kv.shape", list(lens.shape), f"must be [batch] = [{batch}]")
        d.seqlens_kv = lens.ptr
        keep.append(lens)

    d.batch, d.heads_q, d.heads_kv, d.head_dim = batch, heads_q, kv.shape[-2], head_dim
    d.head_dim_v = vv.shape[-1]
    d.dtype = _abi.DTYPES[qv.dtype]
    d.scale = 0.0 if scale is None else scale
    d.causal = 1 if causal else 0
    d.window_left, d.window_right = window
    d.softcap = softcap
    d.backend = _backend_id(backend)
    d.stream = s
    d.deterministic = 1 if deterministic else 0
    return d, keep


def _check_total(arr, batch, total, name, total_name):
    """cu[batch] <= total rows, read when the array is in host memory (the descriptor
    has no total field, so the library cannot check it). Device arrays are not read:
    that would synchronise; like FlashAttention, their contents are the caller's."""
    if arr.device != "cpu" or batch < 0:
        return
    last = int(arr.obj[batch])
    if last > total:
        raise invalid(f"{name}[{batch}]", last, f"must be <= {total_name} = {total} (the rows it indexes)")


def o_shape(q_view, desc):
    return q_view.shape[:-1] + (desc.head_dim_v,)


def lse_shape(desc, q_view):
    """[batch, heads_q, seqlen_q], or [heads_q, total_q] for packed rows."""
    if desc.cu_seqlens_q:
        return (desc.heads_q, q_view.shape[0])
    return (desc.batch, desc.heads_q, desc.seqlen_q)
