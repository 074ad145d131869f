"""A classifier whose activation works in place on a sigmoid's output: backward fails."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.sigmoid(self.fc1(x))
        h = self.act(h)
        return self.fc2(h)


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
for step in range(3):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print("trained")
