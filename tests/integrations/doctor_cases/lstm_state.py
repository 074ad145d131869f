"""A character model that carries its LSTM state from batch to batch without detaching it."""

import torch
from torch import nn

torch.manual_seed(0)
vocab = 12
embed = nn.Embedding(vocab, 8)
lstm = nn.LSTM(8, 16, batch_first=True)
head = nn.Linear(16, vocab)
params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
opt = torch.optim.Adam(params, lr=1e-2)
data = torch.randint(0, vocab, (4, 31))
state = None
for i in range(0, 30, 10):
    x, y = data[:, i : i + 10], data[:, i + 1 : i + 11]
    out, state = lstm(embed(x), state)
    loss = nn.functional.cross_entropy(head(out).reshape(-1, vocab), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
