"""A small MLP trained for 20 steps"""
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(16, 4)
y = torch.randn(16, 1)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.MSELoss()

for step in range(20):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
