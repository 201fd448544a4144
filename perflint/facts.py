"""Facts about one file, computed once and shared by every rule.

One iterative walk over the libcst tree records each node's parent, indexes the node types
rules ask about, collects the name bindings of every scope and the import alias table.  On
top of that, small, memoised analyses answer the questions rules ask:

* what kind of value an expression holds — a DataLoader, a batch from one, a model, an
  optimizer, a loss, a GradScaler, a tensor, a CUDA device … (`kinds`);
* which loops are training loops and which are evaluation loops, and which functions are
  per-step functions (`loop_kind`, `step_function_kind`);
* whether a node runs on every iteration of such a loop, or only in a throttled branch such
  as `if step % 50 == 0:` (`iteration_context`);
* file-wide facts: CUDA code or not, autocast / GradScaler / TF32 / cudnn settings present.

Kinds that come only from a naming convention (a parameter called `loader`) are *weak* and
carry a leading "~"; rules decide whether weak evidence is enough for them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Iterator

import libcst as cst

from perflint.names import ImportTable, dotted

Scope = cst.CSTNode  # a Module, FunctionDef, Lambda or ClassDef

# ----------------------------------------------------------------------------------------
# The walk
# ----------------------------------------------------------------------------------------

# Fields that hold only whitespace, punctuation or comments: never needed by the facts.
_SKIP_FIELDS = {
    "whitespace_before", "whitespace_after", "whitespace_before_args", "whitespace_after_func",
    "whitespace_before_colon", "whitespace_after_colon", "whitespace_after_star",
    "whitespace_after_param", "whitespace_before_params", "whitespace_after_def",
    "whitespace_after_class", "whitespace_before_as", "whitespace_after_as",
    "whitespace_after_import", "whitespace_before_import", "whitespace_after_from",
    "whitespace_after_in", "whitespace_before_in", "whitespace_after_for",
    "whitespace_after_if", "whitespace_before_if", "whitespace_before_else",
    "whitespace_after_else", "whitespace_after_while", "whitespace_after_with",
    "whitespace_after_await", "whitespace_after_return", "whitespace_after_lambda",
    "whitespace_after_del", "whitespace_after_assert", "whitespace_after_raise",
    "whitespace_after_global", "whitespace_after_nonlocal", "whitespace_after_async",
    "whitespace_after_indicator", "whitespace_before_indicator", "whitespace_before_expression",
    "whitespace_after_expression", "whitespace_after_case", "whitespace_after_match",
    "whitespace_before_value", "whitespace_after_value", "whitespace_before_from",
    "whitespace", "lpar", "rpar", "comma", "leading_lines", "lines_after_decorators",
    "header", "footer", "trailing_whitespace", "semicolon", "equal", "colon", "dot",
    "lbracket", "rbracket", "lbrace", "rbrace", "star", "asynchronous", "await",
    "first_line", "empty_lines", "newline", "star_tok",
}
_FIELDS_CACHE: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    fields = _FIELDS_CACHE.get(cls)
    if fields is None:
        fields = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in _SKIP_FIELDS and not f.name.startswith("whitespace")
        )
        _FIELDS_CACHE[cls] = fields
    return fields


_INDEXED = (
    cst.Call, cst.For, cst.While, cst.With, cst.If, cst.FunctionDef, cst.ClassDef,
    cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Import, cst.ImportFrom, cst.Lambda,
    cst.Return, cst.SimpleString, cst.Attribute, cst.Decorator, cst.Assert, cst.Yield,
    cst.Del, cst.CompFor, cst.NamedExpr, cst.Name, cst.BinaryOperation,
)

# ----------------------------------------------------------------------------------------
# Vocabulary
# ----------------------------------------------------------------------------------------

DATALOADER = "torch.utils.data.DataLoader"
OPTIMIZER_CLASSES = {
    "Adam", "AdamW", "SGD", "Adagrad", "Adadelta", "Adamax", "ASGD", "LBFGS", "NAdam",
    "RAdam", "RMSprop", "Rprop", "SparseAdam", "Muon", "Adafactor",
}
_THIRD_PARTY_OPTIMIZERS = re.compile(
    r"^(bitsandbytes\.optim\.\w+|transformers\.(optimization\.)?(AdamW|Adafactor)|"
    r"apex\.optimizers\.\w+|torch_optimizer\.\w+|timm\.optim\.\w+|lion_pytorch\.Lion|"
    r"deepspeed\.ops\.\w+\.\w+)$"
)
SCALERS = {"torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.cpu.amp.GradScaler"}
AUTOCASTS = {"torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast"}
LOSS_FUNCTIONS = {
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "cosine_embedding_loss",
    "margin_ranking_loss", "triplet_margin_loss", "ctc_loss", "poisson_nll_loss",
    "gaussian_nll_loss", "hinge_embedding_loss", "multilabel_margin_loss",
    "multilabel_soft_margin_loss", "multi_margin_loss", "soft_margin_loss",
    "triplet_margin_with_distance_loss",
}
MODEL_FACTORIES = re.compile(
    r"^(torchvision\.models\.[\w.]+|timm\.create_model|torch\.hub\.load|"
    r"transformers\.\w+\.from_pretrained|transformers\.\w+|torchaudio\.models\.\w+)$"
)
# Calls that return their receiver's kind (tensors stay tensors, models stay models).
_PASS_THROUGH_METHODS = {
    "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "long", "int", "bool",
    "contiguous", "squeeze", "unsqueeze", "view", "reshape", "permute", "transpose", "t",
    "flatten", "clone", "train", "eval", "requires_grad_", "type", "expand", "repeat",
    "sum", "mean", "max", "min", "abs", "sqrt", "exp", "log", "pow", "clamp", "norm",
    "softmax", "log_softmax", "sigmoid", "tanh", "relu", "argmax", "argmin", "topk", "sort",
    "eq", "ne", "gt", "lt", "ge", "le", "mul", "add", "sub", "div", "matmul", "masked_fill",
    "squeeze_", "unsqueeze_", "add_", "mul_", "div_", "sub_", "zero_", "fill_", "std", "var",
    "prod", "cumsum", "gather", "index_select", "chunk", "split", "narrow", "to_dense",
    "pin_memory", "share_memory_", "nan_to_num", "round", "floor", "ceil", "neg", "reciprocal",
    "all", "any", "isnan", "isinf", "isfinite", "nonzero", "where", "logsumexp", "amax", "amin",
    "square", "rsqrt", "exp_", "cumprod",
}
_DETACH_METHODS = {"detach", "detach_", "item", "tolist", "numpy", "cpu"}
_NON_TENSOR_TORCH = re.compile(
    r"^torch\.(cuda\.(is_available|device_count|current_device|get_device_name|"
    r"get_device_properties|is_bf16_supported|memory_allocated|max_memory_allocated|"
    r"memory_reserved|mem_get_info|synchronize|empty_cache|set_device|manual_seed(_all)?|"
    r"reset_peak_memory_stats)|device|dtype|Size|manual_seed|set_\w+|get_\w+|is_\w+|"
    r"no_grad|enable_grad|inference_mode|autocast|amp\.\w+|compile|load|save|"
    r"backends\.[\w.]+|distributed\.[\w.]+|utils\.[\w.]+|optim\.[\w.]+|nn\.[\w.]+|"
    r"multiprocessing\.[\w.]+|jit\.[\w.]+|hub\.[\w.]+|finfo|iinfo|numel|typename|"
    r"use_deterministic_algorithms|autograd\.[\w.]+|profiler\.[\w.]+|library\.[\w.]+|"
    r"accelerator\.[\w.]+|mps\.[\w.]+|xpu\.[\w.]+|compiler\.[\w.]+)$"
)
_CONSTRUCTORS = {"zeros", "ones", "full", "empty", "eye", "arange", "linspace", "logspace", "tensor",
                 "zeros_like", "ones_like", "full_like", "empty_like", "rand", "randn", "randint", "randperm",
                 "normal", "as_tensor", "scalar_tensor"}
_DTYPE_NAMES = {
    "float", "float32", "float16", "half", "bfloat16", "float64", "double", "int", "int32", "int64",
    "long", "int8", "uint8", "bool", "int16", "short", "complex64", "complex128", "cfloat",
    "float8_e4m3fn", "float8_e5m2",
}
_RANDOM_CONSTRUCTORS = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "rand_like",
                        "randn_like", "randint_like", "poisson", "multinomial"}

_HINTS = [
    ("~dataloader", re.compile(r"(^|_)(data)?loader(s)?(_|$)|^dl(_\w+)?$|(^|_)dl$|_dataloader$|^loader_")),
    ("~optimizer", re.compile(r"(^|_)(optim|optimizer|optimiser|opt)(s)?(_|\d|$)")),
    ("~model", re.compile(r"(^|_)(model|net|network|encoder|decoder|generator|discriminator|"
                          r"classifier|backbone|module|critic|actor|policy|q_net|qnet|unet|vae|student|teacher)(s)?(_|\d|$)")),
    ("~criterion", re.compile(r"(^|_)(criterion|loss_fn|loss_func|lossfn|loss_function|criteria)(_|\d|$)")),
    ("~scaler", re.compile(r"(^|_)(grad_)?scaler(_|$)")),
    ("~loss", re.compile(r"(^|_)loss(es)?(_|\d|$)")),
]
_STEP_NAME = re.compile(
    r"^_*(train|training|optimi[sz]e|learn|fit|run|process|update|forward_backward|fwd_bwd)?_?"
    r"(step|batch|one_batch|on_batch|iteration|iter|minibatch|micro_batch)$"
)
# `if args.synchronize_step:` — an option the user switches on, not every iteration's path.
_OPTION_ROOTS = {"args", "opt", "opts", "options", "config", "cfg", "conf", "hparams", "hp", "flags", "FLAGS",
                 "settings", "params"}
_THROTTLE_NAMES = re.compile(
    r"(^|_)(last|final)(_|$)|^should_(log|print|eval|save|validate)|^(do|is)_(log|print|eval)(_|$)|"
    r"^log_now$"
)
_BOUND_NAMES = re.compile(r"(last|final|max|total|num|end|steps|len|count|size)", re.I)


_VERB_PREFIX = re.compile(
    r"^_*(get|build|create|make|load|init|setup|save|compute|update|reset|freeze|unfreeze|print|log|"
    r"set|is|has|evaluate|run|to|prepare|wrap|copy|clone|export|register|add|apply|configure)_"
)


# Called names that are actions, not the model itself: `convert_model(m)`, `train_model()`.
_CALLEE_VERB = re.compile(
    r"^_*(get|build|create|make|load|init|initialize|setup|save|compute|update|reset|freeze|unfreeze|print|log|"
    r"set|is|has|evaluate|eval|run|to|prepare|wrap|unwrap|copy|clone|export|register|add|apply|configure|"
    r"convert|fuse|quantize|prune|trace|script|compile|optimize|patch|replace|move|cast|shard|parallelize|"
    r"summarize|describe|check|validate|test|train|fit|count|profile|benchmark|warmup|step|forward_backward)_"
)


def name_hints(name: str) -> set[str]:
    """Kinds suggested by a naming convention alone (weak evidence)."""
    low = name.lower()
    if _VERB_PREFIX.match(low):
        return set()  # `get_model`, `build_loader`: functions, not the thing itself
    return {kind for kind, rx in _HINTS if rx.search(low)}


def call_name(call: cst.Call) -> str | None:
    """The method or function name of a call: `a.b.step()` → "step"."""
    f = call.func
    if isinstance(f, cst.Attribute):
        return f.attr.value
    if isinstance(f, cst.Name):
        return f.value
    return None


def receiver(call: cst.Call) -> cst.BaseExpression | None:
    f = call.func
    return f.value if isinstance(f, cst.Attribute) else None


def get_arg(call: cst.Call, name: str | None, pos: int | None = None) -> cst.Arg | None:
    """An argument by keyword, or by position when no keyword precedes it."""
    for arg in call.args:
        if arg.keyword is not None and name is not None and arg.keyword.value == name:
            return arg
    if pos is not None:
        i = 0
        for arg in call.args:
            if arg.keyword is not None or arg.star:
                break
            if i == pos:
                return arg
            i += 1
    return None


def has_splat(call: cst.Call) -> bool:
    return any(arg.star for arg in call.args)


def literal_value(node: cst.BaseExpression | None):
    """Python value of a simple literal (numbers, strings, True/False/None); else a sentinel."""
    if node is None:
        return _NOT_LITERAL
    if isinstance(node, cst.Integer):
        return node.evaluated_value
    if isinstance(node, cst.Float):
        return node.evaluated_value
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            return node.evaluated_value
        except Exception:  # noqa: BLE001 - f-strings and odd prefixes
            return _NOT_LITERAL
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = literal_value(node.expression)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v
    return _NOT_LITERAL


class _NotLiteral:
    def __repr__(self) -> str:
        return "<not a literal>"


_NOT_LITERAL = _NotLiteral()
NOT_LITERAL = _NOT_LITERAL


# ----------------------------------------------------------------------------------------
# Bindings
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """What a name was bound to: an expression, an element of one, or a parameter."""

    how: str  # "expr" | "unpack" | "iter" | "iter_unpack" | "param" | "with"
    node: cst.CSTNode
    index: tuple[int, ...] = ()
    site: cst.CSTNode | None = None  # the statement that binds


@dataclass
class LoopInfo:
    node: cst.CSTNode  # For / While, or a FunctionDef for a per-step function
    kind: str  # "train" | "eval"


class Facts:
    def __init__(self, module: cst.Module, target_torch: tuple[int, int] = (2, 4)) -> None:
        self.module = module
        self.target_torch = target_torch
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.order: dict[cst.CSTNode, int] = {}
        self.index: dict[type, list[cst.CSTNode]] = {t: [] for t in _INDEXED}
        self.imports = ImportTable()
        # scope → name → bindings
        self.bindings: dict[Scope, dict[str, list[Binding]]] = {}
        # class → attribute → bindings (from `self.x = …` in any method)
        self.attr_bindings: dict[cst.ClassDef, dict[str, list[Binding]]] = {}
        self.functions_by_name: dict[str, list[cst.FunctionDef]] = {}
        self.classes_by_name: dict[str, cst.ClassDef] = {}
        self._memo_kinds: dict[tuple, frozenset[str]] = {}
        self._walk()

    # -- the walk -----------------------------------------------------------------------
    def _walk(self) -> None:
        parents = self.parents
        order = self.order
        index = self.index
        indexed = set(_INDEXED)
        stack: list[cst.CSTNode] = [self.module]
        counter = 0
        while stack:
            node = stack.pop()
            order[node] = counter
            counter += 1
            cls = type(node)
            if cls in indexed:
                index[cls].append(node)
            children: list[cst.CSTNode] = []
            for name in _child_fields(cls):
                value = getattr(node, name)
                if isinstance(value, cst.CSTNode):
                    children.append(value)
                elif isinstance(value, (list, tuple)):
                    for item in value:
                        if isinstance(item, cst.CSTNode):
                            children.append(item)
            for child in children:
                parents[child] = node
            stack.extend(reversed(children))
        for imp in index[cst.Import]:
            self.imports.add_import(imp)
        for imp in index[cst.ImportFrom]:
            self.imports.add_import_from(imp)
        for fn in index[cst.FunctionDef]:
            self.functions_by_name.setdefault(fn.name.value, []).append(fn)
            self._bind_params(fn)
        for c in index[cst.ClassDef]:
            self.classes_by_name.setdefault(c.name.value, c)
        for node in index[cst.Assign]:
            for target in node.targets:
                self._bind_target(target.target, Binding("expr", node.value, site=node))
        for node in index[cst.AnnAssign]:
            if node.value is not None:
                self._bind_target(node.target, Binding("expr", node.value, site=node))
        for node in index[cst.NamedExpr]:
            self._bind_target(node.target, Binding("expr", node.value, site=node))
        for node in index[cst.For]:
            self._bind_target(node.target, Binding("iter", node.iter, site=node))
        for node in index[cst.CompFor]:
            self._bind_target(node.target, Binding("iter", node.iter, site=node))
        for node in index[cst.With]:
            for item in node.items:
                if item.asname is not None:
                    self._bind_target(item.asname.name, Binding("with", item.item, site=node))
        # Module-level re-bindings of imported names: `Loader = DataLoader`.
        for stmt in self.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if (
                        isinstance(small, cst.Assign)
                        and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name)
                        and isinstance(small.value, (cst.Name, cst.Attribute))
                    ):
                        self.imports.add_alias(small.targets[0].target.value, small.value)

    def _bind_params(self, fn: cst.FunctionDef) -> None:
        params = fn.params
        for p in (*params.posonly_params, *params.params, *params.kwonly_params):
            self.bindings.setdefault(fn, {}).setdefault(p.name.value, []).append(
                Binding("param", p, site=fn)
            )

    def _bind_target(self, target: cst.BaseExpression, binding: Binding) -> None:
        if isinstance(target, cst.Name):
            scope = self.scope_of(target)
            self.bindings.setdefault(scope, {}).setdefault(target.value, []).append(binding)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, el in enumerate(target.elements):
                if isinstance(el, cst.StarredElement):
                    continue
                how = {"expr": "unpack", "iter": "iter_unpack"}.get(binding.how, binding.how)
                self._bind_target(
                    el.value, Binding(how, binding.node, binding.index + (i,), site=binding.site)
                )
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
            if target.value.value == "self":
                cls = self.enclosing_class(target)
                if cls is not None:
                    self.attr_bindings.setdefault(cls, {}).setdefault(target.attr.value, []).append(binding)

    # -- tree navigation ------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        p = self.parents.get(node)
        while p is not None:
            yield p
            p = self.parents.get(p)

    def scope_of(self, node: cst.CSTNode) -> Scope:
        for a in self.ancestors(node):
            if isinstance(a, (cst.FunctionDef, cst.Lambda, cst.Module)):
                return a
            if isinstance(a, cst.ClassDef):
                return a
        return self.module

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for a in self.ancestors(node):
            if isinstance(a, cst.FunctionDef):
                return a
            if isinstance(a, (cst.ClassDef, cst.Lambda)):
                return None
        return None

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for a in self.ancestors(node):
            if isinstance(a, cst.ClassDef):
                return a
        return None

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The smallest enclosing statement (simple statement line or compound statement)."""
        cur = node
        while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parents.get(cur)
        return cur if cur is not None else node

    def block_of(self, node: cst.CSTNode) -> tuple[cst.CSTNode, int] | None:
        """(the IndentedBlock or Module whose body holds `node`'s statement, its index)."""
        stmt = self.statement_of(node)
        parent = self.parents.get(stmt)
        if isinstance(parent, (cst.IndentedBlock, cst.Module)):
            for i, s in enumerate(parent.body):
                if s is stmt:
                    return parent, i
        return None

    def later_uses(self, name: str, scope: cst.CSTNode, after: int) -> list[cst.Name]:
        """Every `Name` node spelled `name` inside `scope` whose source order is past `after`
        (an order from `self.order`, e.g. that of the assignment target that binds it)."""
        return [n for n in self.nodes_within(scope, cst.Name)  # type: ignore[misc]
                if n.value == name and self.order.get(n, -1) > after]

    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return node is container or any(a is container for a in self.ancestors(node))

    def nodes_within(self, container: cst.CSTNode, cls: type) -> list[cst.CSTNode]:
        return [n for n in self.index[cls] if self.is_inside(n, container)]

    def calls(self) -> list[cst.Call]:
        return self.index[cst.Call]  # type: ignore[return-value]

    def qualname(self, node: cst.BaseExpression) -> str | None:
        return self.imports.resolve(node)

    def calls_to(self, *qualnames: str) -> list[cst.Call]:
        wanted = set(qualnames)
        return [c for c in self.index[cst.Call] if self.imports.resolve(c.func) in wanted]  # type: ignore[attr-defined]

    # -- name lookup ----------------------------------------------------------------------
    def lookup(self, name: str, at: cst.CSTNode) -> list[Binding]:
        """Bindings of `name` that may reach `at`.

        The scope is the innermost function that binds the name (then enclosing ones, then
        the module; class bodies are skipped, as Python does).  Within it, the binding that
        last precedes `at` wins — a loop's target for code in its body, the assignment before
        a use — unless it sits in a branch that may not run, or a later assignment in an
        enclosing loop can carry over into the next iteration; then every candidate counts.
        """
        scope: cst.CSTNode | None = self.scope_of(at)
        while scope is not None:
            if not isinstance(scope, cst.ClassDef) or scope is self.scope_of(at):
                found = self.bindings.get(scope, {}).get(name)
                if found:
                    return self._reaching(found, at)
            if isinstance(scope, cst.Module):
                break
            scope = self.scope_of(scope)
        return []

    def _reaches(self, b: Binding, at: cst.CSTNode) -> bool:
        site = b.site
        if site is None:
            return True
        if isinstance(site, (cst.For, cst.With, cst.FunctionDef)):
            body = site.body
            return self.is_inside(at, body)
        if isinstance(site, cst.CompFor):
            return self.is_inside(at, self.parents.get(site, site)) and not self.is_inside(at, site.iter)
        return self.order.get(site, 0) < self.order.get(at, 0) and not self.is_inside(at, site)

    def _reaching(self, bindings: list[Binding], at: cst.CSTNode) -> list[Binding]:
        if len(bindings) == 1:
            return bindings
        pre = [b for b in bindings if self._reaches(b, at)]
        if not pre:
            return bindings
        last = max(pre, key=lambda b: self.order.get(b.site, 0) if b.site is not None else -1)
        if last.site is None:
            return pre
        common = set(self.ancestors(at)) | {at}
        for a in self.ancestors(last.site):
            if a in common:
                break
            if isinstance(a, (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally, cst.For, cst.While,
                              cst.IfExp, cst.Match)):
                return pre
        out = [last]
        for loop in self.ancestors(at):
            if not isinstance(loop, (cst.For, cst.While)):
                continue
            if last.site is loop or self.is_inside(last.site, loop):
                break  # re-bound inside this loop before the use, every iteration
            for b in bindings:
                if b.site is not None and b is not last and self.is_inside(b.site, loop) and \
                        self.order.get(b.site, 0) > self.order.get(at, 0):
                    out.append(b)
        return out

    def self_attr_bindings(self, node: cst.Attribute) -> list[Binding]:
        if isinstance(node.value, cst.Name) and node.value.value == "self":
            cls = self.enclosing_class(node)
            while cls is not None:
                found = self.attr_bindings.get(cls, {}).get(node.attr.value)
                if found:
                    return found
                cls = self._local_base_class(cls)
        return []

    def _local_base_class(self, cls: cst.ClassDef) -> cst.ClassDef | None:
        for base in cls.bases:
            if isinstance(base.value, cst.Name) and base.value.value in self.classes_by_name:
                other = self.classes_by_name[base.value.value]
                if other is not cls:
                    return other
        return None

    # -- classes defined in the file ----------------------------------------------------
    @cached_property
    def module_classes(self) -> set[str]:
        """Names of classes in this file that are nn.Module subclasses (transitively)."""
        result: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, cls in self.classes_by_name.items():
                if name in result:
                    continue
                for base in cls.bases:
                    q = self.qualname(base.value) or ""
                    bname = dotted(base.value) or ""
                    if (
                        q.startswith("torch.nn.")
                        or q.startswith(("pytorch_lightning.", "lightning.", "transformers."))
                        or bname in result
                        or bname.split(".")[-1] in ("LightningModule", "Module", "PreTrainedModel")
                    ):
                        result.add(name)
                        changed = True
                        break
        return result

    @cached_property
    def loss_classes(self) -> set[str]:
        out = set()
        for name, cls in self.classes_by_name.items():
            if name in self.module_classes and (name.endswith("Loss") or "loss" in name.lower()):
                out.add(name)
        return out

    @cached_property
    def dataset_classes(self) -> set[str]:
        out = set()
        for name, cls in self.classes_by_name.items():
            for base in cls.bases:
                q = self.qualname(base.value) or dotted(base.value) or ""
                if q.endswith("Dataset") or q in out:
                    out.add(name)
        return out

    # -- kinds ----------------------------------------------------------------------------
    def kinds(self, node: cst.CSTNode | None) -> frozenset[str]:
        """What `node` holds; see the module docstring. Memoised, cycle-safe."""
        if node is None:
            return frozenset()
        key = (node,)
        got = self._memo_kinds.get(key)
        if got is not None:
            return got
        self._memo_kinds[key] = frozenset()  # cycle guard
        result = frozenset(self._kinds(node))
        self._memo_kinds[key] = result
        return result

    def has_kind(self, node: cst.CSTNode | None, kind: str, weak: bool = True) -> bool:
        ks = self.kinds(node)
        return kind in ks or (weak and ("~" + kind) in ks)

    def _binding_kinds(self, b: Binding) -> set[str]:
        if b.how == "expr":
            return set(self.kinds(b.node))
        if b.how == "unpack":
            return self._unpack_kinds(b.node, b.index)
        if b.how in ("iter", "iter_unpack"):
            return self._element_kinds(b.node, b.index)
        if b.how == "with":
            ks = set(self.kinds(b.node))
            return {"tensor"} & ks
        if b.how == "param":
            p: cst.Param = b.node  # type: ignore[assignment]
            out: set[str] = set()
            if p.annotation is not None:
                ann = self.qualname(p.annotation.annotation) or dotted(p.annotation.annotation) or ""
                last = ann.rsplit(".", 1)[-1]
                if last == "DataLoader":
                    out.add("dataloader")
                elif last in ("Optimizer",) or last in OPTIMIZER_CLASSES:
                    out.add("optimizer")
                elif last in ("Module",) or last in self.module_classes:
                    out.add("model")
                elif last == "Tensor":
                    out.add("tensor")
                elif last == "GradScaler":
                    out.add("scaler")
            if not out:
                out |= name_hints(p.name.value)
            if p.default is not None:
                out |= set(self.kinds(p.default)) & {"device_cuda", "device_cpu", "device_other"}
            return out
        return set()

    def _unpack_kinds(self, node: cst.CSTNode, index: tuple[int, ...]) -> set[str]:
        # `model, opt, loader = accelerator.prepare(model, opt, loader)`
        if isinstance(node, cst.Call) and call_name(node) in ("prepare", "setup", "setup_dataloaders") and index:
            positional = [a for a in node.args if a.keyword is None and not a.star]
            if index[0] < len(positional):
                return set(self.kinds(positional[index[0]].value))
        if isinstance(node, (cst.Tuple, cst.List)) and index:
            els = node.elements
            if index[0] < len(els) and not isinstance(els[index[0]], cst.StarredElement):
                inner = els[index[0]].value
                if len(index) == 1:
                    return set(self.kinds(inner))
                return self._unpack_kinds(inner, index[1:])
        base = set(self.kinds(node))
        out = set()
        if "batch" in base or "~batch" in base:
            out.add("batch")
        if "output" in base or "tensor" in base:
            out |= {"tensor", "output"} & (base | {"tensor"})
        if "dataloader" in base:  # e.g. `train_dl, val_dl = make_loaders()`
            out.add("dataloader")
        if "~dataloader" in base:
            out.add("~dataloader")
        return out

    def _element_kinds(self, it: cst.CSTNode, index: tuple[int, ...]) -> set[str]:
        """Kinds of an element produced by iterating `it`, then unpacked by `index`."""
        if isinstance(it, cst.Call):
            name = call_name(it)
            q = self.qualname(it.func) or name
            if q in ("enumerate",) and it.args:
                if not index:
                    return set()
                if index[0] == 0:
                    return {"int"}
                return self._element_kinds(it.args[0].value, index[1:])
            if q == "zip" and it.args:
                if not index:
                    return set()
                if index[0] < len(it.args):
                    return self._element_kinds(it.args[index[0]].value, index[1:])
                return set()
            if (q or "").split(".")[-1] in ("tqdm", "trange", "iter", "islice", "track", "progress_bar", "chain") and it.args:
                return self._element_kinds(it.args[0].value, index)
            if name in ("items",) and isinstance(it.func, cst.Attribute):
                base = self.kinds(it.func.value)
                if "batch" in base and index and index[0] == 1:
                    return {"batch"}
                return set()
            if name in ("values",) and isinstance(it.func, cst.Attribute):
                base = self.kinds(it.func.value)
                return {"batch"} if "batch" in base else set()
        ks = self.kinds(it)
        if "dataloader" in ks or "~dataloader" in ks or "batch" in ks:
            return {"batch"} if "dataloader" in ks or "batch" in ks else {"~batch", "batch"}
        if "model" in ks and isinstance(it, cst.Call) and call_name(it) in ("parameters", "named_parameters"):
            return {"parameter"}
        return set()

    def _kinds(self, node: cst.CSTNode) -> set[str]:
        if isinstance(node, cst.Name):
            bs = self.lookup(node.value, node)
            if bs:
                out: set[str] = set()
                for b in bs:
                    out |= self._binding_kinds(b)
                if "model" in out or "criterion" in out:
                    out.discard("tensor")
                return out
            q = self.qualname(node)
            if q is not None:
                return set()
            return name_hints(node.value)
        if isinstance(node, cst.Attribute):
            bs = self.self_attr_bindings(node)
            if bs:
                out = set()
                for b in bs:
                    out |= self._binding_kinds(b)
                return out
            attr = node.attr.value
            base = self.kinds(node.value)
            if attr == "loss" and ("output" in base or "tensor" in base or "~model" in base or not base):
                return {"loss", "tensor"}
            if attr in ("logits", "last_hidden_state", "hidden_states") and "output" in base:
                return {"tensor", "output"}
            if attr in ("module", "_orig_mod") and ("model" in base or "~model" in base):
                return {"model"}
            if "batch" in base:
                return {"batch"}
            if attr in ("grad", "data") and ("parameter" in base or "tensor" in base):
                return {"tensor"}
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                return name_hints(attr)
            if self.qualname(node) is None:
                return name_hints(attr) & {"~dataloader", "~optimizer", "~model", "~criterion", "~scaler"}
            return set()
        if isinstance(node, cst.Call):
            return self._call_kinds(node)
        if isinstance(node, cst.Subscript):
            base = self.kinds(node.value)
            where = base & {"cpu_tensor", "device_tensor"}  # indexing keeps the device
            if "batch" in base:
                return {"batch"} | where
            if "output" in base:
                return {"tensor", "output"} | where
            if "loss" in base:
                return {"loss", "tensor"} | where
            if "tensor" in base:
                return {"tensor"} | where
            if "numpy" in base:
                return {"numpy"}
            return set()
        if isinstance(node, cst.BinaryOperation):
            left, right = self.kinds(node.left), self.kinds(node.right)
            out = set()
            for side in (left, right):
                if "loss" in side:
                    out |= {"loss", "tensor"}
                if "tensor" in side or "output" in side:
                    out.add("tensor")
                out |= side & {"device_tensor"}
            if not out:
                if left & {"number", "int"} and right & {"number", "int"}:
                    return {"number"}
                if (left | right) & {"numpy"}:
                    return {"numpy"}
            return out
        if isinstance(node, cst.UnaryOperation):
            return set(self.kinds(node.expression)) & {"tensor", "loss"}
        if isinstance(node, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in node.comparisons):
                return set()
            left = self.kinds(node.left)
            if "tensor" in left or "output" in left:
                return {"tensor"}
            for comp in node.comparisons:
                if "tensor" in self.kinds(comp.comparator):
                    return {"tensor"}
            return set()
        if isinstance(node, cst.IfExp):
            return set(self.kinds(node.body)) | set(self.kinds(node.orelse))
        if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
            v = literal_value(node)
            if isinstance(v, str):
                return _device_string_kinds(v)
            return set()
        if isinstance(node, (cst.Integer, cst.Float)):
            return {"number"}
        return set()

    def _call_kinds(self, node: cst.Call) -> set[str]:
        q = self.qualname(node.func)
        name = call_name(node)
        if q is not None:
            if q == DATALOADER:
                return {"dataloader"}
            if q.rsplit(".", 1)[-1] in ("tqdm", "track") and node.args and node.args[0].keyword is None:
                # `pbar = tqdm(loader)`: iterating the bar iterates the loader.
                return set(self.kinds(node.args[0].value)) & {"dataloader", "~dataloader"}
            if q in SCALERS:
                return {"scaler"}
            if q.startswith("torch.optim.") and q.rsplit(".", 1)[-1] in OPTIMIZER_CLASSES:
                return {"optimizer"}
            if _THIRD_PARTY_OPTIMIZERS.match(q):
                return {"optimizer"}
            if q == "torch.device":
                if node.args:
                    return _device_kinds_of(self, node.args[0].value)
                return {"device_other"}
            if q.startswith("torch.nn.") and q.rsplit(".", 1)[-1][:1].isupper():
                last = q.rsplit(".", 1)[-1]
                if last.endswith("Loss"):
                    return {"criterion"}
                if last in ("DataParallel", "DistributedDataParallel") or q.endswith("DistributedDataParallel"):
                    return {"model"}
                return {"model", "layer"}
            if q.startswith("torch.nn.functional."):
                fname = q.rsplit(".", 1)[-1]
                if fname in LOSS_FUNCTIONS:
                    return {"loss", "tensor"}
                return {"tensor"}
            if q == "torch.compile" and node.args:
                return set(self.kinds(node.args[0].value)) & {"model"} or {"model"}
            if MODEL_FACTORIES.match(q) and not q.endswith(("Tokenizer", "Config", "Processor")):
                if ".from_pretrained" in q or q.startswith(("torchvision.models", "timm", "torch.hub", "torchaudio.models")):
                    return {"model"}
            if q.startswith("torch.") and not _NON_TENSOR_TORCH.match(q):
                short = q.rsplit(".", 1)[-1]
                if short in _CONSTRUCTORS and q.count(".") == 1:
                    dev = get_arg(node, "device")
                    if dev is None or self.device_kinds(dev.value) == {"device_cpu"}:
                        return {"tensor", "torch_op", "cpu_tensor"}
                    return {"tensor", "torch_op", "device_tensor"}
                if short in ("from_numpy", "as_tensor") and get_arg(node, "device") is None:
                    return {"tensor", "torch_op", "cpu_tensor"}
                return {"tensor", "torch_op"}
            if q in ("numpy.array", "numpy.asarray") or q.startswith("numpy."):
                return {"numpy"}
            return set()
        if isinstance(node.func, cst.Name):
            fname = node.func.value
            if fname in self.module_classes:
                if fname in self.loss_classes:
                    return {"criterion"}
                return {"model"}
            if fname in self.dataset_classes:
                return {"dataset"}
            if fname in ("float", "int", "bool", "len", "round", "sum", "abs"):
                return {"number"} if fname != "sum" else set()
            if fname in ("iter",) and node.args:
                return set(self.kinds(node.args[0].value))
            if fname == "next" and node.args:
                return self._element_kinds(node.args[0].value, ())
            # A call of a local function that returns a DataLoader or a model.
            if fname in self.functions_by_name:
                out = set()
                for fn in self.functions_by_name[fname]:
                    for ret in self.nodes_within(fn, cst.Return):
                        if ret.value is not None and self.enclosing_function(ret) is fn:
                            out |= set(self.kinds(ret.value)) & {"dataloader", "model", "optimizer", "loss", "tensor"}
                return out
        base = self.kinds(node.func)
        callee = (call_name(node) or "").lower()
        if "model" in base or ("~model" in base and not _CALLEE_VERB.match(callee)):
            return {"tensor", "output"}
        if "criterion" in base or ("~criterion" in base and not _CALLEE_VERB.match(callee)):
            return {"loss", "tensor"}
        if isinstance(node.func, cst.Attribute):
            rk = self.kinds(node.func.value)
            if name in ("item", "tolist"):
                return {"number"}
            if name in ("detach", "detach_"):
                return {"tensor", "detached"} if ("tensor" in rk or "loss" in rk or "output" in rk) else set()
            if name == "numpy":
                return {"numpy"}
            if name in ("to", "cuda") and ("batch" in rk or "tensor" in rk) and "model" not in rk:
                out = {"batch"} if "batch" in rk else set()
                out |= {"tensor"} & rk | ({"loss", "tensor"} if "loss" in rk else set())
                dev = None if name == "cuda" else get_arg(node, "device", 0)
                if name == "cuda" or (dev is not None and self.device_kinds(dev.value) - {"device_cpu"}
                                      and not (self.kinds(dev.value) & {"tensor"})):
                    out.add("device_tensor")
                elif "cpu_tensor" in rk:
                    out.add("cpu_tensor")
                if "device_tensor" in rk:
                    out.add("device_tensor")
                return out
            if name == "cpu":
                return ({"tensor", "cpu_tensor"} if rk & {"tensor", "loss", "output", "batch"} else set())
            if name in _PASS_THROUGH_METHODS:
                out = set()
                if "model" in rk and name in ("to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double", "type", "requires_grad_"):
                    return {"model"}
                if "~model" in rk and name in ("to", "cuda", "train", "eval"):
                    return {"~model"}
                if "batch" in rk:
                    out.add("batch")
                if "loss" in rk:
                    out |= {"loss", "tensor"}
                if "tensor" in rk or "output" in rk or "parameter" in rk:
                    out.add("tensor")
                out |= rk & {"cpu_tensor", "device_tensor", "numpy"}
                if "dataloader" in rk:
                    out.add("dataloader")
                return out
            if name in ("parameters", "named_parameters") and ("model" in rk or "~model" in rk):
                return {"parameters"}
            if name in ("forward",) and ("model" in rk or "~model" in rk):
                return {"tensor", "output"}
        return set()

    # -- devices --------------------------------------------------------------------------
    def device_kinds(self, node: cst.CSTNode) -> set[str]:
        return _device_kinds_of(self, node)

    def is_provably_cuda(self, node: cst.CSTNode | None) -> bool:
        """A device expression that is CUDA, or CUDA-or-CPU from `torch.cuda.is_available()`."""
        if node is None:
            return False
        ks = self.device_kinds(node)
        return "device_cuda" in ks and not (ks & {"device_other", "device_unknown"})

    def is_device_expr(self, node: cst.CSTNode | None) -> bool:
        """A device for sure (not a dtype or tensor): literal, torch.device, or names bound only to those."""
        if node is None:
            return False
        ks = self.device_kinds(node)
        return bool(ks) and not (ks & {"device_unknown"})

    # -- file-wide facts ------------------------------------------------------------------
    @cached_property
    def words(self) -> "Words":
        """Every identifier and string literal of the file, for name-based guards."""
        return Words(self)

    @cached_property
    def is_cuda_code(self) -> bool:
        for call in self.index[cst.Call]:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "cuda":
                return True
        for s in self.index[cst.SimpleString]:
            v = literal_value(s)
            if isinstance(v, str) and re.fullmatch(r"cuda(:\d+)?", v):
                return True
        for a in self.index[cst.Attribute]:
            q = self.qualname(a)
            if q is not None and (q == "torch.cuda.is_available" or q.startswith("torch.cuda.")):
                return True
        return False

    @cached_property
    def may_use_accelerator(self) -> bool:
        """Whether tensors in this file may live on an accelerator: CUDA code, data moved
        with `.to(<device>)` where the device is not provably the CPU, a `device=` argument
        that is not the CPU, or a training framework that places data itself."""
        if self.is_cuda_code:
            return True
        for call in self.index[cst.Call]:
            name = call_name(call)
            if name in ("to",) and isinstance(call.func, cst.Attribute) and call.args:
                dev = get_arg(call, "device", 0)
                if dev is None:
                    continue
                q = self.qualname(dev.value) or ""
                if q.startswith("torch.") and q.rsplit(".", 1)[-1] in _DTYPE_NAMES:
                    continue
                if self.kinds(dev.value) & {"tensor", "output", "batch"}:
                    continue
                if self.device_kinds(dev.value) - {"device_cpu"}:
                    return True
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "device":
                    if self.device_kinds(arg.value) - {"device_cpu"}:
                        return True
            q = self.qualname(call.func) or ""
            if q in ("torch.set_default_device", "torch.cuda.set_device"):
                return True
        frameworks = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "transformers", "fabric")
        return any(self.imports.imports_module(f) for f in frameworks)

    def references(self, *prefixes: str) -> list[cst.CSTNode]:
        """Name/Attribute nodes (outermost) whose qualified name starts with one of `prefixes`."""
        out = []
        for a in self.index[cst.Attribute]:
            parent = self.parents.get(a)
            if isinstance(parent, cst.Attribute) and parent.value is a:
                continue
            q = self.qualname(a)
            if q is not None and q.startswith(prefixes):
                out.append(a)
        for call in self.index[cst.Call]:
            if isinstance(call.func, cst.Name):
                q = self.qualname(call.func)
                if q is not None and q.startswith(prefixes):
                    out.append(call.func)
        return out

    @cached_property
    def uses_autocast(self) -> bool:
        return bool(self.references(*AUTOCASTS)) or any(
            (self.qualname(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "") in AUTOCASTS
            for d in self.index[cst.Decorator]
        )

    @cached_property
    def uses_grad_scaler(self) -> bool:
        return bool(self.references(*SCALERS))

    def assigned_attributes(self, qualname_prefix: str) -> list[cst.CSTNode]:
        """Assignment targets such as `torch.backends.cudnn.benchmark = …`."""
        out = []
        for node in self.index[cst.Assign]:
            for t in node.targets:
                q = self.qualname(t.target) if isinstance(t.target, cst.Attribute) else None
                if q is not None and q.startswith(qualname_prefix):
                    out.append(node)
        return out

    # -- loops ----------------------------------------------------------------------------
    @cached_property
    def _calls_by_container(self) -> dict[cst.CSTNode, list[cst.Call]]:
        """Each call under its innermost loop/def/lambda/class/comprehension, when it sits in
        that container's body (not in a loop's `iter`, `else`, or a def's decorators)."""
        out: dict[cst.CSTNode, list[cst.Call]] = {}
        containers = (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.CompFor)
        for call in self.index[cst.Call]:
            cur: cst.CSTNode = call
            for a in self.ancestors(call):
                if isinstance(a, containers):
                    if getattr(a, "body", None) is cur:
                        out.setdefault(a, []).append(call)
                    break
                cur = a
        return out

    def direct_body_calls(self, container: cst.CSTNode) -> list[cst.Call]:
        """Calls inside `container`'s body, not inside a nested loop, def, lambda or class."""
        return self._calls_by_container.get(container, [])

    def is_backward_call(self, call: cst.Call) -> bool:
        name = call_name(call)
        return name in ("backward", "manual_backward") and isinstance(call.func, cst.Attribute)

    def is_optimizer_step(self, call: cst.Call) -> bool:
        if call_name(call) != "step" or not isinstance(call.func, cst.Attribute):
            return False
        rk = self.kinds(call.func.value)
        if "scaler" in rk or "~scaler" in rk:
            return True
        if "optimizer" in rk:
            return True
        if "~optimizer" in rk and not ({"model", "dataloader"} & rk):
            return True
        return False

    def is_scaler_call_step(self, call: cst.Call) -> bool:
        """`loss_scaler(loss, optimizer, ...)`: a callable scaler object (timm's and MAE's
        NativeScaler) that runs backward and the optimizer step for the loop."""
        if not isinstance(call.func, (cst.Name, cst.Attribute)) or call_name(call) in ("step", "scale", "update"):
            return False
        if "~scaler" not in name_hints(call_name(call) or "") and "scaler" not in self.kinds(call.func):
            return False
        return any(a.keyword is None and self.has_kind(a.value, "optimizer") for a in call.args)

    def is_scaler_step(self, call: cst.Call) -> bool:
        return (
            call_name(call) == "step"
            and isinstance(call.func, cst.Attribute)
            and self.has_kind(call.func.value, "scaler")
        )

    @cached_property
    def _step_functions(self) -> dict[cst.FunctionDef, str]:
        """Functions whose body is one training (or eval) step: Lightning hooks, functions
        named like a step (`train_step`, `_run_batch`, `training_step`), and functions this
        file calls on every iteration of a training/eval loop. A function that merely
        calls `.backward()` once (a test, a one-off) is not a step."""
        out: dict[cst.FunctionDef, str] = {}
        for fn in self.index[cst.FunctionDef]:
            name = fn.name.value
            if name.startswith("test"):
                continue
            if name == "training_step":
                out[fn] = "train"
            elif name in ("validation_step", "test_step", "predict_step"):
                out[fn] = "eval"
            elif _STEP_NAME.match(name) and not self.direct_loops_in(fn):
                calls = self.direct_body_calls(fn)
                if any(self.is_backward_call(c) or self.is_optimizer_step(c) for c in calls):
                    out[fn] = "train"
        # Functions called every iteration of a training loop in this file are steps too.
        for loop, kind in list(self._loops.items()):
            for call in self.direct_body_calls(loop):
                if self.iteration_context_plain(call, loop) is False:
                    continue
                target = None
                if isinstance(call.func, cst.Name):
                    target = call.func.value
                elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value == "self":
                    target = call.func.attr.value
                for fn in self.functions_by_name.get(target or "", []):
                    if fn not in out and not self.direct_loops_in(fn) and not fn.name.value.startswith("test"):
                        out[fn] = kind
        return out

    def iteration_context_plain(self, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """Whether `node` runs on every iteration of `loop` (not in a throttled branch)."""
        cur = node
        for parent in self.ancestors(node):
            if parent is loop:
                return True
            if isinstance(parent, cst.If) and cur is parent.body:
                if self.is_throttled_test(parent.test) or _leaves(parent.body):
                    return False
            if isinstance(parent, cst.ExceptHandler):
                return False
            cur = parent
        return False

    def direct_loops_in(self, fn: cst.FunctionDef) -> bool:
        for cls in (cst.For, cst.While):
            for loop in self.index[cls]:
                if self.enclosing_function(loop) is fn:
                    return True
        return False

    def step_function_kind(self, fn: cst.FunctionDef) -> str | None:
        return self._step_functions.get(fn)

    @cached_property
    def _loops(self) -> dict[cst.CSTNode, str]:
        out: dict[cst.CSTNode, str] = {}
        local_step_fns = {}
        for fn in self.index[cst.FunctionDef]:
            calls = self.direct_body_calls(fn)
            if any(self.is_backward_call(c) for c in calls):
                local_step_fns[fn.name.value] = True
        for loop in (*self.index[cst.For], *self.index[cst.While]):
            calls = self.direct_body_calls(loop)
            train = any(self.is_backward_call(c) or self.is_optimizer_step(c) or self.is_scaler_call_step(c)
                        for c in calls)
            if not train:
                for c in calls:
                    n = c.func.value if isinstance(c.func, cst.Name) else (
                        c.func.attr.value if isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name) and c.func.value.value == "self" else None)
                    if n in local_step_fns:
                        train = True
                        break
            if train:
                out[loop] = "train"
                continue
            if isinstance(loop, cst.For) and self.iterates_loader(loop):
                if self._calls_a_model(calls) or self.iterates_loader(loop, weak=False):
                    out[loop] = "eval"
        return out

    def iterates_loader(self, loop: cst.For, weak: bool = True) -> bool:
        it = loop.iter
        # `for i, batch in enumerate(loader)`: the loop still walks the loader.
        while isinstance(it, cst.Call) and (self.qualname(it.func) or call_name(it)) == "enumerate" and it.args:
            it = it.args[0].value
        ks = self._element_kinds(it, ())
        if "batch" in ks and "~batch" not in ks:
            return True
        return weak and "~batch" in ks

    def _calls_a_model(self, calls: Iterable[cst.Call]) -> bool:
        for c in calls:
            ks = self.kinds(c.func)
            if "model" in ks or "~model" in ks:
                return True
            if isinstance(c.func, cst.Name) and c.func.value == "self":
                return True
        return False

    def loop_kind(self, loop: cst.CSTNode) -> str | None:
        return self._loops.get(loop)

    def training_loops(self) -> list[cst.CSTNode]:
        return [l for l, k in self._loops.items() if k == "train"]

    def eval_loops(self) -> list[cst.CSTNode]:
        return [l for l, k in self._loops.items() if k == "eval"]

    # -- per-iteration code ------------------------------------------------------------------
    def is_option_test(self, test: cst.BaseExpression) -> bool:
        """`if args.debug:`, `if not config.fast:`, `if self.args.sync:` — a user option."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        text = dotted(test) if isinstance(test, (cst.Name, cst.Attribute)) else None
        if text is None:
            return False
        parts = text.split(".")
        if parts[0] == "self" and len(parts) > 2:
            parts = parts[1:]
        return len(parts) >= 2 and parts[0] in _OPTION_ROOTS

    def is_throttled_test(self, test: cst.BaseExpression) -> bool:
        if self.is_option_test(test):
            return True
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            if self.is_option_test(test.left) or self.is_option_test(test.right):
                return True
        for n in _iter_expr(test):
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo):
                return True
            if isinstance(n, cst.Comparison):
                for comp in n.comparisons:
                    if isinstance(comp.operator, cst.Equal):
                        sides = (n.left, comp.comparator)
                        for side in sides:
                            if isinstance(side, cst.Integer):
                                return True
                            for sub in _iter_expr(side):
                                if isinstance(sub, cst.Call) and isinstance(sub.func, cst.Name) and sub.func.value == "len":
                                    return True
                                if isinstance(sub, cst.Name) and _BOUND_NAMES.search(sub.value):
                                    return True
                                if isinstance(sub, cst.Attribute) and _BOUND_NAMES.search(sub.attr.value):
                                    return True
            if isinstance(n, cst.Name) and _THROTTLE_NAMES.search(n.value.lower()):
                return True
            if isinstance(n, cst.Attribute) and _THROTTLE_NAMES.search(n.attr.value.lower()):
                return True
        return False

    def iteration_context(self, node: cst.CSTNode) -> LoopInfo | None:
        """The training/eval loop (or per-step function) `node` runs in on every iteration.

        None when the node is outside any such loop, or only runs in a throttled branch
        (`if step % N == 0`, `if i == 0`, `if is_last`), in an exception handler, in a
        branch that leaves the loop (ends in break/return/raise), or in a nested function.
        """
        cur = node
        for parent in self.ancestors(node):
            if isinstance(parent, cst.If):
                if cur is parent.body:
                    if self.is_throttled_test(parent.test) or _leaves(parent.body):
                        return None
            elif isinstance(parent, cst.ExceptHandler):
                return None
            elif isinstance(parent, (cst.For, cst.While)):
                if cur is parent.body:
                    kind = self._loops.get(parent)
                    if kind is not None:
                        return LoopInfo(parent, kind)
                elif cur is getattr(parent, "orelse", None):
                    return None
            elif isinstance(parent, cst.FunctionDef):
                kind = self._step_functions.get(parent)
                if kind is not None and cur is parent.body:
                    return LoopInfo(parent, kind)
                return None
            elif isinstance(parent, (cst.Lambda, cst.ClassDef)):
                return None
            cur = parent
        return None

    # -- grad mode ------------------------------------------------------------------------
    GRAD_OFF = ("torch.no_grad", "torch.inference_mode")

    def grad_mode_of(self, expr: cst.BaseExpression) -> str | None:
        """"off" for no_grad()/inference_mode()/set_grad_enabled(False), "on" for
        enable_grad()/set_grad_enabled(True), else None."""
        target = expr.func if isinstance(expr, cst.Call) else expr
        q = self.qualname(target)
        if q in self.GRAD_OFF:
            if isinstance(expr, cst.Call) and q == "torch.inference_mode" and expr.args:
                if literal_value(expr.args[0].value) is False:
                    return "on"
            return "off"
        if q == "torch.enable_grad":
            return "on"
        if q == "torch.set_grad_enabled" and isinstance(expr, cst.Call) and expr.args:
            v = literal_value(expr.args[0].value)
            if v is False:
                return "off"
            if v is True:
                return "on"
            return "unknown"
        return None

    def grad_context(self, node: cst.CSTNode) -> str | None:
        """"off"/"on"/"unknown" if `node` runs inside a grad-mode context or a function
        decorated with one (innermost wins); None if no such context is visible."""
        for a in self.ancestors(node):
            if isinstance(a, cst.With):
                for item in a.items:
                    mode = self.grad_mode_of(item.item)
                    if mode is not None:
                        return mode
            elif isinstance(a, cst.FunctionDef):
                for d in a.decorators:
                    mode = self.grad_mode_of(d.decorator)
                    if mode is not None:
                        return mode
                return None
            elif isinstance(a, (cst.Lambda, cst.ClassDef)):
                return None
        return None

    def computed_without_grad(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether the value of `expr` was computed with autograd off: `out = model(x)` under
        `with torch.no_grad():`, then `loss = out.loss` outside it."""
        if depth > 4:
            return False
        if self.grad_context(expr) == "off":
            return True
        base = expr
        while isinstance(base, (cst.Attribute, cst.Subscript)):
            base = base.value
        if isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and base.func.attr.value in _PASS_THROUGH_METHODS:
            return self.computed_without_grad(base.func.value, depth + 1)
        if not isinstance(base, cst.Name):
            return False
        bindings = self.lookup(base.value, expr)
        if not bindings:
            return False
        for b in bindings:
            if b.how not in ("expr", "unpack") or b.site is None:
                return False
            if not (self.grad_context(b.site) == "off" or self.computed_without_grad(b.node, depth + 1)):
                return False
        return True

    def calls_within(self, container: cst.CSTNode) -> list[cst.Call]:
        """Every call under `container`, nested defs included, in source order."""
        lo = self.order.get(container, 0)
        return [c for c in self.index[cst.Call] if self.order.get(c, -1) > lo and self.is_inside(c, container)]

    def receiver_text(self, expr: cst.BaseExpression | None) -> str | None:
        """`self.scaler` → "self.scaler"; used to match the same object across calls."""
        return dotted(expr) if expr is not None else None


_EXITS = {"sys.exit", "exit", "quit", "os._exit", "os.abort"}


def _ends_the_run(stmt: cst.BaseSmallStatement) -> bool:
    """`break`, `return`, `raise`, or `sys.exit(...)`/`exit()`: nothing after it iterates."""
    if isinstance(stmt, (cst.Break, cst.Return, cst.Raise)):
        return True
    if isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call):
        return (dotted(stmt.value.func) or "") in _EXITS
    return False


def _leaves(block: cst.BaseSuite) -> bool:
    body = getattr(block, "body", ())
    if not body:
        return False
    last = body[-1]
    if isinstance(last, cst.SimpleStatementLine) and last.body:
        return _ends_the_run(last.body[-1])
    if isinstance(block, cst.SimpleStatementSuite):
        return _ends_the_run(body[-1])
    return False


def _iter_expr(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for name in _child_fields(type(n)):
            v = getattr(n, name)
            if isinstance(v, cst.CSTNode):
                stack.append(v)
            elif isinstance(v, (list, tuple)):
                stack.extend(x for x in v if isinstance(x, cst.CSTNode))


def iter_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node under `node` (whitespace and punctuation skipped), node included."""
    return _iter_expr(node)


def _device_string_kinds(v: str) -> set[str]:
    if re.fullmatch(r"cuda(:\d+)?", v):
        return {"device_cuda"}
    if v == "cpu":
        return {"device_cpu"}
    if re.fullmatch(r"(mps|xpu|hpu|mtia|meta|xla|privateuseone|npu)(:\d+)?", v):
        return {"device_other"}
    return set()


def _device_kinds_of(facts: Facts, node: cst.CSTNode, depth: int = 0) -> set[str]:
    """Device kinds of an expression: device_cuda / device_cpu / device_other / device_unknown."""
    if depth > 8:
        return {"device_unknown"}
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        v = literal_value(node)
        ks = _device_string_kinds(v) if isinstance(v, str) else set()
        return ks or {"device_unknown"}
    if isinstance(node, cst.Integer):
        return {"device_cuda"}  # `.to(0)` / `.cuda(0)`
    if isinstance(node, cst.IfExp):
        return _device_kinds_of(facts, node.body, depth + 1) | _device_kinds_of(facts, node.orelse, depth + 1)
    if isinstance(node, cst.Call):
        q = facts.qualname(node.func)
        if q == "torch.device" and node.args:
            return _device_kinds_of(facts, node.args[0].value, depth + 1)
        if q == "torch.cuda.current_device":
            return {"device_cuda"}
        return {"device_unknown"}
    if isinstance(node, cst.Name):
        bs = facts.lookup(node.value, node)
        if not bs:
            return {"device_unknown"}
        out: set[str] = set()
        for b in bs:
            if b.how == "expr":
                out |= _device_kinds_of(facts, b.node, depth + 1)
            elif b.how == "param":
                out |= {"device_unknown"}
            else:
                out.add("device_unknown")
        return out
    if isinstance(node, cst.Attribute):
        bs = facts.self_attr_bindings(node)
        if bs:
            out = set()
            for b in bs:
                out |= _device_kinds_of(facts, b.node, depth + 1) if b.how == "expr" else {"device_unknown"}
            return out
        return {"device_unknown"}
    return {"device_unknown"}


class Words:
    """Every identifier (names, attribute names, keyword names) and string literal of a
    file, collected from the facts walk's index, plus whether the `@` operator appears."""

    def __init__(self, facts: Facts) -> None:
        self.name_nodes: dict[str, list[cst.Name]] = {}
        for node in facts.index[cst.Name]:
            self.name_nodes.setdefault(node.value, []).append(node)  # type: ignore[attr-defined]
        strings = set()
        for node in facts.index[cst.SimpleString]:
            v = literal_value(node)
            if isinstance(v, str):
                strings.add(v)
        self.names = frozenset(self.name_nodes)
        self.strings = frozenset(strings)
        self.matmul_operator = any(
            isinstance(n.operator, cst.MatrixMultiply) for n in facts.index[cst.BinaryOperation]  # type: ignore[attr-defined]
        ) or any(isinstance(n.operator, cst.MatrixMultiplyAssign) for n in facts.index[cst.AugAssign])  # type: ignore[attr-defined]
        self._lower = tuple(w.lower() for w in (*self.names, *self.strings))
        self._lower_names = tuple(w.lower() for w in self.names)

    def contains(self, *fragments: str) -> bool:
        """Whether any identifier or string contains one of `fragments` (case-insensitive)."""
        frags = tuple(f.lower() for f in fragments)
        return any(f in w for w in self._lower for f in frags)

    def name_contains(self, *fragments: str) -> bool:
        """Whether any identifier (not string) contains one of `fragments` (case-insensitive)."""
        frags = tuple(f.lower() for f in fragments)
        return any(f in w for w in self._lower_names for f in frags)

    def matches(self, rx: "re.Pattern") -> bool:
        return any(rx.search(w) for w in self._lower)
