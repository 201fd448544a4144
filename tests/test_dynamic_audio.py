"""Dynamic proof for PF504's fix: decoding with `dtype="float32"` gives the tensors the
float64 decode and cast gave, bit for bit, on 16-bit PCM WAV written by soundfile."""

from __future__ import annotations

from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
sf = pytest.importorskip("soundfile")
torch = pytest.importorskip("torch")

from fixture_support import apply_fixes  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rules" / "PF504.py"


def _bits(a) -> np.ndarray:
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.fixture(scope="module")
def wav(tmp_path_factory) -> Path:
    """Two seconds of stereo 16-bit PCM with full-scale and tiny samples."""
    rng = np.random.default_rng(0)
    x = np.clip(rng.standard_normal((32000, 2)) * 0.3, -1.0, 1.0)
    x[:3] = [[-1.0, 1.0], [0.99999, -0.99999], [3e-5, -3e-5]]
    path = tmp_path_factory.mktemp("audio") / "clip.wav"
    sf.write(path, x, 16000, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def mono(tmp_path_factory) -> Path:
    x = np.clip(np.random.default_rng(2).standard_normal(16000) * 0.3, -1.0, 1.0)
    path = tmp_path_factory.mktemp("audio") / "mono.wav"
    sf.write(path, x, 16000, subtype="PCM_16")
    return path


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_16", "PCM_24", "PCM_32"])
def test_float32_decode_equals_float64_decode_cast_for_integer_pcm(tmp_path, subtype):
    x = np.random.default_rng(1).uniform(-1, 1, (4000, 2))
    path = tmp_path / "clip.wav"
    sf.write(path, x, 16000, subtype=subtype)
    d64, _ = sf.read(path)
    d32, _ = sf.read(path, dtype="float32")
    assert d64.dtype == np.float64 and d32.dtype == np.float32
    assert np.array_equal(_bits(d64.astype(np.float32)), _bits(d32))
    if subtype in ("PCM_U8", "PCM_16", "PCM_24"):
        assert np.array_equal(d32.astype(np.float64), d64)  # exact: no rounding at all


def _load(text: str) -> dict:
    ns: dict = {"__name__": "pf504_fixture"}
    exec(compile(text, str(FIXTURE), "exec"), ns)
    return ns


def test_safe_fix_gives_bit_identical_tensors(wav, mono):
    before = _load(FIXTURE.read_text())
    fixed_text = apply_fixes(FIXTURE, ["PF504"], unsafe=False)
    assert fixed_text.count('dtype="float32"') == FIXTURE.read_text().count('dtype="float32"') + 7
    after = _load(fixed_text)
    p = str(wav)
    pairs = [
        (before["Clips"]([p], 20000)[0], after["Clips"]([p], 20000)[0]),
        (before["load_a"](p), after["load_a"](p)),
        (before["load_b"](p), after["load_b"](p)),
        (before["load_c"](p, "cpu")[0], after["load_c"](p, "cpu")[0]),
        (before["load_d"](p), after["load_d"](p)),
        (before["load_h"](str(mono), 24000), after["load_h"](str(mono), 24000)),  # padded by wrapping, stacked
        (before["load_h"](str(mono), 1000), after["load_h"](str(mono), 1000)),
        (before["load_i"](p, 5000), after["load_i"](p, 5000)),  # SoundFile.read
    ]
    for old, new in pairs:
        assert old.dtype == new.dtype and old.dtype in (torch.float32, np.float32)
        assert old.shape == new.shape
        assert np.array_equal(_bits(old), _bits(new))


def test_unsafe_fix_stays_within_float32_rounding(wav):
    before = _load(FIXTURE.read_text())
    after = _load(apply_fixes(FIXTURE, ["PF504"], unsafe=True))
    p = str(wav)
    for name in ("load_e", "load_f", "load_k"):
        old, new = before[name](p), after[name](p)
        assert old.dtype == new.dtype == torch.float32
        assert torch.allclose(old, new, rtol=1e-6, atol=1e-7)
    # What makes load_g unsafe: its second result changes dtype.
    assert before["load_g"](p)[1].dtype == np.float64
    assert after["load_g"](p)[1].dtype == np.float32
