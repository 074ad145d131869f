a = torch.ones(3)
name = 'été'
