"""The agent image's build context for Bedrock AgentCore Runtime, staged on this machine.

The image (``functions/agentcore/Dockerfile``) is built by the CDK CLI at deploy time, from a
directory that holds exactly what it needs, decided by construction as for the Lambda bundle
(``stacks/lambda_bundle.py``): the first-party modules ``functions.agentcore`` reaches through
its imports, the distributions those modules import, and the docs search_docs reads. Not the
repository: no ``.venv``, no speech server, no tests, no ``cdk.out`` sent to the Docker daemon.

The pins come from ``uv.lock`` (``uv export``): ``requirements.txt`` names what the agent imports
at its locked version, ``constraints.txt`` holds every locked version, so what pip resolves
inside the image is what the tests ran. Staging needs uv and no network; the image's build (pip
downloading arm64 wheels) happens where Docker runs.

    uv run python -m stacks.agent_image DIRECTORY    # a context for ``docker buildx build``
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stacks.lambda_bundle import (
    DATA_FILES,
    DISTRIBUTIONS,
    ROOT,
    BundleError,
    reachable_modules,
)
from stacks.uv_lock import LockExportError, exported_requirements

AGENT_ENTRY = "functions.agentcore.__main__"  # the image's CMD: python -m functions.agentcore
DOCKERFILE = ROOT / "functions" / "agentcore" / "Dockerfile"
IMAGE_PLATFORM = "linux/arm64"  # AgentCore Runtime runs ARM64 containers only
# The Lambda bundle's import -> distribution map, plus the AgentCore app's own.
IMAGE_DISTRIBUTIONS: Mapping[str, str] = {
    **DISTRIBUTIONS,
    "bedrock_agentcore": "bedrock-agentcore",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
}
# Installed whatever the modules import: BedrockAgentCoreApp.run serves through uvicorn, which no
# module of ours names, and the app is a Starlette app.
SERVING = ("bedrock-agentcore", "starlette", "uvicorn")
REQUIREMENTS = "requirements.txt"
CONSTRAINTS = "constraints.txt"


@dataclass(frozen=True)
class StagedImage:
    directory: Path
    modules: list[str]  # first-party modules copied
    requirements: list[str]  # requirements.txt's lines: distribution[extras]==version


def _distribution_name(requirement: str) -> str:
    """``aws-lambda-powertools[parser]`` -> ``aws-lambda-powertools``, normalized (PEP 503)."""
    return re.sub(r"[-_.]+", "-", requirement.split("[")[0]).lower()


def locked_versions(constraints: str) -> dict[str, str]:
    """``uv export``'s ``name==version`` lines as {normalized name: version}."""
    versions = {}
    for line in constraints.splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if match:
            versions[_distribution_name(match.group(1))] = match.group(2)
    return versions


def image_requirements(third_party: Iterable[str], versions: Mapping[str, str]) -> list[str]:
    """The image's requirements: the distributions of these imports and ``SERVING``, each at its
    locked version; an import without a known distribution is an error here, not a missing
    module in a deployed session."""
    names = {name for name in third_party if name not in sys.stdlib_module_names}
    names.discard("__future__")
    unknown = sorted(names - set(IMAGE_DISTRIBUTIONS))
    if unknown:
        raise BundleError(
            f"the agent imports {unknown}, which stacks/agent_image.py does not know how to "
            "install: add them to IMAGE_DISTRIBUTIONS"
        )
    wanted = {IMAGE_DISTRIBUTIONS[name] for name in names} | set(SERVING)
    requirements = []
    for requirement in sorted(wanted):
        version = versions.get(_distribution_name(requirement))
        if version is None:
            raise BundleError(f"{requirement} is not in uv.lock: add it to pyproject.toml")
        requirements.append(f"{requirement}=={version}")
    return requirements


def exported_constraints(root: Path = ROOT) -> str:
    """Every locked distribution of the project's runtime dependencies, as pip constraints."""
    try:
        return exported_requirements(root)
    except LockExportError as error:
        raise BundleError(str(error)) from error


def _copy(source: Path, root: Path, output: Path) -> None:
    target = output / source.relative_to(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def stage_agent_image(output: Path, root: Path = ROOT) -> StagedImage:
    """Fill ``output`` (emptied first: a module no longer reached must not linger in the image)
    with the agent image's build context."""
    modules, third_party = reachable_modules([AGENT_ENTRY], root=root)
    if AGENT_ENTRY not in modules:
        raise BundleError(f"{AGENT_ENTRY} is missing: the image's command would not start")
    constraints = exported_constraints(root)
    requirements = image_requirements(third_party, locked_versions(constraints))
    if output.exists() and any(output.iterdir()):
        if not (output / CONSTRAINTS).is_file() or not (output / "Dockerfile").is_file():
            raise BundleError(
                f"{output} holds something else than a staged agent image: not emptying it"
            )
        shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / DOCKERFILE.relative_to(ROOT), output / "Dockerfile")
    (output / REQUIREMENTS).write_text("\n".join(requirements) + "\n")
    (output / CONSTRAINTS).write_text(constraints)
    for module in modules:
        base = root.joinpath(*module.split("."))
        module_file = base.with_suffix(".py")
        _copy(module_file if module_file.is_file() else base / "__init__.py", root, output)
    for pattern in DATA_FILES:
        for source in sorted(root.glob(pattern)):
            _copy(source, root, output)
    return StagedImage(output, modules, requirements)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stacks.agent_image",
        description="Stage the AgentCore agent image's build context (for docker buildx build "
        f"--platform {IMAGE_PLATFORM}).",
    )
    parser.add_argument("directory", type=Path, help="where to stage it (emptied first)")
    args = parser.parse_args(argv)
    try:
        staged = stage_agent_image(args.directory)
    except BundleError as error:
        sys.exit(f"stacks.agent_image: {error}")
    print(
        f"staged {len(staged.modules)} modules and {len(staged.requirements)} requirements in "
        f"{staged.directory}"
    )


if __name__ == "__main__":
    main()
