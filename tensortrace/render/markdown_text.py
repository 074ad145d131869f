"""Markdown's own syntax, made safe for text that comes from a trace.

A value from the trace is put into the page in one of these ways only: a code
span whose fence outgrows any backtick run in the text, a fenced block whose
fence does the same, a table cell with its pipes escaped, plain text with its
punctuation escaped (``escaped``), or prose that is Markdown on purpose with
its ``<`` and character references escaped (``prose``), so that no text of a
scenario can emit raw HTML or a character ``visible`` would have spelled. The
page's layout is ``markdown.py``; this module owns the escaping it relies on.
"""

from __future__ import annotations

import bisect
import re
from typing import Dict, List, Tuple

from .text import format_values


def code_span(text: str) -> str:
    """Inline code that survives backticks in the text, on one line.

    The fence is one backtick longer than the longest run in the text; a line
    end (which a code span shows as a space anyway) is a space, so no line of
    the text can start a block of its own (an HTML block, a heading).
    """
    text = str(text).replace("\r", " ").replace("\n", " ")
    if "`" not in text:
        return f"`{text}`"
    fence = "`" * (max(len(run) for run in re.findall("`+", text)) + 1)
    return f"{fence} {text} {fence}"


def code_block(code: str, language: str = "python") -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{language}\n{code.rstrip()}\n{fence}"


def cell(text: str) -> str:
    """A table cell: pipes escaped, lines joined with <br>."""
    return text.replace("|", "\\|")


def code_cell(text: str, bold: bool = False) -> str:
    spans = "<br>".join(code_span(line) if line.strip() else "" for line in text.split("\n"))
    spans = cell(spans)
    return f"**{spans}**" if bold else spans


def values_cell(values, shape, bold: bool = False, full: bool = False) -> str:
    """Values in code spans; a missing grad is the plain word None, like grad_fn's."""
    if values is None:
        return plain_cell("None", bold)
    return code_cell(format_values(values, shape, full=full), bold)


def plain_cell(text: str, bold: bool = False) -> str:
    text = cell(no_html(text).replace("`", "\\`"))  # no backtick of data pairs with a code span
    return f"**{text}**" if bold else text


# An ``&`` that starts a character reference (``&lt;``, ``&#x202e;``): GitHub would decode it.
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")


def no_html(text: object) -> str:
    """Text with ``<`` and character references escaped: never raw HTML, never a new character."""
    return _ENTITY.sub("&amp;", str(text)).replace("<", "&lt;")


def prose(text: str) -> str:
    """Markdown written on purpose (a title, a description, a note), made safe to show.

    Emphasis and code spans stay; outside code spans ``<`` and character
    references are escaped, so it never becomes raw HTML, and so are ``[`` and
    ``]``, so it never links to or loads anything (an image from an outside
    server, a link whose text says something else than where it goes).
    """
    return "".join(
        part if code else no_html(part).replace("[", "\\[").replace("]", "\\]")
        for part, code in _code_spans(str(text))
    )


def quoting(text: str) -> str:
    """Prose the tool wrote around words it quotes from a trace (an explanation, a notice).

    Quoted words can hold anything an exception message held. Code spans
    stay code spans, which Markdown shows as they are; everything else is
    plain text, its punctuation escaped (``escaped``), and line ends are spaces,
    so no word starts a block of its own. A backtick in a quoted word can only
    end a code span early: what follows it is then escaped text, never a link.
    """
    return "".join(
        part.replace("\n", " ") if code else escaped(part).replace("\n", " ")
        for part, code in _code_spans(str(text).replace("\r", " "))
    )


_TICKS = re.compile("`+")
_ESCAPE_OR_TICK = re.compile(r"[\\`]")


def _code_spans(text: str) -> List[Tuple[str, bool]]:
    """``text`` in pieces, each with whether it is a code span, as CommonMark reads a line.

    Outside code a backslash escapes the next character; a run of backticks
    opens a span that the next run of the same length closes, and one that
    nothing closes is literal. Spans are sought within each line only: one that
    a renderer would pair across lines shows escaped text as code, which is
    never worse. Closing runs are looked up by length, so any text costs
    about linear time.
    """
    pieces: List[Tuple[str, bool]] = []
    for line in text.splitlines(keepends=True) or [text]:
        pieces += _line_spans(line)
    return pieces


def _line_spans(line: str) -> List[Tuple[str, bool]]:
    starts: Dict[int, List[int]] = {}  # length of a whole run -> where such runs start
    for run in _TICKS.finditer(line):
        starts.setdefault(run.end() - run.start(), []).append(run.start())
    if not starts:
        return [(line, False)]
    pieces: List[Tuple[str, bool]] = []
    done = 0  # text before this offset is in pieces
    found = _ESCAPE_OR_TICK.search(line)
    while found is not None:
        i = found.start()
        if line[i] == "\\":
            found = _ESCAPE_OR_TICK.search(line, i + 2)
            continue
        end = _TICKS.match(line, i).end()
        later = starts.get(end - i, ())
        k = bisect.bisect_left(later, end)
        if k == len(later):  # nothing closes it: literal backticks
            found = _ESCAPE_OR_TICK.search(line, end)
            continue
        close = later[k] + (end - i)
        if i > done:
            pieces.append((line[done:i], False))
        pieces.append((line[i:close], True))
        done = close
        found = _ESCAPE_OR_TICK.search(line, close)
    if done < len(line):
        pieces.append((line[done:], False))
    return pieces


_CODE_SPAN = re.compile(r"`([^`]+)`")
_BLOCK_START = re.compile(r"^(?:[#+=~-]|\d{1,9}[.)])")


def _starred(text: str) -> str:
    """Prose with no HTML and no link or image (``[`` and ``]`` escaped, as ``prose`` does),
    whose ``*`` and ``_`` are text, not emphasis (``2*w*x``)."""
    text = no_html(text).replace("[", "\\[").replace("]", "\\]")
    return text.replace("*", "\\*").replace("_", "\\_")


def note(text: str) -> str:
    """A step's note, as Markdown written on purpose (``prose``) but for emphasis: its ``*``
    and ``_`` stay text, so that a formula such as ``2*w*x`` keeps its stars; its `code
    spans` are code; paragraphs are kept, the lines of one joined."""
    paragraphs = []
    for block in re.split(r"\n[ \t]*\n", text.strip("\n")):
        line = " ".join(part.strip() for part in block.split("\n"))
        out = []
        position = 0
        for span in _CODE_SPAN.finditer(line):
            out.append(_starred(line[position : span.start()]))
            out.append(code_span(span.group(1)))
            position = span.end()
        out.append(_starred(line[position:]))
        joined = "".join(out)
        start = _BLOCK_START.match(joined)
        if start:  # it would open a heading or a list: its mark escaped, plain text
            at = start.end() - 1
            joined = joined[:at] + "\\" + joined[at:]
        paragraphs.append(joined)
    return "\n\n".join(paragraphs)


def quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.rstrip("\n").split("\n"))


def escaped(text: str) -> str:
    """Plain text in Markdown: its punctuation escaped, and no character reference."""
    text = _ENTITY.sub("&amp;", str(text))
    for ch in ("\\", "*", "_", "`", "[", "]", "<", ">", "|"):
        text = text.replace(ch, "\\" + ch)
    return text
