a = torch.ones(3)
if True:
        a.add_(1)
	b = a
