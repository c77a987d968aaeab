"""tenants.schema.json and docs/configuration.md: generated from the config model
(tools/config_docs.py), never edited by hand; `make config-docs` rewrites them."""

from __future__ import annotations

import json
import textwrap
import typing
from typing import Literal

import annotated_types
import jsonschema
import pytest
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from pipeline_constructs.config import AppConfig, ConfigError, TenantConfig, fix_for, parse_config
from pipeline_constructs.config.options import advice_of
from tests.conftest import FIXTURE_TENANTS, ROOT
from tools import config_docs

#: The example of many tenants written with patterns (tests/test_config_patterns.py).
MANY_TENANTS = ROOT / "examples" / "many-tenants.yaml"

#: A file that uses every block and every kind of `sink.auth`, with blocks merged from defaults.
EVERY_OPTION = textwrap.dedent("""\
    defaults:
      sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
      network: {vpc_id: vpc-0123456789abcdef0, subnet_ids: [subnet-0123456789abcdef0],
                security_group_ids: [sg-0123456789abcdef0]}
      alarms: {stall_after_seconds: 600}
      target: prod
    notifications: {emails: [oncall@example.com], subscriptions: [
      {protocol: https, endpoint: 'https://alerts.example.com/sns'},
      {protocol: lambda, endpoint: 'arn:aws:lambda:eu-west-1:111111111111:function:alarm-to-chat'}]}
    routing: {shards: 2, rules_per_bus: 300, event_pattern_chars: 2048}
    account_limits: {iam_roles: 5000}
    targets:
      prod: {account: '111111111111', region: eu-west-1, account_limits: {state_machines: 10000}}
    encryption: {kms_key: create}
    tenants:
      - id: acme
        prefix: acme/
        network: {subnet_ids: [subnet-0fedcba9876543210]}
        sink: {auth: {type: none}}
        uploaders: ['arn:aws:iam::222222222222:role/acme-uploader']
      - id: seq
        prefix: seq/
        shard: 1
        format: jsonl
        on_failure: continue
        duplicate_files: skip
        tracing: true
        chunks_per_page: 2
        pages_per_section: 3
        file_time_limit_seconds: 30000
        network: null
        encryption: {kms_key: create}
        ordering: {by: key_sequence, sequence_pattern: '(?P<seq>\\d+)\\.csv$', first_sequence: 0}
        sink: {auth: {type: bearer, secret: core/seq/token, cache_seconds: 60}}
        completion: {wait: true, timeout_seconds: 1800, heartbeat_seconds: 60,
                     callers: ['arn:aws:iam::111111111111:role/core']}
      - id: signed
        prefix: signed/
        chunk_size: 1000
        sink:
          batch_size: 100
          timeout_seconds: 30
          auth: {type: sigv4, service: lambda, region: eu-west-1,
                 invoke_arn: 'arn:aws:lambda:eu-west-1:111111111111:function:core'}
""")


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(config_docs.SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_problems(validator: jsonschema.Draft202012Validator, text: str) -> list[str]:
    return sorted(error.message for error in validator.iter_errors(yaml.safe_load(text)))


def test_the_schema_and_the_reference_are_what_the_model_generates():
    """GIVEN today's config model WHEN the schema and the reference are generated THEN the files
    in the repository are exactly them (after a change of the model: `make config-docs`)."""
    for path, text in config_docs.rendered().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run {config_docs.COMMAND}"


def test_check_fails_on_a_stale_file_and_names_the_command_that_regenerates_it(tmp_path, monkeypatch, capsys):
    """GIVEN freshly written files WHEN the reference is edited by hand THEN --check exits 1,
    names the file and the command; --write makes it pass again."""
    monkeypatch.setattr(config_docs, "ROOT", tmp_path)
    monkeypatch.setattr(config_docs, "SCHEMA_FILE", tmp_path / "tenants.schema.json")
    monkeypatch.setattr(config_docs, "DOC", tmp_path / "configuration.md")
    assert config_docs.main(["--write"]) == 0
    assert config_docs.main(["--check"]) == 0
    doc = tmp_path / "configuration.md"
    doc.write_text(
        doc.read_text(encoding="utf-8").replace("Seconds one POST may take", "Seconds a POST takes")
    )
    assert config_docs.main(["--check"]) == 1
    assert capsys.readouterr().err == (
        "configuration.md differs from pipeline_constructs/config/: run python -m tools.config_docs --write\n"
    )
    assert config_docs.main(["--write"]) == 0 and config_docs.main(["--check"]) == 0


def test_every_option_is_documented_on_its_field():
    """Every key of the schema, at every level, has its description (from `Field(description=...)`)."""
    schema = config_docs.schema()
    undocumented = [
        f"{where}.{key}"
        for where, node in [("(top level)", schema), *schema["$defs"].items()]
        for key, prop in node["properties"].items()
        if not prop.get("description")
    ]
    assert undocumented == []


def test_the_example_files_are_valid_under_the_schema(validator):
    """GIVEN the example tenants.yaml, the tests' file, the many-tenants example and a file with
    every option (which the loader accepts) THEN the schema accepts each: it refuses nothing the
    loader accepts."""
    parse_config(EVERY_OPTION)
    for text in (
        ROOT.joinpath("tenants.yaml").read_text(),
        FIXTURE_TENANTS.read_text(),
        MANY_TENANTS.read_text(encoding="utf-8"),
        EVERY_OPTION,
    ):
        assert schema_problems(validator, text) == []


def test_the_schema_refuses_what_an_editor_can_flag_as_you_type(validator):
    """GIVEN a misspelled key, a value out of range, a value not allowed, an incomplete
    `sink.auth` and `auth: {type: none}` in defaults THEN the schema refuses each (the loader does
    too, with its own messages)."""
    text = textwrap.dedent("""\
        defaults: {sink: {url: https://core.example.com, auth: {type: none}}, chunk_sise: 10}
        tenants:
          - id: acme
            prefix: acme/
            format: xml
            sink: {timeout_seconds: 90, auth: {type: bearer}}
    """)
    assert schema_problems(validator, text) == [
        "'xml' is not one of ['csv', 'jsonl']",
        "90 is greater than the maximum of 60",
        "Additional properties are not allowed ('chunk_sise' was unexpected)",
        "{'type': 'bearer'} is not valid under any of the given schemas",
        (
            "{'url': 'https://core.example.com', 'auth': {'type': 'none'}} should not be valid under "
            "{'required': ['auth'], 'properties': {'auth': {'required': ['type'], 'properties': {'type': {'const': 'none'}, "
            "'inherited': {'const': False}}}}}"
        ),
    ]
    assert schema_problems(validator, "tenants:\n  - {id: acme}\n") == ["'prefix' is a required property"]


def test_the_schema_accepts_what_the_loader_accepts_of_patterns_and_inherited_none(validator):
    """GIVEN a prefix pattern and `auth: {type: none, inherited: true}` in defaults THEN a tenant
    needs neither a prefix nor an auth of its own, in the schema as in the loader."""
    text = textwrap.dedent("""\
        defaults: {prefix: '{id}/', sink: {url: 'https://core.example.com/{id}', auth: {type: none, inherited: true}}}
        tenants:
          - {id: acme}
    """)
    parse_config(text)
    assert schema_problems(validator, text) == []


def test_tenants_yaml_names_its_schema_on_its_first_line():
    """Editors with a YAML language server validate and complete the file from this line."""
    first = ROOT.joinpath("tenants.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=./tenants.schema.json"


def _options(
    model: type[BaseModel], path: str = "", seen: set[type] | None = None
) -> list[tuple[str, str, FieldInfo]]:
    """(path as the reference spells it, name, field) of every option under ``model``; a block
    used twice (`account_limits`, `encryption`) is documented once, where it comes first."""
    seen = set() if seen is None else seen
    seen.add(model)
    found = []
    for name, info in model.model_fields.items():
        where = f"{path}{name}"
        found.append((where, name, info))
        annotation = info.annotation
        if typing.get_origin(annotation) is dict:
            annotation, where = typing.get_args(annotation)[1], f"{where}.<name>"
        for nested in (annotation, *typing.get_args(annotation)):
            if isinstance(nested, type) and issubclass(nested, BaseModel) and nested not in seen:
                found += _options(nested, "" if nested is TenantConfig else f"{where}.", seen)
    return found


def test_each_option_has_its_reference_entry_and_a_fix_that_says_what_is_valid():
    """GIVEN every option of the model THEN the reference has its row, and a problem with it
    shows a fix: its own text, or one derived from its bounds and choices that names them."""
    reference = config_docs.DOC.read_text(encoding="utf-8")
    options = {(where, name): info for where, name, info in _options(AppConfig)}
    assert len(options) > 70
    for (where, name), info in options.items():
        assert f"| `{where}` |" in reference, f"{where} has no row in docs/configuration.md"
        fix = fix_for(info, name)
        assert fix.startswith(
            ("use ", "list ", "give ", "set ", "add ", "write ", "leave ", "quote ", "with ")
        ), f"{where}: {fix}"
        values = [info.annotation, *typing.get_args(info.annotation)]
        for value in values:
            if typing.get_origin(value) is Literal and advice_of(info).fix is None:
                assert all(f"'{choice}'" in fix for choice in typing.get_args(value)), (where, fix)
        bounds = [m for m in info.metadata if isinstance(m, annotated_types.Ge | annotated_types.Le)]
        if bounds and advice_of(info).fix is None:
            assert all(str(getattr(b, "ge", getattr(b, "le", None))) in fix for b in bounds), (where, fix)


def test_the_schema_carries_the_rules_of_a_single_option(validator):
    """GIVEN values that break a rule of one option (a prefix's trailing '/', an uploader's ARN,
    a Region, an account id, a secret's name, a KMS key, a wildcard in an invoke ARN) THEN the
    schema refuses each, as the loader does, so that an editor flags them as you type."""
    text = textwrap.dedent("""\
        encryption: {kms_key: alias/mine}
        targets: {prod: {account: '1111', region: Ireland}}
        tenants:
          - id: acme
            prefix: acme
            target: prod
            uploaders: ['acme-uploader', 'acme-uploader']
            sink: {url: 'ftp://core.example.com', auth: {type: bearer, secret: 'white space'}}
          - id: beta
            prefix: /beta/
            target: prod
            sink: {url: 'https://core.example.com', auth: {type: sigv4, service: lambda, region: eu-west-1,
                   invoke_arn: 'arn:aws:lambda:eu-west-1:111111111111:function:*'}}
    """)
    problems = schema_problems(validator, text)
    for value in (
        "'alias/mine'",
        "'1111'",
        "'Ireland'",
        "'acme'",
        "'/beta/'",
        "'acme-uploader'",
        "'ftp://core.example.com'",
        "'white space'",
        "function:*'",
    ):
        assert any(problem.startswith(value) or value in problem for problem in problems), (value, problems)
    assert any("non-unique" in problem for problem in problems), problems
    with pytest.raises(ConfigError):
        parse_config(text)
