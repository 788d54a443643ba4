import numpy as np
from shared.config import default_settings, replace
from shared.derive import serving_profile
from shared.profiles import preamble_tokens
from jevfleet.harness.engine import model_of
from worker.engine import Engine
from worker.exact import ExactReader
from worker.canary import EXACT_PROMPTS
from worker.warmup import make_job
from shared.llama import llama
import sys
s = replace(default_settings(), kv_cache_type=sys.argv[1], mode=sys.argv[2])
prof = serving_profile(s.profile, s.model, head=False)
path = model_of(s)[1]
for pin in (True, False):
    e = Engine.from_settings(path, s, threads=2)
    if pin: e.pin(preamble_tokens(e.tokenize, prof))
    jobs = [make_job(e, prof, st, [q]) for st, q in EXACT_PROMPTS]
    e.run(jobs, warm=True)
    served = [j.margins[0] for j in jobs]
    print("pin", pin, "prefix lens", [len(j.prefix) for j in jobs], "suffix", [len(j.suffixes[0]) for j in jobs])
    for kw in (dict(), dict(type_k=sys.argv[1], type_v=sys.argv[1], flash=True), ):
        for pieces in (0, 60):
            r = ExactReader(e.model, threads=2, yes=jobs[0].yes_ids, no=jobs[0].no_ids, **kw)
            ex = [r.margin(j.prefix + j.suffixes[0], pieces=pieces) for j in jobs]
            r.close()
            print(kw, pieces, "served", np.round(served, 4), "reader", np.round(ex, 4), "diff", np.round(np.array(served) - ex, 4))
    e.close()
