"""Clipping an input through its NumPy view after it was used: no error, wrong gradient."""

import torch

torch.manual_seed(0)
w = torch.randn(4, requires_grad=True)
x = torch.randn(8, 4)
y = x * w
arr = x.numpy()
arr[arr > 1.0] = 1.0  # clip outliers for the next batch's statistics
loss = y.sum()
loss.backward()
print("grad", w.grad)
