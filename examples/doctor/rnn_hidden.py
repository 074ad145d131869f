"""A recurrent loop that carries its hidden state across iterations: the second backward fails."""

import torch

torch.manual_seed(0)
W = torch.randn(3, 5, requires_grad=True)
U = torch.randn(5, 5, requires_grad=True)
opt = torch.optim.SGD([W, U], lr=0.01)
h = torch.zeros(1, 5)
for step in range(4):
    x = torch.randn(1, 3)
    h = torch.tanh(x @ W + h @ U)
    loss = h.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
