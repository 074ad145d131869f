"""A helper normalises a detached alias of the features in place: backward fails."""

import torch


def normalise_(t):
    t.sub_(t.mean())
    t.div_(t.std() + 1e-6)


torch.manual_seed(0)
w = torch.randn(4, 6, requires_grad=True)
x = torch.randn(8, 4)
feats = torch.tanh(x @ w)
stats = feats.detach()  # meant for logging only
normalise_(stats)
print("feature spread", float(stats.std()))
loss = (feats ** 2).mean()
loss.backward()
print("grad", w.grad.norm())
