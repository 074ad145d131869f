"""How the HTML page puts anything into markup: escaped templates, and text made markup.

Every piece of the page is built here or with these: ``html()`` fills a
template written in this package (never data) with values escaped by
markupsafe, whatever their type; ``joined()`` escapes any part that is not
``Markup`` already. The few helpers that turn a trace's text into markup
(backticked code, a code block with its line) build on them. They live apart
from the page and the step bodies so that both use the one way of escaping.
"""

from __future__ import annotations

import re
import string
from typing import Dict, List, Optional, Tuple

from markupsafe import Markup, escape

from .text import as_int
from .visible import visible


def html(template: str, *values: object, **named: object) -> Markup:
    """``template`` (markup written here, never data) with each value escaped into it.

    The one way the page puts a value into markup: every ``{}`` (or ``{name}``)
    of the template takes its value through ``markupsafe.escape`` (``&``, ``<``,
    ``>``, both quotes), whatever its type, unless it is ``Markup`` built the
    same way. It does what ``Markup(template).format(...)`` does, with the
    template's parts read once, as a page formats tens of thousands of them.
    """
    parts = _TEMPLATES.get(template)
    if parts is None:
        parts = _TEMPLATES[template] = _template_parts(template)
    out = []
    position = 0
    for literal, field in parts:
        out.append(literal)
        if field is None:
            continue
        if field:
            value = named[field]
        else:
            value = values[position]
            position += 1
        out.append(escape(value))  # Markup (already built this way) comes back as it is
    return Markup("".join(out))


_TEMPLATES: Dict[str, List[Tuple[str, Optional[str]]]] = {}


def _template_parts(template: str) -> List[Tuple[str, Optional[str]]]:
    """(literal markup, the field after it: ``""`` the next positional value, a name, or None)."""
    parts = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        if spec or conversion or (field and field.isdigit()):
            raise ValueError(f"an HTML template takes plain {{}} or {{name}} fields: {template!r}")
        parts.append((literal, field))
    return parts


def joined(parts, separator: str = "") -> Markup:
    """The parts one after another; any part that is not ``Markup`` is escaped."""
    return Markup(separator).join(parts)


def prose(text: str) -> Markup:
    """Escaped text where `backticks` become <code>, as notes and descriptions write code."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: leave the text as it is
        return escape(text)
    return joined(html("<code>{}</code>", p) if i % 2 else p for i, p in enumerate(parts))


def line_attribute(line: object) -> Markup:
    """`` data-line="12"`` for a line number; nothing for no line, or one that is not a number."""
    number = as_int(line) if line is not None else None
    return html(' data-line="{}"', number) if number is not None else Markup("")


def code_block(code: str, line: Optional[int]) -> Markup:
    return html(
        '<pre class="tt-code"{}><code>{}</code></pre>', line_attribute(line), str(code).rstrip()
    )


def where(line: object) -> str:
    """`` (line 12)``, in words; the value is escaped where it is put, whatever it holds."""
    return f" (line {line})" if line is not None else ""


_CODE_SPAN = re.compile(r"`([^`]+)`")


def with_code(text: str) -> Markup:
    """Escaped text with its `backticked` parts as code, as the messages write them."""
    text = visible(str(text))
    out: List[object] = []
    position = 0
    for span in _CODE_SPAN.finditer(text):
        out.append(text[position : span.start()])
        out.append(html("<code>{}</code>", span.group(1)))
        position = span.end()
    out.append(text[position:])
    return joined(out)
