"""Problems of a tenants file, in one form: `<where>: field '<field>' = <value>: <problem>; <fix>`.

pydantic's errors are put in the project's words here (never "Input should be ..."), each with
the fix its field declares (`options.fix_for`)."""

from __future__ import annotations

import difflib
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from lambdas import contract
from pipeline_constructs.config.options import advice_of, fix_for

#: A value the file does not have.
MISSING: Any = object()


class ConfigError(ValueError):
    """``tenants.yaml`` is invalid. ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{source} is invalid ({len(problems)} problem{'s' if len(problems) > 1 else ''}):\n{lines}"
        )


@dataclass
class Problems:
    """The problems found so far, each once (a bad default is reported once, not per tenant)."""

    lines: list[str] = field(default_factory=list)

    def add(self, where: str, field: str, value: Any, problem: str, fix: str, *, source: str = "") -> None:
        """`source`: where a value made by a pattern came from, shown beside it."""
        shown_value = "(missing)" if value is MISSING else shown(value)
        if source:
            shown_value += f" ({source})"
        line = f"{where}: field '{field}' = {shown_value}: {problem}; {fix}"
        if line not in self.lines:
            self.lines.append(line)


def shown(value: Any, width: int = 120) -> str:
    """A value as a problem shows it: its repr, cut in the middle past ``width`` characters."""
    text = repr(value)
    if len(text) <= width:
        return text
    size = f"{len(value)} entries" if isinstance(value, list) else f"{len(str(value))} characters"
    return f"{text[: width // 2]}...{text[-20:]} ({size})"


def lookup(data: Any, loc: tuple[Any, ...]) -> Any:
    """The value at ``loc`` in YAML data, or `MISSING`."""
    for part in loc:
        if (isinstance(data, dict) and part in data) or (
            isinstance(data, (list, tuple)) and isinstance(part, int) and part < len(data)
        ):
            data = data[part]
        else:
            return MISSING
    return data


def field_path(loc: tuple[Any, ...]) -> str:
    """`sink.auth.secret`, `uploaders[0]`: a location as the tenants file spells it."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def untagged(error: Any) -> dict[str, Any]:
    """A pydantic error with the tag of a discriminated union (`sink.auth`'s `type`) out of its
    location, so that it reads `sink.auth.secret` and looks up the YAML as written; the tagged
    location is kept to find the union member's fields."""
    loc, tagged = list(error["loc"]), tuple(error["loc"])
    for index in range(len(loc) - 1, 0, -1):
        if loc[index - 1] == "auth" and loc[index] in contract.SINK_AUTH_TYPES:
            del loc[index]
    return {**error, "loc": tuple(loc), "tagged_loc": tagged}


def report_one(
    error: dict[str, Any],
    model: type[BaseModel],
    data: Any,
    where: str,
    problems: Problems,
    *,
    source: str = "",
) -> None:
    loc, tagged = error["loc"], error.get("tagged_loc", error["loc"])
    name = field_path(loc)
    leaf = str(loc[-1]) if loc else "(entry)"
    kind = error["type"]
    if kind == "extra_forbidden":
        problems.add(
            where, name, lookup(data, loc), "unknown key", unknown_key_fix(leaf, keys_at(model, tagged[:-1]))
        )
        return
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        tags = _union_tags(model, tagged)
        value = MISSING if kind == "union_tag_not_found" else lookup(data, (*loc, "type"))
        problem = "is required" if value is MISSING else f"is not one of {', '.join(repr(t) for t in tags)}"
        problems.add(
            where,
            f"{name}.type",
            value,
            problem,
            "use " + ", ".join(f"'{t}'" for t in tags[:-1]) + f" or '{tags[-1]}'",
        )
        return
    info = field_at(model, tagged)
    fix = fix_for(info, leaf) if info is not None else "see the option in docs/configuration.md"
    if kind == "missing":
        problems.add(where, name, MISSING, "is required", fix)
        return
    problems.add(where, name, lookup(data, loc), _plain_words(error, info), fix, source=source)


#: pydantic's error types in the project's own words (the fix says what a valid value is).
_BOUNDS = {
    "greater_than_equal": "is less than {ge}",
    "less_than_equal": "is more than {le}",
    "greater_than": "must be more than {gt}",
    "less_than": "must be less than {lt}",
    "string_too_short": "is too short (at least {min_length} characters)",
    "string_too_long": "is too long (at most {max_length} characters)",
    "too_short": "has too few entries (at least {min_length})",
    "too_long": "has too many entries (at most {max_length})",
}
_TYPES = {
    "int_type": "is not a whole number",
    "int_parsing": "is not a whole number",
    "int_from_float": "is not a whole number",
    "float_type": "is not a number",
    "string_type": "is not text (quote it)",
    "bool_type": "is not true or false",
    "bool_parsing": "is not true or false",
    "dict_type": "is not a mapping",
    "model_type": "is not a mapping",
    "model_attributes_type": "is not a mapping",
    "list_type": "is not a list",
    "none_required": "must be left out",
}


def _plain_words(error: dict[str, Any], info: FieldInfo | None) -> str:
    """One problem in the project's words. Our validators' messages (value errors) are kept."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        mismatch = advice_of(info).mismatch if info is not None else None
        return mismatch or "does not have the form this option needs"
    if kind in _BOUNDS:
        return _BOUNDS[kind].format(**ctx)
    if kind in _TYPES:
        return _TYPES[kind]
    if kind == "literal_error":
        return f"is not one of {ctx.get('expected', 'the allowed values')}"
    if kind in ("value_error", "assertion_error"):
        return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return "is not a valid value here"


def _model_of(annotation: Any, tag: Any = None) -> type[BaseModel] | None:
    """The model a field holds: itself, of `X | None` or of a list, or a union member by its `type` tag."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    members = [m for m in typing.get_args(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(members) == 1:
        return members[0]
    return next((m for m in members if typing.get_args(m.model_fields["type"].annotation) == (tag,)), None)


def _descend(
    model: type[BaseModel], tagged: tuple[Any, ...]
) -> tuple[FieldInfo | None, type[BaseModel] | None]:
    """The field at a (tagged) error location and the model it holds: `('sink', 'auth',
    'bearer', 'secret')` is `BearerAuth.secret`; list indices and `targets`' names are skipped."""
    parts = [part for part in tagged if not isinstance(part, int)]
    info: FieldInfo | None = None
    current: type[BaseModel] | None = model
    while parts:
        if current is None or parts[0] not in current.model_fields:
            return None, None
        info = current.model_fields[parts.pop(0)]
        if typing.get_origin(info.annotation) is dict and parts:
            parts.pop(0)
        current = _model_of(info.annotation)
        if current is None and parts and typing.get_args(info.annotation):
            current = _model_of(info.annotation, parts[0])
            if current is not None:
                parts.pop(0)
    return info, current


def field_at(model: type[BaseModel], tagged: tuple[Any, ...]) -> FieldInfo | None:
    """The field at a (tagged) error location, if it names one."""
    return _descend(model, tagged)[0]


def _union_tags(model: type[BaseModel], tagged: tuple[Any, ...]) -> list[str]:
    info = field_at(model, tagged)
    members = typing.get_args(info.annotation) if info is not None else ()
    return [
        tag
        for m in members
        if isinstance(m, type)
        # the members of a tagged union are blocks (models), each with its `type` tag
        for tag in typing.get_args(typing.cast("type[BaseModel]", m).model_fields["type"].annotation)
    ]


def keys_at(model: type[BaseModel], tagged: tuple[Any, ...]) -> tuple[str, ...]:
    """The keys the (nested) model at ``tagged`` accepts."""
    nested = _descend(model, tagged)[1] if tagged else model
    return tuple(nested.model_fields) if nested is not None else ()


def unknown_key_fix(key: str, valid: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'?" if close else f"valid keys here: {', '.join(valid)}"
    return f"remove it or fix its spelling ({hint})"


def check_unknown(data: dict[str, Any], valid: tuple[str, ...], where: str, problems: Problems) -> None:
    for key in data:
        if key not in valid:
            problems.add(where, str(key), data[key], "unknown key", unknown_key_fix(str(key), valid))
