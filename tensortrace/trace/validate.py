"""What a record that breaks its declaration gets: one ``InvalidRecord``, naming the field.

msgspec checks types, enumerations and bounds while it decodes, in C, and
says where: ``Expected `int | null`, got `str` - at `$.steps[3].line```. This
rewords that as ``$.steps[3].line: expected int or null, got str``, checks
what msgspec cannot declare (a tensor's nested values, without recursion),
and counts the values of a document before it is decoded, so that a stream
of small objects cannot cost the reader more memory than its bytes allow.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, TypeVar

import msgspec

from .numbers import NumberTree
from .bounds import MAX_DATA_DEPTH, MAX_NAME

T = TypeVar("T")


class InvalidRecord(ValueError):
    """Data that is not a valid record.

    ``path`` (``$.steps[3].line``) says where, ``reason`` what.
    """

    def __init__(self, path: str, reason: str, offset: Optional[int] = None) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.offset = offset  # for malformed JSON: the byte where it went wrong

    def under(self, prefix: str) -> "InvalidRecord":
        """The same error with its path read from ``prefix`` on (``$.step`` becomes ``$``)."""
        path = self.path
        if path == prefix or path.startswith((prefix + ".", prefix + "[")):
            path = "$" + path[len(prefix) :]
        return InvalidRecord(path, self.reason, self.offset)


# Patterns compiled on first use (``re`` keeps them): only a refusal needs them.
_BYTE = r" \(byte (\d+)\)$"
_AT = r"(?s)^(?P<what>.*?)(?: - at `(?P<path>[^`]*)`)?$"
_QUOTED = r"`([^`]*)`"


def reworded(exc: Exception) -> InvalidRecord:
    """msgspec's ``ValidationError`` (or ``DecodeError``) as one ``InvalidRecord``."""
    match = re.match(_AT, str(exc))
    what, path = (match.group("what"), match.group("path")) if match else (str(exc), None)
    what = re.sub(_QUOTED, lambda m: m.group(1).replace(" | ", " or "), what)
    what = what.replace("JSON is malformed: ", "not valid JSON: ").replace(
        "Input data was truncated", "not valid JSON: it ends too early"
    )
    byte = re.search(_BYTE, what)
    if byte:
        what = what[: byte.start()]
    return InvalidRecord(
        path or "$",
        what[:1].lower() + what[1:] if what else "invalid",
        int(byte.group(1)) if byte else None,
    )


def number_tree(value: Any) -> Any:
    """A tensor's exact values, checked and frozen: scalars, or lists of them nested as deep as
    dimensions go, become nested tuples; ``ValueError`` for anything else. Iterative: the depth is
    bounded by ``MAX_DATA_DEPTH``, never by Python's stack. (Tuples, from Python data, are read
    as lists are.)"""
    kind = type(value)
    if kind is not list and kind is not tuple:
        if kind in _SCALARS or (kind is str and len(value) <= MAX_NAME):
            return value
        raise ValueError(f"expected a number, flag, short string or array, got {_json_name(value)}")
    # Each frame: the list, the items made of it so far. A finished list becomes a tuple in
    # its parent.
    stack = [(value, [])]
    while True:
        source, made = stack[-1]
        while len(made) < len(source):
            item = source[len(made)]
            kind = type(item)
            if kind is list or kind is tuple:
                if len(stack) >= MAX_DATA_DEPTH:
                    raise ValueError(f"values nested deeper than {MAX_DATA_DEPTH} dimensions")
                stack.append((item, []))
                break
            if kind in _SCALARS or (kind is str and len(item) <= MAX_NAME):
                made.append(item)
            else:
                raise ValueError(
                    f"expected a number, flag, short string or array, got {_json_name(item)}"
                )
        else:
            stack.pop()
            done = tuple(made)
            if not stack:
                return done
            stack[-1][1].append(done)


_SCALARS = (int, float, bool)


def _json_name(value: Any) -> str:
    return {dict: "object", str: "a string too long", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def dec_hook(kind: type, value: Any) -> Any:
    """msgspec's hook for the types it does not know: the number tree."""
    if kind is NumberTree:
        return number_tree(value)
    raise TypeError(f"unsupported type {kind!r}")


def enc_hook(value: Any) -> Any:
    """msgspec's hook for what it does not encode: a subclass of a plain type (``torch.__version__``
    is a ``str``) as that type."""
    for plain in (str, int, float):
        if isinstance(value, plain):
            return plain(value)
    raise TypeError(f"a trace holds no {type(value).__name__}")


class Encoder:
    """The JSON encoder of records (and of plain data holding them), in C.

    UTF-8 cannot hold a lone surrogate (``print("\\ud800")`` in a step puts one
    in its output), and msgspec refuses to write one; such a value is written
    with each lone surrogate spelled as Python spells it, ``\\ud800``, as the
    console shows it: readable, and valid everywhere JSON goes.
    """

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder(enc_hook=enc_hook)

    def encode(self, value: Any) -> bytes:
        try:
            return self._encoder.encode(value)
        except UnicodeEncodeError:
            return self._encoder.encode(
                _without_surrogates(msgspec.to_builtins(value, enc_hook=enc_hook))
            )


_SURROGATE = "[\ud800-\udfff]"


def _without_surrogates(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return re.sub(_SURROGATE, lambda m: f"\\u{ord(m.group(0)):04x}", value)
    if kind is list or kind is tuple:
        return [_without_surrogates(v) for v in value]
    if kind is dict:
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def encoder() -> Encoder:
    """The JSON encoder of records (``Encoder``)."""
    return Encoder()


def decoder(kind: Any) -> "msgspec.json.Decoder":
    """A JSON decoder of ``kind`` that knows the number tree."""
    return msgspec.json.Decoder(kind, dec_hook=dec_hook)


def decoding(decode: Callable[[Any], T], data: Any) -> T:
    """``decode(data)``, every failure one ``InvalidRecord``: a violation, malformed JSON, bytes
    that are not UTF-8, or nesting deeper than the decoder goes (msgspec then raises
    ``RecursionError``)."""
    try:
        return decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise reworded(exc) from None
    except RecursionError:
        raise InvalidRecord("$", "nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise InvalidRecord("$", f"not valid UTF-8 text (byte {exc.start})") from None


def converted(data: Any, kind: Any) -> Any:
    """Python data (``json.loads`` output) as ``kind``, checked as a decoded document is."""
    return decoding(lambda d: msgspec.convert(d, kind, dec_hook=dec_hook), data)


def value_count(data: bytes) -> int:
    """At most how many JSON values ``data`` holds: every value but the first of its container
    follows a comma, and every container opens with a bracket (string contents are counted too,
    which only errs high). Three passes in C, before anything is decoded."""
    return data.count(b",") + data.count(b"[") + data.count(b"{") + 1
