"""What a set of settings serves, decided in one function: the profile, the model file, the
file's shape and the settings within the file's reach.

Every process that meets a model file starts here: `jevfleet serve` (which then sizes the fleet
from the plan's shape and hands its settings to the gateway and workers as JEV_* variables, a
derived profile rendered to a file), the gateway, each worker and an in-process run (client/
local.py). Each makes the same plan from the same settings, so a gateway and its workers cannot
read a file, a profile or ctx differently; the header is read once per plan (milliseconds).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.config import Settings
from shared.derive import serving_profile
from shared.memory import ModelShape, model_shape, within_trained_context
from shared.model_files import file_sha256, resolve_model
from shared.profiles import Profile


@dataclass(frozen=True)
class ServingPlan:
    settings: Settings  # as given, ctx lowered to the file's trained context (and a LongRoPE file's short reach)
    profile: Profile  # the one named, or the one derived from the file with its recorded calibration
    model: Path  # the GGUF, assembled once if its package ships it in parts
    shape: ModelShape  # the figures memory depends on, from the header

    def model_sha256(self) -> str:
        """The file's digest (a gateway and its workers compare it): read once per process."""
        return file_sha256(self.model)


def serving_plan(settings: Settings, profile: Profile | None = None, *, head: bool | None = None) -> ServingPlan:
    """The plan `settings` serve (`head` as serving_profile takes it), or, for the quality commands
    that try a profile of their own (a derivation before its calibration, prompt variants),
    `profile` on the model file it names."""
    profile = profile or serving_profile(settings, head=head)
    model = resolve_model(profile, settings.cache_path, settings.model)
    shape = model_shape(model)
    return ServingPlan(within_trained_context(settings, shape, model.name), profile, model, shape)
