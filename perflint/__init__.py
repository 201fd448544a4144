"""perflint: find and fix PyTorch training-performance anti-patterns."""

__version__ = "0.1.0"
