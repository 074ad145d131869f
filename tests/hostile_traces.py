"""Valid traces made hostile: every string and every integer of a record replaced.

The renderers' tests build these directly from the records (no decoding in
between), so what a renderer meets is exactly what a record may hold: text
that tries to close a ``<script>``, open a tag, start a link, write escape
sequences or reorder a line, and, where a number belongs, such text, None or
a huge number.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tensortrace.trace import Trace, evolve

# One hostile text per threat; each is kept whole inside the strings it replaces.
SCRIPT = "</script><script>alert(1)</script>"
TAG = '"><img src=x onerror=alert(1)>'
URL = "javascript:alert(1)"
LINK = "[innocent](javascript:alert(1)) <javascript:alert(2)> ![i](http://evil.example/x.png)"
OSC8 = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
CONTROLS = "\x1b[2J\x07\x9b31m\x85\u202e\u2066\u2069\u200f\u061c"
QUOTES = '\'"`\\\n\\"#;{}|<>&%%'
DOT = '"]; evil [URL="javascript:alert(1)" label=<<b>x</b>>]; x -> y; //'
MERMAID = 'a"] --> b\nclick a href "javascript:alert(1)"\n%%{init: {}}%%'
HOSTILE: Tuple[str, ...] = (SCRIPT, TAG, URL, LINK, OSC8, CONTROLS, QUOTES, DOT, MERMAID)
ALL = "".join(HOSTILE)

# What stands where an integer belongs.
NOT_INTS: Tuple[Any, ...] = (SCRIPT, TAG, URL + " " + DOT, None, 10**30, -(10**18), "1e400")

_HINTS: Dict[type, Dict[str, Any]] = {}


def record_fields(value: Any) -> Tuple[str, ...]:
    """The field names of a record, whether a dataclass or another kind of struct."""
    names = getattr(type(value), "__struct_fields__", None)
    if names is not None:
        return tuple(names)
    return tuple(f.name for f in dataclasses.fields(value))


def _hints(cls: type) -> Dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _is_record(value: Any) -> bool:
    return hasattr(type(value), "__struct_fields__") or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    )


def _int_typed(hint: Any) -> bool:
    """``int`` or ``Optional[int]``."""
    if hint is int:
        return True
    return typing.get_origin(hint) is typing.Union and set(typing.get_args(hint)) == {
        int,
        type(None),
    }


def mutate(value: Any, text: Callable[[str], str], number: Callable[[str, int], Any]) -> Any:
    """``value``, each string passed through ``text`` and each integer field through ``number``.

    ``number`` gets the field's name and its integer; strings inside tuples of
    a record (graph node ids, tags, names) are passed through ``text`` too, the
    same string always giving the same result, so that a graph stays a graph.
    """
    if isinstance(value, str):
        return text(value)
    if isinstance(value, tuple):
        return tuple(mutate(v, text, number) for v in value)
    if isinstance(value, list):
        return [mutate(v, text, number) for v in value]
    if not _is_record(value):
        return value
    hints = _hints(type(value))
    changes = {}
    for name in record_fields(value):
        old = getattr(value, name)
        if _int_typed(hints.get(name)) and isinstance(old, int) and not isinstance(old, bool):
            changes[name] = number(name, old)
        elif name != "data":  # tensor values stay numbers
            changes[name] = mutate(old, text, number)
    return evolve(value, **changes)


def wrapped(payload: str) -> Callable[[str], str]:
    """Each string kept (so ids stay distinct) with ``payload`` on both sides of it."""
    return lambda s: f"{payload}{s}{payload}"


def strings_for_ints(payload: Any) -> Callable[[str, int], Any]:
    """Each integer field replaced by ``payload``
    (a string: the number after it, still distinct)."""
    if isinstance(payload, str):
        return lambda name, n: f"{payload}{n}"
    return lambda name, n: payload


def hostile_traces(traces: Sequence[Trace], payload: str = ALL, ints: Any = SCRIPT) -> List[Trace]:
    """``traces``, every string wrapped in ``payload``, every integer field replaced by ``ints``."""
    return [mutate(t, wrapped(payload), strings_for_ints(ints)) for t in traces]


# --- what every output must still be ---------------------------------------------------------

import re  # noqa: E402
from html.parser import HTMLParser  # noqa: E402

BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# Only the console's own styling: SGR sequences (ESC [ digits ; m).
OWN_STYLING = re.compile(r"\x1b\[[0-9;]*m")
# The elements the page itself writes; anything else came from data.
PAGE_TAGS = frozenset(
    "html head meta title style body header h1 h2 h3 h4 p nav ol li a main div button span script "
    "section pre code b details summary ul table thead tbody tr th td figure figcaption svg defs "
    "marker path g rect text".split()
)


def raw_controls(text: str) -> List[str]:
    """The control, C1 and bidi characters ``text`` holds raw (newline and tab are layout)."""
    return sorted(
        {
            ch
            for ch in text
            if (ord(ch) < 0x20 and ch not in "\n\t")
            or 0x7F <= ord(ch) <= 0x9F
            or ch in BIDI
            or 0xD800 <= ord(ch) <= 0xDFFF
        }
    )


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: List[str] = []
        self.scripts: List[dict] = []
        self.attributes: List[Tuple[str, str, Optional[str]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script":
            self.scripts.append(dict(attrs))
        self.attributes.extend((tag, name, value) for name, value in attrs)

    handle_startendtag = handle_starttag


# Attributes a browser reads as a URL (a data-* attribute is only text to the page's script).
URL_ATTRIBUTES = frozenset(
    (
        "href",
        "src",
        "action",
        "formaction",
        "xlink:href",
        "poster",
        "background",
        "srcset",
        "ping",
        "cite",
        "data",
        "manifest",
    )
)


def _scheme(value: str) -> str:
    """What a browser would read as the URL scheme: controls and blanks dropped, lower case."""
    return "".join(ch for ch in value if ord(ch) > 0x20).lower()


def check_html(page: str, fragment: bool = False) -> None:
    """No script but the page's own two blocks, no handler, no link out, no element data wrote."""
    parser = _Page()
    parser.feed(page)
    parser.close()
    unknown = sorted(set(parser.tags) - PAGE_TAGS)
    assert not unknown, f"elements the page never writes: {unknown}"
    if not fragment:
        assert [s.get("type") for s in parser.scripts] == ["application/json", None], parser.scripts
        assert page.count("</script>") == 2
    else:
        assert parser.scripts == []
    for tag, name, value in parser.attributes:
        assert not name.startswith("on"), (tag, name, value)
        text = value or ""
        if name in URL_ATTRIBUTES:
            assert not _scheme(text).startswith(("javascript:", "data:", "vbscript:")), (
                tag,
                name,
                value,
            )
        if name == "href":
            assert text.startswith("#"), (tag, name, value)
        if name in ("id", "data-line", "data-i", "data-trace", "data-scenario", "marker-end"):
            assert re.fullmatch(r"[A-Za-z0-9_()#:-]*", text.replace("url(#", "")), (
                tag,
                name,
                value,
            )
    assert not raw_controls(page), raw_controls(page)


def check_svg(image: str) -> None:
    """rich's terminal image: text only, no script, handler or link."""
    parser = _Page()
    parser.feed(image)
    parser.close()
    assert (
        "script" not in parser.tags
        and "a" not in parser.tags
        and "foreignobject" not in parser.tags
    )
    for tag, name, value in parser.attributes:
        assert not name.startswith("on") and name not in URL_ATTRIBUTES, (tag, name, value)
    assert not raw_controls(image), raw_controls(image)


_DOT_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_DOT_ID = r"(?:t\d+s\d+g\d+(?:[tnmx]\d*)?|empty)"
_DOT_LINES = [
    re.compile(p)
    for p in (
        r"digraph tensortrace \{",
        r"  // arrows point where gradients flow: .*",
        r"  rankdir=BT;",
        r"  (?:graph|node|edge) \[[^\]]*\];",
        rf"  subgraph cluster_{_DOT_ID} \{{",
        r'    label="";',
        rf'\s+{_DOT_ID} \[label="", \w+=(?:\w+|"")(?:, \w+=(?:\w+|""))*\];',
        r'  empty \[label="", shape=plaintext\];',
        rf"    {_DOT_ID} -> {_DOT_ID};",
        r"  \}",
        r"\}",
    )
]


def check_dot(text: str) -> None:
    """Every line one the renderer writes, with data only inside quoted labels; no URL, no href."""
    for line in text.splitlines():
        bare = _DOT_QUOTED.sub('""', line)
        if line.lstrip().startswith("//"):
            bare = line
        assert any(p.fullmatch(bare) for p in _DOT_LINES), line
        assert "URL" not in bare and "href" not in bare.lower() and "<" not in bare, line
    assert not raw_controls(text)


_MERMAID_QUOTED = re.compile(r'"[^"\n]*"')
_MERMAID_ID = r"(?:t\d+s\d+g\d+(?:[tnmx]\d*)?|g(?:[tnmx]\d*)|empty)"
_MERMAID_LINES = [
    re.compile(p)
    for p in (
        r"flowchart BT",
        r"  classDef \w+ [\w:#,.\- ]+",
        rf"\s*subgraph {_MERMAID_ID}\[\"\"\]",
        rf'\s*{_MERMAID_ID}(?:\(\[""\]\)|\[""\])',
        rf"\s*{_MERMAID_ID} --> {_MERMAID_ID}",
        r"\s*end",
        rf"\s*class {_MERMAID_ID}(?:,{_MERMAID_ID})* \w+",
    )
]


def check_mermaid(text: str) -> None:
    """Every line one the renderer writes; labels quoted, with no quote, tag or backtick of data."""
    for line in text.splitlines():
        for label in _MERMAID_QUOTED.findall(line):
            inner = label[1:-1].replace("<br>", "")
            assert "<" not in inner and ">" not in inner and "`" not in inner, line
        bare = _MERMAID_QUOTED.sub('""', line)
        assert any(p.fullmatch(bare) for p in _MERMAID_LINES), line
        assert "click" not in bare and "href" not in bare and "%%" not in bare, line
    assert not raw_controls(text)


def check_console(text: str) -> None:
    """Only the console's own colour sequences; nothing else a terminal would act on."""
    bare = OWN_STYLING.sub("", text)
    assert "\x1b" not in bare, repr(bare[max(0, bare.find("\x1b") - 40) : bare.find("\x1b") + 40])
    assert not raw_controls(bare), raw_controls(bare)


_FENCE = re.compile(r"^(`{3,})(\w*)$")
_OWN_TAGS = re.compile(r"<(?:br|sub|/sub|details|/details|summary|/summary)>")
_BACKTICKS = re.compile(r"`+")


def _outside_code(line: str) -> str:
    """The line without its code spans, paired as CommonMark pairs them: outside code a
    backslash escapes the next character; a run of backticks opens a span that the next run
    of the same length closes, and inside a span a backslash is literal (so a span may end
    with one, as a spelled escape such as ``\\x1b\\`` does)."""
    out, position, i, n = [], 0, 0, len(line)
    while i < n:
        if line[i] == "\\":
            i += 2
            continue
        if line[i] != "`":
            i += 1
            continue
        end = _BACKTICKS.match(line, i).end()
        close = next(
            (run.end() for run in _BACKTICKS.finditer(line, end) if len(run.group()) == end - i),
            None,
        )
        if close is None:
            i = end
            continue
        out.append(line[position:i])
        position = i = close
    out.append(line[position:])
    return "".join(out)


def check_markdown(text: str) -> None:
    """No raw control or bidi character, no HTML or character reference from data outside code."""
    assert not raw_controls(text), raw_controls(text)
    prose_lines: List[str] = []
    fence: Optional[str] = None
    block: List[str] = []
    for line in text.splitlines():
        if fence is None:
            opened = _FENCE.match(line)
            if opened:
                fence, language, block = opened.group(1), opened.group(2), []
                continue
            prose_lines.append(_outside_code(line))
        elif line == fence:
            if language == "mermaid":
                check_mermaid("\n".join(block))
            fence = None
        else:
            block.append(line)
    assert fence is None, "a code block left open"
    prose_text = _OWN_TAGS.sub("", "\n".join(prose_lines))
    where = prose_text.replace("\\<", "").find("<")
    assert where < 0, prose_text.replace("\\<", "")[max(0, where - 300) :][:400]
    own = prose_text.replace("&amp;", "").replace("&lt;", "")  # the page's own escapes
    assert not re.search(r"&#?[A-Za-z0-9]+;", own), "a character reference from data"


CHECKS = {
    "html": check_html,
    "svg": check_svg,
    "dot": check_dot,
    "mermaid": check_mermaid,
    "console": check_console,
    "markdown": check_markdown,
}
