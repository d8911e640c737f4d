"""ctypes mirror of include/flash/flash.h: structs, enums and status codes.

Field order and types must match the header exactly (ctypes lays structs out with the
C compiler's natural alignment); tests/test_errors.py checks the size against a
descriptor the library itself fills (flash_desc_init)."""
import ctypes

i32, i64, f32, ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p

# flash_status
OK, INVALID_ARGUMENT, UNSUPPORTED, RUNTIME_ERROR, INTERNAL_ERROR = 0, 1, 2, 3, 4

# flash_dtype: storage types of q, k, v, o (and the gradients)
DTYPES = {"f32": 0, "f16": 1, "bf16": 2}

# flash_backend, by the names flash::to_string uses
BACKENDS = ("automatic", "reference", "cpu", "cuda", "hip")
BACKEND_IDS = {name: i for i, name in enumerate(BACKENDS)}
BACKEND_IDS["auto"] = 0


class Strides(ctypes.Structure):
    """Element strides of [batch, seq, heads]; all zero = packed."""

    _fields_ = [("batch", i64), ("seq", i64), ("head", i64)]


class Desc(ctypes.Structure):
    """flash_attention_desc."""

    _fields_ = [
        ("batch", i64), ("seqlen_q", i64), ("seqlen_kv", i64), ("heads_q", i64),
        ("heads_kv", i64), ("head_dim", i64), ("head_dim_v", i64),
        ("dtype", i32), ("scale", f32), ("causal", i32),
        ("window_left", i64), ("window_right", i64), ("softcap", f32),
        ("q_stride", Strides), ("k_stride", Strides), ("v_stride", Strides),
        ("o_stride", Strides),
        ("lse", ptr), ("backend", i32), ("stream", ptr), ("deterministic", i32),
        ("cu_seqlens_q", ptr), ("cu_seqlens_kv", ptr), ("seqlens_kv", ptr),
        ("block_table", ptr),
        ("page_size", i64), ("pages_per_seq", i64), ("num_pages", i64),
    ]
