#!/usr/bin/env python3
"""scripts/gguf_to_f32.py — rewrites a GGUF file with every tensor dequantised to F32.

Why: lazyinfer dequantises all weights to f32 at load time and computes in f32, so the
fair llama.cpp peer at *equal weight precision* runs an F32 GGUF holding exactly those
dequantised values (scripts/bench_llamacpp.py uses it). All metadata key/values are copied
unchanged except general.file_type, which becomes ALL_F32 (0); tensor names, order and
shapes are kept; only the tensor type (-> F32) and the data change.

What it is not: a quantiser or a general GGUF editor. It needs the `gguf` Python package
(gguf.quants.dequantize), which knows every ggml type this project meets (F32, F16, Q4_0,
Q4_1, Q8_0, K-quants ...); an unknown type is an error naming the tensor.

How it is tested: `--check` re-reads the written file and compares every tensor bit for
bit against a fresh dequantisation of the source (and the metadata key by key); the
benchmark script also checks that llama.cpp's greedy continuation of a fixed prompt is
the same on both files.

Usage:
  .venv-bench/bin/python scripts/gguf_to_f32.py SRC.gguf DST.gguf [--check]
"""

import argparse
import os
import sys

import numpy as np

try:
    import gguf
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover - environment problem, not a code path
    sys.exit(f"gguf_to_f32: the `gguf` package is needed ({e}); "
             "pip install gguf into the venv you run this with")


def _copy_metadata(reader, writer):
    """Copies every real key/value of reader into writer, file_type forced to ALL_F32."""
    for field in reader.fields.values():
        # GGUF.* are virtual (version, counts); the architecture is written by GGUFWriter
        # itself from its constructor argument.
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.ALL_F32)
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    if gguf.Keys.General.FILE_TYPE not in reader.fields:
        writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))


def _dequant(tensor):
    """Returns tensor's values as a C-contiguous float32 array in numpy (row-major) order."""
    try:
        out = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as e:
        raise SystemExit(f"gguf_to_f32: tensor {tensor.name}: type "
                         f"{tensor.tensor_type.name} cannot be dequantised: {e}")
    out = np.ascontiguousarray(out, dtype=np.float32)
    # GGUF lists dims ne0 (fastest) first; numpy lists the slowest first.
    want = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    if out.shape != want:
        out = out.reshape(want)
    if out.size != int(tensor.n_elements):
        raise SystemExit(f"gguf_to_f32: tensor {tensor.name}: {out.size} values after "
                         f"dequantisation, header says {int(tensor.n_elements)}")
    return out


def convert(src, dst):
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    align_field = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    tmp = dst + ".tmp"
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    if align_field is not None:
        writer.data_alignment = int(align_field.contents())
    _copy_metadata(reader, writer)

    # Header first (sizes are known without dequantising: n_elements * 4 bytes), then the
    # data one tensor at a time, so peak memory is one f32 tensor, not the whole model.
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        writer.add_tensor_info(t.name, shape, np.dtype(np.float32), int(t.n_elements) * 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(_dequant(t))
    writer.close()
    os.replace(tmp, dst)


def check(src, dst):
    """Re-reads dst and compares it with src: metadata equal (but file_type), tensors exact."""
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dst)
    keys_a = [k for k in a.fields if not k.startswith("GGUF.")]
    keys_b = [k for k in b.fields if not k.startswith("GGUF.")]
    if sorted(keys_a) != sorted(keys_b):
        raise SystemExit(f"check: keys differ: only in src {set(keys_a) - set(keys_b)}, "
                         f"only in dst {set(keys_b) - set(keys_a)}")
    for k in keys_a:
        va, vb = a.fields[k].contents(), b.fields[k].contents()
        if k == gguf.Keys.General.FILE_TYPE:
            if vb != int(gguf.LlamaFileType.ALL_F32):
                raise SystemExit(f"check: {k} is {vb}, want 0 (ALL_F32)")
            continue
        if a.fields[k].types != b.fields[k].types or va != vb:
            raise SystemExit(f"check: metadata {k} differs")
    if [t.name for t in a.tensors] != [t.name for t in b.tensors]:
        raise SystemExit("check: tensor names/order differ")
    for ta, tb in zip(a.tensors, b.tensors):
        if tb.tensor_type != gguf.GGMLQuantizationType.F32:
            raise SystemExit(f"check: {tb.name} is {tb.tensor_type.name}, want F32")
        if ta.shape.tolist() != tb.shape.tolist():
            raise SystemExit(f"check: {ta.name} shape {ta.shape.tolist()} vs {tb.shape.tolist()}")
        want = _dequant(ta).reshape(-1)
        got = np.asarray(tb.data, dtype=np.float32).reshape(-1)
        if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
            bad = int(np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))[0])
            raise SystemExit(f"check: {ta.name} value {bad}: {got[bad]} vs {want[bad]}")
    print(f"check: {dst}: {len(keys_a)} keys and {len(a.tensors)} tensors match {src} "
          f"(all F32, bit-exact dequantisation)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--check", action="store_true", help="verify dst against src afterwards")
    args = ap.parse_args()
    convert(args.src, args.dst)
    print(f"wrote {args.dst} ({os.path.getsize(args.dst) / 2**20:.1f} MiB)")
    if args.check:
        check(args.src, args.dst)


if __name__ == "__main__":
    main()
