#!/usr/bin/env python3
"""Rewrite src/nodepool_operator/cloud/aws_prices.json from AWS's EC2 price list files.

    curl -o us-east-1.json \\
      https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.json
    .venv/bin/python scripts/refresh-aws-prices.py us-east-1=us-east-1.json [REGION=FILE ...]

Every region given replaces its table; the others are kept. Only the instance types
already in a region's table are kept unless ``--all-types`` is given (the full list has
hundreds; the operator sells only what the table prices, ``cloud/aws_catalog``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nodepool_operator.cloud import aws_catalog

TABLE = Path(__file__).resolve().parent.parent / "src/nodepool_operator/cloud/aws_prices.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("regions", nargs="+", metavar="REGION=FILE")
    parser.add_argument("--all-types", action="store_true")
    parser.add_argument("--table", type=Path, default=TABLE)
    options = parser.parse_args()
    table = json.loads(options.table.read_text())
    for pair in options.regions:
        region, _, path = pair.partition("=")
        prices = aws_catalog.prices_from_price_list(json.loads(Path(path).read_text()))
        kept = table["regions"].get(region) or {}
        if kept and not options.all_types:
            prices = {name: price for name, price in prices.items() if name in kept}
        table["regions"][region] = prices
        print(f"{region}: {len(prices)} instance types priced")
    options.table.write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
