"""`[tool.perflint]` in pyproject.toml, command-line overrides, and the target torch version.

Each checked file uses the nearest `pyproject.toml` above it that has a `[tool.perflint]`
table (or `--config FILE` for all).  Keys use ruff's spelling:

    select, extend-select, ignore, per-file-ignores, exclude, extend-exclude,
    target-torch, unsafe-fixes, respect-gitignore, fixable, unfixable

The target torch version is `target-torch` if set, else the lower bound of the project's
declared torch requirement (pyproject dependencies, then requirements*.txt), else 2.4.  It is
never the installed torch.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

DEFAULT_TARGET = (2, 4)
DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".perflint_cache", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox",
    ".venv", "__pypackages__", "_build", "buck-out", "build", "dist", "node_modules", "site-packages",
    "venv",
)
KNOWN_KEYS = {
    "select": list,
    "extend-select": list,
    "ignore": list,
    "per-file-ignores": dict,
    "exclude": list,
    "extend-exclude": list,
    "target-torch": str,
    "unsafe-fixes": bool,
    "respect-gitignore": bool,
    "fixable": list,
    "unfixable": list,
}


class ConfigError(Exception):
    """A broken configuration: one line, naming the file and the key."""


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None  # None: the default set
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    target_torch: tuple[int, int] | None = None
    target_source: str = "default"
    unsafe_fixes: bool = False
    respect_gitignore: bool = True
    fixable: tuple[str, ...] | None = None
    unfixable: tuple[str, ...] = ()
    root: str = "."  # folder that relative patterns are anchored at
    config_file: str | None = None

    def effective_target(self) -> tuple[int, int]:
        return self.target_torch or DEFAULT_TARGET


def parse_version(text: str, where: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", str(text))
    if not m:
        raise ConfigError(f"{where}: target-torch must look like \"2.4\", got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _check_codes(codes: list, where: str, key: str) -> tuple[str, ...]:
    from perflint.selection import validate_selector

    out = []
    for c in codes:
        if not isinstance(c, str):
            raise ConfigError(f"{where}: `{key}` must be a list of rule codes, got {c!r}")
        err = validate_selector(c)
        if err:
            raise ConfigError(f"{where}: `{key}`: {err}")
        out.append(c.strip().upper())
    return tuple(out)


def load_pyproject(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8: {exc.reason}") from None


def settings_from_table(table: object, where: str, root: Path) -> Settings:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [tool.perflint] must be a table")
    kwargs: dict = {"root": str(root), "config_file": where}
    for key, value in table.items():
        if key not in KNOWN_KEYS:
            hint = _close(key)
            raise ConfigError(f"{where}: unknown key `{key}` in [tool.perflint]{hint}")
        want = KNOWN_KEYS[key]
        if key == "target-torch" and isinstance(value, (int, float)):
            value = str(value)
        if not isinstance(value, want):
            raise ConfigError(f"{where}: `{key}` must be a {want.__name__}, got {type(value).__name__}")
        attr = key.replace("-", "_")
        if key in ("select", "extend-select", "ignore", "fixable", "unfixable"):
            kwargs[attr] = _check_codes(value, where, key)
        elif key in ("exclude", "extend-exclude"):
            if not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}: `{key}` must be a list of strings")
            kwargs[attr] = tuple(value)
        elif key == "per-file-ignores":
            pfi = []
            for pattern, codes in value.items():
                if not isinstance(codes, list):
                    raise ConfigError(f"{where}: `per-file-ignores` for {pattern!r} must be a list of codes")
                pfi.append((pattern, _check_codes(codes, where, f"per-file-ignores.{pattern}")))
            kwargs[attr] = tuple(pfi)
        elif key == "target-torch":
            kwargs["target_torch"] = parse_version(value, f"{where}: `target-torch`")
            kwargs["target_source"] = f"{where} [tool.perflint] target-torch"
        else:
            kwargs[attr] = value
    return Settings(**kwargs)


def _close(key: str) -> str:
    import difflib

    m = difflib.get_close_matches(key, list(KNOWN_KEYS), n=1)
    return f" (did you mean `{m[0]}`?)" if m else ""


# ----------------------------------------------------------------------------------------
# Torch requirement → target version
# ----------------------------------------------------------------------------------------


def torch_lower_bound(requirements: list[str]) -> tuple[int, int] | None:
    """The smallest torch version a list of PEP 508 requirement strings allows, if bounded."""
    best: tuple[int, int] | None = None
    for line in requirements:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() != "torch":
            continue
        lower = None
        for spec in req.specifier:
            if spec.operator in (">=", "==", "~=", "===", ">"):
                try:
                    v = Version(spec.version.rstrip(".*"))
                except InvalidVersion:
                    continue
                cand = (v.major, v.minor)
                lower = cand if lower is None else max(lower, cand)
        if lower is not None:
            best = lower if best is None else min(best, lower)
    return best


def _pyproject_requirements(data: dict) -> list[str]:
    reqs = list(data.get("project", {}).get("dependencies", []) or [])
    for extra in (data.get("project", {}).get("optional-dependencies", {}) or {}).values():
        reqs.extend(extra or [])
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {}) or {}
    if "torch" in poetry:
        spec = poetry["torch"]
        if isinstance(spec, dict):
            spec = spec.get("version", "")
        if isinstance(spec, str):
            spec = spec.strip()
            if spec.startswith("^"):
                spec = ">=" + spec[1:]
            elif spec and spec[0].isdigit():
                spec = "==" + spec
            reqs.append(f"torch{spec}")
    return [r for r in reqs if isinstance(r, str)]


def detect_target(project_dir: Path, data: dict | None) -> tuple[tuple[int, int] | None, str]:
    if data is not None:
        found = torch_lower_bound(_pyproject_requirements(data))
        if found is not None:
            return found, f"{project_dir / 'pyproject.toml'} torch requirement"
    for req_file in sorted(project_dir.glob("requirements*.txt")):
        try:
            lines = req_file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        found = torch_lower_bound(lines)
        if found is not None:
            return found, f"{req_file} torch requirement"
    return None, "default"


# ----------------------------------------------------------------------------------------
# Finding the configuration for a file
# ----------------------------------------------------------------------------------------


@dataclass
class Resolver:
    """Finds and caches the settings for each directory; applies CLI overrides."""

    overrides: dict = field(default_factory=dict)
    config_file: Path | None = None
    _cache: dict = field(default_factory=dict)

    def for_path(self, path: Path) -> Settings:
        directory = path if path.is_dir() else path.parent
        return self._for_dir(directory.resolve())

    def _for_dir(self, directory: Path) -> Settings:
        if directory in self._cache:
            return self._cache[directory]
        if self.config_file is not None:
            settings = self._explicit()
        else:
            settings = self._discover(directory)
        settings = self._apply_overrides(settings)
        self._cache[directory] = settings
        return settings

    def _explicit(self) -> Settings:
        if "__explicit__" in self._cache:
            return self._cache["__explicit__"]
        path = self.config_file
        assert path is not None
        if not path.exists():
            raise ConfigError(f"{path}: config file not found")
        data = load_pyproject(path)
        table = data.get("tool", {}).get("perflint", {}) if path.name == "pyproject.toml" else data
        s = settings_from_table(table, str(path), path.parent.resolve())
        if s.target_torch is None:
            t, src = detect_target(path.parent, data if path.name == "pyproject.toml" else None)
            s = replace(s, target_torch=t, target_source=src)
        self._cache["__explicit__"] = s
        return s

    def _discover(self, directory: Path) -> Settings:
        cur = directory
        first_project: tuple[Path, dict] | None = None
        while True:
            candidate = cur / "pyproject.toml"
            if candidate.is_file():
                data = load_pyproject(candidate)
                if first_project is None:
                    first_project = (cur, data)
                table = data.get("tool", {}).get("perflint")
                if table is not None:
                    s = settings_from_table(table, str(candidate), cur)
                    if s.target_torch is None:
                        t, src = detect_target(cur, data)
                        s = replace(s, target_torch=t, target_source=src)
                    return s
            if cur.parent == cur:
                break
            cur = cur.parent
        # No [tool.perflint]: defaults, with the target from the nearest project.
        if first_project is not None:
            root, data = first_project
            t, src = detect_target(root, data)
            return Settings(root=str(root), target_torch=t, target_source=src)
        cur = directory
        while True:
            t, src = detect_target(cur, None)
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
            changes["select"] = tuple(o["select"])
            changes["extend_select"] = ()
        if o.get("extend_select"):
            changes["extend_select"] = tuple(changes.get("extend_select", s.extend_select)) + tuple(o["extend_select"])
        if o.get("ignore"):
            changes["ignore"] = tuple(s.ignore) + tuple(o["ignore"])
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
