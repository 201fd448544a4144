"""The shape of a module summary (`analysis.summary.summarise`), as the summary cache keeps it
(plain JSON) and `analysis.project` / `analysis.callers` read it.  Keys marked NotRequired
are left out when empty.  A reference is a dotted name as the file spells it ("utils.accuracy",
".engine.train_one_epoch"), "#name" for the file's own top-level names, "*name" for a name
that can only come from a star import.
"""


import re
from typing import Dict, List, TypedDict, Union

from typing import NotRequired

JsonScalar = Union[int, float, str, bool, None]
# An option as a call passes it: ["v", literal], ["o", "args.workers"] (an option whose default
# is looked up where the call is), ["?"] unknown.
KeywordValue = List[object]


class Signature(TypedDict):
    pos: List[str]  # positional parameters, `self` included for a method
    kwonly: NotRequired[List[str]]
    varargs: NotRequired[bool]
    varkw: NotRequired[str]  # the name of the `**kwargs`


class FunctionInfo(TypedDict):
    returns: List[str]  # the kinds it returns (analysis.project.RESULT_KINDS)
    ret_calls: List[str]  # references of the calls whose result it returns
    sig: Signature
    apis: List[str]  # torch layer / matmul APIs it calls
    uses: List[str]  # references of the project names it calls
    syncs: NotRequired[bool]  # waits for the GPU each time it runs
    loader: NotRequired[Dict[str, JsonScalar]]  # options of the DataLoader it returns ("?" unknown)
    static: NotRequired[bool]  # a staticmethod: a call's arguments fill the parameters from the first
    wrapped: NotRequired[bool]  # a method under a decorator that may change its call
    graph: NotRequired[bool]  # returns a DGL graph batch (or a tuple holding one)
    layers: NotRequired[List[str]]  # a `forward`: project classes whose instances (`self.` attributes) it calls each time


class ClassInfo(TypedDict):
    bases: List[str]  # references
    kinds: List[str]  # model, criterion, dataset and the dataset's traits ("len_param:size:0": `__len__` returns that parameter)
    attrs: Dict[str, List[str]]  # `self.x` → kinds
    methods: Dict[str, FunctionInfo]
    apis: List[str]
    uses: List[str]


# What one call of a project name passes (functional form: "in" is a keyword).  An argument
# key is the position ("0", "1" …) or the keyword.
CallRecord = TypedDict("CallRecord", {
    "ref": str,  # the callee; "<class reference>.<method>" for a call on an instance
    "in": Union[str, None],  # the top-level function or method ("Class.method") it sits in
    "args": List[List[str]],  # kinds of each positional argument
    "kw": Dict[str, List[str]],  # kinds of each keyword argument
    "every": bool,  # runs on every call of the function it sits in
    "inst": NotRequired[bool],  # a method called on an instance of a project class
    "step": NotRequired[str],  # "train" / "eval": runs once per step of that loop
    "line": NotRequired[int],  # the call's line, for a per-step call
    "nograd": NotRequired[bool],  # under `torch.no_grad()` / `inference_mode()`
    "after": NotRequired[bool],  # once per run, after the training loop of the function it sits in
    "via": NotRequired[Dict[str, list]],  # key → [reference of the project call it is bound to, unpacked]
    "dev": NotRequired[Dict[str, List[str]]],  # key → device kinds
    "fwd": NotRequired[Dict[str, str]],  # key → the caller's own parameter it forwards
    "kwv": NotRequired[Dict[str, KeywordValue]],  # keyword → its value
    "cls": NotRequired[Dict[str, str]],  # key → reference of the project class of the object
    "splat": NotRequired[bool],  # passes `*args`, or a `**kwargs` that is no known dict
    "ddp": NotRequired[List[str]],  # keys of names that may be bound to `DistributedDataParallel(...)`
})


class ModuleSummary(TypedDict):
    v: int  # SUMMARY_VERSION
    imports: Dict[str, str]  # local name → dotted project module / name (library roots left out)
    relative: Dict[str, str]  # local name → relative reference
    stars: List[str]  # modules star-imported
    libs: Dict[str, str]  # library names bound at top level (what a star import hands on)
    classes: Dict[str, ClassInfo]
    functions: Dict[str, FunctionInfo]
    defaults: Dict[str, JsonScalar]  # option defaults: argparse, dataclass fields, config literals
    constants: Dict[str, JsonScalar]  # module constants
    calls: List[CallRecord]
    attrs: List[str]  # attribute names used on objects of unknown class
    accel: bool  # tensors may live on an accelerator
    cuda: bool  # the file's own code is CUDA code
    framework: bool  # Accelerate, Lightning, DeepSpeed … place and cast for it
    trains: bool  # has a training loop or a per-step training function
    settings: NotRequired[List[str]]  # tf32, cudnn_benchmark, deterministic, amp, scaler, cuda_ext: on import
    main_settings: NotRequired[List[str]]  # the same, under `if __name__ == "__main__":`
    all: NotRequired[List[str]]  # `__all__`
    refs: NotRequired[List[str]]  # project functions named other than by a call
    cfgtree: NotRequired[Dict[str, JsonScalar]]  # yacs config defaults: "TRAIN.ACCUMULATION_STEPS" → 1


# -- reading summaries -------------------------------------------------------------------
# What the summary's "scaler" setting is made of (`summary._settings`), for files with no summary.
SCALER_WORDS = re.compile(r"GradScaler|grad_scaler|loss_scaler", re.I)


def rejects_non_blocking(method: dict | None) -> bool:
    return rejects_keyword(method, "non_blocking")


def rejects_keyword(method: dict | None, keyword: str) -> bool:
    if not method:
        return False
    sig = method.get("sig") or {}
    return keyword not in (sig.get("pos") or []) + (sig.get("kwonly") or []) and not sig.get("varkw")


def unpinnable(methods: dict) -> bool:
    """A class's methods (summary form) copy it to a device (`to`/`cuda`) but cannot pin it
    (no `pin_memory`): the DataLoader's pinning leaves it pageable."""
    return "pin_memory" not in methods and ("to" in methods or "cuda" in methods)
