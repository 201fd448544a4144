"""`perflint server`: a language server over stdin/stdout (needs the `server` extra:
`pip install "torch-perflint[server]"`, which brings pygls and lsprotocol).

`checker` holds what the server does with a document (no protocol); `lsp` speaks the
protocol; `project` keeps the project model warm between edits.  Nothing here imports torch.
"""

from __future__ import annotations

import logging
import os
import sys



def main() -> int:
    """Run the server until the client says exit; 2 when pygls is missing."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError as exc:
        from perflint import install_hint

        print(f"error: `perflint server` needs pygls and lsprotocol ({exc}); install them with "
              f"`{install_hint('server')}`", file=sys.stderr)
        return 2
    level = os.environ.get("PERFLINT_LOG", "WARNING").upper()
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level, logging.WARNING),
                        format="perflint server: %(levelname)s: %(message)s")
    from perflint.server.lsp import create_server

    create_server().start_io()
    return 0
