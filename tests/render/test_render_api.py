"""The one entry point: formats, options, errors, and no torch on the way."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from render_fixtures import detach_trace, variant_traces
from tensortrace.errors import TensorTraceError, UsageError
from tensortrace.trace import Trace
from tensortrace.render import FORMATS, RenderOptions, render

REPO = Path(__file__).resolve().parents[2]


def test_every_format_renders_every_fixture_to_text():
    traces = [detach_trace(), *variant_traces()]
    for fmt in FORMATS:
        text = render(traces, fmt)
        assert isinstance(text, str) and text.endswith("\n"), fmt


def test_json_is_the_traces_own_form_and_loads_back():
    trace = detach_trace()
    data = json.loads(render([trace], "json"))
    assert Trace.from_dict(data) == trace


def test_an_unknown_format_is_a_usage_error_that_lists_the_choices():
    with pytest.raises(UsageError) as caught:
        render([detach_trace()], "pdf")
    assert isinstance(caught.value, TensorTraceError)
    assert "console" in str(caught.value) and "mermaid" in str(caught.value)


def test_default_options_show_everything():
    options = RenderOptions()
    assert (options.steps, options.changes_only, options.show, options.values) == (
        None,
        False,
        None,
        True,
    )
    assert options.color is False


def test_a_reloaded_trace_renders_exactly_like_the_recorded_one():
    trace = detach_trace()
    again = Trace.from_dict(json.loads(json.dumps(trace.to_dict())))
    for fmt in FORMATS:
        assert render([again], fmt) == render([trace], fmt), fmt


def test_rendering_never_imports_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, "tests")
        import render_fixtures as f
        from tensortrace.render import FORMATS, RenderOptions, render
        traces = [f.detach_trace(), f.troubled_trace(), *f.variant_traces()]
        for fmt in FORMATS:
            render(traces, fmt, RenderOptions(width=80))
        loaded = [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
        print("torch modules:", loaded)
        sys.exit(1 if loaded else 0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
