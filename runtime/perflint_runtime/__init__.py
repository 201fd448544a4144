"""perflint's runtime: an optimised trainer and the harness behind `perflint verify`.

    from perflint_runtime import Trainer

The linter (`perflint`) never imports this package; this package imports torch, and the
linter's engine when `perflint verify` asks for a fixed script.
"""

from perflint_runtime.trainer import Trainer

__all__ = ["Trainer"]
