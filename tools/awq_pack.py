# SPDX-License-Identifier: Apache-2.0
"""AutoAWQ round-to-nearest quantiser and gemm/gemv packers (numpy only).

Spec: docs/formats.md 1.3-1.5, cross-read with AutoAWQ 0.2.9
`AwqQuantizer.pseudo_quantize_tensor`, `WQLinear_GEMM.from_linear` and
`WQLinear_GEMV.from_linear`.

Notation: W is an nn.Linear weight [N, K] (N = out_features, K = in_features),
G = group_size, g = k // G. Codes q[n][k], zero points z[n][g] (0..15) and
scales s[n][g] (fp16).

fp16 arithmetic. AutoAWQ runs the quantiser on the GPU on a `.half()` weight,
so every elementwise op is computed in fp32 ("opmath") and rounded once to
fp16. This module does the same with numpy float16 arrays (numpy evaluates
each float16 ufunc in float32 and rounds once, i.e. correctly rounded fp16
+ - * /). torch's CPU backend cannot be used for this (torch 1.13 CPU has no
Half kernel for round/clamp), and round/clamp/max/min are exact anyway.
tests/python/test_tools.py cross-checks this against torch-half arithmetic.
One CUDA detail is reproduced literally: `tensor_half / 15` (a CPU scalar)
is computed by PyTorch CUDA as `x * (1.0f / 15)` in fp32, then rounded; for
an fp16 x this provably equals correctly rounded x / 15 (x/15 can never lie
within 2^-23 (relative) of an fp16 rounding midpoint), so it is bit-exact either way.

Layouts (formats.md 1.3 / 1.4):
  gemm: qweight I32 [K, N/8], qzeros I32 [K/G, N/8], both with the AWQ
        interleave (slot i <- column 8c + AWQ_ORDER[i]); scales F16 [K/G, N].
  gemv: qweight I32 [N, K/8] sequential along K, qzeros I32 [N, ZW]
        sequential along groups (nibbles past K/G are 0), scales F16 [N, ZW*8]
        zero padded past column K/G.
Dequantisation: W_deq[n][k] = fp16((q - z) * s) (single rounding).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)          # slot i holds column 8c + AWQ_ORDER[i]
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # column 8c + j sits in slot REV[j]
F16 = np.float16


def zeros_width(in_features: int, group_size: int) -> int:
    """AutoAWQ `calculate_zeros_width` (GEMV qzeros width ZW)."""
    if group_size >= 128:
        mult = 1
    elif group_size == 64:
        mult = 2
    elif group_size == 32:
        mult = 4
    else:
        raise NotImplementedError(f"gemv zeros_width: unsupported group_size {group_size}")
    base = -(-(in_features // group_size) // 8)
    return -(-base // mult) * mult


def _check(n: int, k: int, g: int):
    if g <= 0 or k % g:
        raise ValueError(f"in_features {k} must be a multiple of group_size {g} (> 0)")
    if n % 8:
        raise ValueError(f"out_features {n} must be a multiple of 8")


# ----------------------------------------------------------------------------- quantiser


def pseudo_quantize(w, group_size: int):
    """AwqQuantizer.pseudo_quantize_tensor (zero_point=True, w_bit=4) in fp16.

    w: [N, K] (any float dtype; it is first rounded to fp16 like `.half()`).
    Returns (q uint8 [N, K], z uint8 [N, K/G], s fp16 [N, K/G], w_fake fp16 [N, K]).
    """
    w = np.asarray(w).astype(F16)
    n, k = w.shape
    if group_size <= 0 or k % group_size:
        raise ValueError(f"in_features {k} must be a multiple of group_size {group_size}")
    if np.isnan(w).any():
        raise ValueError("NaN in weight")
    wg = w.reshape(-1, group_size)                             # [N*K/G, G]
    max_val = wg.max(axis=1, keepdims=True)
    min_val = wg.min(axis=1, keepdims=True)
    diff = np.maximum(max_val - min_val, F16(1e-5))            # .clamp(min=1e-5), fp16
    # `/ max_int` with a CPU scalar: CUDA computes x * (1.0f/15) in fp32, rounds to fp16.
    s = (diff.astype(np.float32) * (np.float32(1.0) / np.float32(15))).astype(F16)
    # A constant group gives s = fp16(1e-5)/15 and w/s may overflow fp16 to +-inf, which
    # then clamps (to z = 0 / q = 15 or 0) exactly as it does on the GPU.
    with np.errstate(over="ignore", invalid="ignore"):
        zf = np.clip(-np.rint(min_val / s), F16(0), F16(15))   # fp16 ops; rint = half-to-even
        qf = np.clip(np.rint(wg / s) + zf, F16(0), F16(15))
    w_fake = ((qf - zf) * s).reshape(n, k)
    q = qf.astype(np.uint8).reshape(n, k)
    z = zf.astype(np.uint8).reshape(n, k // group_size)
    return q, z, s.reshape(n, k // group_size), w_fake


def packer_codes(w_fake, z, s, group_size: int) -> np.ndarray:
    """The codes AutoAWQ's from_linear actually stores:
    round((w_fake + fp16(z*s)) / s) in fp16, with no clamp. Returns int32 [N, K].
    For w_fake from pseudo_quantize this equals q (formats.md 1.5)."""
    w_fake = np.asarray(w_fake, dtype=F16)
    n, k = w_fake.shape
    s_full = np.repeat(np.asarray(s, dtype=F16), group_size, axis=1)
    zs_full = np.repeat(np.asarray(z).astype(F16) * np.asarray(s, dtype=F16), group_size, axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.rint((w_fake + zs_full) / s_full).astype(np.int32)


def quantize_rtn(w, group_size: int, check_packer: bool = True):
    """pseudo_quantize + (optionally) verify the packer's recomputed codes.
    Returns (q, z, s, w_fake)."""
    q, z, s, w_fake = pseudo_quantize(w, group_size)
    if check_packer:
        qp = packer_codes(w_fake, z, s, group_size)
        if not np.array_equal(qp, q.astype(np.int32)):
            bad = int(np.count_nonzero(qp != q))
            raise AssertionError(f"AutoAWQ packer would store different codes for {bad} elements")
    return q, z, s, w_fake


def dequantize(q, z, s, group_size: int) -> np.ndarray:
    """W_deq[n][k] = fp16((q[n][k] - z[n][k/G]) * s[n][k/G]), [N, K] fp16.
    (q - z) is an integer in [-15, 15], so the fp32 product is exact and the
    single rounding to fp16 equals an fp16 multiply."""
    q = np.asarray(q).astype(np.int16)
    n, k = q.shape
    zf = np.repeat(np.asarray(z).astype(np.int16), group_size, axis=1)
    sf = np.repeat(np.asarray(s, dtype=F16).astype(np.float32), group_size, axis=1)
    return ((q - zf).astype(np.float32) * sf).astype(F16)


# ----------------------------------------------------------------------------- nibble packing


def _pack_nibbles(c8: np.ndarray) -> np.ndarray:
    """[..., 8] codes (slot order) -> [...] int32 words, slot i in bits [4i, 4i+4)."""
    c8 = np.asarray(c8)
    if c8.size and (c8.min() < 0 or c8.max() > 15):
        raise ValueError("codes must be in [0, 15]")
    c8 = c8.astype(np.uint8)
    by = (c8[..., 0::2] | (c8[..., 1::2] << np.uint8(4))).astype(np.uint8)   # [..., 4] bytes
    return np.ascontiguousarray(by).view("<i4")[..., 0]


def _unpack_nibbles(words: np.ndarray) -> np.ndarray:
    """[...] int32 words -> [..., 8] uint8 codes in slot order."""
    w = np.ascontiguousarray(np.asarray(words, dtype="<i4"))
    by = w[..., None].view(np.uint8)                                          # [..., 4]
    out = np.empty(w.shape + (8,), dtype=np.uint8)
    out[..., 0::2] = by & np.uint8(0xF)
    out[..., 1::2] = by >> np.uint8(4)
    return out


def pack_gemm(q, z, s) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q [N, K], z [N, K/G], s [N, K/G] -> (qweight I32 [K, N/8], qzeros I32 [K/G, N/8],
    scales F16 [K/G, N])."""
    q = np.asarray(q)
    z = np.asarray(z)
    n, k = q.shape
    ng = z.shape[1]
    if n % 8 or k % ng:
        raise ValueError(f"bad shapes q {q.shape} z {z.shape}")
    order = list(AWQ_ORDER)
    qt = q.T.reshape(k, n // 8, 8)[..., order]          # [K, N/8, 8] in slot order
    zt = z.T.reshape(ng, n // 8, 8)[..., order]
    return _pack_nibbles(qt), _pack_nibbles(zt), np.ascontiguousarray(np.asarray(s, F16).T)


def unpack_gemm(qweight, qzeros, scales):
    """Inverse of pack_gemm -> (q uint8 [N, K], z uint8 [N, K/G], s fp16 [N, K/G])."""
    k, n8 = qweight.shape
    ng = qzeros.shape[0]
    rev = list(AWQ_REVERSE_ORDER)
    q = _unpack_nibbles(qweight)[..., rev].reshape(k, n8 * 8).T   # slot REV[j] -> column j
    z = _unpack_nibbles(qzeros)[..., rev].reshape(ng, n8 * 8).T
    return np.ascontiguousarray(q), np.ascontiguousarray(z), np.ascontiguousarray(np.asarray(scales, F16).T)


def pack_gemv(q, z, s, group_size: int):
    """q [N, K], z [N, K/G], s [N, K/G] -> (qweight I32 [N, K/8], qzeros I32 [N, ZW],
    scales F16 [N, ZW*8])."""
    q = np.asarray(q)
    n, k = q.shape
    ng = k // group_size
    if k % 8:
        raise ValueError("in_features must be a multiple of 8")
    zw = zeros_width(k, group_size)
    qweight = _pack_nibbles(q.reshape(n, k // 8, 8))
    zp = np.zeros((n, zw * 8), dtype=np.uint8)
    zp[:, :ng] = z
    sp = np.zeros((n, zw * 8), dtype=F16)
    sp[:, :ng] = s
    return qweight, _pack_nibbles(zp.reshape(n, zw, 8)), sp


def unpack_gemv(qweight, qzeros, scales, group_size: int):
    """Inverse of pack_gemv -> (q [N, K], z [N, K/G], s [N, K/G])."""
    n, k8 = qweight.shape
    k = k8 * 8
    ng = k // group_size
    q = _unpack_nibbles(qweight).reshape(n, k)
    z = _unpack_nibbles(qzeros).reshape(n, -1)[:, :ng]
    return q, np.ascontiguousarray(z), np.ascontiguousarray(np.asarray(scales, F16)[:, :ng])


def dequantize_packed(version: str, qweight, qzeros, scales, group_size: int) -> np.ndarray:
    """Packed tensors -> W_deq [N, K] fp16 (nn.Linear orientation)."""
    version = version.lower()
    if version == "gemm":
        q, z, s = unpack_gemm(qweight, qzeros, scales)
    elif version == "gemv":
        q, z, s = unpack_gemv(qweight, qzeros, scales, group_size)
    else:
        raise ValueError(f"unsupported AWQ version {version!r} (only gemm, gemv)")
    if q.shape[1] % group_size or z.shape[1] != q.shape[1] // group_size:
        raise ValueError(f"group_size {group_size} inconsistent with qweight/qzeros shapes")
    return dequantize(q, z, s, group_size)


def pack(version: str, q, z, s, group_size: int):
    version = version.lower()
    if version == "gemm":
        return pack_gemm(q, z, s)
    if version == "gemv":
        return pack_gemv(q, z, s, group_size)
    raise ValueError(f"unsupported AWQ version {version!r}")


def packed_shapes(version: str, n: int, k: int, group_size: int):
    """Shapes of (qweight, qzeros, scales) for a linear [N, K]."""
    _check(n, k, group_size)
    if version == "gemm":
        return [[k, n // 8], [k // group_size, n // 8], [k // group_size, n]]
    if version == "gemv":
        if k % 8:
            raise ValueError("in_features must be a multiple of 8")
        zw = zeros_width(k, group_size)
        return [[n, k // 8], [n, zw], [n, zw * 8]]
    raise ValueError(f"unsupported AWQ version {version!r}")


# ----------------------------------------------------------------------------- synthetic codes


def _code_table(sigma: float) -> np.ndarray:
    """256-entry table mapping a uniform byte to a code offset d in [-8, 7]
    distributed like round(N(0, sigma)) (clipped), by inverse CDF."""
    from math import erf, sqrt
    edges = np.arange(-8, 8) + 0.5                          # upper edge of each offset bin
    cdf = np.array([0.5 * (1 + erf(e / (sigma * sqrt(2)))) for e in edges])
    u = (np.arange(256) + 0.5) / 256
    return (np.searchsorted(cdf, u) - 8).astype(np.int8)


def synthetic_codes(rng: np.random.Generator, n: int, k: int, group_size: int, std: float,
                    sigma_codes: float = 2.5):
    """Random (q, z, s) for a linear [N, K] without materialising a float matrix.

    Per group: z uniform in {7, 8}; offsets d ~ round(N(0, sigma_codes)) from a
    byte lookup table (clipped to [-8, 7]), q = clip(d + z, 0, 15);
    s = std / sigma_codes * U(0.8, 1.25) rounded to fp16, so the dequantised
    weights (q - z) * s have std ~= std. Codes, zeros and scales are in the
    ranges the RTN quantiser produces; they are just not derived from an fp16
    matrix (generation is ~50x faster than quantising one).
    """
    _check(n, k, group_size)
    ng = k // group_size
    table = _code_table(sigma_codes)
    d = table[np.frombuffer(rng.bytes(n * k), dtype=np.uint8)].reshape(n, ng, group_size)
    z = (7 + rng.integers(0, 2, size=(n, ng), dtype=np.uint8)).astype(np.uint8)
    q = np.clip(d + z[..., None].astype(np.int8), 0, 15).astype(np.uint8).reshape(n, k)
    s = (std / sigma_codes * np.exp(rng.uniform(np.log(0.8), np.log(1.25), size=(n, ng)))).astype(F16)
    return q, z, s
