"""Run once inside the image build (deploy/Containerfile): assemble the default profile's GGUF into
the image's cache directory, with the same code and path `jevfleet serve` uses at start, so a
container finds it there and never writes 1.1 GB on its first start; then uninstall the chunk
packages it was joined from, so that the image holds the weights once instead of twice. With a
GGUF of one's own named (JEV_MODEL, no profile; the file copied into the image), the profile
derived from it is calibrated here and rendered into the cache too: a container started with the
same settings fits nothing at start (the record is keyed by the file's content) and finds the
rendered profile already there.

    cd <checkout> && JEV_CACHE_DIR=/opt/jevfleet/cache python -m deploy.bake_model
"""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

from shared.config import Settings, load_settings
from shared.model_files import resolve_model
from shared.derive import render_profile, serving_profile
from shared.profiles import Profile


def chunk_distributions(package: str) -> list[str]:
    """The distributions the model package `package` requires: the chunks its assemble() joins."""
    dists = importlib.metadata.packages_distributions().get(package, [])
    required = importlib.metadata.requires(dists[0]) if dists else None
    return [re.match(r"[A-Za-z0-9._-]+", req).group(0) for req in required or []]


def source_distributions(profile: Profile) -> list[str]:
    """The distributions `profile`'s assembled GGUF was joined from, none needed once it is in the
    cache dir: a model package's chunks, or the packages of a parts profile's chunks. None for a
    package whose file is served in place (package_file)."""
    if profile.parts:
        by_package = importlib.metadata.packages_distributions()
        return [d for part in profile.parts for d in by_package.get(part.partition("/")[0], [])]
    if profile.package and not profile.package_file:
        return chunk_distributions(profile.package)
    return []


def baked_profile(settings: Settings) -> Profile:
    """The profile whose model the image carries: what `jevfleet serve` serves with these
    settings (the default profile when neither a profile nor a model is named); a derived one
    calibrated, fitted here if the cache dir has no record for it, as serve would at first start."""
    profile = serving_profile(settings)
    if not profile.derived:
        return profile
    from quality.derived import calibrated

    return calibrated(settings, profile)


def main() -> int:
    settings = load_settings()
    profile = baked_profile(settings)
    path = resolve_model(profile, settings.cache_path, settings.model)
    print(f"bake_model: {profile.name} -> {path} ({path.stat().st_size / 1e6:.0f} MB)", flush=True)
    if profile.derived:  # the calibration record and the rendered profile, in the cache dir serve reads
        print(f"bake_model: derived, calibration {profile.calibration_record or 'none'}, rendered as "
              f"{render_profile(profile, settings.cache_path)}", flush=True)
    if not (settings.model or profile.path):
        chunks = source_distributions(profile)
        if chunks:
            subprocess.run([sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", *chunks], check=True)
            print(f"bake_model: removed {', '.join(chunks)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
