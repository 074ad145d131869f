"""A GAN whose discriminator applies an in-place LeakyReLU to features its skip layer saved."""

# Both networks use LeakyReLU(0.2, inplace=True) to save memory.
import torch
from torch import nn


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 32)
        self.act = nn.LeakyReLU(0.2, inplace=True)
        self.fc2 = nn.Linear(32, 16)

    def forward(self, z):
        return torch.tanh(self.fc2(self.act(self.fc1(z))))


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.LeakyReLU(0.2, inplace=True)
        self.fc2 = nn.Linear(32, 1)
        self.skip = nn.Linear(32, 1)

    def forward(self, x):
        h = self.fc1(x)
        score = self.skip(h)
        h = self.act(h)
        return score + self.fc2(h)


torch.manual_seed(0)
G, D = Generator(), Discriminator()
opt_G = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_D = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(3):
    fake = G(torch.randn(8, 4))
    d_loss = bce(D(torch.randn(8, 16)), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))
    opt_D.zero_grad()
    d_loss.backward()
    opt_D.step()
    g_loss = bce(D(fake), torch.ones(8, 1))
    opt_G.zero_grad()
    g_loss.backward()
    opt_G.step()
print("trained")
