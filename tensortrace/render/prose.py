"""Scenario prose (descriptions, notes, explanations) drawn as rich's Markdown draws it.

Importing ``rich.markdown`` (and markdown-it with it) costs a ``render`` about
a third of its time, while nearly every text a scenario carries is plain
paragraphs with inline ``code``. ``prose()`` draws those itself, token for
token as rich's ``Markdown`` would (the same text, styles and segments, so the
output is byte-identical, which ``tests/render/test_prose.py`` checks), and
hands anything else, any character or line that could start other Markdown
syntax, to ``Markdown``.

A step's note is not Markdown but for its code spans (``note_text``): a formula
such as ``2*w*x`` keeps its stars.

What ``Markdown`` draws is inert: links are drawn as their text and their
address (``hyperlinks=False``: no OSC 8 link reaches the terminal, and no
``<a href>`` an HTML export), and its text is made ``visible`` again after
parsing, since an entity (``&#x202e;``) can make a character that the text
itself did not hold.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Text

from .visible import visible

# One token of a paragraph: ("text" | "code" | "strong" | "soft", its text).
Token = Tuple[str, str]

_CODE_SPAN = re.compile(r"`([^`]+)`")
# Outside code spans: anything that may be emphasis, a link or image (brackets alone,
# as in "[torch.FloatTensor [3]]", are text), HTML, an entity, an escape, a table or
# strikethrough, or that markdown-it rewrites (tabs, CR, NUL).
_SPECIAL = re.compile(r"[*_<>&\\|~\t\r\x00`]|\]\s*[(\[:]|!\[")
# A line that may open a block other than a paragraph (heading, quote, list,
# setext underline, thematic break, fence) or that is blank.
_BLOCK_START = re.compile(r"^ {0,3}(?:[#>+*=-]|~~~|```|\d{1,9}[.)]|$)")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


_MARKS = {"strong": "**", "em": "*"}


def prose(text: str, *, lead: Optional[str] = None, lead_style: str = "strong") -> RenderableType:
    """``Markdown(text)``, drawn cheaply when plain.

    With ``lead``, ``Markdown(f"**{lead}** {text}")`` (``lead_style="em"``: ``*{lead}*``).
    """
    paragraphs = _paragraphs(text)
    if paragraphs is None or (
        lead is not None and (not lead.strip() or _SPECIAL.search(lead) or lead != lead.strip())
    ):
        from rich.markdown import Markdown  # only for text that needs it

        mark = _MARKS[lead_style]
        return _Inert(
            Markdown(f"{mark}{lead}{mark} {text}" if lead is not None else text, hyperlinks=False)
        )
    if lead is not None and paragraphs:
        first = paragraphs[0]
        if first and first[0][0] == "text":
            first[0] = ("text", " " + first[0][1])
        else:
            first.insert(0, ("text", " "))
        first.insert(0, (lead_style, lead))
    return _Prose(paragraphs)


def note_text(text: str, *, lead: Optional[str] = None) -> RenderableType:
    """A step's note: plain text but for its `code spans`, so that a formula keeps its ``*``
    and ``_`` (``2*w*x``); paragraphs are kept, lines within one joined, as Markdown joins
    them. With ``lead``, the note is led by it in italics (a variant's name)."""
    paragraphs: List[List[Token]] = []
    for block in _PARAGRAPH_BREAK.split(text.strip("\n")):
        tokens: List[Token] = []
        line = " ".join(part.strip() for part in block.split("\n"))
        position = 0
        for span in _CODE_SPAN.finditer(line):
            if span.start() > position:
                tokens.append(("text", line[position : span.start()]))
            tokens.append(("code", span.group(1)))
            position = span.end()
        if position < len(line):
            tokens.append(("text", line[position:]))
        paragraphs.append(tokens)
    if lead is not None and paragraphs:
        paragraphs[0][:0] = [("em", lead), ("text", " ")]
    return _Prose(paragraphs)


def _paragraphs(text: str) -> Optional[List[List[Token]]]:
    """The paragraphs as markdown-it tokenises them, or None if ``text`` may hold other syntax."""
    paragraphs: List[List[Token]] = []
    for block in _PARAGRAPH_BREAK.split(text.strip("\n")):
        tokens: List[Token] = []
        lines = block.split("\n")
        for number, line in enumerate(lines):
            if _BLOCK_START.match(line) or line.startswith("    ") or line.count("`") % 2:
                return None
            if number < len(lines) - 1 and line.endswith("  "):  # a hard line break
                return None
            if number:
                tokens.append(("soft", " "))
            line = line.strip(" ")
            position = 0
            for span in _CODE_SPAN.finditer(line):
                if (
                    not _plain(line[position : span.start()], tokens)
                    or span.group(1).strip(" ") == ""
                ):
                    return None
                content = span.group(1)
                if len(content) > 1 and content[0] == " " and content[-1] == " ":
                    content = content[1:-1]
                tokens.append(("code", content))
                position = span.end()
            if not _plain(line[position:], tokens):
                return None
        paragraphs.append(tokens)
    return paragraphs


def _plain(part: str, tokens: List[Token]) -> bool:
    if _SPECIAL.search(part):
        return False
    if part:
        tokens.append(("text", part))
    return True


class _Inert:
    """A renderable drawn with no link and no control character in its text."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for text, style, control in console.render(self.renderable, options):
            if style is not None and style.link:
                style = style.update_link(None)
            yield Segment(text if control else visible(text), style, control)


class _Prose:
    """Paragraphs drawn with the styles, text and segments of rich's ``Markdown``."""

    def __init__(self, paragraphs: List[List[Token]]) -> None:
        self.paragraphs = paragraphs

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        options = options.update(height=None)
        base = console.get_style("none", default="none")
        paragraph = base + console.get_style("markdown.paragraph", default="none")
        inline = {
            "code": paragraph + console.get_style("markdown.code", default="none"),
            "strong": paragraph + console.get_style("markdown.strong", default="none"),
            "em": paragraph + console.get_style("markdown.em", default="none"),
        }
        for number, tokens in enumerate(self.paragraphs):
            text = Text(justify="left")
            for kind, part in tokens:
                text.append(part, inline.get(kind, paragraph))
            if number:
                yield Segment.line()
            yield from console.render(text, options)
