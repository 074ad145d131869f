"""A notebook exported as a script: the training cell ran twice on an earlier cell's output."""

import torch
from torch import nn

# In[1]:
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 3), torch.randn(32, 1)

# In[2]:
pred = model(x)

# In[3] and In[4]: the same cell, run a second time
for run in range(2):
    loss = nn.functional.mse_loss(pred, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("loss", float(loss))
