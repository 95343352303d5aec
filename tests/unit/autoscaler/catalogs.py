"""The catalog of the planner's tests of pools with requirements (``tests/catalogs.py``):
three types of one shape family in two zones, the second a cent dearer."""

from __future__ import annotations

from typing import Any

import catalogs
from nodepool_operator.cloud import catalog

ZONES = ("z-a", "z-b")
TYPES = (("c2", 2, 4, 0.10), ("c8", 8, 16, 0.36), ("c32", 32, 64, 1.30))


class Sells:
    """A catalog given whole, as the cloud's ``CatalogSource``."""

    def __init__(self, found: catalog.Catalog) -> None:
        self.found = found

    async def catalog(self) -> catalog.Catalog:
        return self.found


def small_catalog() -> catalog.Catalog:
    return catalogs.catalog_of(TYPES, ZONES)


def requirements() -> list[dict[str, Any]]:
    return catalogs.requirements(TYPES, ZONES)
