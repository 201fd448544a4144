"""Module resolution in the project index (perflint.analysis.project.ProjectIndex)."""

from __future__ import annotations

import os
from pathlib import Path

from perflint.analysis.project import ProjectIndex


def _index(root: Path, files: dict[str, dict]) -> ProjectIndex:
    return ProjectIndex(root, {os.path.join(str(root.absolute()), rel): s for rel, s in files.items()})


def test_scripts_in_a_subfolder_put_it_on_the_path_for_the_modules_below(tmp_path):
    """`code/train.py` imports `networks.factory`; `code/networks/factory.py` imports
    `networks.blocks` the same way (code/ is on the path when the scripts run)."""
    idx = _index(tmp_path, {
        "code/train.py": {"imports": {"net_factory": "networks.factory.net_factory"}},
        "code/networks/__init__.py": {},
        "code/networks/factory.py": {"imports": {"conv_net": "networks.blocks.conv_net"},
                                     "functions": {"net_factory": {}}},
        "code/networks/blocks.py": {"functions": {"conv_net": {}}},
    })
    root = str(tmp_path.absolute())
    factory = os.path.join(root, "code/networks/factory.py")
    blocks = os.path.join(root, "code/networks/blocks.py")
    assert idx.resolve(os.path.join(root, "code/train.py"), "networks.factory.net_factory") == (factory, "net_factory")
    assert idx.resolve(factory, "networks.blocks.conv_net") == (blocks, "conv_net")
    # A module that the scripts' modules import is a library module, not an entry point.
    assert idx.settings_near(blocks)["imported"] is True


def test_the_search_stops_at_the_project_root(tmp_path):
    inner = tmp_path / "proj"
    idx = _index(inner, {"a/b/c.py": {"imports": {"x": "outside.x"}}})
    bases = idx.search_bases(os.path.join(str(inner.absolute()), "a/b/c.py"))
    assert all(b == str(inner.absolute()) or b.startswith(str(inner.absolute()) + os.sep) for b in bases)
    assert os.path.join(str(inner.absolute()), "a") in bases


def test_code_mentions_counts_code_not_comments_and_refuses_aliases(tmp_path):
    from perflint.analysis.optiondefaults import _code_mentions

    only_comment = tmp_path / "infill.py"
    only_comment.write_text("from infill_util import refine, refine_v1\n# refine_v1(model)\nrefine(model)\n")
    assert _code_mentions(str(only_comment), "refine_v1") == 1
    assert _code_mentions(str(only_comment), "refine") == 2
    in_string = tmp_path / "export.py"
    in_string.write_text('from infill_util import refine_v2\n__all__ = ["refine_v2"]\n')
    assert _code_mentions(str(in_string), "refine_v2") == 3
    aliased = tmp_path / "tune.py"
    aliased.write_text("from infill_util import refine_v3 as fit\nfit(model)\n")
    assert _code_mentions(str(aliased), "refine_v3") == -1
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n    '''\n")
    assert _code_mentions(str(broken), "f") == -1
