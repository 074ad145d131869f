"""A second seccomp filter, for arguments that must be one of a few values.

libseccomp ANDs the comparisons of one rule and refuses two on the same
argument, so it cannot say "refuse unless this argument is 0 or the child's
own pid", nor "refuse every ``prctl`` option but these". Those are said here,
in a few dozen instructions of classic BPF loaded after libseccomp's filter:
the kernel runs both and the stricter answer wins, so this one only ever adds
refusals.

* ``sched_setaffinity``, ``sched_setscheduler``, ``sched_setparam`` and
  ``sched_setattr`` act on the child itself (pid 0 or its own pid), never on
  another process: the kernel lets a process pin or reschedule any other of
  the same user, and the pinning outlives the run.
* ``prctl`` takes only the options in ``PRCTL_ALLOWED``, all of which read
  something or change only the calling thread: not ``PR_SET_PDEATHSIG`` (the
  child would outlive the command), ``PR_SET_DUMPABLE``, ``PR_SET_PTRACER``,
  ``PR_SET_CHILD_SUBREAPER``, ``PR_SET_MM``, ``PR_SCHED_CORE`` (which acts on
  other processes) or anything newer.

The kernel reads these arguments as 32-bit ``int``\\ s, so only their low 32
bits are compared: upper bits that the kernel would drop cannot smuggle a
refused value past the filter. A call made through another architecture's
table (``int 0x80``, x32) is left to libseccomp's filter, which refuses it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Dict, List, Sequence, Tuple

from .privileges import ConfinementError, libc

# prctl options (include/uapi/linux/prctl.h) that only read, or change the calling thread.
PRCTL_ALLOWED: Dict[str, int] = {
    "PR_GET_PDEATHSIG": 2,
    "PR_GET_DUMPABLE": 3,
    "PR_GET_KEEPCAPS": 7,
    "PR_GET_TIMING": 13,
    "PR_SET_NAME": 15,  # a thread's own name (pthread_setname_np on itself)
    "PR_GET_NAME": 16,
    "PR_GET_SECCOMP": 21,
    "PR_CAPBSET_READ": 23,
    "PR_GET_TSC": 25,
    "PR_GET_SECUREBITS": 27,
    "PR_GET_TIMERSLACK": 30,
    "PR_MCE_KILL_GET": 34,
    "PR_GET_CHILD_SUBREAPER": 37,
    "PR_GET_NO_NEW_PRIVS": 39,
    "PR_GET_TID_ADDRESS": 40,
    "PR_GET_THP_DISABLE": 42,
    "PR_GET_FP_MODE": 46,
    "PR_GET_SPECULATION_CTRL": 52,
    "PR_GET_TAGGED_ADDR_CTRL": 56,
    "PR_GET_MEMORY_MERGE": 68,
    "PR_SET_VMA": 0x53564D41,  # names the caller's own anonymous mappings (glibc's malloc)
    "PR_GET_AUXV": 0x41555856,
}

# The calls whose first argument is a pid that must be the child's own (0 is the caller).
OWN_PID_CALLS = ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")

_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM
# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_RET_K = 0x06
# offsets in struct seccomp_data: nr (int), arch (u32), instruction pointer (u64), args (u64 x 6)
_NR, _ARCH, _ARGS = 0, 4, 16


class _Instruction(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def _low_word(arg: int) -> int:
    """Where the low 32 bits of argument ``arg`` lie in ``struct seccomp_data``."""
    return _ARGS + 8 * arg + (4 if sys.byteorder == "big" else 0)


def program(
    arch: int, checks: Sequence[Tuple[int, Sequence[int]]]
) -> List[Tuple[int, int, int, int]]:
    """The filter: for each (syscall number, allowed values), EPERM unless the low 32 bits of
    its first argument are one of the values; every other call, and other architectures, pass.

    Instructions are (code, jump if true, jump if false, constant); jumps count forward
    from the next instruction.
    """
    blocks: List[List[Tuple[int, int, int, int]]] = []
    for _, allowed in checks:
        block = [(_LD_W_ABS, 0, 0, _low_word(0))]
        values = sorted(set(v & 0xFFFFFFFF for v in allowed))
        for i, value in enumerate(values):
            # a match jumps over the remaining comparisons and the EPERM, to the ALLOW
            block.append((_JEQ_K, len(values) - i, 0, value))
        block += [(_RET_K, 0, 0, _RET_EPERM), (_RET_K, 0, 0, _RET_ALLOW)]
        blocks.append(block)
    dispatch = len(checks)  # one comparison per call, then ALLOW
    head: List[Tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, _RET_ALLOW),  # another architecture: libseccomp's filter answers
        (_LD_W_ABS, 0, 0, _NR),
    ]
    offset = 0  # of each block, counted from the instruction after the dispatch's ALLOW
    for k, (number, _) in enumerate(checks):
        to_block = (dispatch - k - 1) + 1 + offset  # the rest of the dispatch, its ALLOW, blocks
        if to_block > 255:
            raise ConfinementError("the argument filter is too long for a BPF jump")
        head.append((_JEQ_K, to_block, 0, number))
        offset += len(blocks[k])
    head.append((_RET_K, 0, 0, _RET_ALLOW))
    return head + [insn for block in blocks for insn in block]


def load(lib: ctypes.CDLL) -> None:
    """Load the filter into this process; ``lib`` is libseccomp, for the numbers and the arch."""
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    arch = lib.seccomp_arch_native()
    checks: List[Tuple[int, Sequence[int]]] = []
    me = os.getpid()
    for name in OWN_PID_CALLS:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number >= 0:
            checks.append((number, (0, me)))
    number = lib.seccomp_syscall_resolve_name(b"prctl")
    if number >= 0:
        checks.append((number, tuple(PRCTL_ALLOWED.values())))
    code = program(arch, checks)
    array = (_Instruction * len(code))(*[_Instruction(*insn) for insn in code])
    prog = _Program(len(code), array)
    if libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        why = os.strerror(ctypes.get_errno())
        raise ConfinementError(f"the seccomp argument filter could not be loaded: {why}")


__all__ = ["OWN_PID_CALLS", "PRCTL_ALLOWED", "load", "program"]
