a = torch.ones(3)
# raises: RunTimeError
a.sum().backward()
