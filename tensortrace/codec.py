"""Records to JSON-ready data and back: functions made once per record type from its annotations.

``model.py`` defines the records; this turns any of them into plain dicts,
lists and scalars (``_to_plain``) and back (``_from_plain``), spelling
non-finite floats as strings. An encoder takes a field of plain strings,
integers or flags as it is and converts only floats, tuples, nested records
and ``Any``; a decoder calls one function per value, so loading a trace of a
100,000-node graph stays linear.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import reprlib
import sys
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

# Non-finite floats have no JSON spelling; they travel as these strings.
_FLOAT_SPELLINGS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _encode_scalar(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def encode_number_tree(value: Any) -> Any:
    """Nested lists of numbers with NaN/Inf spelled as strings (JSON-safe)."""
    if isinstance(value, (list, tuple)):
        return [encode_number_tree(v) for v in value]
    if isinstance(value, complex):
        return str(value)
    return _encode_scalar(value)


def decode_number(value: Any) -> Any:
    if isinstance(value, str) and value in _FLOAT_SPELLINGS:
        return _FLOAT_SPELLINGS[value]
    return value


def one_line_encoder(ensure_ascii: bool) -> Callable[[Any], str]:
    """JSON on one line, as ``json.dumps(value, ensure_ascii=..., allow_nan=False)`` writes it.

    ``json.dumps`` with any argument makes a new ``JSONEncoder``, which makes a
    new C encoder, at every call: a few microseconds for each record or event.
    This makes the C encoder once. It skips the circularity check, which
    records, being trees, never need. NaN and infinity are refused (ValueError).
    """
    import json

    plain = json.JSONEncoder(ensure_ascii=ensure_ascii, allow_nan=False)
    make = json.encoder.c_make_encoder
    if make is None:  # a Python without the json module's C accelerator
        return plain.encode
    strings = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    chunks = make(None, plain.default, strings, None, ": ", ", ", False, False, False)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


_FIELDS: dict = {}


def _field_names(cls: type) -> Tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


# A field named after a Python keyword (``in_``, ``from_``) has the keyword as its JSON key.
_KEYS: dict = {}


def _field_keys(cls: type) -> Tuple[Tuple[str, str], ...]:
    pairs = _KEYS.get(cls)
    if pairs is None:
        pairs = _KEYS[cls] = tuple((n, n[:-1] if n.endswith("_") else n) for n in _field_names(cls))
    return pairs


def _to_plain(obj: Any) -> Any:
    cls = type(obj)
    encoder = _ENCODERS.get(cls)
    if encoder is not None:
        return encoder(obj)
    if cls is str or cls is int or cls is bool or obj is None:
        return obj
    if cls is tuple or cls is list:  # before is_dataclass, which a tuple of records would ask at every step
        return [_to_plain(v) for v in obj]
    if dataclasses.is_dataclass(obj):
        return _record_encoder(cls)(obj)
    return _encode_scalar(obj)


_EVALUATED: Dict[Tuple[str, str], Any] = {}  # (module, annotation text) -> its type


def _hints(cls: type) -> Dict[str, Any]:
    """``typing.get_type_hints(cls)`` for records whose annotations are strings
    (``from __future__ import annotations``): each distinct text is evaluated once
    in its module, where ``get_type_hints`` compiled every field's anew."""
    out: Dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        module = getattr(klass, "__module__", None)
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if isinstance(annotation, str):
                key = (module, annotation)
                evaluated = _EVALUATED.get(key)
                if evaluated is None:
                    evaluated = _EVALUATED[key] = eval(annotation, vars(sys.modules[module]))  # noqa: S307 - our own annotations
                annotation = evaluated
            out[name] = annotation
    return out


# Encoders are made once per record type from its annotations: a field of plain
# strings, integers or flags is taken as it is, and only floats, tuples, nested
# records and ``Any`` are converted.
_ENCODERS: Dict[type, Callable[[Any], Any]] = {}
_PLAIN = (str, int, bool)


_ENCODERS_LEAVING: Dict[Tuple[type, Tuple[str, ...]], Callable[[Any], Any]] = {}


def to_plain_leaving(record: Any, left: Tuple[str, ...]) -> Dict[str, Any]:
    """``_to_plain(record)`` with the fields ``left`` not converted: each is None, in its place,
    for the caller to fill (a step's tensors, which the pipe and the document write their own way)."""
    key = (type(record), left)
    encoder = _ENCODERS_LEAVING.get(key)
    if encoder is None:
        encoder = _ENCODERS_LEAVING[key] = _record_encoder(type(record), left)
    return encoder(record)


def _record_encoder(cls: type, left: Tuple[str, ...] = ()) -> Callable[[Any], Any]:
    """The encoder of ``cls``, registered as its own unless it leaves fields out (``to_plain_leaving``)."""
    hints = _hints(cls)
    names: Dict[str, Any] = {"_to_plain": _to_plain, "_encode_scalar": _encode_scalar}
    parts = []
    for name, key in _field_keys(cls):
        if name in left:
            parts.append(f"{key!r}: None")
            continue
        value = f"o.{name}"
        tp = hints[name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = typing.get_origin(tp) is typing.Union
        inner = args[0] if optional and len(args) == 1 else tp
        if inner in _PLAIN:
            parts.append(f"{key!r}: {value}")
            continue
        if typing.get_origin(inner) in (tuple, Tuple) and typing.get_args(inner)[:1] and _plain_or_none(typing.get_args(inner)[0]):
            text = f"list({value})"
        elif typing.get_origin(inner) in (tuple, Tuple):
            text = f"[_to_plain(v) for v in {value}]"
        elif inner is float:
            text = f"_encode_scalar({value})"
        else:
            text = f"_to_plain({value})"
        if optional:
            text = f"(None if {value} is None else {text})"
        parts.append(f"{key!r}: {text}")
    source = f"def encode(o):\n    return {{{', '.join(parts)}}}\n"
    exec(source, names)  # noqa: S102 - code made here from the record's own field names
    if not left:
        _ENCODERS[cls] = names["encode"]
    return names["encode"]


def _plain_or_none(tp: Any) -> bool:
    """Whether values of ``tp`` are JSON as they are: a string, integer or flag, or ``Optional`` of one."""
    if tp in _PLAIN:
        return True
    args = typing.get_args(tp)
    return typing.get_origin(tp) is typing.Union and len(args) == 2 and type(None) in args and all(
        a in _PLAIN or a is type(None) for a in args)


# Decoders are built once per type from the records' annotations, so loading a
# trace of a 100,000-node graph costs one function call per value.
_DECODERS: Dict[Any, Callable[[Any], Any]] = {}


def _from_plain(tp: Any, value: Any) -> Any:
    return _decoder(tp)(value)


def _decoder(tp: Any) -> Callable[[Any], Any]:
    decoder = _DECODERS.get(tp)
    if decoder is None:
        decoder = _DECODERS[tp] = _make_decoder(tp)
    return decoder


def _identity(value: Any) -> Any:
    return value


def _make_decoder(tp: Any) -> Callable[[Any], Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Union:  # Optional[X]
        inner_tp = [a for a in typing.get_args(tp) if a is not type(None)][0]
        if inner_tp in _PLAIN:
            return _identity
        inner: List[Callable[[Any], Any]] = []  # bound on first use: a record type may refer to itself

        def optional(value: Any) -> Any:
            if value is None:
                return None
            if not inner:
                inner.append(_decoder(inner_tp))
            return inner[0](value)

        return optional
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        names = {key: name for name, key in _field_keys(tp)}
        fields: Dict[str, Tuple[str, Callable[[Any], Any]]] = {}
        every = frozenset(names)
        whole: List[Callable[[Any], Any]] = []  # the decoder of an object holding every field and no other
        partial: Dict[Tuple[str, ...], Callable[..., Any]] = {}  # the same, with these fields given (by name, in order)

        def record(value: Any, given: Optional[Dict[str, Any]] = None) -> Any:
            if type(value) is not dict:
                raise TypeError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
            if not fields:  # built on first use: a record type may refer to itself
                fields.update((key, (name, _decoder(hints[name]))) for key, name in names.items())
                whole.append(_whole_decoder(tp, fields))
            if given is None:
                if value.keys() == every:  # as to_dict writes it: one call, no lookups
                    return whole[0](value)
                return tp(**{field[0]: field[1](v) for k, v in value.items() if (field := fields.get(k)) is not None})
            if value.keys() == every:
                names_given = tuple(given)
                made = partial.get(names_given)
                if made is None:  # False: a name that is not a field, which the general path refuses
                    made = partial[names_given] = set(names_given) <= set(names.values()) and _whole_decoder(tp, fields, names_given)
                if made:
                    return made(value, *given.values())
            kwargs = {field[0]: field[1](v) for k, v in value.items() if (field := fields.get(k)) is not None and field[0] not in given}
            kwargs.update(given)
            return tp(**kwargs)

        return record
    if origin in (tuple, Tuple):
        args = typing.get_args(tp)
        inner_tp = args[0] if args else Any
        items: List[Callable[[Any], Any]] = []

        def sequence(value: Any) -> Any:
            if type(value) is not list and type(value) is not tuple:
                raise TypeError(f"expected a list, got {type(value).__name__}")
            if not items:
                items.append(_decoder(inner_tp))
            item = items[0]
            return tuple(value) if item is _identity else tuple(map(item, value))

        return sequence
    if tp is float:
        return decode_number
    if tp is Any:
        return freeze
    return _identity


def _whole_decoder(tp: type, fields: Dict[str, Tuple[str, Callable[[Any], Any]]], given: Tuple[str, ...] = ()) -> Callable[..., Any]:
    """A record from an object holding exactly its fields: ``tp(name=convert(value[key]), ...)``,
    made from the record's own field names once; what it makes is what the general path makes.
    The fields named in ``given`` are taken from the arguments after ``value``, in that order."""
    names: Dict[str, Any] = {"tp": tp}
    parts = []
    arguments = [f"g{i}" for i in range(len(given))]
    for i, (key, (name, convert)) in enumerate(fields.items()):
        if name in given:
            parts.append(f"{name}={arguments[given.index(name)]}")
        elif convert is _identity:
            parts.append(f"{name}=value[{key!r}]")
        else:
            names[f"c{i}"] = convert
            parts.append(f"{name}=c{i}(value[{key!r}])")
    exec(f"def whole({', '.join(['value'] + arguments)}):\n    return tp({', '.join(parts)})\n", names)  # noqa: S102 - from the record's own field names
    return names["whole"]


def freeze(value: Any) -> Any:
    """Lists become tuples so that loaded traces compare equal to recorded ones."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def quick_init(cls: type) -> type:
    """Give a frozen record an ``__init__`` that fills the instance's ``__dict__`` directly.

    The one ``dataclass`` writes calls ``object.__setattr__`` once per field, to get
    past the freezing; the recorder makes several of these records per step, and
    this is a third of the cost. Same signature, same defaults, same fields: the
    records are built, compared, hashed and printed exactly as before.
    """
    fields = dataclasses.fields(cls)
    defaults = {f"_d_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING}
    assert all(f.default_factory is dataclasses.MISSING for f in fields) and not hasattr(cls, "__post_init__")
    params = ", ".join(f.name + (f"=_d_{f.name}" if f"_d_{f.name}" in defaults else "") for f in fields)
    body = "".join(f"\n    d[{f.name!r}] = {f.name}" for f in fields)
    namespace: Dict[str, Any] = {}
    exec(f"def __init__(self, {params}):\n    d = self.__dict__{body}", defaults, namespace)
    namespace["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = namespace["__init__"]  # type: ignore[misc]
    return cls


def frozen_methods(cls: type) -> type:
    """Give a dataclass made with ``init=False, repr=False, eq=False`` what ``frozen=True``
    and ``eq=True`` would write: ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and
    ``__delattr__``, the same behaviour, but closures rather than five functions compiled
    from source per class (``dataclass`` execs each one; 23 records paid that at every start).
    """
    names = tuple(f.name for f in dataclasses.fields(cls))
    getter = operator.attrgetter(*names)
    key = getter if len(names) > 1 else (lambda self: (getter(self),))

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(key(self))

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        return self.__class__.__qualname__ + "(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in names) + ")"

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    for method in (__eq__, __hash__, __repr__, __setattr__, __delattr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    return cls
