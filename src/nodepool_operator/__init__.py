"""nodepool-operator: provisions Nodes from a cloud and autoscales them, with disciplined API writes."""

__all__: list[str] = []
