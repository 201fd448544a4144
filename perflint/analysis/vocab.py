"""The vocabulary the analyses recognise: torch classes and functions, naming conventions."""

from __future__ import annotations

import re
from enum import StrEnum


class Kind(StrEnum):
    """What a value is, as the analyses tell it (`Kinds.of`, a project summary's `returns`
    and class `kinds`).  A `NAMED_` kind is weak evidence: only the name says so (`train_dl`,
    `net`).  The members are strings (summaries keep them as JSON), so a kind read back from
    a summary equals the member."""

    DATALOADER = "dataloader"
    BATCH = "batch"  # an element of a loader, or what is unpacked from one
    MODEL = "model"
    LAYER = "layer"  # a single torch layer (also a model)
    PARAMETER = "parameter"  # one parameter: what iterating `model.parameters()` gives
    PARAMETERS = "parameters"  # `model.parameters()` itself
    OPTIMIZER = "optimizer"
    SCALER = "scaler"  # a GradScaler
    CRITERION = "criterion"  # a loss module or function
    LOSS = "loss"  # a loss value
    OUTPUT = "output"  # what a model returns
    TENSOR = "tensor"
    CPU_TENSOR = "cpu_tensor"
    DEVICE_TENSOR = "device_tensor"  # a tensor on an accelerator
    DETACHED = "detached"  # `.detach()`ed: no graph
    TORCH_OP = "torch_op"  # the result of a torch function
    NUMBER = "number"  # a Python number
    INT = "int"
    NUMPY = "numpy"
    DATASET = "dataset"
    GRAD_OFF_DECORATOR = "grad_off_decorator"  # a function that returns a no-grad decorator
    # Devices (`Devices.device_kinds`).
    DEVICE_CUDA = "device_cuda"
    DEVICE_CPU = "device_cpu"
    DEVICE_OTHER = "device_other"
    DEVICE_UNKNOWN = "device_unknown"
    # A project Dataset class's traits (its summary's `kinds`).
    CHEAP_SAMPLES = "cheap_samples"  # in-memory or memory-mapped samples
    DEVICE_SAMPLES = "device_samples"  # samples already on a device
    SHARED_FILE = "shared_file"  # one open file seeked per item
    ONE_ITEM = "one_item"  # `__len__` returns 1: one sample an epoch
    COUNTED_ITEMS = "counted_items"  # `__getitem__` advances a counter of its own (`self.step += 1`)
    NUMPY_RANDOM = "numpy_random"  # `__getitem__` draws from NumPy's global random state
    PAD_COLLATE = "pad_collate"  # a collate function that only pads
    ITERABLE_DATASET = "iterable_dataset"
    # Suggested by a naming convention alone.
    NAMED_DATALOADER = "~dataloader"
    NAMED_BATCH = "~batch"
    NAMED_MODEL = "~model"
    NAMED_OPTIMIZER = "~optimizer"
    NAMED_SCALER = "~scaler"
    NAMED_CRITERION = "~criterion"
    NAMED_LOSS = "~loss"


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
# What `from_pretrained` loads besides models: tokenizers, configurations, processors.
_NOT_A_MODEL = re.compile(r"(Tokenizer(Fast)?|Config|Processor|FeatureExtractor|GenerationConfig)$")


def loads_model(q: str) -> bool:
    """`q` (a call's qualified name) builds a model: a model factory, or `from_pretrained` of
    a transformers class other than a tokenizer, configuration or processor."""
    if not MODEL_FACTORIES.match(q):
        return False
    cls = q[: -len(".from_pretrained")] if q.endswith(".from_pretrained") else q
    return not _NOT_A_MODEL.search(cls)


# Calls that return their receiver's kind (tensors stay tensors, models stay models).
_PASS_THROUGH_METHODS = {
    "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "long", "int", "bool",
    "contiguous", "squeeze", "unsqueeze", "view", "reshape", "permute", "transpose", "t",
    "flatten", "ravel", "clone", "train", "eval", "requires_grad_", "type", "expand", "repeat",
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
    (Kind.NAMED_DATALOADER, re.compile(r"(^|_)(data)?loader(s)?(_|$)|^dl(_\w+)?$|(^|_)dl$|_dataloader$|^loader_")),
    (Kind.NAMED_OPTIMIZER, re.compile(r"(^|_)(optim|optimizer|optimiser|opt)(s)?(_|\d|$)")),
    (Kind.NAMED_MODEL, re.compile(r"(^|_)(model|net|network|encoder|decoder|generator|discriminator|"
                          r"classifier|backbone|module|critic|actor|policy|q_net|qnet|unet|vae|student|teacher)(s)?(_|\d|$)")),
    (Kind.NAMED_CRITERION, re.compile(r"(^|_)(criterion|loss_fn|loss_func|lossfn|loss_function|criteria)(_|\d|$)")),
    (Kind.NAMED_SCALER, re.compile(r"(^|_)(grad_)?scaler(_|$)")),
    (Kind.NAMED_LOSS, re.compile(r"(^|_)loss(es)?(_|\d|$)")),
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
_BOUND_NAMES = re.compile(r"(last|final|max|total|num|end|steps|len|count|size|initial|start|first|begin)", re.I)


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

# torch factories that build a tensor from sizes and scalars alone: with no `device=` (and no
# default device set) the tensor is on the CPU.  (`torch.tensor(t)`, `torch.normal(mean, …)`
# and the like take tensors and follow their device.)
SIZE_FACTORIES = frozenset({"randn", "rand", "randint", "randperm", "zeros", "ones", "full", "empty", "arange",
                            "range", "linspace", "logspace", "eye"})

# Graph-library calls that build one batched graph object: a DataLoader's `pin_memory`
# pins tensors (and objects with a `pin_memory()` method, as PyG's `Batch`); a DGL graph has
# none (DGL offers only the in-place `pin_memory_()`), so pinning leaves it in pageable memory.
GRAPH_BATCH_CALLS = frozenset({"dgl.batch", "dgl.batch_hetero", "dgl.graph", "dgl.heterograph", "dgl.DGLGraph",
                               "dgl.merge"})
