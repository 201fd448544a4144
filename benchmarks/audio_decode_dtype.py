"""What PF504's fix (`soundfile.read(..., dtype="float32")`) saves: decoding to float64 and
casting to a float32 tensor, against decoding straight to float32, on this CPU.

    python benchmarks/audio_decode_dtype.py [--repeat N] [--seconds 1,4,30]

For each format and clip length, a file written by soundfile (seeded noise at 16 kHz,
mono) in a temporary folder (so it is in the page cache, as in a DataLoader worker after
the first epoch) is read by:

* float64 + cast:  `x, sr = sf.read(path); t = torch.from_numpy(x).float()`
* float32 decode:  `x, sr = sf.read(path, dtype="float32"); t = torch.from_numpy(x).float()`

and the table shows the median time of each (µs), the speedup, and whether the two
tensors are bit-identical (they must be for the fix to be safe). Also prints, for every
subtype libsndfile writes here, whether the float64 decode cast to float32 equals the
direct float32 decode bit for bit, and whether that value is the exact sample value.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import soundfile as sf
import torch

RATE = 16000
FORMATS = [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("WAV", "FLOAT")]
SUBTYPES = [
    ("WAV", "PCM_U8"), ("WAV", "PCM_16"), ("WAV", "PCM_24"), ("WAV", "PCM_32"), ("WAV", "FLOAT"),
    ("WAV", "DOUBLE"), ("FLAC", "PCM_16"), ("FLAC", "PCM_24"), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III"),
]


def f64_then_cast(path: str) -> torch.Tensor:
    x, _ = sf.read(path)
    return torch.from_numpy(x).float()


def f32_decode(path: str) -> torch.Tensor:
    x, _ = sf.read(path, dtype="float32")
    return torch.from_numpy(x).float()


def median_us(fn, path: str, repeat: int) -> float:
    for _ in range(3):
        fn(path)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def noise(n: int, channels: int = 1) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.clip(rng.standard_normal((n, channels)) * 0.3, -1.0, 1.0)
    return x[:, 0] if channels == 1 else x


def exactness_table() -> None:
    print("| format | subtype | float64 decode → float32 == float32 decode (bit for bit) |")
    print("|---|---|---|")
    x = noise(RATE, 2)
    x[:3] = [[-1.0, 1.0], [0.99999, -0.99999], [1e-9, -1e-9]]
    for fmt, sub in SUBTYPES:
        buf = io.BytesIO()
        try:
            sf.write(buf, x, RATE if fmt != "MP3" else 44100, format=fmt, subtype=sub)
        except Exception as e:  # a libsndfile build without this codec
            print(f"| {fmt} | {sub} | not available here ({type(e).__name__}) |")
            continue
        raw = buf.getvalue()
        d64, _ = sf.read(io.BytesIO(raw))
        d32, _ = sf.read(io.BytesIO(raw), dtype="float32")
        same = np.array_equal(d64.astype(np.float32).view(np.uint32), d32.view(np.uint32))
        print(f"| {fmt} | {sub} | {'yes' if same else 'NO'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--seconds", default="1,4,30")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, numpy {np.__version__}, soundfile {sf.__version__} "
          f"(libsndfile {sf.__libsndfile_version__}), {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs; median of {args.repeat} reads, mono {RATE} Hz")
    print()
    print("| format | clip | float64 + cast µs | float32 decode µs | speedup | bit-identical |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, sub in FORMATS:
            for s in (float(v) for v in args.seconds.split(",")):
                path = os.path.join(tmp, f"clip_{s:g}s_{sub}.{fmt.lower()}")
                sf.write(path, noise(int(s * RATE)), RATE, format=fmt, subtype=sub)
                a, b = f64_then_cast(path), f32_decode(path)
                same = a.dtype == b.dtype and torch.equal(a.view(torch.int32), b.view(torch.int32))
                slow = median_us(f64_then_cast, path, args.repeat)
                fast = median_us(f32_decode, path, args.repeat)
                print(f"| {fmt} {sub} | {s:g} s | {slow:,.0f} | {fast:,.0f} | {slow / fast:.2f}× | "
                      f"{'yes' if same else 'NO'} |", flush=True)
    print()
    exactness_table()


if __name__ == "__main__":
    main()
