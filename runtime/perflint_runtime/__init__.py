"""perflint runtime."""
