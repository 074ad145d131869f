"""detach(): same memory, same version counter, no graph

`b = a.detach()` shares `a`'s storage and version counter, but has no graph.
"""
import torch

a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)

# Two tensor objects, one storage.
# expect: same_storage(a, b)
# expect: not b.requires_grad
b = a.detach()

# Writing through `b` changes `a`, and bumps the counter the two share.
# expect: a.tolist() == [0.0, 0.0, 0.0]
# expect: a._version == 1
b.zero_()

# Nothing computed from `b` requires grad.
# raises: RuntimeError, match: does not require grad
(b * 3).sum().backward()

# graph: out
out = (a * 2).sum()
out.backward()
print(a.grad)
