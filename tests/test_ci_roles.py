"""ci/github-oidc-roles.yaml: the GitHub OIDC provider and the two roles of the workflows.

The template is evaluated here as IAM would for the few things it holds: its intrinsic functions
are resolved for a given set of parameters, a GitHub token's claims are checked against each
role's trust policy (StringEquals, StringLike), and an `sts:AssumeRole` on a role ARN against
each role's policy. Each property is a function that returns the problems it finds: empty for the
template, and not empty for a template with the mistake it guards against (the mutation tests
at the end)."""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from collections.abc import Callable

import pytest
import yaml

from tests.conftest import ROOT, cfn_lint_findings

TEMPLATE_PATH = ROOT / "ci" / "github-oidc-roles.yaml"
WORKFLOWS = ROOT / ".github" / "workflows"
ACCOUNT, REGION, PARTITION = "111111111111", "eu-west-1", "aws"
REPO = "acme/ordered-ingest"
PROVIDER = f"arn:aws:iam::{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com"
AUD, SUB = "token.actions.githubusercontent.com:aud", "token.actions.githubusercontent.com:sub"


def load_template() -> dict:
    from cfnlint.decode import decode_str

    template, problems = decode_str(TEMPLATE_PATH.read_text())
    assert not problems, problems
    return json.loads(json.dumps(template))  # plain dicts: mutations deep-copy them


TEMPLATE = load_template()


# --- a small evaluator: the intrinsic functions this template uses ------------------------

NO_VALUE = object()  # Ref AWS::NoValue: the list item or key is left out


def resolve(node, template: dict, parameters: dict[str, str]):
    """The value of `node` once deployed with `parameters` (defaults for the others)."""
    values = {
        name: spec["Default"].split(",") if spec["Type"] == "CommaDelimitedList" else spec.get("Default", "")
        for name, spec in template["Parameters"].items()
    }
    values.update(parameters)
    values.update({"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": PARTITION})

    def condition(name: str) -> bool:
        return bool(value(template["Conditions"][name]))

    def ref(name: str):
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in values:
            return values[name]
        assert template["Resources"][name]["Type"] == "AWS::IAM::OIDCProvider", name
        return PROVIDER  # Ref of an OIDC provider is its ARN

    def value(item):
        if isinstance(item, list):
            return [v for v in map(value, item) if v is not NO_VALUE]
        if not isinstance(item, dict):
            return item
        if len(item) == 1:
            ((key, arg),) = item.items()
            if key == "Ref":
                return ref(arg)
            if key == "Fn::Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], value(arg[1]))
                return re.sub(r"\$\{([\w:]+)\}", lambda m: extra.get(m[1]) or ref(m[1]), text)
            if key == "Fn::If":
                return value(arg[1] if condition(arg[0]) else arg[2])
            if key == "Fn::GetAtt":
                return f"arn:aws:iam::{ACCOUNT}:role/{arg[0]}-generated"
            if key == "Fn::Equals":
                return value(arg[0]) == value(arg[1])
            if key == "Fn::Not":
                return not value(arg[0])
            if key == "Fn::Join":
                return arg[0].join(value(arg[1]))
            assert not key.startswith("Fn::"), f"the evaluator does not know {key}"
        return {k: v for k, v in ((k, value(v)) for k, v in item.items()) if v is not NO_VALUE}

    return value(node)


def created(template: dict, parameters: dict[str, str]) -> dict[str, dict]:
    """The resources that are created with `parameters` (their Condition holds)."""
    return {
        name: resolve(resource, template, parameters)
        for name, resource in template["Resources"].items()
        if "Condition" not in resource
        or resolve({"Fn::If": [resource["Condition"], True, False]}, template, parameters)
    }


def as_list(item) -> list:
    return item if isinstance(item, list) else [item]


def may_assume_with_token(role: dict, claims: dict[str, str], provider: str = PROVIDER) -> bool:
    """Whether a GitHub token with these claims, from `provider`, may assume the role."""
    for statement in as_list(role["Properties"]["AssumeRolePolicyDocument"]["Statement"]):
        if statement["Effect"] != "Allow" or "sts:AssumeRoleWithWebIdentity" not in as_list(
            statement["Action"]
        ):
            continue
        if provider not in as_list(statement["Principal"].get("Federated", [])):
            continue
        if all(
            _condition_holds(operator, tests, claims)
            for operator, tests in statement.get("Condition", {}).items()
        ):
            return True
    return False


def _condition_holds(operator: str, tests: dict, claims: dict[str, str]) -> bool:
    match = {
        "StringEquals": lambda pattern, got: got == pattern,
        "StringLike": lambda pattern, got: fnmatch.fnmatchcase(got, pattern),
    }[operator]
    return all(
        key in claims and any(match(pattern, claims[key]) for pattern in as_list(patterns))
        for key, patterns in tests.items()
    )


def may(role: dict, action: str, resource: str) -> bool:
    """Whether the role's own policies allow `action` on `resource` (no Deny in this template);
    `aws:ResourceAccount` is the account of the resource's ARN."""
    context = {"aws:ResourceAccount": resource.split(":")[4]}
    for policy in role["Properties"].get("Policies", []):
        for statement in as_list(policy["PolicyDocument"]["Statement"]):
            assert statement["Effect"] == "Allow"
            if (
                any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(statement["Action"]))
                and any(fnmatch.fnmatchcase(resource, r) for r in as_list(statement["Resource"]))
                and all(
                    _condition_holds(operator, tests, context)
                    for operator, tests in statement.get("Condition", {}).items()
                )
            ):
                return True
    return False


def bootstrap_role(
    kind: str, account: str = ACCOUNT, region: str = REGION, qualifier: str = "hnb659fds"
) -> str:
    return f"arn:aws:iam::{account}:role/cdk-{qualifier}-{kind}-role-{account}-{region}"


def token(sub: str, aud: str = "sts.amazonaws.com") -> dict[str, str]:
    return {AUD: aud, SUB: sub}


# --- the properties -------------------------------------------------------------------------

#: (role, token sub claim, may assume) with GitHubRepository=REPO and the other defaults:
#: the claims GitHub puts in the tokens of pull-request.yml's diff job and deploy.yml's deploy job
#: (a job with an environment: repo:OWNER/REPO:environment:NAME; a pull_request event:
#: repo:OWNER/REPO:pull_request), and what must not pass.
TRUST_CASES = [
    ("DiffRole", f"repo:{REPO}:pull_request", True),
    ("DiffRole", f"repo:{REPO}:ref:refs/heads/main", False),
    ("DiffRole", f"repo:{REPO}:environment:production", False),
    ("DiffRole", f"repo:{REPO}-fork:pull_request", False),
    ("DiffRole", "repo:someone/ordered-ingest:pull_request", False),
    ("DeployRole", f"repo:{REPO}:environment:production", True),
    ("DeployRole", f"repo:{REPO}:pull_request", False),
    ("DeployRole", f"repo:{REPO}:ref:refs/heads/main", False),
    ("DeployRole", f"repo:{REPO}:environment:production-eu", False),
    ("DeployRole", f"repo:{REPO}:environment:staging", False),
    ("DeployRole", "repo:someone/ordered-ingest:environment:production", False),
]

#: (role, role ARN, may assume): the bootstrap roles of this account, in any Region.
PERMISSION_CASES = [
    ("DiffRole", bootstrap_role("lookup"), True),
    ("DiffRole", bootstrap_role("lookup", region="us-east-1"), True),
    ("DiffRole", bootstrap_role("deploy"), False),
    ("DiffRole", bootstrap_role("file-publishing"), False),
    ("DiffRole", bootstrap_role("image-publishing"), False),
    ("DiffRole", bootstrap_role("cfn-exec"), False),
    ("DeployRole", bootstrap_role("deploy"), True),
    ("DeployRole", bootstrap_role("file-publishing"), True),
    ("DeployRole", bootstrap_role("image-publishing"), True),
    ("DeployRole", bootstrap_role("lookup"), True),
    ("DeployRole", bootstrap_role("cfn-exec"), False),  # CloudFormation passes it, the CLI never assumes it
    ("DeployRole", bootstrap_role("deploy", account="222222222222"), False),
    ("DeployRole", bootstrap_role("deploy", qualifier="other"), False),
    ("DeployRole", f"arn:aws:iam::{ACCOUNT}:role/Admin", False),
    ("DiffRole", f"arn:aws:iam::{ACCOUNT}:role/Admin", False),
]


#: (role, role ARN, may assume) with TargetAccountIds=222222222222,333333333333: the same bootstrap
#: roles in those accounts too, and still nothing else.
TARGETS = ["222222222222", "333333333333"]
TARGET_CASES = [
    ("DiffRole", bootstrap_role("lookup", account="222222222222"), True),
    ("DiffRole", bootstrap_role("lookup", account="333333333333", region="us-east-1"), True),
    ("DiffRole", bootstrap_role("deploy", account="222222222222"), False),
    ("DiffRole", bootstrap_role("lookup", account="444444444444"), False),
    ("DiffRole", bootstrap_role("lookup"), True),
    ("DeployRole", bootstrap_role("deploy", account="222222222222"), True),
    ("DeployRole", bootstrap_role("file-publishing", account="333333333333"), True),
    ("DeployRole", bootstrap_role("image-publishing", account="333333333333"), True),
    ("DeployRole", bootstrap_role("lookup", account="222222222222"), True),
    ("DeployRole", bootstrap_role("cfn-exec", account="222222222222"), False),
    ("DeployRole", bootstrap_role("deploy", account="444444444444"), False),
    ("DeployRole", "arn:aws:iam::222222222222:role/Admin", False),
    ("DeployRole", bootstrap_role("deploy"), True),
]


def trust_problems(template: dict) -> list[str]:
    roles = created(template, {"GitHubRepository": REPO})
    problems = [
        f"{role}: a token with sub {sub!r} {'may not' if expected else 'may'} assume it"
        for role, sub, expected in TRUST_CASES
        if may_assume_with_token(roles[role], token(sub)) != expected
    ]
    for role, sub, expected in TRUST_CASES:
        if expected and may_assume_with_token(roles[role], token(sub, aud="https://github.com/acme")):
            problems.append(f"{role}: a token for another audience may assume it")
        if expected and may_assume_with_token(roles[role], {SUB: sub}):
            problems.append(f"{role}: a token without an audience may assume it")
    return problems


def permission_problems(template: dict) -> list[str]:
    roles = created(template, {"GitHubRepository": REPO})
    problems = [
        f"{role}: sts:AssumeRole on {arn} is {'denied' if expected else 'allowed'}"
        for role, arn, expected in PERMISSION_CASES
        if may(roles[role], "sts:AssumeRole", arn) != expected
    ]
    with_targets = created(template, {"GitHubRepository": REPO, "TargetAccountIds": TARGETS})
    problems += [
        f"{role} (targets): sts:AssumeRole on {arn} is {'denied' if expected else 'allowed'}"
        for role, arn, expected in TARGET_CASES
        if may(with_targets[role], "sts:AssumeRole", arn) != expected
    ]
    for name, role in roles.items():
        if role["Type"] == "AWS::IAM::Role":
            actions = {
                a
                for policy in role["Properties"].get("Policies", [])
                for s in as_list(policy["PolicyDocument"]["Statement"])
                for a in as_list(s["Action"])
            }
            if actions != {"sts:AssumeRole"}:
                problems.append(f"{name}: may do {sorted(actions)}, not only sts:AssumeRole")
            if role["Properties"].get("ManagedPolicyArns"):
                problems.append(f"{name}: has managed policies {role['Properties']['ManagedPolicyArns']}")
    return problems


def wildcard_problems(template: dict) -> list[str]:
    """No action with a wildcard; every resource names a bootstrap role of this account, or of any
    account only under a condition that lists the target accounts exactly."""
    problems = []
    for name, role in created(template, {"GitHubRepository": REPO, "TargetAccountIds": TARGETS}).items():
        for policy in role["Properties"].get("Policies", []):
            for statement in as_list(policy["PolicyDocument"]["Statement"]):
                problems += [
                    f"{name}: action {a!r}" for a in as_list(statement["Action"]) if "*" in a or "?" in a
                ]
                pinned = statement.get("Condition") == {"StringEquals": {"aws:ResourceAccount": TARGETS}}
                problems += [
                    f"{name}: resource {r!r}"
                    for r in as_list(statement["Resource"])
                    if not r.startswith(f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-")
                    and not (pinned and r.startswith("arn:aws:iam::*:role/cdk-hnb659fds-"))
                ]
    return problems


def unused_parameters(template: dict) -> list[str]:
    text = json.dumps({key: value for key, value in template.items() if key != "Parameters"})
    return [
        name
        for name in template["Parameters"]
        if f'"Ref": "{name}"' not in text and "${" + name + "}" not in text
    ]


# --- the template ---------------------------------------------------------------------------


def test_cfn_lint_finds_no_error_and_no_warning():
    assert cfn_lint_findings(TEMPLATE_PATH.read_text(), ignored=()) == []  # hand-written: W3005 counts


def test_cfn_lint_reports_a_broken_template():
    broken = TEMPLATE_PATH.read_text().replace("MaxSessionDuration: 7200", "MaxSessionDuration: 86400")
    assert [finding.split()[0] for finding in cfn_lint_findings(broken, ignored=())] == ["E3034"]


def test_only_the_workflows_tokens_may_assume_each_role():
    assert trust_problems(TEMPLATE) == []


def test_each_role_may_assume_only_its_bootstrap_roles():
    assert permission_problems(TEMPLATE) == []


def test_no_wildcard_action_and_every_resource_a_bootstrap_role_of_this_account():
    assert wildcard_problems(TEMPLATE) == []


def test_every_parameter_is_used():
    assert unused_parameters(TEMPLATE) == []


def test_the_parameters_change_who_may_assume_and_what():
    roles = created(
        TEMPLATE, {"GitHubRepository": "other/repo", "DeployEnvironment": "live", "CdkQualifier": "custom"}
    )
    assert may_assume_with_token(roles["DiffRole"], token("repo:other/repo:pull_request"))
    assert not may_assume_with_token(roles["DiffRole"], token(f"repo:{REPO}:pull_request"))
    assert may_assume_with_token(roles["DeployRole"], token("repo:other/repo:environment:live"))
    assert not may_assume_with_token(roles["DeployRole"], token("repo:other/repo:environment:production"))
    assert may(roles["DeployRole"], "sts:AssumeRole", bootstrap_role("deploy", qualifier="custom"))
    assert not may(roles["DeployRole"], "sts:AssumeRole", bootstrap_role("deploy"))
    assert may(roles["DiffRole"], "sts:AssumeRole", bootstrap_role("lookup", qualifier="custom"))


def test_creates_the_provider_unless_one_is_given():
    # GIVEN no provider ARN: the template creates GitHub's, for the audience sts.amazonaws.com
    resources = created(TEMPLATE, {"GitHubRepository": REPO})
    provider = resources["GitHubOidcProvider"]["Properties"]
    assert provider == {
        "Url": "https://token.actions.githubusercontent.com",
        "ClientIdList": ["sts.amazonaws.com"],
    }
    assert resolve(TEMPLATE["Outputs"]["OidcProviderArn"]["Value"], TEMPLATE, {}) == PROVIDER
    # GIVEN the account's existing provider: none is created, and the roles trust that one
    existing = "arn:aws-us-gov:iam::111111111111:oidc-provider/token.actions.githubusercontent.com"
    assert re.fullmatch(TEMPLATE["Parameters"]["ExistingOidcProviderArn"]["AllowedPattern"], existing)
    resources = created(TEMPLATE, {"GitHubRepository": REPO, "ExistingOidcProviderArn": existing})
    assert "GitHubOidcProvider" not in resources
    sub = f"repo:{REPO}:pull_request"
    for name in ("DiffRole", "DeployRole"):
        assert resources[name]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
            "Federated": existing
        }
    assert may_assume_with_token(resources["DiffRole"], token(sub), provider=existing)
    assert not may_assume_with_token(resources["DiffRole"], token(sub), provider=PROVIDER)


def test_parliament_finds_only_that_the_roles_get_credentials():
    from tools.iam_lint import lint_document
    from tools.iam_policies import PolicyDocument

    roles = created(TEMPLATE, {"GitHubRepository": REPO})
    findings = [
        (finding.policy, finding.issue, finding.detail)
        for name in ("DiffRole", "DeployRole")
        for policy in roles[name]["Properties"]["Policies"]
        for finding in lint_document(
            PolicyDocument("ci", name, "AWS::IAM::Role", "identity", policy["PolicyDocument"], roles=(name,)),
            ACCOUNT,
        )
    ]
    # Getting credentials of the bootstrap roles is what both roles are for; no resource mismatch,
    # no unknown action, no escalation. (parliament's checks of trust policies do not apply to
    # web-identity trust: it reports a missing Resource and an unknown federation source.)
    assert findings == [
        (f"ci/{name}", "CREDENTIALS_EXPOSURE", '{"actions": ["sts:assumerole"]}')
        for name in ("DiffRole", "DeployRole")
    ]


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("GitHubRepository", "acme/ordered-ingest", True),
        ("GitHubRepository", "acme/ordered.ingest_2", True),
        ("GitHubRepository", "acme", False),
        ("GitHubRepository", "acme/*", False),
        ("GitHubRepository", "acme/repo:ref:refs/heads/main", False),
        ("DeployEnvironment", "production", True),
        ("DeployEnvironment", "*", False),
        ("ExistingOidcProviderArn", "", True),
        ("ExistingOidcProviderArn", PROVIDER, True),
        ("ExistingOidcProviderArn", "arn:aws:iam::111111111111:oidc-provider/accounts.google.com", False),
        ("CdkQualifier", "hnb659fds", True),
        ("CdkQualifier", "*", False),
    ],
)
def test_a_parameter_value_that_would_widen_a_condition_is_refused(name, value, valid):
    # CloudFormation applies AllowedPattern to the whole value
    assert bool(re.fullmatch(TEMPLATE["Parameters"][name]["AllowedPattern"], value)) is valid


def test_the_outputs_are_the_role_arns():
    outputs = TEMPLATE["Outputs"]
    assert outputs["DiffRoleArn"]["Value"] == {"Fn::GetAtt": ["DiffRole", "Arn"]}
    assert outputs["DeployRoleArn"]["Value"] == {"Fn::GetAtt": ["DeployRole", "Arn"]}


# --- the template matches the workflows -----------------------------------------------------


def load_workflow(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key `on` as true
    return workflow


def credentials_step(job: dict) -> dict:
    (step,) = [
        s for s in job["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@")
    ]
    return step["with"]


def test_the_diff_job_gets_the_token_the_diff_role_trusts():
    workflow = load_workflow("pull-request.yml")
    diff = workflow["jobs"]["diff"]
    # a pull_request event and no environment: GitHub's sub claim is repo:OWNER/REPO:pull_request
    assert list(workflow["on"]) == ["pull_request"] and "environment" not in diff
    assert credentials_step(diff)["role-to-assume"] == "${{ vars.AWS_DIFF_ROLE_ARN }}"


def test_the_deploy_job_gets_the_token_the_deploy_role_trusts_for_as_long_as_it_runs():
    deploy = load_workflow("deploy.yml")["jobs"]["deploy"]
    # a job in an environment: GitHub's sub claim is repo:OWNER/REPO:environment:<name>
    assert deploy["environment"] == TEMPLATE["Parameters"]["DeployEnvironment"]["Default"]
    credentials = credentials_step(deploy)
    assert credentials["role-to-assume"] == "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
    session = int(credentials["role-duration-seconds"])
    assert (
        deploy["timeout-minutes"] * 60
        <= session
        <= TEMPLATE["Resources"]["DeployRole"]["Properties"]["MaxSessionDuration"]
    )


# --- mutations: each property fails on the mistake it guards against ------------------------


def mutate(change: Callable[[dict], None]) -> dict:
    template = copy.deepcopy(TEMPLATE)
    change(template)
    return template


def role(template: dict, name: str) -> dict:
    return template["Resources"][name]["Properties"]


def trust(template: dict, name: str) -> dict:
    return role(template, name)["AssumeRolePolicyDocument"]["Statement"][0]


def policy(template: dict, name: str) -> dict:
    return role(template, name)["Policies"][0]["PolicyDocument"]["Statement"][0]


def _sub_like_any_ref(t):
    conditions = trust(t, "DeployRole")["Condition"]
    sub = conditions["StringEquals"].pop(SUB)
    conditions["StringLike"] = {
        SUB: {"Fn::Sub": sub["Fn::Sub"].replace(":environment:${DeployEnvironment}", ":*")}
    }


def _qualifier_written_out(t):
    resources = json.loads(json.dumps(t["Resources"]).replace("${CdkQualifier}", "hnb659fds"))
    t["Resources"] = resources


MUTATIONS = [
    (
        "the deploy role trusts any ref of the repository",
        _sub_like_any_ref,
        trust_problems,
        "DeployRole: a token with sub 'repo:acme/ordered-ingest:pull_request' may assume it",
    ),
    (
        "no audience condition",
        lambda t: trust(t, "DiffRole")["Condition"]["StringEquals"].pop(AUD),
        trust_problems,
        "DiffRole: a token for another audience may assume it",
    ),
    (
        "the diff role trusts the environment's token",
        lambda t: trust(t, "DiffRole")["Condition"]["StringEquals"].update(
            {
                SUB: [
                    {"Fn::Sub": "repo:${GitHubRepository}:pull_request"},
                    {"Fn::Sub": "repo:${GitHubRepository}:environment:${DeployEnvironment}"},
                ]
            }
        ),
        trust_problems,
        "DiffRole: a token with sub 'repo:acme/ordered-ingest:environment:production' may assume it",
    ),
    (
        "the diff role may assume the deploy role",
        lambda t: policy(t, "DiffRole").update(
            {
                "Resource": {
                    "Fn::Sub": policy(t, "DiffRole")["Resource"]["Fn::Sub"].replace("lookup-role", "*-role")
                }
            }
        ),
        permission_problems,
        f"DiffRole: sts:AssumeRole on {bootstrap_role('deploy')} is allowed",
    ),
    (
        "the deploy role may assume any role of the account",
        lambda t: policy(t, "DeployRole").update(
            {"Resource": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/*"}}
        ),
        permission_problems,
        f"DeployRole: sts:AssumeRole on {bootstrap_role('cfn-exec')} is allowed",
    ),
    (
        "the diff role reads CloudFormation itself",
        lambda t: policy(t, "DiffRole").update({"Action": ["sts:AssumeRole", "cloudformation:GetTemplate"]}),
        permission_problems,
        "DiffRole: may do ['cloudformation:GetTemplate', 'sts:AssumeRole'], not only sts:AssumeRole",
    ),
    (
        "the target accounts' statement without its account condition",
        lambda t: role(t, "DeployRole")["Policies"][0]["PolicyDocument"]["Statement"][1]["Fn::If"][1].pop(
            "Condition"
        ),
        permission_problems,
        f"DeployRole (targets): sts:AssumeRole on {bootstrap_role('deploy', account='444444444444')} is allowed",
    ),
    (
        "the target accounts' statement in any account",
        lambda t: role(t, "DiffRole")["Policies"][0]["PolicyDocument"]["Statement"][1]["Fn::If"][1].pop(
            "Condition"
        ),
        wildcard_problems,
        "DiffRole: resource 'arn:aws:iam::*:role/cdk-hnb659fds-lookup-role-*'",
    ),
    (
        "a wildcard action",
        lambda t: policy(t, "DeployRole").update({"Action": "sts:*"}),
        wildcard_problems,
        "DeployRole: action 'sts:*'",
    ),
    (
        "a resource in any account",
        lambda t: policy(t, "DiffRole").update(
            {"Resource": "arn:aws:iam::*:role/cdk-hnb659fds-lookup-role-*"}
        ),
        wildcard_problems,
        "DiffRole: resource 'arn:aws:iam::*:role/cdk-hnb659fds-lookup-role-*'",
    ),
    (
        "a parameter nobody reads",
        lambda t: t["Parameters"].update({"Branch": {"Type": "String", "Default": "main"}}),
        unused_parameters,
        "Branch",
    ),
    ("the qualifier written out instead of read", _qualifier_written_out, unused_parameters, "CdkQualifier"),
]


@pytest.mark.parametrize(("mistake", "change", "check", "expected"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_property_fails_on_the_mistake_it_guards_against(mistake, change, check, expected):
    assert check(TEMPLATE) == []
    problems = check(mutate(change))
    assert expected in problems, problems


# --- the set-up doc matches the workflows and the template ----------------------------------

DOC = ROOT / "docs" / "development.md"


def doc_table(header: str) -> list[list[str]]:
    """The rows of the table of docs/development.md whose header row is `header`."""
    lines = [line.strip() for line in DOC.read_text().splitlines()]
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_variables_table_lists_exactly_the_variables_each_workflow_reads():
    used = {
        workflow.name: set(re.findall(r"\bvars\.([A-Za-z_][A-Za-z0-9_]*)", workflow.read_text()))
        for workflow in sorted(WORKFLOWS.glob("*.yml"))
    }
    documented: dict[str, set[str]] = {}
    for variable, value, used_by in doc_table("| variable | value | used by |"):
        name = variable.strip("`")
        documented[name] = set(re.findall(r"`([\w.-]+\.yml)`", used_by))
        # a role ARN comes from the template's output named in the row
        for output in re.findall(r"output `(\w+)`", value):
            assert output in TEMPLATE["Outputs"], (name, output)
        assert name not in {"AWS_DIFF_ROLE_ARN", "AWS_DEPLOY_ROLE_ARN"} or "output `" in value, name
    assert documented == {
        name: {w for w, names in used.items() if name in names} for name in set().union(*used.values())
    }


def test_the_parameters_table_lists_the_templates_parameters_and_defaults():
    rows = doc_table("| parameter | default | what |")
    documented = {name.strip("`"): default for name, default, _ in rows}
    assert set(documented) == set(TEMPLATE["Parameters"])
    for name, spec in TEMPLATE["Parameters"].items():
        if spec.get("Default"):
            assert documented[name] == f"`{spec['Default']}`", name
        else:
            assert "`" not in documented[name], name  # (required) or "empty: ..."
