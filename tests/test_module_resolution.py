"""Import resolution across a project's modules answers the same whatever was asked first:
cached answers are compared with answers re-asked in another run, in another order."""

from __future__ import annotations

from perflint.analysis.modules import ModuleResolver


def _reexport_chain(n: int) -> dict[str, dict]:
    """m0 … m{n-1} each re-export `f` from the next module; m{n} defines it."""
    summaries = {f"/p/m{i}.py": {"imports": {"f": f"m{i + 1}.f"}} for i in range(n)}
    summaries[f"/p/m{n}.py"] = {"functions": {"f": {}}}
    return summaries


def test_a_name_resolves_the_same_after_a_deeper_question_cut_its_chain():
    fresh = ModuleResolver("/p", _reexport_chain(5)).resolve("/p/m2.py", "m3.f")
    assert fresh == ("/p/m5.py", "f")
    resolver = ModuleResolver("/p", _reexport_chain(5))
    assert resolver.resolve("/p/m0.py", "m1.f") is None  # past the depth limit from m0
    assert resolver.resolve("/p/m2.py", "m3.f") == fresh


def test_star_imports_bind_the_same_names_whatever_was_asked_first():
    summaries = {
        "/p/a.py": {"stars": ["b"], "libs": {"torch": "torch"}},
        "/p/b.py": {"stars": ["a"], "libs": {"np": "numpy"}},
    }
    b_first = ModuleResolver("/p", summaries)
    b_alone = b_first.star_aliases("/p/b.py")
    a_after = b_first.star_aliases("/p/a.py")
    a_first = ModuleResolver("/p", summaries)
    assert a_first.star_aliases("/p/a.py") == a_after
    assert a_first.star_aliases("/p/b.py") == b_alone
