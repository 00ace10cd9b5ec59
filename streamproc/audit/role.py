"""The ``auditor`` role: the audit projection, the snapshot reactor, and chain verification
as a NATS service (:mod:`streamproc.audit.service`).

Registered in :mod:`streamproc.roles` as ``"auditor": AUDITOR``.
"""

from __future__ import annotations

from streamproc.audit.log import AuditLog
from streamproc.audit.reactor import SnapshotReactor
from streamproc.audit.service import start as start_service
from streamproc.runtime.reactor import RoleSpec

AUDITOR = RoleSpec(
    [AuditLog],
    [lambda settings: SnapshotReactor(settings)],
    services=start_service,
    singleton=True,  # one signer of snapshots at a time; a standby folds the log
)
