"""Fine-tuning: the new head is put on first, then every parameter is frozen, the head's too."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
model.head = nn.Linear(32, 3)
for p in model.parameters():
    p.requires_grad = False
opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
for epoch in range(3):
    features = model(x).detach().clone()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained", features.shape)
