"""The float32 matrix products of the compiled kernels: MKL's ``cblas_sgemm`` when the ``mkl``
distribution is installed (``pip install 'nnrt[fast]'`` on Linux or Windows x86-64), else numpy's
``matmul`` (OpenBLAS).

Why: CONV_2D is 42-84% of a real CNN's time and its 1x1 and im2col products are plain GEMMs.
On this machine (AVX-512, one thread) numpy's OpenBLAS runs them 1.1-1.9x slower than MKL, which
runs at ONNX Runtime's pace (``benchmarks/gemm.py`` prints the table); BLIS measured slower than
OpenBLAS. So MKL is an optional backend of the products, chosen once per process:

* ``NNRT_BLAS=numpy`` keeps numpy's products; unset (or ``mkl``) uses MKL when its runtime
  library is found: the files of the installed ``mkl`` distribution (``importlib.metadata``),
  else ``<sys.prefix>/lib`` (``find_library``). It is loaded at the first preparation that asks
  (``ctypes.CDLL(..., RTLD_LOCAL)``: its symbols stay out of the process's namespace), set to its
  sequential threading layer (one thread: nnrt runs one kernel per compute unit) and to
  conditional numerical reproducibility on the branch MKL picks for this CPU (``MKL_CBWR_AUTO``):
  fused and unfused plans put a product in different buffers and must agree bit for bit, and
  MKL only promises the same bits for the same inputs whatever their alignment under CNR. (Here
  no alignment mattered over 300 random shapes and offsets, with or without it; ``AUTO``
  measured free, the ``STRICT`` mode 6-45% slower, so it is not used.) When the process already
  has that library (an MKL-built numpy), its settings stay its owner's: a warning says so.
* MKL is called from compiled code: numba calls the function through an external symbol
  registered with llvmlite (``sgemm_f32``), 0.4-0.9 us per call like ``np.matmul`` (a ctypes call
  from Python costs 4-5 us), and numba still caches the machine code on disk (the symbol is
  resolved by name when the cache is loaded). No product size measured faster in numpy (1x16x16:
  0.41 against 0.64 us; a [1, 1280] x [1280, 1000] FULLY_CONNECTED, memory-bound: equal), so
  every float32 product of the kernels that ask (``product()``) takes MKL. Without numba
  (``NNRT_JIT=0``) every product is numpy's: the numpy kernels stay the reference the CTS runs.
  MKL's packed filters (``cblas_sgemm_pack``) were measured too: 0.8-1.07x, not used.

A kernel asks once, at preparation: ``product()`` gives ``f(a, b, out)`` (``out = a @ b``, 2-D
float32, ``a`` and ``b`` C-contiguous or transposed views, anything else is copied; ``out`` must not
overlap them) and ``batched_product()`` the same for stacks of C-contiguous matrices. The two
backends differ by rounding only (the summation order), within the CTS tolerances; each is
deterministic.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from nnrt._log import get_logger, vlog_enabled
from nnrt.ops._jit import _import_numba, available, compiled

__all__ = ["BLAS_ENV", "Product", "backend", "batched_product", "describe", "find_library", "flush_subnormals",
           "forced", "matmul", "matmul_into", "mkl_loaded", "operand_layout", "product", "sgemm_batch_f32",
           "sgemm_f32"]

#: The environment variable that chooses the backend: ``numpy`` (or ``openblas``) keeps numpy's
#: products; anything else (``mkl``, unset) takes MKL when it is installed.
BLAS_ENV = "NNRT_BLAS"

#: ``f(a, b, out)``: ``out[...] = a @ b`` for float32 matrices (``product``) or stacks of them
#: (``batched_product``).
Product = Callable[[np.ndarray, np.ndarray, np.ndarray], None]

_lock = threading.Lock()
_state: dict[str, Any] = {}
_ours: set[str] = set()  # the libraries this module loaded (and set up)
_log = get_logger("gemm")

# MKL's constants (mkl_types.h, mkl_cblas.h).
_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL
_CBWR_AUTO = 2  # MKL_CBWR_AUTO
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

# The names the MKL functions get in llvmlite's symbol table, and the numba types of their
# calls (``types.ExternalFunction``), set by ``_load`` before the wrappers are compiled.
_SGEMM_SYMBOL = "nnrt_mkl_cblas_sgemm"
_SGEMM_BATCH_SYMBOL = "nnrt_mkl_cblas_sgemm_batch_strided"
_cblas_sgemm: Any = None
_cblas_sgemm_batch: Any = None

#: The signatures the wrappers are compiled for (any 2-D layouts; C-contiguous stacks).
SGEMM_F32 = ("void(Array(float32, 2, 'A', readonly=True), Array(float32, 2, 'A', readonly=True),"
             " Array(float32, 2, 'A'))")
SGEMM_BATCH_F32 = ("void(Array(float32, 3, 'C', readonly=True), Array(float32, 3, 'C', readonly=True),"
                   " float32[:, :, ::1])")


def operand_layout(s0: int, s1: int, rows: int, cols: int) -> tuple[int, int]:
    """How BLAS reads a [rows, cols] float32 matrix of element strides ``s0``, ``s1`` (both > 0
    rows and columns): (``_NO_TRANS``, its row stride) when row-major, (``_TRANS``, its column
    stride) when a transposed view of one, else (0, 0): to be copied first."""
    if (s1 == 1 or cols == 1) and (rows == 1 or s0 >= cols):
        return _NO_TRANS, cols if rows == 1 else s0
    if (s0 == 1 or rows == 1) and (cols == 1 or s1 >= rows):
        return _TRANS, rows if cols == 1 else s1
    return 0, 0


#: ``operand_layout`` as ``sgemm_f32`` calls it: compiled by ``_register``.
_layout: Any = operand_layout


def sgemm_f32(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b`` by MKL (compiled only: it calls ``cblas_sgemm`` through the symbol ``_load``
    registers). ``a`` [M, K] and ``b`` [K, N] row-major or transposed views with positive strides
    are passed as they are (``operand_layout``); any other layout is copied first. ``out`` [M, N]
    row-major, else computed into a fresh array and copied."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        out[:] = 0.0
        return
    ac, bc = a, b
    ta, lda = _layout(a.strides[0] // 4, a.strides[1] // 4, m, k)
    if ta == 0:
        ac = np.ascontiguousarray(a)
        ta, lda = _NO_TRANS, k
    tb, ldb = _layout(b.strides[0] // 4, b.strides[1] // 4, k, n)
    if tb == 0:
        bc = np.ascontiguousarray(b)
        tb, ldb = _NO_TRANS, n
    to, ldo = _layout(out.strides[0] // 4, out.strides[1] // 4, m, n)
    if to == _NO_TRANS:
        _cblas_sgemm(_ROW_MAJOR, ta, tb, m, n, k, np.float32(1.0), ac.ctypes.data, lda, bc.ctypes.data, ldb,
                     np.float32(0.0), out.ctypes.data, ldo)
        return
    tmp = np.empty((m, n), dtype=np.float32)
    _cblas_sgemm(_ROW_MAJOR, ta, tb, m, n, k, np.float32(1.0), ac.ctypes.data, lda, bc.ctypes.data, ldb,
                 np.float32(0.0), tmp.ctypes.data, n)
    out[:] = tmp


def sgemm_batch_f32(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[i] = a[i] @ b[i]`` for C-contiguous stacks ``a`` [B, M, K], ``b`` [B, K, N] and ``out``
    [B, M, N]: one ``cblas_sgemm_batch_strided`` call (compiled only)."""
    batch, m, k = a.shape
    n = b.shape[2]
    if batch == 0 or m == 0 or n == 0:
        return
    if k == 0:
        out[:] = 0.0
        return
    _cblas_sgemm_batch(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, np.float32(1.0), a.ctypes.data, k, m * k,
                       b.ctypes.data, n, k * n, np.float32(0.0), out.ctypes.data, n, m * n, batch)


#: The smallest normal float32 (2**-126): below it, a nonzero value is subnormal.
_TINY = np.float32(np.finfo(np.float32).tiny)


def flush_subnormals(a: np.ndarray) -> np.ndarray:
    """``a`` with its float32 subnormal values (0 < |v| < 2**-126) replaced by zeros of their
    sign, for a constant operand of the products (filters, weights), made once at preparation;
    ``a`` itself when it has none (or is not float32).

    Why: a product with a subnormal operand takes a microcode assist on x86, in MKL and OpenBLAS
    alike. PaddleOCR's models carry them (PP-OCRv3 rec 628k filter values, v4 rec 31k, v3 det
    5.8k): one 1x1 CONV_2D of PP-OCRv3 det, [1,10,10,480] -> 80 with 4000 subnormal weights, took
    0.92 ms, 0.05 ms flushed. Each dropped term is below 2**-126 x |input|: no visible change
    (ONNX Runtime's MLAS runs with the same assists unless told to flush; here it is done once)."""
    if a.dtype != np.float32:
        return a
    sub = (np.abs(a) < _TINY) & (a != 0)
    if not sub.any():
        return a
    return np.where(sub, np.copysign(np.float32(0), a), a)


def _numpy_product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.matmul(a, b, out=out)


def find_library() -> str | None:
    """The path of MKL's runtime library (``libmkl_rt.so.*``, ``mkl_rt*.dll``) from the installed
    ``mkl`` distribution's file list, else from ``<sys.prefix>/lib``; None when neither has it."""
    names: list[Path] = []
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name.startswith("libmkl_rt.so") or (f.name.startswith("mkl_rt") and f.name.endswith(".dll")):
            names.append(Path(str(f.locate())))
    names += sorted(Path(sys.prefix, "lib").glob("libmkl_rt.so*"))
    return next((str(p) for p in names if p.is_file()), None)


def _register(lib: ctypes.CDLL) -> bool:
    """Give numba the two MKL functions as external symbols (``_cblas_sgemm`` and
    ``_cblas_sgemm_batch``); False when numba is not installed."""
    global _cblas_sgemm, _cblas_sgemm_batch, _layout
    numba = _import_numba()
    if numba is None:
        return False
    _layout = numba.njit(cache=True, nogil=True)(operand_layout)
    import llvmlite.binding as llvm  # type: ignore[import-untyped,unused-ignore]

    types = numba.types

    i32, f32, ptr = types.int32, types.float32, types.voidptr
    for symbol, fn in ((_SGEMM_SYMBOL, lib.cblas_sgemm), (_SGEMM_BATCH_SYMBOL, lib.cblas_sgemm_batch_strided)):
        address = ctypes.cast(fn, ctypes.c_void_p).value
        assert address is not None
        llvm.add_symbol(symbol, address)
    _cblas_sgemm = types.ExternalFunction(
        _SGEMM_SYMBOL, types.void(i32, i32, i32, i32, i32, i32, f32, ptr, i32, ptr, i32, f32, ptr, i32))
    _cblas_sgemm_batch = types.ExternalFunction(
        _SGEMM_BATCH_SYMBOL,
        types.void(i32, i32, i32, i32, i32, i32, f32, ptr, i32, i32, ptr, i32, i32, f32, ptr, i32, i32, i32))
    return True


def _load() -> tuple[bool, str]:
    """Find and load MKL for the compiled kernels: (True, its path) or (False, why not)."""
    path = find_library()
    if path is None:
        return False, "MKL is not installed (pip install mkl)"
    try:
        add_dll_directory = getattr(os, "add_dll_directory", None)  # Windows: MKL's other DLLs beside it
        if add_dll_directory is not None:
            add_dll_directory(str(Path(path).parent))
        shared = path not in _ours and _loaded_already(path)
        lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_LOCAL", 0))
        _ours.add(path)
        cbwr = 0
        if not shared:  # else another user's (an MKL-built numpy): its settings stay theirs
            lib.MKL_Set_Threading_Layer(ctypes.c_int(_SEQUENTIAL))
            cbwr = lib.MKL_CBWR_Set(ctypes.c_int(_CBWR_AUTO))
        registered = _register(lib)
    except (OSError, AttributeError) as exc:  # a broken or foreign library: numpy's products
        return False, f"{path}: {type(exc).__name__}: {exc}"
    path = str(Path(path).resolve())
    if not registered:
        return False, "MKL is called from compiled code, and numba is not installed"
    if shared or cbwr != 0:  # another user of this library set it up; still deterministic per alignment
        _log.warning("gemm.mkl_shared", path=path, cbwr_status=int(cbwr),
                     note="MKL was loaded before nnrt: its threading layer and CNR mode are left as they are")
    return True, path


def _loaded_already(path: str) -> bool:
    """Whether the library at ``path`` is already in the process (Linux: ``RTLD_NOLOAD``)."""
    noload = getattr(os, "RTLD_NOLOAD", None)
    if noload is None:
        return False
    try:
        ctypes.CDLL(path, mode=noload | getattr(os, "RTLD_LOCAL", 0))
    except OSError:
        return False
    return True


def mkl_loaded() -> bool:
    """Whether MKL is loaded for the compiled kernels: looked for and loaded once per process,
    at the first call (logged with ``NNRT_VLOG=compilation``: ``nnrt.gemm`` event ``gemm.mkl``
    at debug level, with the library's path or why not)."""
    if "mkl" not in _state:
        with _lock:
            if "mkl" not in _state:
                ok, detail = _load()
                _state["mkl"], _state["detail"] = ok, detail
                if vlog_enabled("compilation"):
                    _log.debug("gemm.mkl", loaded=ok, detail=detail)
    loaded: bool = _state["mkl"]
    return loaded


def backend() -> str:
    """``"mkl"`` or ``"numpy"``: the products kernels prepared now make. ``NNRT_BLAS`` (or
    ``forced``) chooses; MKL is used when it loaded (``mkl_loaded``, not even looked for under
    ``NNRT_BLAS=numpy``) while compiled kernels are in use (``nnrt.ops._jit.available``)."""
    choice = _state.get("forced")
    if choice is None:
        choice = _state.get("env")
        if choice is None:
            env = os.environ.get(BLAS_ENV, "").strip().lower()
            choice = _state["env"] = "numpy" if env in ("numpy", "openblas") else "mkl"
    if choice == "numpy" or not available() or not mkl_loaded():
        return "numpy"
    return "mkl"


def describe() -> str:
    """The backend ``backend()`` gives now and where it comes from, for benchmark headers:
    ``"mkl (<library path>)"`` or ``"numpy (<why not MKL>)"``."""
    name = backend()
    if name == "mkl":
        return f"mkl ({_state['detail']})"
    if _state.get("forced") == "numpy" or _state.get("env") == "numpy":
        return f"numpy ({BLAS_ENV}=numpy)" if _state.get("forced") is None else "numpy (forced)"
    if not available():
        return "numpy (compiled kernels off)"
    return f"numpy ({_state.get('detail', '')})"


def product() -> Product:
    """The float32 product kernels prepared now use: MKL's (``sgemm_f32`` compiled) when the
    backend is MKL and numba is in use, else numpy's ``matmul``."""
    if backend() == "mkl":
        fn = compiled(sgemm_f32, SGEMM_F32)
        if fn is not None:
            return fn
    return _numpy_product


def batched_product() -> Product:
    """``product`` for stacks of C-contiguous matrices (``sgemm_batch_f32``)."""
    if backend() == "mkl":
        fn = compiled(sgemm_batch_f32, SGEMM_BATCH_F32)
        if fn is not None:
            return fn
    return _numpy_product


def matmul_into(mm: Product, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[...] = a @ b`` by ``mm`` for 2-D float32 operands, else by numpy (other dtypes,
    ranks or broadcasting); returns ``out``."""
    f32 = np.float32
    if a.ndim == b.ndim == out.ndim == 2 and a.dtype == f32 and b.dtype == f32 and out.dtype == f32:
        mm(a, b, out)
    else:
        np.matmul(a, b, out=out)
    return out


def matmul(mm: Product, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` as a fresh array, by ``mm`` for 2-D float32 operands (``matmul_into``)."""
    f32 = np.float32
    if a.ndim == b.ndim == 2 and a.dtype == f32 and b.dtype == f32 and a.shape[1] == b.shape[0]:
        out = np.empty((a.shape[0], b.shape[1]), dtype=f32)
        mm(a, b, out)
        return out
    res: np.ndarray = np.matmul(a, b)
    return res


@contextmanager
def forced(name: str) -> Iterator[None]:
    """Preparations inside the block use ``name``'s products (``"numpy"``, or ``"mkl"`` when it
    loads), whatever ``NNRT_BLAS`` says: for tests and benchmarks that compare both. Not for
    concurrent use: the choice is process-wide while the block runs."""
    with _lock:
        before = _state.get("forced")
        _state["forced"] = "numpy" if name == "numpy" else "mkl"
    try:
        yield
    finally:
        with _lock:
            _state["forced"] = before


def reset_for_tests() -> None:
    """Forget the backend decisions, so a test can change ``NNRT_BLAS`` or ``find_library``
    (a library already loaded stays loaded, and so do kernels compiled to call it)."""
    with _lock:
        _state.clear()
