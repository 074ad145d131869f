"""A distance loss between embeddings, where one pair is the same point: sqrt(0) = 0 is finite,
but its gradient is infinite, so the forward is fine and the weights become NaN."""

import torch
from torch import nn

torch.manual_seed(0)
embed = nn.Linear(4, 3)
opt = torch.optim.SGD(embed.parameters(), lr=0.05)
anchors = torch.randn(8, 4)
positives = anchors + 0.1 * torch.randn(8, 4)
positives[3] = anchors[3]  # the same sample twice
for step in range(3):
    opt.zero_grad()
    a, b = embed(anchors), embed(positives)
    dist = torch.sqrt(((a - b) ** 2).sum(dim=1))
    loss = dist.mean()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
