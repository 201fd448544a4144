"""perflint: find and fix PyTorch training-performance anti-patterns."""

__version__ = "0.1.0"


def install_hint(extra: str) -> str:
    """The pip command that adds `extra` to this installation, from where the user is: an
    editable install from a checkout gets `pip install -e ".[extra]"` (or the checkout's
    path when the current folder is elsewhere), a released one `pip install "torch-perflint[extra]"`."""
    import os
    from pathlib import Path

    checkout = Path(__file__).resolve().parent.parent
    try:
        ours = 'name = "torch-perflint"' in (checkout / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        ours = False
    if not ours:
        return f'pip install "torch-perflint[{extra}]"'
    try:
        here = Path(os.getcwd()).resolve() == checkout
    except OSError:
        here = False
    where = "." if here else str(checkout)
    return f'pip install -e "{where}[{extra}]"'
