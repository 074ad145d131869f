"""A small CNN classifier: conv, batch norm, in-place ReLU, pooling, dropout, SGD with momentum."""

import sys

import torch
from torch import nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1),
    nn.BatchNorm2d(8),
    nn.ReLU(inplace=True),
    nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1),
    nn.ReLU(inplace=True),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Dropout(0.1),
    nn.Linear(16, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))
for step in range(steps):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    correct = (model(x).argmax(1) == y).float().mean().item()
print(f"loss {loss.item():.6f}")
