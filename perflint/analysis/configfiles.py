"""Settings a script reads from a YAML or JSON file of its project, loaded by a literal path
(or an option whose default is one):

    cfg = yaml.safe_load(open("configs/train.yaml"))      # also yaml.load(f, Loader=...),
    with open("configs/train.json") as f:                 # json.load(f), json.loads(p.read_text()),
        cfg = json.load(f)                                # OmegaConf.load(path), EasyDict(...)
    DataLoader(ds, num_workers=cfg["data"]["num_workers"])   # or cfg.get("num_workers", 4),
    device = torch.device(cfg["device"])                      # cfg.data.num_workers (attribute dicts)

`config_value(facts, node)` answers what such an expression holds, as `option_default` does
for argparse defaults: the value the run uses unless the file is edited.  The file is read
through the project view (`ProjectView.config_data`), so the answer is one of the file's
recorded questions: the result cache re-reads the config before it serves a finding.
"""

from __future__ import annotations

import json
import os

import libcst as cst

from perflint.analysis.syntax import NOT_LITERAL, literal_value

# Calls that parse a config document: the argument is an open file, its text, or (for
# OmegaConf) the path itself.
_PARSERS = {"yaml.safe_load", "yaml.load", "yaml.full_load", "yaml.unsafe_load", "json.load", "json.loads"}
_PATH_LOADERS = {"omegaconf.OmegaConf.load"}
# Wrappers that give the parsed mapping attribute access (`cfg.data.num_workers`).
_ATTRIBUTE_DICTS = {"easydict.EasyDict", "munch.munchify", "munch.Munch", "addict.Dict", "addict.addict.Dict",
                    "ml_collections.ConfigDict", "omegaconf.OmegaConf.create"}
_SUFFIXES = (".yaml", ".yml", ".json")
MAX_BYTES = 256 * 1024


def read_config(root: str, here: str, literal: str, read_regular):
    """The parsed content of the config file `literal` names (relative to the project root or
    to the folder of the file that reads it, as a run from either place finds it): a JSON
    value, or None when the file is not in the project, is missing, too large, does not parse
    or the two places hold different files.  `read_regular(path)` gives a regular file's
    bytes (None for anything else)."""
    if not literal.endswith(_SUFFIXES) or os.path.isabs(literal) or "\0" in literal:
        return None
    found = []
    for base in dict.fromkeys((root, here)):
        path = os.path.normpath(os.path.join(base, literal))
        if os.path.commonpath([path, root]) != root or not os.path.isfile(path):
            continue
        if os.path.getsize(path) > MAX_BYTES:
            return None
        raw = read_regular(path)
        if raw is not None:
            found.append(raw)
    if not found or any(raw != found[0] for raw in found):
        return None
    try:
        if literal.endswith(".json"):
            data = json.loads(found[0])
        else:
            import yaml

            data = yaml.safe_load(found[0])
        return json.loads(json.dumps(data))  # only what JSON holds (YAML dates and the like fail)
    except Exception:  # a document that does not parse (yaml.YAMLError, ValueError) or holds no JSON value
        return None


def _path_literal(facts, node: cst.BaseExpression, depth: int = 0) -> str | None:
    """The literal path `node` holds: a string, `Path("x")` / `"x"` joined by nothing else, an
    option whose default is a string (`args.config`), or a name bound once to one of those."""
    v = literal_value(node)
    if isinstance(v, str):
        return v
    if isinstance(node, cst.Call) and len(node.args) == 1 and facts.tree.qualname(node.func) in ("pathlib.Path", "Path"):
        return _path_literal(facts, node.args[0].value, depth)
    if isinstance(node, cst.Name) and depth < 3:
        bs = facts.bindings.lookup(node.value, node)
        if len(bs) == 1 and bs[0].how == "expr":
            return _path_literal(facts, bs[0].node, depth + 1)
        return None
    if isinstance(node, cst.Attribute):
        found, default = facts.cross.option_default(node)
        return default if found and isinstance(default, str) else None
    return None


def _opened_path(facts, node: cst.BaseExpression, depth: int = 0) -> str | None:
    """The literal path of the file a parser reads: `open(P)`, `open(P).read()`,
    `Path(P).read_text()`, or a name bound once (`with open(P) as f`, `f = open(P)`)."""
    if isinstance(node, cst.Call):
        func = node.func
        builtin = isinstance(func, cst.Name) and func.value == "open" and not facts.bindings.lookup("open", func)
        if (builtin or facts.tree.qualname(func) in ("io.open", "builtins.open")) and node.args:
            return _path_literal(facts, node.args[0].value)
        if isinstance(func, cst.Attribute) and func.attr.value in ("read", "read_text", "read_bytes"):
            inner = func.value
            if func.attr.value == "read":
                return _opened_path(facts, inner, depth)
            return _path_literal(facts, inner)
        return None
    if isinstance(node, cst.Name) and depth < 3:
        bs = facts.bindings.lookup(node.value, node)
        if len(bs) == 1 and bs[0].how in ("expr", "with"):
            return _opened_path(facts, bs[0].node, depth + 1)
    return None


def config_source(facts, name: cst.Name) -> tuple[str, bool] | None:
    """(literal path, attribute access works) when `name` is bound once to a parsed config
    file of the project."""
    bs = facts.bindings.lookup(name.value, name)
    if len(bs) != 1 or bs[0].how != "expr" or not isinstance(bs[0].node, cst.Call):
        return None
    call, attrs = bs[0].node, False
    q = facts.tree.qualname(call.func)
    if q in _ATTRIBUTE_DICTS and len(call.args) == 1 and isinstance(call.args[0].value, cst.Call):
        call, attrs = call.args[0].value, True
        q = facts.tree.qualname(call.func)
    if not call.args or call.args[0].keyword is not None:
        return None
    if q in _PATH_LOADERS:
        path = _path_literal(facts, call.args[0].value)
        attrs = True
    elif q in _PARSERS:
        path = _opened_path(facts, call.args[0].value)
    else:
        return None
    return (path, attrs) if path else None


def config_value(facts, node: cst.BaseExpression) -> tuple[bool, object] | None:
    """(True, value) for `cfg["a"]["b"]`, `cfg.get("a", d)` or (attribute dicts) `cfg.a.b` on
    a name bound to a parsed config file of the project, whose value there is a JSON scalar;
    (False, None) when the file is read but holds no such value; None when `node` is no
    such expression."""
    keys: list[tuple[str, object]] = []  # (key, default of `.get`: NOT_LITERAL when none)
    attribute = False
    while True:
        if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            k = literal_value(node.slice[0].slice.value)
            if not isinstance(k, str):
                return None
            keys.append((k, NOT_LITERAL))
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "get" \
                and 1 <= len(node.args) <= 2 and all(a.keyword is None for a in node.args):
            k = literal_value(node.args[0].value)
            if not isinstance(k, str):
                return None
            default = literal_value(node.args[1].value) if len(node.args) == 2 else None
            keys.append((k, default))
            node = node.func.value
        elif isinstance(node, cst.Attribute):
            keys.append((node.attr.value, NOT_LITERAL))
            attribute = True
            node = node.value
        else:
            break
    if not keys or not isinstance(node, cst.Name) or facts.project is None:
        return None
    busy = facts.__dict__.setdefault("_config_names", set())
    if node.value in busy:
        return None  # `cfg = yaml.safe_load(open(cfg.path))`: the path is what is being looked up
    busy.add(node.value)
    try:
        source = config_source(facts, node)
    finally:
        busy.discard(node.value)
    if source is None or (attribute and not source[1]):
        return None
    data = facts.project.config_data(source[0])
    if data is None:
        return None
    for key, default in reversed(keys):
        if not isinstance(data, dict):
            return False, None
        if key not in data:
            return (True, default) if default is not NOT_LITERAL else (False, None)
        data = data[key]
    if isinstance(data, (dict, list)):
        return False, None
    return True, data


def from_config_file(facts, node: cst.BaseExpression) -> bool:
    """Whether `node` is a setting read from a YAML/JSON file of the project that holds a
    value there."""
    got = config_value(facts, node)
    return bool(got and got[0])
