"""Table lookups and hashing: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION, RANDOM_MULTINOMIAL.

EMBEDDING_LOOKUP gathers rows of a table by index; HASHTABLE_LOOKUP finds rows by key in a
sorted key list and also outputs a hit mask. LSH_PROJECTION hashes each input row with a
seed taken from its hash tensor (Google's FarmHash ``Fingerprint64`` of the seed's float32
bytes followed by the row's bytes, as NNAPI does), weights the signed 64-bit hash values and
keeps the sign bit; the FarmHash function is written out here in pure Python. RANDOM_MULTINOMIAL
draws samples from softmax(logits) with a Philox generator keyed by its ``seeds`` input, so
equal seeds give equal samples.
"""

from __future__ import annotations

import struct

import numpy as np

from nnrt.ops._common import same_quant
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["fingerprint64"]

_EMBEDDING_TYPES = (
    T.TENSOR_FLOAT32,
    T.TENSOR_FLOAT16,
    T.TENSOR_INT32,
    T.TENSOR_QUANT8_ASYMM,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
)
_HASHTABLE_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)


def _check_quant_match(call: OpCall, i: int, j: int) -> None:
    a, b = call.inputs[i], call.outputs[j]
    if not same_quant(a, b):
        call.fail(f"output {j} must have the quantization (scale, zero point) of input {i}")


# -- EMBEDDING_LOOKUP ---------------------------------------------------------------------


@kernel(Op.EMBEDDING_LOOKUP)
def prepare_embedding_lookup(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.expect_type(0, T.TENSOR_INT32)
    call.expect_rank(0, 1)
    call.expect_type(1, *_EMBEDDING_TYPES)
    call.expect_same_type(1, outputs=[0])
    _check_quant_match(call, 1, 0)
    if call.inputs[1].dimensions and len(call.inputs[1].dimensions) < 2:
        call.fail("input 1 (values) must have rank 2 or more")
    out_dtype = call.outputs[0].type.dtype

    def run(lookups: np.ndarray, values: np.ndarray) -> np.ndarray:
        if lookups.ndim != 1 or values.ndim < 2:
            call.fail("lookups must have rank 1 and values rank 2 or more")
        idx = lookups.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= values.shape[0]):
            call.fail(f"lookup index out of range [0, {values.shape[0]})")
        return np.ascontiguousarray(values[idx], dtype=out_dtype)

    return run


# -- HASHTABLE_LOOKUP ---------------------------------------------------------------------


@kernel(Op.HASHTABLE_LOOKUP)
def prepare_hashtable_lookup(call: OpCall) -> Kernel:
    call.expect_counts(3, 2)
    call.expect_type(0, T.TENSOR_INT32)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(0, 1)
    call.expect_rank(1, 1)
    call.expect_type(2, *_HASHTABLE_TYPES)
    call.expect_same_type(2, outputs=[0])
    _check_quant_match(call, 2, 0)
    call.expect_output_type(1, T.TENSOR_QUANT8_ASYMM)
    k_dims, v_dims = call.inputs[1].dimensions, call.inputs[2].dimensions
    if v_dims and len(v_dims) < 1:
        call.fail("input 2 (values) must have rank 1 or more")
    if k_dims and v_dims and k_dims[0] and v_dims[0] and k_dims[0] != v_dims[0]:
        call.fail(f"input 1 (keys) has {k_dims[0]} entries but input 2 (values) has {v_dims[0]} rows")
    out_dtype = call.outputs[0].type.dtype

    def run(lookups: np.ndarray, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if lookups.ndim != 1 or keys.ndim != 1 or values.ndim < 1 or keys.shape[0] != values.shape[0]:
            call.fail("lookups and keys must have rank 1, and values one row per key")
        # Keys are sorted ascending (NNAPI requires it); binary search as the reference does.
        pos = np.searchsorted(keys, lookups)
        pos_c = np.minimum(pos, max(keys.shape[0] - 1, 0))
        hit = (pos < keys.shape[0]) & (keys[pos_c] == lookups) if keys.size else np.zeros(lookups.shape, bool)
        out = np.zeros((lookups.shape[0], *values.shape[1:]), dtype=out_dtype)
        if values.shape[0]:
            out[hit] = values[pos_c[hit]]
        return out, hit.astype(np.uint8)

    return run


# -- LSH_PROJECTION -----------------------------------------------------------------------

_M64 = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F


def _f64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 8], "little")


def _f32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 4], "little")


def _rot(v: int, shift: int) -> int:
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _M64


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = _K2 + n * 2
        a = (_f64(s, 0) + _K2) & _M64
        b = _f64(s, n - 8)
        c = (_rot(b, 37) * mul + a) & _M64
        d = ((_rot(a, 25) + b) * mul) & _M64
        return _len16(c, d, mul)
    if n >= 4:
        mul = _K2 + n * 2
        return _len16(n + (_f32(s, 0) << 3), _f32(s, n - 4), mul)
    if n > 0:
        y = (s[0] + (s[n >> 1] << 8)) & 0xFFFFFFFF
        z = (n + (s[n - 1] << 2)) & 0xFFFFFFFF
        return (_shift_mix(((y * _K2) ^ (z * _K0)) & _M64) * _K2) & _M64
    return _K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_f64(s, 0) * _K1) & _M64
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M64
    d = (_f64(s, n - 16) * _K2) & _M64
    return _len16((_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)


def _len33to64(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_f64(s, 0) * _K2) & _M64
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M64
    d = (_f64(s, n - 16) * _K2) & _M64
    y = (_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64
    z = _len16(y, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
    e = (_f64(s, 16) * mul) & _M64
    f = _f64(s, 24)
    g = ((y + _f64(s, n - 32)) * mul) & _M64
    h = ((z + _f64(s, n - 24)) * mul) & _M64
    return _len16((_rot((e + f) & _M64, 43) + _rot(g, 30) + h) & _M64, (e + _rot((f + a) & _M64, 18) + g) & _M64, mul)


def _weak32(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _f64(s, i), _f64(s, i + 8), _f64(s, i + 16), _f64(s, i + 24)
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def fingerprint64(s: bytes) -> int:
    """FarmHash ``Fingerprint64`` (farmhashna::Hash64) of ``s``, as an unsigned 64-bit int."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    seed = 81
    x = seed
    y = (seed * _K1 + 113) & _M64
    z = (_shift_mix((y * _K2 + 113) & _M64) * _K2) & _M64
    v0 = v1 = w0 = w1 = 0
    x = (x * _K2 + _f64(s, 0)) & _M64
    end = ((n - 1) // 64) * 64
    last64 = n - 64
    i = 0
    while True:
        x = (_rot((x + y + v0 + _f64(s, i + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v1 + _f64(s, i + 48)) & _M64, 42) * _K1) & _M64
        x ^= w1
        y = (y + v0 + _f64(s, i + 40)) & _M64
        z = (_rot((z + w0) & _M64, 33) * _K1) & _M64
        v0, v1 = _weak32(s, i, (v1 * _K1) & _M64, (x + w0) & _M64)
        w0, w1 = _weak32(s, i + 32, (z + w1) & _M64, (y + _f64(s, i + 16)) & _M64)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = _K1 + ((z & 0xFF) << 1)
    i = last64
    w0 = (w0 + ((n - 1) & 63)) & _M64
    v0 = (v0 + w0) & _M64
    w0 = (w0 + v0) & _M64
    x = (_rot((x + y + v0 + _f64(s, i + 8)) & _M64, 37) * mul) & _M64
    y = (_rot((y + v1 + _f64(s, i + 48)) & _M64, 42) * mul) & _M64
    x ^= (w1 * 9) & _M64
    y = (y + v0 * 9 + _f64(s, i + 40)) & _M64
    z = (_rot((z + w0) & _M64, 33) * mul) & _M64
    v0, v1 = _weak32(s, i, (v1 * mul) & _M64, (x + w0) & _M64)
    w0, w1 = _weak32(s, i + 32, (z + w1) & _M64, (y + _f64(s, i + 16)) & _M64)
    z, x = x, z
    return _len16(
        (_len16(v0, w0, mul) + _shift_mix(y) * _K0 + z) & _M64, (_len16(v1, w1, mul) + x) & _M64, mul
    )


_LSH_SPARSE_DEPRECATED, _LSH_DENSE, _LSH_SPARSE = 1, 2, 3


def _running_sign_bit(rows: list[bytes], weight: np.ndarray | None, seed: float) -> int:
    prefix = struct.pack("<f", seed)
    score = 0.0
    for k, row in enumerate(rows):
        h = fingerprint64(prefix + row)
        value = float(h - (1 << 64) if h >= 1 << 63 else h)  # int64 -> double
        score += value if weight is None else float(weight[k]) * value
    return 1 if score > 0 else 0


@kernel(Op.LSH_PROJECTION)
def prepare_lsh_projection(call: OpCall) -> Kernel:
    call.expect_counts(4, 1)
    call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
    call.expect_rank(0, 2)
    call.expect_type(1, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
    if call.has_input(2):
        call.expect_type(2, call.inputs[0].type)
        call.expect_rank(2, 1)
    call.expect_type(3, T.INT32)
    call.expect_output_type(0, T.TENSOR_INT32)
    h_dims, in_dims = call.inputs[0].dimensions, call.inputs[1].dimensions
    if h_dims and h_dims[1] > 32:
        call.fail(f"input 0 (hash) has {h_dims[1]} bits per hash; at most 32 are allowed")
    if in_dims and len(in_dims) < 1:
        call.fail("input 1 must have rank 1 or more")
    lsh_type = call.const(3)
    if lsh_type is not None and lsh_type not in (_LSH_SPARSE_DEPRECATED, _LSH_DENSE, _LSH_SPARSE):
        call.fail(f"input 3: LSH projection type {lsh_type} is not SPARSE_DEPRECATED(1), DENSE(2) or SPARSE(3)")

    def run(hash_: np.ndarray, data: np.ndarray, weight: np.ndarray | None, lsh_type: int) -> np.ndarray:
        if lsh_type not in (_LSH_SPARSE_DEPRECATED, _LSH_DENSE, _LSH_SPARSE):
            call.fail(f"input 3: LSH projection type {lsh_type} is not 1, 2 or 3")
        if hash_.ndim != 2 or hash_.shape[1] > 32 or data.ndim < 1:
            call.fail("hash must be [numHash, numBits <= 32] and input rank 1 or more")
        if weight is not None and (weight.ndim != 1 or weight.shape[0] != data.shape[0]):
            call.fail("input 2 (weight) must be a vector with one value per input row")
        raw = np.ascontiguousarray(data).tobytes()
        step = len(raw) // data.shape[0] if data.shape[0] else 0
        rows = [raw[k * step : (k + 1) * step] for k in range(data.shape[0])]
        w = None if weight is None else weight.astype(np.float64)
        num_hash, num_bits = hash_.shape
        seeds = hash_.astype(np.float32)
        bits = np.array(
            [[_running_sign_bit(rows, w, float(seeds[i, j])) for j in range(num_bits)] for i in range(num_hash)],
            dtype=np.int64,
        ).reshape(num_hash, num_bits)
        if lsh_type == _LSH_DENSE:
            return bits.reshape(-1).astype(np.int32)
        sig = np.zeros(num_hash, dtype=np.int64)
        for j in range(num_bits):
            sig = (sig << 1) | bits[:, j]
        if lsh_type == _LSH_SPARSE:
            sig += np.arange(num_hash, dtype=np.int64) << num_bits
        return sig.astype(np.uint32 if num_bits == 32 else np.int64).astype(np.int32)

    return run


# -- RANDOM_MULTINOMIAL -------------------------------------------------------------------


@kernel(Op.RANDOM_MULTINOMIAL)
def prepare_random_multinomial(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
    call.expect_rank(0, 2)
    call.expect_type(1, T.INT32)
    call.expect_type(2, T.TENSOR_INT32)
    call.expect_rank(2, 1)
    call.expect_output_type(0, T.TENSOR_INT32)
    seeds_dims = call.inputs[2].dimensions
    if seeds_dims and seeds_dims[0] and seeds_dims[0] != 2:
        call.fail(f"input 2 (seeds) must hold 2 values, has {seeds_dims[0]}")

    def run(logits: np.ndarray, num_samples: int, seeds: np.ndarray) -> np.ndarray:
        if logits.ndim != 2 or seeds.shape != (2,) or num_samples < 0:
            call.fail("logits must be [batches, classes], seeds 2 values and num_samples >= 0")
        key = (int(seeds[0]) & 0xFFFFFFFF) | ((int(seeds[1]) & 0xFFFFFFFF) << 32)
        rng = np.random.Generator(np.random.Philox(key=key))
        x = logits.astype(np.float64)
        x = x - x.max(axis=1, keepdims=True)
        probs = np.exp(x)
        probs /= probs.sum(axis=1, keepdims=True)
        cdf = np.cumsum(probs, axis=1)
        out = np.empty((x.shape[0], num_samples), dtype=np.int32)
        classes = x.shape[1]
        for b in range(x.shape[0]):
            u = rng.random(num_samples) * cdf[b, -1]
            out[b] = np.minimum(np.searchsorted(cdf[b], u, side="right"), classes - 1)
        return out

    return run
