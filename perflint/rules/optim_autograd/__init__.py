"""PF3 — optimizer and autograd: zero_grad, fused optimizers, grad modes, GradScaler order."""
