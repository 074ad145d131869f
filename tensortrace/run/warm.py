"""What the parent pays once, before forking, that every child would otherwise pay again.

Children are forked after torch is imported and share the parent's memory, so an import,
a cache filled or an object frozen here is paid once per command, not once per variant,
and never inside a step's time limit.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover - the scenario module imports yaml
    from ..scenario.spec import Scenario

_frozen = False


def freeze_imported_objects() -> None:
    """Once per process: move what importing torch made out of the garbage collector's sight.

    torch's ~185k long-lived objects would otherwise be walked by every full
    collection (about 100 ms each) in the parent and in every child, and the
    walk would copy the children's shared pages.
    """
    global _frozen
    if not _frozen:
        import gc

        gc.freeze()
        _frozen = True


# Modules torch imports on first use that cost seconds (torch._dynamo: 800
# modules), keyed by a word the scenario's code contains when it will need them.
_SHARED_IMPORTS = (
    ("optim", "torch._dynamo"),
    ("torch.compile", "torch._dynamo"),
    (
        "torch.compile",
        "torch._inductor.compile_fx",
    ),  # what the first compiled call needs (--trust only)
)


def import_once_for_all(variants: Sequence[Scenario]) -> None:
    """Import in the parent, once, what every child would otherwise import again.

    A forked child shares the parent's modules, so the import is paid once per
    command instead of once per variant, and never inside a step's time limit.
    """
    import importlib
    import warnings

    code = "\n".join(c.text for variant in variants for _, c, _ in variant.all_code())
    for word, module in _SHARED_IMPORTS:
        if word in code and module not in sys.modules:
            try:
                with (
                    warnings.catch_warnings()
                ):  # the tool's own import: its deprecation notices are not the user's
                    warnings.simplefilter("ignore")
                    importlib.import_module(module)
            except Exception:  # an older torch without it: the child imports what it needs itself
                pass


def warm_for_children(variants: Sequence[Scenario], *, explanations: bool) -> None:
    """Fill, in the parent, the caches that every forked child would otherwise fill on its
    first step.

    torch builds its tables of function names on the first ``resolve_name``
    (about 16 ms), and ``writes`` reads a tensor's data descriptors and parses
    each step's code once per text; in the parent, that is paid once per
    command instead of once per variant. ``explanations`` also reads the
    catalogue of explained errors (about 25 ms, compiling its patterns), which
    a child reads on its first error: worth it where several children may
    each meet one. Only caches: a failure here is met again, and reported, in
    the child.
    """
    from ..record import ops, writes

    try:
        import torch

        ops.call_name(torch.Tensor.add)
        for variant in variants:
            writes.code_reason((code.source(mode), mode) for _, code, mode in variant.all_code())
        if explanations:
            from ..record.explain import load_rules

            load_rules()
    except Exception:  # noqa: BLE001 - see above
        pass
