"""How much a trace may hold: the bounds every decoded record is checked against."""

# Bounds, far above what a real run records (the recorder's own limits are in
# tensortrace.record.tracer, graph, ops and flow), so that only a forged or damaged
# trace meets them.
MAX_NAME = 1 << 16  # characters of a name, label, class name or short text
MAX_TEXT = 1 << 22  # characters of code, a message, printed output
MAX_DIMS = 1024  # dimensions of a shape
MAX_TENSORS = 100_000  # tensors recorded per step (the recorder keeps 500)
MAX_NODES = 1_000_000  # nodes of one graph (the walk stops at 250,000)
MAX_OPS = 100_000  # operations per step (the recorder keeps 2,000)
MAX_ITEMS = 1_000_000  # any other list: steps, storages, warnings, ...
MAX_DATA_DEPTH = 512  # nesting of a tensor's exact values (one level per dimension)
