"""The one fold style: a typed handler per payload type, registered once, checked against
the event catalog when the projection class is defined.

A projection marks each handler with :func:`folds`, naming the payload type(s) it takes::

    class Schedules(Projection):
        @folds(p.ScheduleCreated)
        def _created(self, tx: Tx, e: Envelope, c: p.ScheduleCreated) -> None: ...

        @folds(p.ScheduleStateChange, kinds=("schedule.paused",))
        def _paused(self, tx: Tx, e: Envelope, s: p.ScheduleStateChange) -> None: ...

The handler gets the envelope (tenant, id, HLC) and its payload, typed as the handler says,
so a type checker sees the real type instead of ``Envelope.payload: Any``. A payload type
maps to every catalog kind that carries it, unless ``kinds`` picks some of them (the three
``schedule.paused|resumed|deleted`` kinds share one type). The kinds a projection folds are
exactly the kinds of its handlers: there is no second list to keep in step.

:func:`handlers_of` builds the table (kind → handler) and refuses, with a :class:`TypeError`
at import time, a payload type the catalog does not know, a kind that does not carry it, a
handler whose payload annotation does not accept it, and two handlers for one kind.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from streamproc.events.catalog import KINDS
from streamproc.events.payloads import Payload

Handler = Callable[..., None]
"""``(projection, tx, envelope, payload) -> None``; raises ``Rejection`` to refuse."""
H = TypeVar("H", bound=Handler)

_MARK = "__folds__"


def kinds_of(payload: type[Payload]) -> frozenset[str]:
    """The catalog kinds whose payload is exactly ``payload``."""
    return frozenset(k for k, s in KINDS.items() if s.payload is payload)


def payloads_of(kinds: Iterable[str]) -> tuple[type[Payload], ...]:
    """The payload types of ``kinds``, each once: for a handler that folds any of them alike
    (``@folds(*payloads_of(kinds), kinds=kinds)``, its payload annotated ``Payload``)."""
    return tuple(dict.fromkeys(KINDS[k].payload for k in sorted(kinds)))


def folds(*payloads: type[Payload], kinds: Iterable[str] = ()) -> Callable[[H], H]:
    """Register the decorated method as the fold of these payload types' kinds.

    ``kinds`` narrows a payload type shared by several kinds to the ones named. The
    registration itself happens when the class is created (:func:`handlers_of`)."""
    if not payloads:
        raise TypeError("folds() needs at least one payload type")
    picked = tuple(kinds)

    def mark(fn: H) -> H:
        setattr(fn, _MARK, (payloads, picked))
        return fn

    return mark


def _accepts(annotation: Any, payload: type[Payload]) -> bool:
    if annotation is Any:
        return False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(_accepts(a, payload) for a in typing.get_args(annotation))
    return isinstance(annotation, type) and issubclass(payload, annotation)


def _payload_annotation(owner: str, fn: Handler) -> Any:
    """The annotation of the handler's payload parameter (``self, tx, envelope, payload``)."""
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 4:
        raise TypeError(
            f"{owner}.{fn.__name__}: a fold takes (self, tx, envelope, payload), "
            f"not ({', '.join(p.name for p in params)})"
        )
    annotation = params[3].annotation
    if annotation is inspect.Parameter.empty:
        raise TypeError(f"{owner}.{fn.__name__}: annotate the payload parameter with its type")
    if isinstance(annotation, str):  # ``from __future__ import annotations``
        try:
            annotation = eval(annotation, fn.__globals__)
        except NameError as exc:
            raise TypeError(f"{owner}.{fn.__name__}: payload annotation: {exc}") from None
    return annotation


def handlers_of(cls: type) -> dict[str, Handler]:
    """The class's handlers by kind (its own and inherited), checked against the catalog."""
    table: dict[str, Handler] = {}
    by: dict[str, str] = {}
    owner = cls.__name__
    seen: set[str] = set()
    for klass in cls.__mro__:
        for attr, fn in vars(klass).items():
            if attr in seen:
                continue  # overridden in a subclass: the override decides
            seen.add(attr)
            mark = getattr(fn, _MARK, None)
            if mark is None:
                continue
            for kind in _kinds(owner, attr, fn, *mark):
                if kind in table:
                    raise TypeError(f"{owner}: {kind} has two folds, {by[kind]} and {attr}")
                table[kind], by[kind] = fn, attr
    return table


def _kinds(
    owner: str, attr: str, fn: Handler, payloads: tuple[type[Payload], ...], picked: tuple[str, ...]
) -> list[str]:
    """The kinds one handler folds, after checking its payload types and annotation."""
    where = f"{owner}.{attr}"
    annotation = _payload_annotation(owner, fn)
    carried = {x: kinds_of(x) for x in payloads}
    stray = set(picked).difference(*carried.values())
    if stray:
        names = ", ".join(getattr(x, "__name__", str(x)) for x in payloads)
        raise TypeError(f"{where}: {sorted(stray)} do not carry {names} in the event catalog")
    out: list[str] = []
    for payload, kinds in carried.items():
        name = getattr(payload, "__name__", str(payload))
        if not kinds:
            raise TypeError(f"{where}: {name} is not the payload of a kind in the event catalog")
        if not _accepts(annotation, payload):
            raise TypeError(f"{where}: its payload is annotated {annotation!r}, not {name}")
        chosen = kinds & set(picked) if picked else kinds
        if not chosen:
            raise TypeError(f"{where}: none of {sorted(picked)} carries {name}")
        out.extend(sorted(chosen))
    return out
