"""`sink.auth` in tenants.yaml: required, a union on `type`, each type's fields checked."""

from __future__ import annotations

from pipeline_constructs.config import BearerAuth, NoAuth, SigV4Auth, parse_config
from tests.conftest import one_problem, problems_of

LAMBDA_ARN = "arn:aws:lambda:eu-west-1:111111111111:function:core-records"
API_ARN = "arn:aws:execute-api:eu-west-1:111111111111:a1b2c3d4e5/prod/POST/records"


def tenant_with(auth: str) -> str:
    return (
        f"tenants:\n  - {{id: acme, prefix: a/, sink: {{url: 'https://core.example.com', auth: {auth}}}}}\n"
    )


NO_AUTH_FIX = (
    "add 'auth: {type: bearer, secret: <Secrets Manager secret name or ARN>}' to the tenant's sink or to defaults "
    "(or 'type: sigv4', docs/configuration.md); 'auth: {type: none}' only to the tenant's own sink, if its core "
    "system takes no credentials"
)
NONE_IN_DEFAULTS = (
    "defaults: field 'sink.auth' = {'type': 'none'}: is never inherited: a tenant that leaves its auth out would "
    "run without credentials by accident%s; write 'auth: {type: none}' in the sink of each tenant whose core "
    "system takes no credentials, and remove it from defaults (a bearer or sigv4 auth may stay there); or, to let "
    "every tenant that leaves its auth out run without credentials on purpose, write 'auth: {type: none, "
    "inherited: true}' in defaults"
)


def test_fails_when_a_tenant_has_no_auth_anywhere():
    assert one_problem("tenants:\n  - {id: acme, prefix: a/, sink: {url: 'https://core.example.com'}}\n") == (
        f"tenant 'acme': field 'sink.auth' = (missing): is required; {NO_AUTH_FIX}"
    )


def test_fails_when_a_tenant_with_its_own_url_has_no_auth_and_defaults_have_none_either():
    """GIVEN defaults with a url and no auth, a tenant with its own url and no auth: it fails, by name."""
    assert problems_of(
        "defaults: {sink: {url: 'https://core.example.com'}}\n"
        "tenants:\n  - {id: acme, prefix: a/, sink: {auth: {type: none}}}\n"
        "  - {id: beta, prefix: b/, sink: {url: 'https://beta-core.example.com'}}\n"
    ) == [f"tenant 'beta': field 'sink.auth' = (missing): is required; {NO_AUTH_FIX}"]


def test_fails_when_defaults_give_auth_none_naming_the_tenants_that_would_inherit_it():
    """GIVEN `auth: {type: none}` in defaults (what the shipped file once did) and a tenant with
    its own url and no auth WHEN validated THEN refused once, on defaults, naming the tenants that
    would have run without credentials; a tenant with its own auth is not named."""
    assert problems_of(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: none}}}\n"
        "tenants:\n  - {id: acme, prefix: a/, sink: {url: 'https://acme-core.example.com'}}\n"
        "  - {id: beta, prefix: b/, sink: {auth: {type: bearer, secret: core/beta/token}}}\n"
        "  - {id: gamma, prefix: c/}\n"
    ) == [NONE_IN_DEFAULTS % " (tenants 'acme', 'gamma' would inherit it)"]


def test_fails_when_defaults_give_auth_none_even_if_every_tenant_has_its_own_and_lists_other_problems():
    """The refusal does not depend on who inherits it (the next tenant added would), and the
    tenants' other problems are listed in the same run."""
    assert problems_of(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: none}}}\n"
        "tenants:\n  - {id: acme, prefix: a/, sink: {auth: {type: none}}, format: xml}\n"
    ) == [
        NONE_IN_DEFAULTS % "",
        "tenant 'acme': field 'format' = 'xml': is not one of 'csv' or 'jsonl'; use 'csv' (with a header row, the default) or 'jsonl'",
    ]


def test_fails_when_defaults_give_auth_none_to_many_tenants_naming_five():
    tenants = "".join(f"  - {{id: t{i}, prefix: t{i}/}}\n" for i in range(8))
    assert problems_of(
        f"defaults: {{sink: {{url: 'https://core.example.com', auth: {{type: none}}}}}}\ntenants:\n{tenants}"
    ) == [NONE_IN_DEFAULTS % " (tenants 't0', 't1', 't2', 't3', 't4' and 3 more would inherit it)"]


def test_none_is_accepted_on_the_tenant_and_a_bearer_default_is_inherited():
    config = parse_config(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: bearer, secret: core/shared/token}}}\n"
        "tenants:\n  - {id: acme, prefix: a/, sink: {auth: {type: none}}}\n"
        "  - {id: beta, prefix: b/}\n"
    )
    acme, beta = config.tenants
    # sink merges key by key: acme keeps the default url and replaces auth whole
    assert acme.sink.url == "https://core.example.com"
    assert acme.sink.auth == NoAuth(type="none")
    assert beta.sink.auth == BearerAuth(type="bearer", secret="core/shared/token", cache_seconds=300)


def test_bearer_accepts_a_full_secret_arn_and_a_cache_time():
    arn = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:core/acme/token-AbC123"
    auth = (
        parse_config(tenant_with(f"{{type: bearer, secret: '{arn}', cache_seconds: 60}}"))
        .tenants[0]
        .sink.auth
    )
    assert auth == BearerAuth(type="bearer", secret=arn, cache_seconds=60)


def test_sigv4_accepts_an_api_method_arn_and_a_function_arn():
    api = parse_config(
        tenant_with(f"{{type: sigv4, service: execute-api, region: eu-west-1, invoke_arn: '{API_ARN}'}}")
    )
    function = parse_config(
        tenant_with(f"{{type: sigv4, service: lambda, region: eu-west-1, invoke_arn: '{LAMBDA_ARN}'}}")
    )
    assert api.tenants[0].sink.auth == SigV4Auth(
        type="sigv4", service="execute-api", region="eu-west-1", invoke_arn=API_ARN
    )
    assert function.tenants[0].sink.auth.invoke_arn == LAMBDA_ARN


def test_fails_when_auth_has_no_type():
    assert one_problem(tenant_with("{secret: core/acme/token}")) == (
        "tenant 'acme': field 'sink.auth.type' = (missing): is required; use 'none', 'bearer' or 'sigv4'"
    )


def test_fails_when_the_auth_type_is_unknown():
    assert one_problem(tenant_with("{type: basic}")) == (
        "tenant 'acme': field 'sink.auth.type' = 'basic': is not one of 'none', 'bearer', 'sigv4'; "
        "use 'none', 'bearer' or 'sigv4'"
    )


def test_fails_when_auth_is_a_word_not_a_mapping():
    assert one_problem(tenant_with("none")).startswith(
        "tenant 'acme': field 'sink.auth' = 'none': is not a mapping; add 'auth: {type: bearer, "
    )


def test_fails_when_bearer_has_no_secret():
    assert one_problem(tenant_with("{type: bearer}")) == (
        "tenant 'acme': field 'sink.auth.secret' = (missing): is required; use the secret's name "
        "(e.g. 'core/acme/token') or its full ARN ('arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf')"
    )


def test_fails_when_the_secret_is_an_arn_of_something_else_and_a_key_is_misspelt():
    assert problems_of(
        tenant_with("{type: bearer, secret: 'arn:aws:s3:::bucket/token', cach_seconds: 60}")
    ) == [
        "tenant 'acme': field 'sink.auth.secret' = 'arn:aws:s3:::bucket/token': is an ARN, but not the full ARN "
        "of a Secrets Manager secret; use the secret's name (e.g. 'core/acme/token') or its full ARN "
        "('arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf')",
        "tenant 'acme': field 'sink.auth.cach_seconds' = 60: unknown key; remove it or fix its spelling "
        "(did you mean 'cache_seconds'?)",
    ]


def test_fails_when_the_secret_name_has_a_space_and_the_cache_is_too_long():
    assert problems_of(tenant_with("{type: bearer, secret: 'core token', cache_seconds: 7200}")) == [
        "tenant 'acme': field 'sink.auth.secret' = 'core token': is not a Secrets Manager secret name; use the "
        "secret's name (e.g. 'core/acme/token') or its full ARN "
        "('arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf')",
        "tenant 'acme': field 'sink.auth.cache_seconds' = 7200: is more than 3600; use a whole number of seconds "
        "from 1 to 3600 (default 300)",
    ]


def test_fails_when_a_bad_default_auth_is_blamed_on_defaults_once():
    assert problems_of(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: bearer, secret: 'a b'}}}\n"
        "tenants:\n  - {id: acme, prefix: a/}\n  - {id: beta, prefix: b/}\n"
    ) == [
        "defaults: field 'sink.auth.secret' = 'a b': is not a Secrets Manager secret name; use the secret's name "
        "(e.g. 'core/acme/token') or its full ARN ('arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf')"
    ]


INVOKE_FIX = (
    "use the API's method ARN 'arn:aws:execute-api:<region>:<account>:<api id>/<stage>/<METHOD>/<path>' "
    "(service execute-api) or the function's ARN 'arn:aws:lambda:<region>:<account>:function:<name>' "
    "(service lambda), without wildcards"
)


def test_fails_when_the_sigv4_invoke_arn_has_a_wildcard():
    wild = "arn:aws:execute-api:eu-west-1:111111111111:a1b2c3d4e5/prod/*/records"
    assert one_problem(
        tenant_with(f"{{type: sigv4, service: execute-api, region: eu-west-1, invoke_arn: '{wild}'}}")
    ) == (
        f"tenant 'acme': field 'sink.auth.invoke_arn' = '{wild}': has a wildcard: the register function is granted "
        f"exactly this ARN; {INVOKE_FIX}"
    )


def test_fails_when_the_sigv4_invoke_arn_is_of_the_other_service_or_region():
    assert one_problem(
        tenant_with(f"{{type: sigv4, service: execute-api, region: eu-west-1, invoke_arn: '{LAMBDA_ARN}'}}")
    ) == (
        f"tenant 'acme': field 'sink.auth.invoke_arn' = '{LAMBDA_ARN}': is not an ARN that service 'execute-api' "
        f"invokes; {INVOKE_FIX}"
    )
    assert one_problem(
        tenant_with(f"{{type: sigv4, service: lambda, region: us-east-1, invoke_arn: '{LAMBDA_ARN}'}}")
    ) == (
        f"tenant 'acme': field 'sink.auth.invoke_arn' = '{LAMBDA_ARN}': is in Region 'eu-west-1', not "
        f"sink.auth.region 'us-east-1'; {INVOKE_FIX}"
    )


def test_fails_when_sigv4_names_a_bad_region_and_service_and_no_arn():
    assert problems_of(tenant_with("{type: sigv4, service: s3, region: Europe}")) == [
        "tenant 'acme': field 'sink.auth.service' = 's3': is not one of 'execute-api' or 'lambda'; use "
        "'execute-api' (API Gateway) or 'lambda' (a Lambda function URL)",
        "tenant 'acme': field 'sink.auth.region' = 'Europe': is not an AWS Region code; use the core system's "
        "Region code, such as 'eu-west-1'",
        f"tenant 'acme': field 'sink.auth.invoke_arn' = (missing): is required; {INVOKE_FIX}",
    ]


def test_the_auth_models_are_the_contracts_auth_types():
    """Each `sink.auth` model's `type` tag is one of the contract's `SinkAuthType`, and every one
    has its model: the enumeration is the contract's, the models only pick their member."""
    import typing

    from lambdas import contract
    from pipeline_constructs.config import SinkAuth

    members = typing.get_args(typing.get_args(SinkAuth)[0])
    tags = [tag for member in members for tag in typing.get_args(member.model_fields["type"].annotation)]
    assert tags == list(contract.SINK_AUTH_TYPES)
