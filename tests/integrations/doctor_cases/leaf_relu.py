"""An activation applied in place to the input that requires grad."""

import torch

torch.manual_seed(0)
x = torch.randn(8, requires_grad=True)
x.relu_()
x.sum().backward()
