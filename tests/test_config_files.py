"""Settings read from a YAML or JSON file of the project (`analysis/configfiles.py`): a
script that loads its config by a literal path (or an argparse default naming one) gets the
values the file holds, as it gets argparse defaults; the result cache re-reads the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import run, write

TRAIN = """\
import torch
import torch.nn.functional as F
import yaml
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

{load}
device = torch.device({device})
data = datasets.ImageFolder("images", transform=transforms.ToTensor())
loader = DataLoader(data, batch_size=64, num_workers={workers}, pin_memory=True)
model = torch.nn.Linear(10, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
YAML_LOAD = 'with open("configs/train.yaml") as f:\n    cfg = yaml.safe_load(f)'
CONFIG = "device: cuda\ndata:\n  num_workers: 0\n"


def findings(*args: str) -> list[tuple[str, int, str]]:
    r = run("check", ".", "--output-format", "json", "--select", "PF101,PF105", *args)
    assert r.exit_code in (0, 1), r.output
    return sorted((Path(d["filename"]).name, d["location"]["row"], d["code"]) for d in json.loads(r.stdout))


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "configs/train.yaml": CONFIG})
    return tmp_path


def _train(load=YAML_LOAD, device='cfg["device"]', workers='cfg["data"]["num_workers"]') -> str:
    return TRAIN.format(load=load, device=device, workers=workers)


PF101 = ("train.py", 11, "PF101")
PF105 = [("train.py", 15, "PF105"), ("train.py", 15, "PF105")]


def test_a_yaml_file_loaded_by_a_literal_path_gives_its_values(proj):
    write(proj, {"train.py": _train()})
    assert findings("--no-cache") == [PF101, *PF105]
    assert findings("--no-cache", "train.py") == [PF101, *PF105]  # one file: the project is still read
    r = run("check", ".", "--no-cache", "--select", "PF101")
    assert '`num_workers=cfg["data"]["num_workers"]` (0 in the config file it reads)' in r.output


def test_values_that_make_no_finding_stay_silent(proj):
    write(proj, {"train.py": _train(), "configs/train.yaml": "device: cpu\ndata:\n  num_workers: 4\n"})
    assert findings("--no-cache") == []


@pytest.mark.parametrize("load,device,workers", [
    # json.load(open(...)) on an argparse default
    ('import argparse, json\np = argparse.ArgumentParser()\np.add_argument("--config", default="configs/t.json")\n'
     'args = p.parse_args()\ncfg = json.load(open(args.config))', 'cfg["device"]', 'cfg.get("num_workers", 4)'),
    # json.loads of Path.read_text(), a key left out and `.get`'s default
    ('import json\nfrom pathlib import Path\ncfg = json.loads(Path("configs/t.json").read_text())',
     'cfg.get("device", "cuda")', 'cfg["num_workers"]'),
    # attribute access on an attribute dict
    ('import json\nfrom easydict import EasyDict\ncfg = EasyDict(json.load(open("configs/t.json")))',
     "cfg.device", "cfg.num_workers"),
])
def test_json_loads_and_access_forms(proj, load, device, workers):
    write(proj, {"train.py": _train(load, device, workers), "configs/t.json": '{"device": "cuda", "num_workers": 0}'})
    expected = [PF101, *PF105]
    got = findings("--no-cache")
    assert [(n, code) for n, _, code in got] == [(n, code) for n, _, code in expected]


@pytest.mark.parametrize("files", [
    {"configs/train.yaml": "device: [cuda\n"},  # does not parse
    {"configs/train.yaml": "device: !!python/name:os.system\n"},  # not for safe_load
])
def test_a_config_that_cannot_be_read_leaves_the_values_unknown(proj, files):
    write(proj, {"train.py": _train(), **files})
    assert findings("--no-cache") == []


def test_a_file_outside_the_project_is_not_read(proj, tmp_path):
    write(tmp_path, {"sub/pyproject.toml": "[tool.perflint]\n",
                     "sub/train.py": _train(YAML_LOAD.replace("configs/train.yaml", "../configs/train.yaml"))})
    r = run("check", "sub", "--no-cache", "--output-format", "json", "--select", "PF101,PF105")
    assert json.loads(r.stdout) == []


def test_attribute_access_needs_an_attribute_dict(proj):
    write(proj, {"train.py": _train(device="cfg.device", workers="cfg.num_workers"),
                 "configs/train.yaml": "device: cuda\nnum_workers: 0\n"})
    assert findings("--no-cache") == []  # a plain dict has no attributes: not this config


def test_the_cache_reads_the_config_again(proj, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLINT_CACHE_DIR", str(tmp_path / "cache"))
    write(proj, {"train.py": _train()})
    assert findings() == [PF101, *PF105]
    assert findings() == [PF101, *PF105]  # served from the cache
    write(proj, {"configs/train.yaml": CONFIG.replace("num_workers: 0", "num_workers: 4")})
    assert findings() == PF105
    write(proj, {"configs/train.yaml": CONFIG.replace("cuda", "cpu")})
    assert findings() == [PF101]
