"""The development tools, beside the operator's package and never in its wheel: the local
control plane (``cluster``: the binaries built from ``tools/``, certificates, processes,
audit log, the RBAC install and the pytest plugin that starts it for the tests) and the
demo (``demo``). They run from a source checkout; the operator never imports them (cli.py's
``cluster``, ``demo`` and ``simcloud --kubelets hollow`` do, when they run)."""

__all__: list[str] = []
