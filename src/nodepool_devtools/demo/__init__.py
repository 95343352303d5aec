"""The demo: the whole system on the local control plane, with a live terminal view."""
