"""zero_() through .data: backward runs, and gives a wrong gradient

Seed article 003, code block 11, with the 'import torch' the article leaves out."""
import torch

a = torch.tensor([1, 2, 3.], requires_grad=True)
print(a.grad)
out = a.sigmoid()
print(out)

c = out.data
print(c)
c.zero_() #使用in place函数对其进行修改

#会发现c的修改同时也会影响out的值
print(c)
print(out)

#这里的不同在于.data的修改不会被autograd追踪，这样当进行backward()时它不会报错，会得到一个错误的backward值
out.sum().backward()
print(a.grad)
