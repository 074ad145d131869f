"""``prose()`` draws exactly what rich's ``Markdown`` draws, byte for byte,
with and without colour."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from rich.markdown import Markdown

import tensortrace
from tensortrace.scenario.library import bundled_names, bundled_path
from tensortrace.render.prose import _Inert, _Prose, prose
from tensortrace.scenario import load_scenario


def _draw(renderable, width: int, color: bool) -> str:
    console = Console(
        file=io.StringIO(),
        width=width,
        force_terminal=color,
        color_system="truecolor" if color else None,
    )
    console.print(renderable)
    return console.file.getvalue()


def _library_texts():
    texts = []
    for name in bundled_names():
        scenario = load_scenario(bundled_path(name))
        texts.append(scenario.description or "")
        texts.extend(step.note for step in scenario.steps if getattr(step, "note", None))
    catalogue = Path(tensortrace.__file__).parent / "record" / "explain" / "explanations.yaml"
    for entry in yaml.safe_load(catalogue.read_text()):
        texts.extend(entry.get(key) or "" for key in ("what", "fix"))
    return [t.strip() for t in texts if t and t.strip()]


TRICKY = [
    "one line",
    "two\nlines joined",
    "para one\n\npara two\n\n\npara three",
    "  leading spaces\n   and continuation   \nlines",
    "code `x.grad_fn` and `a  b` and ` spaced ` in a line",
    "`starts` with code\nand `ends with code`",
    "a line ending in code `c`\n`d` begins the next",
    "emphasis *here*",
    "under_score outside code",
    "a [link](http://x)",
    "[torch.FloatTensor [3]] and [a] [b] and [a] (b)",
    "[x][y] reference",
    "[x]: http://y\n\nnow [x]",
    "an ![image](i.png)",
    "[a]\n(b) across lines",
    "- a list\n- of items",
    "1. numbered",
    "# heading",
    "> quote",
    "x -> y",
    "fenced\n```\ncode\n```",
    "    indented code",
    "escaped \\* star",
    "an &amp; entity",
    "tab\there",
    "unbalanced ` backtick",
    "double ``code`` ticks",
    "setext\n---",
    "table | cell",
    "~~struck~~",
    "trailing two spaces  \nhard break",
    "",
    "a very long paragraph " * 20,
]


@pytest.mark.parametrize("width", [40, 100])
@pytest.mark.parametrize("color", [False, True])
def test_prose_draws_what_markdown_draws(width, color):
    texts = _library_texts() + TRICKY
    fast = 0
    for text in texts:
        drawn, lead = prose(text), prose(text, lead="Fix:")
        if isinstance(drawn, _Inert):  # handed on whole to Markdown, drawn without links
            continue
        fast += 1
        assert _draw(drawn, width, color) == _draw(Markdown(text), width, color), text
        assert _draw(lead, width, color) == _draw(Markdown(f"**Fix:** {text}"), width, color), text
        em = prose(text, lead="detach:", lead_style="em")
        assert _draw(em, width, color) == _draw(Markdown(f"*detach:* {text}"), width, color), text
    assert fast >= len(_library_texts()) * 0.8  # the cheap path is the one the library's texts take


def test_text_with_other_syntax_goes_to_markdown():
    for text in [
        "emphasis *here*",
        "- a list",
        "a [link](x)",
        "x -> y",
        "tab\there",
        "unbalanced ` tick",
    ]:
        assert isinstance(prose(text), _Inert), text
    assert isinstance(prose("`x` and y"), _Prose)


@pytest.mark.parametrize("color", [False, True])
def test_text_markdown_draws_is_drawn_as_markdown_draws_it_without_links(color):
    for text in TRICKY + _library_texts():
        drawn = prose(text)
        if isinstance(drawn, _Inert):
            assert _draw(drawn, 80, color) == _draw(Markdown(text, hyperlinks=False), 80, color), (
                text
            )


def test_links_in_prose_are_their_text_and_address_never_a_terminal_link():
    text = (
        "see [the docs](http://evil.example/x) and <http://evil.example/y>"
        " ![i](http://e.example/i.png)"
    )
    drawn = _draw(prose(text), 120, True)
    assert "\x1b]" not in drawn  # no OSC sequence (OSC 8 is a link); colours are CSI
    assert "the docs" in drawn and "http://evil.example/x" in drawn


def test_an_entity_cannot_make_a_control_character_markdown_would_print():
    drawn = _draw(prose("*x* &#x202e; &#x2066; &#12; &#x85; end"), 80, True)
    assert not any(ch in drawn for ch in "\u202e\u2066\x0c\x85")
    assert "\\u202e" in drawn and "\\u2066" in drawn
