     y[0] = 10.0
     print(x)  # tensor([10.0, 2.0, 3.0], requires_grad=True)
     