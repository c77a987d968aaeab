"""One tenant (`tenants[]`, with `defaults` applied), and the rules between its own options."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

from pydantic import ValidationInfo, field_validator, model_validator

from lambdas import contract
from pipeline_constructs import budgets, deploy_limits, names, pace, routing
from pipeline_constructs.budgets import MAX_CHUNK_SIZE
from pipeline_constructs.config.blocks import (
    AlarmConfig,
    CompletionConfig,
    EncryptionConfig,
    NetworkConfig,
    OrderingConfig,
    listed,
)
from pipeline_constructs.config.options import PRINCIPAL_ARN_PATTERN, Model, fix_of, ids, option
from pipeline_constructs.config.sink import DEFAULT_OUTAGE_BUDGET_SECONDS, SinkConfig

TENANT_ID_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
#: The register function's memory by default: a seventh of a vCPU.
REGISTER_MEMORY_MB = 256
#: A folder-like key prefix: it ends with `/` and does not start with one.
PREFIX_PATTERN = r"^[^/].*/$"


class Rule(NamedTuple):
    """A problem between a tenant's options: the field it is reported on, its value, what is
    wrong and the fix."""

    field: str
    value: object
    problem: str
    fix: str


class TenantConfig(Model):
    """One tenant, with the defaults already applied. Every tenant gets its own stack
    (`OrderedIngest-Tenant-<id>`): EventBridge rules, queue, controller, workflow and alarms."""

    id: str = option(
        pattern=TENANT_ID_PATTERN,
        mismatch=(
            "has characters other than lowercase letters, digits and single hyphens, or does not start with a letter"
        ),
        fix=(
            "use lowercase letters, digits and single hyphens, starting with a letter "
            f"(at most {names.MAX_TENANT_ID_LENGTH} characters)"
        ),
        description=(
            "The tenant's name, unique: it names its stack and every resource of its pipeline. Lowercase letters, "
            f"digits and single hyphens, starting with a letter, at most {names.MAX_TENANT_ID_LENGTH} characters so "
            "that every derived name fits (`<id>-register-chunk` is a 64-character Lambda function name)."
        ),
    )
    prefix: str = option(
        min_length=1,
        max_length=512,
        pattern=PREFIX_PATTERN,
        mismatch=("must be a folder-like key prefix that ends with '/' and does not start with '/'"),
        fix="use a key prefix such as 'acme/' that ends with '/'",
        description=(
            "Key prefix of the tenant's files in the landing bucket: ends with `/`, does not start with `/`, is "
            "not inside another tenant's prefix. Only letters, digits, `/`, `.`, `_` and `-`: S3 URL-encodes every "
            "other character in the keys of its events, so the tenant's rule would never match. Required, in the "
            "tenant or in `defaults` as a pattern with `{id}` (e.g. `'{id}/'`, `'incoming/{id}/'`): the prefixes "
            "a pattern makes never overlap each other."
        ),
    )
    format: contract.FileFormat = option(
        "csv",
        notes={"csv": "with a header row"},
        description=(
            "`csv`: comma-separated values, the first row is the header; `jsonl`: one JSON object per line."
        ),
    )
    chunk_size: int | None = option(
        None,
        ge=1,
        le=MAX_CHUNK_SIZE,
        fix=(
            f"leave it out (computed from the sink settings), or use a whole number from 1 to {MAX_CHUNK_SIZE} "
            "within the register budget of sink.timeout_seconds"
        ),
        description=(
            "Records per chunk, the unit the register function sends and the ledger records; a failing chunk stops "
            "every later one. Default (null): computed from the tenant's `sink` settings, the smallest of 100, 200, "
            f"500, 1,000, ... whose fixed costs (its register task, reads and ledger writes, its share of a page "
            f"execution) stay within {pace.FIXED_COST_SHARE:.0%} of its sending time when the core system answers a "
            f'POST in {pace.ANSWER.seconds * 1000:.0f} ms (docs/benchmarks.md, "Cost model"): '
            f"{pace.default_chunk_size(10, DEFAULT_OUTAGE_BUDGET_SECONDS, 1):,} at the default sink settings, "
            f"{pace.default_chunk_size(10, DEFAULT_OUTAGE_BUDGET_SECONDS, 100):,} with `sink.batch_size` 100; "
            "`make synth` prints each tenant's. A value written here wins. At most "
            f"{MAX_CHUNK_SIZE}, and at most what the register function's budget allows for "
            "`sink.timeout_seconds`, `sink.batch_size` and `sink.outage_budget_seconds` (a chunk's invocations at the "
            "slowest answer, with a whole outage, fit one page execution's history): with one record per POST and the "
            f"default 1 h outage budget {budgets.max_chunk_size(60, DEFAULT_OUTAGE_BUDGET_SECONDS)} at 60 s, "
            f"{budgets.max_chunk_size(10, DEFAULT_OUTAGE_BUDGET_SECONDS)} at the default 10 s."
        ),
    )
    register_memory_mb: int = option(
        REGISTER_MEMORY_MB,
        ge=128,
        le=10240,
        description=(
            "Memory of the register function in MB, and with it its share of a vCPU (Lambda gives one vCPU at "
            "1,769 MB, in proportion below: https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html). "
            "The function's CPU per request sets the pace for a core system that answers faster than it can send: "
            'the answer time below which that happens at the default is in docs/benchmarks.md ("Register '
            'throughput"); more memory moves it down and costs in proportion (docs/cost.md).'
        ),
    )
    sink: SinkConfig = option(
        fix=(
            "set sink.url and sink.auth in the tenant or in defaults ('auth: {type: none}' only in the tenant)"
        ),
        description="Where the tenant's records go (required, in the tenant or in `defaults`).",
    )
    alarms: AlarmConfig = option(AlarmConfig(), description="When the tenant's alarms page.")
    on_failure: contract.OnFailure = option(
        "halt",
        notes={"halt": "a failed file stops the tenant until `ops resume` or `ops skip`"},
        description=(
            "`halt`: after a failed, timed-out or aborted file nothing of the tenant starts until "
            "`python -m ops resume` or `ops skip`; `continue`: the next file starts (the original article's "
            "behaviour)."
        ),
    )
    ordering: OrderingConfig = option(
        OrderingConfig(), description="How the tenant's files are put in order."
    )
    file_time_limit_seconds: int | None = option(
        None,
        ge=60,
        le=budgets.MAX_FILE_TIME_LIMIT_SECONDS,
        fix=(
            "use a whole number of seconds, longer than sink.outage_budget_seconds (default: the outage budget plus "
            "6 hours)"
        ),
        description=(
            "Seconds one execution (one attempt at a file) may run: the workflow's `TimeoutSeconds`. A longer "
            "one times out and halts the tenant like a failure (`ops resume` gives the file a fresh limit). More "
            "than `sink.outage_budget_seconds`, at most a year. Default (null): `sink.outage_budget_seconds` "
            "plus 6 hours."
        ),
    )
    tracing: bool = option(
        False,
        notes={True: "X-Ray traces of the state machines and functions"},
        description=(
            "`true`: X-Ray tracing of the tenant's state machines and functions, e.g. while "
            "investigating latency. Off by default: X-Ray charges per trace recorded (a file of 10,000 chunks "
            "records about 10,000), and the execution history, the ledger and `ops status` "
            "already show where a file is."
        ),
    )
    duplicate_files: contract.DuplicateFiles = option(
        "process",
        notes={"process": "a byte-identical re-upload is processed again", "skip": "recorded as a duplicate"},
        description=(
            "`process`: a byte-identical re-upload is processed again (its idempotency keys are new); `skip`: "
            "split hashes the bytes (SHA-256) as it streams them, and a file with the bytes of a file of the "
            "tenant that succeeded is sent nowhere and closes as `DUPLICATE` of it."
        ),
    )
    chunks_per_page: int | None = option(
        None,
        ge=1,
        le=budgets.MAX_ARRAY_RANGE_ITEMS,
        fix=("leave it out (the default is the most a page's history allows), or use a smaller whole number"),
        description=(
            "Chunks per page execution (the child workflow that registers a page of a file's chunks). Default "
            "(null): the most that keep a page's history within budget "
            f"({budgets.max_chunks_per_page(100, 10, DEFAULT_OUTAGE_BUDGET_SECONDS)} at the default sink "
            "settings); more is refused. Smaller values only make more, shorter pages (the tests use 2)."
        ),
    )
    shard: int | None = option(
        None,
        ge=0,
        lt=routing.MAX_SHARDS,
        fix=(
            f"use a shard number from 0 to routing.shards - 1 (at most {routing.MAX_SHARDS - 1}), "
            "or leave it out (sha256 of the id picks one)"
        ),
        description=(
            "With `routing.shards` only, not in `defaults`: the shard whose event bus holds the tenant's rules, "
            "from 0 to `routing.shards` - 1 (a pin: set it to move a tenant out of a full shard). Default (null): "
            "sha256 of `id` modulo `routing.shards`."
        ),
    )
    target: str | None = option(
        None,
        fix="use the name of a target declared under 'targets:'",
        description=(
            "The deployment target (a name under `targets:`) the tenant is deployed to: required, in the tenant or "
            "in `defaults`, when targets are declared; not allowed without."
        ),
    )
    pages_per_section: int | None = option(
        None,
        ge=1,
        le=budgets.max_pages_per_section(),
        fix=(
            "leave it out (the default is the most a section's history allows), "
            f"or use a whole number from 1 to {budgets.max_pages_per_section()}"
        ),
        description=(
            "Pages per section execution (a file of more pages runs them in sections). Default (null): the most a "
            f"section's history holds ({budgets.max_pages_per_section()}); smaller values only make more, shorter "
            "sections."
        ),
    )
    completion: CompletionConfig = option(
        CompletionConfig(), description="The core system's completion callback."
    )
    network: NetworkConfig | None = option(
        None,
        fix=(
            "give network: {vpc_id: vpc-..., subnet_ids: [subnet-...], security_group_ids: [sg-...]}, "
            "or leave it out (no VPC)"
        ),
        description=(
            "The VPC the register function runs in, for a core system reachable only from inside it "
            '(docs/core-system.md, "Private core systems"). Default (null): no VPC; `network: null` in a tenant '
            "turns off a `network` of `defaults`."
        ),
    )
    uploaders: list[str] = option(
        default_factory=list,
        schema=listed(PRINCIPAL_ARN_PATTERN),
        fix=(
            "list the IAM role or user ARNs of the tenant's uploading system, e.g. "
            "['arn:aws:iam::111111111111:role/acme-uploader'], or an account root ARN "
            "'arn:aws:iam::222222222222:root' for another account"
        ),
        description=(
            "Per tenant only (not in `defaults`): IAM role or user ARNs, or an account root ARN "
            "(`arn:aws:iam::<12 digits>:root`: another account, which then decides which of its principals may "
            "upload), that may put files under this tenant's prefix and nowhere else, through the tenant's own S3 "
            "access point (docs/security.md, Uploaders). "
            "A role or user uploads for one tenant; the root of the tenant's own target account is refused."
        ),
    )
    encryption: EncryptionConfig | None = option(
        None,
        fix=(
            "write 'encryption: {kms_key: create}' or 'encryption: {kms_key: <key ARN>}', or leave it out "
            "(AWS-managed encryption)"
        ),
        description=(
            "The tenant's customer-managed key: its queue and intake dead-letter queue, its log groups and its "
            "functions' environment variables; `create` makes it in the tenant's stack "
            "(alias `alias/ordered-ingest/<id>`). Default (null): SQS-managed queues, CloudWatch Logs' own "
            "encryption, Lambda's AWS managed key; `encryption: null` in a tenant turns off a key of `defaults`."
        ),
    )

    @property
    def records_per_chunk(self) -> int:
        """`chunk_size`, or its default computed from the sink settings (`pace.default_chunk_size`)."""
        if self.chunk_size is not None:
            return self.chunk_size
        return pace.default_chunk_size(
            self.sink.timeout_seconds,
            self.sink.outage_budget_seconds,
            self.sink.batch_size,
            self.chunks_per_page,
        )

    @property
    def file_time_limit(self) -> int:
        """`file_time_limit_seconds`, or its default derived from the outage budget."""
        if self.file_time_limit_seconds is not None:
            return self.file_time_limit_seconds
        return budgets.default_file_time_limit_seconds(self.sink.outage_budget_seconds)

    @field_validator("uploaders")
    @classmethod
    def _uploader_arns(cls, uploaders: list[str]) -> list[str]:
        return ids(
            uploaders, PRINCIPAL_ARN_PATTERN, "an IAM role, user or account root ARN", item="a principal"
        )

    @field_validator("id")
    @classmethod
    def _id_fits_every_derived_name(cls, tenant_id: str) -> str:
        if names.RESERVED_ID_PART in f"-{tenant_id}-":
            # 'a' would own the IAM wildcard `execution:a-file-ingest-page*`, which names the
            # executions of tenant 'a-file-ingest-page-b' too.
            raise ValueError(
                f"contains '{names.RESERVED_ID_PART.strip('-')}', the part every tenant's state "
                "machine names share (another tenant's permissions could then cover this one's)"
            )
        broken = names.tightest_broken(tenant_id)
        if broken is not None:
            derived = broken.longest(tenant_id, qualifier="")
            raise ValueError(
                f"is {len(tenant_id)} characters, so the derived {broken.kind} '{derived}' is "
                f"{len(derived)} characters (limit {broken.limit})"
            )
        return tenant_id

    @model_validator(mode="after")
    def _options_agree(self, info: ValidationInfo) -> TenantConfig:
        """The rules between the tenant's options. The loader passes a list as the validation
        context and gets every broken rule in it (the tenant still validates, so the checks
        across tenants see it); validated alone, the first broken rule is the error."""
        broken = list(rules(self))
        if broken and isinstance(info.context, list):
            info.context.extend(broken)
        elif broken:
            raise ValueError(f"{broken[0].field} = {broken[0].value!r}: {broken[0].problem}; {broken[0].fix}")
        return self


def rules(tenant: TenantConfig) -> Iterator[Rule]:
    """Every broken rule between the tenant's options."""
    for rule in (
        _batch_within_chunk,
        _register_budget,
        _file_time_limit,
        _page_budget,
        _completion,
        _completion_policy,
    ):
        yield from rule(tenant)


def _batch_within_chunk(tenant: TenantConfig) -> Iterator[Rule]:
    """A batch is cut inside one chunk: a batch_size above chunk_size would never fill."""
    if tenant.sink.batch_size > tenant.records_per_chunk:
        yield Rule(
            "sink.batch_size",
            tenant.sink.batch_size,
            f"is larger than chunk_size {tenant.records_per_chunk}: a batch never spans two chunks",
            f"use a sink.batch_size of at most {tenant.records_per_chunk}, or a chunk_size of at least "
            f"{tenant.sink.batch_size}",
        )


def _register_budget(tenant: TenantConfig) -> Iterator[Rule]:
    """A chunk's invocations at the slowest answer (`ceil(chunk_size / sink.batch_size)` requests
    x `sink.timeout_seconds`), with a whole outage, must fit one page execution's history (an
    outage budget that alone does not fit is `_page_budget`'s)."""
    size, timeout, batch = tenant.records_per_chunk, tenant.sink.timeout_seconds, tenant.sink.batch_size
    outage = tenant.sink.outage_budget_seconds
    most = budgets.max_register_invocations_per_chunk(outage)
    invocations = budgets.register_invocations_per_chunk(size, timeout, batch)
    if 1 <= most < invocations:
        requests = budgets.requests_per_chunk(size, batch)
        per = "" if batch == 1 else f"in {requests} batches of sink.batch_size {batch} "
        yield Rule(
            "chunk_size",
            size,
            f"{per}x sink.timeout_seconds {timeout} = {requests * timeout} s for a chunk at the slowest answer, "
            f"{invocations} invocations of the register function's {budgets.REGISTER_MAX_TIMEOUT_SECONDS} s "
            f"limit: with a whole outage of sink.outage_budget_seconds {outage}, a page execution's history "
            f"holds at most {most} for one chunk",
            f"use a chunk_size of at most {budgets.max_chunk_size(timeout, outage, batch)} at these settings, "
            "or a lower sink.timeout_seconds" + ("" if batch == 1 else ", or a larger sink.batch_size"),
        )


def _file_time_limit(tenant: TenantConfig) -> Iterator[Rule]:
    """A file must be allowed to wait out a whole core-system outage before it times out."""
    limit, budget = tenant.file_time_limit_seconds, tenant.sink.outage_budget_seconds
    if limit is not None and limit <= budget:
        yield Rule(
            "file_time_limit_seconds",
            limit,
            f"is not longer than sink.outage_budget_seconds {budget}: an outage would time the file out "
            "before its budget ends",
            f"use more than {budget} seconds, or leave it out (default: the outage budget plus 6 hours)",
        )


def _page_budget(tenant: TenantConfig) -> Iterator[Rule]:
    """A page execution must hold at least one chunk (and `chunks_per_page` at most what fits)
    within the history budget: a chunk may wait out one whole outage in its page."""
    size, timeout, outage = (
        tenant.records_per_chunk,
        tenant.sink.timeout_seconds,
        tenant.sink.outage_budget_seconds,
    )
    most = budgets.max_chunks_per_page(size, timeout, outage, tenant.sink.batch_size)
    if budgets.max_register_invocations_per_chunk(outage) < 1:
        yield Rule(
            "outage_budget_seconds",
            outage,
            "is too long for one page execution's history: waiting out such an outage in one chunk "
            f"could take more than {budgets.HISTORY_EVENT_BUDGET} history events",
            "use a shorter sink.outage_budget_seconds (about 12 hours at most)",
        )
    elif most >= 1 and tenant.chunks_per_page is not None and tenant.chunks_per_page > most:
        yield Rule(
            "chunks_per_page",
            tenant.chunks_per_page,
            f"is more than the {most} chunks a page's history holds at these settings",
            f"use at most {most}, or leave it out",
        )


def _completion(tenant: TenantConfig) -> Iterator[Rule]:
    """A completion wait must fit in the file's time limit, a heartbeat inside the wait (Step
    Functions refuses HeartbeatSeconds not below TimeoutSeconds), and someone must be able to
    answer it."""
    completion = tenant.completion
    if not completion.wait:
        return
    if completion.timeout_seconds >= tenant.file_time_limit:
        yield Rule(
            "completion.timeout_seconds",
            completion.timeout_seconds,
            f"is not shorter than the file's time limit ({tenant.file_time_limit} s): the execution "
            "would time out before the completion wait does",
            "use a shorter completion.timeout_seconds, or a longer file_time_limit_seconds",
        )
    if (
        completion.heartbeat_seconds is not None
        and completion.heartbeat_seconds >= completion.timeout_seconds
    ):
        yield Rule(
            "completion.heartbeat_seconds",
            completion.heartbeat_seconds,
            f"is not shorter than completion.timeout_seconds ({completion.timeout_seconds})",
            fix_of(CompletionConfig, "heartbeat_seconds"),
        )
    if not completion.callers:
        yield Rule(
            "completion.callers",
            [],
            "is empty: nobody could confirm a file, so every file would time out",
            fix_of(CompletionConfig, "callers"),
        )


def _completion_policy(tenant: TenantConfig) -> Iterator[Rule]:
    """Each caller is a statement of the completion function's resource policy, which Lambda
    keeps within 20 KB (`deploy_limits`)."""
    callers = tenant.completion.callers
    if not tenant.completion.wait:
        return
    limit = deploy_limits.LIMITS["lambda-resource-policy"].value
    budget = limit - deploy_limits.POLICY_ENVELOPE_BYTES
    totals = list(itertools.accumulate(deploy_limits.permission_statement_bytes(arn) for arn in callers))
    if not totals or totals[-1] <= budget:
        return
    fitting = sum(total <= budget for total in totals)
    yield Rule(
        "completion.callers",
        callers,
        f"makes the completion function's resource policy {totals[-1] + deploy_limits.POLICY_ENVELOPE_BYTES:,} "
        f"bytes, over Lambda's {limit:,} (one statement per principal: the first {fitting} fit)",
        "list fewer principals: one role that the core system's callers assume, or the account root "
        "'arn:aws:iam::<account>:root' of the core system's account, which then decides who may call",
    )
