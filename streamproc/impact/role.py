"""The ``impact`` role: folds the ImpactIndex (see :mod:`streamproc.impact.projection`).

Register it in :data:`streamproc.roles.ROLES` as ``"impact": IMPACT``. A planner or gateway
in the same process reaches the index as ``ctx.shared["impact"]``.
"""

from __future__ import annotations

from streamproc.impact.projection import ImpactProjection
from streamproc.reactor import RoleSpec

IMPACT = RoleSpec([ImpactProjection])
