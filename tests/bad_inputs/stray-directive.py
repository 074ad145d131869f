a = torch.ones(3)
b = a.detach()  # expect: same_storage(a, b)
