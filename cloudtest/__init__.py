"""The cloud test (`make cloud-test`, `python -m cloudtest`): the pipeline on a real AWS account,
checked by the same scenario that `make test` runs on the local runtime (docs/development.md,
"The cloud test")."""
