"""A classifier trained on the distance between its predicted class and the label."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, labels = torch.randn(20, 6), torch.randint(0, 5, (20,))
for epoch in range(3):
    logits = model(x)
    predicted = logits.argmax(dim=1)
    loss = nn.functional.mse_loss(predicted.float(), labels.float())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
