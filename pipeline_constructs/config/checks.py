"""The checks of a tenants file beyond one tenant's own options: across tenants (ids,
prefixes, uploaders, shards), and of the file's top-level blocks against its tenants."""

from __future__ import annotations

import difflib
import re
from typing import Any, cast

from lambdas import contract
from pipeline_constructs import names, routing
from pipeline_constructs.config.options import fix_of
from pipeline_constructs.config.problems import MISSING, Problems, lookup
from pipeline_constructs.config.tenant import TenantConfig
from pipeline_constructs.config.tenants_file import (
    QUALIFIER_FIX,
    SNS_TOPIC_ARN_PATTERN,
    NotificationsConfig,
    RoutingConfig,
    TargetConfig,
)

#: How many tenants a problem names before it says "and N more".
NAMED_TENANTS = 5


def check_notifications(
    notifications: NotificationsConfig, targets: dict[str, TargetConfig], problems: Problems
) -> None:
    """A subscription once; an existing topic instead of subscriptions, in the Region of every target."""
    seen: set[tuple[str, str]] = set()
    listed = [
        *((f"emails[{i}]", "email", e) for i, e in enumerate(notifications.emails)),
        *(
            (f"subscriptions[{i}].endpoint", s.protocol, s.endpoint)
            for i, s in enumerate(notifications.subscriptions)
        ),
    ]
    for field, protocol, endpoint in listed:
        if (protocol, endpoint) in seen:
            problems.add(
                "notifications",
                field,
                endpoint,
                f"subscribes this {protocol} endpoint a second time",
                "list each endpoint once (emails is the short form of subscriptions with protocol email)",
            )
        seen.add((protocol, endpoint))
    topic = notifications.topic_arn
    if topic is None:
        return
    if notifications.endpoints:
        problems.add(
            "notifications",
            "topic_arn",
            topic,
            "replaces the app's alarm topic, so emails and subscriptions would subscribe to nothing",
            "subscribe those endpoints to that topic where it is managed and remove emails and subscriptions, or "
            "remove topic_arn to subscribe them to the app's own topic",
        )
    region = re.match(SNS_TOPIC_ARN_PATTERN, topic).group("region")  # type: ignore[union-attr]  # topic_arn is validated against this pattern, so it matches
    for name, target in targets.items():
        if target.region != region:
            problems.add(
                "notifications",
                "topic_arn",
                topic,
                f"is in Region {region}, but target '{name}' deploys to {target.region}: CloudWatch alarms publish "
                "only to a topic of their own Region",
                "use a topic in the targets' Region, or leave topic_arn out (each target then has its own topic)",
            )


#: How many tenants a problem names before it says "and N more".
NAMED_TENANTS = 5


def check_default_auth(defaults: dict[str, Any], tenants_raw: Any, problems: Problems) -> None:
    """`sink.auth: {type: none}` is inherited only as `{type: none, inherited: true}`: without the
    key, a tenant that leaves its `auth` out would run without credentials by accident. Reported
    once, on defaults, naming the tenants that would have inherited it; they are still validated
    with it, so that one run lists their other problems too. A tenant's own auth is nobody's to
    inherit: `inherited` there is refused."""
    for index, entry in enumerate(tenants_raw if isinstance(tenants_raw, list) else []):
        own = lookup(entry, ("sink", "auth"))
        if isinstance(own, dict) and own.get("type") == "none" and "inherited" in own:
            problems.add(
                tenant_label(entry, index),
                "sink.auth.inherited",
                own["inherited"],
                "is for defaults only: it lets the tenants that leave their auth out inherit "
                "{type: none}, and this auth is the tenant's own",
                "remove it ('auth: {type: none}' in the tenant's sink says all)",
            )
    sink = defaults.get("sink")
    auth = sink.get("auth") if isinstance(sink, dict) else None
    if not (isinstance(auth, dict) and auth.get("type") == "none") or auth.get("inherited") is True:
        return
    inheriting = [
        entry["id"]
        for entry in (tenants_raw if isinstance(tenants_raw, list) else [])
        if isinstance(entry, dict)
        and isinstance(entry.get("id"), str)
        and not (isinstance(entry.get("sink"), dict) and "auth" in entry["sink"])
    ]
    named = ", ".join(f"'{t}'" for t in inheriting[:NAMED_TENANTS])
    more = f" and {len(inheriting) - NAMED_TENANTS} more" if len(inheriting) > NAMED_TENANTS else ""
    who = (
        f" (tenant{'s' if len(inheriting) > 1 else ''} {named}{more} would inherit it)" if inheriting else ""
    )
    problems.add(
        "defaults",
        "sink.auth",
        auth,
        "is never inherited: a tenant that leaves its auth out would run without credentials by accident"
        + who,
        "write 'auth: {type: none}' in the sink of each tenant whose core system takes no credentials, and remove "
        "it from defaults (a bearer or sigv4 auth may stay there); or, to let every tenant that leaves its auth "
        "out run without credentials on purpose, write 'auth: {type: none, inherited: true}' in defaults",
    )


def check_unique_ids(declared: list[tuple[str, str]], problems: Problems) -> None:
    seen: set[str] = set()
    for tenant_id, _ in declared:
        if tenant_id in seen:
            problems.add(
                f"tenant '{tenant_id}'",
                "id",
                tenant_id,
                "is declared more than once",
                "give every tenant a unique id (it names the tenant's queue, workflow and stack)",
            )
        seen.add(tenant_id)


def check_prefix_overlaps(declared: list[tuple[str, str]], problems: Problems, sources: list[str]) -> None:
    """Every pair of tenants where one prefix starts with the other, reported on the later one,
    in declaration order. In sorted order the prefixes that start with a prefix follow it
    directly, so this is O(n log n) plus the overlaps, not O(n^2)."""
    ordered = sorted(range(len(declared)), key=lambda index: declared[index][1])
    pairs: list[tuple[int, int]] = []
    for position, index in enumerate(ordered):
        prefix = declared[index][1]
        for other in ordered[position + 1 :]:
            if not declared[other][1].startswith(prefix):
                break
            pairs.append((min(index, other), max(index, other)))
    for i, j in sorted(pairs):
        (a_id, a_prefix), (b_id, b_prefix) = declared[i], declared[j]
        if a_id != b_id:
            problems.add(
                f"tenant '{b_id}'",
                "prefix",
                b_prefix,
                f"overlaps tenant '{a_id}' prefix '{a_prefix}'" + (f" ({sources[i]})" if sources[i] else ""),
                "give each tenant a prefix that is not inside another's",
                source=sources[j],
            )


def check_prefix_characters(declared: list[tuple[str, str]], problems: Problems, sources: list[str]) -> None:
    """A prefix only of characters S3 never URL-encodes in event keys (`contract.s3_key_from_event`):
    the tenant's rule filters on the encoded key, so 'Acme Corp/' would never match 'Acme+Corp/f.csv'."""
    for (tenant_id, prefix), source in zip(declared, sources):
        bad = list(dict.fromkeys(c for c in prefix if c not in contract.S3_EVENT_KEY_SAFE_CHARACTERS))
        if not bad:
            continue
        shown = " and ".join(_character(c) for c in bad)
        suggestion = "".join(c if c in contract.S3_EVENT_KEY_SAFE_CHARACTERS else "-" for c in prefix)
        problems.add(
            f"tenant '{tenant_id}'",
            "prefix",
            prefix,
            f"has the character{'s' if len(bad) > 1 else ''} {shown}, which S3 URL-encodes in its event "
            "notifications, so the tenant's rule would never match its files",
            f"use only letters, digits, '/', '.', '_' and '-', e.g. '{suggestion}'",
            source=source,
        )


def _character(c: str) -> str:
    names = {" ": "' ' (space)", "\t": "'\\t' (tab)"}
    return names.get(c, f"'{c}'" if c.isprintable() else f"U+{ord(c):04X}")


def check_uploaders(
    tenants: list[TenantConfig], targets: dict[str, TargetConfig], problems: Problems
) -> None:
    """A principal uploads for one tenant only: listed by two tenants, one tenant's system could
    put under the other's prefix. An account root ARN stands for another account: the root of
    the tenant's own target account would name every principal of it, which no Deny can
    confine (`uploaders.py`)."""
    owner: dict[str, str] = {}
    for tenant in tenants:
        target = targets.get(tenant.target or "")
        for arn in tenant.uploaders:
            if target is not None and arn.endswith(f"::{target.account}:root"):
                problems.add(
                    f"tenant '{tenant.id}'",
                    "uploaders",
                    arn,
                    f"is the root of account {target.account}, where target '{tenant.target}' deploys the bucket: "
                    "it would let every principal of that account whose own policy allows it put under the prefix, "
                    "and no Deny can confine them",
                    "list the uploading system's own role or user ARN instead",
                )
            if arn in owner and not arn.endswith(":root"):  # another account may upload for several tenants
                problems.add(
                    f"tenant '{tenant.id}'",
                    "uploaders",
                    arn,
                    f"is also an uploader of tenant '{owner[arn]}': a role or user uploads for one tenant, so "
                    "that one tenant's system can never put under another tenant's prefix",
                    "give each tenant's uploading system a principal (role or user) of its own",
                )
            else:
                owner[arn] = tenant.id


def check_routing(tenants: list[TenantConfig], settings: RoutingConfig, problems: Problems) -> None:
    """Shard pins within routing.shards; every routing pattern and shard bus within its quota."""
    pinned = [t for t in tenants if t.shard is not None]
    if not settings.shards and pinned:
        for tenant in pinned:
            problems.add(
                f"tenant '{tenant.id}'",
                "shard",
                tenant.shard,
                "is set, but routing.shards is 0 (no shard buses)",
                "remove it, or set routing.shards",
            )
        return
    for tenant in pinned:
        if cast(int, tenant.shard) >= settings.shards:  # pinned: its shard is set
            problems.add(
                f"tenant '{tenant.id}'",
                "shard",
                tenant.shard,
                f"is not a shard of routing.shards {settings.shards}",
                fix_of(TenantConfig, "shard"),
            )
    if problems.lines:
        return
    # Each deployment target has its own shared stack, shard buses and catch-all.
    by_target: dict[str | None, list[TenantConfig]] = {}
    for tenant in tenants:
        by_target.setdefault(tenant.target, []).append(tenant)
    for target, own in by_target.items():
        for where, field, value, problem, fix in routing.problems(
            own,
            settings.shards,
            rules_per_bus=settings.rules_per_bus,
            pattern_limit=settings.event_pattern_chars,
        ):
            problems.add(
                where if target is None else f"target '{target}' {where}", field, value, problem, fix
            )


def check_tenant_targets(
    tenants: list[TenantConfig],
    targets: dict[str, TargetConfig] | None,
    problems: Problems,
    *,
    every_tenant_valid: bool,
) -> None:
    """With `targets:`, every tenant names a declared one (in itself or in defaults); without,
    none does. Every target gets at least one tenant."""
    if targets is None:
        return
    declared = ", ".join(targets)
    before = len(problems.lines)
    for tenant in tenants:
        where = f"tenant '{tenant.id}'"
        if not targets and tenant.target is not None:
            problems.add(
                where,
                "target",
                tenant.target,
                "is set, but no targets are declared",
                "declare it under 'targets:' (account and region), or remove it",
            )
        elif targets and tenant.target is None:
            problems.add(
                where,
                "target",
                MISSING,
                "is required when targets are declared",
                f"set 'target:' in the tenant or in defaults (declared: {declared})",
            )
        elif targets and tenant.target not in targets:
            close = difflib.get_close_matches(tenant.target or "", list(targets), n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            problems.add(
                where, "target", tenant.target, "is not a declared target", f"{hint}use one of: {declared}"
            )
    used = {tenant.target for tenant in tenants}
    if every_tenant_valid and len(problems.lines) == before:  # else some tenant's target is unknown
        for name in targets:
            if name not in used:
                problems.add(
                    f"target '{name}'",
                    "tenants",
                    MISSING,
                    "has no tenant",
                    f"set 'target: {name}' on its tenants, or remove the target",
                )


def check_qualifier(value: Any, problems: Problems) -> str | None:
    """The top-level `qualifier`, or None (absent, or reported)."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.match(contract.QUALIFIER_PATTERN, value):
        problems.add(
            "file",
            "qualifier",
            value,
            "has characters other than lowercase letters and digits, or does "
            "not start with a letter (it starts every resource name)",
            QUALIFIER_FIX,
        )
        return None
    broken = contract.qualifier_broken(value)
    if broken is not None:
        derived = broken.longest(qualifier=value)
        problems.add(
            "file",
            "qualifier",
            value,
            f"is {len(value)} characters, so the derived {broken.kind} "
            f"'{derived}' is {len(derived)} characters (limit {broken.limit})",
            QUALIFIER_FIX,
        )
        return None
    return value


def check_qualified_ids(tenants: list[TenantConfig], qualifier: str | None, problems: Problems) -> None:
    """Each tenant id fits every name it derives with the qualifier in front."""
    for tenant in tenants if qualifier else ():
        broken = names.tightest_broken(tenant.id, qualifier or "")
        if broken is not None:
            derived = broken.longest(tenant.id, qualifier=qualifier)
            problems.add(
                f"tenant '{tenant.id}'",
                "id",
                tenant.id,
                f"is {len(tenant.id)} characters, so with qualifier '{qualifier}' the derived {broken.kind} "
                f"'{derived}' is {len(derived)} characters (limit {broken.limit})",
                f"use an id of at most {broken.max_id_length(qualifier or '')} characters, or a shorter "
                "qualifier",
            )


def tenant_label(entry: Any, index: int) -> str:
    if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"]:
        return f"tenant '{entry['id']}'"
    return f"tenant #{index + 1}"
