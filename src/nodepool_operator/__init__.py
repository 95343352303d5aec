"""nodepool-operator: provisions Nodes from a cloud and autoscales them; writes with discipline."""

__all__: list[str] = []
