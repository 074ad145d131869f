"""The tool's version: one place, read by the package, the command line and every trace."""

__version__ = "0.1.0"
