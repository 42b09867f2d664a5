# SPDX-License-Identifier: Apache-2.0
"""Tests for tools/{safetensors_io,awq_pack,make_checkpoint,reference_forward}.py.

Run: /usr/bin/python3 -m unittest discover -s tests/python -v   (from the repo root)
Needs numpy and torch (Debian python3-numpy / python3-torch); fast (< 30 s, 1 thread).
"""

import json
import math
import os
import shutil
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.normpath(os.path.join(HERE, "..", "..", "tools"))
sys.path.insert(0, TOOLS)

import awq_pack as ap  # noqa: E402
import make_checkpoint as mc  # noqa: E402
import reference_forward as rf  # noqa: E402
import safetensors_io as st  # noqa: E402

torch.set_num_threads(1)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_json(path):
    with open(path) as f:
        return json.load(f)


def make_ckpt(out, *args):
    a = mc.parse_args(["--out", out] + [str(x) for x in args])
    mc.generate(a, log=lambda *_: None)
    return out


class TmpDirCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="edgellm_tools_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.tmp, *p)


# ============================================================================ safetensors


class SafetensorsTest(TmpDirCase):
    def test_rust_crate_vectors(self):
        # Byte vectors from huggingface/safetensors tensor.rs unit tests.
        p = self.path("a.safetensors")
        st.save_file({"attn.0": np.arange(6, dtype=np.float32).reshape(1, 2, 3)}, p, metadata=None)
        b = read_bytes(p)
        self.assertEqual(b[:8], struct.pack("<Q", 64))
        self.assertEqual(b[8:72], b'{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}')
        self.assertEqual(b[72:], np.arange(6, dtype="<f4").tobytes())
        st.save_file({"attn0": np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)}, p, metadata=None)
        b = read_bytes(p)
        self.assertEqual(struct.unpack("<Q", b[:8])[0], 72)
        self.assertTrue(b[8:80].endswith(b"}}" + b" " * 7))
        st.save_file({}, p, metadata=None)
        self.assertEqual(read_bytes(p), b"\x08" + b"\0" * 7 + b"{}" + b" " * 6)
        st.save_file({}, p, metadata={"framework": "pt"})
        self.assertEqual(read_bytes(p),
                         b"(" + b"\0" * 7 + b'{"__metadata__":{"framework":"pt"}}' + b" " * 5)

    def test_round_trip_and_layout(self):
        rng = np.random.default_rng(1)
        f32 = rng.standard_normal((3, 5)).astype(np.float32)
        tensors = {
            "z.f32": f32,
            "a.f16": rng.standard_normal((7,)).astype(np.float16),
            "m.bf16": f32,                                     # rounded to bf16 on write
            "b.i32": rng.integers(-2**31, 2**31 - 1, size=(4, 2), dtype=np.int64).astype(np.int32),
            "c.scalar": np.array(3.5, dtype=np.float32),
            "d.empty": np.zeros((0, 4), dtype=np.float16),
            "e.u8": np.arange(3, dtype=np.uint8),
            "f.i64": np.arange(3, dtype=np.int64),
        }
        for order in ("writer", "sorted"):
            p = self.path(f"rt_{order}.safetensors")
            st.save_file(tensors, p, dtypes={"m.bf16": "BF16"}, header_order=order)
            raw = read_bytes(p)
            n = struct.unpack("<Q", raw[:8])[0]
            self.assertEqual(n % 8, 0)
            hdr = json.loads(raw[8:8 + n])
            self.assertEqual(hdr["__metadata__"], {"format": "pt"})
            f = st.SafeTensorsFile(p)
            # data order: dtype rank descending (I64 > F32 > I32 > BF16 > F16 > U8), then name
            self.assertEqual(f.keys(), ["f.i64", "c.scalar", "z.f32", "b.i32", "m.bf16",
                                        "a.f16", "d.empty", "e.u8"])
            for name in f.keys():
                self.assertTrue(f.is_aligned(name), name)
            self.assertEqual(f.dtype("m.bf16"), "BF16")
            self.assertEqual(f.shape("c.scalar"), [])
            for name, a in tensors.items():
                got = f.get(name)
                if name == "m.bf16":
                    ref = torch.from_numpy(a).bfloat16().float().numpy()
                    np.testing.assert_array_equal(got, ref)
                    np.testing.assert_array_equal(f.get(name, bf16="bits"),
                                                  st.f32_to_bf16_bits(a))
                else:
                    self.assertEqual(got.dtype, a.dtype, name)
                    self.assertEqual(got.shape, a.shape, name)
                    np.testing.assert_array_equal(got, a)
            f.close()
        # both header orders describe identical data buffers
        a = read_bytes(self.path("rt_writer.safetensors"))
        b = read_bytes(self.path("rt_sorted.safetensors"))
        na, nb = (struct.unpack("<Q", x[:8])[0] for x in (a, b))
        self.assertEqual(a[8 + na:], b[8 + nb:])

    def test_bf16_rounding_matches_torch(self):
        rng = np.random.default_rng(2)
        x = np.concatenate([
            rng.standard_normal(10000).astype(np.float32) * 100,
            np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-40, 65504.0,
                      1.00390625, 1.01171875, 1.0 + 2**-8, 1.0 + 3 * 2**-8], dtype=np.float32),
            # exact ties between two bf16 values (low 16 bits == 0x8000)
            (rng.integers(0, 2**31, 1000, dtype=np.uint32) & np.uint32(0xFFFF0000)
             | np.uint32(0x8000)).view(np.float32)])
        x = x[np.isfinite(x) | np.isinf(x)]
        ours = st.f32_to_bf16_bits(x)
        ref = torch.from_numpy(x).bfloat16().view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(ours, ref)
        nan = st.f32_to_bf16_bits(np.array([np.nan], dtype=np.float32))
        self.assertTrue(np.isnan(st.bf16_bits_to_f32(nan))[0])

    def test_reader_rejects_corruption(self):
        p = self.path("ok.safetensors")
        st.save_file({"a": np.ones(4, np.float32), "b": np.ones(2, np.float16)}, p)
        good = read_bytes(p)
        n = struct.unpack("<Q", good[:8])[0]
        hdr = json.loads(good[8:8 + n])

        def write_with(h, data=None, pad=True):
            text = json.dumps(h).encode()
            if pad:
                text += b" " * ((8 - len(text) % 8) % 8)
            q = self.path("bad.safetensors")
            with open(q, "wb") as f:
                f.write(struct.pack("<Q", len(text)) + text + (good[8 + n:] if data is None else data))
            return q

        st.SafeTensorsFile(write_with(hdr, pad=False)).close()   # unpadded is fine
        bad = json.loads(json.dumps(hdr))
        bad["a"]["data_offsets"] = [0, 12]                         # hole / wrong size
        with self.assertRaises(st.SafetensorsError):
            st.SafeTensorsFile(write_with(bad))
        bad = json.loads(json.dumps(hdr))
        bad["b"]["shape"] = [3]                                    # size mismatch
        with self.assertRaises(st.SafetensorsError):
            st.SafeTensorsFile(write_with(bad))
        with self.assertRaises(st.SafetensorsError):               # trailing bytes
            st.SafeTensorsFile(write_with(hdr, good[8 + n:] + b"\0"))
        with self.assertRaises(st.SafetensorsError):               # truncated
            st.SafeTensorsFile(write_with(hdr, good[8 + n:-1]))
        q = self.path("huge.safetensors")
        with open(q, "wb") as f:
            f.write(struct.pack("<Q", 100_000_001) + b"{}")
        with self.assertRaises(st.SafetensorsError):
            st.SafeTensorsFile(q)
        q = self.path("dup.safetensors")
        text = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' \
               b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
        with open(q, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"\0" * 4)
        with self.assertRaises(st.SafetensorsError):
            st.SafeTensorsFile(q)

    def test_streaming_writer_rows(self):
        p = self.path("s.safetensors")
        x = np.arange(40, dtype=np.float32).reshape(10, 4)
        with st.StreamingWriter(p, [("x", "F16", [10, 4]), ("y", "I32", [3])]) as w:
            w.write("y", np.array([1, 2, 3], np.int32))
            w.write_rows("x", x[6:], 6)
            w.write_rows("x", x[:6], 0)
        np.testing.assert_array_equal(st.load_file(p)["x"], x.astype(np.float16))
        with self.assertRaises(RuntimeError):
            with st.StreamingWriter(p, [("x", "F32", [2])]) as w:
                pass  # never written

    def test_sharding_like_hub(self):
        # hub semantics: [6, 6, 2, 6, 2, 2] with limit 10 -> [6], [6+2], [6+2+2]
        specs = [(f"t{i}", "U8", [s]) for i, s in enumerate([6, 6, 2, 6, 2, 2])]
        files, wm, total, by = st.split_into_shards(specs, 10)
        self.assertEqual(files, [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)])
        self.assertEqual([[s[0] for s in by[f]] for f in files], [["t0"], ["t1", "t2"], ["t3", "t4", "t5"]])
        self.assertEqual(total, 24)
        files, wm, total, by = st.split_into_shards([("a", "U8", [5]), ("big", "U8", [50]),
                                                     ("c", "U8", [5])], 10)
        self.assertEqual([[s[0] for s in by[f]] for f in files], [["big"], ["a", "c"]])
        files, _, _, _ = st.split_into_shards(specs, 1000)
        self.assertEqual(files, ["model.safetensors"])


# ============================================================================ AWQ


def unpack_gemm_by_formula(qweight, qzeros, scales):
    """formats.md 1.3, literally: q[n][k] = (uint32(qweight[k][n/8]) >> (4*REV[n%8])) & 0xF."""
    rev = [0, 4, 1, 5, 2, 6, 3, 7]
    k, n8 = qweight.shape
    u = qweight.astype(np.int64) & 0xFFFFFFFF
    uz = qzeros.astype(np.int64) & 0xFFFFFFFF
    n = n8 * 8
    q = np.zeros((n, k), np.int64)
    z = np.zeros((n, qzeros.shape[0]), np.int64)
    for col in range(n):
        q[col] = (u[:, col // 8] >> (4 * rev[col % 8])) & 0xF
        z[col] = (uz[:, col // 8] >> (4 * rev[col % 8])) & 0xF
    return q, z, scales.T


def unpack_gemv_by_formula(qweight, qzeros, scales, g):
    n, k8 = qweight.shape
    k = k8 * 8
    u = qweight.astype(np.int64) & 0xFFFFFFFF
    uz = qzeros.astype(np.int64) & 0xFFFFFFFF
    q = np.zeros((n, k), np.int64)
    for kk in range(k):
        q[:, kk] = (u[:, kk // 8] >> (4 * (kk % 8))) & 0xF
    ng = k // g
    z = np.zeros((n, ng), np.int64)
    for gg in range(ng):
        z[:, gg] = (uz[:, gg // 8] >> (4 * (gg % 8))) & 0xF
    return q, z, scales[:, :ng]


def torch_half_pseudo_quantize(w16, g):
    """AutoAWQ pseudo_quantize_tensor with torch Half arithmetic for the ops torch CPU
    supports (sub, div, mul); round/clamp/max/min are exact so they run in fp32."""
    w = torch.from_numpy(w16).reshape(-1, g)
    mx = w.float().amax(dim=1, keepdim=True).half()
    mn = w.float().amin(dim=1, keepdim=True).half()
    diff = (mx - mn).float().clamp(min=float(torch.tensor(1e-5).half())).half()
    s = diff / 15                                     # CPU: half / scalar, rounded once
    z = (-torch.round((mn / s).float())).clamp(0, 15).half()
    q = (torch.round((w / s).float()) + z.float()).clamp(0, 15).half()
    w_fake = (q - z) * s
    return q.numpy(), z.numpy(), s.numpy(), w_fake.numpy()


class AwqTest(unittest.TestCase):
    def test_vector_0x86427531(self):
        q = np.tile(np.arange(1, 9, dtype=np.uint8)[:, None], (1, 8))   # column n holds n+1
        z = np.zeros((8, 1), np.uint8)
        s = np.ones((8, 1), np.float16)
        qw, qz, sc = ap.pack_gemm(q, z, s)
        self.assertEqual(qw.dtype, np.dtype("<i4"))
        self.assertEqual(qw.shape, (8, 1))
        self.assertTrue(all(int(x) & 0xFFFFFFFF == 0x86427531 for x in qw[:, 0]))
        self.assertEqual(int(qw[0, 0]), 0x86427531 - 2**32)              # negative as int32
        # gemv is sequential along K: codes 1..8 at k = 0..7 of one row
        qk = np.zeros((8, 32), np.uint8)
        qk[:, :8] = np.arange(1, 9, dtype=np.uint8)
        qv, _, _ = ap.pack_gemv(qk, np.zeros((8, 1), np.uint8), np.ones((8, 1), np.float16), 32)
        self.assertEqual(int(qv[0, 0]) & 0xFFFFFFFF, 0x87654321)

    def test_zeros_width(self):
        self.assertEqual([ap.zeros_width(4096, g) for g in (128, 64, 32)], [4, 8, 16])
        self.assertEqual(ap.zeros_width(3584, 128), 4)
        self.assertEqual(ap.packed_shapes("gemm", 3584, 3584, 128), [[3584, 448], [28, 448], [28, 3584]])
        self.assertEqual(ap.packed_shapes("gemm", 512, 3584, 128), [[3584, 64], [28, 64], [28, 512]])
        self.assertEqual(ap.packed_shapes("gemm", 3584, 18944, 128), [[18944, 448], [148, 448], [148, 3584]])
        self.assertEqual(ap.packed_shapes("gemv", 512, 4096, 32), [[512, 512], [512, 16], [512, 128]])

    def test_pack_unpack_identity(self):
        rng = np.random.default_rng(3)
        for g in (32, 64, 128):
            for n, k in ((64, 256), (24, 3 * g), (8, g)):
                q = rng.integers(0, 16, (n, k), dtype=np.uint8)
                z = rng.integers(0, 16, (n, k // g), dtype=np.uint8)
                s = (rng.random((n, k // g)) * 0.01 + 1e-4).astype(np.float16)
                qw, qz, sc = ap.pack_gemm(q, z, s)
                self.assertEqual([list(x.shape) for x in (qw, qz, sc)], ap.packed_shapes("gemm", n, k, g))
                for unpack in (ap.unpack_gemm, unpack_gemm_by_formula):
                    q2, z2, s2 = unpack(qw, qz, sc)
                    np.testing.assert_array_equal(q2, q)
                    np.testing.assert_array_equal(z2, z)
                    np.testing.assert_array_equal(s2, s)
                qw, qz, sc = ap.pack_gemv(q, z, s, g)
                self.assertEqual([list(x.shape) for x in (qw, qz, sc)], ap.packed_shapes("gemv", n, k, g))
                zw = ap.zeros_width(k, g)
                self.assertTrue(np.all(sc[:, k // g:] == 0))
                self.assertTrue(np.all(ap._unpack_nibbles(qz).reshape(n, zw * 8)[:, k // g:] == 0))
                for unpack in (lambda a, b, c: ap.unpack_gemv(a, b, c, g),
                               lambda a, b, c: unpack_gemv_by_formula(a, b, c, g)):
                    q2, z2, s2 = unpack(qw, qz, sc)
                    np.testing.assert_array_equal(q2, q)
                    np.testing.assert_array_equal(z2, z)
                    np.testing.assert_array_equal(s2, s)
                d1 = ap.dequantize_packed("gemm", *ap.pack_gemm(q, z, s), g)
                d2 = ap.dequantize_packed("gemv", *ap.pack_gemv(q, z, s, g), g)
                np.testing.assert_array_equal(d1.view(np.uint16), d2.view(np.uint16))

    def test_quantiser_properties(self):
        rng = np.random.default_rng(4)
        for g in (32, 64, 128):
            w = (rng.standard_normal((32, 4 * g)) * 0.03).astype(np.float16)
            w[0, :g] = 0.25                        # constant group: s = 1e-5 / 15 path
            w[1, g:2 * g] = np.abs(w[1, g:2 * g])  # all-positive group: z clamps to 0
            w[2, :g] = -np.abs(w[2, :g])           # all-negative group: z = 15
            q, z, s, wf = ap.quantize_rtn(w, g)    # also asserts the packer's codes == q
            self.assertTrue(q.max() <= 15 and z.max() <= 15)
            self.assertEqual(z[2, 0], 15)
            self.assertEqual(z[1, 1], 0)
            deq = ap.dequantize(q, z, s, g).astype(np.float64)
            np.testing.assert_array_equal(deq, wf.astype(np.float64))
            sf = np.repeat(s.astype(np.float64), g, axis=1)
            err = np.abs(w.astype(np.float64) - deq)
            # |w - deq| <= s/2 plus fp16 rounding of w/s, of (q-z)*s and of s itself
            bound = sf / 2 + 2 * np.abs(w.astype(np.float64)) * 2**-11 + sf * 2**-9 + 1e-7
            ok = (err <= bound) | (np.repeat(z == 0, g, axis=1) | np.repeat(z == 15, g, axis=1))
            self.assertTrue(ok.all())
            mid = (np.repeat(z, g, axis=1) > 0) & (np.repeat(z, g, axis=1) < 15)
            self.assertTrue((err[mid] <= bound[mid]).all())
            # identical to the same formula evaluated with torch Half arithmetic
            tq, tz, ts, twf = torch_half_pseudo_quantize(w, g)
            np.testing.assert_array_equal(tq.reshape(q.shape), q)
            np.testing.assert_array_equal(tz.reshape(z.shape), z)
            np.testing.assert_array_equal(ts.reshape(s.shape).view(np.uint16), s.view(np.uint16))
            np.testing.assert_array_equal(twf.reshape(wf.shape).view(np.uint16), wf.view(np.uint16))

    def test_synthetic_codes(self):
        rng = np.random.default_rng(5)
        q, z, s = ap.synthetic_codes(rng, 256, 1024, 128, 0.02)
        self.assertTrue(q.max() <= 15 and set(np.unique(z)) <= {7, 8})
        self.assertTrue(np.all(s > 0) and s.dtype == np.float16)
        self.assertAlmostEqual(float(ap.dequantize(q, z, s, 128).astype(np.float32).std()), 0.02,
                               delta=0.003)


# ============================================================================ checkpoints


TINY_LLAMA = ["--arch", "llama", "--hidden", 64, "--layers", 2, "--heads", 4, "--kv-heads", 2,
              "--intermediate", 128, "--vocab", 97, "--seed", 7]
TINY_QWEN2 = ["--arch", "qwen2", "--hidden", 64, "--layers", 2, "--heads", 4, "--kv-heads", 1,
              "--intermediate", 96, "--vocab", 101, "--tie-embeddings", "--seed", 8]
# head_dim 32: heads * head_dim = 128 != hidden, as in Qwen3-0.6B (16 * 128 != 1024)
TINY_QWEN3 = ["--model-type", "qwen3", "--hidden", 64, "--layers", 2, "--heads", 4,
              "--kv-heads", 2, "--head-dim", 32, "--intermediate", 96, "--vocab", 103,
              "--tie-embeddings", "--seed", 9]
TINY_SMOLLM3 = ["--model-type", "smollm3", "--hidden", 64, "--layers", 2, "--heads", 4,
                "--kv-heads", 1, "--intermediate", 96, "--vocab", 107, "--tie-embeddings",
                "--seed", 11]


class CheckpointTest(TmpDirCase):
    def test_sharded_index_consistent(self):
        d = make_ckpt(self.path("sh"), *TINY_LLAMA, "--dtype", "fp32", "--shard-size-mb", 0.04)
        files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        m = len(files)
        self.assertGreater(m, 2)
        self.assertEqual(files, [f"model-{i:05d}-of-{m:05d}.safetensors" for i in range(1, m + 1)])
        index = read_json(os.path.join(d, st.INDEX_NAME))
        self.assertEqual(set(index), {"metadata", "weight_map"})
        seen, total = {}, 0
        for fname in files:
            f = st.SafeTensorsFile(os.path.join(d, fname))
            size = 0
            for name in f.keys():
                self.assertNotIn(name, seen)
                seen[name] = fname
                b, e = f.infos[name]["data_offsets"]
                size += e - b
            self.assertTrue(size <= 40_000 or len(f.keys()) == 1)
            total += size
            f.close()
        self.assertEqual(seen, index["weight_map"])
        self.assertEqual(index["metadata"]["total_size"], total)
        # shards are filled in state-dict order
        specs, _ = mc.plan(read_json(os.path.join(d, "config.json")),
                           mc.parse_args(["--out", "x"] + [str(x) for x in TINY_LLAMA] + ["--dtype", "fp32"]))
        order = [files.index(index["weight_map"][s[0]]) for s in specs]
        self.assertEqual(order, sorted(order))
        # same tensors as the single-file checkpoint of the same seed
        d1 = make_ckpt(self.path("one"), *TINY_LLAMA, "--dtype", "fp32")
        self.assertFalse(os.path.exists(os.path.join(d1, st.INDEX_NAME)))
        r1, r2 = st.CheckpointReader(d1), st.CheckpointReader(d)
        self.assertEqual(sorted(r1.keys()), sorted(r2.keys()))
        for k in r1.keys():
            np.testing.assert_array_equal(r1.get(k), r2.get(k))
        r1.close()
        r2.close()

    def test_awq_checkpoint_contents(self):
        d = make_ckpt(self.path("q"), *TINY_QWEN2, "--awq", "gemm", "--group-size", 32)
        cfg = read_json(os.path.join(d, "config.json"))
        self.assertEqual(cfg["quantization_config"], {"quant_method": "awq", "bits": 4, "group_size": 32,
                                                      "zero_point": True, "version": "gemm",
                                                      "modules_to_not_convert": None})
        self.assertEqual(cfg["torch_dtype"], "float16")
        self.assertEqual(cfg["architectures"], ["Qwen2ForCausalLM"])
        r = st.CheckpointReader(d)
        keys = set(r.keys())
        self.assertNotIn("lm_head.weight", keys)          # tied
        p = "model.layers.1.self_attn."
        for mod in ("q_proj", "k_proj", "v_proj"):
            self.assertEqual(r.dtype(p + mod + ".bias"), "F16")
        self.assertNotIn(p + "o_proj.bias", keys)
        self.assertEqual(r.shape(p + "k_proj.qweight"), [64, 2])
        self.assertEqual(r.shape(p + "k_proj.qzeros"), [2, 2])
        self.assertEqual(r.shape(p + "k_proj.scales"), [2, 16])
        self.assertEqual(r.dtype(p + "k_proj.qweight"), "I32")
        self.assertEqual(r.dtype("model.layers.0.mlp.down_proj.scales"), "F16")
        self.assertEqual(r.dtype("model.norm.weight"), "F16")
        self.assertFalse(any(k.endswith("proj.weight") for k in keys))
        r.close()
        read_json(os.path.join(d, "generation_config.json"))

    def test_qwen3_checkpoint(self):
        d = make_ckpt(self.path("q3"), *TINY_QWEN3, "--awq", "gemm", "--group-size", 32)
        cfg = read_json(os.path.join(d, "config.json"))
        self.assertEqual(cfg["model_type"], "qwen3")
        self.assertEqual(cfg["architectures"], ["Qwen3ForCausalLM"])
        self.assertEqual(cfg["head_dim"], 32)
        self.assertIs(cfg["attention_bias"], False)
        self.assertIs(cfg["use_sliding_window"], False)
        self.assertIsNone(cfg["sliding_window"])
        self.assertEqual(cfg["max_position_embeddings"], 40960)
        self.assertEqual((cfg["rope_theta"], cfg["rms_norm_eps"]), (1e6, 1e-6))
        r = st.CheckpointReader(d)
        keys = set(r.keys())
        p = "model.layers.1.self_attn."
        for norm in ("q_norm", "k_norm"):    # stay fp16 in an AutoAWQ checkpoint
            self.assertEqual(r.shape(p + norm + ".weight"), [32])
            self.assertEqual(r.dtype(p + norm + ".weight"), "F16")
        self.assertFalse(any(k.endswith(".bias") for k in keys))     # no attention_bias
        self.assertEqual(r.shape(p + "q_proj.qweight"), [64, 128 // 8])
        self.assertEqual(r.shape(p + "o_proj.qweight"), [128, 64 // 8])
        r.close()
        # state-dict order: q_norm, k_norm right after o_proj
        specs, _ = mc.plan(cfg, mc.parse_args(["--out", "x"] + [str(x) for x in TINY_QWEN3]))
        names = [n for n, _, _ in specs if n.startswith("model.layers.0.")]
        i = names.index("model.layers.0.self_attn.o_proj.weight")
        self.assertEqual(names[i + 1:i + 3], ["model.layers.0.self_attn.q_norm.weight",
                                              "model.layers.0.self_attn.k_norm.weight"])
        # --attention-bias: q/k/v and o biases, as Qwen3Attention
        d = make_ckpt(self.path("q3b"), *TINY_QWEN3, "--attention-bias", "--dtype", "fp32")
        r = st.CheckpointReader(d)
        for mod in ("q_proj", "k_proj", "v_proj", "o_proj"):
            self.assertIn(p + mod + ".bias", set(r.keys()))
        r.close()

    def test_qwen3_presets(self):
        for name, layers, hidden, heads, inter, tied in (
                ("qwen3-0.6b", 28, 1024, 16, 3072, True), ("qwen3-8b", 36, 4096, 32, 12288, False)):
            a = mc.parse_args(["--out", "x", "--preset", name])
            cfg = mc.build_config(a)
            self.assertEqual(cfg["model_type"], "qwen3")
            self.assertEqual((cfg["num_hidden_layers"], cfg["hidden_size"],
                              cfg["intermediate_size"]), (layers, hidden, inter))
            self.assertEqual((cfg["num_attention_heads"], cfg["num_key_value_heads"],
                              cfg["head_dim"]), (heads, 8, 128))
            self.assertEqual((cfg["vocab_size"], cfg["tie_word_embeddings"]), (151936, tied))
            self.assertEqual((cfg["rope_theta"], cfg["rms_norm_eps"]), (1e6, 1e-6))
            self.assertEqual(cfg["max_position_embeddings"], 40960)
            self.assertEqual((cfg["bos_token_id"], cfg["eos_token_id"]), (151643, 151645))
            specs, _ = mc.plan(cfg, a)
            shapes = {n: shp for n, _, shp in specs}
            self.assertEqual(shapes["model.layers.0.self_attn.k_norm.weight"], [128])
            self.assertEqual(shapes["model.layers.0.self_attn.q_proj.scales"],
                             [hidden // 128, heads * 128])
            self.assertEqual("lm_head.weight" in shapes, not tied)

    def test_rtn_codes_are_autoawq_of_the_fp16_weight(self):
        # --awq-codes rtn stores exactly RTN(fp16 weight) of the unquantised checkpoint
        dq = make_ckpt(self.path("q"), *TINY_LLAMA, "--awq", "gemv", "--group-size", 32,
                       "--awq-codes", "rtn")
        df = make_ckpt(self.path("f"), *TINY_LLAMA, "--dtype", "fp16")
        rq, rfl = st.CheckpointReader(dq), st.CheckpointReader(df)
        pre = "model.layers.1.mlp.down_proj"
        w = rfl.get(pre + ".weight")
        q, z, s, wf = ap.quantize_rtn(w, 32)
        packed = ap.pack_gemv(q, z, s, 32)
        for suf, ref in zip((".qweight", ".qzeros", ".scales"), packed):
            np.testing.assert_array_equal(rq.get(pre + suf), ref)
        np.testing.assert_array_equal(rq.get("lm_head.weight"), rfl.get("lm_head.weight"))
        rq.close()
        rfl.close()


# ============================================================================ reference forward


def naive_attention(x, lw, nh, nkv, hd, theta, kv_of=None, qk_norm_eps=None, use_rope=True):
    """One attention block, float64 loops, written from formats.md 3.3 directly (with
    qk_norm_eps: Qwen3's per-head RMSNorm of q and k by self_attn.q_norm / k_norm; use_rope
    False: SmolLM3's NoPE layers, q and k not rotated)."""
    t = x.shape[0]
    W = {k: lw[k].double().numpy() for k in ("self_attn.q_proj", "self_attn.k_proj",
                                             "self_attn.v_proj", "self_attn.o_proj")}
    B = {k: (lw[k + ".bias"].double().numpy() if lw[k + ".bias"] is not None else 0.0) for k in W}
    q = x @ W["self_attn.q_proj"].T + B["self_attn.q_proj"]
    k = x @ W["self_attn.k_proj"].T + B["self_attn.k_proj"]
    v = x @ W["self_attn.v_proj"].T + B["self_attn.v_proj"]
    if qk_norm_eps is not None:
        for y, n, w in ((q, nh, lw["self_attn.q_norm"]), (k, nkv, lw["self_attn.k_norm"])):
            w = w.double().numpy()
            for i in range(t):
                for h in range(n):
                    seg = y[i, h * hd:(h + 1) * hd]
                    y[i, h * hd:(h + 1) * hd] = seg / math.sqrt((seg * seg).mean() + qk_norm_eps) * w

    def rope(vec, pos):
        out = vec.copy()
        if not use_rope:
            return out
        half = hd // 2
        for i in range(half):
            ang = pos * theta ** (-2.0 * i / hd)
            c, s = math.cos(ang), math.sin(ang)
            out[i] = vec[i] * c - vec[i + half] * s
            out[i + half] = vec[i + half] * c + vec[i] * s
        return out

    out = np.zeros((t, nh * hd))
    group = nh // nkv
    for h in range(nh):
        kvh = h // group if kv_of is None else kv_of(h)   # formats.md: kv head h / (nh/nkv)
        for i in range(t):
            qi = rope(q[i, h * hd:(h + 1) * hd], i)
            sc = []
            for j in range(i + 1):
                kj = rope(k[j, kvh * hd:(kvh + 1) * hd], j)
                sc.append(qi @ kj / math.sqrt(hd))
            sc = np.array(sc)
            p = np.exp(sc - sc.max())
            p /= p.sum()
            out[i, h * hd:(h + 1) * hd] = sum(p[j] * v[j, kvh * hd:(kvh + 1) * hd] for j in range(i + 1))
    return out @ W["self_attn.o_proj"].T + B["self_attn.o_proj"]


class ReferenceForwardTest(TmpDirCase):
    def _causal_and_finite(self, m, ids):
        full = rf.forward(m, ids)
        self.assertTrue(torch.isfinite(full).all())
        self.assertEqual(list(full.shape), [len(ids), m.cfg.vocab])
        for i in range(1, len(ids)):
            pre = rf.forward(m, ids[:i])
            torch.testing.assert_close(full[:i], pre, rtol=1e-5, atol=1e-6)

    def test_llama_and_qwen2(self):
        for name, args in (("llama", TINY_LLAMA), ("qwen2", TINY_QWEN2)):
            for awq in ("none", "gemm"):
                d = make_ckpt(self.path(name + awq), *args, "--awq", awq, "--group-size", 32)
                m = rf.Model(d)
                self._causal_and_finite(m, [3, 1, 4, 1, 5, 9, 2])
                if name == "qwen2":
                    self.assertIs(m.lm_head, m.embed)
                    self.assertIsNotNone(m.layer(0)["self_attn.q_proj.bias"])
                    self.assertIsNone(m.layer(0)["self_attn.o_proj.bias"])

    def test_attention_matches_naive_and_gqa_mapping(self):
        args = ["--arch", "qwen2", "--hidden", 48, "--layers", 1, "--heads", 6, "--kv-heads", 2,
                "--intermediate", 64, "--vocab", 50, "--dtype", "fp32", "--init-std", 0.2,
                "--rope-theta", 100.0]
        d = make_ckpt(self.path("a"), *args)
        m = rf.Model(d, "fp64")
        lw = m.layer(0)
        rng = np.random.default_rng(9)
        x = rng.standard_normal((6, 48))
        ours = rf.attention(m, lw, torch.from_numpy(x), torch.arange(6)).numpy()
        ref = naive_attention(x, lw, 6, 2, 8, 100.0)
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)   # RoPE tables are fp32
        # the test can tell the mappings apart: h % nkv (wrong) gives a different result
        wrong = naive_attention(x, lw, 6, 2, 8, 100.0, lambda h: h % 2)
        self.assertGreater(np.abs(wrong - ref).max(), 1e-3)
        # and the whole layer/logits are consistent with the naive block + HF layer algebra
        ids = [5, 7, 11]
        logits, hidden = rf.forward(m, ids, return_hidden=True)
        h0 = hidden[0].numpy()
        eps = m.cfg.eps

        def rms(v, w):
            return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w.numpy()

        h1 = h0 + naive_attention(rms(h0, lw["input_layernorm"]), lw, 6, 2, 8, 100.0)
        n = rms(h1, lw["post_attention_layernorm"])
        g = n @ lw["mlp.gate_proj"].numpy().T
        u = n @ lw["mlp.up_proj"].numpy().T
        h2 = h1 + (g / (1 + np.exp(-g)) * u) @ lw["mlp.down_proj"].numpy().T
        np.testing.assert_allclose(hidden[1].numpy(), h2, rtol=1e-5, atol=1e-6)
        ref_logits = rms(h2, m.norm) @ m.lm_head.numpy().T
        np.testing.assert_allclose(logits.numpy(), ref_logits, rtol=1e-5, atol=1e-6)

    def test_qwen3_attention_normalises_q_and_k_heads(self):
        d = make_ckpt(self.path("q3"), *TINY_QWEN3, "--layers", 1, "--dtype", "fp32",
                      "--init-std", 0.2, "--rope-theta", 100.0)
        m = rf.Model(d, "fp64")
        self.assertTrue(m.cfg.qk_norm)
        lw = m.layer(0)
        rng = np.random.default_rng(10)
        x = rng.standard_normal((5, 64))
        ours = rf.attention(m, lw, torch.from_numpy(x), torch.arange(5)).numpy()
        ref = naive_attention(x, lw, 4, 2, 32, 100.0, qk_norm_eps=1e-6)
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
        # the norm matters: without it the block differs
        self.assertGreater(np.abs(naive_attention(x, lw, 4, 2, 32, 100.0) - ref).max(), 1e-3)
        self._causal_and_finite(rf.Model(d), [3, 1, 4, 1, 5, 9, 2])
        # q/k_norm are part of a dequantised AWQ checkpoint as well
        dq = make_ckpt(self.path("q3awq"), *TINY_QWEN3, "--awq", "gemm", "--group-size", 32)
        out = self.path("deq")
        rf.dequantize_to(dq, out)
        torch.testing.assert_close(rf.forward(rf.Model(out), [1, 2, 3]),
                                   rf.forward(rf.Model(dq), [1, 2, 3]), rtol=0, atol=0)

    def test_smollm3_nope_layers(self):
        d = make_ckpt(self.path("s3"), *TINY_SMOLLM3, "--no-rope-layers", "1,0", "--dtype", "fp32",
                      "--init-std", 0.2, "--rope-theta", 100.0)
        cfg = read_json(os.path.join(d, "config.json"))
        self.assertEqual(cfg["model_type"], "smollm3")
        self.assertEqual(cfg["architectures"], ["SmolLM3ForCausalLM"])
        self.assertEqual(cfg["no_rope_layers"], [1, 0])
        m = rf.Model(d, "fp64")
        self.assertEqual(m.cfg.rope_layers, [1, 0])
        # without the list, every no_rope_layer_interval-th layer is NoPE (HF's default)
        self.assertEqual(rf.Config(dict(cfg, no_rope_layers=None, num_hidden_layers=9,
                                        no_rope_layer_interval=4)).rope_layers,
                         [1, 1, 1, 0, 1, 1, 1, 0, 1])
        rng = np.random.default_rng(12)
        x = rng.standard_normal((5, 64))
        for li, use_rope in ((0, True), (1, False)):
            lw = m.layer(li)
            ours = rf.attention(m, lw, torch.from_numpy(x), torch.arange(5),
                                use_rope).numpy()
            ref = naive_attention(x, lw, 4, 1, 16, 100.0, use_rope=use_rope)
            np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
            # rotating or not matters
            other = naive_attention(x, lw, 4, 1, 16, 100.0, use_rope=not use_rope)
            self.assertGreater(np.abs(other - ref).max(), 1e-3)
        # the whole forward follows the list: a NoPE layer made RoPE changes the logits
        ids = [3, 1, 4, 1, 5, 9, 2]
        nope = rf.forward(m, ids)
        m.cfg.rope_layers = [1, 1]
        self.assertGreater((rf.forward(m, ids) - nope).abs().max().item(), 1e-3)
        self._causal_and_finite(rf.Model(d, "fp64"), ids)

    def test_gemm_gemv_dequantize_to_agree(self):
        ids = [2, 7, 1, 8, 2, 8]
        dg = make_ckpt(self.path("g"), *TINY_LLAMA, "--awq", "gemm", "--group-size", 64)
        dv = make_ckpt(self.path("v"), *TINY_LLAMA, "--awq", "gemv", "--group-size", 64)
        lg = rf.forward(rf.Model(dg), ids)
        lv = rf.forward(rf.Model(dv), ids)
        torch.testing.assert_close(lg, lv, rtol=0, atol=0)
        out = self.path("deq")
        rf.dequantize_to(dg, out)
        cfg = read_json(os.path.join(out, "config.json"))
        self.assertNotIn("quantization_config", cfg)
        r = st.CheckpointReader(out)
        self.assertEqual(r.shape("model.layers.0.mlp.down_proj.weight"), [64, 128])
        self.assertEqual(r.dtype("model.layers.0.mlp.down_proj.weight"), "F32")
        r.close()
        torch.testing.assert_close(rf.forward(rf.Model(out), ids), lg, rtol=0, atol=0)
        # low-mem path gives the same logits
        torch.testing.assert_close(rf.forward(rf.Model(dg, low_mem=True), ids), lg, rtol=0, atol=0)

    def test_cli_greedy_and_emulation(self):
        d = make_ckpt(self.path("c"), *TINY_QWEN2, "--awq", "gemm", "--group-size", 32)
        out = self.path("o.json")
        rf.main(["--model", d, "--ids", "1,2,3", "--greedy", "3", "--out", out])
        res = read_json(out)
        self.assertEqual(res["ids"], [1, 2, 3])
        self.assertEqual(res["vocab_size"], 101)
        self.assertEqual(len(res["logits"]), 1)
        self.assertEqual(len(res["logits"][0]), 101)
        m = rf.Model(d)
        seq, exp = [1, 2, 3], []
        for _ in range(3):
            exp.append(int(torch.argmax(rf.forward(m, seq)[-1])))
            seq.append(exp[-1])
        self.assertEqual(res["greedy"], exp)
        np.testing.assert_allclose(res["logits"][0], rf.forward(m, [1, 2, 3])[-1].numpy(), rtol=1e-6)
        rf.main(["--model", d, "--ids", "1,2,3", "--all-positions", "--out", out])
        self.assertEqual(len(read_json(out)["logits"]), 3)
        l32 = rf.forward(m, [1, 2, 3])
        for dt in ("fp16", "bf16"):
            le = rf.forward(rf.Model(d, dt), [1, 2, 3])
            self.assertTrue(torch.isfinite(le).all())
            self.assertLess(float((le - l32).abs().max()), 0.05 * float(l32.abs().max()) + 0.02)

    def test_llama3_rope_scaling(self):
        d = make_ckpt(self.path("r"), *TINY_LLAMA, "--head-dim", 32, "--rope-theta", 500000.0,
                      "--rope-scaling-llama3", "8,1,4,64", "--dtype", "fp32")
        cfg = rf.Config(read_json(os.path.join(d, "config.json")))
        self.assertEqual(cfg.head_dim, 32)
        got = rf.rope_inv_freq(cfg, 10).double().numpy()
        base = 500000.0 ** (-np.arange(0, 32, 2) / 32.0)
        exp = []
        for f in base:       # formats.md 3.2, llama3
            wl = 2 * math.pi / f
            if wl > 64 / 1:
                exp.append(f / 8)
            elif wl < 64 / 4:
                exp.append(f)
            else:
                sm = (64 / wl - 1) / (4 - 1)
                exp.append((1 - sm) * f / 8 + sm * f)
        np.testing.assert_allclose(got, exp, rtol=1e-6)
        self.assertTrue(any(e == b for e, b in zip(exp, base)) and any(e != b for e, b in zip(exp, base)))
        m = rf.Model(d)
        self._causal_and_finite(m, [1, 2, 3, 4])

    def test_random_model_activations_sane(self):
        # deeper, wider random model: logits finite and fp16-safe in the fp16 emulation
        d = make_ckpt(self.path("deep"), "--arch", "llama", "--hidden", 128, "--layers", 12,
                      "--heads", 4, "--kv-heads", 1, "--intermediate", 384, "--vocab", 64,
                      "--awq", "gemm", "--group-size", 128, "--awq-codes", "synthetic")
        m = rf.Model(d, "fp16")
        logits, hidden = rf.forward(m, list(range(16)), return_hidden=True)
        self.assertTrue(torch.isfinite(logits).all())
        self.assertLess(max(float(h.abs().max()) for h in hidden), 100.0)
        self.assertGreater(float(logits.std()), 0.05)


if __name__ == "__main__":
    unittest.main()


class TrainTinyTest(unittest.TestCase):
    """tools/train_tiny.py: the incremental BPE trainer equals the plain one, and the model
    class computes what tools/reference_forward.py computes for its exported checkpoint."""

    def test_incremental_bpe_equals_plain_bpe(self):
        import collections
        import make_test_tokenizers as mtt
        import train_tiny as tt
        text = ("In the beginning God created the heaven and the earth. And the earth was "
                "without form, and void; and darkness was upon the face of the deep. " * 3
                + "abab ababab aaaa 价格价格 😀😀")
        words = mtt.byte_level_words(text, mtt.QWEN2_RE)
        self.assertEqual(tt.train_bpe(collections.Counter(words), 60),
                         mtt.train_merges(collections.Counter(words), 60))

    def test_exported_checkpoint_matches_reference_forward(self):
        import train_tiny as tt
        torch.manual_seed(0)
        cfg = dict(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256)
        m = tt.TinyLlama(cfg)
        with torch.no_grad():  # non-trivial norms so that their export is checked too
            for name, p in m.named_parameters():
                if name.endswith("norm.weight"):
                    p.add_(0.1 * torch.randn_like(p))
        with tempfile.TemporaryDirectory() as d:
            tok = os.path.join(d, "tokenizer.json")
            with open(tok, "w") as f:
                f.write("{}")
            tt.export(m, "tiny", tt.Path(d), tt.Path(tok), tt.VOCAB_SIZE - 3)
            ids = [1, 500, 37, 4000, 12, 9]
            with torch.no_grad():
                ours = m(torch.tensor([ids]))[0].double()
            ref = rf.forward(rf.Model(os.path.join(d, "tiny-fp16"), "fp32"), ids).double()
            ours16 = tt.TinyLlama(cfg)
            # the checkpoint is fp16: compare with the model's weights rounded to fp16
            ours16.load_state_dict({k: v.half().float() for k, v in m.state_dict().items()})
            with torch.no_grad():
                ours16_logits = ours16(torch.tensor([ids]))[0].double()
            self.assertLess((ours16_logits - ref).abs().max().item(), 1e-3)
            self.assertLess((ours - ref).abs().max().item(), 0.1)
