"""The ``impact`` role: folds the ImpactIndex (see :mod:`streamproc.impact.projection`).

Register it in :data:`streamproc.roles.ROLES` as ``"impact": IMPACT``. Reactors in the same
process reach the index as ``ctx.shared["impact"]``; other roles ask the planner over NATS.
"""

from __future__ import annotations

from streamproc.impact.projection import ImpactProjection
from streamproc.reactor import RoleSpec

IMPACT = RoleSpec([ImpactProjection])
