"""Whether perflint owns this process.

The command line (`check`, `fix`, `verify`) and the worker processes it forks are
perflint's own: there, `perflint.cstprivate` may speed libcst up process-wide.  Anything
else that imports perflint (the language server's threads, `perflint.api`, a test, another
tool) gets stock libcst.  Kept apart from `cstprivate` so that setting it imports nothing.
"""

OWNED = False


def own() -> None:
    global OWNED
    OWNED = True
