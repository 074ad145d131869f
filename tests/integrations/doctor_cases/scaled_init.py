"""Linear regression by hand, its weights scaled at creation: they are not leaves."""

import torch

torch.manual_seed(0)
x = torch.randn(64, 3)
y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1
w = torch.randn(3, requires_grad=True) * 0.01
for step in range(50):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad.zero_()
print("trained", round(loss.item(), 4))
