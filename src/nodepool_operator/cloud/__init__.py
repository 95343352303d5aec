"""The cloud provider protocol, and the simulated cloud (server and client) that implements it."""

__all__: list[str] = []
