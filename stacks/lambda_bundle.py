"""The Lambda functions' code asset, built on this machine without Docker.

What goes in is decided by construction, not by a list to keep up to date: the first-party
modules the handlers reach through their imports (``functions/`` and the shared parts of
``voicewire/`` they use: protocols, chunker, speech link), and the third-party distributions
those modules import, installed for the Lambda platform (arm64, Python 3.12) by uv from wheels.
Nothing else: no speech server, no local stack, no onnxruntime, no tests. boto3 and botocore are
bundled too, rather than taken from the Lambda runtime: the runtime's version "depends on the
runtime version and your AWS Region" and changes under a deployed function (AWS recommends
packaging your own), and the tests ran the locked one.

Versions come from ``uv.lock`` (``uv export`` as constraints), so the bundle runs what the tests
ran. CDK calls ``LocalPythonBundling.try_bundle``; returning False would fall back to Docker.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from stacks.uv_lock import LockExportError, exported_requirements, uv_command

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = ("functions", "voicewire")
HANDLER_PACKAGE = "functions.handlers"


def handler_modules(root: Path = ROOT) -> tuple[str, ...]:
    """Every module of ``functions/handlers/``: each is a Lambda function's entry point (the
    stacks name ``functions.handlers.<name>.handler``), so the bundle holds them all. Read from
    the folder, not a list kept by hand: a list forgot ``listen`` once, and every ``listen`` on
    AWS failed with ``Runtime.ImportModuleError``."""
    folder = root.joinpath(*HANDLER_PACKAGE.split("."))
    return tuple(
        f"{HANDLER_PACKAGE}.{path.stem}"
        for path in sorted(folder.glob("*.py"))
        if path.name != "__init__.py"
    )


HANDLERS = handler_modules()
LAMBDA_PLATFORM = "aarch64-manylinux2014"  # arm64 functions: cheaper per GB-second than x86
LAMBDA_PYTHON = "3.12"
# Import name -> distribution to install (with the extras the functions need).
DISTRIBUTIONS = {
    "aws_lambda_powertools": "aws-lambda-powertools[parser]",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic-core",
    "jwt": "pyjwt",
    "smithy_http": "aws-sdk-sagemaker-runtime-http2[awscrt]",
    "smithy_core": "aws-sdk-sagemaker-runtime-http2[awscrt]",
    "smithy_aws_core": "aws-sdk-sagemaker-runtime-http2[awscrt]",
    "smithy_aws_event_stream": "aws-sdk-sagemaker-runtime-http2[awscrt]",
    "aws_sdk_sagemaker_runtime_http2": "aws-sdk-sagemaker-runtime-http2[awscrt]",
    "awscrt": "awscrt",
    "websockets": "websockets",
    "sentencex": "sentencex",
    "httpx": "httpx",
    "boto3": "boto3",
    "botocore": "botocore",
    "urllib3": "urllib3",
    "strands": "strands-agents",
    "tzdata": "tzdata",
}
# Data the functions read, beside their code: search_docs' default documents.
DATA_FILES = ("README.md", "docs/*.md")


class BundleError(RuntimeError):
    """The bundle could not be built (the message says what to do)."""


@dataclass
class Bundle:
    directory: Path
    modules: list[str]  # first-party modules copied
    distributions: list[str]  # what uv installed
    third_party_imports: set[str] = field(default_factory=set)

    def size_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.directory.rglob("*") if path.is_file())


def _module_path(module: str, root: Path = ROOT) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports_of(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (lazy imports included)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # submodules
    return names


def reachable_modules(
    entries: Iterable[str] = HANDLERS, root: Path = ROOT
) -> tuple[list[str], set[str]]:
    """The first-party modules reachable from ``entries`` (with their parent packages), and the
    top-level names of everything else they import."""
    seen: set[str] = set()
    outside: set[str] = set()
    pending = list(entries)
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        path = _module_path(module, root)
        if path is None:
            continue  # a name imported from a module, not a module
        seen.add(module)
        parts = module.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages
        for name in _imports_of(path, module):
            if name.split(".")[0] in FIRST_PARTY:
                pending.append(name)
            elif name:
                outside.add(name.split(".")[0])
    return sorted(seen), outside


def _stdlib(name: str) -> bool:
    return name in sys.stdlib_module_names or name == "__future__"


def requirements_for(third_party: set[str]) -> list[str]:
    """The distributions to install for these imports; a new import without a known
    distribution is an error here, not a missing module in production."""
    unknown = sorted(
        name for name in third_party if not _stdlib(name) and name not in DISTRIBUTIONS
    )
    if unknown:
        raise BundleError(
            f"the functions import {unknown}, which stacks/lambda_bundle.py does not know how "
            "to install: add them to DISTRIBUTIONS"
        )
    return sorted({DISTRIBUTIONS[name] for name in third_party if name in DISTRIBUTIONS})


def build_bundle(
    output: Path,
    platform: str = LAMBDA_PLATFORM,
    python_version: str = LAMBDA_PYTHON,
    root: Path = ROOT,
) -> Bundle:
    """Fill ``output`` with the functions' code and dependencies for ``platform``."""
    modules, third_party = reachable_modules(handler_modules(root), root=root)
    requirements = requirements_for(third_party)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="voicewire-bundle-") as scratch:
        constraints = Path(scratch) / "constraints.txt"
        try:
            constraints.write_text(exported_requirements(root))
        except LockExportError as error:
            raise BundleError(str(error)) from error
        installed = subprocess.run(
            [
                *uv_command(),
                "pip",
                "install",
                "--quiet",
                "--target",
                str(output),
                "--python-platform",
                platform,
                "--python-version",
                python_version,
                "--only-binary",
                ":all:",
                "--constraint",
                str(constraints),
                *requirements,
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if installed.returncode != 0:
            raise BundleError(f"uv pip install failed: {installed.stderr.strip()}")
    for module in modules:
        source = _module_path(module, root)
        assert source is not None
        target = output / source.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for pattern in DATA_FILES:
        for source in sorted(root.glob(pattern)):
            target = output / source.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for cache in output.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    return Bundle(output, modules, requirements, third_party)
