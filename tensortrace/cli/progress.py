"""A run's progress on a terminal: which scenario, step i of n, and the line running now.

Shown on stderr through rich's live display while ``run`` traces, and erased
when it is over, so that what stays on the screen is the output itself. It is
driven by the runner's ``on_start``/``on_step`` callbacks and redrawn only when
one of them fires: no drawing thread, since the runner forks its child while
the display is up. The caller decides whether there is a terminal to draw on;
without one (stderr piped or a file) nothing is drawn and nothing of rich is
imported.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, List, NamedTuple, Optional, Sequence

from ..render.visible import visible


class Plan(NamedTuple):
    """What one traced scenario (one variant) will run: its name, its steps' first lines."""

    name: str
    lines: Sequence[str]
    setup: bool


def plans_of(scenarios: Sequence[Any]) -> List[Plan]:
    """One plan per variant of each loaded scenario, in the order the runner runs them."""
    plans = []
    for scenario in scenarios:
        for variant in scenario.resolved():
            name = PurePath(variant.path).name if variant.path else variant.title
            if variant.variant:
                name += f" [{variant.variant}]"
            lines = [_first_line(spec.run.text) for spec in variant.steps]
            plans.append(Plan(name=name, lines=lines, setup=bool(variant.setup)))
    return plans


def _first_line(code: str) -> str:
    lines = code.strip().splitlines()
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""


class RunProgress:
    """``with RunProgress(plans, console):`` around a run; pass ``on_start`` and ``on_step`` to it.

    ``console`` None: nothing is shown (not a terminal).
    """

    def __init__(self, plans: Sequence[Plan], console: Optional[Any] = None) -> None:
        self.plans = list(plans)
        self.console = console
        self._live: Optional[Any] = None
        self._run = -1

    @classmethod
    def on_stderr(cls, plans: Sequence[Plan], terminal: bool) -> "RunProgress":
        """Progress drawn on stderr when ``terminal`` says it is one; otherwise silent."""
        if not terminal:
            return cls(plans)
        from rich.console import Console

        return cls(plans, Console(stderr=True))

    def __enter__(self) -> "RunProgress":
        if self.console is not None and self.console.is_terminal:
            from rich.live import Live
            from rich.text import Text

            self._live = Live(
                Text(""),
                console=self.console,
                transient=True,
                auto_refresh=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def on_start(self, trace: object) -> None:
        self._run += 1
        plan = self._plan()
        self._show(-1 if plan is not None and plan.setup else 0)

    def on_step(self, trace: object, step: Any) -> None:
        self._show(step.index)  # the step that finished (0: the setup); the next one runs

    def line(self, done: int) -> str:
        """The status line once ``done`` steps have finished (-1: the setup is running)."""
        plan = self._plan()
        if plan is None:
            return ""
        total = len(plan.lines)
        where = (
            f"{plan.name} ({self._run + 1} of {len(self.plans)})"
            if len(self.plans) > 1
            else plan.name
        )
        if done < 0:
            return visible(f"{where} · setup")
        if done >= total:
            return visible(f"{where} · {total} of {total} steps done")
        return visible(f"{where} · step {done + 1} of {total}: {plan.lines[done]}")

    def _plan(self) -> Optional[Plan]:
        return self.plans[self._run] if 0 <= self._run < len(self.plans) else None

    def _show(self, done: int) -> None:
        if self._live is None:
            return
        from rich.text import Text

        self._live.update(Text(self.line(done), no_wrap=True, overflow="ellipsis"), refresh=True)


__all__ = ["Plan", "RunProgress", "plans_of"]
