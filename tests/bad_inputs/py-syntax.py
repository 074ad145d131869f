a = torch.ones(3)
b = (a * 2
c = 1
