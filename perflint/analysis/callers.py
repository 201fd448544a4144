"""What flows into a project function from its callers (see `analysis.project`): which
calls of other modules reach it, whether it runs once per step of a loop in another file,
and what every call site passes for a parameter (kinds, devices, a project class, the
model's layers, `**kwargs`), following arguments that forward the caller's own parameter.

Answers from module summaries alone (no libcst).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perflint.analysis.modules import MAX_DEPTH
from perflint.analysis.vocab import Kind

if TYPE_CHECKING:
    from perflint.analysis.project import ProjectIndex

# Kinds an argument may lend a parameter (strong evidence only).
PARAM_KINDS = frozenset({Kind.DATALOADER, Kind.MODEL, Kind.OPTIMIZER, Kind.SCALER, Kind.CRITERION, Kind.BATCH, Kind.DEVICE_TENSOR, Kind.TENSOR,
                         Kind.OUTPUT, Kind.LOSS})


class CallerFacts:
    """The call sites of the project's functions, joined over every caller."""

    def __init__(self, index: ProjectIndex) -> None:
        self.index = index
        self.summaries = index.summaries  # absolute path → summary
        self._memo: dict = {}
        self._incoming: dict[tuple[str, str], list] | None = None
        self._calls_to: dict[tuple[str, str], list] | None = None
        self._escaped: set[tuple[str, str]] = set()
        self._method_targets: dict[str, set] = {}
        self._blind: set[str] = set()

    def _index_calls(self) -> None:
        incoming: dict[tuple[str, str], list] = {}
        calls_to: dict[tuple[str, str], list] = {}
        step_fns: dict[tuple[str, str], tuple] = {}
        records = []
        method_targets: dict[str, set] = {}
        for path in sorted(self.summaries):
            for c in self.summaries[path].get("calls", ()):
                where = self.index.resolve(path, c["ref"])
                if "." in c["ref"].lstrip("#*"):
                    # every call spelled `<something>.name(...)`: what it reaches, if known
                    method_targets.setdefault(c["ref"].rsplit(".", 1)[-1], set()).add(
                        tuple(where) if where is not None and where[1] else None)
                if where is None or not where[1]:
                    continue
                records.append((path, c, where))
                calls_to.setdefault(where, []).append((path, c))
                if c.get("step"):
                    caller = self.summaries[path]
                    step_fns.setdefault(where, (path, c["line"], c["step"], bool(caller.get("accel")),
                                                bool(caller.get("cuda"))))
        # A function called on every run of a per-step function is per-step too.
        for _ in range(MAX_DEPTH):
            grew = False
            for path, c, where in records:
                if where in step_fns or not c.get("every") or not c.get("in"):
                    continue
                host = step_fns.get((path, c["in"]))
                if host is not None:
                    step_fns[where] = host
                    grew = True
            if not grew:
                break
        for where, host in step_fns.items():
            incoming[where] = [host]
        self._incoming = incoming
        self._calls_to = calls_to
        escaped: set[tuple[str, str]] = set()
        for path in sorted(self.summaries):
            for ref in self.summaries[path].get("refs", ()):
                where = self.index.resolve(path, ref)
                if where is not None and where[1]:
                    escaped.add(where)
        self._escaped = escaped
        self._method_targets = method_targets
        self._blind = set().union(*(s.get("attrs", ()) for s in self.summaries.values()))

    def called_without_grad(self, where: tuple[str, str]) -> bool:
        """Some project call of `where` runs under `torch.no_grad()` or `inference_mode()`
        (as for the calls in the function's own file, one such caller is taken to mean the
        function is meant to run without autograd)."""
        if self._calls_to is None:
            self._index_calls()
        return any(c.get("nograd") for _, c in self._calls_to.get(where, ()))  # type: ignore[union-attr]

    def step_caller(self, where: tuple[str, str]) -> tuple | None:
        """(caller file, line, "train"/"eval", the caller may use an accelerator, the caller
        is CUDA code) when `where` runs once per step of a loop in another file (directly or
        through per-step functions)."""
        if self._incoming is None:
            self._index_calls()
        got = self._incoming.get(where)  # type: ignore[union-attr]
        if not got:
            return None
        if got[0][0] == where[0]:
            return None  # the file's own analysis sees its own loops
        return tuple(got[0])

    def called_from_training(self, where: tuple[str, str], depth: int = 0) -> bool:
        """Whether a file that trains calls `where` (directly, or through functions such a
        file calls), not once after its training (`after`): its evaluation runs during it."""
        if self._incoming is None:
            self._index_calls()
        for path, c in [pc for pc in self._calls_to.get(where, ()) if not pc[1].get("after")]:  # type: ignore[union-attr]
            if self.summaries[path].get("trains"):
                return True
            if depth < 2 and c.get("in") and (path, c["in"]) != where \
                    and self.called_from_training((path, c["in"]), depth + 1):
                return True
        return False

    def called_only_outside_training(self, where: tuple[str, str], depth: int = 0) -> bool:
        """Whether the project shows every call of `where` (see `_sites`) and none runs in a
        file that trains, directly or through the functions that call it (each of which
        must show all its callers too): an evaluation helper only an evaluation script uses."""
        if self.summaries.get(where[0], {}).get("trains"):
            return False
        sites = self._sites(where)
        if not sites:
            return False
        for caller, c in [sc for sc in sites if not sc[1].get("after")]:
            if self.summaries[caller].get("trains"):
                return False
            host = c.get("in")
            if host is not None and (caller, host) != where and (
                    depth >= MAX_DEPTH or not self.called_only_outside_training((caller, host), depth + 1)):
                return False
        return True

    def _sites(self, where: tuple[str, str]) -> list | None:
        """Every call site of a top-level function, or None when some caller is unknown: the
        function is never called in the project (a public API, a script's entry point), is
        named other than by a call (`fn=train_step`, `map(step, ...)`: called from where
        it is handed to), or a call passes `*args` or a `**kwargs` that is not a known dict."""
        if self._calls_to is None:
            self._index_calls()
        if where in self._escaped or ("." in where[1] and not self._method_callers_known(where)):
            return None
        sites = self._calls_to.get(where)  # type: ignore[union-attr]
        if not sites or any(c.get("splat") for _, c in sites):
            return None
        if "." in where[1] and not all(c.get("inst") for _, c in sites):
            return None  # `Trainer.fit(trainer, ...)`: the arguments start at `self`
        return sites

    def _method_callers_known(self, where: tuple[str, str]) -> bool:
        """Whether every call of the method `where` ("Class.method") is a call on an
        instance of its class that the project shows: no file uses an attribute of that name
        on an object of unknown class (`self.fit(...)`, `x.fit`, `super().fit(...)`), every
        call spelled `<obj>.fit(...)` reaches this method or another project method that
        exists, and the method is no dunder and has no decorator that changes its call."""
        name = where[1].split(".", 1)[1]
        if "." in name or name.startswith("__") or name in self._blind:
            return False
        got = self.index.entry(where)
        if got is None or got[0] != "function" or got[1].get("wrapped"):
            return False
        return all(t == where or (t is not None and self.index.entry(t) is not None)
                   for t in self._method_targets.get(name, ()))

    def positional_offset(self, where: tuple[str, str]) -> int:
        """How many leading parameters of `where` a call's arguments do not fill: 1 for a
        method called on an instance (`self`), 0 for a function or a static method."""
        if "." not in where[1]:
            return 0
        got = self.index.entry(where)
        return 0 if got is not None and got[1].get("static") else 1

    @staticmethod
    def _key(c: dict, index: int, name: str) -> str | None:
        """Where a call site passes a parameter: its keyword, its position, or None."""
        if name in c.get("kw", {}):
            return name
        if index < len(c.get("args", ())):
            return str(index)
        return None

    def _host_param(self, caller: str, c: dict, pname: str) -> tuple[tuple[str, str], int] | None:
        """The function a call sits in and the position of its parameter `pname`, for an
        argument that forwards that parameter (`step_loss(model, batch, device)` inside
        `train_one_epoch(model, loader, optimizer, device)`)."""
        host = c.get("in")
        if not host:
            return None
        got = self.index.entry((caller, host))
        if got is None or got[0] != "function":
            return None
        pos = got[1].get("sig", {}).get("pos", [])
        if pname not in pos:
            return (caller, host), 10_000
        index = pos.index(pname) - self.positional_offset((caller, host))
        return ((caller, host), index) if index >= 0 else None

    def param_kinds(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> frozenset[str]:
        """Kinds every known call site of `where` passes for a parameter (empty unless all
        agree, or when a caller is unknown); an argument that is the caller's own parameter
        takes what that one receives."""
        key = ("pk", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()
        sites = self._sites(where)
        agreed: set[str] | None = None
        for caller, c in sites or ():
            k = self._key(c, index, name)
            if k is None:
                agreed = set()
                break
            ks = set(c["kw"][k]) if k == name else set(c["args"][index])
            via = c.get("via", {}).get(k)
            if not ks and via is not None:
                ks = set(self._via_kinds(caller, via))
            fwd = c.get("fwd", {}).get(k)
            if not ks and fwd is not None and depth < MAX_DEPTH:
                hp = self._host_param(caller, c, fwd)
                if hp is not None:
                    ks = set(self.param_kinds(hp[0], hp[1], fwd, depth + 1))
            agreed = ks if agreed is None else agreed & ks
            if not agreed:
                break
        got = frozenset((agreed or set()) & PARAM_KINDS)
        self._memo[key] = got
        return got

    def _param_device(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> tuple[frozenset, bool]:
        """(device kinds the call sites pass, whether every one of them passes CUDA among
        its possibilities); see `param_device`."""
        key = ("pd", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = (frozenset(), False)
        sites = self._sites(where)
        if sites is None:
            return self._memo[key]
        per_site: list[frozenset] = []
        all_cuda = True
        for caller, c in sites:
            k = self._key(c, index, name)
            d = c.get("dev", {}).get(k) if k is not None else None
            fwd = c.get("fwd", {}).get(k) if k is not None else None
            if d:
                ks, cuda = frozenset(d), Kind.DEVICE_CUDA in d
            elif fwd is not None and depth < MAX_DEPTH and self._host_param(caller, c, fwd) is not None:
                hp = self._host_param(caller, c, fwd)
                ks, cuda = self._param_device(hp[0], hp[1], fwd, depth + 1)  # type: ignore[index]
                ks = ks or frozenset({Kind.DEVICE_UNKNOWN})
            else:
                ks, cuda = frozenset({Kind.DEVICE_UNKNOWN}), False
            if (self.summaries.get(caller) or {}).get("framework"):
                # Accelerate/Lightning place batches (prepared loaders yield them on the
                # device) and set precision for the callee: no device fact, no CUDA claim.
                ks, cuda = frozenset({Kind.DEVICE_UNKNOWN}), False
            per_site.append(ks)
            all_cuda = all_cuda and cuda
        union: set[str] = set().union(*per_site)
        if len({(Kind.DEVICE_CUDA in ks) for ks in per_site}) > 1:
            union.add(Kind.DEVICE_UNKNOWN)  # CUDA from some callers, not from others: no fact
        got = (frozenset(union), all_cuda)
        self._memo[key] = got
        return got

    def param_device(self, where: tuple[str, str], index: int, name: str) -> frozenset[str]:
        """Device kinds a parameter receives: of the device argument, or of the device a model
        argument was moved to, at every call site (following arguments that forward the
        caller's own parameter); "device_unknown" among them when a site passes something
        unknown or the sites disagree on CUDA; empty when nothing is known."""
        got = self._param_device(where, index, name)[0]
        return frozenset() if got <= {Kind.DEVICE_UNKNOWN} else got

    def receives_cuda(self, path: str) -> bool:
        """Whether the functions of `path` run only in CUDA programs: a parameter gets CUDA
        (a device, a model moved there) from every caller, or a function returning a
        DataLoader is called only from CUDA code."""
        key = ("rc", path)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False
        found = False
        summary = self.summaries.get(path) or {}
        symbols = [*(summary.get("functions") or {}).items(),
                   *((f"{c}.{m}", fn) for c, info in (summary.get("classes") or {}).items()
                     for m, fn in (info.get("methods") or {}).items())]
        for name, fn in symbols:
            where = (path, name)
            sites = self._sites(where)
            if sites is None:
                continue
            pos = fn.get("sig", {}).get("pos", [])
            skip = self.positional_offset(where)
            for i, p in enumerate([*pos, *fn.get("sig", {}).get("kwonly", [])]):
                if i < skip:
                    continue
                if self._param_device(where, i - skip if i < len(pos) else 10_000, p)[1]:
                    found = True
                    break
            if not found and Kind.DATALOADER in self.index.result_kinds(where) \
                    and all((self.summaries.get(caller) or {}).get("cuda")
                            and not (self.summaries.get(caller) or {}).get("framework") for caller, _ in sites):
                found = True
            if found:
                break
        self._memo[key] = found
        return found

    def kwargs_of(self, where: tuple[str, str]) -> dict | None:
        """What a function's `**kwargs` holds, over every call site: keyword → ["v", literal]
        when every site passes that literal, ["o", "args.workers", default] when every site
        passes that option with the same known default (["o", text] when the default is not
        known), ["?"] otherwise; ["some", state] for a keyword some sites leave out.  None when
        a caller is unknown (see `_sites`)."""
        key = ("kwargs", where)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None
        got = self.index.entry(where)
        sites = self._sites(where)
        if got is None or got[0] != "function" or sites is None:
            return None
        sig = got[1].get("sig", {})
        named = set(sig.get("pos", ())) | set(sig.get("kwonly", ()))
        per_site: list[dict] = []
        for caller, c in sites:
            vals = {}
            for k in c.get("kw", {}):
                if k in named:
                    continue
                v = c.get("kwv", {}).get(k)
                if v is not None and v[0] == "o" and len(v) == 2:
                    name = v[1].rsplit(".", 1)[-1]
                    try:
                        v = ["o", v[1], self.index.option_default(caller, name)]
                    except KeyError:
                        pass
                vals[k] = list(v) if v is not None else ["?"]
            per_site.append(vals)
        out: dict = {}
        for k in sorted(set().union(*per_site)):
            states = [vals.get(k) for vals in per_site]
            present = [st for st in states if st is not None]
            state = present[0] if all(st == present[0] for st in present) else ["?"]
            out[k] = state if len(present) == len(states) else ["some", state]
        self._memo[key] = out
        return out

    def param_class(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> tuple[str, str] | None:
        """The project class (file, name) whose instance every call site passes for a
        parameter (`train(model, Corpus(path), ...)`); None unless all agree."""
        key = ("pc", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None
        found: set = set()
        for caller, c in self._sites(where) or [(None, None)]:
            if c is None:
                return None
            k = self._key(c, index, name)
            ref = c.get("cls", {}).get(k) if k is not None else None
            fwd = c.get("fwd", {}).get(k) if k is not None else None
            if ref is not None:
                w = self.index.resolve(caller, ref)
            elif fwd is not None and depth < MAX_DEPTH and self._host_param(caller, c, fwd) is not None:
                hp = self._host_param(caller, c, fwd)
                w = self.param_class(hp[0], hp[1], fwd, depth + 1)  # type: ignore[index]
            else:
                return None
            if w is None or not w[1] or "." in w[1] or self.index.entry(w) is None or self.index.entry(w)[0] != "class":
                return None
            found.add(tuple(w))
        got = found.pop() if len(found) == 1 else None
        self._memo[key] = got
        return got

    def param_layer_apis(self, where: tuple[str, str], index: int, name: str, depth: int = 0) -> frozenset[str]:
        """torch layer APIs of the model every known call site of `where` passes for a
        parameter, when each site passes a name bound to a project class or factory
        (`model = TabularNet(...)`; `fit(model, ...)`), or its own parameter that receives
        one; empty when any site is unknown."""
        key = ("pla", where, index, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()
        sites = self._sites(where) or []
        out: set[str] = set()
        for caller, c in sites:
            k = self._key(c, index, name)
            via = c.get("via", {}).get(k) if k is not None else None
            fwd = c.get("fwd", {}).get(k) if k is not None else None
            if via is None and fwd is not None and depth < MAX_DEPTH:
                hp = self._host_param(caller, c, fwd)
                got = self.param_layer_apis(hp[0], hp[1], fwd, depth + 1) if hp is not None else frozenset()
                if not got:
                    out = set()
                    break
                out |= got
                continue
            if via is None or via[1]:
                out = set()
                break
            w = self.index.resolve(caller, via[0])
            if w is None or not w[1]:
                out = set()
                break
            out |= self.index.layer_apis(w)
        res = frozenset(out)
        self._memo[key] = res
        return res

    def _via_kinds(self, caller: str, via: list) -> frozenset[str]:
        """Kinds of an argument bound to a call of a project function: its result kinds; an
        element unpacked from the result keeps only "dataloader" (a function returning
        nothing but loaders, see the summary)."""
        ref, unpacked = via
        w = self.index.resolve(caller, ref)
        if w is None or not w[1] or (caller, ref) == w:
            return frozenset()
        got = self.index.result_kinds(w)
        return got & {Kind.DATALOADER} if unpacked else got


def param_may_be_ddp(callers: CallerFacts, where: tuple[str, str], index: int, name: str, depth: int = 0) -> bool:
    """Whether a known call site of `where` passes for a parameter a name that may be
    bound to `DistributedDataParallel(...)` there (`model = DDP(model)` under `if
    args.distributed:`, then `train_one_epoch(model, ...)`), or forwards its own parameter
    that may be."""
    for caller, c in callers._sites(where) or ():
        k = callers._key(c, index, name)
        if k is None:
            continue
        if k in c.get("ddp", ()):
            return True
        fwd = c.get("fwd", {}).get(k)
        hp = callers._host_param(caller, c, fwd) if fwd is not None and depth < MAX_DEPTH else None
        if hp is not None and param_may_be_ddp(callers, hp[0], hp[1], fwd, depth + 1):
            return True
    return False


def param_value(callers: CallerFacts, where: tuple[str, str], name: str) -> list | None:
    """What every known call site of `where` passes by keyword for its parameter `name`:
    ["v", literal] when each passes that literal, ["o", "args.use_amp", default] when each
    passes that option and its default is known where the call is (DynamicViT's
    `train_one_epoch(..., use_amp=args.use_amp)`); None when a site passes it otherwise, by
    position or not at all, or a caller is unknown."""
    got = None
    for caller, c in callers._sites(where) or [(None, None)]:
        v = c.get("kwv", {}).get(name) if c is not None else None
        if v is None:
            return None
        if v[0] == "o" and len(v) == 2:
            try:
                v = ["o", v[1], callers.index.option_default(caller, v[1].rsplit(".", 1)[-1])]
            except KeyError:
                return None
        if v[0] not in ("v", "o") or (got is not None and list(v) != got):
            return None
        got = list(v)
    return got


def reached(callers: CallerFacts, where: tuple[str, str]) -> bool:
    """Whether a summarised file calls `where`, or names it other than by a call
    (`fn=train_step`)."""
    if callers._calls_to is None:
        callers._index_calls()
    return bool(callers._calls_to.get(where)) or where in callers._escaped  # type: ignore[union-attr]


def only_while_building(callers: CallerFacts, where: tuple[str, str], depth: int = 0) -> bool:
    """Whether every call of the function `where` the project shows (see `_sites`) runs while
    an object is built: in an `__init__` method, or in a function each of whose calls does
    (`get_filter(k)` in `MultiWaveletCross.__init__`, which calls `get_phi_psi`)."""
    sites = callers._sites(where)
    if not sites:
        return False
    for caller, c in sites:
        host = c.get("in")
        if host is not None and host.endswith(".__init__"):
            continue
        if host is None or "." in host or (caller, host) == where or depth >= MAX_DEPTH \
                or not only_while_building(callers, (caller, host), depth + 1):
            return False
    return True
