"""Progress as people read it: one rounding rule shared by every view of a render.

The Live bar in the Render panel and the Queue's Progress column both show ``percent(done, total)``
so they never disagree (one said 99 % while the other said 100 %). The rule floors: 100 % only
when every frame is done, 0 % until the first one is.
"""

from __future__ import annotations

import math


def percent(done: float, total: float) -> int:
    """Whole percent of ``done`` out of ``total``, floored (``total`` <= 0 gives 0)."""
    if not total or total <= 0:
        return 0
    frac = min(max(float(done) / float(total), 0.0), 1.0)
    return int(math.floor(frac * 100 + 1e-9))


def fraction_percent(frac: float) -> int:
    """The same rule for a stored fraction in [0, 1] (the job store keeps fractions)."""
    return percent(frac, 1.0)
