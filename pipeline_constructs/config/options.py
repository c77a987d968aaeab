"""How a tenants-file option is declared: once, on its model's field.

`option()` is a pydantic `Field` (type, bounds, default, description) that also knows what a
valid value looks like, the "fix" a problem with it shows. The fix is derived from the
field's constraints where that is mechanical (a number's bounds, a choice's values, a flag);
`fix=` replaces the derived text, `hint=` adds to it, `notes=` explains a choice's values.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

#: The patterns more than one model checks.
REGION_PATTERN = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+$"
#: An IAM principal that may act on a tenant: a role or a user of an account, or an account
#: root (`arn:aws:iam::111111111111:root`: that account decides which of its principals).
PRINCIPAL_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::\d{12}:(root|role/[\w+=,.@/-]+|user/[\w+=,.@/-]+)$"
#: A KMS key ARN (not an alias: IAM policies and key grants name the key itself); `mrk-` ids
#: are multi-Region keys.
KMS_KEY_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/"
    r"(mrk-[0-9a-f]{32}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12})$"
)


class Model(BaseModel):
    """A block of the tenants file: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@dataclass(frozen=True)
class Advice:
    """The fix of a field (in its `FieldInfo.metadata`), and the problem of a value that does
    not match its `pattern`."""

    fix: str | None = None
    hint: str = ""
    notes: tuple[tuple[Any, str], ...] = ()
    mismatch: str | None = None


def option(
    default: Any = ...,
    *,
    description: str,
    fix: str | None = None,
    hint: str = "",
    notes: dict[Any, str] | None = None,
    mismatch: str | None = None,
    schema: dict[str, Any] | None = None,
    **constraints: Any,
) -> Any:
    """A field of the tenants file. ``mismatch``: what a value that fails ``pattern`` is;
    ``schema``: what the JSON schema says beyond the constraints (merged one level deep), for a
    rule a validator checks, so that an editor flags it too."""
    extra = None if schema is None else lambda generated: _merge_schema(generated, schema)
    info: FieldInfo = Field(default, description=description, json_schema_extra=extra, **constraints)
    info.metadata.append(Advice(fix, hint, tuple((notes or {}).items()), mismatch))
    return info


def _merge_schema(generated: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(generated.get(key), dict):
            generated[key] = {**generated[key], **value}
        else:
            generated[key] = value


def advice_of(info: FieldInfo) -> Advice:
    return next((item for item in info.metadata if isinstance(item, Advice)), Advice())


def fix_of(model: type[BaseModel], name: str) -> str:
    """What a valid value of ``model``'s field ``name`` looks like."""
    return fix_for(model.model_fields[name], name)


def fix_for(info: FieldInfo, name: str) -> str:
    """The fix of a field: its own text, or one derived from its type and constraints."""
    advice = advice_of(info)
    if advice.fix is not None:
        return advice.fix + advice.hint
    derived = _derived(info, name, dict(advice.notes))
    return (derived or f"see '{name}' in docs/configuration.md") + advice.hint


def _derived(info: FieldInfo, name: str, notes: dict[Any, str]) -> str | None:
    annotation = info.annotation
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = [m for m in typing.get_args(annotation) if m is not type(None)] if optional else [annotation]
    kind = members[0] if len(members) == 1 else None
    nested = _model_in(kind)
    if nested is not None:
        keys = ", ".join(nested.model_fields)
        shape = (
            f"each entry a mapping of {keys}"
            if typing.get_origin(kind) in (list, tuple)
            else f"a mapping of {keys}"
        )
        return f"write {name} as {shape}" + (", or leave it out" if info.default is None else "")
    if kind is bool:
        return "use " + _either([(True, "true"), (False, "false")], notes, info.default)
    if typing.get_origin(kind) is Literal:
        return "use " + _either([(v, f"'{v}'") for v in typing.get_args(kind)], notes, info.default)
    if kind is int:
        bounds = {type(m).__name__: m for m in info.metadata if isinstance(m, annotated_types.BaseMetadata)}
        # Keyed by the constraint's class name: `bounds["Ge"]` is an `annotated_types.Ge`, and so
        # on; an int field's bounds are ints.
        low = typing.cast(annotated_types.Ge, bounds["Ge"]).ge if "Ge" in bounds else None
        high = (
            typing.cast(annotated_types.Le, bounds["Le"]).le
            if "Le" in bounds
            else (
                typing.cast(int, typing.cast(annotated_types.Lt, bounds["Lt"]).lt) - 1
                if "Lt" in bounds
                else None
            )
        )
        what = "a whole number of seconds" if name.endswith("_seconds") else "a whole number"
        default = f" (default {info.default})" if isinstance(info.default, int) else ""
        if low is not None and high is not None:
            return f"use {what} from {low} to {high}{default}"
        if low is not None:
            return f"use {what}, at least {low}{default}"
        return f"use {what}{default}"
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model of a block (`X`) or of a list of blocks (`list[X]`, `tuple[X, ...]`)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _either(values: list[tuple[Any, str]], notes: dict[Any, str], default: Any) -> str:
    """`'a' (note) or 'b' (the default)`: each value, with its note and which is the default."""
    shown = []
    for value, text in values:
        note = ", ".join(
            part for part in (notes.get(value, ""), "the default" if value == default else "") if part
        )
        shown.append(f"{text} ({note})" if note else text)
    return ", ".join(shown[:-1]) + f" or {shown[-1]}"


def ids(values: list[str], pattern: str, what: str, *, item: str = "an id") -> list[str]:
    """`values` if each matches `pattern` and none is listed twice; else the first problem."""
    wrong = [value for value in values if not re.match(pattern, value)]
    if wrong:
        raise ValueError(f"{wrong[0]!r} is not {what}")
    if len(set(values)) != len(values):
        raise ValueError(f"lists {item} twice")
    return values


def matching(value: str, pattern: str, problem: str) -> str:
    """`value` if it matches `pattern`, else the validation error `problem`."""
    if not re.match(pattern, value):
        raise ValueError(problem)
    return value
