"""Whether perflint owns this process.

The command line (`check`, `fix`, `verify`) and the worker processes it forks are
perflint's own: there, `perflint.cstprivate` may speed libcst up process-wide.  Anything
else that imports perflint (the language server's threads, `perflint.api`, a test, another
tool) gets stock libcst.  Kept apart from `cstprivate` so that setting it imports nothing.

An owned process also tunes the cyclic garbage collector (`tune_gc`): a parse allocates
millions of small objects that reference counting frees; the collector's default
thresholds would rescan the growing tree thousands of times (the README's "Large files"
gives the measured cost).
"""

OWNED = False
_GC_TUNED = False


def own() -> None:
    global OWNED
    OWNED = True
    tune_gc()


def tune_gc(worker: bool = False) -> None:
    """Freeze what exists (the imported modules) out of the collector's reach, and collect
    the youngest generation after every 100,000 allocations instead of 700.  Once a process:
    a second freeze would keep whatever garbage the first run left for good.  A worker
    process (`worker=True`) freezes what it inherited from its parent on its own start."""
    global _GC_TUNED
    if _GC_TUNED and not worker:
        return
    _GC_TUNED = True
    import gc

    gc.freeze()
    gc.set_threshold(100_000, 50, 50)
