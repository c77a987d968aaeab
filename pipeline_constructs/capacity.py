"""What a set of tenants consumes of the account quotas that limit this app, per deployment
target (account and Region), and the synth-time check against the limits declared in
``tenants.yaml``.

A stack per tenant keeps every template small whatever the number of tenants; what stops the
app at scale are account quotas (docs/scaling.md). Synthesis has no credentials, so the
limits it checks are the ones declared in ``tenants.yaml`` (AWS defaults unless raised);
`python -m ops preflight` reads the real ones from the account.

Pure model: no CDK import. The per-tenant counts are kept honest by
``tests/test_capacity.py``, which counts the resource types in the synthesized templates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline_constructs import names, routing, uploaders

if TYPE_CHECKING:  # config imports this module: types only
    from pipeline_constructs.config import AccountLimits, AppConfig, RoutingConfig, TenantConfig

#: A tenant's rules on the default bus: the object-created rule and the execution-status rule.
TENANT_RULES = (names.RULE, names.STATUS_RULE)
RULES_PER_TENANT = len(TENANT_RULES)
#: The shared stack's catch-all rule of uploads outside every tenant prefix.
SHARED_RULES = 1
#: The controller's reserved concurrency of 1 (batch size 1: one message of the tenant at a time).
RESERVED_CONCURRENCY_PER_TENANT = 1
#: Lambda keeps this much of the account's concurrency unreserved: a reservation that would
#: leave less is refused at deploy time.
MIN_UNRESERVED_CONCURRENCY = 100
#: Roles of a tenant stack: the controller's, the closer's, the data plane's (split and
#: register) and the workflow's (its three state machines). Four, so that 1,000 tenants fit
#: an account at IAM's ceiling of 5,000 roles.
ROLES_PER_TENANT = 4
#: The completion entry point's own role (only tenants with `completion.wait`).
COMPLETION_ROLES_PER_TENANT = 1
#: The shared stack creates no role (no Lambda, no custom resource).
SHARED_ROLES = 0
STACKS_PER_TENANT = 1
SHARED_STACKS = 1
#: A tenant's state machines: the file workflow, its section and page child workflows.
TENANT_STATE_MACHINES = (names.STATE_MACHINE, names.SECTION_STATE_MACHINE, names.PAGE_STATE_MACHINE)
STATE_MACHINES_PER_TENANT = len(TENANT_STATE_MACHINES)
SHARED_STATE_MACHINES = 0

#: Regions where the default "rules per event bus" is 100, not 300 (AWS docs, EventBridge quotas).
REGIONS_WITH_100_RULES_PER_BUS = frozenset({"af-south-1", "eu-south-1"})
DEFAULT_RULES_PER_BUS = 300


@dataclass(frozen=True)
class Need:
    """How much of a quota a deployment needs, and how that figure is made (shown to users)."""

    count: int
    how: str


def _per_tenant(per_tenant: int, tenants: int, shared: int, extra: str = "") -> Need:
    how = f"{per_tenant} per tenant x {tenants} tenant{'s' if tenants != 1 else ''}"
    if shared:
        how += f" + {shared}{extra}"
    return Need(per_tenant * tenants + shared, how)


def default_bus_rules(tenants: Sequence[TenantConfig], routing_config: RoutingConfig | None = None) -> Need:
    """EventBridge rules this app puts on the default event bus of one target.

    The one place that counts them: with ``routing.shards`` (docs/scaling.md, "Sharded routing") two
    forwarding rules per shard replace the tenants' rules, and past one pattern's worth of
    prefixes the catch-all of unmatched uploads has a rule per catch-all bus (`routing.py`).
    """
    shards, limit = _routing(routing_config)
    catch_all = routing.unmatched_layout([t.prefix for t in tenants], limit=limit).default_bus_rules
    extra = "" if catch_all == SHARED_RULES else " (the catch-all of unmatched uploads)"
    if not shards:
        return _per_tenant(RULES_PER_TENANT, len(tenants), catch_all, extra)
    count = routing.default_bus_rules(tenants, shards, pattern_limit=limit)
    used = (count - catch_all) // routing.FORWARD_RULES_PER_SHARD
    return Need(
        count,
        f"{routing.FORWARD_RULES_PER_SHARD} forwarding rules x {used} shard{'s' if used != 1 else ''} "
        f"with tenants + {catch_all}{extra}",
    )


def _routing(routing_config: RoutingConfig | None) -> tuple[int, int]:
    if routing_config is None:
        return 0, routing.MAX_EVENT_PATTERN_CHARS
    return routing_config.shards, routing_config.event_pattern_chars


def lambda_concurrency(tenants: Sequence[TenantConfig], _routing: RoutingConfig | None = None) -> Need:
    """Account concurrency needed: the controllers' reservations plus the unreserved minimum."""
    reserved = RESERVED_CONCURRENCY_PER_TENANT * len(tenants)
    return Need(
        reserved + MIN_UNRESERVED_CONCURRENCY,
        f"{RESERVED_CONCURRENCY_PER_TENANT} reserved per tenant x {len(tenants)} tenant{'s' if len(tenants) != 1 else ''}"
        f" + {MIN_UNRESERVED_CONCURRENCY} Lambda keeps unreserved",
    )


def iam_roles(tenants: Sequence[TenantConfig], routing_config: RoutingConfig | None = None) -> Need:
    shards, limit = _routing(routing_config)
    forwarding = routing.routing_roles(tenants, shards, pattern_limit=limit)  # the shared stack's one role
    need = _per_tenant(
        ROLES_PER_TENANT,
        len(tenants),
        SHARED_ROLES + forwarding,
        " (the event-bus forwarding role)" if forwarding else "",
    )
    # A tenant with `completion.wait` has one role more: its completion entry point's.
    waiting = sum(1 for tenant in tenants if tenant.completion.wait)
    if not waiting:
        return need
    return Need(
        need.count + waiting * COMPLETION_ROLES_PER_TENANT,
        f"{need.how} + {COMPLETION_ROLES_PER_TENANT} per tenant with completion.wait x {waiting}",
    )


def cloudformation_stacks(tenants: Sequence[TenantConfig], _routing: RoutingConfig | None = None) -> Need:
    return _per_tenant(STACKS_PER_TENANT, len(tenants), SHARED_STACKS, " shared stack")


def state_machines(tenants: Sequence[TenantConfig], _routing: RoutingConfig | None = None) -> Need:
    return _per_tenant(STATE_MACHINES_PER_TENANT, len(tenants), SHARED_STATE_MACHINES)


def upload_access_points(tenants: Sequence[TenantConfig], _routing: RoutingConfig | None = None) -> Need:
    """S3 access points: one per tenant with `uploaders` (`uploaders.py`); the landing bucket's
    policy stays one constant statement whatever their number."""
    count = sum(1 for t in tenants if t.uploaders)
    return Need(count, f"1 per tenant with uploaders x {count}")


def upload_access_point_policy_bytes(
    tenants: Sequence[TenantConfig], _routing: RoutingConfig | None = None
) -> Need:
    """The largest access point policy of the tenants (its size grows with the tenant's own
    uploaders only), counted at the longest access point ARN a deployment can have."""
    sizes = [(uploaders.access_point_policy_bytes(uploaders_of(t)), t) for t in tenants if t.uploaders]
    if not sizes:
        return Need(0, "no tenant with uploaders")
    size, tenant = max(sizes, key=lambda found: found[0])
    count = len(tenant.uploaders)
    return Need(size, f"the largest, tenant '{tenant.id}' with {count} uploader{'s' if count != 1 else ''}")


def shared_key_policy_bytes(tenants: Sequence[TenantConfig], _routing: RoutingConfig | None = None) -> Need:
    """The created shared key's policy (`encryption.kms_key: create`): it names every uploader
    of the target, so that they may encrypt what they put (`SharedResources.grant_upload`)."""
    principals = sum(len(t.uploaders) for t in tenants)
    count = uploaders.shared_key_policy_bytes([uploaders_of(t) for t in tenants])
    return Need(
        count,
        f"{uploaders.SHARED_KEY_OTHER_STATEMENTS_BYTES} bytes of its other statements + "
        f"{principals} uploader principal{'s' if principals != 1 else ''}",
    )


def uploaders_of(tenant: TenantConfig) -> uploaders.TenantUploaders:
    """A tenant's uploaders, as its access point policy names them."""
    return uploaders.TenantUploaders(tenant.id, tenant.prefix, tuple(tenant.uploaders))


#: Limits that are not account quotas one can raise (not in `account_limits`).
FIXED_LIMITS = {
    "upload_access_point_policy_bytes": uploaders.POLICY_LIMIT_BYTES,
    "shared_key_policy_bytes": uploaders.KEY_POLICY_LIMIT_BYTES,
}

_MOVE = "or move tenants to another target (targets:, docs/scaling.md)"


@dataclass(frozen=True)
class Quota:
    """One account quota the app consumes."""

    #: The `account_limits` field that declares it.
    field: str
    title: str
    #: "region": per account and Region; "account": IAM, global to the account.
    scope: str
    #: (the target's tenants, the file's `routing`) -> the need.
    need: Callable[[Sequence[Any], Any], Need]
    fix: str
    #: Whether the quota concerns a target at all (default: every target).
    applies: Callable[[Any], bool] = lambda target: True


QUOTAS: tuple[Quota, ...] = (
    Quota(
        "eventbridge_rules_per_bus",
        "EventBridge rules on the default bus",
        "region",
        default_bus_rules,
        "shard the rules over event buses with routing.shards (docs/scaling.md, Sharded routing), "
        + _MOVE
        + ", or raise the quota and set account_limits.eventbridge_rules_per_bus",
    ),
    Quota(
        "lambda_concurrent_executions",
        "Lambda concurrent executions",
        "region",
        lambda_concurrency,
        "raise the Lambda concurrent executions quota and set account_limits.lambda_concurrent_executions, "
        + _MOVE,
    ),
    Quota(
        "iam_roles",
        "IAM roles",
        "account",
        iam_roles,
        "raise the IAM roles quota (at most 5,000) and set account_limits.iam_roles, or move tenants to a "
        "target in another account (targets:, docs/scaling.md)",
    ),
    Quota(
        "cloudformation_stacks",
        "CloudFormation stacks",
        "region",
        cloudformation_stacks,
        "raise the CloudFormation stack count quota and set account_limits.cloudformation_stacks, " + _MOVE,
    ),
    Quota(
        "state_machines",
        "Step Functions state machines",
        "region",
        state_machines,
        "raise the Step Functions state machines quota and set account_limits.state_machines, " + _MOVE,
    ),
    Quota(
        "s3_access_points",
        "S3 access points",
        "region",
        upload_access_points,
        "raise the S3 access points quota and set account_limits.s3_access_points, " + _MOVE,
    ),
    Quota(
        "upload_access_point_policy_bytes",
        "S3 access point policy size (20 KB, not adjustable)",
        "region",
        upload_access_point_policy_bytes,
        "give the tenant's uploaders fewer principals (one role per uploading system, or another account's "
        "root whose own IAM picks the principals; docs/security.md, Uploaders)",
    ),
    Quota(
        "shared_key_policy_bytes",
        "KMS key policy size of the created shared key (32 KB, not adjustable)",
        "region",
        shared_key_policy_bytes,
        "name fewer uploader principals (another account's root for all of that account's uploaders), "
        "give encryption.kms_key a key ARN whose owner writes its policy, " + _MOVE,
        applies=lambda target: target.creates_shared_key,
    ),
)


@dataclass(frozen=True)
class Target:
    """One deployment target: its tenants and the limits declared for it."""

    #: "" when tenants.yaml declares no `targets:` (one deployment, the CLI's account/Region).
    name: str
    account: str | None
    region: str | None
    limits: AccountLimits
    tenants: tuple[TenantConfig, ...]
    #: The file's `routing:` block (shards: which rules sit on the default bus). None: no shards.
    routing: RoutingConfig | None = None
    #: `encryption.kms_key: create`: the target's shared stack makes a key (its policy names the uploaders).
    creates_shared_key: bool = False

    @property
    def label(self) -> str:
        if not self.name:
            return "the deployment (the account and Region cdk deploy uses)"
        return f"target '{self.name}' ({self.account}/{self.region})"

    def limit(self, field: str) -> int:
        """The declared limit; the rules-per-bus default depends on the Region."""
        if field in FIXED_LIMITS:
            return FIXED_LIMITS[field]
        value = getattr(self.limits, field)
        if value is None and field == "eventbridge_rules_per_bus":
            return default_rules_per_bus(self.region)
        return int(value)


def declared_rules_per_bus(config: AppConfig) -> Callable[[Any, str], int]:
    """The declared "Rules per event bus" quota of a bus in a stack's environment (an object with
    `account` and `region`, `deploy_limits.Env`): `routing.rules_per_bus` for the app's own
    buses, the target's (or the top-level) `account_limits` for the default bus."""

    def quota(env: Any, bus: str) -> int:
        if bus != "default":
            return config.routing.rules_per_bus
        target = next(
            (
                name
                for name, t in config.targets.items()
                if (t.account, t.region) == (env.account, env.region)
            ),
            None,
        )
        limits = config.limits_of(target) if target is not None else config.account_limits
        return limits.eventbridge_rules_per_bus or default_rules_per_bus(env.region)

    return quota


def default_rules_per_bus(region: str | None) -> int:
    return 100 if region in REGIONS_WITH_100_RULES_PER_BUS else DEFAULT_RULES_PER_BUS


def targets(config: AppConfig) -> list[Target]:
    """The deployment targets of a valid config, each with its tenants, in declaration order."""
    creates_key = config.encryption is not None and config.encryption.kms_key == "create"
    if not config.targets:
        return [Target("", None, None, config.account_limits, config.tenants, config.routing, creates_key)]
    return [
        Target(
            name,
            target.account,
            target.region,
            config.limits_of(name),
            tuple(t for t in config.tenants if t.target == name),
            config.routing,
            creates_key,
        )
        for name, target in config.targets.items()
    ]


@dataclass(frozen=True)
class Usage:
    """One quota of one target (or, for IAM, one account): what is needed against the limit."""

    quota: Quota
    where: str
    need: Need
    limit: int

    @property
    def fits(self) -> bool:
        return self.need.count <= self.limit

    def problem(self) -> str:
        return (
            f"{self.where}: {self.quota.title}: need {self.need.count} ({self.need.how}), limit {self.limit}; "
            f"fix: {self.quota.fix}"
        )


def usage(deployment: Sequence[Target]) -> list[Usage]:
    """Every quota of every target; IAM roles once per account (IAM is global to an account),
    with the smallest limit its targets declare."""
    found: list[Usage] = []
    for quota in QUOTAS:
        if quota.scope == "region":
            found += [
                Usage(quota, t.label, quota.need(t.tenants, t.routing), t.limit(quota.field))
                for t in deployment
                if quota.applies(t)
            ]
            continue
        by_account: dict[str | None, list[Target]] = {}
        for t in deployment:
            by_account.setdefault(t.account, []).append(t)
        for group in by_account.values():
            tenants = [tenant for t in group for tenant in t.tenants]
            where = (
                group[0].label
                if len(group) == 1
                else (f"account {group[0].account} (targets {', '.join(repr(t.name) for t in group)})")
            )
            # Each target's shared stack may add its forwarding role: count it per target.
            need = quota.need(tenants, group[0].routing)
            extra = (
                sum(quota.need(t.tenants, t.routing).count for t in group)
                - sum(quota.need(t.tenants, None).count for t in group)
                - (need.count - quota.need(tenants, None).count)
            )
            if extra:
                need = Need(need.count + extra, f"{need.how} + {extra} (the other targets' forwarding roles)")
            found.append(Usage(quota, where, need, min(t.limit(quota.field) for t in group)))
    return found


def problems(config: AppConfig) -> list[str]:
    """One line per quota, per target, that the declared limits cannot hold."""
    return [u.problem() for u in usage(targets(config)) if not u.fits]
