"""Patterns in tenants.yaml (`{id}`, the tenant's id, in `prefix`, `sink.url`, `sink.auth.secret`
and `sink.auth.invoke_arn`) and the explicit way to let tenants inherit running without
credentials (`sink.auth: {type: none, inherited: true}` in `defaults`)."""

from __future__ import annotations

import re

import pytest

from pipeline_constructs.config import NoAuth, load_config, parse_config
from tests.conftest import ROOT, one_problem, problems_of

MANY_TENANTS = ROOT / "examples" / "many-tenants.yaml"
SINK = "sink: {url: 'https://core.example.com', auth: {type: bearer, secret: core/token}}"
API_ARN = "arn:aws:execute-api:eu-west-1:111111111111:a1b2c3d4e5/prod/POST/tenants/{id}/records"
SECRET_FIX = (
    "use the secret's name (e.g. 'core/acme/token') or its full ARN "
    "('arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf')"
)
NONE_IN_DEFAULTS = (
    "defaults: field 'sink.auth' = {%s}: is never inherited: a tenant that leaves its auth out would run without "
    "credentials by accident%s; write 'auth: {type: none}' in the sink of each tenant whose core system takes no "
    "credentials, and remove it from defaults (a bearer or sigv4 auth may stay there); or, to let every tenant that "
    "leaves its auth out run without credentials on purpose, write 'auth: {type: none, inherited: true}' in defaults"
)


@pytest.mark.parametrize(
    ("defaults", "value_of", "expected"),
    [
        (f"{{prefix: 'in/{{id}}/', {SINK}}}", lambda t: t.prefix, "in/{id}/"),
        (
            "{sink: {url: 'https://core.example.com/tenants/{id}/records', auth: {type: bearer, secret: core/token}}}",
            lambda t: t.sink.url,
            "https://core.example.com/tenants/{id}/records",
        ),
        (
            "{sink: {url: 'https://core.example.com', auth: {type: bearer, secret: 'ordered-ingest/{id}/core-token'}}}",
            lambda t: t.sink.auth.secret,
            "ordered-ingest/{id}/core-token",
        ),
        (
            "{sink: {url: 'https://core.example.com', auth: {type: sigv4, service: execute-api, region: eu-west-1, "
            f"invoke_arn: '{API_ARN}'}}}}}}",
            lambda t: t.sink.auth.invoke_arn,
            API_ARN,
        ),
    ],
    ids=["prefix", "sink.url", "sink.auth.secret", "sink.auth.invoke_arn"],
)
def test_id_in_a_pattern_of_defaults_is_each_tenants_id(defaults, value_of, expected):
    """GIVEN a pattern with `{id}` in defaults and two tenants that leave the option out THEN each
    gets the pattern with its own id."""
    prefixes = "" if "prefix" in defaults else ", prefix: {id}-files/"
    acme, beta = parse_config(
        f"defaults: {defaults}\ntenants:\n  - {{id: acme{prefixes.replace('{id}', 'acme')}}}\n"
        f"  - {{id: beta{prefixes.replace('{id}', 'beta')}}}\n"
    ).tenants
    assert (value_of(acme), value_of(beta)) == (
        expected.replace("{id}", "acme"),
        expected.replace("{id}", "beta"),
    )


def test_a_tenants_own_value_wins_over_the_defaults_pattern():
    acme, beta = parse_config(
        "defaults: {prefix: '{id}/', sink: {url: 'https://core.example.com/{id}', "
        "auth: {type: bearer, secret: 'core/{id}/token'}}}\n"
        "tenants:\n  - {id: acme, prefix: incoming/acme/, sink: {url: 'https://acme.example.com/records', "
        "auth: {type: bearer, secret: acme-token}}}\n  - {id: beta}\n"
    ).tenants
    assert (acme.prefix, acme.sink.url, acme.sink.auth.secret) == (
        "incoming/acme/",
        "https://acme.example.com/records",
        "acme-token",
    )
    assert (beta.prefix, beta.sink.url, beta.sink.auth.secret) == (
        "beta/",
        "https://core.example.com/beta",
        "core/beta/token",
    )


def test_id_in_a_tenants_own_value_is_its_id_so_that_an_anchor_shares_one_pattern():
    """`{id}` means the same in a tenant's own value: the tenants that do not take the defaults'
    auth share one pattern through a YAML anchor, each with its own id."""
    acme, beta, gamma = parse_config(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: none, inherited: true}}}\n"
        "tenants:\n  - {id: acme, prefix: '{id}/', sink: {auth: &bearer {type: bearer, secret: 'ordered-ingest/{id}/core-token'}}}\n"
        "  - {id: beta, prefix: beta/, sink: {auth: *bearer}}\n  - {id: gamma, prefix: gamma/}\n"
    ).tenants
    assert acme.prefix == "acme/"
    assert (acme.sink.auth.secret, beta.sink.auth.secret) == (
        "ordered-ingest/acme/core-token",
        "ordered-ingest/beta/core-token",
    )
    assert gamma.sink.auth == NoAuth(type="none", inherited=True)


def test_prefixes_of_one_pattern_never_overlap_even_when_one_id_starts_another():
    """An id has no '/', so each prefix a pattern makes has the pattern's number of '/': one can
    start another only if they are equal, and they are equal only for the same id."""
    ids = ["a", "ab", "a-b", "a-b-c", "ab1"]
    for pattern in ("{id}/", "in/{id}/", "{id}-x/", "x/{id}/{id}/"):
        tenants = "".join(f"  - {{id: {tenant_id}}}\n" for tenant_id in ids)
        config = parse_config(f"defaults: {{prefix: '{pattern}', {SINK}}}\ntenants:\n{tenants}")
        assert [t.prefix for t in config.tenants] == [pattern.replace("{id}", i) for i in ids]


def test_the_sequence_pattern_keeps_its_braces():
    """`ordering.sequence_pattern` is a regular expression: its braces are a quantifier, not a placeholder."""
    (acme,) = parse_config(
        f"defaults: {{{SINK}, ordering: {{by: key_sequence, sequence_pattern: '(?P<seq>\\d{{6}})\\.csv$'}}}}\n"
        "tenants:\n  - {id: acme, prefix: acme/}\n"
    ).tenants
    assert acme.ordering.sequence_pattern == r"(?P<seq>\d{6})\.csv$"


def test_fails_when_a_pattern_has_another_placeholder():
    """Reported once, on defaults, however many tenants inherit it (not again as a bad secret name)."""
    assert one_problem(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: bearer, secret: 'core/{tenant}/token'}}}\n"
        "tenants:\n  - {id: acme, prefix: acme/}\n  - {id: beta, prefix: beta/}\n"
    ) == (
        "defaults: field 'sink.auth.secret' = 'core/{tenant}/token': has the placeholder '{tenant}', but the only "
        "one is '{id}', the tenant's id; write '{id}' where the tenant's id goes, or the text itself"
    )


def test_fails_when_a_tenants_own_value_has_another_placeholder():
    assert one_problem(f"defaults: {{{SINK}}}\ntenants:\n  - {{id: acme, prefix: '{{ID}}/'}}\n") == (
        "tenant 'acme': field 'prefix' = '{ID}/': has the placeholder '{ID}', but the only one is '{id}', the "
        "tenant's id; write '{id}' where the tenant's id goes, or the text itself"
    )


def test_fails_when_a_placeholder_is_in_an_option_that_takes_no_pattern():
    assert problems_of(
        f"defaults: {{{SINK}, target: 'prod-{{id}}'}}\ntargets: {{prod: {{account: '111111111111', region: eu-west-1}}}}\n"
        "tenants:\n  - {id: acme, prefix: acme/, encryption: {kms_key: 'arn:aws:kms:eu-west-1:111111111111:key/{id}'}}\n"
    ) == [
        "defaults: field 'target' = 'prod-{id}': is not a pattern option: '{id}' stands for the tenant's id only in "
        "prefix, sink.url, sink.auth.secret and sink.auth.invoke_arn; write the value itself",
        "tenant 'acme': field 'encryption.kms_key' = 'arn:aws:kms:eu-west-1:111111111111:key/{id}': is not a "
        "pattern option: '{id}' stands for the tenant's id only in prefix, sink.url, sink.auth.secret and "
        "sink.auth.invoke_arn; write the value itself",
    ]


def test_fails_when_a_pattern_makes_an_invalid_value_naming_each_tenant_the_value_it_got_and_the_pattern():
    assert problems_of(
        "defaults: {sink: {url: 'http://core.example.com/{id}', auth: {type: bearer, secret: 'core/{id}/the token'}}}\n"
        "tenants:\n  - {id: acme, prefix: acme/}\n  - {id: beta, prefix: beta/, sink: {url: 'https://beta.example.com'}}\n"
    ) == [
        "tenant 'acme': field 'sink.url' = 'http://core.example.com/acme' (from the defaults pattern "
        "'http://core.example.com/{id}'): must be an https:// URL (plain http:// only for localhost); use the core "
        "system's https:// endpoint",
        "tenant 'acme': field 'sink.auth.secret' = 'core/acme/the token' (from the defaults pattern "
        f"'core/{{id}}/the token'): is not a Secrets Manager secret name; {SECRET_FIX}",
        "tenant 'beta': field 'sink.auth.secret' = 'core/beta/the token' (from the defaults pattern "
        f"'core/{{id}}/the token'): is not a Secrets Manager secret name; {SECRET_FIX}",
    ]


def test_fails_when_a_pattern_prefix_overlaps_a_tenants_own_prefix():
    """GIVEN `{id}/` in defaults, tenant 'shared' inherits 'shared/', in which tenant 'acme' has its
    own prefix THEN the overlap names both prefixes as each tenant got it, and the pattern."""
    assert problems_of(
        f"defaults: {{prefix: '{{id}}/', {SINK}}}\n"
        "tenants:\n  - {id: acme, prefix: shared/acme/}\n  - {id: shared}\n  - {id: other, prefix: shared/other/}\n"
    ) == [
        "tenant 'shared': field 'prefix' = 'shared/' (from the defaults pattern '{id}/'): overlaps tenant 'acme' "
        "prefix 'shared/acme/'; give each tenant a prefix that is not inside another's",
        "tenant 'other': field 'prefix' = 'shared/other/': overlaps tenant 'shared' prefix 'shared/' (from the "
        "defaults pattern '{id}/'); give each tenant a prefix that is not inside another's",
    ]


def test_fails_when_a_pattern_prefix_has_a_character_s3_encodes():
    assert problems_of(f"defaults: {{prefix: '{{id}} in/', {SINK}}}\ntenants:\n  - {{id: acme}}\n") == [
        "tenant 'acme': field 'prefix' = 'acme in/' (from the defaults pattern '{id} in/'): has the character ' ' "
        "(space), which S3 URL-encodes in its event notifications, so the tenant's rule would never match its files; "
        "use only letters, digits, '/', '.', '_' and '-', e.g. 'acme-in/'",
    ]


def test_fails_when_defaults_give_a_prefix_without_id():
    """A fixed prefix in defaults would be every tenant's: refused once, not as every pair's overlap."""
    assert one_problem(
        f"defaults: {{prefix: in/, {SINK}}}\ntenants:\n  - {{id: acme}}\n  - {{id: beta}}\n"
    ) == (
        "defaults: field 'prefix' = 'in/': has no '{id}': every tenant that leaves its prefix out would get this "
        "same prefix; write a pattern with '{id}', e.g. '{id}/' or 'incoming/{id}/', or give each tenant its own "
        "prefix"
    )


def test_none_with_inherited_in_defaults_is_inherited_by_the_tenants_that_leave_auth_out():
    acme, beta = parse_config(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: none, inherited: true}}}\n"
        "tenants:\n  - {id: acme, prefix: acme/}\n"
        "  - {id: beta, prefix: beta/, sink: {auth: {type: bearer, secret: core/beta/token}}}\n"
    ).tenants
    assert acme.sink.auth == NoAuth(type="none", inherited=True)
    assert beta.sink.auth.type == "bearer"


def test_where_none_was_written_changes_nothing_a_stack_gets():
    """`inherited` is not dumped: the register function's environment (and a cell's fingerprint)
    is the same for a tenant's own `none` and an inherited one."""
    assert (
        NoAuth(type="none", inherited=True).model_dump()
        == NoAuth(type="none").model_dump()
        == {"type": "none"}
    )


@pytest.mark.parametrize("auth", ["{type: none}", "{type: none, inherited: false}"])
def test_fails_when_defaults_give_none_without_inherited_true(auth):
    shown = "'type': 'none'" + (", 'inherited': False" if "false" in auth else "")
    assert problems_of(
        f"defaults: {{sink: {{url: 'https://core.example.com', auth: {auth}}}}}\n"
        "tenants:\n  - {id: acme, prefix: acme/}\n  - {id: beta, prefix: beta/, sink: {auth: {type: none}}}\n"
    ) == [NONE_IN_DEFAULTS % (shown, " (tenant 'acme' would inherit it)")]


def test_fails_when_a_tenants_own_none_says_inherited():
    assert one_problem(
        "defaults: {sink: {url: 'https://core.example.com'}}\n"
        "tenants:\n  - {id: acme, prefix: acme/, sink: {auth: {type: none, inherited: true}}}\n"
    ) == (
        "tenant 'acme': field 'sink.auth.inherited' = True: is for defaults only: it lets the tenants that leave "
        "their auth out inherit {type: none}, and this auth is the tenant's own; remove it ('auth: {type: none}' "
        "in the tenant's sink says all)"
    )


def test_tenants_without_credentials_lists_own_and_inherited_none_in_file_order():
    config = parse_config(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: none, inherited: true}}}\n"
        "tenants:\n  - {id: inherits, prefix: a/}\n"
        "  - {id: bearer, prefix: b/, sink: {auth: {type: bearer, secret: core/b/token}}}\n"
        "  - {id: own, prefix: c/, sink: {auth: {type: none}}}\n"
    )
    assert config.tenants_without_credentials == ("inherits", "own")
    with_bearer_default = parse_config(
        f"defaults: {{{SINK}}}\ntenants:\n  - {{id: acme, prefix: a/}}\n"
        "  - {id: own, prefix: c/, sink: {auth: {type: none}}}\n"
    )
    assert with_bearer_default.tenants_without_credentials == ("own",)


def test_the_many_tenants_example_is_50_tenants_in_at_most_85_lines():
    """GIVEN examples/many-tenants.yaml THEN it loads (capacity checked too): 50 tenants, 30 without
    credentials (inherited), 20 with a bearer token whose secret follows one pattern, batch
    tenants and two with uploaders, each prefix and URL made from the defaults patterns."""
    text = MANY_TENANTS.read_text(encoding="utf-8")
    config = load_config(MANY_TENANTS)
    assert len(text.splitlines()) <= 85
    assert len(config.tenants) == 50
    assert len(config.tenants_without_credentials) == 30
    assert all(
        t.sink.auth == NoAuth(type="none", inherited=True)
        for t in config.tenants
        if t.id in config.tenants_without_credentials
    )
    bearer = [t for t in config.tenants if t.sink.auth.type == "bearer"]
    assert [t.sink.auth.secret for t in bearer] == [f"ordered-ingest/{t.id}/core-token" for t in bearer]
    assert len(bearer) == 20
    assert all(
        t.prefix == f"{t.id}/" and t.sink.url == f"https://core.example.com/tenants/{t.id}/records"
        for t in config.tenants
    )
    assert len([t for t in config.tenants if t.sink.batch_size > 1]) >= 2
    uploaders = [arn for t in config.tenants for arn in t.uploaders]
    assert len(uploaders) == 2 and all(
        re.match(r"^arn:aws:iam::123456789012:role/", arn) for arn in uploaders
    )
    assert text.count("secret:") == 1, "the secret names are written once, as one pattern"
