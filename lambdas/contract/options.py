"""The closed choices of the contract, each declared once as a `Literal`.

The type alias is what a field or a config model is annotated with; the tuple of its values,
taken from the alias, is what code iterates or checks against. The functions' environment
(`lambdas.contract.env`) checks a `Literal`-typed field against the alias's values.
"""

from __future__ import annotations

import typing
from typing import Literal

#: What follows a failed, timed-out or aborted file: `halt`: nothing of the tenant starts until
#: it is resumed or skipped; `continue`: the next file starts.
OnFailure = Literal["halt", "continue"]
ON_FAILURE: tuple[OnFailure, ...] = typing.get_args(OnFailure)

#: How a tenant's files are put in order: by their arrival in the FIFO queue, or by a sequence
#: number in their key names (the queue is then a standard queue; see `sequence_of`).
Ordering = Literal["arrival", "key_sequence"]
ORDERINGS: tuple[Ordering, ...] = typing.get_args(Ordering)

#: The formats of a tenant's files.
FileFormat = Literal["csv", "jsonl"]
FORMATS: tuple[FileFormat, ...] = typing.get_args(FileFormat)

#: `process`: a byte-identical re-upload is processed again; `skip`: it is recorded as a
#: duplicate of the processed file, nothing sent (docs/design.md §4.5).
DuplicateFiles = Literal["process", "skip"]
DUPLICATE_FILES: tuple[DuplicateFiles, ...] = typing.get_args(DuplicateFiles)

#: How register authenticates to the core system (`sink.auth.type`): nothing, a bearer token
#: read from a Secrets Manager secret, or an AWS Signature Version 4 of each request.
SinkAuthType = Literal["none", "bearer", "sigv4"]
SINK_AUTH_TYPES: tuple[SinkAuthType, ...] = typing.get_args(SinkAuthType)

#: The services a sigv4 sink is signed for: API Gateway (IAM authorization), a Lambda function URL.
Sigv4Service = Literal["execute-api", "lambda"]
SIGV4_SERVICES: tuple[Sigv4Service, ...] = typing.get_args(Sigv4Service)

#: The actions of the completion entry point.
CompletionAction = Literal["waiting", "confirm", "reject", "heartbeat"]
COMPLETION_ACTIONS: tuple[CompletionAction, ...] = typing.get_args(CompletionAction)

#: The kinds of a tenant pipeline's functions (`{kind}` in names): each names its log group,
#: error metric filter and error-log alarm.
FunctionKind = Literal["controller", "split", "register", "closer", "completion"]
FUNCTION_KINDS: tuple[FunctionKind, ...] = typing.get_args(FunctionKind)

#: The parameters of `SHARED_PARAMETER`: the ledger table's name, the alarm topic's ARN, its key's ARN.
SharedParameterName = Literal["ledger-table-name", "alarm-topic-arn", "alarm-topic-key-arn"]
SHARED_PARAMETERS: tuple[SharedParameterName, ...] = typing.get_args(SharedParameterName)
