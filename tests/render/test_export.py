"""SVG: the console rendering exported by rich, in colour (the HTML page is test_html.py)."""

from __future__ import annotations

import html
import shutil
import subprocess

import pytest

from render_fixtures import _PTR, detach_trace, troubled_trace, variant_traces
from tensortrace.render import RenderOptions, render


def _text_of(svg: str) -> str:
    """The SVG's text with entities and non-breaking spaces read back as plain text."""
    return html.unescape(svg).replace("\xa0", " ")


def test_svg_is_an_image_titled_with_the_scenario():
    image = render([detach_trace()], "svg")
    assert image.lstrip().startswith("<svg")
    assert "detach() shares storage but leaves the graph" in _text_of(image)
    assert image.rstrip().endswith("</svg>")


def test_svg_title_names_every_scenario_once():
    image = render([*variant_traces(), detach_trace()], "svg", RenderOptions(width=90))
    title = (
        ".data vs .detach() after an in-place change · detach() shares storage but leaves the graph"
    )
    assert title in _text_of(image)


def test_svg_is_in_colour_and_leaves_out_pointers():
    text = render([detach_trace(), troubled_trace()], "svg")
    assert "#" in text  # colours, as hex
    for ptr in _PTR.values():
        assert str(ptr) not in text


def test_exports_are_deterministic():
    for fmt in ("html", "svg"):
        assert render([detach_trace()], fmt) == render([detach_trace()], fmt)


@pytest.mark.skipif(shutil.which("rsvg-convert") is None, reason="librsvg is not installed")
def test_the_svg_can_be_drawn(tmp_path):
    path = tmp_path / "trace.svg"
    path.write_text(render([detach_trace()], "svg"), encoding="utf-8")
    done = subprocess.run(
        ["rsvg-convert", str(path), "-o", str(tmp_path / "trace.png")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "trace.png").stat().st_size > 1000
