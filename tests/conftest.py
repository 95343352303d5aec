"""Fixtures shared by the whole suite come from the project's own pytest plugin."""

pytest_plugins = ["nodepool_operator.cluster.pytest_plugin"]
