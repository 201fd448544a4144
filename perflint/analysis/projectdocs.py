"""The questions a file's analysis asks of its project's documents rather than its code: a
YAML/JSON config file it loads (`analysis.configfiles`), and the command lines of the
README/Markdown files and shell scripts (`analysis.launches`).  Mixed into
`analysis.project.ProjectView`, which records each question and its answer (`_ask`)."""

from __future__ import annotations

import os
from typing import Callable

from perflint.analysis.launches import (gpus_of_runs, launched_option_each, launched_option_values, option_in_docs,
                                        option_of_runs, yaml_sets)


class DocumentQuestions:
    """`ProjectView`'s questions about the project's documents (it provides `_ask`, `index`
    and `path`)."""

    index: object
    path: str
    _read: Callable[[str], bytes | None]  # `project.read_regular`
    _ask: Callable  # `ProjectView._ask(key, compute)`: records the question and its answer

    def config_data(self, literal: str):
        """The parsed content of a YAML/JSON file of the project that this file loads by the
        path `literal` (see `analysis.configfiles`)."""
        from perflint.analysis.configfiles import read_config

        return self._ask(("cfgfile", literal),
                         lambda: read_config(self.index.root, os.path.dirname(self.path), literal,  # type: ignore[union-attr]
                                             self._read))

    def documented_on_one_gpu(self) -> bool:
        """Whether the project's README/Markdown command lines and shell scripts run this
        script, and every such run makes exactly one GPU visible (`CUDA_VISIBLE_DEVICES=0
        python train.py`; see `analysis.launches`).  True or None."""
        def compute():
            runs = gpus_of_runs(self.index.root, self.path)  # type: ignore[union-attr]
            return bool(runs) and all(runs) or None
        return bool(self._ask(("launch",), compute))

    def documented_option(self, name: str, anywhere: bool = False) -> list | bool | None:
        """The value each documented run of this script passes to its option `name` (None: it
        passes none), or None when no document runs it; `anywhere`: whether any document
        passes `--name` to any script (`analysis.launches`)."""
        return self._ask(("launch", "option", name, *((True,) if anywhere else ())), lambda: (  # type: ignore[union-attr]
            option_in_docs(self.index.root, name) if anywhere else option_of_runs(self.index.root, self.path, name)) or None)

    def launched_option(self, name: str, symbol: str | None = None) -> list | None:
        """The values that the documented multi-process launches of this script, or of the
        scripts that call its function `symbol`, pass to their option `name` (ConvNeXt's
        `python -m torch.distributed.launch ... main.py --update_freq 4`, where `main.py`
        calls `engine.train_one_epoch`)."""
        def compute():
            sites = self.index.callers._sites((self.path, symbol)) if symbol else None  # type: ignore[attr-defined]
            files = sorted({self.path, *(caller for caller, _ in sites or ())})
            return [v for f in files for v in launched_option_values(self.index.root, f, name)]  # type: ignore[attr-defined]
        return self._ask(("launch", "launched", name, symbol), lambda: compute() or None)

    def never_imported(self) -> bool:
        """Whether nothing in the project imports this module (`analysis.orphans`: it reads the
        import statements of every file and document; `orphans.text_files` lists them for the
        cache's stamp)."""
        from perflint.analysis.orphans import never_imported

        return bool(self._ask(("orphan",), lambda: never_imported(self.index, self.path) or None))

    def launched_each(self, name: str) -> list | None:
        """For each documented multi-process launch of this script, the value it passes to its
        option `name` (None where it passes none); None when no document launches it."""
        return self._ask(("launch", "each", name),
                         lambda: launched_option_each(self.index.root, self.path, name) or None)  # type: ignore[attr-defined]

    def yaml_sets(self, key: str) -> bool:
        """Whether a YAML file of the project sets `key` (`analysis.launches.yaml_sets`)."""
        return bool(self._ask(("launch", "yamlkey", key), lambda: yaml_sets(self.index.root, key) or None))  # type: ignore[attr-defined]
