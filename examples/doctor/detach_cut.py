"""A .detach() left on the model's output: the loss no longer reaches the parameters."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
x, target = torch.randn(8, 4), torch.randn(8, 1)
pred = model(x).detach()  # detached for a plot, then reused for the loss
loss = nn.functional.mse_loss(pred, target)
loss.backward()
