"""A GAN trained the usual way: D on detached fakes, then G through a fresh pass of D."""

import sys

import torch
from torch import nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(inplace=True), nn.Linear(32, 16), nn.Tanh())
D = nn.Sequential(
    nn.Linear(16, 32), nn.LeakyReLU(0.2, inplace=True), nn.Linear(32, 1), nn.Sigmoid()
)
criterion = nn.BCELoss()
opt_G = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_D = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_data = torch.randn(64, 16)
ones, zeros = torch.ones(16, 1), torch.zeros(16, 1)
for step in range(steps):
    real = real_data[torch.randint(0, 64, (16,))]
    fake = G(torch.randn(16, 8))
    opt_D.zero_grad()
    d_loss = criterion(D(real), ones) + criterion(D(fake.detach()), zeros)
    d_loss.backward()
    opt_D.step()
    opt_G.zero_grad()
    g_loss = criterion(D(fake), ones)
    g_loss.backward()
    opt_G.step()
print(f"losses {d_loss.item():.6f} {g_loss.item():.6f}")
