"""Linear regression by hand: the update is written as autograd records."""

import torch

torch.manual_seed(0)
x = torch.randn(64, 3)
y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1
w = torch.randn(3, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.1
for step in range(50):
    loss = ((x @ w + b - y) ** 2).mean()
    loss.backward()
    w -= lr * w.grad
    b -= lr * b.grad
    w.grad.zero_()
    b.grad.zero_()
print("trained", round(loss.item(), 4))
