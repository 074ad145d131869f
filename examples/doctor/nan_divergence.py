"""Linear regression with a learning rate too large for its inputs: each step overshoots more,
the loss grows a hundredfold per step, and after some fifteen steps it overflows to inf."""

import torch

torch.manual_seed(0)
x = torch.randn(64, 8) * 3
y = x @ torch.randn(8, 1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(30):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
print(f"final loss {loss.item()}")
