"""Hypothesis strategies for tenants files: every option, its boundaries and their
combinations (small files, each tenant drawn), and large files (hundreds to 1,000 tenants,
shards and targets near their limits, tenants made from a few drawn parameters).

A file is drawn `strict` (every value valid on its own, at its bounds included: most such files
reach synthesis) or not (each value may also be one past its bound, or malformed). The
property (tests/test_config_fuzz.py): a file is refused with where, field and fix, or
synthesizes within every deploy-time limit.
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

from lambdas import contract
from pipeline_constructs import budgets, config, routing

ACCOUNTS = ("111111111111", "222222222222")
REGIONS = ("eu-west-1", "us-east-1", "af-south-1", "ap-southeast-5")
PREFIX_CHARACTERS = string.ascii_lowercase + string.digits + "._-"


def pick(draw: st.DrawFn, strict: bool, valid: list[Any], invalid: list[Any] = ()) -> Any:
    """One of `valid`, or (not `strict`) of `valid` and `invalid`."""
    return draw(st.sampled_from(list(valid) if strict else [*valid, *invalid]))


def tenant_id(draw: st.DrawFn, strict: bool, index: int, longest: int) -> str:
    """A valid-looking id, unique by its index, sometimes at (or past) the longest allowed."""
    base = f"t{index}"
    length = pick(draw, strict, [len(base), len(base), 12, longest], [longest + 1])
    padded = base + "-" + "x" * (length - len(base) - 1) if length > len(base) + 1 else base
    return pick(draw, strict, [padded], [base.upper(), f"{base}--a"])


def prefix(draw: st.DrawFn, strict: bool, tenant: str) -> str:
    kind = pick(draw, strict, ["short", "short", "nested", "long", "longest"], ["past", "bad"])
    if kind == "short":
        return f"{tenant}/"
    if kind == "nested":
        return f"in/{tenant}/{draw(st.text(PREFIX_CHARACTERS, min_size=1, max_size=20))}/"
    if kind == "bad":
        return draw(st.sampled_from([tenant, f"/{tenant}/", f"{tenant} x/", f"{tenant}/é/"]))
    length = {"long": 200, "longest": 512, "past": 513}[kind]  # the prefix's own limit is 512
    return (f"{tenant}/" + "p" * length)[: length - 1] + "/"


def sink(draw: st.DrawFn, strict: bool) -> dict[str, Any]:
    longest = config.MAX_SINK_URL_CHARS - len("https://core.example.com/")
    path = pick(draw, strict, ["", "/records", "/" + "u" * longest], ["/" + "u" * (longest + 1)])
    base = pick(
        draw, strict, ["https://core.example.com", "http://localhost:8080"], ["http://core.example.com"]
    )
    made: dict[str, Any] = {"url": base + path}
    auth = draw(st.sampled_from(["none", "none", "bearer", "sigv4"]))
    if auth == "none":
        made["auth"] = {"type": "none"}
    elif auth == "bearer":
        secret = pick(
            draw,
            strict,
            [
                "core/token",
                "s" * 512,
                "arn:aws:secretsmanager:eu-west-1:111111111111:secret:core-token-AbCdEf",
            ],
            ["s" * 513],
        )
        made["auth"] = {
            "type": "bearer",
            "secret": secret,
            "cache_seconds": pick(
                draw, strict, [1, 300, config.MAX_AUTH_CACHE_SECONDS], [config.MAX_AUTH_CACHE_SECONDS + 1]
            ),
        }
    else:
        service = draw(st.sampled_from(["execute-api", "lambda"]))
        arn = (
            "arn:aws:execute-api:eu-west-1:111111111111:abc123/prod/POST/"
            + "r" * draw(st.sampled_from([1, 900]))
            if service == "execute-api"
            else "arn:aws:lambda:eu-west-1:111111111111:function:core"
        )
        made["auth"] = {"type": "sigv4", "service": service, "region": "eu-west-1", "invoke_arn": arn}
    made["timeout_seconds"] = pick(draw, strict, [1, 10, 60], [0, 61])
    made["outage_budget_seconds"] = pick(draw, strict, [1, 3600, 20_000], [40_000, 86_400, 86_401])
    made["batch_size"] = pick(
        draw, strict, [1, 1, 100], [config.MAX_SINK_BATCH_SIZE, config.MAX_SINK_BATCH_SIZE + 1]
    )
    return made


def _caller(index: int, path: int) -> str:
    return f"arn:aws:iam::{ACCOUNTS[index % 2]}:role/{'p/' * path}core-{index}"


def tenant(
    draw: st.DrawFn, strict: bool, index: int, target_names: list[str], longest_id: int
) -> dict[str, Any]:
    """One tenant, its options drawn one by one (each left out often: its default)."""
    made_id = tenant_id(draw, strict, index, longest_id)
    made: dict[str, Any] = {
        "id": made_id,
        "prefix": prefix(draw, strict, made_id),
        "sink": sink(draw, strict),
    }
    batch = made["sink"]["batch_size"]

    def maybe(valid: list[Any], invalid: list[Any] = ()) -> Any:
        return pick(draw, strict, [None, None, *valid], invalid)

    made.update(
        {
            key: value
            for key, value in {
                "format": maybe(["csv", "jsonl"], ["xml"]),
                "chunk_size": maybe(
                    [100, 5000] if batch > 1 else [1, 100, 5000], [0, config.MAX_CHUNK_SIZE + 1]
                ),
                "on_failure": maybe(["halt", "continue"]),
                "duplicate_files": maybe(["process", "skip"]),
                "tracing": maybe([True, False]),
                "file_time_limit_seconds": maybe([30_000, budgets.MAX_FILE_TIME_LIMIT_SECONDS], [59, 60]),
                "chunks_per_page": maybe([1, 2], [budgets.MAX_ARRAY_RANGE_ITEMS + 1]),
                "pages_per_section": maybe(
                    [1, 3, budgets.max_pages_per_section()], [budgets.max_pages_per_section() + 1]
                ),
                "alarms": maybe(
                    [
                        {
                            "queue_age_seconds": 60,
                            "stall_after_seconds": 10**7,
                            "error_logs_threshold": 10**6,
                            "evaluation_periods": 24,
                            "sink_errors_threshold": 1,
                        }
                    ],
                    [{"queue_age_seconds": 59}, {"evaluation_periods": 25}, {"error_logs_threshold": 0}],
                ),
            }.items()
            if value is not None
        }
    )
    if draw(st.integers(0, 4)) == 0:
        made["ordering"] = {
            "by": "key_sequence",
            "first_sequence": pick(draw, strict, [0, 1, 10**9]),
            "sequence_pattern": pick(
                draw,
                strict,
                [
                    r"(?P<seq>\d+)\.csv$",
                    r"(?P<seq>\d+)" + "x" * (config.MAX_SEQUENCE_PATTERN_CHARS - len(r"(?P<seq>\d+)")),
                ],
                [r"(?P<seq>\d+)" + "x" * config.MAX_SEQUENCE_PATTERN_CHARS, "([a-z]+)(\\d+)", "(unclosed"],
            ),
        }
    if draw(st.integers(0, 3)) == 0:
        count = pick(draw, strict, [1, 2, 20, 40], [0, 90])
        made["completion"] = {
            "wait": draw(st.booleans()),
            "callers": [_caller(i, pick(draw, strict, [0, 0, 10], [60])) for i in range(count)],
            "timeout_seconds": pick(draw, strict, [60, 3600], [config.MAX_COMPLETION_TIMEOUT_SECONDS]),
            "heartbeat_seconds": pick(draw, strict, [None, 30], [3600]),
        }
    if draw(st.integers(0, 4)) == 0:
        made["network"] = {
            "vpc_id": "vpc-0123456789abcdef0",
            "subnet_ids": [f"subnet-{i:017x}" for i in range(draw(st.sampled_from([1, 2, 16])))],
            "security_group_ids": [f"sg-{i:017x}" for i in range(draw(st.sampled_from([1, 5])))],
        }
    if draw(st.integers(0, 3)) == 0:
        made["uploaders"] = [
            f"arn:aws:iam::{ACCOUNTS[1]}:role/uploader-{index}-{i}"
            for i in range(draw(st.sampled_from([1, 3, 30])))
        ]
    if draw(st.integers(0, 4)) == 0:
        made["encryption"] = {
            "kms_key": pick(
                draw,
                strict,
                ["create", "arn:aws:kms:eu-west-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab"],
                ["alias/x"],
            )
        }
    if target_names:
        made["target"] = draw(st.sampled_from(target_names))
    return made


def top_level(draw: st.DrawFn, strict: bool) -> dict[str, Any]:
    """Everything but `tenants`: notifications, routing, targets, limits, encryption, qualifier."""
    document: dict[str, Any] = {}
    emails = draw(st.sampled_from([0, 1, 1, 3, 120]))
    if emails:
        document["notifications"] = {"emails": [f"oncall{i}@example.com" for i in range(emails)]}
    if draw(st.integers(0, 2)) == 0:
        document["routing"] = {
            "shards": pick(draw, strict, [0, 1, 4, 40, routing.MAX_SHARDS], [routing.MAX_SHARDS + 1])
        }
    if draw(st.integers(0, 2)) == 0:
        same_account = draw(st.booleans())
        document["targets"] = {
            f"target{i}": {
                "account": ACCOUNTS[0 if same_account else i % 2],
                "region": REGIONS[i % len(REGIONS)],
            }
            for i in range(draw(st.sampled_from([1, 2, 3])))
        }
    if draw(st.integers(0, 3)) == 0:
        document["encryption"] = {"kms_key": "create"}
    if draw(st.integers(0, 3)) == 0:
        document["qualifier"] = pick(
            draw,
            strict,
            ["staging", "q" * contract.MAX_QUALIFIER_LENGTH],
            ["q" * (contract.MAX_QUALIFIER_LENGTH + 1)],
        )
    if draw(st.integers(0, 3)) == 0:
        document["account_limits"] = {
            "lambda_concurrent_executions": pick(draw, strict, [1000], [10]),
            "iam_roles": pick(draw, strict, [1000], [4]),
        }
    return document


@st.composite
def small_files(draw: st.DrawFn) -> dict[str, Any]:
    """A file of 1 to 4 tenants, each option drawn; `strict` two times in three."""
    strict = draw(st.integers(0, 2)) > 0
    document = top_level(draw, strict)
    names = list(document.get("targets", {}))
    qualifier = document.get("qualifier")
    longest = contract.MAX_TENANT_ID_LENGTH - (len(qualifier) + 1 if qualifier else 0)
    document["tenants"] = [
        tenant(draw, strict, index, names, longest) for index in range(draw(st.integers(1, 4)))
    ]
    for made, name in zip(document["tenants"], names, strict=False):  # every target needs a tenant
        made["target"] = name
    return document


@st.composite
def large_files(draw: st.DrawFn) -> dict[str, Any]:
    """Hundreds to 1,000 tenants from a few drawn parameters: their count, id and prefix
    lengths, shards, targets (one account, several Regions), uploaders and options."""
    count = draw(st.sampled_from([150, 400, 600, 1000]))
    id_length = draw(st.sampled_from([5, 20, 36, contract.MAX_TENANT_ID_LENGTH]))
    prefix_depth = draw(st.sampled_from([0, 1, 3]))
    targets = draw(st.sampled_from([1, 1, 2, 3]))
    shards = draw(st.sampled_from([0, 8, 40, 64, 84, routing.MAX_SHARDS]))
    with_uploaders = draw(st.sampled_from([0, 5, 50]))
    options = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "tracing": st.booleans(),
                "duplicate_files": st.just("skip"),
                "format": st.just("jsonl"),
                "completion": st.just({"wait": True, "callers": [_caller(0, 0)]}),
                "encryption": st.just({"kms_key": "create"}),
            },
        )
    )
    document: dict[str, Any] = {
        "defaults": {"sink": {"url": "https://core.example.com/records"}, **options},
        "notifications": {"emails": ["oncall@example.com"]},
        "routing": {"shards": shards},
        "account_limits": {
            "iam_roles": 5000,
            "lambda_concurrent_executions": 10 * count,
            "cloudformation_stacks": 5000,
        },
    }
    names = [f"target{i}" for i in range(targets)]
    if targets > 1:
        document["targets"] = {
            name: {"account": ACCOUNTS[0], "region": REGIONS[i]} for i, name in enumerate(names)
        }
    rows = []
    for index in range(count):
        base = f"t{index:04d}"
        tenant_id = (base + "-" + "x" * id_length)[:id_length] if id_length > len(base) else base
        tenant: dict[str, Any] = {
            "id": tenant_id,
            "prefix": "in/" * prefix_depth + f"{tenant_id}/",
            "sink": {"auth": {"type": "none"}},
        }
        if index < with_uploaders:
            tenant["uploaders"] = [f"arn:aws:iam::{ACCOUNTS[0]}:role/uploader-{index}"]
        if targets > 1:
            tenant["target"] = names[index % targets]
        rows.append(tenant)
    document["tenants"] = rows
    return document
