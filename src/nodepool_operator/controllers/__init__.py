"""The two controllers of the operator; they share API objects, never code."""
