"""The command line: commands and options (``main``, ``options``), what ``--step`` and
``--show`` select, progress, listings, check verdicts, and output files.
"""
