"""Linear regression whose loss is left per sample: backward() needs one number."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(32, 3)
y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1
for epoch in range(20):
    opt.zero_grad()
    loss = (model(x) - y) ** 2
    loss.backward()
    opt.step()
print("trained")
