"""grad_fn: None on a leaf, MulBackward0 on a result

Seed article 002, code block 15."""
import torch

# 创建一个叶子节点张量
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)

# 打印它的 grad_fn 属性
print(x.grad_fn)  # 输出: None，因为 x 是叶子节点

# 参与计算，生成新张量
y = x * 2

# 打印 y 的 grad_fn 属性
print(y.grad_fn)  # 输出: <MulBackward0> 表示由乘法操作产生

# 执行反向传播
y.sum().backward()

# 打印 x 的梯度
print(x.grad)  # 输出: tensor([2., 2., 2.])，表示梯度已经累计到 x 的 grad 中
