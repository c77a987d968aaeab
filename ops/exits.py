"""The exit codes of `python -m ops` (the parser's epilog and docs/operations.md list them) and
the one-line messages for the failures every command shares: no credentials or Region, an
endpoint that does not answer as AWS does, any other AWS error.
"""

from __future__ import annotations

import sys

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.parsers import ResponseParserError

from ops import preflight

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOTHING_TO_DO, EXIT_CONFLICT, EXIT_NOT_FOUND = 0, 1, 2, 3, 4, 5
EXIT_LEFT_IN_DLQ = 6
EXIT_NOT_COMPLETED = 7
EXIT_DOES_NOT_FIT = 8
EXIT_HALTED = 9
EXIT_PRINCIPAL_NOT_READY = 10
EXIT_SECRET_NOT_READY = 11
EXIT_HOST_DOES_NOT_RESOLVE = 12
EXIT_NO_CREDENTIALS = 13
#: `preflight`'s code per kind of finding; with several kinds, the lowest code is the exit.
PREFLIGHT_EXITS = {
    preflight.QUOTA: EXIT_DOES_NOT_FIT,
    preflight.PRINCIPAL: EXIT_PRINCIPAL_NOT_READY,
    preflight.SECRET: EXIT_SECRET_NOT_READY,
    preflight.HOST: EXIT_HOST_DOES_NOT_RESOLVE,
}
#: What boto3 raises when it has no credentials or Region to work with.
CREDENTIAL_ERRORS = (NoCredentialsError, PartialCredentialsError, NoRegionError)

#: What `failed` calls an endpoint that does not answer as AWS does, by default and for `preflight`.
NOT_A_PIPELINE = "not an AWS endpoint or no ordered-ingest stacks there"
#: `preflight` reads account APIs (Lambda account settings, IAM, Service Quotas) a local run does not serve.
NO_ACCOUNT_APIS = (
    "not an AWS endpoint, or one without the account APIs preflight reads (a local run has no quotas)"
)


def no_credentials(error: Exception) -> int:
    """One line saying what to set, for every command: EXIT_NO_CREDENTIALS."""
    setting = (
        "set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and AWS_DEFAULT_REGION for the "
        "deployment's account (preflight: the target's)"
    )
    if isinstance(error, NoRegionError):
        # boto3 reads AWS_DEFAULT_REGION (or the profile's region), not AWS_REGION
        print(
            "ops: no AWS Region: set AWS_DEFAULT_REGION or give --region (preflight: or the target's region in "
            "the tenants file)",
            file=sys.stderr,
        )
    elif isinstance(error, PartialCredentialsError):
        print(f"ops: incomplete AWS credentials ({_first_line(error)}): {setting}", file=sys.stderr)
    else:
        print(f"ops: no AWS credentials: {setting}", file=sys.stderr)
    return EXIT_NO_CREDENTIALS


def failed(error: Exception, endpoint_url: str | None, what: str = NOT_A_PIPELINE) -> int:
    """Say in one line what failed: EXIT_NOT_FOUND for an endpoint that does not answer as AWS
    does (a web server's HTML page, an API it does not serve, nothing listening): `what` it is
    then; else EXIT_ERROR with the error."""
    if isinstance(error, CREDENTIAL_ERRORS):
        return no_credentials(error)
    where = endpoint_url or "the AWS endpoint"
    if isinstance(error, (EndpointConnectionError, ConnectionClosedError)):
        print(
            f"ops: {where}: nothing answers there (is the local pipeline still running? "
            "`python -m demo --serve` prints its endpoint)",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    # botocore names an error it could not read from the body by the bare HTTP status ("404").
    unreadable = (
        isinstance(error, ClientError) and str(error.response.get("Error", {}).get("Code", "")).isdigit()
    )
    if isinstance(error, ResponseParserError) or unreadable:
        print(
            f"ops: {where}: {what}; its answer is not an AWS API response (check --endpoint-url or --region)",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    print(f"ops: {type(error).__name__}: {_first_line(error)}", file=sys.stderr)
    return EXIT_ERROR


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""
