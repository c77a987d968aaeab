"""The tenants file's JSON Schema and configuration reference, generated from the config model.

    python -m tools.config_docs --write    # rewrite tenants.schema.json and docs/configuration.md
    python -m tools.config_docs --check    # exit 1 when either differs from the model

Each option is documented once, on its field of `pipeline_constructs/config/`
(`Field(description=...)`, with its type, default and range); both files are generated from
the model, and tests/test_config_docs.py fails when one drifts. The schema describes the file as
a user writes it: `defaults:` is a partial tenant, and a tenant's blocks need no key of their
own (they merge key by key with `defaults`: `parse_config` checks what is required after the
merge, and everything the schema cannot say, such as overlapping prefixes).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pipeline_constructs import config
from pipeline_constructs.config import AppConfig, ConfigError, TenantConfig

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "tenants.schema.json"
DOC = ROOT / "docs" / "configuration.md"
COMMAND = "python -m tools.config_docs --write"
#: The page whose table of deploy-time limits is generated, between these markers.
SCALING_DOC = ROOT / "docs" / "scaling.md"
LIMITS_START = (
    "<!-- The deploy-time limits, generated from pipeline_constructs/deploy_limits/ by make config-docs. -->"
)
LIMITS_END = "<!-- End of the generated table. -->"
#: The top-level keys in the order the reference shows them (the loader's `TOP_LEVEL_KEYS`).
TOP_LEVEL_ORDER = (
    "defaults",
    "tenants",
    "notifications",
    "routing",
    "account_limits",
    "targets",
    "encryption",
    "qualifier",
)
#: Top-level blocks the loader reads as empty when they are `null` (`raw.get(key) or {}`).
NULL_AS_EMPTY = ("defaults", "notifications", "routing", "targets", "account_limits")
#: The heading of the tenant's options in the reference.
TENANT_SECTION = "A tenant (`tenants[]` and `defaults`)"
#: A bad file whose problems the reference shows, as `parse_config` reports them today.
BAD_EXAMPLE = """\
defaults:
  sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
tenants:
  - id: acme
    prefix: in/
    chunk_sise: 10
  - id: beta
    prefix: in/beta/
    sink: {timeout_seconds: 90}
"""


# -- the schema ----------------------------------------------------------------------------------


def _merged_blocks() -> list[str]:
    """The models of a tenant's blocks (`sink`, `alarms`, ...): in a tenant and in `defaults`
    each merges key by key, so neither needs a key of its own."""
    return [
        model.__name__
        for field in TenantConfig.model_fields.values()
        for model in (field.annotation, *typing.get_args(field.annotation))
        if isinstance(model, type) and issubclass(model, BaseModel)
    ]


def schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a tenants file as a user writes it."""
    generated = AppConfig.model_json_schema()
    defs = generated.pop("$defs")
    _drop_titles(generated)
    _drop_titles(defs)
    # A block's required keys may come from `defaults`: required only where nothing merges.
    required = {name: defs[name].pop("required", []) for name in _merged_blocks()}
    tenant = defs[TenantConfig.__name__]
    tenant["required"] = ["id"]  # and `prefix`, unless `defaults` give a pattern of it: see `if` below
    properties = generated["properties"]
    properties["encryption"]["anyOf"][0]["required"] = required[config.EncryptionConfig.__name__]
    defaults = {key: tenant["properties"][key] for key in config.DEFAULTS_KEYS}
    # `sink.auth: {type: none}` is inherited only with `inherited: true` (config.checks.check_default_auth): an
    # editor flags it here.
    defaults["sink"] = {
        **defaults["sink"],
        "not": {
            "required": ["auth"],
            "properties": {
                "auth": {
                    "required": ["type"],
                    "properties": {"type": {"const": "none"}, "inherited": {"const": False}},
                }
            },
        },
    }
    properties["defaults"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": defaults,
        "description": config.DEFAULTS_DESCRIPTION,
    }
    for key in NULL_AS_EMPTY:
        properties[key] = _or_null(properties[key])
    assert set(properties) == set(config.TOP_LEVEL_KEYS) == set(TOP_LEVEL_ORDER), "a top-level key is missing"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tenants.yaml",
        "description": "The tenants of the ordered ingestion pipeline (docs/configuration.md). Generated from "
        f"pipeline_constructs/config/ by `{COMMAND}`: do not edit.",
        "type": "object",
        "additionalProperties": False,
        "required": ["tenants"],
        "properties": {key: properties[key] for key in TOP_LEVEL_ORDER},
        # Without a `prefix` pattern in `defaults`, each tenant needs a prefix of its own.
        "if": {
            "required": ["defaults"],
            "properties": {"defaults": {"type": "object", "required": ["prefix"]}},
        },
        "else": {"properties": {"tenants": {"items": {"required": ["prefix"]}}}},
        "$defs": dict(sorted(defs.items())),
    }


def _drop_titles(node: Any) -> None:
    """pydantic's titles repeat the key ('Chunk Size'); the descriptions say what it is."""
    if isinstance(node, dict):
        if isinstance(node.get("title"), str):
            del node["title"]
        for value in node.values():
            _drop_titles(value)
    elif isinstance(node, list):
        for value in node:
            _drop_titles(value)


def _or_null(prop: dict) -> dict:
    """`prop`, or `null` (the loader reads a `null` block as an empty one)."""
    if prop.get("type") == "object":  # a mapping written out here: its errors stay its own
        return {**prop, "type": ["object", "null"]}
    outer = {k: prop[k] for k in ("default", "description") if k in prop}
    inner = {k: v for k, v in prop.items() if k not in outer}
    return {"anyOf": [inner, {"type": "null"}], **outer}


# -- the reference -------------------------------------------------------------------------------


def reference(file_schema: dict[str, Any]) -> str:
    """docs/configuration.md: the intro, then a table per block, as the model nests them."""
    defs = file_schema["$defs"]
    sections: list[Section] = [
        Section("Top level", "", {"properties": file_schema["properties"]}, file_schema["required"])
    ]
    documented: dict[str, str] = {}  # model -> the title of the section that documents it

    def visit(name: str, title: str, path: str) -> None:
        documented[name] = title
        node = defs[name]
        sections.append(Section(title, path, node, _required(name)))
        for key, prop in node["properties"].items():
            for child in _refs(prop):
                if child not in documented:
                    tag = defs[child]["properties"].get("type", {}).get("const")
                    heading = f"`{path}{key}`" + ("" if tag is None else f" with `type: {tag}`")
                    visit(child, heading, f"{path}{key}.")

    visit(TenantConfig.__name__, TENANT_SECTION, "")
    for key in TOP_LEVEL_ORDER:
        for name in _refs(file_schema["properties"][key]):
            if name not in documented:
                path = f"{key}.<name>." if key == "targets" else f"{key}."
                visit(name, f"`{path.rstrip('.')}`", path)
    links = {name: f"[{title}](#{_slug(title)})" for name, title in documented.items()}
    parts = [_intro()]
    for section in sections:
        parts.append(f"## {section.title}\n")
        if "description" in section.node:
            parts.append(_text(section.node["description"]) + "\n")
        parts.append("| option | type | default | description |\n| --- | --- | --- | --- |")
        for key, prop in section.node["properties"].items():
            # `defaults` is a tenant's options, written out in the schema (none of them required).
            kind = (
                f"mapping: {links[TenantConfig.__name__]} or `null`"
                if key == "defaults"
                else _type(prop, links)
            )
            row = [
                f"`{section.path}{key}`",
                kind,
                _default(prop, key in section.required),
                _text(prop.get("description", "")),
            ]
            parts.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


@dataclass(frozen=True)
class Section:
    """One table of the reference: a block of the file, its options' path, required keys."""

    title: str
    path: str
    node: dict
    required: list[str]


def _required(name: str) -> list[str]:
    """The keys model `name` requires once `defaults:` is merged (the schema leaves them out)."""
    model = next(m for m in vars(config).values() if isinstance(m, type) and m.__name__ == name)
    return [key for key, field in model.model_fields.items() if field.is_required()]


def _refs(prop: dict) -> Iterator[str]:
    """The models a property's value is (directly, or as a list item, map value or union member)."""
    if "$ref" in prop:
        yield prop["$ref"].rsplit("/", 1)[1]
    for key in ("anyOf", "oneOf"):
        for member in prop.get(key, []):
            yield from _refs(member)
    for key in ("items", "additionalProperties"):
        if isinstance(prop.get(key), dict):
            yield from _refs(prop[key])


def _type(prop: dict, links: dict[str, str]) -> str:
    """A value's type and allowed values, in words; a block links to its section."""
    if "$ref" in prop:
        return "mapping: " + links[prop["$ref"].rsplit("/", 1)[1]]
    if "oneOf" in prop:
        return "mapping, by `type`: " + ", ".join(links[name] for name in _refs(prop))
    if "anyOf" in prop:
        members = [m for m in prop["anyOf"] if m != {"type": "null"}]
        return " or ".join(_type(m, links) for m in members) + " or `null`"
    if "enum" in prop or "const" in prop:
        return " | ".join(f"`{v}`" for v in prop.get("enum", [prop.get("const")]))
    kind = prop["type"]
    if kind == "array":
        count = f", at least {prop['minItems']}" if "minItems" in prop else ""
        items = "strings" if prop["items"] == {"type": "string"} else _type(prop["items"], links)
        return f"list of {items}{count}"
    if kind == ["object", "null"]:
        return _type({**prop, "type": "object"}, links) + " or `null`"
    if kind == "object":
        return f"mapping of names to {_type(prop['additionalProperties'], links)}"
    return {"integer": "integer", "string": "string", "boolean": "`true` | `false`"}[kind] + _range(prop)


def _range(prop: dict) -> str:
    low = prop.get("minimum")
    high = prop.get("maximum", prop["exclusiveMaximum"] - 1 if "exclusiveMaximum" in prop else None)
    if low is not None and high is not None:
        return f", {low} to {high}"
    if low is not None:
        return f", at least {low}"
    if "maxLength" in prop:
        return f", {prop.get('minLength', 0)} to {prop['maxLength']} characters"
    if "pattern" in prop:
        return f", matching `{prop['pattern']}`"
    return ""


def _default(prop: dict, required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop:
        return "none"
    value = prop["default"]
    if isinstance(value, dict) and value:
        return "each key's"
    return f"`{value}`" if isinstance(value, str) and value else f"`{json.dumps(value)}`"


def _text(description: str) -> str:
    return " ".join(description.split())


def _slug(title: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _problems(text: str) -> str:
    """What `parse_config` reports for an invalid file."""
    try:
        config.parse_config(text)
    except ConfigError as error:
        return str(error)
    raise AssertionError("the example of a bad file is valid")


def _intro() -> str:
    problems = _problems(BAD_EXAMPLE)
    return textwrap.dedent(f"""\
        # Configuration reference: `tenants.yaml`

        <!-- Generated from pipeline_constructs/config/ by `{COMMAND}`: do not edit.
             tests/test_config_docs.py fails when this page or tenants.schema.json drifts. -->

        Every option of the tenants file, with its type, default and allowed values. Each is
        documented once, on its field of the config model (`pipeline_constructs/config/`); this
        page and the JSON Schema `tenants.schema.json` are generated from it. An editor with a
        YAML language server (VS Code's YAML extension, for one) validates and completes the file
        as you type, from its first line:

        ```yaml
        # yaml-language-server: $schema=./tenants.schema.json
        ```

        **`defaults:`** {_text(config.DEFAULTS_DESCRIPTION)}

        **Errors.** `cdk synth` (and every command that reads the file) validates all of it first
        and reports every problem at once, each naming the tenant, the field, the value and the
        fix; an unknown key gets a "did you mean". Some rules span fields or tenants (a prefix
        inside another tenant's, a `chunk_size` whose requests cannot fit the register function's
        time): the schema cannot say them, the loader does. This file

        ```yaml
        {textwrap.indent(BAD_EXAMPLE, "        ").strip()}
        ```

        fails with

        ```
        {textwrap.indent(problems, "        ").strip()}
        ```

        Another file can be used with `cdk synth -c tenants=path/to/tenants.yaml`.
        """)


# -- the files -----------------------------------------------------------------------------------


def limits_section(text: str) -> str:
    """docs/scaling.md with its table of deploy-time limits generated from
    `pipeline_constructs.deploy_limits.LIMITS` (between the two markers)."""
    from pipeline_constructs import deploy_limits

    head, _, rest = text.partition(LIMITS_START)
    _, _, tail = rest.partition(LIMITS_END)
    return f"{head}{LIMITS_START}\n{deploy_limits.reference_table()}{LIMITS_END}{tail}"


def rendered() -> dict[Path, str]:
    """Each generated file's content."""
    file_schema = schema()
    return {
        SCHEMA_FILE: json.dumps(file_schema, indent=2, ensure_ascii=False) + "\n",
        DOC: reference(file_schema),
        SCALING_DOC: limits_section(SCALING_DOC.read_text(encoding="utf-8")),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--write",
        action="store_true",
        help="rewrite tenants.schema.json, docs/configuration.md and the limits of docs/scaling.md",
    )
    mode.add_argument("--check", action="store_true", help="exit 1 when either differs from the model")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        if args.write:
            path.write_text(text, encoding="utf-8")
        elif not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path.relative_to(ROOT).as_posix())
    if stale:
        verb = "differs" if len(stale) == 1 else "differ"
        print(
            f"{' and '.join(stale)} {verb} from pipeline_constructs/config/: run {COMMAND}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
