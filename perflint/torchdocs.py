"""The torch version a project's install notes and Dockerfiles name, where no requirement
file bounds it (`perflint.config` takes the lowest bound it finds)."""

from __future__ import annotations

import re
from pathlib import Path


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        return ""


# Where no machine-readable requirement bounds torch, the project's Dockerfiles and install
# notes often do: a `pytorch/pytorch:1.7.0-…` base image, `pip install torch==1.13.1`, or a
# README's "PyTorch 1.13 or later" / "PyTorch >= 1.3".  The lowest such version is taken: a
# safe fix must work on every torch the project says it runs on.
_DOC_FILES = ("README.md", "README.rst", "README.txt", "README", "INSTALL.md", "docs/INSTALL.md", "readme/INSTALL.md",
              "get_started.md", "docs/get_started.md", "GETTING_STARTED.md", "docs/GETTING_STARTED.md",
              "Dockerfile", "docker/Dockerfile")
_DOC_BOUNDS = (
    re.compile(r"^\s*FROM\s+(?:docker\.io/)?pytorch/pytorch:v?(\d+)\.(\d+)", re.M | re.I),
    re.compile(r"\b(?:pip3?|conda|mamba)\s+install\b[^\n]*?[\s\"'](?:py)?torch\s*(?:==|>=|=|~=)\s*v?(\d+)\.(\d+)"),
    # "PyTorch (>= 0.4.1)", "[PyTorch](https://pytorch.org/) >= 1.9.0", "PyTorch ( == 0.4.1, …)"
    re.compile(r"\b(?:py)?torch(?:\]\([^)\s]*\))?\s*\(?\s*(?:version\s*)?(?:>=|≥|=>|==)\s*v?(\d+)\.(\d+)", re.I),
    # An environment listed on one line: "Python 3.6.5, PyTorch 1.1.0, Numpy 1.16.3", "with
    # python version 3.6, PyTorch version 1.7.1, CUDA 11.0".
    # ("8 NVIDIA V100 GPUs, CUDA 10.1/CuDNN 7.6.5, PyTorch 1.7.0.": the last item, then a full stop).
    # ("tested with CUDA 10.2/CuDNN 7.6.5, PyTorch 1.9.0 and timm 0.4.9.": an item before "and").
    re.compile(r"(?:^|[,;])[ \t]*(?:py)?torch[ \t]*(?:version[ \t]*)?v?(\d+)\.(\d+)(?:\.\d+)*[ \t]*"
               r"(?=[,;]|[ \t]+and[ \t]|\.?[ \t]*$)", re.I | re.M),
    # An install step that names the version: "6. Install [PyTorch 1.0]", "install PyTorch 1.4".
    re.compile(r"\binstall\s+\[?(?:py)?torch\s+v?(\d+)\.(\d+)", re.I),
    re.compile(r"\bpytorch\s*v?(\d+)\.(\d+)(?:\.\d+)?\s*(?:\+|or\s+(?:later|higher|newer|above|greater)"
               r"|and\s+(?:later|above|higher|newer))", re.I),
    # A requirements list item ("* PyTorch 2.0", "- pytorch: 1.7.1", "1. PyTorch 1.8") and
    # "developed / tested with PyTorch 1.8.1", "compatible with PyTorch 0.4.1/1.0": the
    # version the code was written for.
    # ("- [PyTorch](http://pytorch.org) install = 1.4.0": the name behind a link, "install";
    # "* [PyTorch 0.3.0](http://pytorch.org/)": the version inside the link's text;
    # "- a PyTorch install version 0.1.8": DeepCluster's).
    re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]+(?:an?[ \t]+)?(?:\*\*)?(?:\[(?:py)?torch\]\([^)\s]*\)|\[?(?:py)?torch)(?:\*\*)?[ \t]*"
               r"(?:install[ \t]*)?(?:version[ \t]*)?[:=]?[ \t]*v?(\d+)\.(\d+)", re.I | re.M),
    # "My environment is pytorch1.0", "tested with `pytorch1.3`": the version run together
    # with the name (not in a path: `cu113/torch1.10/index.html`).
    re.compile(r"(?<![\w/.-])pytorch(\d+)\.(\d+)(?![\w/])", re.I),
    # "64-bit Python 3.7 and PyTorch 1.7.1": the environment in prose.
    re.compile(r"\bpython\s+v?\d+(?:\.\d+)*\s+(?:and|&)\s+pytorch\s+(?:version\s+)?v?(\d+)\.(\d+)", re.I),
    re.compile(r"\b(?:(?:developed|tested|written|implemented|trained)\s+(?:for|with|on|using|under|in)"
               r"|compatible\s+with)\s+pytorch(?:\s+|-)(?:version\s+)?v?(\d+)\.(\d+)", re.I),
    # "tested on Ubuntu 16.04, with … and [PyTorch](…) v1.0" (CenterTrack); "PyTorch <=1.4".
    re.compile(r"\btested\s+(?:on|with)\b[^\n]*?\bpytorch\b(?:\]\(+[^)\s]*\)+)?\s*v?(\d+)\.(\d+)", re.I),
    re.compile(r"\bpytorch\s*(?:version\s*)?(?:<=|≤)\s*v?(\d+)\.(\d+)", re.I),
    # "I'm using `PyTorch 0.4` in `Python 3.6`", "requires PyTorch 1.2": the author's own setup.
    re.compile(r"\b(?:using|requires?)\s+[`*]*pytorch\s+(?:version\s+)?v?(\d+)\.(\d+)", re.I),
    # "Platform: Pytorch 0.4" (a readme's environment line).
    re.compile(r"\bplatforms?\s*:\s*[^\n]*?\bpytorch\s*v?(\d+)\.(\d+)", re.I),
    # The environment as the interpreter prints it: "torch.__version__  = '1.1.0'".
    re.compile(r"\btorch\.__version__\s*[:=]=?\s*['\"]?v?(\d+)\.(\d+)"),
)

# `conda install pytorch torchvision cudatoolkit=10.1 -c pytorch` with no torch version: the
# newest torch the pytorch channel built for that CUDA is what the command installs.
_CONDA_CUDA = re.compile(r"\bconda\s+install\b[^\n]*?\bpytorch\b[^\n]*?\bcudatoolkit\s*=+\s*(\d+)\.(\d+)")
_LAST_TORCH_FOR_CUDA = {(9, 0): (1, 1), (10, 0): (1, 2), (9, 2): (1, 7), (10, 1): (1, 7), (11, 0): (1, 7),
                        (11, 1): (1, 9), (10, 2): (1, 12), (11, 3): (1, 12)}


def docs_bound(project_dir: Path) -> tuple[tuple[int, int], Path] | None:
    best = None
    names = list(_DOC_FILES)
    try:
        present = {p.name.lower(): p.name for p in project_dir.iterdir()}
    except OSError:
        present = {}
    # `readme.md`, `Readme.md`: the folder's own spelling of a top-level name.
    names = [present.get(n.lower(), n) if "/" not in n else n for n in names]
    names += sorted(v for k, v in present.items() if k.startswith("dockerfile."))
    for name in names:
        path = project_dir / name
        text = read_text(path)[:200_000]
        for rx in _DOC_BOUNDS:
            for m in rx.finditer(text):
                v = (int(m.group(1)), int(m.group(2)))
                if v[0] < 1 and v[1] == 0 or v[0] > 9:
                    continue  # not a torch version
                if best is None or v < best[0]:
                    best = (v, path)
        for m in _CONDA_CUDA.finditer(text):
            v = _LAST_TORCH_FOR_CUDA.get((int(m.group(1)), int(m.group(2))))
            if v is not None and (best is None or v < best[0]):
                best = (v, path)
    return best
