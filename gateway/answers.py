"""From the worker's yes−no logit margins to calibrated answers."""
from __future__ import annotations

import math

from gateway.prompts import Rendered
from gateway.wire import NoulAnswer
from shared.profiles import Profile


def p_yes(profile: Profile, margin: float) -> float:
    z = profile.scale * margin + profile.bias
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def assemble(profile: Profile, rendered: Rendered, margins: list[float]) -> dict[str, NoulAnswer]:
    return {qid: NoulAnswer(noul=p_yes(profile, margins[start])) for qid, start, _ in rendered.spans}
