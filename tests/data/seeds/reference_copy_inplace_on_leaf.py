"""b = a is the same tensor: an in-place write on a leaf that requires grad

Seed article 002, code block 25."""
import torch

# 创建一个原始张量
a_tensor = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)

# 引用拷贝
b_tensor = a_tensor

# 修改 b_tensor
b_tensor[0] = 99.0

print("Original tensor:", a_tensor)  # tensor([99., 2., 3.], requires_grad=True)
print("Modified b_tensor:", b_tensor)  # tensor([99., 2., 3.], requires_grad=True)
