"""Writing into a clone leaves the source alone

Seed article 002, code block 20."""
import torch

# 创建一个原始张量 a_tensor
a_tensor = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
print("Original a_tensor:", a_tensor)

# 使用 clone() 创建 b_tensor，它与 a_tensor 独立
b_tensor = a_tensor.clone()
print("After clone, b_tensor:", b_tensor)

# 修改 b_tensor 的值
b_tensor[0] = 99.0
print("After modifying b_tensor, a_tensor:", a_tensor)
print("Modified b_tensor:", b_tensor)
