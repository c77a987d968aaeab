"""Every name the app builds for AWS fits its limit (lambdas/contract/names.py, the table of name
families): the longest instance of each family, the executions of a replayed file resumed many
times at its largest chunk, hashed names that never collide, and the names a synthesized app
really holds, each found in the table."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from pathlib import Path

import pytest

from lambdas import contract
from lambdas.contract import (
    MAX_CHUNK_INDEX,
    MAX_EXECUTION_NAME,
    MAX_FILE_EXECUTION_NAME,
    NAME_FAMILIES,
    PAGE_EXECUTION_NAME_FORMAT,
    SECTION_EXECUTION_NAME_FORMAT,
    execution_name,
)
from ops.reconcile import ObjectVersion, replay_event_id
from pipeline_constructs import budgets, routing
from tests.conftest import synthesize

#: What Step Functions accepts in a name and CloudWatch Logs can log.
LOGGABLE_NAME = re.compile(r"[0-9A-Za-z_-]+")


def longest_replay_event_id() -> str:
    """The event id `ops reconcile --replay` gives a version with the longest key S3 allows."""
    version = ObjectVersion(
        bucket="b" * 63,
        key="k" * 1024,
        version_id="v" * 1024,
        last_modified=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        size=1,
        etag=None,
    )
    return replay_event_id(version)


def children(name: str) -> list[str]:
    """The page and section executions the workflow names after a file's execution, at the
    largest chunk index."""
    return [
        form.format(name, MAX_CHUNK_INDEX)
        for form in (PAGE_EXECUTION_NAME_FORMAT, SECTION_EXECUTION_NAME_FORMAT)
    ]


@pytest.mark.parametrize("family", NAME_FAMILIES, ids=lambda f: f.template)
def test_the_longest_name_of_every_family_fits_its_aws_limit(family: contract.DerivedName) -> None:
    assert len(family.longest()) <= family.limit, family


def test_the_longest_tenant_id_is_what_the_tightest_family_leaves() -> None:
    """The register function's name is the tightest: `<id>-register-chunk` within Lambda's 64."""
    assert contract.MAX_TENANT_ID_LENGTH == 49
    assert len(contract.REGISTER_FUNCTION.longest()) == contract.REGISTER_FUNCTION.limit
    assert contract.tightest_broken("a" * 50) is contract.REGISTER_FUNCTION
    assert contract.tightest_broken("a" * 49) is None


def test_the_largest_chunk_index_covers_every_file_the_workflow_may_run() -> None:
    most = budgets.max_file_chunks(budgets.MAX_ARRAY_RANGE_ITEMS, budgets.MAX_ARRAY_RANGE_ITEMS)
    assert most - 1 <= MAX_CHUNK_INDEX
    assert len(contract.LONGEST_PARTS["index"]) >= len(str(routing.MAX_SHARDS))


def test_a_replayed_file_resumed_999_times_names_every_execution_within_the_limit() -> None:
    """GIVEN a file replayed by `ops reconcile --replay` (the issue: 74 characters before)
    WHEN it is resumed up to 999 times THEN every attempt's name, and its page and section
    executions' names at the largest chunk, fit; its names stay the readable `<id>-r<n>`."""
    event_id = longest_replay_event_id()
    assert len(event_id) <= contract.REPLAY_EVENT_ID.limit
    assert execution_name(event_id) == event_id
    for attempt in range(1000):
        name = execution_name(event_id, attempt)
        assert len(name) <= MAX_FILE_EXECUTION_NAME
        assert all(len(child) <= MAX_EXECUTION_NAME for child in children(name))
    assert execution_name(event_id, 999) == f"{event_id}-r999"


EVENT_IDS = [
    str(uuid.UUID(int=7)),
    "a" * MAX_FILE_EXECUTION_NAME,
    "a" * (MAX_FILE_EXECUTION_NAME + 1),
    "x" * 5000,
    "has space",
    "slash/and#hash",
    'brackets<>{}[]?*"%\\^|~`$&,;:',
    "control\x00\x1f\x7f\x9f",
    "unicode-é-日本",
    "under_score",
    "dot.ted",
    "ends-like-a-resume-r3",
    "",
]


@pytest.mark.parametrize("attempt", [0, 1, 999, 10**6, 10**70])
def test_every_event_id_and_attempt_gets_a_name_step_functions_accepts_and_its_children_fit(
    attempt: int,
) -> None:
    for event_id in EVENT_IDS:
        name = execution_name(event_id, attempt)
        assert LOGGABLE_NAME.fullmatch(name), (event_id, name)
        assert len(name) <= MAX_FILE_EXECUTION_NAME, (event_id, attempt)
        assert all(len(child) <= MAX_EXECUTION_NAME for child in children(name))
        assert execution_name(event_id, attempt) == name  # deterministic


def test_an_eventbridge_event_id_is_its_own_execution_name_and_a_resume_appends_the_attempt() -> None:
    event_id = str(uuid.uuid4())
    assert execution_name(event_id) == event_id
    assert execution_name(event_id, 2) == f"{event_id}-r2"


def test_a_name_that_would_not_fit_is_hashed_not_cut_short() -> None:
    """Two ids that share their first 69 characters would collide if cut short."""
    first, second = "a" * 70 + "1", "a" * 70 + "2"
    assert execution_name(first) != execution_name(second)
    assert execution_name(first).startswith("a" * 20) and "_" in execution_name(first)


def test_distinct_event_ids_and_attempts_never_share_a_name() -> None:
    """Inputs chosen to collide under a naive scheme: an id that looks like another's resume
    (`a-r1` vs `a` resumed once), ids equal once unusable characters are dropped, ids equal in
    their first characters, a hashed name used as an id, attempts too long for a suffix."""
    ids = [
        *EVENT_IDS,
        "a",
        "a-r1",
        "a-r1-r1",
        "ab",
        "a b",
        "a/b",
        "a_b",
        "A",
        "a-",
        "-a",
        "p" * 200 + "1",
        "p" * 200 + "2",
        execution_name("x" * 5000),
        execution_name("a-r1"),
        *(f"reconcile-{n:032x}" for n in range(200)),
        *(str(uuid.UUID(int=n)) for n in range(200)),
    ]
    pairs = [(event_id, attempt) for event_id in dict.fromkeys(ids) for attempt in (0, 1, 2, 10, 10**70)]
    names = {execution_name(event_id, attempt) for event_id, attempt in pairs}
    assert len(names) == len(pairs)


# --- the names a synthesized app holds --------------------------------------------------------

#: Every tenant feature that adds a named resource: the longest id, its own key, the completion
#: entry point, shard buses, and a key-sequence tenant (a standard queue).
TENANTS = """
routing: {shards: 2}
encryption: {kms_key: create}
defaults:
  sink: {url: "https://core.example.com/records", auth: {type: bearer, secret: core/token}}
tenants:
  - id: %s
    prefix: long/
    encryption: {kms_key: create}
    completion: {wait: true, callers: ["arn:aws:iam::111111111111:role/core-system"]}
  - id: seq
    prefix: seq/
    ordering: {by: key_sequence, sequence_pattern: '(?P<seq>\\d+)\\.csv$'}
""" % ("t" * contract.MAX_TENANT_ID_LENGTH)

#: Where a template holds a name, and the kinds of family that name belongs to.
NAME_PROPERTIES = {
    ("AWS::SQS::Queue", "QueueName"): ("FIFO queue name", "queue name", "SQS queue name"),
    ("AWS::Lambda::Function", "FunctionName"): ("Lambda function name",),
    ("AWS::StepFunctions::StateMachine", "StateMachineName"): ("state machine name",),
    ("AWS::StepFunctions::StateMachineAlias", "Name"): ("state machine alias name",),
    ("AWS::Events::Rule", "Name"): ("EventBridge rule name",),
    ("AWS::Events::EventBus", "Name"): ("event bus name",),
    ("AWS::Logs::LogGroup", "LogGroupName"): ("log group name",),
    ("AWS::Logs::MetricFilter", "FilterName"): ("metric filter name",),
    ("AWS::CloudWatch::Alarm", "AlarmName"): ("alarm name",),
    ("AWS::CloudWatch::Dashboard", "DashboardName"): ("dashboard name",),
    ("AWS::KMS::Alias", "AliasName"): ("KMS alias name",),
    ("AWS::SSM::Parameter", "Name"): ("SSM parameter name",),
    ("AWS::S3::Bucket", "BucketName"): ("S3 bucket name",),
}


def _resolved(value: object) -> str:
    """A name with the account and Region at their longest (`Fn::Join` of literals and them)."""
    if isinstance(value, str):
        return value
    assert isinstance(value, dict) and "Fn::Join" in value, value
    separator, parts = value["Fn::Join"]
    pseudo = {
        "AWS::AccountId": contract.LONGEST_PARTS["account"],
        "AWS::Region": contract.LONGEST_PARTS["region"],
    }
    return separator.join(part if isinstance(part, str) else pseudo[part["Ref"]] for part in parts)


def _pattern(family: contract.DerivedName) -> re.Pattern[str]:
    pieces = re.split(r"(\{[a-z_]+\})", family.template)
    return re.compile("".join(".+" if re.fullmatch(r"\{[a-z_]+\}", p) else re.escape(p) for p in pieces))


def test_every_name_a_synthesized_app_gives_aws_is_in_the_table_and_fits(tmp_path: Path) -> None:
    """GIVEN an app with the longest tenant id and every feature that names a resource WHEN it
    is synthesized THEN each name in its templates (and each stack name) matches a family of
    the contract's table and fits that family's limit."""
    (tmp_path / "tenants.yaml").write_text(TENANTS, encoding="utf-8")
    synthesized = synthesize(tmp_path / "tenants.yaml", tmp_path / "cdk.out")
    found = [(("stack name",), stack) for stack in synthesized.templates]
    for template in synthesized.templates.values():
        for resource in template["Resources"].values():
            for (resource_type, prop), kinds in NAME_PROPERTIES.items():
                if resource["Type"] == resource_type and prop in resource.get("Properties", {}):
                    found.append((kinds, _resolved(resource["Properties"][prop])))
    assert len(found) > 60
    unknown = []
    for kinds, name in found:
        families = [f for f in NAME_FAMILIES if f.kind in kinds and _pattern(f).fullmatch(name)]
        if not families:
            unknown.append((kinds, name))
        assert all(len(name) <= f.limit for f in families), (name, families)
    assert unknown == []


#: S3's rules for an access point name: 3 to 50 lowercase letters, digits and hyphens, starting
#: with a letter or digit, not ending with a hyphen or `-s3alias`.
ACCESS_POINT_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,48}[a-z0-9]")


def test_every_tenant_ids_upload_access_point_name_is_valid_and_distinct() -> None:
    """GIVEN tenant ids of every length up to the longest, some differing only past the 31st
    character, and ids ending where a shortened name would cut them at a hyphen WHEN named
    THEN each name is a valid access point name, readable (`<id>-uploads`) while it fits,
    shortened by a digest of the whole id past that, and no two ids share one."""
    ids = ["a" * n for n in range(1, contract.MAX_TENANT_ID_LENGTH + 1)]
    ids += [f"{'t' * 31}-{n:017d}" for n in range(200)]  # 49 characters, the same first 32
    ids += ["a" * 30 + "-" + "b" * 18, "a" * 30 + "-" + "b" * 17 + "c"]
    found = {tenant_id: contract.upload_access_point_name(tenant_id) for tenant_id in ids}
    assert all(ACCESS_POINT_NAME.fullmatch(name) and not name.endswith("-s3alias") for name in found.values())
    assert len(set(found.values())) == len(ids)
    assert found["a" * 42] == "a" * 42 + "-uploads"
    shortened = found["a" * 43]
    assert len(shortened) <= contract.UPLOAD_ACCESS_POINT.limit and shortened.startswith("a" * 31 + "-")
    # a cut that ends on a hyphen is not doubled
    assert "--" not in found["a" * 30 + "-" + "b" * 18]
