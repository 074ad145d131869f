"""The seam through which a trace is drawn as text, so that the records never import a renderer.

The renderers sit downstream of the records. ``Trace.render`` and the notebook
display methods call ``present``; the package's root plugs the renderers in when
it is imported (always before this package is), and a test pins that this
package imports nothing else of tensortrace.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

# (how, traces, **options) -> text; how: "render", "html", "markdown"
Presenter = Callable[..., str]
_presenter: Optional[Presenter] = None


def plug(presenter: Presenter) -> None:
    """Draw traces with ``presenter`` from now on."""
    global _presenter
    _presenter = presenter


def present(how: str, traces: Sequence[Any], *args: Any, **options: Any) -> str:
    """``traces`` drawn ``how``, by the plugged-in renderers."""
    if _presenter is None:
        raise RuntimeError("no renderer is plugged in; import tensortrace before drawing a trace")
    return _presenter(how, traces, *args, **options)
