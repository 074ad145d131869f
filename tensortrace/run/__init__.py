"""Running a scenario: in this process, or in a forked child behind a kernel wall.

``runner`` forks the child and reads its events; ``childenv`` is the
environment the child keeps; ``confine`` raises the wall, one layer per
module: ``privileges`` (descriptors, no_new_privs, capabilities),
``landlock`` (reading only what ``readable`` lists) and ``seccomp``;
``sandbox`` checks and guards the scenario's own code.
"""
