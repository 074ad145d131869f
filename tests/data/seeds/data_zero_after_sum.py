""".data of a sum: zeroing it does not reach the saved values

Seed article 003, code block 13, with the 'import torch' the article leaves out."""
import torch

a = torch.tensor([1, 2, 3.], requires_grad=True)
print(a.grad)
out = a.sigmoid().sum() #但是如果sum写在这里，而不是写在backward()前，得到的结果是正确的
print(out)


c = out.data
print(c)
c.zero_() #使用in place函数对其进行修改

#会发现c的修改同时也会影响out的值
print(c)
print(out)

#sum没有写在这里
out.backward()
print(a.grad)
