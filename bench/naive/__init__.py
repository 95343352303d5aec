"""The naive baseline of ``bench/contention.py``: the article's anti-pattern operator."""
