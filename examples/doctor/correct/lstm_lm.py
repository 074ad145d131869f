"""An LSTM language model trained by truncated backpropagation: the state is detached per batch."""

import sys

import torch
from torch import nn


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


class LM(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, num_layers=2, batch_first=True, dropout=0.1)
        self.head = nn.Linear(dim, vocab)
        self.head.weight = self.embed.weight  # tied weights

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.embed(x), hidden)
        return self.head(out), hidden


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
vocab, bptt = 20, 8
model = LM(vocab, 16)
opt = torch.optim.SGD(model.parameters(), lr=1.0)
data = torch.randint(0, vocab, (4, steps * bptt + 1))
hidden = None
for i in range(0, steps * bptt, bptt):
    x, y = data[:, i : i + bptt], data[:, i + 1 : i + 1 + bptt]
    hidden = None if hidden is None else repackage_hidden(hidden)
    model.zero_grad()
    logits, hidden = model(x, hidden)
    loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
print(f"loss {loss.item():.6f}")
