"""app.py in the project's environment, however `cdk` started it.

cdk.json runs `python3 app.py`, which outside `.venv/` is the machine's Python, without
aws-cdk-lib. `use_project_environment` runs app.py again with `.venv`'s Python (or, without
one, says in one line how to make it); a Python that already has aws-cdk-lib runs it as it
is. jsii's Node is the one `make setup` pins in `node_modules/` when it is there (the
machine's may be end-of-life and print a banner on every synth). `say_when_no_account` points
a `cdk diff` or `cdk deploy` without credentials to the offline diff. Standard library only:
it runs before any package of the app can be imported.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP_HINT = "run `make setup` first (creates .venv)"
NO_CREDENTIALS = (
    "no AWS credentials: `cdk synth` needs none, `cdk diff` and `cdk deploy` do; "
    "for an offline diff run `make diff`, to deploy set AWS_PROFILE"
)


def venv_python(venv: Path) -> Path:
    """The interpreter of a virtual environment, on POSIX or Windows."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def use_project_environment(argv: list[str] | None = None, root: Path = ROOT) -> None:
    """Return when this Python can run the app; else run `argv` (default: this script and its
    arguments) with `<root>/.venv`'s Python and exit with its code, or exit 1 with one line."""
    node_bin = root / "node_modules" / ".bin"
    if node_bin.is_dir():
        os.environ["PATH"] = f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    if importlib.util.find_spec("aws_cdk") is not None:
        return
    venv = root / ".venv"
    python = venv_python(venv)
    if not python.exists():
        sys.exit(f"aws-cdk-lib is not installed for {sys.executable}: {SETUP_HINT}")
    if Path(sys.prefix).resolve() == venv.resolve():  # .venv itself lacks it: do not start it again
        sys.exit(f"aws-cdk-lib is not installed in {venv}: {SETUP_HINT}")
    os.environ["PATH"] = f"{python.parent}{os.pathsep}{os.environ['PATH']}"
    command = [str(python), *(argv if argv is not None else sys.argv)]
    if os.name == "posix":
        os.execv(command[0], command)
    sys.exit(subprocess.call(command))


def say_when_no_account() -> None:
    """Print `NO_CREDENTIALS` on stderr when the CDK CLI runs the app without an account.

    The CLI gives the app `CDK_DEFAULT_ACCOUNT` only when it found credentials, and does not
    tell it the command: `cdk synth` without credentials prints the line too. Without the
    CLI (`python app.py`, the tools' own synths read no account) nothing is printed."""
    if os.environ.get("CDK_CLI_VERSION") and not os.environ.get("CDK_DEFAULT_ACCOUNT"):
        print(NO_CREDENTIALS, file=sys.stderr)
