"""`[tool.perflint]` in pyproject.toml, command-line overrides, and the target torch version.

Each checked file uses the nearest `pyproject.toml` above it that has a `[tool.perflint]`
table (as ruff does with `[tool.ruff]`), or `--config FILE` for all.  Keys use ruff's
spelling:

    select, extend-select, ignore, per-file-ignores, exclude, extend-exclude,
    target-torch, unsafe-fixes, respect-gitignore, fixable, unfixable, lint-tests, lint-benchmarks

The target torch version is `--target-torch`, else `target-torch` in the configuration,
else the lower bound of the project's declared torch requirement (the nearest
pyproject.toml's dependencies, optional dependencies and dependency groups, then
requirements*.txt beside it, setup.cfg / setup.py, conda environment*.yml, cog.yaml, requirements files one
folder down; else the lowest torch version the README, install notes or Dockerfiles name),
else 2.4.  It is never the installed torch.

A broken configuration raises `ConfigError` with one line that names the file and the key.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from perflint.torchdocs import docs_bound as _docs_bound, read_text as _read_text


DEFAULT_TARGET = (2, 4)
DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".perflint_cache", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox",
    ".venv", "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules", "site-packages",
    "venv",
)
# key → (python type, how the type is named in an error message)
KNOWN_KEYS: dict[str, tuple[type, str]] = {
    "select": (list, "a list of rule codes"),
    "extend-select": (list, "a list of rule codes"),
    "ignore": (list, "a list of rule codes"),
    "per-file-ignores": (dict, "a table of glob = [rule codes]"),
    "exclude": (list, "a list of glob patterns"),
    "extend-exclude": (list, "a list of glob patterns"),
    "target-torch": (str, 'a version string such as "2.4"'),
    "unsafe-fixes": (bool, "true or false"),
    "respect-gitignore": (bool, "true or false"),
    "fixable": (list, "a list of rule codes"),
    "unfixable": (list, "a list of rule codes"),
    "lint-tests": (bool, "true or false"),
    "lint-benchmarks": (bool, "true or false"),
}
_CODE_KEYS = ("select", "extend-select", "ignore", "fixable", "unfixable")
_TOML_TYPE = {str: "a string", bool: "a boolean", int: "an integer", float: "a float", list: "an array",
              dict: "a table"}


class ConfigError(Exception):
    """A broken configuration: one line, naming the file and the key."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None  # None: the default set
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    # The command line's --select/--extend-select/--ignore: a second layer resolved on top
    # of the configuration's, as in ruff (a --select on the command line starts afresh).
    cli_select: tuple[str, ...] | None = None
    cli_extend_select: tuple[str, ...] = ()
    cli_ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    target_torch: tuple[int, int] | None = None
    target_source: str = "default"
    unsafe_fixes: bool = False
    respect_gitignore: bool = True
    lint_tests: bool = False  # report warnings in pytest test files too (errors always are)
    lint_benchmarks: bool = False  # report warnings in benchmark scripts too (errors always are)
    fixable: tuple[str, ...] | None = None
    unfixable: tuple[str, ...] = ()
    root: str = "."  # folder that relative patterns are anchored at
    config_file: str | None = None

    def effective_target(self) -> tuple[int, int]:
        return self.target_torch or DEFAULT_TARGET


def parse_version(text: object, where: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", str(text))
    if not m:
        raise ConfigError(f"{where}: must be a torch version such as \"2.4\", got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _type_name(value: object) -> str:
    return _TOML_TYPE.get(type(value), type(value).__name__)


def _check_codes(codes: list, where: str, label: str) -> tuple[str, ...]:
    """`label` names the key in messages, e.g. "`select`"."""
    from perflint.selection import validate_selector

    out = []
    for c in codes:
        if not isinstance(c, str):
            raise ConfigError(f"{where}: {label} must be a list of rule codes, got an item that is {_type_name(c)}: {c!r}")
        err = validate_selector(c)
        if err:
            raise ConfigError(f"{where}: {label}: {err}")
        out.append(c.strip().upper())
    return tuple(out)


def load_toml(path: Path) -> dict:
    import tomllib  # only where there is a configuration file to read

    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}", str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8: {exc.reason}", str(path)) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a TOML file", str(path)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}", str(path)) from None




def settings_from_table(table: object, where: str, root: Path) -> Settings:
    """Settings from a `[tool.perflint]` table; `where` names the file in error messages."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [tool.perflint] must be a table, got {_type_name(table)}", where)
    kwargs: dict = {"root": str(root), "config_file": where}
    for key, value in table.items():
        try:
            _one_key(kwargs, key, value, where)
        except ConfigError as exc:
            exc.path = where
            raise
    return Settings(**kwargs)


def _one_key(kwargs: dict, key: str, value: object, where: str) -> None:
    if key not in KNOWN_KEYS:
        raise ConfigError(f"{where}: unknown key `{key}` in [tool.perflint]{_close(key)}")
    want, described = KNOWN_KEYS[key]
    if key == "target-torch" and isinstance(value, float):
        raise ConfigError(f"{where}: `target-torch` must be a string such as \"2.4\" (a TOML float like "
                          f"{value!r} loses digits: 2.10 reads as 2.1), got {value!r}")
    if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
        raise ConfigError(f"{where}: `{key}` must be {described}, got {_type_name(value)}: {value!r}")
    attr = key.replace("-", "_")
    if key in _CODE_KEYS:
        kwargs[attr] = _check_codes(value, where, f"`{key}`")  # type: ignore[arg-type]
    elif key in ("exclude", "extend-exclude"):
        for v in value:  # type: ignore[union-attr]
            if not isinstance(v, str):
                raise ConfigError(f"{where}: `{key}` must be {described}, got an item that is {_type_name(v)}: {v!r}")
        kwargs[attr] = tuple(value)  # type: ignore[arg-type]
    elif key == "per-file-ignores":
        pfi = []
        for pattern, codes in value.items():  # type: ignore[union-attr]
            if not isinstance(codes, list):
                raise ConfigError(f"{where}: `per-file-ignores` entry {pattern!r} must be a list of rule codes, "
                                  f"got {_type_name(codes)}: {codes!r}")
            pfi.append((pattern, _check_codes(codes, where, f"`per-file-ignores` entry {pattern!r}")))
        kwargs[attr] = tuple(pfi)
    elif key == "target-torch":
        kwargs["target_torch"] = parse_version(value, f"{where}: `target-torch`")
        kwargs["target_source"] = f"{where} [tool.perflint] target-torch"
    else:
        kwargs[attr] = value


def _close(key: str) -> str:
    import difflib

    m = difflib.get_close_matches(key.replace("_", "-"), list(KNOWN_KEYS), n=1)
    return f" (did you mean `{m[0]}`?)" if m else ""


# ---- Torch requirement → target version -------------------------------------------------

_OPTION = re.compile(r"\s(?:--?[A-Za-z])")  # start of ` --hash=…`, ` -e` … after a requirement


def _logical_lines(lines: list[str]) -> list[str]:
    """Join backslash continuations and drop comments, as pip reads a requirements file."""
    out: list[str] = []
    buf = ""
    for line in lines:
        line = re.sub(r"(^|\s)#.*$", "", line)
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((buf + line).strip())
        buf = ""
    if buf:
        out.append(buf.strip())
    return [line for line in out if line]


_REQ = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*(.*)$")
_SPEC = re.compile(r"^(~=|===|==|!=|<=|>=|<|>)\s*v?(\d+)(?:\.(\d+))?[\w.*+!-]*$")


def _fast_specifiers(line: str) -> tuple[str, list[tuple[str, tuple[int, int]]]] | None:
    """(name, [(operator, (major, minor))]) of a plain PEP 508 requirement, or None when the
    line needs the full parser (`packaging`, imported only then: a run's start-up pays for
    it otherwise)."""
    m = _REQ.match(line)
    if m is None:
        return None
    name, rest = m.group(1), m.group(2).split(";", 1)[0].strip()
    if rest.startswith("@"):
        return name, []
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1]
    out = []
    for part in filter(None, (p.strip() for p in rest.split(","))):
        sm = _SPEC.match(part)
        if sm is None or "!" in part[len(sm.group(1)):]:  # an epoch, or not a version
            return None
        if part.endswith(".*") and sm.group(1) not in ("==", "!="):
            return None  # not valid PEP 440: the full parser decides
        out.append((sm.group(1), (int(sm.group(2)), int(sm.group(3) or 0))))
    return name, out


def _specifiers(line: str) -> tuple[str, list[tuple[str, tuple[int, int]]]] | None:
    fast = _fast_specifiers(line)
    if fast is not None:
        return fast
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    out = []
    for spec in req.specifier:
        text = spec.version[:-2] if spec.version.endswith(".*") else spec.version
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        out.append((spec.operator, (v.major, v.minor)))
    return req.name, out


def _lower_bound(specs: list[tuple[str, tuple[int, int]]]) -> tuple[int, int] | None:
    lower = None
    for op, cand in specs:
        if op not in (">=", "==", "~=", "===", ">"):
            continue
        lower = cand if lower is None else max(lower, cand)
    return lower


def torch_lower_bound(requirements: list[str]) -> tuple[int, int] | None:
    """The smallest torch version that a list of PEP 508 requirement strings (or the lines
    of a requirements file) allows, if the torch requirements are bounded below.

    Several torch requirements (for other markers or extras) give the lowest of their
    bounds; requirements with no lower bound (`torch`, `torch<3`) are not counted.
    `pytorch==1.3.1` (conda's name for torch) counts as a torch requirement, and so does a
    conda environment's line pasted into a requirements file (`- pytorch=1.4.0=py3.7_cuda10.0`).
    """
    best: tuple[int, int] | None = None
    for line in _logical_lines(requirements):
        if "torch" not in line.lower():
            continue
        if line.startswith("-"):  # a pip option (`-r`, `-e`), or a conda line
            m = _CONDA_REQ.match(line)
            if m:
                lower = (int(m.group(2)), int(m.group(3)))
                best = lower if best is None else min(best, lower)
            continue
        line = _OPTION.split(line, 1)[0].strip()
        parsed = _specifiers(line)
        if parsed is None or parsed[0].lower() not in ("torch", "pytorch"):
            continue  # "pytorch" is conda's name, often written in requirements files too
        lower = _lower_bound(parsed[1])
        if lower is not None:
            best = lower if best is None else min(best, lower)
    return best


def _names_torch(requirements: list[str]) -> bool:
    """Whether the lines ask for torch at all (`torch`, `torch<3`, `torch==1.13.1`)."""
    for line in _logical_lines(requirements):
        if "torch" in line.lower() and not line.startswith("-"):
            parsed = _specifiers(_OPTION.split(line, 1)[0].strip())
            if parsed is not None and parsed[0].lower() in ("torch", "pytorch"):
                return True
    return False


def _poetry_spec(spec: object) -> str | None:
    if isinstance(spec, dict):
        spec = spec.get("version", "")
    if isinstance(spec, list):  # multiple constraints: the lowest bound wins
        parts = [p for p in (_poetry_spec(s) for s in spec) if p]
        return parts[0] if parts else None
    if not isinstance(spec, str):
        return None
    spec = spec.strip()
    if not spec or spec == "*":
        return ""
    if spec.startswith("^"):
        return ">=" + spec[1:].strip()
    if spec.startswith("~") and not spec.startswith("~="):
        return ">=" + spec[1:].strip()
    if spec[0].isdigit():
        return "==" + spec
    return spec


def _pyproject_requirements(data: dict) -> list[str]:
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    reqs: list = list(project.get("dependencies", []) or [])
    extras = project.get("optional-dependencies", {}) or {}
    if isinstance(extras, dict):
        for extra in extras.values():
            if isinstance(extra, list):
                reqs.extend(extra)
    groups = data.get("dependency-groups", {}) or {}
    if isinstance(groups, dict):
        for group in groups.values():
            if isinstance(group, list):
                reqs.extend(r for r in group if isinstance(r, str))
    tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
    poetry = tool.get("poetry", {}) if isinstance(tool.get("poetry"), dict) else {}
    tables = [poetry.get("dependencies", {})]
    for group in (poetry.get("group", {}) or {}).values() if isinstance(poetry.get("group"), dict) else ():
        if isinstance(group, dict):
            tables.append(group.get("dependencies", {}))
    for table in tables:
        if isinstance(table, dict) and "torch" in table:
            spec = _poetry_spec(table["torch"])
            if spec is not None:
                reqs.append(f"torch{spec}")
    return [r for r in reqs if isinstance(r, str)]


def _requirement_files(project_dir: Path) -> list[Path]:
    files = sorted(project_dir.glob("requirements*.txt"))
    sub = project_dir / "requirements"
    if sub.is_dir():
        files += sorted(sub.glob("*.txt"))
    elif sub.is_file():  # a pip requirements file named without its extension (Cream's CDARTS)
        files.append(sub)
    return [f for f in files if f.is_file()]


def _read_requirements(path: Path, depth: int = 0) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        m = re.match(r"\s*(?:-r|--requirement|-c|--constraint)[\s=]+(\S+)", line)
        if m:
            if depth < 5:
                out.extend(_read_requirements(path.parent / m.group(1), depth + 1))
            continue
        out.append(line)
    return out


# A torch requirement written as a string in setup.py (`install_requires=["torch>=1.8"]`).
_SETUP_PY_REQ = re.compile(r"""["']\s*(torch\s*(?:\[[^\]]*\])?\s*[<>=!~][^"']*)["']""")
# A conda dependency line: `- pytorch=1.13`, `- pytorch::pytorch>=2.0`, `- torch==2.1.0` (pip).
_CONDA_REQ = re.compile(r"^\s*-\s*[\"']?(?:[\w.-]+::)?(?:py)?torch\s*(==|=|>=|~=|>)\s*v?(\d+)\.(\d+)")


def _setup_requirements(project_dir: Path) -> tuple[list[str], Path] | None:
    for name in ("setup.cfg", "setup.py"):
        text = _read_text(project_dir / name)
        if not text:
            continue
        if name == "setup.py":
            reqs = [m.group(1) for m in _SETUP_PY_REQ.finditer(text)]
        else:  # `install_requires =` continuation lines, extras, `torch>=1.8` on a line of its own
            reqs = [line.strip() for line in text.splitlines()]
        if torch_lower_bound(reqs) is not None:
            return reqs, project_dir / name
    return None


_CONDA_FILES = ("environment.yml", "environment.yaml", "env.yml", "conda.yaml")
# Variants beside them: `environment_gpu.yml` and `environment_cpu.yml`, `conda-cuda11.yaml`.
_CONDA_GLOBS = ("environment*.yml", "environment*.yaml", "env[-_]*.yml", "conda*.yml", "conda*.yaml")


def _conda_bound(project_dir: Path) -> tuple[tuple[int, int], Path] | None:
    """The lowest torch a conda environment file of the project pins; with several files
    (one for the GPU, one for the CPU), the lowest over all of them."""
    names = list(_CONDA_FILES)
    try:  # one listing of the folder, not one per pattern
        with os.scandir(project_dir) as entries:
            listed = [e.name for e in entries]
        names += sorted({n for n in listed if any(fnmatch.fnmatchcase(n, g) for g in _CONDA_GLOBS)} - set(_CONDA_FILES))
    except OSError:
        pass
    found = None
    for name in names:
        path = project_dir / name
        for line in _read_text(path).splitlines():
            m = _CONDA_REQ.match(line.split("#", 1)[0])
            if m:
                v = (int(m.group(2)), int(m.group(3)))
                if found is None or v < found[0]:
                    found = (v, path)
    return found


# Replicate's cog.yaml lists the image's pip packages: `python_packages: - "torch==1.10.0"`.
_COG_REQ = re.compile(r"^\s*-\s*[\"']?torch\s*(?:==|>=|~=)\s*v?(\d+)\.(\d+)", re.M)


def _cog_bound(project_dir: Path) -> tuple[tuple[int, int], Path] | None:
    """The torch a `cog.yaml` installs (the lowest where it names several)."""
    path = project_dir / "cog.yaml"
    found = [(int(m.group(1)), int(m.group(2))) for m in _COG_REQ.finditer(_read_text(path))]
    return (min(found), path) if found else None


# Code written for torch 0.3 or older: `Variable(x, volatile=True)` (no effect since 0.4) and
# a loss read as `loss.data[0]` (an error since 0.5), with nothing from 0.4 or later
# (`.item()`, `torch.no_grad`, AMP, `torch.compile` …).  Advice for today's torch does not
# apply to such a project, and its fixes would not run on the torch it was written for.
_LEGACY_CODE = re.compile(rb"\bvolatile\s*=\s*True|\b\w*loss\w*\.data\[0\]|\.(?:sum|mean)\(\)\.data\[0\]", re.I)
_MODERN_CODE = re.compile(rb"\.item\(\)|\btorch\.(?:cuda\.)?amp\b|\bautocast\b|\btorch\.compile\b|persistent_workers"
                          rb"|set_to_none|\bno_grad\b|\binference_mode\b|\bGradScaler\b")
# A C extension built with `torch.utils.ffi` (removed in 1.0): the project runs on 0.4 at most.
_FFI_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+torch\.utils\.ffi[ \t]+import|import[ \t]+torch\.utils\.ffi\b)", re.M)
LEGACY_TARGET = (0, 4)
_SCAN_FILES, _SCAN_BYTES = 3000, 64 << 20


def _legacy_code(project_dir: Path) -> tuple[Path, str] | None:
    """A Python file that shows the project was written for torch 0.4 or older, and why: a
    build script that imports `torch.utils.ffi` (removed in 1.0: its C extensions build only
    there), or a file that shows torch 0.3 (`_LEGACY_CODE`) when no other file shows 0.4 or
    later.  None when there is none.  The files are the project's as the project model
    walks them (`analysis.project.project_paths`)."""
    from perflint.analysis.project import project_paths

    legacy = None
    size = 0
    paths = []
    for n, path in enumerate(project_paths(str(project_dir))):
        if n >= _SCAN_FILES:
            break
        paths.append(path)
    for path in paths:
        if Path(path).name.startswith(("build", "setup", "make")):
            try:
                if _FFI_IMPORT.search(Path(path).read_bytes()):
                    return Path(path), "imports `torch.utils.ffi`, removed in torch 1.0"
            except OSError:
                continue
    for path in paths:
        if size > _SCAN_BYTES:
            break
        try:
            raw = Path(path).read_bytes()
        except OSError:
            continue
        size += len(raw)
        if _MODERN_CODE.search(raw):
            return None
        if legacy is None and _LEGACY_CODE.search(raw):
            legacy = Path(path)
    return (legacy, "code written for torch 0.3: `volatile=True` or `loss.data[0]`") if legacy is not None else None


_ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def detect_target(project_dir: Path, data: dict | None) -> tuple[tuple[int, int] | None, str]:
    """The lower bound of a project's torch requirement: pyproject.toml, requirements files,
    setup.cfg / setup.py, a conda environment file, then requirements files one folder down
    (`installation/requirements.txt`, `docker/requirements.txt`), lowest bound first found;
    else, at a project's root, the lowest torch version its README, install notes or
    Dockerfiles name (`_DOC_BOUNDS`), else 0.4 for a project whose code was written for
    torch 0.3 (`_LEGACY_CODE`) or builds a C extension with `torch.utils.ffi`."""
    if data is not None:
        found = torch_lower_bound(_pyproject_requirements(data))
        if found is not None:
            return found, f"{project_dir / 'pyproject.toml'} torch requirement"
    files = _requirement_files(project_dir)
    main = project_dir / "requirements.txt"
    if main in files and _names_torch(_read_requirements(main)):
        # The main file asks for torch, bounded or not: the variants beside it
        # (`requirements_onnx_encoder.txt`'s export pins, a platform's file) are not the project's bound.
        files = [main]
    for req_file in files:
        found = torch_lower_bound(_read_requirements(req_file))
        if found is not None:
            return found, f"{req_file} torch requirement"
    setup = _setup_requirements(project_dir)
    if setup is not None:
        return torch_lower_bound(setup[0]), f"{setup[1]} torch requirement"
    conda = _conda_bound(project_dir)
    if conda is not None:
        return conda[0], f"{conda[1]} torch requirement"
    try:
        at_root = any((project_dir / m).exists() for m in _ROOT_MARKERS)
    except OSError:
        at_root = False
    cog = _cog_bound(project_dir)
    if cog is not None:
        # A cog.yaml builds the image a demo's `predict.py` runs in; the README's older torch
        # is what training was written for (ALBEF: cog's 1.10, "pytorch 1.8.0" in its README).
        docs = _docs_bound(project_dir) if at_root else None
        if docs is not None and docs[0] < cog[0]:
            return docs[0], f"{docs[1]} (the torch version it names)"
        return cog[0], f"{cog[1]} torch requirement"
    # One folder down only at a project's root (a marker beside it), never from a folder that
    # merely holds several projects, nor from a folder of Python code: another project of the
    # repository (Cream's AutoFormer beside CDARTS), whose requirements are its own.
    try:
        at_root = any((project_dir / m).exists() for m in _ROOT_MARKERS)
        subdirs = sorted(d for d in project_dir.iterdir() if d.is_dir() and not d.name.startswith(".")
                         and not any(f.suffix == ".py" for f in d.iterdir())) if at_root else []
    except OSError:
        subdirs = []
    for sub in subdirs[:200]:
        for req_file in sorted(sub.glob("requirements*.txt")):
            found = torch_lower_bound(_read_requirements(req_file))
            if found is not None:
                return found, f"{req_file} torch requirement"
    docs = _docs_bound(project_dir) if at_root else None
    if docs is not None:
        return docs[0], f"{docs[1]} (the torch version it names)"
    legacy = _legacy_code(project_dir) if at_root else None
    if legacy is not None:
        return LEGACY_TARGET, f"{legacy[0]} ({legacy[1]})"
    return None, "default"


# ---- Finding the configuration for a file ----------------------------------------------

# Target sources that are the project's package metadata (see `Resolver._folder_docs`).
_PACKAGE_METADATA = ("pyproject.toml torch requirement", "setup.py torch requirement", "setup.cfg torch requirement")


@dataclass
class Resolver:
    """Finds and caches the settings for each directory; applies command-line overrides.

    `for_path` raises ConfigError (every time, for every file under it) when the
    configuration that governs the path is broken; callers report it once.
    """

    overrides: dict = field(default_factory=dict)
    config_file: Path | None = None
    _cache: dict = field(default_factory=dict)
    _toml: dict = field(default_factory=dict)
    _targets: dict = field(default_factory=dict)

    def _detect(self, project_dir: Path, data: dict | None) -> tuple[tuple[int, int] | None, str]:
        key = (project_dir, data is not None)
        if key not in self._targets:
            self._targets[key] = detect_target(project_dir, data)
        return self._targets[key]

    def for_path(self, path: Path) -> Settings:
        p = Path(path)
        try:
            directory = p if p.is_dir() else p.parent
        except OSError:
            directory = p.parent
        return self._for_dir(directory.absolute())

    def _for_dir(self, directory: Path) -> Settings:
        hit = self._cache.get(directory)
        if hit is None:
            try:
                real = directory.resolve()
            except (OSError, RuntimeError):
                real = directory
            hit = self._cache.get(real)
            if hit is None:
                try:
                    settings = self._explicit() if self.config_file is not None else self._discover(real)
                    hit = self._apply_overrides(self._folder_docs(real, settings))
                except ConfigError as exc:
                    hit = exc
                except OSError as exc:  # a folder above that cannot be searched
                    where = exc.filename or str(real)
                    hit = ConfigError(f"{where}: cannot look for pyproject.toml: {exc.strerror or exc}", str(where))
                self._cache[real] = hit
            self._cache[directory] = hit
        if isinstance(hit, ConfigError):
            raise hit
        return hit

    def _folder_docs(self, directory: Path, s: Settings) -> Settings:
        """A folder below the project's root whose own README or install notes name an older
        torch than the project's (an `old/` version kept beside the current code, one task of
        a repository of several): its files target that torch. Only ever lowers a target the
        project's files gave, never a configured one, nor one the project's package metadata
        declares (pyproject.toml, setup.py, setup.cfg): the repository's scripts run with the
        package installed, so a sub-folder README's install line for one example (diffusers'
        `examples/community/README.md`: `pytorch==1.10.1` for one pipeline, under a
        `torch>=2.6` in setup.py) does not describe them."""
        if self.config_file is not None or s.target_source.endswith("target-torch"):
            return s
        if s.target_source.endswith(_PACKAGE_METADATA):
            return s
        root = Path(s.root)
        if not directory.is_relative_to(root):  # nothing named a torch: the nearest project root
            root = next((d for d in directory.parents if any((d / m).exists() for m in _ROOT_MARKERS)), directory)
        memo = self._cache.setdefault("__docs__", {})
        cur = directory
        while cur != root:
            if cur not in memo:
                memo[cur] = _docs_bound(cur)
            if memo[cur] is not None:
                bound, path = memo[cur]
                if s.target_torch is None or bound < s.target_torch:
                    return replace(s, target_torch=bound, target_source=f"{path} (the torch version it names)")
                return s
            cur = cur.parent
        return s

    def _load(self, path: Path) -> dict:
        hit = self._toml.get(path)
        if hit is None:
            try:
                hit = load_toml(path)
            except ConfigError as exc:
                hit = exc
            self._toml[path] = hit
        if isinstance(hit, ConfigError):
            raise hit
        return hit

    def _explicit(self) -> Settings:
        path = self.config_file
        assert path is not None
        if not path.exists():
            raise ConfigError(f"{path}: config file not found", str(path))
        data = self._load(path)
        tool = data.get("tool") if isinstance(data.get("tool"), dict) else None
        if path.name == "pyproject.toml" or (tool is not None and "perflint" in tool):
            table = (tool or {}).get("perflint", {})
        else:
            table = data  # a perflint.toml-style file: the keys at the top level
        s = settings_from_table(table, str(path), path.parent.resolve())
        if s.target_torch is None:
            t, src = detect_target(path.parent, data if path.name == "pyproject.toml" else None)
            s = replace(s, target_torch=t, target_source=src)
        return s

    def _find(self, directory: Path) -> tuple[tuple[Path, dict] | None, tuple[Path, dict] | None]:
        """(the nearest folder with a [tool.perflint] table and its pyproject data, the
        nearest folder with any pyproject.toml and its data), memoised per folder."""
        memo = self._cache.setdefault("__find__", {})
        if directory in memo:
            return memo[directory]
        candidate = directory / "pyproject.toml"
        data = self._load(candidate) if candidate.is_file() else None
        if directory.parent == directory:
            config, project = None, None
        else:
            config, project = self._find(directory.parent)
        if data is not None:
            project = (directory, data)
            tool = data.get("tool")
            if isinstance(tool, dict) and tool.get("perflint") is not None:
                config = (directory, data)
        memo[directory] = (config, project)
        return config, project

    def _discover(self, directory: Path) -> Settings:
        config, project = self._find(directory)
        if config is not None:
            cdir, cdata = config
            key = ("__settings__", cdir, project[0] if project else None)
            if key in self._cache:
                return self._cache[key]
            where = str(cdir / "pyproject.toml")
            s = settings_from_table(cdata["tool"]["perflint"], where, cdir)
            if s.target_torch is None:
                # The nearest project's torch requirement, else the configuration's own.
                t, src = self._detect(*project) if project is not None else (None, "default")
                if t is None and project is not None and project[0] != cdir:
                    t, src = self._detect(cdir, cdata)
                s = replace(s, target_torch=t, target_source=src)
            self._cache[key] = s
            return s
        # No [tool.perflint]: defaults, with the target from the nearest project.
        if project is not None:
            root, data = project
            t, src = self._detect(root, data)
            return Settings(root=str(root), target_torch=t, target_source=src)
        cur = directory
        while True:
            t, src = self._detect(cur, None)
            if t is not None:
                return Settings(root=str(cur), target_torch=t, target_source=src)
            if cur.parent == cur:
                break
            cur = cur.parent
        return Settings(root=str(Path.cwd().resolve()))

    def _apply_overrides(self, s: Settings) -> Settings:
        o = self.overrides
        changes: dict = {}
        if o.get("select") is not None:
            changes["cli_select"] = tuple(o["select"])
        if o.get("extend_select"):
            changes["cli_extend_select"] = tuple(o["extend_select"])
        if o.get("ignore"):
            changes["cli_ignore"] = tuple(o["ignore"])
        if o.get("target_torch") is not None:
            changes["target_torch"] = o["target_torch"]
            changes["target_source"] = "--target-torch"
        if o.get("unsafe_fixes") is not None:
            changes["unsafe_fixes"] = o["unsafe_fixes"]
        if o.get("exclude") is not None:
            changes["exclude"] = tuple(o["exclude"])
        if o.get("extend_exclude"):
            changes["extend_exclude"] = tuple(s.extend_exclude) + tuple(o["extend_exclude"])
        if o.get("respect_gitignore") is not None:
            changes["respect_gitignore"] = o["respect_gitignore"]
        return replace(s, **changes) if changes else s
