"""The content-hash cache in `.perflint_cache/`: hits, misses, and what it never does."""

from __future__ import annotations

import textwrap

import json

import pytest

import perflint.jobs as jobs
from cli_support import AMP, CLEAN, LOADER, cold_then_warm, run, write
from perflint import runner
from perflint.config import Resolver


@pytest.fixture
def proj(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "a.py": AMP, "b.py": LOADER, "c.py": CLEAN})
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def analysed(monkeypatch):
    """The paths the engine analyses (the in-process runs of these small trees)."""
    seen: list[str] = []
    real = jobs.run_job

    def spy(job):
        seen.append(job.path)
        return real(job)

    monkeypatch.setattr(jobs, "run_job", spy)
    return seen


def test_second_run_reads_from_the_cache_and_gives_identical_output(proj, analysed):
    for fmt in ("full", "json"):
        first = run("check", "--output-format", fmt, "-j1", "--no-cache")
        analysed.clear()
        second = run("check", "--output-format", fmt, "-j1")
        assert (second.exit_code, second.stdout, second.stderr) == (first.exit_code, first.stdout, first.stderr)
    analysed.clear()
    for fmt in ("full", "json"):
        second = run("check", "--output-format", fmt, "-j1")
        assert analysed == []
    uncached = run("check", "--output-format", "sarif", "--no-cache")
    analysed.clear()
    cached = run("check", "--output-format", "sarif")
    assert analysed == []
    assert cached.stdout == uncached.stdout
    assert (proj / ".perflint_cache" / "CACHEDIR.TAG").is_file()
    assert (proj / ".perflint_cache" / ".gitignore").read_text().splitlines()[-1] == "*"
    outcome = runner.run(["."], Resolver(), jobs=1)
    assert outcome.cached == 3


def test_editing_a_file_misses_for_that_file_only(proj, analysed):
    run("check", "--extend-select", "PF402", "-j1")
    analysed.clear()
    (proj / "c.py").write_text(CLEAN + AMP)
    r = run("check", "--extend-select", "PF402", "-j1", "--output-format", "concise")
    assert analysed == ["c.py"]
    assert "c.py:6:10: PF402" in r.stdout


def test_one_cache_serves_every_format(proj, analysed):
    """A `full` run fills the cache; every other format (json with its fix edits included)
    is answered from it, with the output of an uncached run."""
    run("check", "--extend-select", "PF402", "-j1")
    assert sorted(analysed) == ["a.py", "b.py", "c.py"]
    for fmt in ("concise", "json", "sarif", "github", "full"):
        analysed.clear()
        cached = run("check", "--extend-select", "PF402", "--output-format", fmt, "-j1")
        assert analysed == [], fmt
        assert cached.stdout == run("check", "--extend-select", "PF402", "--output-format", fmt, "-j1", "--no-cache").stdout, fmt
    edits = json.loads(run("check", "--extend-select", "PF402", "--output-format", "json", "-j1").stdout)[0]["fix"]["edits"]
    assert edits, "the cached JSON still carries the fix's edits"


@pytest.mark.parametrize("change", [["--select", "PF402"], ["--target-torch", "2.3"], ["--extend-select", "ALL"]])
def test_other_settings_miss(proj, analysed, change):
    run("check", "-j1")
    analysed.clear()
    run("check", "-j1", *change)
    assert sorted(analysed) == ["a.py", "b.py", "c.py"]
    analysed.clear()
    run("check", "-j1", *change)
    assert analysed == []


def test_config_change_misses(proj, analysed):
    run("check", "-j1")
    analysed.clear()
    write(proj, {"pyproject.toml": '[tool.perflint]\ntarget-torch = "2.0"\n'})
    r = run("check", "-j1", "--output-format", "json")
    assert sorted(analysed) == ["a.py", "b.py", "c.py"]
    assert "PF402" not in {d["code"] for d in json.loads(r.stdout)}


def test_a_new_perflint_build_misses(proj, analysed, monkeypatch):
    import perflint.cache as cache

    run("check", "-j1")
    analysed.clear()
    monkeypatch.setattr(cache, "code_stamp", lambda: "another-build")
    run("check", "-j1")
    assert sorted(analysed) == ["a.py", "b.py", "c.py"]


def test_no_cache_neither_reads_nor_writes(proj, analysed):
    run("check", "-j1", "--no-cache")
    assert not (proj / ".perflint_cache").exists()
    run("check", "-j1")
    analysed.clear()
    run("check", "-j1", "--no-cache")
    assert sorted(analysed) == ["a.py", "b.py", "c.py"]


def test_files_with_errors_are_not_cached(proj, analysed):
    write(proj, {"bad.py": "import torch\ndef f(:\n"})
    run("check", "-j1")
    analysed.clear()
    r = run("check", "-j1")
    assert analysed == ["bad.py"]
    assert r.exit_code == 2 and "bad.py" in r.stderr


def test_a_corrupt_cache_is_ignored_and_replaced(proj, analysed):
    run("check", "--extend-select", "PF402", "-j1")
    db = proj / ".perflint_cache" / "cache.sqlite3"
    assert db.is_file()
    db.write_bytes(b"not a database, damaged" * 100)
    analysed.clear()
    r = run("check", "--extend-select", "PF402", "-j1", "--output-format", "concise")
    assert sorted(analysed) == ["a.py", "b.py", "c.py"]
    assert "a.py:3:10: PF402" in r.stdout
    analysed.clear()
    run("check", "--extend-select", "PF402", "-j1")  # the damaged file was replaced by a working cache
    assert analysed == []


def test_a_damaged_entry_is_a_miss(proj, analysed):
    import sqlite3

    run("check", "-j1")
    with sqlite3.connect(proj / ".perflint_cache" / "cache.sqlite3") as db:
        db.execute("UPDATE entries SET value = '{not json' WHERE ns LIKE 'results/%' AND key LIKE '%a.py'")
    analysed.clear()
    run("check", "-j1")
    assert analysed == ["a.py"]


def test_one_database_holds_the_results(proj):
    import sqlite3

    run("check", "-j1")
    files = sorted(p.name for p in (proj / ".perflint_cache").iterdir())
    assert files == [".gitignore", "CACHEDIR.TAG", "cache.sqlite3"]
    with sqlite3.connect(proj / ".perflint_cache" / "cache.sqlite3") as db:
        kinds = {k for (k,) in db.execute("SELECT kind FROM spaces")}
    assert "results" in kinds


def test_stale_namespaces_and_entries_are_evicted(tmp_path, monkeypatch):
    import perflint.store as store

    clock = [1_000_000_000]
    monkeypatch.setattr(store.time, "time", lambda: clock[0])
    s = store.Store(tmp_path / "c")
    for n in range(store.KEEP_NAMESPACES + 3):  # one new build a day
        clock[0] += 86400
        assert s.save(f"results/{n}", "results", {"a.py": {"n": n}})
    s.save("summaries/x", "summaries", {"sha": {"kept": True}})
    kept = [n for n in range(store.KEEP_NAMESPACES + 3) if s.load(f"results/{n}")]
    assert kept == list(range(3, store.KEEP_NAMESPACES + 3))  # the most recently used builds
    assert s.load("summaries/x") == {"sha": {"kept": True}}  # other kinds are counted apart
    # An entry used within the period survives; one unused for KEEP_DAYS is deleted.
    last = f"results/{store.KEEP_NAMESPACES + 2}"
    s.save(last, "results", {"b.py": {"n": 1}})
    clock[0] += (store.KEEP_DAYS - 1) * 86400
    s.save(last, "results", {}, used={"b.py"})
    clock[0] += 2 * 86400
    s.save(last, "results", {"c.py": {"n": 2}})
    assert set(s.load(last)) == {"b.py", "c.py"}
    assert s.load("summaries/x") == {}


def test_a_cache_folder_that_cannot_be_made_costs_only_the_cache(tmp_path):
    """A cache folder that cannot be created (its parent is a file: no user, root included,
    can write there): nothing is stored, nothing is read, nothing raises."""
    import perflint.store as store

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder's parent should be\n")
    s = store.Store(blocker / "cache")
    assert s.save("results/x", "results", {"a": 1}) is False
    assert s.load("results/x") == {}
    assert blocker.read_text() == "a file where the cache folder's parent should be\n"


def test_a_run_whose_cache_cannot_be_written_still_reports(proj, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    r = run("check", "--extend-select", "PF402", "-j1", "--output-format", "concise", env={"PERFLINT_CACHE_DIR": str(blocker / "cache")})
    assert r.exit_code == 1 and "a.py:3:10: PF402" in r.stdout


def test_cache_dir_from_the_environment(proj, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("cache")
    run("check", "-j1", env={"PERFLINT_CACHE_DIR": str(elsewhere)})
    assert not (proj / ".perflint_cache").exists()
    assert (elsewhere / "cache.sqlite3").is_file()



def test_a_run_from_a_sub_folder_uses_the_project_roots_cache(proj, analysed, monkeypatch):
    write(proj, {"sub/d.py": AMP})
    run("check", "--extend-select", "PF402", "-j1")
    assert (proj / ".perflint_cache" / "cache.sqlite3").is_file()
    analysed.clear()
    monkeypatch.chdir(proj / "sub")
    r = run("check", "--extend-select", "PF402", "-j1", "d.py", "--output-format", "concise")
    assert "d.py:3:10: PF402" in r.stdout
    assert analysed == []  # answered from the cache the run at the root filled
    assert not (proj / "sub" / ".perflint_cache").exists()

def test_fix_skips_files_the_cache_knows_are_clean_and_check_after_fix_hits(proj, analysed):
    run("check", "-j1")
    analysed.clear()
    r = run("fix", "-j1", "--select", "PF402")  # other settings: nothing known yet
    assert r.exit_code == 0
    run("check", "-j1", "--select", "PF402")
    analysed.clear()
    write(proj, {"d.py": AMP})
    run("fix", "-j1", "--select", "PF402")
    # a.py (fixed), b.py, c.py: known clean for these settings; only d.py is analysed.
    assert analysed == ["d.py"]
    analysed.clear()
    r = run("check", "-j1", "--select", "PF402")
    assert analysed == [] and r.exit_code == 0


def test_a_warm_run_answers_from_the_cache_without_importing_the_rules(tmp_path):
    """A run where every file is a cache hit never imports libcst (a third of a warm run's
    time): rule codes, defaults and severities (for the test-file policy) come from the
    generated rule table (perflint/rules/table.py)."""
    test_module = "import pytest\n" + textwrap.dedent(LOADER)
    write(tmp_path, {"pyproject.toml": "[tool.perflint]\n", "train.py": LOADER, "test_train.py": test_module})
    first, second = cold_then_warm(tmp_path)
    assert first[-1] == "imported libcst: True"
    assert second[-1] == "imported libcst: False"
    assert first[:-1] == second[:-1] and any("train.py" in line for line in first[:-1])
    assert not any("test_train.py" in line for line in second[:-1])  # the test-file policy still holds


def test_another_frameworks_file_is_answered_from_the_cache_too(proj, analysed):
    """A PaddlePaddle or MegEngine script gets no finding, and a warm run does not look at
    it again (its module summary is cached like any other)."""
    write(proj, {"paddle_train.py": "import paddle\nfrom paddle.io import DataLoader\n\n"
                                    "loader = DataLoader(ds, batch_size=8)\nfor x in loader:\n    x = x.cuda()\n"})
    r = run("check", "-j1", "--output-format", "concise")
    assert "paddle_train.py" not in r.stdout
    analysed.clear()
    run("check", "-j1")
    assert analysed == []
