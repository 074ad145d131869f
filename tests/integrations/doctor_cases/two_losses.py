"""A network with two heads whose losses each call backward on the shared trunk's graph."""

import torch
from torch import nn

torch.manual_seed(0)
trunk = nn.Sequential(nn.Linear(6, 32), nn.Tanh())
cls_head, reg_head = nn.Linear(32, 3), nn.Linear(32, 1)
params = [*trunk.parameters(), *cls_head.parameters(), *reg_head.parameters()]
opt = torch.optim.SGD(params, lr=0.05)
x, labels, targets = torch.randn(16, 6), torch.randint(0, 3, (16,)), torch.randn(16, 1)
for step in range(3):
    features = trunk(x)
    cls_loss = nn.functional.cross_entropy(cls_head(features), labels)
    reg_loss = nn.functional.mse_loss(reg_head(features), targets)
    opt.zero_grad()
    cls_loss.backward()
    reg_loss.backward()
    opt.step()
print("trained")
