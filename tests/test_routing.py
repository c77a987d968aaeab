"""Sharded routing as pure functions (no synthesis): shard assignment, pattern sizes, the
catch-all of unmatched uploads, the refusals in tenants.yaml, and a 1,000-tenant config."""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass

import pytest

from pipeline_constructs import routing
from pipeline_constructs.config import parse_config
from tests.conftest import pattern_matches, problems_of, status_change, workflow_arn

SINK = "  sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}\n"


@dataclass(frozen=True)
class Tenant:
    id: str
    prefix: str
    shard: int | None = None


def random_ids(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    ids: set[str] = set()
    while len(ids) < count:
        ids.add(
            rng.choice(string.ascii_lowercase)
            + "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(rng.randint(2, 20)))
        )
    return sorted(ids)


def flat_tenants(count: int) -> list[Tenant]:
    return [Tenant(f"tenant-{i:04d}", f"tenant-{i:04d}/") for i in range(count)]


# -- shard assignment -------------------------------------------------------------------------


def test_a_shard_is_the_same_on_every_run_and_machine():
    """sha256, not Python's salted hash(): pinned values (a changed function would move tenants)."""
    assert {t: routing.shard_of(t, 4) for t in ("acme", "globex", "initech")} == {
        "acme": 0,
        "globex": 3,
        "initech": 3,
    }
    assert {t: routing.shard_of(t, 2) for t in ("acme", "globex", "initech")} == {
        "acme": 0,
        "globex": 1,
        "initech": 1,
    }
    assert routing.shard_of("acme", 4, pinned=2) == 2


@pytest.mark.parametrize("seed", range(5))
def test_adding_tenants_never_moves_another(seed):
    """GIVEN many random tenants on N shards WHEN more tenants are added anywhere in the file
    THEN every tenant that was there keeps its shard (and pins stay pinned)."""
    rng = random.Random(seed)
    ids = random_ids(600, seed)
    before_ids, added_ids = ids[:400], ids[400:]
    shards = rng.randint(2, 60)
    before = [
        Tenant(t, f"{t}/", shard=rng.randrange(shards) if rng.random() < 0.1 else None) for t in before_ids
    ]
    after = list(before)
    for t in added_ids:
        after.insert(rng.randrange(len(after) + 1), Tenant(t, f"{t}/"))
    was = {t.id: k for k, members in routing.assign(before, shards).items() for t in members}
    now = {t.id: k for k, members in routing.assign(after, shards).items() for t in members}
    assert {t: now[t] for t in was} == was
    assert all(now[t.id] == t.shard for t in before if t.shard is not None)


def test_the_hash_spreads_tenants_over_the_shards():
    counts = [len(m) for m in routing.assign(flat_tenants(1000), 40).values()]
    assert min(counts) >= 10 and max(counts) <= 45, counts


# -- patterns and the capacity functions ------------------------------------------------------


def test_rules_on_the_default_bus_and_on_the_fullest_shard_bus():
    tenants = flat_tenants(10)
    assert routing.default_bus_rules(tenants) == 2 * 10 + 1  # 2 per tenant + the catch-all
    assert routing.max_shard_bus_rules(tenants) == 0
    by_shard = routing.assign(tenants, 4)
    used = sum(1 for m in by_shard.values() if m)
    assert routing.default_bus_rules(tenants, 4) == 2 * used + 1
    assert routing.max_shard_bus_rules(tenants, 4) == 2 * max(len(m) for m in by_shard.values())


def test_buses_and_roles_routing_adds():
    few, many = flat_tenants(10), flat_tenants(1000)
    assert (routing.custom_event_buses(few), routing.routing_roles(few)) == (0, 0)  # today's layout
    assert (routing.custom_event_buses(few, 4), routing.routing_roles(few, 4)) == (4, 1)
    groups = len(routing.unmatched_layout([t.prefix for t in many]).groups)
    assert groups == 10
    assert (routing.custom_event_buses(many), routing.routing_roles(many)) == (groups, 1)
    assert routing.custom_event_buses(many, 40) == 40 + groups


def test_a_status_forward_matches_a_bare_workflow_arn_by_its_suffix_and_the_live_alias_by_one_suffix():
    """No wildcard: EventBridge allows 30 rules with a wildcard filter per bus, one forward per shard."""
    pattern = routing.status_pattern(["acme"])
    assert pattern["detail"] == {
        "stateMachineArn": [
            {"suffix": ":acme-file-ingest-workflow"},
            {"suffix": "-file-ingest-workflow:live"},
        ]
    }
    assert pattern["source"] == ["aws.states"]
    assert "wildcard" not in json.dumps(pattern)


ROUTED = [Tenant("acme", "acme/"), Tenant("globex", "globex/"), Tenant("initech", "initech/")]
MACHINES = [
    (tenant, workflow_arn(f"{tenant}-file-ingest-{kind}", qualifier))
    for tenant in ("acme", "globex", "initech")
    for kind in ("workflow", "page", "section")
    for qualifier in (None, "live", "3")
]


def closers_reached(event: dict) -> set[str]:
    """The tenants whose closer gets `event` with two shards: the default bus forwards it to
    each shard bus whose status rule matches, and there each tenant's own status rule decides."""
    reached = set()
    for shard in routing.layout(ROUTED, 2):
        if not shard.tenant_ids or not pattern_matches(routing.status_pattern(shard.tenant_ids), event):
            continue
        for tenant in shard.tenant_ids:
            own = routing.own_workflow_arns(workflow_arn(f"{tenant}-file-ingest-workflow"))
            if pattern_matches({"source": ["aws.states"], "detail": {"stateMachineArn": own}}, event):
                reached.add(tenant)
    return reached


@pytest.mark.parametrize(
    ("tenant", "state_machine_arn"), MACHINES, ids=[arn.split(":", 6)[6] for _, arn in MACHINES]
)
def test_each_status_change_reaches_its_own_tenants_closer_only_bare_or_qualified(tenant, state_machine_arn):
    """GIVEN three tenants on two shards (acme on 0, globex and initech on 1) WHEN a state
    machine's execution changes status, its event naming the machine bare or qualified by the
    `live` alias or a version THEN a file workflow's event, bare or through the alias files
    start by, reaches its own tenant's closer and no other; a page's or a section's reaches
    none, and neither does a version's (only an execution started by hand has one)."""
    own = "-file-ingest-workflow" in state_machine_arn and not state_machine_arn.endswith(":3")
    expected = {tenant} if own else set()
    assert closers_reached(status_change(state_machine_arn)) == expected


def test_a_bare_status_change_is_forwarded_to_its_shard_only_a_qualified_one_to_every_shard():
    """The forwarding cost of the qualified shape: one suffix for every tenant instead of a
    full ARN per tenant, so such an event reaches every shard bus (and only its tenant's rule)."""
    shards = [s for s in routing.layout(ROUTED, 2) if s.tenant_ids]

    def forwarded(event):
        return [s.index for s in shards if pattern_matches(routing.status_pattern(s.tenant_ids), event)]

    assert forwarded(status_change(workflow_arn("acme-file-ingest-workflow"))) == [0]
    assert forwarded(status_change(workflow_arn("globex-file-ingest-workflow"))) == [1]
    assert forwarded(status_change(workflow_arn("acme-file-ingest-workflow", "live"))) == [0, 1]
    assert forwarded(status_change(workflow_arn("acme-file-ingest-page", "live"))) == []


def test_pattern_sizes_are_measured_with_the_longest_bucket_name():
    shard = routing.layout([Tenant("acme", "acme/")], 1)[0]
    assert shard.object_pattern_size == len(
        '{"source": ["aws.s3"], "detail-type": ["Object Created"], "detail": {"bucket": {"name": ["'
        + "b" * 63
        + '"]}, "object": {"key": [{"prefix": "acme/"}]}}}'
    )


def test_a_1000_tenant_config_fits_every_limit_without_synthesis():
    """GIVEN 1,000 tenants and 40 shards THEN the default bus and every shard bus stay far below
    300 rules, every pattern within 2,048 characters, buses within the account's 100."""
    tenants = flat_tenants(1000)
    assert routing.problems(tenants, 40) == []
    assert routing.default_bus_rules(tenants) > 300  # unsharded it could not deploy
    catch_all = routing.unmatched_layout([t.prefix for t in tenants])
    assert routing.default_bus_rules(tenants, 40) == 2 * 40 + catch_all.default_bus_rules <= 300
    assert routing.max_shard_bus_rules(tenants, 40) <= 100
    for shard in routing.layout(tenants, 40):
        assert max(shard.object_pattern_size, shard.status_pattern_size) <= routing.MAX_EVENT_PATTERN_CHARS
    for group in catch_all.groups:
        assert (
            routing.pattern_size(routing.object_created_pattern(routing.LONGEST_BUCKET_NAME, group.roots))
            <= 2048
        )
        assert (
            routing.pattern_size(routing.unmatched_pattern(routing.LONGEST_BUCKET_NAME, group.prefixes))
            <= 2048
        )
    assert (
        routing.pattern_size(routing.unmatched_pattern(routing.LONGEST_BUCKET_NAME, catch_all.excluded))
        <= 2048
    )
    assert 40 + len(catch_all.groups) <= routing.MAX_SHARDS


# -- the catch-all ----------------------------------------------------------------------------


def logged(layout: routing.UnmatchedLayout, key: str) -> int:
    """How many rules would log an upload of ``key``: the default bus's rule, and each catch-all
    bus the default bus forwards it to whose rule matches it."""
    count = 0 if any(key.startswith(p) for p in layout.excluded) else 1
    for group in layout.groups:
        if any(key.startswith(r) for r in group.roots) and not any(key.startswith(p) for p in group.prefixes):
            count += 1
    return count


def test_few_prefixes_keep_the_one_rule_of_today():
    layout = routing.unmatched_layout(["initech/in/", "acme/", "globex/"])
    assert layout == routing.UnmatchedLayout(excluded=("acme/", "globex/", "initech/in/"))
    assert layout.default_bus_rules == 1


@pytest.mark.parametrize("shape", ["flat", "nested", "random"])
def test_the_catch_all_logs_every_unmatched_upload_once_and_no_matched_one(shape):
    """GIVEN 1,000 prefixes (too many for one pattern) WHEN keys under and outside them are
    uploaded THEN a key under a prefix is logged by no rule and any other key by exactly one."""
    rng = random.Random(7)
    prefixes = {
        "flat": [t.prefix for t in flat_tenants(1000)],
        "nested": [f"customers/eu/t{i}/incoming/" for i in range(1000)],
        "random": [f"{t}/" for t in random_ids(1000, 3)],
    }[shape]
    layout = routing.unmatched_layout(prefixes)
    assert layout.groups, "1,000 prefixes do not fit one pattern"
    alphabet = routing.KEY_ALPHABET
    matched = [
        p + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for p in rng.sample(prefixes, 200)
    ]
    near = [
        p[: rng.randint(1, len(p) - 1)] + rng.choice(alphabet) + "x.csv" for p in rng.sample(prefixes, 300)
    ]
    outside = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(300)]
    for key in matched:
        assert logged(layout, key) == 0, key
    for key in near + outside:
        expected = 0 if any(key.startswith(p) for p in prefixes) else 1
        assert logged(layout, key) == expected, key


def test_fails_when_prefixes_share_no_folders_and_do_not_fit_one_pattern():
    """Prefixes that differ in their first character already cannot be grouped by a subtree."""
    prefixes = [f"{c}{'x' * 60}/" for c in routing.KEY_ALPHABET]
    with pytest.raises(routing.UnmatchedDoesNotFit, match="no common folders"):
        routing.unmatched_layout(prefixes)


# -- tenants.yaml -----------------------------------------------------------------------------


def test_routing_defaults_to_no_shards():
    config = parse_config(f"defaults:\n{SINK}tenants:\n  - {{id: acme, prefix: acme/}}\n")
    assert config.routing.shards == 0 and config.tenants[0].shard is None


def test_a_pin_chooses_the_shard():
    config = parse_config(
        f"defaults:\n{SINK}routing: {{shards: 4}}\ntenants:\n  - {{id: acme, prefix: acme/, shard: 3}}\n"
    )
    assert routing.layout(config.tenants, 4)[3].tenant_ids == ("acme",)


def test_fails_when_a_pin_is_not_a_shard():
    assert problems_of(
        f"""
        defaults:
        {SINK}
        routing: {{shards: 2}}
        tenants:
          - {{id: acme, prefix: acme/, shard: 2}}
        """
    ) == [
        (
            "tenant 'acme': field 'shard' = 2: is not a shard of routing.shards 2; use a shard number "
            "from 0 to routing.shards - 1 (at most 98), or leave it out (sha256 of the id picks one)"
        )
    ]


def test_fails_when_a_pin_is_set_without_shards():
    assert problems_of(
        f"""
        defaults:
        {SINK}
        tenants:
          - {{id: acme, prefix: acme/, shard: 0}}
        """
    ) == [
        (
            "tenant 'acme': field 'shard' = 0: is set, but routing.shards is 0 (no shard buses); remove "
            "it, or set routing.shards"
        )
    ]


def test_fails_when_a_shards_forwarding_pattern_would_exceed_the_limit():
    """GIVEN one shard and 40 tenants with 60-character prefixes THEN synthesis refuses, naming
    the shard, its size, the limit and the fix."""
    tenants = "".join(f"  - {{id: t{i:02d}, prefix: {'p' * 56}{i:02d}/}}\n" for i in range(40))
    problems = problems_of(f"defaults:\n{SINK}routing: {{shards: 1}}\ntenants:\n{tenants}")
    assert problems == [
        (
            "shard 0: field 'prefix' = 40: its tenants' prefixes make a forwarding pattern of 3179 "
            "characters (EventBridge's event pattern limit is 2048); pin some of its tenants ('t00', "
            "'t01', 't02' and 37 more) to a shard with room with 'shard:' (none has room: raise "
            "routing.shards), or raise routing.shards (that moves tenants: docs/scaling.md, Sharded routing), or "
            "shorten the prefixes"
        ),
    ]


def test_fails_when_a_shard_bus_would_exceed_its_rule_quota():
    tenants = "".join(f"  - {{id: t{i}, prefix: t{i}/}}\n" for i in range(6))
    problems = problems_of(f"defaults:\n{SINK}routing: {{shards: 1, rules_per_bus: 10}}\ntenants:\n{tenants}")
    assert problems == [
        (
            "shard 0: field 'shard' = 6: its 6 tenants need 12 rules on bus ordered-ingest-shard-0 (2 "
            "each; the quota is 10 per bus); pin some of its tenants ('t0', 't1', 't2' and 3 more) to a "
            "shard with room with 'shard:' (none has room: raise routing.shards), or raise routing.shards "
            "(that moves tenants: docs/scaling.md, Sharded routing)"
        ),
    ]


def test_fails_when_routing_has_an_unknown_key():
    assert problems_of(
        f"defaults:\n{SINK}routing: {{shard: 2}}\ntenants:\n  - {{id: acme, prefix: acme/}}\n"
    ) == ["routing: field 'shard' = 2: unknown key; remove it or fix its spelling (did you mean 'shards'?)"]


# -- the capacity model counts the sharded layout ---------------------------------------------


def many_tenants_yaml(count: int, routing_block: str) -> str:
    tenants = "".join(f"  - {{id: tenant-{i:04d}, prefix: tenant-{i:04d}/}}\n" for i in range(count))
    return (
        f"defaults:\n{SINK}{routing_block}"
        "account_limits: {iam_roles: 5000, lambda_concurrent_executions: 2000}\n"
        f"tenants:\n{tenants}"
    )


def test_fails_when_301_tenants_share_the_default_bus_without_shards():
    (problem,) = problems_of(many_tenants_yaml(301, ""))
    assert problem.startswith(
        "the deployment (the account and Region cdk deploy uses): EventBridge rules on the default bus: "
        "need 606 (2 per tenant x 301 tenants + 4 (the catch-all of unmatched uploads)), limit 300; fix: "
        "shard the rules over event buses with routing.shards (docs/scaling.md, Sharded routing)"
    )


def test_with_shards_the_capacity_model_counts_forwards_and_the_forwarding_role():
    """GIVEN the same 301 tenants on 20 shards THEN the file is valid: the default bus holds the
    forwards and the catch-all's rules; the IAM need counts the forwarding role once."""
    from pipeline_constructs import capacity

    config = parse_config(many_tenants_yaml(301, "routing: {shards: 20}\n"))
    (target,) = capacity.targets(config)
    rules = capacity.default_bus_rules(target.tenants, target.routing)
    assert rules.count == routing.default_bus_rules(config.tenants, 20) == 2 * 20 + 4
    assert rules.how == "2 forwarding rules x 20 shards with tenants + 4 (the catch-all of unmatched uploads)"
    roles = capacity.iam_roles(target.tenants, target.routing)
    assert roles.count == capacity.ROLES_PER_TENANT * 301 + 1
    assert roles.how.endswith("+ 1 (the event-bus forwarding role)")
