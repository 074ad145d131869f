"""A GAN that computes both losses first, then steps the discriminator before G's backward."""

import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh())
D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt_G = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_D = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
real_data = torch.randn(64, 8)
for step in range(3):
    real = real_data[torch.randint(0, 64, (16,))]
    fake = G(torch.randn(16, 4))
    d_loss = bce(D(real), torch.ones(16, 1)) + bce(D(fake.detach()), torch.zeros(16, 1))
    g_loss = bce(D(fake), torch.ones(16, 1))
    opt_D.zero_grad()
    d_loss.backward()
    opt_D.step()
    opt_G.zero_grad()
    g_loss.backward()
    opt_G.step()
print("trained")
