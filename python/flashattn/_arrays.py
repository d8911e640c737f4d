"""What the C API needs from an argument tensor (data pointer, shape, element strides,
dtype, device), read from torch tensors and numpy arrays directly and from any other
object through the DLPack protocol; and outputs allocated in the input's framework.

torch and numpy are read through their own attributes rather than __dlpack__: the
same facts, without building and parsing a capsule per tensor on every call (that
would cost several microseconds of the per-call overhead budget)."""
import ctypes
import sys

from ._errors import invalid

# Storage dtypes by framework dtype name: flash's three float types, and int32 for the
# sequence arrays (cu_seqlens, seqlens_kv, block_table).
_NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "i32"}
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}

# DLPack (dlpack.h): DLDataType (code, bits) and DLDeviceType values we accept.
_DL_DTYPES = {(2, 32): "f32", (2, 16): "f16", (4, 16): "bf16", (0, 32): "i32"}
_DL_DEVICES = {1: "cpu", 3: "cpu", 2: "cuda", 13: "cuda", 10: "cuda"}  # CPU, CUDAHost; CUDA, managed, ROCm


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class View:
    """One argument as the C API sees it. `obj` keeps the memory alive for the call."""

    __slots__ = ("obj", "kind", "ptr", "shape", "strides", "dtype", "device", "index")

    def __init__(self, obj, kind, ptr, shape, strides, dtype, device, index):
        # shape and strides are tuples (torch.Size is one): hashable, comparable.
        self.obj, self.kind, self.ptr = obj, kind, ptr
        self.shape, self.strides, self.dtype = shape, strides, dtype
        self.device, self.index = device, index


_torch_dtypes = {}  # torch.dtype -> flash dtype name, filled on first use


def _torch_view(t, name):
    dtype = _torch_dtypes.get(t.dtype)
    if dtype is None:
        dtype = _NAMES.get(str(t.dtype)[6:], str(t.dtype))  # "torch.float32" -> "float32"
        _torch_dtypes[t.dtype] = dtype
    # is_cuda rather than t.device (which builds a device object: 5x slower); ROCm
    # builds of torch report their GPUs as cuda too.
    if t.is_cuda:
        return View(t, "torch", t.data_ptr(), t.shape, t.stride(), dtype, "cuda", t.get_device())
    return View(t, "torch", t.data_ptr(), t.shape, t.stride(), dtype, "cpu", None)


_numpy_dtypes = {}  # numpy dtype -> flash dtype name (dtype.name costs ~2 us a call)


def _numpy_view(a, name):
    dtype = _numpy_dtypes.get(a.dtype)
    if dtype is None:
        dtype = _numpy_dtypes[a.dtype] = _NAMES.get(a.dtype.name, a.dtype.name)
    size, byte_strides = a.itemsize, a.strides
    if sum(map(size.__rmod__, byte_strides)):  # map: a third of a generator's cost
        raise invalid(f"{name}.strides", byte_strides, f"must be multiples of the element size ({size} bytes)")
    strides = tuple(map(size.__rfloordiv__, byte_strides))
    return View(a, "numpy", a.ctypes.data, a.shape, strides, dtype, "cpu", None)


def _dlpack_view(x, name, stream):
    try:
        dev_type, dev_id = x.__dlpack_device__()
    except AttributeError:
        raise invalid(name, type(x).__name__,
                      "pass a tensor or array with __dlpack__ (torch, numpy, cupy, jax, ...)") from None
    device = _DL_DEVICES.get(int(dev_type))
    if device is None:
        raise invalid(f"{name}.device", f"DLPack device type {int(dev_type)}", "allowed: CPU, CUDA, ROCm memory")
    # The exporter makes its work visible to our stream (DLPack's stream argument, in
    # which the legacy default stream is 1: 0 is reserved, yet it is torch's handle for
    # that stream).
    if device == "cpu":
        capsule = x.__dlpack__()
    else:
        capsule = x.__dlpack__(stream=stream or 1)
    t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = [t.shape[i] for i in range(t.ndim)]
    if t.strides:
        strides = [t.strides[i] for i in range(t.ndim)]
    else:  # NULL strides: compact row-major
        strides, acc = [0] * t.ndim, 1
        for i in reversed(range(t.ndim)):
            strides[i], acc = acc, acc * shape[i]
    code, bits = t.dtype.code, t.dtype.bits
    dtype = _DL_DTYPES.get((code, bits)) if t.dtype.lanes == 1 else None
    ptr = (t.data or 0) + t.byte_offset
    # The capsule dies here unconsumed, which releases the exporter's export; x itself
    # (held in obj) keeps the memory alive.
    return View(x, "dlpack", ptr, tuple(shape), tuple(strides), dtype or f"dlpack(code={code}, bits={bits})",
                device, dev_id if device != "cpu" else None)


_torch_tensor = None  # torch.Tensor once torch is imported (never imported by us)
_ndarray = None  # numpy.ndarray once numpy is imported


def view(x, name, stream=None):
    """View of argument `name` (for messages). torch/numpy fast paths (an exact type
    test first: isinstance against torch.Tensor goes through its metaclass), else DLPack."""
    global _torch_tensor, _ndarray
    kind = type(x)
    if kind is _torch_tensor:
        return _torch_view(x, name)
    if kind is _ndarray:
        return _numpy_view(x, name)
    if _torch_tensor is None and "torch" in sys.modules:
        _torch_tensor = sys.modules["torch"].Tensor
    if _ndarray is None and "numpy" in sys.modules:
        _ndarray = sys.modules["numpy"].ndarray
    if _torch_tensor is not None and isinstance(x, _torch_tensor):  # subclasses (Parameter)
        return _torch_view(x, name)
    if _ndarray is not None and isinstance(x, _ndarray):
        return _numpy_view(x, name)
    return _dlpack_view(x, name, stream)


def int32_array(x, name, like):
    """A sequence array (cu_seqlens, seqlens_kv, block_table): int32, row-contiguous,
    where q lives. Python lists are accepted when q is in host memory."""
    if isinstance(x, (list, tuple)):
        if like.device != "cpu":
            raise invalid(name, "a Python list", f"must be an int32 tensor on q's device ({like.device}); "
                          "the arrays live where q lives")
        import numpy as np
        x = np.asarray(x, dtype=np.int32)
    a = view(x, name)
    if a.dtype != "i32":
        raise invalid(f"{name}.dtype", a.dtype, "must be int32")
    if a.device != like.device or a.index != like.index:
        raise invalid(f"{name}.device", _where(a), f"must be q's device ({_where(like)}); the arrays live where q lives")
    expected, acc = [], 1
    for n in reversed(a.shape):
        expected.insert(0, acc if n > 1 else None)
        acc *= n
    if any(e is not None and s != e for s, e in zip(a.strides, expected)):
        raise invalid(f"{name}.strides", a.strides, "must be contiguous (row-major)")
    return a


def _where(v):
    return v.device if v.index is None else f"{v.device}:{v.index}"


# ---- outputs -------------------------------------------------------------------------

_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32"}


def _torch_device(like):
    return like.obj.device if like.kind == "torch" else (
        "cpu" if like.device == "cpu" else f"cuda:{like.index or 0}")


def _numpy_dtype(like, dtype):
    """numpy dtype for an output of flash `dtype` beside input `like`, or None when the
    output is not a numpy array: numpy inputs, and host DLPack inputs (numpy as the
    neutral host framework; bf16 only when the input is itself a numpy bf16 array, e.g.
    ml_dtypes')."""
    if like.kind == "torch" or like.device != "cpu":
        return None
    import numpy as np
    if like.kind == "numpy" and like.dtype == dtype:
        return like.obj.dtype
    return None if dtype == "bf16" else np.dtype(_TORCH_DTYPES[dtype])


def empty(like, shape, dtype):
    """Uninitialised row-major output of `shape` and flash `dtype` in like's framework,
    on its device. Returns (array, data pointer)."""
    if like.kind == "torch":  # the common case first: one torch call
        # new_empty: like's device and (by default) dtype without parsing keyword
        # arguments, the cheapest allocation torch offers (about 1 us on the host).
        t = like.obj
        out = t.new_empty(shape) if dtype == like.dtype else t.new_empty(shape, dtype=_torch_dtype(dtype))
        return out, out.data_ptr()
    np_dtype = _numpy_dtype(like, dtype)
    if np_dtype is not None:
        import numpy as np
        a = np.empty(shape, dtype=np_dtype)
        return a, a.ctypes.data
    import torch
    t = torch.empty(shape, dtype=_torch_dtype(dtype), device=_torch_device(like))
    return t, t.data_ptr()


def _torch_dtype(dtype):
    return getattr(sys.modules["torch"], _TORCH_DTYPES[dtype])


def empty_strided(like, shape, strides, dtype):
    """Output with the given element strides (a gradient must share its input's
    strides, as flash's backward takes one stride set per tensor pair). Returns
    (array, data pointer)."""
    np_dtype = _numpy_dtype(like, dtype)
    if np_dtype is not None:
        import numpy as np
        span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
        buf = np.empty(span, dtype=np_dtype)
        a = np.lib.stride_tricks.as_strided(buf, shape, [s * buf.itemsize for s in strides])
        return a, a.ctypes.data
    import torch
    t = torch.empty_strided(shape, strides, dtype=_torch_dtype(dtype), device=_torch_device(like))
    return t, t.data_ptr()


def finish(out, like):
    """An output in the framework of a DLPack-only input (cupy, jax, ...): handed over
    through that framework's from_dlpack, no copy. torch/numpy outputs are returned as is."""
    if like.kind != "dlpack":
        return out
    top = type(like.obj).__module__.split(".")[0]
    mod = sys.modules.get(top)
    if top in ("jax", "jaxlib"):
        mod = sys.modules.get("jax.dlpack")
    from_dlpack = getattr(mod, "from_dlpack", None)
    return from_dlpack(out) if from_dlpack is not None else out
