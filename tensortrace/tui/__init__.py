"""``tensortrace explore``: an interactive terminal explorer of traces, built with textual.

textual is an optional dependency (``pip install 'tensortrace[tui]'``): this
package's ``__init__`` does not import it, so the command line starts as fast
without it, and ``require_textual`` says in one sentence how to install it.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import UsageError
from ..trace import Trace

INSTALL_HINT = "pip install 'tensortrace[tui]'"


def require_textual() -> None:
    """Raise a one-sentence ``UsageError`` when textual cannot be imported."""
    try:
        import textual  # noqa: F401
    except ImportError:
        raise UsageError(
            f"explore needs the textual package; install it with: {INSTALL_HINT}"
        ) from None


def explore(traces: Sequence[Trace]) -> int:
    """Run the explorer on the terminal until the reader quits; the exit status."""
    require_textual()
    from .app import explore as run

    return run(traces)


__all__ = ["INSTALL_HINT", "explore", "require_textual"]
