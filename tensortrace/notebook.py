"""Jupyter notebooks as scenarios (placeholder)."""
def loads_notebook(data, path):
    raise NotImplementedError
