"""The Lambda functions' asset, built as CDK builds it (no Docker): what is in it, what is not,
its size, and that the handlers import from it with nothing else on the path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stacks.lambda_bundle import (
    HANDLERS,
    BundleError,
    build_bundle,
    reachable_modules,
    requirements_for,
)

# Lambda's limit is 250 MB unzipped. 80 MB before the Strands SDK (issue 27), which with its
# dependencies (aiohttp, cryptography, opentelemetry, mcp) adds ~15 MB: on disk only, imported
# only by a deployment that runs a Strands agent (functions/worker/run.py imports it lazily).
MAX_BUNDLE_BYTES = 110 * 1024 * 1024
AARCH64 = 0xB7  # ELF e_machine of arm64
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def arm64_bundle(tmp_path_factory):
    return build_bundle(tmp_path_factory.mktemp("arm64") / "bundle")


def _elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    return int.from_bytes(header[18:20], "little")


def test_the_bundle_holds_the_functions_and_the_arm64_transport(arm64_bundle):
    root = arm64_bundle.directory
    for handler in HANDLERS:
        assert (root / (handler.replace(".", "/") + ".py")).is_file()
    assert (root / "voicewire" / "speech_link" / "sagemaker_transport.py").is_file()
    # search_docs' documents, where the tool looks for them (beside functions/), and the
    # agent's own packages: the Strands SDK and the time zones.
    assert (root / "README.md").is_file() and (root / "docs" / "protocol.md").is_file()
    assert (root / "strands" / "agent" / "agent.py").is_file()
    assert (root / "tzdata" / "zoneinfo" / "Europe" / "Paris").is_file()
    (native,) = root.glob("_awscrt*.so")  # the CRT: the SageMaker stream's HTTP/2 transport
    assert _elf_machine(native) == AARCH64
    (pydantic_core,) = (root / "pydantic_core").glob("_pydantic_core*.so")
    assert _elf_machine(pydantic_core) == AARCH64


def test_the_bundle_leaves_out_the_tools_the_container_and_the_tests(arm64_bundle):
    root = arm64_bundle.directory
    names = {path.relative_to(root).as_posix() for path in root.rglob("*")}
    absent_names = (
        "speech_server",
        "onnxruntime",
        "kokoro_onnx",
        "numpy",
        "voicewire_tools/local_stack",
        "voicewire_tools/commands",
        "voicewire_tools/cli.py",
        "tests",
        "moto",
    )
    for absent in absent_names:
        assert not any(name == absent or name.startswith(absent + "/") for name in names), absent
    assert not list(root.rglob("__pycache__"))


def test_the_bundle_carries_the_locked_boto3_not_the_runtimes(arm64_bundle):
    """The Lambda runtime's boto3 changes under a deployed function; the bundle's is uv.lock's."""
    import tomllib

    locked = {
        package["name"]: package["version"]
        for package in tomllib.loads((ROOT / "uv.lock").read_text())["package"]
    }
    root = arm64_bundle.directory
    for name in ("boto3", "botocore"):
        (metadata,) = root.glob(f"{name}-*.dist-info")
        assert metadata.name == f"{name}-{locked[name]}.dist-info"


def test_the_bundle_is_small(arm64_bundle):
    size = arm64_bundle.size_bytes()
    print(f"bundle: {size / 1e6:.1f} MB unzipped")
    assert size < MAX_BUNDLE_BYTES


def test_a_new_third_party_import_must_be_declared():
    _, imported = reachable_modules()
    assert requirements_for(imported)  # today's imports are all known
    with pytest.raises(BundleError, match="leftpad"):
        requirements_for({*imported, "leftpad"})


def test_the_handlers_import_from_the_bundle_alone(tmp_path):
    """The same bundle for this machine's platform, imported by a bare interpreter (no site
    packages) with only the bundle on its path, boto3 included."""
    bundle = build_bundle(tmp_path / "bundle", platform="x86_64-manylinux2014")
    probe = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "import os; os.environ['AWS_DEFAULT_REGION'] = 'us-east-1'\n"
        "import importlib\n"
        f"for name in {list(HANDLERS)!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    assert callable(module.handler), name\n"
        "    assert module.__file__.startswith(sys.argv[1]), module.__file__\n"
        "import awscrt, pydantic_core, boto3, botocore\n"
        "for module in (awscrt, boto3, botocore):\n"
        "    assert module.__file__.startswith(sys.argv[1]), module.__file__\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-E", "-c", probe, str(bundle.directory)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
