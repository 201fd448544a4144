"""The documented runs of a script (`analysis.launches`): README/Markdown command lines and
shell-script lines that start it, and whether each makes exactly one GPU visible."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_support import run
from fixture_support import FIXTURES
from perflint.analysis.launches import gpus_of_runs, launched_option_values, option_in_docs, option_of_runs


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_each_run_is_counted_with_the_devices_it_makes_visible(tmp_path):
    root = _project(tmp_path, {
        "tools/train.py": "",
        "README.md": ("    CUDA_VISIBLE_DEVICES=0 python tools/train.py --cfg a\n"
                      "    CUDA_VISIBLE_DEVICES=0,1 python tools/train.py\n"
                      "    python -m torch.distributed.launch --nproc_per_node=4 tools/train.py\n"
                      "    python train.py\n"
                      "    python other.py\n"),
        "run.sh": ("export CUDA_VISIBLE_DEVICES=3\npython tools/train.py \\\n  --x 1\n"
                   "CUDA_VISIBLE_DEVICES=$G python ./tools/train.py\n"),
        "docs/notes.txt": "CUDA_VISIBLE_DEVICES=0,1 python tools/train.py\n",  # not a README: not read
    })
    assert gpus_of_runs(str(root), str(root / "tools" / "train.py")) == [1, 0, 0, 0, 1, 0]


def test_a_script_no_document_runs_has_no_runs(tmp_path):
    root = _project(tmp_path, {"train.py": "", "README.md": "Run `python eval.py`.\n"})
    assert gpus_of_runs(str(root), str(root / "train.py")) == []


def _readme_edit_reported(tmp_path, monkeypatch, fixture: str, code: str, line: str) -> list[list[str]]:
    """The files a check of a copy of project `fixture` reports `code` in: cold, warm, and
    warm again after `line` is added to its README (the documents are read on every run)."""
    proj = tmp_path / fixture
    shutil.copytree(FIXTURES / "projects" / fixture, proj)
    monkeypatch.chdir(proj)
    env = {"PERFLINT_CACHE_DIR": str(tmp_path / "cache")}

    def files() -> list[str]:
        r = run("check", ".", "--output-format", "json", env=env)
        assert r.exit_code in (0, 1), r.output
        return sorted(Path(d["filename"]).name for d in json.loads(r.stdout) if d["code"] == code)

    seen = [files(), files()]
    readme = proj / "README.md"
    readme.write_text(readme.read_text() + line)
    return seen + [files()]


def test_an_edited_readme_is_read_again_on_a_warm_run(tmp_path, monkeypatch):
    """p49's `train.py` is silent while every documented run is on one GPU; a README line
    that runs it on all GPUs makes the next (warm) run report its DataParallel."""
    got = _readme_edit_reported(tmp_path, monkeypatch, "p49_one_gpu_runs", "PF503",
                                "\nOn all GPUs: `python train.py --dataset sunrgbd`.\n")
    assert got == [["refine.py"], ["refine.py"], ["refine.py", "train.py"]]


def test_each_run_gives_the_value_it_passes_to_an_option(tmp_path):
    root = _project(tmp_path, {
        "train.py": "",
        "README.md": ("    python train.py --data a.json --dataloader_num_workers=4\n"
                      "    accelerate launch --num_processes 2 train.py --dataloader-num-workers 8\n"
                      "    python train.py --data b.json\n"
                      "    python eval.py --dataloader_num_workers=2\n"  # another script
                      "    python train.py --dataloader_num_workers_x 3\n"),  # another option
        "run.sh": "python train.py \\\n  --dataloader_num_workers \"6\"\n",
    })
    assert option_of_runs(str(root), str(root / "train.py"), "dataloader_num_workers") == ["4", "8", None, None, "6"]


def test_a_readme_run_without_the_workers_option_brings_the_finding_back(tmp_path, monkeypatch):
    """p51's `train.py` is silent while every documented run passes a number of workers; a
    README line without the option makes the next (warm) run report its loader."""
    got = _readme_edit_reported(tmp_path, monkeypatch, "p51_documented_workers", "PF101",
                                "\nOr in one process: `python train.py --data_json data.json`.\n")
    assert got == [["finetune.py"], ["finetune.py"], ["finetune.py", "train.py"]]


def test_a_readme_run_that_passes_an_option_brings_back_the_branch_it_guards(tmp_path, monkeypatch):
    """p52's `if args.n_gpu > 1:` branch is silent while `--n_gpu` keeps its default of 1; a
    README command line that passes `--n_gpu 4` makes the next (warm) run report it."""
    got = _readme_edit_reported(tmp_path, monkeypatch, "p52_options_from_the_entry_script", "PF503",
                                "\nOn four GPUs: `python train.py --n_gpu 4`.\n")
    assert got == [["match.py"] * 2, ["match.py"] * 2, ["match.py"] * 3]


def test_an_option_is_found_on_any_documented_command_line(tmp_path):
    root = _project(tmp_path, {"README.md": "    python run.py --use-multi-gpu --devices 0,1\n    python other.py --amp_x 1\n"})
    assert option_in_docs(str(root), "use_multi_gpu")
    assert option_in_docs(str(root), "devices")
    assert not option_in_docs(str(root), "amp")


def test_an_option_quoted_as_code_in_prose_is_documented(tmp_path):
    """ConvNeXt's TRAINING.md: "You can add `--use_amp true` to train in ... AMP"."""
    root = _project(tmp_path, {"TRAINING.md": "- You can add `--use_amp true` to train with AMP.\n"})
    assert option_in_docs(str(root), "use_amp")
    assert not option_in_docs(str(root), "amp")


def test_a_command_runs_the_script_found_from_its_document(tmp_path):
    """A shell script in `b/scripts/` that runs `main.py` runs `b/main.py` (found from its
    folder upwards), not `a/main.py`; a root README's `main.py` exists nowhere from the root,
    so it may be either. Only multi-process launches give their option values."""
    root = _project(tmp_path, {
        "a/main.py": "", "b/main.py": "",
        "b/scripts/run.sh": "torchrun --nproc_per_node=8 main.py --accum_iter 4\npython main.py --accum_iter 8\n",
        "README.md": "    python -m torch.distributed.launch --nproc_per_node=2 main.py --accum_iter 2\n",
    })
    assert launched_option_values(str(root), str(root / "b" / "main.py"), "accum_iter") == ["2", "4"]
    assert launched_option_values(str(root), str(root / "a" / "main.py"), "accum_iter") == ["2"]
    assert gpus_of_runs(str(root), str(root / "a" / "main.py")) == [0]
