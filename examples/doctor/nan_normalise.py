"""Attention-like pooling that normalises ReLU scores by their sum: a row whose scores are all
zero divides 0 by 0, and the loss is NaN from the first step."""

import torch
from torch import nn

torch.manual_seed(0)
score = nn.Linear(8, 6)
opt = torch.optim.SGD(score.parameters(), lr=0.1)
x = torch.randn(16, 8)
x[5] = 0.0  # a padding row
values = torch.randn(16, 6)
with torch.no_grad():
    score.bias.fill_(-0.5)
for step in range(3):
    opt.zero_grad()
    s = torch.relu(score(x))
    weights = s / s.sum(dim=1, keepdim=True)
    loss = (weights * values).sum(dim=1).pow(2).mean()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
