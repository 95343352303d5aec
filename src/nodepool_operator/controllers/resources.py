"""Where the operator's own kinds live in the API, for both controllers."""

from __future__ import annotations

from nodepool_operator.api import autoscaler, nodepool, scalerequest
from nodepool_operator.runtime.client import Resource

__all__ = ["AUTOSCALERS", "NODEPOOLS", "SCALEREQUESTS"]

NODEPOOLS = Resource(nodepool.GROUP, nodepool.VERSION, nodepool.PLURAL, nodepool.KIND, False)
SCALEREQUESTS = Resource(
    scalerequest.GROUP, scalerequest.VERSION, scalerequest.PLURAL, scalerequest.KIND, False
)
AUTOSCALERS = Resource(
    autoscaler.GROUP, autoscaler.VERSION, autoscaler.PLURAL, autoscaler.KIND, False
)
