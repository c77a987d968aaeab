"""Sharded EventBridge routing: which bus holds which rule, as pure functions.

Without ``routing.shards`` every tenant puts two rules on the account's default event bus
(object-created and execution-status), so the default quota of 300 rules per bus stops the
app at 149 tenants. With ``routing.shards: N`` the shared stack creates N shard event buses;
the default bus holds two forwarding rules per shard (the shard's tenants' key prefixes; the
shard's state machines), and each tenant's two rules move to its shard's bus.

A tenant's shard is ``sha256(tenant id) mod N`` unless the tenant pins one (``shard:``): it
depends on nothing but the tenant's own id, so adding or removing a tenant never moves another.

Every pattern this module builds is measured against EventBridge's event pattern size limit
(2,048 characters, https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html)
with the bucket name at its longest, so synthesis refuses what a deployment would refuse.

No CDK import: the capacity model and the tests use it without synthesizing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lambdas import contract
from pipeline_constructs import names

#: EventBridge's default "Rules per event bus" quota (us-east-1 and most Regions; 100 in some).
#: https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html
RULES_PER_BUS = 300
#: "Event pattern size": 2,048 characters (same page).
MAX_EVENT_PATTERN_CHARS = 2048
#: "Event buses": 100 per account and Region (same page); the app may use all but one.
MAX_SHARDS = 99
#: Rules each tenant puts on the bus that holds its rules (object-created, execution status).
RULES_PER_TENANT = 2
#: Forwarding rules per shard on the default bus (object-created, execution status).
FORWARD_RULES_PER_SHARD = 2
#: The landing bucket's name is a token at synthesis; measure patterns with S3's longest name.
LONGEST_BUCKET_NAME = "b" * 63
#: The characters of a key as S3 writes it into an event: those it never encodes, '+' (a
#: space) and '%' (any other character, as %XX). The tests draw keys from it.
KEY_ALPHABET = "".join(sorted(contract.S3_EVENT_KEY_SAFE_CHARACTERS)) + "%+"
STATE_MACHINE_SUFFIX = names.STATE_MACHINE.template.removeprefix("{id}")


class RoutedTenant(Protocol):
    """What routing needs of a tenant (``config.TenantConfig`` has it)."""

    @property
    def id(self) -> str: ...

    @property
    def prefix(self) -> str: ...

    @property
    def shard(self) -> int | None: ...


def shard_of(tenant_id: str, shards: int, pinned: int | None = None) -> int:
    """The tenant's shard: its pin, else the first 8 bytes of sha256(id) modulo ``shards``.

    A cryptographic hash, not Python's ``hash()`` (salted per process): the same id gives the
    same shard on every machine and every synthesis."""
    if pinned is not None:
        return pinned
    digest = hashlib.sha256(tenant_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def assign(tenants: Iterable[RoutedTenant], shards: int) -> dict[int, list[RoutedTenant]]:
    """Every shard (0..shards-1, empty ones included) with its tenants, in declaration order."""
    by_shard: dict[int, list[RoutedTenant]] = {k: [] for k in range(shards)}
    for tenant in tenants:
        by_shard.setdefault(shard_of(tenant.id, shards, tenant.shard), []).append(tenant)
    return by_shard


# -- patterns ---------------------------------------------------------------------------------


def object_created_pattern(bucket_name: str, prefixes: Sequence[str]) -> dict[str, Any]:
    """S3 "Object Created" in ``bucket_name`` under any of ``prefixes`` (a shard's forwarding rule)."""
    return {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {
            "bucket": {"name": [bucket_name]},
            "object": {"key": [{"prefix": p} for p in prefixes]},
        },
    }


def own_workflow_arns(state_machine_arn: str) -> list[Any]:
    """The ``stateMachineArn`` values of a tenant's status rule: its file workflow's ARN, bare
    or qualified by a version or alias (``<arn>:live``, ``<arn>:3``).

    AWS documents the field for `DescribeExecution`, where it is the bare ARN of an execution
    started through an alias, not for the event: both shapes match. The ':' keeps the prefix
    to this one state machine: a name holds no ':', another tenant's workflow ARN is
    ``...:<other id>-file-ingest-workflow`` (an id cannot contain ``-file-ingest-``, so it
    cannot begin with this tenant's name), and the page and section machines are
    ``...-file-ingest-page`` and ``...-file-ingest-section``."""
    return [state_machine_arn, {"prefix": f"{state_machine_arn}:"}]


#: Any tenant's file workflow ARN qualified by the alias files start through (one matcher for a
#: shard's forwarding rule, see `status_pattern`). A suffix, not a wildcard: EventBridge allows
#: 30 rules with a wildcard filter per bus, and each shard has a forwarding rule.
QUALIFIED_WORKFLOW_ARN = {"suffix": f"{STATE_MACHINE_SUFFIX}:{contract.WORKFLOW_ALIAS.render()}"}


def status_pattern(tenant_ids: Sequence[str]) -> dict[str, Any]:
    """Status changes of the tenants' file workflows (a shard's forwarding rule).

    A bare ARN by its suffix ``:<id>-file-ingest-workflow`` (':' then the state machine's
    name, which holds no ':'), about half the characters of the full ARN: the default bus
    only carries this account's and Region's service events. An ARN qualified by the `live`
    alias (see `own_workflow_arns`) by one suffix for every tenant, `QUALIFIED_WORKFLOW_ARN`:
    such an event goes to every shard bus, where only its tenant's rule matches it. Per tenant
    it would take the full ARN as a prefix (twice the characters: half the tenants per shard).
    An execution started by hand through a version ARN (``...:3``) is not forwarded: the gate
    starts every file through the alias. The tenant's own rule on the shard bus matches its ARN
    exactly, and the statuses."""
    return {
        "source": ["aws.states"],
        "detail-type": ["Step Functions Execution Status Change"],
        "detail": {
            "stateMachineArn": [
                *({"suffix": f":{names.STATE_MACHINE.render(t)}"} for t in tenant_ids),
                dict(QUALIFIED_WORKFLOW_ARN),
            ]
        },
    }


def unmatched_pattern(bucket_name: str, excluded_prefixes: Sequence[str]) -> dict[str, Any]:
    """S3 "Object Created" in ``bucket_name`` whose key starts with none of ``excluded_prefixes``."""
    excluded: Any = list(excluded_prefixes) if len(excluded_prefixes) > 1 else excluded_prefixes[0]
    return {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {
            "bucket": {"name": [bucket_name]},
            "object": {"key": [{"anything-but": {"prefix": excluded}}]},
        },
    }


def pattern_size(pattern: Mapping[str, Any]) -> int:
    """Characters of ``pattern`` as JSON with spaces after ',' and ':' (the longer of the usual
    serializations: how CloudFormation passes it on is not documented)."""
    return len(json.dumps(pattern))


# -- the catch-all of uploads outside every tenant prefix -------------------------------------


@dataclass(frozen=True)
class UnmatchedGroup:
    """One catch-all bus: the default bus forwards uploads under ``roots`` to it; its one rule
    logs those that are under none of ``prefixes`` (the tenant prefixes under the roots)."""

    index: int
    roots: tuple[str, ...]
    prefixes: tuple[str, ...]


@dataclass(frozen=True)
class UnmatchedLayout:
    """The catch-all of uploads outside every tenant prefix.

    ``excluded``: the ``anything-but`` prefix list of the one rule on the default bus: every
    tenant prefix when they fit one pattern (``groups`` empty: today's rule), otherwise every
    root of the groups. ``groups``: for each catch-all bus, the key prefixes forwarded to it and
    the tenant prefixes its rule excludes.

    The roots are prefix-free and every tenant prefix lies under exactly one root, so an upload
    is logged exactly once when it is under no tenant prefix (by the default bus's rule when it
    is under no root, else by its root's group), and never when it is under one."""

    excluded: tuple[str, ...]
    groups: tuple[UnmatchedGroup, ...] = ()

    @property
    def default_bus_rules(self) -> int:
        return 1 + len(self.groups)


class UnmatchedDoesNotFit(ValueError):
    """Even the roots of the catch-all do not fit one pattern."""


def unmatched_layout(prefixes: Sequence[str], *, limit: int = MAX_EVENT_PATTERN_CHARS) -> UnmatchedLayout:
    """The catch-all for ``prefixes`` within ``limit`` characters per pattern.

    One rule excluding every prefix when they fit one pattern. Otherwise the key space is cut
    into subtrees (roots): from the empty key prefix, a subtree whose prefixes fit one
    ``anything-but`` pattern is a root, otherwise it is cut by its next character (a subtree
    with no prefix needs no root). Consecutive roots share a catch-all bus while both of its
    patterns fit, and the roots are then what the default bus's rule must exclude: the same cut
    again, one level up, until they fit one pattern. Every level's buses are fed by the default
    bus (EventBridge forwards an event only once)."""
    ordered = tuple(sorted(set(prefixes)))
    if _unmatched_size(ordered) <= limit:
        return UnmatchedLayout(excluded=ordered)
    roots = _roots("", list(ordered), limit)
    if len(roots) >= len(ordered):
        raise UnmatchedDoesNotFit(
            f"the {len(ordered)} prefixes have no common folders to group them by, and excluding them "
            f"takes {_unmatched_size(ordered)} characters (limit {limit})"
        )
    groups: list[list[tuple[str, list[str]]]] = []
    current: list[tuple[str, list[str]]] = []
    for root in roots:
        if not current or _group_fits([*current, root], limit):
            current.append(root)
            continue
        groups.append(current)
        current = [root]
    groups.append(current)
    upper = unmatched_layout([r for r, _ in roots], limit=limit)
    own = tuple(_group(len(upper.groups) + n, members) for n, members in enumerate(groups))
    return UnmatchedLayout(excluded=upper.excluded, groups=upper.groups + own)


def _roots(path: str, prefixes: list[str], limit: int) -> list[tuple[str, list[str]]]:
    if path and _unmatched_size(prefixes) <= limit:
        return [(path, prefixes)]
    if len(prefixes) == 1:
        return [(prefixes[0], prefixes)]
    under: dict[str, list[str]] = {}
    for prefix in prefixes:
        under.setdefault(prefix[: len(path) + 1], []).append(prefix)
    roots: list[tuple[str, list[str]]] = []
    for child in sorted(under):
        members = under[child]
        roots.extend([(child, members)] if members == [child] else _roots(child, members, limit))
    return roots


def _group(index: int, roots: list[tuple[str, list[str]]]) -> UnmatchedGroup:
    return UnmatchedGroup(
        index=index,
        roots=tuple(r for r, _ in roots),
        prefixes=tuple(p for _, members in roots for p in members),
    )


def _group_fits(roots: list[tuple[str, list[str]]], limit: int) -> bool:
    group = _group(0, roots)
    forward = pattern_size(object_created_pattern(LONGEST_BUCKET_NAME, group.roots))
    return max(forward, _unmatched_size(group.prefixes)) <= limit


def _unmatched_size(excluded: Sequence[str]) -> int:
    return pattern_size(unmatched_pattern(LONGEST_BUCKET_NAME, list(excluded)))


# -- the layout of a whole config -------------------------------------------------------------


@dataclass(frozen=True)
class ShardLayout:
    """One shard: its tenants and the sizes of its two forwarding patterns."""

    index: int
    tenant_ids: tuple[str, ...]
    prefixes: tuple[str, ...]

    @property
    def bus_rules(self) -> int:
        return RULES_PER_TENANT * len(self.tenant_ids)

    @property
    def object_pattern_size(self) -> int:
        return pattern_size(object_created_pattern(LONGEST_BUCKET_NAME, self.prefixes))

    @property
    def status_pattern_size(self) -> int:
        return pattern_size(status_pattern(self.tenant_ids))


def layout(tenants: Sequence[RoutedTenant], shards: int) -> list[ShardLayout]:
    """Every shard of a sharded config (``shards`` >= 1)."""
    return [
        ShardLayout(
            index=k, tenant_ids=tuple(t.id for t in members), prefixes=tuple(t.prefix for t in members)
        )
        for k, members in sorted(assign(tenants, shards).items())
    ]


def default_bus_rules(
    tenants: Sequence[RoutedTenant], shards: int = 0, *, pattern_limit: int = MAX_EVENT_PATTERN_CHARS
) -> int:
    """Rules this app puts on the default bus: 2 per tenant unsharded, 2 per non-empty shard
    sharded, plus the rules of the catch-all of unmatched uploads."""
    catch_all = unmatched_layout([t.prefix for t in tenants], limit=pattern_limit).default_bus_rules
    if not shards:
        return RULES_PER_TENANT * len(tenants) + catch_all
    used = sum(1 for shard in layout(tenants, shards) if shard.tenant_ids)
    return FORWARD_RULES_PER_SHARD * used + catch_all


def default_bus_rule_names(
    tenants: Sequence[RoutedTenant], shards: int = 0, *, pattern_limit: int = MAX_EVENT_PATTERN_CHARS
) -> set[str]:
    """The names of the rules `default_bus_rules` counts (`ops preflight` finds them deployed)."""
    catch_all = unmatched_layout([t.prefix for t in tenants], limit=pattern_limit)
    found = {names.unmatched_uploads_rule_name(0)} | {
        names.unmatched_forward_rule_name(g.index + 1) for g in catch_all.groups
    }
    if not shards:
        return found | {rule.render(t.id) for t in tenants for rule in (names.RULE, names.STATUS_RULE)}
    used = [s.index for s in layout(tenants, shards) if s.tenant_ids]
    return found | {
        name(k) for k in used for name in (names.shard_objects_rule_name, names.shard_status_rule_name)
    }


def max_shard_bus_rules(tenants: Sequence[RoutedTenant], shards: int = 0) -> int:
    """The most rules on any shard bus (0 unsharded)."""
    if not shards:
        return 0
    return max(shard.bus_rules for shard in layout(tenants, shards))


def custom_event_buses(
    tenants: Sequence[RoutedTenant], shards: int = 0, *, pattern_limit: int = MAX_EVENT_PATTERN_CHARS
) -> int:
    """Custom event buses the app creates: one per shard, and the catch-all's ("Event buses"
    quota: 100 per account and Region)."""
    return shards + len(unmatched_layout([t.prefix for t in tenants], limit=pattern_limit).groups)


def routing_roles(
    tenants: Sequence[RoutedTenant], shards: int = 0, *, pattern_limit: int = MAX_EVENT_PATTERN_CHARS
) -> int:
    """IAM roles routing adds to the shared stack: one for every default-bus -> custom-bus
    forward, when there is any (EventBridge needs a role for an event-bus target)."""
    return 1 if custom_event_buses(tenants, shards, pattern_limit=pattern_limit) else 0


def problems(
    tenants: Sequence[RoutedTenant],
    shards: int,
    *,
    rules_per_bus: int = RULES_PER_BUS,
    pattern_limit: int = MAX_EVENT_PATTERN_CHARS,
) -> list[tuple[str, str, Any, str, str]]:
    """What does not fit, as (where, field, value, problem, fix) lines for `config.ConfigError`.

    Unsharded, the per-tenant rules on the default bus are the capacity model's concern
    (``default_bus_rules``); only the catch-all's patterns are checked here."""
    found: list[tuple[str, str, Any, str, str]] = []
    try:
        catch_all = unmatched_layout([t.prefix for t in tenants], limit=pattern_limit)
    except UnmatchedDoesNotFit as exc:
        found.append(
            (
                "file",
                "prefix",
                len(tenants),
                f"the catch-all of uploads outside every tenant prefix does not fit: {exc}",
                "give the tenants prefixes under fewer common folders",
            )
        )
    else:
        if len(catch_all.groups) + shards > MAX_SHARDS:
            found.append(
                (
                    "routing",
                    "shards",
                    shards,
                    (
                        f"with the catch-all's {len(catch_all.groups)} buses the app would create "
                        f"{len(catch_all.groups) + shards} event buses (the quota is 100 per account and "
                        "Region)"
                    ),
                    f"use at most {MAX_SHARDS - len(catch_all.groups)} shards",
                )
            )
    if not shards:
        return found
    shard_layout = layout(tenants, shards)
    for shard in shard_layout:
        if not shard.tenant_ids:
            continue
        too_big = max(shard.object_pattern_size, shard.status_pattern_size) > pattern_limit
        if not too_big and shard.bus_rules <= rules_per_bus:
            continue
        where = f"shard {shard.index}"
        pin_fix = (
            f"pin some of its tenants ({_listed(shard.tenant_ids)}) to a shard with room with 'shard:' "
            f"({_rooms(shard_layout, pattern_limit, exclude=shard.index)}), or raise routing.shards (that "
            "moves tenants: docs/scaling.md, Sharded routing)"
        )
        if shard.object_pattern_size > pattern_limit:
            found.append(
                (
                    where,
                    "prefix",
                    len(shard.prefixes),
                    (
                        f"its tenants' prefixes make a forwarding pattern of {shard.object_pattern_size} "
                        f"characters (EventBridge's event pattern limit is {pattern_limit})"
                    ),
                    pin_fix + ", or shorten the prefixes",
                )
            )
        if shard.status_pattern_size > pattern_limit:
            found.append(
                (
                    where,
                    "id",
                    len(shard.tenant_ids),
                    (
                        "its tenants' state machines make a forwarding pattern of "
                        f"{shard.status_pattern_size} characters (EventBridge's event pattern limit is "
                        f"{pattern_limit})"
                    ),
                    pin_fix,
                )
            )
        if shard.bus_rules > rules_per_bus:
            found.append(
                (
                    where,
                    "shard",
                    len(shard.tenant_ids),
                    (
                        f"its {len(shard.tenant_ids)} tenants need {shard.bus_rules} rules on bus "
                        f"{names.shard_bus_name(shard.index)} ({RULES_PER_TENANT} each; the quota is "
                        f"{rules_per_bus} per bus)"
                    ),
                    pin_fix,
                )
            )
    return found


def _rooms(shard_layout: Sequence[ShardLayout], limit: int, *, exclude: int) -> str:
    """The shards with the most room left, for the fix of a message."""
    free = sorted(
        (
            (limit - max(s.object_pattern_size, s.status_pattern_size), s.index)
            for s in shard_layout
            if s.index != exclude
        ),
        reverse=True,
    )[:3]
    shown = [f"shard {index}: {room} characters free" for room, index in free if room > 0]
    return "; ".join(shown) if shown else "none has room: raise routing.shards"


def _listed(ids: Sequence[str], most: int = 3) -> str:
    shown = ", ".join(f"'{i}'" for i in ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")
