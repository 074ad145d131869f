"""Running a scenario: in this process, or in a forked child behind a kernel wall.

``runner`` forks the child and reads its events; ``child`` is the child's side
(limits, wall, tracer, events on the pipe); ``warm`` pays once, before forking,
what every child would pay again; ``childenv`` is the
environment the child keeps; ``confine`` raises the wall (Landlock,
seccomp, limits); ``sandbox`` checks and guards the scenario's own code.
"""
