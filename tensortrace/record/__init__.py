"""Recording: the only place that runs torch.

``tracer`` runs a scenario's steps and records each one: ``probe`` reads a
tensor's facts, ``storages`` names shared memory, ``graph`` walks autograd
graphs, ``saved`` and ``unseen`` predict what backward will do, ``ops`` (with
the modes in ``opmodes`` and the naming in ``oplog``) records the calls and
ATen operations a step ran, ``flow`` records gradient flow, ``reuse``
serves unchanged tensors' records again, ``explain`` explains errors.
Importing this package itself imports no torch, so that ``explain`` can be
read on the drawing side.
"""
