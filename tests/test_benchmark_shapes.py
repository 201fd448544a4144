"""benchmarks/shapes.py: every generated shape is a file perflint parses and checks (a shape
that failed to parse would time an error path), and the script prints one row per shape."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("shapes", ROOT / "benchmarks" / "shapes.py")
shapes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shapes)


@pytest.mark.parametrize("name", sorted(shapes.SHAPES))
def test_each_shape_is_valid_python_that_grows_with_n(name):
    small, large = shapes.SHAPES[name](5), shapes.SHAPES[name](10)
    ast.parse(small)
    ast.parse(large)
    assert large.count("\n") > small.count("\n")


def test_the_script_prints_a_row_per_shape():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "shapes.py"), "--units", "3", "--only", "calls", "elif"],
                       capture_output=True, text=True, check=True)
    rows = [line for line in r.stdout.splitlines() if line.startswith("| calls") or line.startswith("| elif")]
    assert len(rows) == 2 and all(len(row.split("|")) == 7 for row in rows)
