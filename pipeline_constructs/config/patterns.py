"""`{id}` in a tenant's options: the pattern options, where it stands for the tenant's id, and
the braces refused everywhere else."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pipeline_constructs.config.problems import Problems, field_path, shown

#: The options in which `{id}` stands for the tenant's id (`with_id`): the texts that name
#: something of the tenant's own. Not the choices (`format`, ...), nor ids AWS makes up (`vpc_id`,
#: `kms_key`); `ordering.sequence_pattern`'s braces are its regular expression's.
PATTERN_FIELDS = ("prefix", "sink.url", "sink.auth.secret", "sink.auth.invoke_arn")
ID_PLACEHOLDER = "{id}"
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_LITERAL_BRACES = ("ordering.sequence_pattern",)


def check_placeholders(options: dict[str, Any], where: str, problems: Problems) -> None:
    """Braces in a tenant's options (of `defaults` or of one tenant, as written): `{id}` in a
    pattern option (`PATTERN_FIELDS`), nothing else anywhere."""
    for field, text, (problem, fix) in brace_problems(options):
        problems.add(where, field, text, problem, fix)


def brace_problems(options: dict[str, Any]) -> list[tuple[str, str, tuple[str, str]]]:
    """(field, text, (problem, fix)) of each string of ``options`` whose braces are refused."""
    found = []
    for loc, text in _strings(options):
        problem = placeholder_problem(".".join(str(part) for part in loc if not isinstance(part, int)), text)
        if problem is not None:
            found.append((field_path(loc), text, problem))
    return found


def placeholder_problem(option: str, text: Any) -> tuple[str, str] | None:
    """(problem, fix) of the braces in ``text``, the value of ``option`` (dotted, no list
    indices), or None when they are a pattern's `{id}` or there are none."""
    found = _PLACEHOLDER.findall(text) if isinstance(text, str) and option not in _LITERAL_BRACES else []
    if found and option not in PATTERN_FIELDS:
        return (
            f"is not a pattern option: '{ID_PLACEHOLDER}' stands for the tenant's id only in "
            + ", ".join(PATTERN_FIELDS[:-1])
            + f" and {PATTERN_FIELDS[-1]}",
            "write the value itself",
        )
    unknown = [placeholder for placeholder in found if placeholder != ID_PLACEHOLDER]
    if unknown:
        return (
            f"has the placeholder '{unknown[0]}', but the only one is '{ID_PLACEHOLDER}', the tenant's id",
            f"write '{ID_PLACEHOLDER}' where the tenant's id goes, or the text itself",
        )
    return None


def _strings(data: Any, loc: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(location, text) of every string in a YAML value."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, (*loc, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, (*loc, index))
    elif isinstance(data, str):
        yield loc, data


def with_id(data: Any, tenant_id: str, option: str = "") -> Any:
    """A tenant's merged options with `{id}` replaced by its id in the pattern options (a copy:
    YAML anchors share their values between tenants)."""
    if isinstance(data, dict):
        return {key: with_id(value, tenant_id, f"{option}.{key}".lstrip(".")) for key, value in data.items()}
    if isinstance(data, list):
        return [with_id(value, tenant_id, option) for value in data]
    if isinstance(data, str) and option in PATTERN_FIELDS:
        return data.replace(ID_PLACEHOLDER, tenant_id)
    return data


def prefix_of(entry: Any, defaults: dict[str, Any]) -> tuple[str | None, str]:
    """The prefix a tenant entry gets for the cross-tenant checks, and its source (a pattern, or
    ""); no prefix without a usable id and prefix, or for one reported already (braces; a fixed
    prefix of defaults, reported once rather than as every tenant's overlap)."""
    if not (isinstance(entry, dict) and isinstance(entry.get("id"), str)):
        return None, ""
    own = "prefix" in entry
    written = entry["prefix"] if own else defaults.get("prefix")
    if (
        not isinstance(written, str)
        or placeholder_problem("prefix", written) is not None
        or (not own and ID_PLACEHOLDER not in written)
    ):
        return None, ""
    if ID_PLACEHOLDER not in written:
        return written, ""
    source = f"from the {'' if own else 'defaults '}pattern {shown(written)}"
    return written.replace(ID_PLACEHOLDER, entry["id"]), source
