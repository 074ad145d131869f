"""Running a scenario: in this process, or in a forked child behind a kernel wall.

``runner`` forks the child and reads its events; ``child`` is the child's side
(limits, wall, tracer, events on the pipe); ``warm`` pays once, before forking,
what every child would pay again; ``childenv`` is the environment the child
keeps; ``confine`` raises the wall, one layer per module: ``privileges``
(descriptors, no_new_privs, threads, capabilities), ``landlock`` (reading only
what ``readable`` lists), ``seccomp`` and ``argfilter`` (the arguments
libseccomp cannot check). The scenario's own code is checked and
guarded by ``tensortrace.sandbox``.
"""
