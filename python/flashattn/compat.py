"""FlashAttention-2's Python functions on libflashattn: replacing
`from flash_attn import ...` with `from flashattn.compat import ...` is all a program
written for FlashAttention needs.

Same names, argument names, defaults, shapes and return values as flash_attn 2.x
(flash_attn_interface). Differences: fp32 and CPU tensors also work; arguments we do not
implement raise NotImplementedError naming them (dropout_p > 0, alibi_slopes, rotary_cos /
rotary_sin, cache_batch_idx, cache_leftpad); return_attn_probs gives S_dmask = None (as
FlashAttention does without dropout); num_splits is accepted and ignored (the library
picks its own key splits); a tensor whose last dimension is not contiguous raises
ValueError (FlashAttention copies it; the library reads strides but not that one)."""
from . import core
from ._errors import Unsupported, invalid


def _unsupported(name, value, why):
    return Unsupported(f"flash: {name} = {value} is not supported by flashattn ({why})")


def _check(dropout_p=0.0, alibi_slopes=None):
    if dropout_p:
        raise _unsupported("dropout_p", dropout_p, "no dropout; pass 0.0")
    if alibi_slopes is not None:
        raise _unsupported("alibi_slopes", "a tensor", "no ALiBi bias; pass None")


def _attend(packing, tensors, softmax_scale, causal, window_size, softcap, deterministic,
            return_attn_probs, **sequence_args):
    """out, or (out, softmax_lse, None) with return_attn_probs; autograd for torch."""
    options = {"causal": causal, "window": window_size, "softcap": softcap, "scale": softmax_scale,
               "backend": None, "deterministic": deterministic, "cu_seqlens_q": None,
               "cu_seqlens_kv": None, "seqlens_kv": None, "block_table": None, "max_seqlen_q": None,
               "max_seqlen_kv": None, "stream": None}
    if sequence_args:
        options.update(sequence_args)
    if core.torch_route(*tensors):
        o, lse = core.attention_torch(options, packing, *tensors)
        return (o, lse, None) if return_attn_probs else o
    q, k, v = _split_any(packing, tensors)
    o, lse = core.forward(q, k, v, return_attn_probs, options)
    return (o, lse, None) if return_attn_probs else o


def _split_any(packing, tensors):
    """Views of a packed qkv / kv along dim -3 for torch or numpy (no copies)."""
    def parts(x, n):
        return tuple(x[..., i, :, :] for i in range(n))
    if packing == "qkv":
        return parts(tensors[0], 3)
    if packing == "q,kv":
        return (tensors[0],) + parts(tensors[1], 2)
    return tuple(tensors)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q: [batch, seqlen_q, nheads, headdim]; k, v: [batch, seqlen_k, nheads_k, headdim].
    Returns out [batch, seqlen_q, nheads, headdim], or with return_attn_probs
    (out, softmax_lse [batch, nheads, seqlen_q], None)."""
    _check(dropout_p, alibi_slopes)
    return _attend("q,k,v", (q, k, v), softmax_scale, causal, window_size, softcap, deterministic,
                   return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """qkv: [batch, seqlen, 3, nheads, headdim]; gradients land in one dqkv."""
    _check(dropout_p, alibi_slopes)
    return _attend("qkv", (qkv,), softmax_scale, causal, window_size, softcap, deterministic,
                   return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """q: [batch, seqlen_q, nheads, headdim]; kv: [batch, seqlen_k, 2, nheads_k, headdim]."""
    _check(dropout_p, alibi_slopes)
    return _attend("q,kv", (q, kv), softmax_scale, causal, window_size, softcap, deterministic,
                   return_attn_probs)


def _varlen_args(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table=None):
    args = dict(cu_seqlens_q=cu_seqlens_q, max_seqlen_q=int(max_seqlen_q),
                max_seqlen_kv=int(max_seqlen_k))
    if block_table is None:
        args["cu_seqlens_kv"] = cu_seqlens_k
    else:  # paged keys: cu_seqlens_k gives each sequence's key count
        args["block_table"] = block_table
        args["seqlens_kv"] = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
    return args


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """q: [total_q, nheads, headdim]; k, v: [total_k, nheads_k, headdim] (or pages
    [num_blocks, page_block_size, nheads_k, headdim] with block_table); cu_seqlens_*:
    int32 [batch + 1] on q's device. Returns out [total_q, nheads, headdim], or
    (out, softmax_lse [nheads, total_q], None)."""
    _check(dropout_p, alibi_slopes)
    return _attend("q,k,v", (q, k, v), softmax_scale, causal, window_size, softcap, deterministic,
                   return_attn_probs,
                   **_varlen_args(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_table))


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), softcap=0.0,
                                     alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv: [total, 3, nheads, headdim]."""
    _check(dropout_p, alibi_slopes)
    return _attend("qkv", (qkv,), softmax_scale, causal, window_size, softcap, deterministic,
                   return_attn_probs, **_varlen_args(cu_seqlens, cu_seqlens, max_seqlen, max_seqlen))


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False):
    """q: [total_q, nheads, headdim]; kv: [total_k, 2, nheads_k, headdim]."""
    _check(dropout_p, alibi_slopes)
    return _attend("q,kv", (q, kv), softmax_scale, causal, window_size, softcap, deterministic,
                   return_attn_probs,
                   **_varlen_args(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """Decode/prefill against a KV cache, forward only.

    q: [batch, seqlen_q, nheads, headdim]; k_cache, v_cache: [batch_cache, seqlen_cache,
    nheads_k, headdim], or pages [num_blocks, page_block_size, nheads_k, headdim] with
    block_table (int32 [batch, max_blocks_per_seq]); cache_seqlens: int or int32 [batch].
    With k, v ([batch, seqlen_new, nheads_k, headdim]) they are first written into the
    cache in place at positions cache_seqlens .. cache_seqlens + seqlen_new - 1, and
    attention sees them. Returns out [batch, seqlen_q, nheads, headdim], or
    (out, softmax_lse [batch, nheads, seqlen_q]) with return_softmax_lse."""
    for name, value in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                        ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
        if value is not None:
            raise _unsupported(name, "a tensor", "pass None")
    _check(0.0, alibi_slopes)
    from ._kvcache import append, lengths
    batch = q.shape[0]
    if block_table is None:
        k_cache, v_cache = k_cache[:batch], v_cache[:batch]  # FlashAttention uses the first rows
    if (k is None) != (v is None):
        raise invalid("k" if k is None else "v", "None", "k and v are appended together; pass both or neither")
    seqlens = lengths(cache_seqlens, batch, q)
    if k is not None:
        if seqlens is None:
            raise invalid("cache_seqlens", "None", "appending k/v needs cache_seqlens (where to write)")
        append(k_cache, v_cache, k, v, seqlens, block_table)
        seqlens = seqlens + k.shape[1]
    opts = core.options(causal=causal, window=window_size, softcap=softcap, scale=softmax_scale,
                        seqlens_kv=seqlens, block_table=block_table)
    if core.torch_route(q, k_cache, v_cache):  # torch.compile: the custom op (no backward either way)
        o, lse = core.attention_torch(opts, "q,k,v", q, k_cache, v_cache)
    else:
        o, lse = core.forward(q, k_cache, v_cache, return_softmax_lse, opts)
    return (o, lse) if return_softmax_lse else o
