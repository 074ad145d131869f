"""DCGAN-style step that reuses the discriminator's output on fakes for the generator's loss."""

import torch
from torch import nn


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(8, 16, 4, 1, 0),
            nn.BatchNorm2d(16),
            nn.ReLU(True),
            nn.ConvTranspose2d(16, 1, 4, 2, 1),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, 16, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(16, 1, 4, 1, 0),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.main(x).view(-1)


torch.manual_seed(0)
netG, netD = Generator(), Discriminator()
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4)
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4)
for i in range(2):
    real = torch.randn(8, 1, 8, 8)
    netD.zero_grad()
    errD_real = criterion(netD(real), torch.ones(8))
    errD_real.backward()
    fake = netG(torch.randn(8, 8, 1, 1))
    output = netD(fake)
    errD_fake = criterion(output, torch.zeros(8))
    errD_fake.backward()
    optimizerD.step()
    netG.zero_grad()
    errG = criterion(output, torch.ones(8))
    errG.backward()
    optimizerG.step()
print("trained")
