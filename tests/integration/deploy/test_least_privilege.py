"""Least privilege, measured: the verbs and resources the operator used over the whole e2e
run, read from the API server's audit log, against what deploy/ grants it.

Every request of the operator's user is in the audit log, reads included (the local control
plane's audit policy logs them for that user), and tests/e2e run the operator as that user
under the ClusterRole and leader-election Role of deploy/rbac. So after the e2e tests:
- a permission granted and never used is one to remove;
- a request refused with 403 for something not granted is a permission missing. A 403 for
  something granted is not: a write into a namespace being deleted is refused whatever
  the rights (see AuditEvent), and a kube-apiserver the chaos suite just restarted
  refuses everything for a few seconds while its authorizer warms up.

The test runs last in the session (tests/conftest.py orders it) and only when the session
ran every e2e module; a partial run cannot tell unused from unexercised.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodepool_devtools.cluster import audit, controlplane
from nodepool_devtools.cluster.pytest_plugin import Cluster

REPO = Path(__file__).resolve().parents[3]
RBAC = REPO / "deploy" / "rbac"
E2E = REPO / "tests" / "e2e"
OPERATOR_USER = controlplane.IDENTITIES["operator"].user

#: (API group, resource or resource/subresource, verb)
Permission = tuple[str, str, str]


def granted(*manifests: Path) -> set[Permission]:
    permissions: set[Permission] = set()
    for manifest in manifests:
        role = yaml.safe_load(manifest.read_text())
        for rule in role["rules"]:
            assert "resourceNames" not in rule, "a rule narrowed by name is compared by name"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    permissions.update((group, resource, verb) for verb in rule["verbs"])
    return permissions


def permission(event: audit.AuditEvent) -> Permission:
    return (event.api_group, event.target, event.verb)


def whole_e2e_ran(session: pytest.Session) -> bool:
    if session.config.option.keyword or session.config.option.markexpr:
        return False
    ran = {Path(str(item.path)).name for item in session.items}
    return all(module.name in ran for module in E2E.glob("test_*.py"))


@pytest.mark.runs_last
def test_the_operator_is_granted_exactly_what_it_used(
    request: pytest.FixtureRequest, cluster: Cluster
) -> None:
    if not whole_e2e_ran(request.session):
        pytest.skip("needs every tests/e2e module in the same session")
    events = [e for e in cluster.audit_log().events() if e.user == OPERATOR_USER]
    refused = {permission(e) for e in events if e.code == 403 and not e.namespace_terminating}
    used = {permission(e) for e in events if e.code != 403}
    grants = granted(RBAC / "clusterrole.yaml", RBAC / "leader-election-role.yaml")

    missing = refused - grants
    assert missing == set(), f"used but not granted: {sorted(missing)}"
    assert grants - used == set(), f"granted but never used: {sorted(grants - used)}"
    assert used <= grants
