"""Finds and loads libflashattn.so, and declares the C functions' signatures.

Loaded on first use, not at import, so `import flashattn` works (and says what is
missing) on a machine without the library. Search order, first hit wins:
  1. FLASHATTN_LIBRARY: the library file, or a directory holding it (the only place
     looked at when set: an explicit choice never falls back to another copy);
  2. the directory CMake recorded when it installed this package (FLASHATTN_PYTHON=ON,
     _install_dir.py), relative to the package so an installed tree can move;
  3. the lib/ and lib64/ of each prefix in FLASHATTN_ROOT (os.pathsep-separated);
  4. beside the package: each of its four parent directories and their lib/, lib64/
     (a package under <prefix>/lib/pythonX.Y/site-packages finds <prefix>/lib);
  5. the lib/ and lib64/ of each prefix in CMAKE_PREFIX_PATH, then of sys.prefix,
     /usr/local and /usr (where `cmake --install` puts it by default);
  6. the dynamic linker's own search (LD_LIBRARY_PATH, ldconfig)."""
import ctypes
import ctypes.util
import importlib.util
import os
import sys

from . import _abi

NAME = "libflashattn.so"
loaded = None  # the library once load() has succeeded (read directly on the hot path)


def _install_dir():
    try:
        from . import _install_dir as recorded  # written by CMake's install step
    except ImportError:
        return []
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.normpath(os.path.join(here, recorded.LIBDIR_FROM_PACKAGE))]


def _beside_package():
    out = []
    d = os.path.dirname(os.path.abspath(__file__))
    for _ in range(4):
        d = os.path.dirname(d)
        out += [d, os.path.join(d, "lib"), os.path.join(d, "lib64")]
    return out


def _prefixes(*roots):
    return [os.path.join(os.path.abspath(r), sub) for r in roots if r for sub in ("lib", "lib64")]


def _env_paths(var):
    return os.environ.get(var, "").split(os.pathsep)


def candidates():
    """Paths tried, in order (for the error message and for tests)."""
    explicit = os.environ.get("FLASHATTN_LIBRARY")
    if explicit:
        explicit = os.path.abspath(explicit)
        return [os.path.join(explicit, NAME) if os.path.isdir(explicit) else explicit]
    dirs = (_install_dir() + _prefixes(*_env_paths("FLASHATTN_ROOT")) + _beside_package()
            + _prefixes(*_env_paths("CMAKE_PREFIX_PATH"), sys.prefix, "/usr/local", "/usr"))
    return list(dict.fromkeys(os.path.join(d, NAME) for d in dirs))  # in order, without repeats


def _declare(lib):
    """argtypes/restype for every function we call: ctypes then converts ints to
    pointers and int64 correctly instead of guessing C int."""
    P, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    desc_p = ctypes.POINTER(_abi.Desc)
    cstr_p = ctypes.POINTER(ctypes.c_char_p)
    lib.flash_desc_init.argtypes = [desc_p]
    lib.flash_desc_init.restype = None
    lib.flash_attention.argtypes = [desc_p, P, P, P, P]
    lib.flash_attention_backward.argtypes = [desc_p, P, P, P, P, P, P, P, P, P]
    lib.flash_merge_partials.argtypes = [desc_p, i64, P, P, P, P]
    lib.flash_last_error.restype = ctypes.c_char_p
    lib.flash_version.restype = ctypes.c_char_p
    lib.flash_backend_count.restype = i32
    lib.flash_backend_info.argtypes = [i32, ctypes.POINTER(i32), ctypes.POINTER(i32), cstr_p, cstr_p]
    lib.flash_explain.argtypes = [desc_p, i32, P, ctypes.POINTER(i32), cstr_p, cstr_p]
    for f in ("flash_attention", "flash_attention_backward", "flash_merge_partials",
              "flash_backend_info", "flash_explain"):
        getattr(lib, f).restype = i32


def _import_torch_first():
    """Imports torch, when it is installed and not imported yet, before libflashattn can
    initialise a GPU runtime. Measured on the GPU machine (torch 2.11 + CUDA 13, H100):
    `import flashattn; flashattn.backends(); import torch` segfaulted inside torch's import
    (torch/_subclasses/functional_tensor.py) once our cuda module had probed the device,
    while importing torch first, or loading the module without probing, or cuInit alone,
    did not (tests/README.md, "Python on the GPU machine"). The cause inside torch is not
    known; the order is what we control. FLASHATTN_NO_TORCH_FIRST=1 turns this off."""
    if "torch" in sys.modules or os.environ.get("FLASHATTN_NO_TORCH_FIRST") == "1":
        return
    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  (imported for its side effect: torch initialises first)


def load():
    """The loaded library (cached). Raises ImportError listing every path tried."""
    global loaded
    if loaded is not None:
        return loaded
    _import_torch_first()
    tried = []
    for path in candidates():
        if not os.path.exists(path):
            tried.append(path)
            continue
        lib = ctypes.CDLL(path)  # an existing file that fails to load raises OSError as is
        break
    else:
        found = None if os.environ.get("FLASHATTN_LIBRARY") else ctypes.util.find_library("flashattn")
        if not found:
            raise ImportError(
                "flashattn: libflashattn.so not found; tried " + ", ".join(tried)
                + (" and the dynamic linker's search path" if not os.environ.get("FLASHATTN_LIBRARY") else "")
                + ". Set FLASHATTN_LIBRARY to the library (or its directory), or build it "
                "with cmake -DFLASHATTN_PYTHON=ON and install.")
        lib = ctypes.CDLL(found)
    if not hasattr(lib, "flash_backend_count"):
        raise ImportError(f"flashattn: {lib._name} is too old for this package "
                          "(no flash_backend_count); rebuild libflashattn")
    _declare(lib)
    loaded = lib
    return lib


def path():
    """Filesystem path of the loaded library."""
    return load()._name
