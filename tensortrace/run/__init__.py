"""Running a scenario: in this process, or in a forked child behind a kernel wall.

``runner`` forks the child and reads its events; ``child`` is the child's side
(limits, wall, tracer, events on the pipe); ``warm`` pays once, before forking,
what every child would pay again; ``childenv`` is the environment the child
keeps; ``confine`` raises the wall, one layer per module: ``privileges``
(descriptors, no_new_privs, capabilities), ``landlock`` (reading only what
``readable`` lists) and ``seccomp``. The scenario's own code is checked and
guarded by ``tensortrace.sandbox``.
"""
