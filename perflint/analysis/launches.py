"""How a project's documentation and shell scripts run one of its scripts: the command lines
in its README/Markdown files and `.sh` scripts that start `python …/<script>.py`, and whether
each of them makes a single GPU visible (`CUDA_VISIBLE_DEVICES=0 python train.py …`, or an
`export CUDA_VISIBLE_DEVICES=1` earlier in the same shell script).

    # README.md
    CUDA_VISIBLE_DEVICES=0 python train.py --dataset sunrgbd --log_dir log_sunrgbd

`gpus_of_runs(root, path)` reads these text files only (no libcst): a rule asks it through
the project view (`ProjectView.documented_on_one_gpu`), which makes it one of the file's recorded
questions, so the result cache reads the files again before it serves a finding.  So does
`option_of_runs(root, path, name)`, the value each run passes to one option
(`python tutorial_train.py --dataloader_num_workers=4`; `ProjectView.documented_option`).
"""

from __future__ import annotations

import os
import re

MAX_FILES = 300
MAX_BYTES = 256 * 1024
_SKIP_DIRS = {"node_modules", "site-packages", "venv", "build", "dist", "__pycache__"}
# `python`, `python3`, `python3.8` (after an optional `env …`/`nohup`), its flags, then the
# script: `python -u tools/train.py`, `python3 ./train.py`.
_RUN = re.compile(r"(?:^|[\s;&|(`])python(?:\d(?:\.\d+)?)?((?:\s+-[A-Za-z]+)*)\s+([\w./\-]+\.py)\b")
# `CUDA_VISIBLE_DEVICES=0` (group 1 set: one GPU) or `=0,1` / `=$GPUS` (group 1 None).
_SETS = re.compile(r"CUDA_VISIBLE_DEVICES\s*=\s*(?:[\"']?(\d+)[\"']?(?=[\s;&|)]|$)|\S*)")
_LAUNCHER = re.compile(r"(?:torchrun|torch\.distributed\.(?:launch|run)|accelerate\s+launch|deepspeed)\b"
                       r"[^;&|]*?\s([\w./\-]+\.py)\b")


def _files(root: str, wanted):
    """Paths of the project's files whose lower-cased name `wanted` accepts, folders in
    sorted order, skipping hidden, virtual-environment and build folders."""
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.startswith("."))
        for name in sorted(files):
            if wanted(name.lower()):
                yield os.path.join(d, name)


def _is_doc(low: str) -> bool:
    return low.endswith((".md", ".sh", ".bash", ".rst", ".txt")) and (
        low.endswith((".sh", ".bash")) or low.startswith("readme") or low.endswith(".md"))


def _texts(root: str) -> list[tuple[str, str]]:
    """(path, text) of the project's README/Markdown files and shell scripts."""
    out: list[tuple[str, str]] = []
    for path in _files(root, _is_doc):
        try:
            if os.path.getsize(path) > MAX_BYTES:
                continue
            with open(path, "rb") as fh:
                out.append((path, fh.read().decode("utf-8", "replace")))
        except OSError:
            continue
        if len(out) >= MAX_FILES:
            return out
    return out


def yaml_sets(root: str, key: str) -> bool:
    """Whether a YAML file of the project sets `key` (a line `KEY: value`, at any depth): a
    run that loads it may change the default of a yacs config tree."""
    line = re.compile(rf"^\s*{re.escape(key)}\s*:", re.M)
    for seen, path in enumerate(_files(root, lambda low: low.endswith((".yaml", ".yml")))):
        if seen >= MAX_FILES * 10:
            return True  # too many to read: may be set
        try:
            with open(path, "rb") as fh:
                if line.search(fh.read(MAX_BYTES).decode("utf-8", "replace")):
                    return True
        except OSError:
            return True
    return False


def _lines(text: str) -> list[str]:
    """Logical command lines: backslash continuations joined."""
    return re.sub(r"\\\r?\n", " ", text).splitlines()


def _names_script(arg: str, rel: str) -> bool:
    """`arg` (as a command spells the script) ends, component by component, like `rel`."""
    parts = [p for p in arg.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return False
    want = rel.replace(os.sep, "/").split("/")
    return len(parts) <= len(want) and want[-len(parts):] == parts


def _another_file(root: str, doc: str, arg: str, path: str) -> bool:
    """The script a command of `doc` names (`main_finetune.py`) is a file found from the
    document's folder or a folder above it, up to the root, and not the file at `path`: the
    run is that file's (LLaMA-Adapter's `gorilla/finetune/scripts/*.sh` run
    `gorilla/finetune/main_finetune.py`, not `imagebind_LLM/main_finetune.py`)."""
    top = os.path.abspath(root)
    d = os.path.dirname(os.path.abspath(doc))
    while d.startswith(top):
        cand = os.path.normpath(os.path.join(d, arg))
        if os.path.isfile(cand):
            return cand != os.path.abspath(path)
        if d == top:
            break
        d = os.path.dirname(d)
    return False


def _one_gpu(text: str) -> bool | None:
    """What the last `CUDA_VISIBLE_DEVICES=…` of `text` says: one GPU (True), several or an
    unknown value (False); None when `text` sets none."""
    found = list(_SETS.finditer(text))
    if not found:
        return None
    return found[-1].group(1) is not None


def _runs(root: str, path: str):
    """Each documented run of the script at `path`: (the command line, where the script's
    name ends in it, whether it goes through a multi-process launcher, whether one GPU is
    visible to it: from the line, else from a shell script's `export` in force)."""
    rel = os.path.relpath(path, root)
    if rel.startswith(".."):
        return
    for doc, text in _texts(root):
        shell = doc.lower().endswith((".sh", ".bash"))
        exported: bool | None = None  # a shell script's `export CUDA_VISIBLE_DEVICES=…` in force
        for line in _lines(text):
            runs = [m for m in _RUN.finditer(line) if "-m" not in m.group(1).split() and _names_script(m.group(2), rel)
                    and not _another_file(root, doc, m.group(2), path)]
            launched = [m for m in _LAUNCHER.finditer(line) if _names_script(m.group(1), rel)
                        and not _another_file(root, doc, m.group(1), path)]
            if not runs and not launched:
                if shell and _one_gpu(line) is not None:
                    exported = _one_gpu(line)
                continue
            for m in launched:
                yield line, m.end(1), True, False
            for m in runs:
                here = _one_gpu(line[: m.start()])
                yield line, m.end(2), False, bool(here if here is not None else exported)


def gpus_of_runs(root: str, path: str) -> list[int]:
    """For each documented run of the script at `path` (README/Markdown command lines, shell
    script lines), 1 when it makes exactly one GPU visible, 0 otherwise (also a run through a
    multi-process launcher: `torchrun`, `torch.distributed.launch`, `accelerate launch`)."""
    return [0 if launched else int(one) for _, _, launched, one in _runs(root, path)]


def _flag(name: str) -> re.Pattern:
    """`--name` (also spelled with dashes) as a word of a command line, with its value; also
    quoted as code in prose ("You can add `--use_amp true`", ConvNeXt's TRAINING.md)."""
    flags = "|".join(re.escape(f) for f in sorted({"--" + name, "--" + name.replace("_", "-")}))
    return re.compile(rf"(?:^|[\s`])(?:{flags})(?:=|\s+|$)([^\s;&|`]*)", re.M)


def option_in_docs(root: str, name: str) -> bool:
    """Whether any README/Markdown file or shell script of the project passes `--name` on a
    command line (to any script): a run the documents describe may turn it on."""
    given = _flag(name)
    return any(given.search(text) for _, text in _texts(root))


def launched_option_values(root: str, path: str, name: str) -> list[str]:
    """The values that the documented multi-process launches of the script at `path`
    (`torchrun`, `python -m torch.distributed.launch`, `accelerate launch`, `deepspeed`)
    pass to its option `name`."""
    return [v for v in _values_of_runs(root, path, name, launched_only=True) if v is not None]


def launched_option_each(root: str, path: str, name: str) -> list[str | None]:
    """For each documented multi-process launch of the script at `path`, the value it passes
    to its option `name`, or None where it passes none."""
    return _values_of_runs(root, path, name, launched_only=True)


def option_of_runs(root: str, path: str, name: str) -> list[str | None]:
    """For each documented run of the script at `path`, the value it passes to the option
    whose argparse name is `name` (`--name 4`, `--name=4`, also spelled with dashes), or
    None where it passes none.  Only the words after the script's name on its line count."""
    return _values_of_runs(root, path, name, launched_only=False)


def _values_of_runs(root: str, path: str, name: str, launched_only: bool) -> list[str | None]:
    given = _flag(name)
    out: list[str | None] = []
    for line, end, launched, _ in _runs(root, path):
        if launched or not launched_only:
            m = given.search(line[end:])
            out.append(m.group(1).strip("\"'") or None if m else None)
    return out
