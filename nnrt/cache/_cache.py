"""The compilation cache: one entry per (app token, device, version, preference, priority).

NNAPI's compilation caching (digest section 6), for nnrt's CPU device. Kernels are Python
closures and cannot be stored, so an entry holds what is expensive to recompute and lets
preparation rebuild the closures cheaply:

* the **model cache** (file ``<64 letters>1``): magic ``b"NNRTMC01"``, a u64 length, a JSON
  header, then a 32-byte HMAC-SHA256 tag over everything before it. The header holds the
  device name, version, preference and priority, the model (``nnrt.model._serialize``'s
  description, its constants as offsets into the data cache), the calibrated cost of every
  top-level step (so loading runs no calibration), the index of the re-laid constants
  (``nnrt.ops._relay``: operation label, key, offset, dtype, shape) and the data cache's
  size and CRC-32. The HMAC key is the entry key, itself SHA-256 over the app's 32-byte token,
  the device name, version, preference and priority: a flipped bit, appended or missing
  bytes, a model cache from another entry or another token, or a data cache put in its place
  all fail the tag check.
* the **data cache** (file ``<64 letters>2``): the constant tensors, then the re-laid arrays,
  each at a multiple of 64 bytes, raw. Loading reads it once into private memory and checks
  its size and CRC-32 against the verified header before anything reads it, so a damaged data
  cache is refused (GENERAL_FAILURE), never used; what was verified is what the model
  computes with (a mapping would let a later write change the constants under a prepared
  model, and a truncation kill the process with SIGBUS). (CRC-32 catches accidental damage; the
  model cache is the security-sensitive part, as in NNAPI.)

File names follow NNAPI's runtime: each byte of the 32-byte entry key becomes two letters
'A'..'P' (low nibble first), then '1' for the model cache or '2' for the data cache.

Writers never leave a half-written entry that loads: each file is written to a temporary file
in the cache directory, flushed with fsync and renamed over the old one (atomic), data cache
first. Two concurrent writers can at worst pair one's model cache with the other's data cache,
which the CRC check refuses unless both wrote the same bytes. Every failure to load is
GENERAL_FAILURE (``read_entry``); the caller falls back to a full preparation.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnrt.errors import GeneralFailureError, InvalidArgumentError, NnrtError
from nnrt.memory import read_regular_file
from nnrt.model import Model
from nnrt.model._serialize import array_at, model_from_dict, model_to_dict, parse_header
from nnrt.types import ExecutionPreference, Priority

__all__ = ["TOKEN_BYTES", "CacheEntry", "cache_key", "check_cache_args", "file_names", "read_entry", "write_entry"]

TOKEN_BYTES = 32
MAGIC = b"NNRTMC01"
FORMAT_VERSION = 1
ALIGN = 64
_TAG = 32


def check_cache_args(cache_dir: object, token: object) -> tuple[str, bytes]:
    """INVALID_ARGUMENT unless ``cache_dir`` is a directory path and ``token`` is 32 bytes."""
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise InvalidArgumentError(f"cache_dir must be a path, got {type(cache_dir).__name__}")
    if not isinstance(token, (bytes, bytearray)) or len(token) != TOKEN_BYTES:
        raise InvalidArgumentError(f"token must be {TOKEN_BYTES} bytes, got {token!r:.60}")
    return os.fspath(cache_dir), bytes(token)


def cache_key(token: bytes, device: str, version: str, preference: ExecutionPreference, priority: Priority) -> bytes:
    """The entry key: SHA-256 over the app token, device name and version, preference and priority."""
    h = hashlib.sha256(b"nnrt-compilation-cache\0")
    for field in (token, device.encode(), version.encode(), str(int(preference)).encode(), str(int(priority)).encode()):
        h.update(struct.pack("<I", len(field)) + field)
    return h.digest()


def file_names(key: bytes) -> tuple[str, str]:
    """(model cache, data cache) file names for an entry key, as NNAPI's runtime spells them."""
    stem = "".join(chr(65 + (b & 15)) + chr(65 + (b >> 4)) for b in key)
    return stem + "1", stem + "2"


@dataclass(slots=True)
class CacheEntry:
    """What a verified entry gives back: the model, step costs and re-laid arrays."""

    model: Model
    costs: list[float]
    relaid: dict[tuple[str, str], np.ndarray]
    meta: dict[str, Any]


def _meta(device: str, version: str, preference: ExecutionPreference, priority: Priority) -> dict[str, Any]:
    return {"device": device, "version": version, "preference": int(preference), "priority": int(priority)}


@contextlib.contextmanager
def _atomic_file(path: str) -> Iterator[Any]:
    """A temporary file beside ``path``, fsync'd and renamed over it on success, removed on failure."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".nnrt-tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_entry(
    cache_dir: str,
    key: bytes,
    model: Model,
    costs: list[float],
    relaid: Mapping[tuple[str, str], np.ndarray],
    meta: dict[str, Any],
) -> None:
    """Write (or replace) the entry ``key``. Raises OSError when the directory is unusable."""
    arrays: list[tuple[int, np.ndarray]] = []
    size = 0

    def add(arr: np.ndarray) -> dict[str, int]:
        nonlocal size
        offset = -(-size // ALIGN) * ALIGN
        arrays.append((offset, arr))
        size = offset + arr.nbytes
        return {"offset": offset, "nbytes": int(arr.nbytes)}

    doc: dict[str, Any] = {"format": FORMAT_VERSION, "meta": meta, "model": model_to_dict(model, add),
                           "costs": [float(c) for c in costs], "relaid": []}
    for (label, name), arr in relaid.items():
        arr = np.ascontiguousarray(arr)
        desc = add(arr)
        doc["relaid"].append({"label": label, "key": name, "dtype": arr.dtype.str, "shape": list(arr.shape), **desc})
    model_name, data_name = file_names(key)
    crc = 0
    with _atomic_file(os.path.join(cache_dir, data_name)) as f:
        pos = 0
        for offset, arr in arrays:
            pad = b"\0" * (offset - pos)
            raw = arr.reshape(-1).view(np.uint8).data
            f.write(pad)
            f.write(raw)
            crc = zlib.crc32(raw, zlib.crc32(pad, crc))
            pos = offset + arr.nbytes
    doc["data"] = {"size": size, "crc32": crc}
    header = json.dumps(doc, separators=(",", ":")).encode()
    body = MAGIC + struct.pack("<Q", len(header)) + header
    with _atomic_file(os.path.join(cache_dir, model_name)) as f:
        f.write(body + hmac.new(key, body, hashlib.sha256).digest())


def read_entry(cache_dir: str, key: bytes, meta: dict[str, Any]) -> CacheEntry:
    """Load and verify the entry ``key``; any problem is GENERAL_FAILURE naming it."""
    model_name, data_name = file_names(key)
    try:
        with open(os.path.join(cache_dir, model_name), "rb") as f:
            blob = f.read()
    except OSError as err:
        raise GeneralFailureError(f"compilation cache: no model cache ({err.strerror})") from None
    body, tag = blob[:-_TAG], blob[-_TAG:]
    if len(blob) < len(MAGIC) + 8 + _TAG or body[: len(MAGIC)] != MAGIC:
        raise GeneralFailureError("compilation cache: the model cache is not an nnrt model cache")
    if not hmac.compare_digest(tag, hmac.new(key, body, hashlib.sha256).digest()):
        raise GeneralFailureError("compilation cache: the model cache failed verification (damaged, or another entry's)")
    (n,) = struct.unpack("<Q", body[8:16])
    if 16 + n != len(body):
        raise GeneralFailureError("compilation cache: the model cache has a bad length")
    try:
        doc = parse_header(body[16:])
        if doc["format"] != FORMAT_VERSION or doc["meta"] != meta:
            raise GeneralFailureError(f"compilation cache: entry written for {doc['meta']}, format {doc['format']}")
        raw = _read_data(os.path.join(cache_dir, data_name), int(doc["data"]["size"]), int(doc["data"]["crc32"]))
        model = model_from_dict(doc["model"], lambda d, dtype, dims: array_at(raw, 0, d, dtype, dims))
        relaid: dict[tuple[str, str], np.ndarray] = {}
        for d in doc["relaid"]:
            dtype, shape = np.dtype(d["dtype"]), tuple(int(s) for s in d["shape"])
            arr = array_at(raw, 0, d, dtype, shape)
            arr.flags.writeable = False
            relaid[(str(d["label"]), str(d["key"]))] = arr
        costs = [float(c) for c in doc["costs"]]
    except GeneralFailureError:
        raise
    except NnrtError as err:
        raise GeneralFailureError(f"compilation cache: unusable entry ({err.message})") from None
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, AttributeError) as err:
        raise GeneralFailureError(f"compilation cache: unusable entry ({type(err).__name__}: {str(err)[:200]})") from None
    return CacheEntry(model, costs, relaid, doc["meta"])


def _read_data(path: str, size: int, crc: int) -> np.ndarray:
    """The data cache's bytes, read once into private memory and verified (module doc)."""
    try:
        raw = read_regular_file(path, "compilation cache: the data cache")
    except InvalidArgumentError as err:
        raise GeneralFailureError(f"compilation cache: cannot read the data cache ({err.message})") from None
    if raw.size != size:
        raise GeneralFailureError(f"compilation cache: the data cache has {raw.size} bytes, {size} expected")
    if zlib.crc32(raw.data) != crc:
        raise GeneralFailureError("compilation cache: the data cache failed its checksum (damaged)")
    return raw
