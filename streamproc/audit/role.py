"""The ``auditor`` role: the audit projection and the snapshot reactor.

Registered in :mod:`streamproc.roles` as ``"auditor": AUDITOR``.
"""

from __future__ import annotations

from streamproc.audit.gateway_routes import mount_chain_routes
from streamproc.audit.log import AuditLog
from streamproc.audit.reactor import SnapshotReactor
from streamproc.reactor import RoleSpec

AUDITOR = RoleSpec(
    [AuditLog],
    [lambda settings: SnapshotReactor(settings)],
    routes=mount_chain_routes,
    singleton=True,  # one signer of snapshots at a time; a standby folds the log
)
