"""The project as a package: each file one module object wherever it is imported."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys

from tests.conftest import ROOT, modules_loaded_twice

PACKAGES = ("lambdas", "pipeline_constructs", "ops", "local_runtime", "demo", "tools")
#: Every source file of the Lambda code, relative to `lambdas/` (its subpackages' too).
LAMBDA_FILES = sorted(
    path.relative_to(ROOT / "lambdas").as_posix() for path in (ROOT / "lambdas").rglob("*.py")
)
#: The top-level modules and subpackages of `lambdas` (`contract` is a package).
LAMBDA_MODULES = {file.split("/")[0].removesuffix(".py") for file in LAMBDA_FILES} - {"__init__"}
#: Every module name a file of `lambdas/` could be imported as bare, wherever it sits.
LAMBDA_BARE_NAMES = LAMBDA_MODULES | (
    {file.rsplit("/", 1)[-1].removesuffix(".py") for file in LAMBDA_FILES} - {"__init__"}
)


def _modules(package: str) -> list[str]:
    base = ROOT / package
    return [
        ".".join((package, *path.relative_to(base).with_suffix("").parts)).removesuffix(".__init__")
        for path in sorted(base.rglob("*.py"))
        if path.name != "__main__.py"
    ]


def test_importing_every_module_of_the_project_loads_each_file_once():
    """GIVEN every module of the product packages WHEN all are imported THEN no file of the project
    sits in sys.modules under two names (the Lambda code once loaded as `contract` beside
    `lambdas.contract`)."""
    for package in PACKAGES:
        for name in _modules(package):
            importlib.import_module(name)
    assert "lambdas.contract" in sys.modules
    assert modules_loaded_twice() == []


def test_the_check_names_a_file_loaded_under_a_second_name():
    """GIVEN lambdas/contract/__init__.py loaded once more as a top-level `contract` THEN the
    check names the file and both module names."""
    importlib.import_module("lambdas.contract")
    spec = importlib.util.spec_from_file_location("contract", ROOT / "lambdas" / "contract" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["contract"] = module
    try:
        spec.loader.exec_module(module)
        assert modules_loaded_twice() == ["lambdas/contract/__init__.py: contract, lambdas.contract"]
    finally:
        del sys.modules["contract"]


def test_the_lambda_code_imports_its_own_modules_by_their_package_name_only():
    """GIVEN each module of lambdas/ (its subpackages' too) THEN it imports the others by their
    absolute name, `lambdas.<module>` or `lambdas.contract.<module>`: never as top-level modules
    (which Lambda could not find: its handlers are `lambdas.<module>.handler`), never relative."""
    bare = []
    for file in LAMBDA_FILES:
        for node in ast.walk(ast.parse((ROOT / "lambdas" / file).read_text())):
            if isinstance(node, ast.Import):
                bare += [
                    f"{file}: import {a.name}"
                    for a in node.names
                    if a.name.split(".")[0] in LAMBDA_BARE_NAMES
                ]
            elif isinstance(node, ast.ImportFrom) and (
                node.level > 0 or (node.module or "").split(".")[0] in LAMBDA_BARE_NAMES
            ):
                bare.append(f"{file}: from {'.' * node.level}{node.module or ''} import ...")
    assert bare == []


def test_every_function_of_the_app_runs_a_handler_of_the_lambdas_package(synthesized):
    """GIVEN the synthesized default app THEN each pipeline function's handler is
    `lambdas.<module>.handler` of a module that exists, and its code asset holds the package as
    `lambdas/` and nothing beside it (what the handler path needs in /var/task), every file of
    it, its subpackages' (`lambdas/contract/`) too."""
    functions = [
        resource["Properties"]
        for template in synthesized.templates.values()
        for resource in template.get("Resources", {}).values()
        if resource["Type"] == "AWS::Lambda::Function"
    ]
    ours = [f for f in functions if f["Handler"].startswith("lambdas.")]
    assert ours and {f["Handler"].split(".")[1] for f in ours} <= LAMBDA_MODULES
    assert {f["Handler"].split(".")[2] for f in ours} == {"handler"}
    assert {f["Handler"] for f in functions} - {f["Handler"] for f in ours} <= {"index.handler"}  # CDK's own
    assets = {f["Code"]["S3Key"].removesuffix(".zip") for f in ours}
    for asset in assets:
        directory = synthesized.outdir / f"asset.{asset}"
        assert sorted(p.name for p in directory.iterdir()) == ["lambdas"]
        assert (
            sorted(
                p.relative_to(directory / "lambdas").as_posix() for p in (directory / "lambdas").rglob("*.py")
            )
            == LAMBDA_FILES
        )


def test_the_public_api_resolves_each_name_with_a_docstring_and_loads_no_cdk_for_the_config_model():
    """GIVEN `pipeline_constructs.__all__` THEN each name resolves to a documented object; and a
    fresh interpreter that imports the package and its config model has not loaded aws_cdk (whose
    import starts Node): `ops` imports the model."""
    import subprocess

    import pipeline_constructs

    assert {
        "TenantPipeline",
        "SharedResources",
        "SharedResourcesProps",
        "load_config",
        "DeployLimits",
    } <= set(pipeline_constructs.__all__)
    for name in pipeline_constructs.__all__:
        assert (getattr(pipeline_constructs, name).__doc__ or "").strip(), name
    probe = (
        "import sys, pipeline_constructs, pipeline_constructs.config, ops.discovery; "
        "print('aws_cdk' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_lambda_code_is_staged_in_a_directory_private_to_the_process():
    """GIVEN the staged asset THEN it sits in a directory only this user can write (mkdtemp), not
    at a name another user of a shared /tmp could plant first, and holds the package's files,
    its subpackages' too, and nothing else (no bytecode caches)."""
    from pipeline_constructs import functions

    root = functions.staged_package(functions.LAMBDA_SOURCE_DIR)
    assert root.stat().st_mode & 0o077 == 0
    staged, source = root / "lambdas", functions.LAMBDA_SOURCE_DIR
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == sorted(
        p.relative_to(source).as_posix() for p in source.rglob("*.py")
    )
