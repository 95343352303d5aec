"""The two controllers of the operator. They never import each other: they share API
objects, the rules in ``api`` (what a ScaleRequest does to a pool, a pool's bounds), and
the few modules here both need (the resources and indexes both watch, what the caches
keep of Nodes and Pods)."""
