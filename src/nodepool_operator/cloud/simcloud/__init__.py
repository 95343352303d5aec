"""simcloud: a simulated cloud that runs as its own process, and the provider that talks to it.

VMs take a configurable, jittered time to boot and to go away, state lives in one SQLite
file so the cloud outlives its own restarts, and faults (5xx, 429, quota, slow calls) can
be switched on by flag or at run time. ``store`` holds the lifecycle, ``server`` the HTTP
API and fault injection, ``client`` the ``CloudProvider`` over HTTP, ``wire`` the JSON
shapes both sides share.
"""

__all__: list[str] = []
