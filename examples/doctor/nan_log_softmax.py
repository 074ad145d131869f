"""A classifier with a hand-written cross-entropy, log(softmax(...)), and a temperature that
sharpens the logits tenfold each epoch: the softmax underflows to exactly 0, and the loss
becomes NaN."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(16, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 16) * 0.05
onehot = nn.functional.one_hot(torch.randint(0, 10, (32,)), 10).float()
for epoch in range(5):
    temperature = 10.0**-epoch
    opt.zero_grad()
    logits = model(x) / temperature
    p = torch.softmax(logits, dim=1)
    loss = -(onehot * torch.log(p)).sum(dim=1).mean()
    loss.backward()
    opt.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
