# make_golden.py — golden FP8 E4M3 values for tests/test-fp8.c, from PyTorch's
# torch.float8_e4m3fn (cross-checked against ml_dtypes.float8_e4m3fn where it is importable).
# Run: python3 -m venv /tmp/fp8venv && /tmp/fp8venv/bin/pip install torch numpy [ml_dtypes]
#      /tmp/fp8venv/bin/python tests/data/fp8/make_golden.py > tests/data/fp8/e4m3_golden.txt
# Output lines:  "D code f32bits"  decode of every code 0..255 (NaN codes: f32bits 7fc00000)
#                "E f32bits code"  encode of a float (torch's conversion; saturating in torch >= 2.x)
import struct
import numpy as np
import torch

def bits(f):
    return struct.unpack("<I", struct.pack("<f", float(f)))[0]

out = []
codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
dec = codes.to(torch.float32)
for c in range(256):
    v = dec[c].item()
    out.append("D %02x %08x" % (c, 0x7FC00000 if v != v else bits(v)))

rng = np.random.default_rng(20261130)
vals = []
# normal-ish values over the whole range, including the subnormal and saturating ends
for e in range(-16, 11):
    vals += list((rng.standard_normal(60) * 2.0 ** e).astype(np.float32))
# exact midpoints between neighbouring finite codes (ties to even) and their neighbours
finite = sorted(set(x for x in dec.tolist() if x == x and x >= 0))
for a, b in zip(finite, finite[1:]):
    mid = np.float32((a + b) / 2)
    vals += [mid, -mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(1e9))]
vals += [0.0, -0.0, 448.0, -448.0, 463.99, 464.0, 470.0, 1e6, -1e6, 2.0 ** -10, 2.0 ** -11,
         1e-40, -1e-40, float("inf"), float("-inf")]
x = torch.tensor(np.array(vals, dtype=np.float32))
q = x.to(torch.float8_e4m3fn).view(torch.uint8)
try:
    import ml_dtypes
    q2 = np.array(vals, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    # ml_dtypes does not saturate (out of range -> NaN): compare where |x| <= 448
    for v, a, b in zip(vals, q.tolist(), q2.tolist()):
        if abs(v) <= 448 and a != b:
            raise SystemExit("torch and ml_dtypes disagree on %r: %02x vs %02x" % (v, a, b))
except ImportError:
    pass
for v, c in zip(x.tolist(), q.tolist()):
    out.append("E %08x %02x" % (bits(v), c))
print("# torch %s float8_e4m3fn; %d decode + %d encode cases" % (torch.__version__, 256, len(vals)))
print("\n".join(out))
