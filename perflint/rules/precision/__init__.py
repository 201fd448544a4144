"""PF4 — precision, kernels and tensors."""
