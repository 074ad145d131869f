"""Rescaling a saved output through .data: no error, and the gradient is wrong."""

import torch

torch.manual_seed(0)
w = torch.randn(4, 3, requires_grad=True)
x = torch.randn(8, 4)
y = torch.sigmoid(x @ w)
y.data.mul_(0.5)  # meant to damp the output without touching autograd
loss = y.sum()
loss.backward()
print("grad norm", float(w.grad.norm()))
