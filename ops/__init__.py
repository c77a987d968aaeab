"""`python -m ops`: the operator's CLI (status, resume, skip, replace, pause, ...), against AWS or the
local runtime. It runs the Lambda code's own protocol (`lambdas.ledger`, `lambdas.operations`), so what
an operator drives is what the functions run."""
