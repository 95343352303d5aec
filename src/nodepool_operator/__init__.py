"""nodepool-operator: provisions Nodes from a cloud and autoscales them; writes with discipline."""

from importlib import metadata

__all__ = ["USER_AGENT", "__version__"]

__version__ = metadata.version("nodepool-operator")

#: How the operator introduces itself to the API server and the cloud, as
#: controller-runtime's clients do (``<binary>/<version>``): the audit log and the cloud's
#: access log then name it instead of the HTTP library.
USER_AGENT = f"nodepool-operator/{__version__}"
