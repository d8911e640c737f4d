"""flashattn: Python binding of libflashattn (exact tiled attention on CPU, CUDA, HIP).

    import flashattn
    o = flashattn.attention(q, k, v, causal=True)       # torch, numpy, any __dlpack__
    o.sum().backward()                                  # torch autograd
    from flashattn.compat import flash_attn_func        # FlashAttention-2's functions

The C API is bound with ctypes (no compiled extension); libflashattn.so is found as
_library.py describes (FLASHATTN_LIBRARY first)."""
import sys

from ._errors import BackendError, Error, InternalError, InvalidArgument, Unsupported
from ._library import path as library_path
from .core import (BackendInfo, Plan, attention, attention_backward, backends, explain,
                   merge_partials, version)

if "torch" in sys.modules:
    # Define the autograd Function and (torch >= 2.4) register the custom ops now rather
    # than on a first call made while torch.compile traces. Without torch imported this
    # is deferred, so numpy-only users never pay torch's import time.
    from . import _autograd  # noqa: F401

__version__ = "0.1.0"
__all__ = ["attention", "attention_backward", "merge_partials", "backends", "explain", "version",
           "library_path", "BackendInfo", "Plan", "Error", "InvalidArgument", "Unsupported",
           "BackendError", "InternalError"]
