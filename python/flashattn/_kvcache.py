"""The KV-cache side of flash_attn_with_kvcache: cache lengths as an int32 array, and
new keys/values written into a dense or paged cache in place.

Only tensor indexing on the cache's device: no host read of cache_seqlens or
block_table, so the call does not synchronise (and can be captured in a CUDA graph)."""
import sys


def _is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def lengths(cache_seqlens, batch, q):
    """cache_seqlens (None, an int, or an int32 array) as an int32 array [batch] on q's
    device, or None."""
    if cache_seqlens is None or not isinstance(cache_seqlens, int):
        return cache_seqlens
    if _is_torch(q):
        import torch
        return torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
    import numpy as np
    return np.full((batch,), cache_seqlens, dtype=np.int32)


def append(k_cache, v_cache, k, v, seqlens, block_table):
    """k_cache[b, seqlens[b] + t] = k[b, t] (through block_table for pages), same for v.
    Positions beyond the cache raise (torch/numpy index checks), as FlashAttention
    requires the caller to size the cache."""
    new = k.shape[1]
    if _is_torch(k):
        import torch
        steps = torch.arange(new, device=k.device)
        rows = seqlens.long()[:, None] + steps  # [batch, new] positions in each sequence
        batch_ids = torch.arange(k.shape[0], device=k.device)[:, None].expand_as(rows)
    else:
        import numpy as np
        rows = seqlens.astype(np.int64)[:, None] + np.arange(new)
        batch_ids = np.broadcast_to(np.arange(k.shape[0])[:, None], rows.shape)
    if block_table is None:
        where = (batch_ids, rows)
    else:  # key j of sequence b: row j % page_size of page block_table[b, j // page_size]
        page_size = k_cache.shape[1]
        table = block_table.long() if _is_torch(block_table) else block_table.astype("int64")
        where = (table[batch_ids, rows // page_size], rows % page_size)
    k_cache[where] = k
    v_cache[where] = v
