"""The speech image's Dockerfile, read: which target builds which engine's image, and what each
target runs to get there.

``container/Dockerfile`` has one target per engine (``gpu`` for torch, ``cpu`` for ONNX) over a
shared ``base`` stage. The endpoint stack builds the target of its engine (``SpeechEndpoint``),
and the image test installs each target's dependencies exactly as its ``RUN`` lines say
(tests/integration/test_image_dependencies.py): both read the file through this module, so what
is deployed and what is tested are the same stages.

dockerfile-parse does the reading (continuation lines, comments, instruction case); a stage is
everything from its ``FROM`` to the next.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from dockerfile_parse import DockerfileParser

from stacks.lambda_bundle import ROOT

SPEECH_DOCKERFILE = ROOT / "container" / "Dockerfile"
# The Dockerfile target that builds each engine's image.
ENGINE_TARGETS = {"torch": "gpu", "onnx": "cpu"}
# The build's output: an image with Docker v2 media types. SageMaker refuses OCI manifests at
# CreateModel ("Unsupported manifest media type application/vnd.oci.image.manifest.v1+json":
# aws/amazon-sagemaker-feedback#180), and BuildKit's image exporter writes OCI by default since
# moby/buildkit#6824 (as does Docker's containerd image store). cdk-assets already turns the
# provenance attestation off (BUILDX_NO_DEFAULT_ATTESTATIONS=1), which would otherwise make the
# pushed tag an OCI index.
DOCKER_MEDIA_TYPES = "type=image,oci-mediatypes=false"


@dataclass(frozen=True)
class Instruction:
    name: str  # upper case: RUN, ENV, COPY, ...
    value: str  # as written, continuation lines joined


@dataclass(frozen=True)
class ImageStage:
    name: str
    base: str  # what it is built FROM: another stage's name or an image
    instructions: tuple[Instruction, ...]

    def values(self, name: str) -> list[str]:
        return [i.value for i in self.instructions if i.name == name]


def image_stages(dockerfile: Path = SPEECH_DOCKERFILE) -> dict[str, ImageStage]:
    """Every named stage of ``dockerfile``, in order."""
    # A file object: given a path, the parser takes any name but "Dockerfile" for a directory.
    with dockerfile.open("rb") as lines:
        parser = DockerfileParser(fileobj=lines)
        structure = parser.structure
    stages: dict[str, ImageStage] = {}
    current: tuple[str, str] | None = None
    instructions: list[Instruction] = []

    def close() -> None:
        if current is not None:
            stages[current[0]] = ImageStage(current[0], current[1], tuple(instructions))

    for item in structure:
        name, value = item["instruction"].upper(), item["value"]
        if name == "COMMENT":
            continue
        if name == "FROM":
            close()
            words = shlex.split(value)
            words = [w for w in words if not w.startswith("--platform")]
            if len(words) != 3 or words[1].upper() != "AS":
                raise ValueError(f"{dockerfile}: name every stage (FROM image AS name): {value}")
            current, instructions = (words[2], words[0]), []
            continue
        instructions.append(Instruction(name, value))
    close()
    return stages


def stage_chain(stages: dict[str, ImageStage], target: str) -> list[ImageStage]:
    """``target`` and the stages it is built from, the first one first."""
    chain = []
    name: str | None = target
    while name in stages:
        chain.insert(0, stages[name])
        name = stages[name].base
    return chain


def engine_target(engine: str, dockerfile: Path = SPEECH_DOCKERFILE) -> str:
    """The Dockerfile target of ``engine``'s image; ValueError naming what is missing."""
    target = ENGINE_TARGETS.get(engine)
    if target is None:
        raise ValueError(f"engine must be one of {sorted(ENGINE_TARGETS)}, not {engine!r}")
    if target not in image_stages(dockerfile):
        raise ValueError(
            f"{dockerfile} has no {target!r} target, which builds the {engine} engine's image: "
            "the endpoint would run an image without its engine. Add the stage, or pass a "
            "prebuilt image (--image-uri)"
        )
    return target


def image_environment(chain: list[ImageStage]) -> dict[str, str]:
    """The ``ENV`` the stages set, later ones winning (``KEY=value`` pairs, as this file writes
    them)."""
    environment: dict[str, str] = {}
    for stage in chain:
        for value in stage.values("ENV"):
            for pair in shlex.split(value):
                key, sep, setting = pair.partition("=")
                if not sep:
                    raise ValueError(f"ENV {value!r}: write KEY=value pairs")
                environment[key] = setting
    return environment
