"""A leaf whose gradient is read before any backward: None, and not a non-leaf's."""

import torch

w = torch.randn(3, requires_grad=True)
w.grad.zero_()
