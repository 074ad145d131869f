"""A tiny GPT: causal self-attention blocks with pre-norm, GELU, dropout, AdamW and a schedule."""

import math
import sys

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, block):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.dropout(F.softmax(att, dim=-1), 0.1, self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads, block):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, block)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=32, dim=32, heads=4, layers=2, block=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, block, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, block) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos[:, : idx.size(1)]
        logits = self.head(self.ln(self.blocks(x)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
data = torch.randint(0, 32, (8, 17))
for step in range(steps):
    logits, loss = model(data[:, :-1], data[:, 1:])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    schedule.step()
model.eval()
with torch.no_grad():
    sample, _ = model(data[:1, :8])
print(f"loss {loss.item():.6f}")
