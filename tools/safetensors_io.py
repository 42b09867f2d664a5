# SPDX-License-Identifier: Apache-2.0
"""Dependency-free (numpy only) safetensors reader/writer, incl. sharded checkpoints.

Layout follows docs/formats.md section 2 and the reference Rust writer
(huggingface/safetensors `tensor.rs::prepare`), byte for byte by default:

* 8-byte little-endian header length N, then N bytes of compact UTF-8 JSON,
  space-padded to a multiple of 8, then the data buffer.
* tensors are laid out sorted by dtype *descending in the Rust enum order*
  (U64 > I64 > F64 > F32 > U32 > I32 > BF16 > F16 > U16 > I16 > ... > BOOL;
  i.e. by element size descending, ties broken by that enum order), then by
  name, so every tensor is aligned to its element size.
* JSON key order: "writer" (default) = what the Rust writer emits:
  `__metadata__` first, then tensors in data order, each as
  {"dtype", "shape", "data_offsets"}; "sorted" = json.dumps(sort_keys=True).
  Readers must not depend on either.

BF16 has no numpy dtype: BF16 tensors are handled as numpy uint16 bit
patterns (`f32_to_bf16_bits` rounds to nearest even, like torch).

Sharding follows huggingface_hub `split_state_dict_into_shards_factory`:
tensors are filled into shards in state-dict order; a tensor that does not
fit starts a new shard; a tensor larger than the limit gets its own shard.
Files are `model-00001-of-0000M.safetensors` plus
`model.safetensors.index.json` = {"metadata": {"total_size": ...},
"weight_map": {...}}. A single shard is written as `model.safetensors`
without an index.

Streaming: `StreamingWriter` writes the header first (from names, dtypes and
shapes only) and then accepts tensor data in any order, possibly in row
chunks, at the precomputed offsets. That is how tools/make_checkpoint.py
writes multi-GB checkpoints without holding them in memory.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

# Element size in bytes and (for numeric ones) the numpy dtype used for I/O.
DTYPE_SIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "F64": 8, "I64": 8, "U64": 8,
}
# Rank in the Rust `Dtype` enum (declaration order; "MUST be in increasing
# alignment order"). The writer sorts by this rank, descending.
_DTYPE_RANK = {name: i for i, name in enumerate(
    ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
     "I32", "U32", "F32", "F64", "I64", "U64"])}
NUMPY_OF = {
    "BOOL": np.dtype("bool"), "U8": np.dtype("u1"), "I8": np.dtype("i1"),
    "F8_E5M2": np.dtype("u1"), "F8_E4M3": np.dtype("u1"),
    "I16": np.dtype("<i2"), "U16": np.dtype("<u2"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # raw bit patterns
    "I32": np.dtype("<i4"), "U32": np.dtype("<u4"), "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"), "I64": np.dtype("<i8"), "U64": np.dtype("<u8"),
}
_ST_OF_NUMPY = {
    np.dtype("bool"): "BOOL", np.dtype("u1"): "U8", np.dtype("i1"): "I8",
    np.dtype("i2"): "I16", np.dtype("u2"): "U16", np.dtype("f2"): "F16",
    np.dtype("i4"): "I32", np.dtype("u4"): "U32", np.dtype("f4"): "F32",
    np.dtype("f8"): "F64", np.dtype("i8"): "I64", np.dtype("u8"): "U64",
}
MAX_HEADER_SIZE = 100_000_000
DEFAULT_METADATA = {"format": "pt"}
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


# ----------------------------------------------------------------------------- bf16


def f32_to_bf16_bits(x) -> np.ndarray:
    """fp32 -> bf16 bit patterns (uint16), round to nearest, ties to even.

    NaN maps to a quiet NaN with the sign kept (0x7FC0 | sign), as torch does.
    Overflow rounds to +-inf like any RNE conversion.
    """
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = a.view(np.uint32)
    rounding_bias = ((u >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    out = ((u + rounding_bias) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        out[nan] = ((u[nan] >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)) | np.uint16(0x7FC0)
    return out


def bf16_bits_to_f32(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) -> fp32 (exact)."""
    b = np.ascontiguousarray(np.asarray(bits, dtype=np.uint16))
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ----------------------------------------------------------------------------- header


def _sort_key(item: Tuple[str, str]) -> Tuple[int, str]:
    name, dtype = item
    return (-_DTYPE_RANK[dtype], name)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def plan_layout(specs: Iterable[Tuple[str, str, Sequence[int]]],
                metadata: Optional[Mapping[str, str]] = DEFAULT_METADATA,
                header_order: str = "writer"):
    """Compute the header bytes and data offsets for tensors (name, dtype, shape).

    Returns (header_bytes_including_8_byte_length, {name: (begin, end)}, data_size,
    ordered_names). Offsets are relative to the data buffer.
    """
    specs = [(str(n), str(d), [int(s) for s in shp]) for n, d, shp in specs]
    by_name = {}
    for n, d, shp in specs:
        if n in by_name:
            raise ValueError(f"duplicate tensor name {n!r}")
        if n == "__metadata__":
            raise ValueError("'__metadata__' is reserved")
        if d not in DTYPE_SIZE:
            raise ValueError(f"unsupported dtype {d!r} for {n!r}")
        by_name[n] = (d, shp)
    order = sorted(((n, by_name[n][0]) for n in by_name), key=_sort_key)
    offsets = {}
    header: Dict[str, object] = {}
    if metadata is not None:
        md = {str(k): str(v) for k, v in metadata.items()}
        header["__metadata__"] = md
    pos = 0
    for n, d in order:
        shp = by_name[n][1]
        nbytes = _numel(shp) * DTYPE_SIZE[d]
        offsets[n] = (pos, pos + nbytes)
        header[n] = {"dtype": d, "shape": shp, "data_offsets": [pos, pos + nbytes]}
        pos += nbytes
    if header_order == "writer":
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    elif header_order == "sorted":
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    else:
        raise ValueError("header_order must be 'writer' or 'sorted'")
    buf = text.encode("utf-8")
    buf += b" " * ((8 - len(buf) % 8) % 8)
    return struct.pack("<Q", len(buf)) + buf, offsets, pos, [n for n, _ in order]


def _as_storage(arr, dtype: Optional[str]) -> Tuple[np.ndarray, str]:
    """Convert an array to (little-endian contiguous numpy array, safetensors dtype)."""
    a = np.asarray(arr)
    if dtype is None:
        matches = [st for npd, st in _ST_OF_NUMPY.items()
                   if npd.kind == a.dtype.kind and npd.itemsize == a.dtype.itemsize]
        if not matches:
            raise ValueError(f"no safetensors dtype for numpy {a.dtype}; pass dtype=")
        dtype = matches[0]
    if dtype == "BF16":
        if a.dtype == np.uint16:
            out = a
        elif a.dtype.kind == "f":
            out = f32_to_bf16_bits(a.astype(np.float32))
        else:
            raise ValueError("BF16 data must be uint16 bit patterns or floats")
    else:
        target = NUMPY_OF[dtype]
        if a.dtype.kind != target.kind or a.dtype.itemsize != target.itemsize:
            if a.dtype.kind in "iu" and target.kind in "iu" and a.dtype.itemsize == target.itemsize:
                out = a.view(target)  # e.g. uint32 packed words stored as I32
            else:
                out = a.astype(target)
        else:
            out = a
    out = np.asarray(out, order="C").astype(NUMPY_OF[dtype].newbyteorder("<"), copy=False)
    return out, dtype


# ----------------------------------------------------------------------------- writer


class StreamingWriter:
    """Write one safetensors file whose header is known up front.

    specs: iterable of (name, dtype, shape). After construction, call
    `write(name, array)` for every tensor (any order), or
    `write_rows(name, rows, row_start)` to fill a tensor in chunks along axis 0.
    `close()` checks that every byte of every tensor was written.
    """

    def __init__(self, path: str, specs, metadata=DEFAULT_METADATA, header_order="writer"):
        self.specs = {n: (d, [int(s) for s in shp]) for n, d, shp in specs}
        self.header, self.offsets, self.data_size, self.order = plan_layout(
            [(n, d, s) for n, (d, s) in self.specs.items()], metadata, header_order)
        self.path = path
        self._f = open(path, "wb")
        self._f.write(self.header)
        self._f.truncate(len(self.header) + self.data_size)
        self._written = {n: 0 for n in self.specs}

    def _row_bytes(self, name):
        d, shp = self.specs[name]
        return _numel(shp[1:]) * DTYPE_SIZE[d] if shp else DTYPE_SIZE[d]

    def write_rows(self, name: str, rows, row_start: int = 0):
        d, shp = self.specs[name]
        a, _ = _as_storage(rows, d)
        if shp:
            if list(a.shape[1:]) != shp[1:] or row_start < 0 or row_start + a.shape[0] > shp[0]:
                raise ValueError(f"{name}: rows of shape {a.shape} at {row_start} do not fit {shp}")
        elif a.size != 1 or row_start != 0:
            raise ValueError(f"{name}: scalar tensor takes exactly one value")
        begin = self.offsets[name][0] + row_start * self._row_bytes(name)
        self._f.seek(len(self.header) + begin)
        self._f.write(np.ascontiguousarray(a).tobytes() if a.size else b"")
        self._written[name] += a.nbytes

    def write(self, name: str, array):
        d, shp = self.specs[name]
        a = np.asarray(array)
        if list(a.shape) != shp:
            raise ValueError(f"{name}: shape {list(a.shape)} != declared {shp}")
        self.write_rows(name, a.reshape([1]) if not shp else a, 0)

    def close(self):
        self._f.close()
        for n, (b, e) in self.offsets.items():
            if self._written[n] != e - b:
                raise RuntimeError(f"{self.path}: tensor {n} got {self._written[n]} of {e - b} bytes")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._f.close()


def save_file(tensors: Mapping[str, object], path: str,
              metadata: Optional[Mapping[str, str]] = DEFAULT_METADATA,
              dtypes: Optional[Mapping[str, str]] = None, header_order: str = "writer"):
    """Write {name: numpy array} to `path`. dtypes may override per tensor
    (e.g. {"w": "BF16"} for a float32 array to be rounded to bf16, or for
    uint16 bit patterns)."""
    dtypes = dtypes or {}
    prepared = {n: _as_storage(a, dtypes.get(n)) for n, a in tensors.items()}
    specs = [(n, d, list(a.shape)) for n, (a, d) in prepared.items()]
    with StreamingWriter(path, specs, metadata, header_order) as w:
        for n, (a, _) in prepared.items():
            w.write(n, a)


# ----------------------------------------------------------------------------- sharding


def split_into_shards(specs: Sequence[Tuple[str, str, Sequence[int]]], max_shard_size: int):
    """huggingface_hub's greedy split. specs are in state-dict order.

    Returns (list of shard file names, {tensor: file}, total_size, {file: [specs]}).
    """
    shards: List[List[tuple]] = []
    cur: List[tuple] = []
    cur_size = 0
    total = 0
    for spec in specs:
        n, d, shp = spec
        size = _numel(shp) * DTYPE_SIZE[d]
        if size > max_shard_size:
            total += size
            shards.append([spec])
            continue
        if cur_size + size > max_shard_size:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(spec)
        cur_size += size
        total += size
    if cur:
        shards.append(cur)
    if len(shards) <= 1:
        files = [SINGLE_NAME]
        shards = [list(specs)]
    else:
        m = len(shards)
        files = [f"model-{i + 1:05d}-of-{m:05d}.safetensors" for i in range(m)]
    weight_map = {s[0]: f for f, shard in zip(files, shards) for s in shard}
    return files, weight_map, total, dict(zip(files, shards))


class ShardedWriter:
    """Streaming writer for a (possibly sharded) checkpoint directory.

    specs are (name, dtype, shape) in state-dict order. All shard files are
    created (headers written) up front; `write`/`write_rows` route to the
    right shard. `close()` writes model.safetensors.index.json when sharded.
    """

    def __init__(self, out_dir: str, specs, max_shard_size: int = 5_000_000_000,
                 metadata=DEFAULT_METADATA, header_order="writer"):
        os.makedirs(out_dir, exist_ok=True)
        self.out_dir = out_dir
        self.files, self.weight_map, self.total_size, by_file = split_into_shards(
            list(specs), max_shard_size)
        self.writers = {f: StreamingWriter(os.path.join(out_dir, f), by_file[f], metadata,
                                           header_order) for f in self.files}

    def write(self, name, array):
        self.writers[self.weight_map[name]].write(name, array)

    def write_rows(self, name, rows, row_start=0):
        self.writers[self.weight_map[name]].write_rows(name, rows, row_start)

    def close(self):
        for w in self.writers.values():
            w.close()
        if len(self.files) > 1:
            index = {"metadata": {"total_size": self.total_size}, "weight_map": self.weight_map}
            with open(os.path.join(self.out_dir, INDEX_NAME), "w") as f:
                json.dump(index, f, indent=2)
                f.write("\n")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            for w in self.writers.values():
                w._f.close()


def save_sharded(tensors: Mapping[str, object], out_dir: str, max_shard_size: int = 5_000_000_000,
                 dtypes: Optional[Mapping[str, str]] = None, metadata=DEFAULT_METADATA):
    dtypes = dtypes or {}
    prepared = {n: _as_storage(a, dtypes.get(n)) for n, a in tensors.items()}
    specs = [(n, d, list(a.shape)) for n, (a, d) in prepared.items()]
    with ShardedWriter(out_dir, specs, max_shard_size, metadata) as w:
        for n, (a, _) in prepared.items():
            w.write(n, a)
    return w.files


# ----------------------------------------------------------------------------- reader


class SafetensorsError(ValueError):
    pass


class SafeTensorsFile:
    """Validating, mmap-backed reader for one .safetensors file.

    Checks the same things as the reference reader (formats.md section 2):
    N <= 1e8, header starts with '{', tensors sorted by begin tile the buffer
    exactly, sizes match shape x dtype, 8 + N + last_end == file size.
    """

    def __init__(self, path: str):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise SafetensorsError(f"{path}: file shorter than 8 bytes")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_SIZE:
                raise SafetensorsError(f"{path}: header length {n} > {MAX_HEADER_SIZE}")
            if 8 + n > size:
                raise SafetensorsError(f"{path}: header length {n} exceeds file size {size}")
            raw = f.read(n)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SafetensorsError(f"{path}: header is not UTF-8") from e
        if not text.startswith("{"):
            raise SafetensorsError(f"{path}: header does not start with '{{'")
        try:
            hdr = json.loads(text, object_pairs_hook=_no_dup_pairs)
        except ValueError as e:
            raise SafetensorsError(f"{path}: bad header JSON: {e}") from e
        self.header_len = n
        self.metadata = hdr.pop("__metadata__", None)
        if self.metadata is not None and not (
                isinstance(self.metadata, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in self.metadata.items())):
            raise SafetensorsError(f"{path}: __metadata__ must map strings to strings")
        self.infos: Dict[str, dict] = {}
        for name, info in hdr.items():
            try:
                dtype = info["dtype"]
                shape = [int(s) for s in info["shape"]]
                b, e = (int(v) for v in info["data_offsets"])
            except (KeyError, TypeError, ValueError) as ex:
                raise SafetensorsError(f"{path}: malformed entry for {name!r}") from ex
            if dtype not in DTYPE_SIZE:
                raise SafetensorsError(f"{path}: unsupported dtype {dtype!r} for {name!r}")
            if any(s < 0 for s in shape):
                raise SafetensorsError(f"{path}: negative dim in {name!r}")
            self.infos[name] = {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}
        pos = 0
        for name, info in sorted(self.infos.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
            b, e = info["data_offsets"]
            if b != pos or e < b:
                raise SafetensorsError(f"{path}: offsets of {name!r} do not tile the buffer")
            if e - b != _numel(info["shape"]) * DTYPE_SIZE[info["dtype"]]:
                raise SafetensorsError(f"{path}: byte length of {name!r} does not match its shape")
            pos = e
        if 8 + n + pos != size:
            raise SafetensorsError(f"{path}: 8 + N + data ({8 + n + pos}) != file size ({size})")
        self.data_start = 8 + n
        self._mm = None
        if size > 0:
            with open(path, "rb") as f:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def keys(self) -> List[str]:
        """Names in data order."""
        return [n for n, _ in sorted(self.infos.items(), key=lambda kv: kv[1]["data_offsets"][0])]

    def __contains__(self, name):
        return name in self.infos

    def dtype(self, name) -> str:
        return self.infos[name]["dtype"]

    def shape(self, name) -> List[int]:
        return list(self.infos[name]["shape"])

    def is_aligned(self, name) -> bool:
        info = self.infos[name]
        return (self.data_start + info["data_offsets"][0]) % DTYPE_SIZE[info["dtype"]] == 0

    def get(self, name: str, bf16: str = "float32", copy: bool = True) -> np.ndarray:
        """Tensor as numpy. BF16: bf16='float32' (exact upcast) or 'bits' (uint16).
        copy=False returns a read-only view into the mmap when possible."""
        info = self.infos[name]
        b, e = info["data_offsets"]
        dt = NUMPY_OF[info["dtype"]]
        count = _numel(info["shape"])
        if count == 0:
            a = np.zeros(info["shape"], dtype=dt)
        else:
            a = np.frombuffer(self._mm, dtype=dt, count=count, offset=self.data_start + b)
            a = a.reshape(info["shape"])
            if copy:
                a = a.copy()
        if info["dtype"] == "BF16" and bf16 == "float32":
            a = bf16_bits_to_f32(a).reshape(info["shape"])
        return a

    def close(self):
        if self._mm is not None:
            self._mm.close()
            self._mm = None


def _no_dup_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def load_file(path: str, bf16: str = "float32") -> Dict[str, np.ndarray]:
    f = SafeTensorsFile(path)
    try:
        return {n: f.get(n, bf16=bf16) for n in f.keys()}
    finally:
        f.close()


class CheckpointReader:
    """All tensors of a checkpoint directory: model.safetensors, or shards
    listed in model.safetensors.index.json (the index is checked against the
    shard headers)."""

    def __init__(self, model_dir: str):
        self.dir = model_dir
        idx = os.path.join(model_dir, INDEX_NAME)
        self.files: Dict[str, SafeTensorsFile] = {}
        self.where: Dict[str, str] = {}
        if os.path.exists(idx):
            with open(idx) as f:
                index = json.load(f)
            self.index = index
            wm = index["weight_map"]
            for fname in sorted(set(wm.values())):
                self.files[fname] = SafeTensorsFile(os.path.join(model_dir, fname))
            for name, fname in wm.items():
                if name not in self.files[fname]:
                    raise SafetensorsError(f"index maps {name!r} to {fname}, which lacks it")
                self.where[name] = fname
            for fname, st in self.files.items():
                for name in st.keys():
                    if self.where.get(name) != fname:
                        raise SafetensorsError(f"{fname} holds {name!r} not listed in the index")
        else:
            self.index = None
            single = os.path.join(model_dir, SINGLE_NAME)
            if not os.path.exists(single):
                raise FileNotFoundError(f"no {SINGLE_NAME} or {INDEX_NAME} in {model_dir}")
            st = SafeTensorsFile(single)
            self.files[SINGLE_NAME] = st
            for name in st.keys():
                self.where[name] = SINGLE_NAME

    def keys(self) -> List[str]:
        return list(self.where)

    def __contains__(self, name):
        return name in self.where

    def dtype(self, name):
        return self.files[self.where[name]].dtype(name)

    def shape(self, name):
        return self.files[self.where[name]].shape(name)

    def get(self, name, bf16="float32", copy=True):
        return self.files[self.where[name]].get(name, bf16=bf16, copy=copy)

    def close(self):
        for f in self.files.values():
            f.close()
