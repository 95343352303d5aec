"""A local Kubernetes control plane run from real binaries, the way envtest runs one.

etcd, kube-apiserver (RBAC, client-certificate users, an audit log of every write),
kube-scheduler, kube-controller-manager and kwok (which keeps the Nodes annotated
``kwok.x-k8s.io/node: fake`` Ready and runs their Pods) on free loopback ports, with all
state and logs in one directory. ``up`` returns once ``/readyz`` answers ok; the processes
outlive the caller (``cluster up`` from a shell) and ``down`` stops exactly the processes
``up`` recorded in ``state.json``, checking each one's command line first so a recycled pid
is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from nodepool_devtools.cluster import binaries, pki

__all__ = ["IDENTITIES", "ControlPlane", "ControlPlaneError", "ProcessState"]

#: Who talks to the API server. Separate users make the audit log say who wrote what.
IDENTITIES: dict[str, pki.Identity] = {
    "admin": pki.Identity("nodepool-admin", ("system:masters",)),
    "kube-scheduler": pki.Identity("system:kube-scheduler"),
    # Real clusters give each controller of the controller-manager its own ServiceAccount;
    # here one identity runs them all, so it needs the union of their rights.
    "kube-controller-manager": pki.Identity("system:kube-controller-manager", ("system:masters",)),
    "kwok": pki.Identity("kwok-controller", ("system:masters",)),
    # The operator's own identity, authorized only by the ClusterRole it is granted.
    "operator": pki.Identity("nodepool-operator", ("nodepool:operators",)),
}

#: Controllers of kube-controller-manager the system relies on (names as kube-controller-manager
#: v1.36 knows them). Namespaces are deleted, owned objects are garbage-collected, PDBs get
#: their status (the Eviction API needs it), namespaces get a default ServiceAccount, and a
#: new Node loses its ``node.kubernetes.io/not-ready`` taint once kwok reports it Ready.
#: The workload controllers a real cluster runs come with them, so tests can express
#: ordinary workloads: Deployments, DaemonSets, StatefulSets, Jobs and CronJobs (finished
#: Jobs with a TTL are deleted), and Services get their EndpointSlices and Endpoints. The
#: pod garbage collector is what deletes the Pods left bound to a Node that is gone: a
#: drain leaves DaemonSet Pods in place, and nothing else would ever remove them.
CONTROLLERS = (
    "node-lifecycle-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "disruption-controller",
    "deployment-controller",
    "replicaset-controller",
    "daemonset-controller",
    "statefulset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "pod-garbage-collector-controller",
)

#: The client-side request rate of kube-scheduler and kube-controller-manager. Their
#: defaults (50 and 20 requests a second) suit a small cluster; clusters of thousands of
#: Nodes raise them, as kwokctl's ``--disable-qps-limits`` does for simulated ones. At the
#: default, with 3,000 Nodes, the node-lifecycle controller lifted a new Node's
#: ``node.kubernetes.io/not-ready`` taint about two minutes after kwok reported it Ready
#: (its taint passes queue behind one another at about 9 Node patches a second, each with
#: a read before it), and no pod could be bound to the Node meanwhile.
CLIENT_RATE: Final = ("--kube-api-qps=1000", "--kube-api-burst=2000")
#: kwok renews each simulated Node's lease every quarter of this, as a kubelet does (a
#: kubelet's lease lasts 40 s). One process renewing thousands of leases on a machine that
#: also runs the API server falls behind under load, and the node-lifecycle controller
#: then marks healthy Nodes NotReady, taints them and rewrites every pod on them: at
#: 3,000 Nodes with a 40 s lease and the rate above, those writes fed on themselves until
#: binding slowed to about 3 pods a second. Longer leases and a matching silence before a
#: Node counts as unresponsive keep that from happening; no test relies on a lease running
#: out (the repair tests write a Node's Ready condition themselves).
NODE_LEASE_SECONDS: Final = 120
NODE_SILENCE_SECONDS: Final = 240

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # One event per request, written when the response is complete (it has the code).
    "omitStages": ["RequestReceived"],
    "rules": [
        # Everything the operator asks, reads too: what it uses is compared with what its
        # ClusterRole grants (least privilege, measured).
        {"level": "Metadata", "users": [IDENTITIES["operator"].user]},
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "Metadata"},
    ],
}


def _stage(name: str, kind: str, selector: list[dict[str, Any]], then: dict[str, Any]) -> Any:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": kind},
            "selector": {"matchExpressions": selector},
            "next": then,
        },
    }


_NOT_READY = {
    "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
    "operator": "NotIn",
    "values": ["True"],
}

#: What kwok does to the Nodes and Pods it manages: a new Node turns Ready (its capacity is
#: left as its creator set it), a Pod bound to such a Node runs at once, and a Pod being
#: deleted goes away (there is no kubelet to finish it). A running Pod gets an IP from
#: kwok's ``--cidr`` (the Node's IP with ``hostNetwork``): the EndpointSlice controller
#: leaves Pods without one out of a Service's endpoints. Pods run until deleted, Job Pods
#: too: no stage completes them, so a Job stays active as long as its Pods exist.
KWOK_STAGES = [
    _stage(
        "node-ready",
        "Node",
        [_NOT_READY],
        {
            "statusTemplate": """{{ $now := Now }}
conditions:
- {type: Ready, status: "True", reason: KubeletReady, message: "simulated by kwok",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
- {type: MemoryPressure, status: "False", reason: KubeletHasSufficientMemory, message: "",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
- {type: DiskPressure, status: "False", reason: KubeletHasNoDiskPressure, message: "",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
- {type: PIDPressure, status: "False", reason: KubeletHasSufficientPID, message: "",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
addresses:
- {type: InternalIP, address: {{ NodeIP | Quote }}}
- {type: Hostname, address: {{ .metadata.name | Quote }}}
nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: kwok,
  containerRuntimeVersion: kwok, kernelVersion: kwok, kubeProxyVersion: kwok,
  osImage: kwok, machineID: "", bootID: "", systemUUID: ""}
phase: Running
"""
        },
    ),
    _stage(
        "pod-running",
        "Pod",
        [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
            _NOT_READY,
        ],
        {
            # A merge patch, not kwok's default strategic merge for a status template: the
            # latter merges ``podIPs`` by IP, so the stage played again on a Pod that already
            # has an IP adds a second one, which the API server refuses ("may specify no more
            # than one IP for each IP family"; seen on every later try with 50,000 Pods); a
            # merge patch replaces the list. Played again on a Pod that has an IP (sent back
            # to Pending), it leaves the IP alone: a Pod keeps its IP as long as it lives,
            # and kwok's pool hands out no new one. A merge patch also replaces the whole
            # ``conditions`` list, so the template writes back the conditions of other
            # writers (a ``DisruptionTarget``, a readiness gate's) as they are and only sets
            # the four a kubelet owns.
            "patches": [
                {
                    "subresource": "status",
                    "root": "status",
                    "type": "merge",
                    "template": """{{ $now := Now }}
{{ $kubelets := list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
phase: Running
hostIP: {{ NodeIP | Quote }}
{{ if not .status.podIP }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
     ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- {ip: {{ . | Quote }}}
{{ end }}
{{ end }}
{{ end }}
startTime: {{ $now | Quote }}
conditions:
{{ range .status.conditions }}
{{ if not ( has .type $kubelets ) }}
- {{ toJson . }}
{{ end }}
{{ end }}
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: true,
   started: true, restartCount: 0, state: {running: {startedAt: {{ $now | Quote }}}}}
{{ end }}
""",
                }
            ]
        },
    ),
    _stage(
        "pod-delete",
        "Pod",
        [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
        {"delete": True},
    ),
]

START_ORDER = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or stopped; the message says which part."""


@dataclass(frozen=True)
class ProcessState:
    name: str
    pid: int
    running: bool


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ControlPlane:
    """Start, inspect and stop the local control plane living in ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        out: TextIO = sys.stderr,
        node_silence_seconds: int = NODE_SILENCE_SECONDS,
    ) -> None:
        """``node_silence_seconds``: the controller-manager's node-monitor grace period. A
        control plane of a few real (hollow) kubelets, which renew their Lease every 10 s,
        may set it shorter, so a stopped kubelet's Node turns NotReady in seconds."""
        self.directory = directory.resolve()
        self.out = out
        self.node_silence_seconds = node_silence_seconds
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.directory / "logs" / "audit.log"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    def kubeconfig_for(self, identity: str) -> Path:
        """A kubeconfig for one of :data:`IDENTITIES` (``admin`` is ``DIR/kubeconfig``)."""
        if identity == "admin":
            return self.kubeconfig
        return self.directory / "kubeconfigs" / f"{identity}.kubeconfig"

    def shell_setup(self) -> list[str]:
        """What ``cluster up`` prints, for ``eval "$(nodepool-operator cluster up)"``:
        ``KUBECONFIG``, then ``PATH`` with the project's kubectl and helm first, since a
        kubectl already on the machine may be older than this API server."""
        tools = binaries.client_tools()
        directories = list(dict.fromkeys(str(t.path.parent) for t in tools if t.path))
        lines = [f"export KUBECONFIG={shlex.quote(str(self.kubeconfig))}"]
        if directories:
            lines.append(f'export PATH={shlex.quote(":".join(directories))}:"$PATH"')
        for tool in tools:
            version = f" {tool.version}" if tool.version else ""
            if tool.path is None:
                lines.append(
                    f"# {tool.name}{version}: not built; 'nodepool-operator cluster build'"
                )
            else:
                lines.append(f"# {tool.name}{version}: {tool.path}")
        return lines

    # -- up ---------------------------------------------------------------------------

    def up(self, *, timeout: float = 120.0) -> None:
        if any(p.running for p in self.status()):
            raise ControlPlaneError(
                f"a control plane is already running in {self.directory}; "
                f"run 'nodepool-operator cluster down --dir {self.directory}' first"
            )
        found = binaries.ensure_binaries(out=self.out)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "logs").mkdir(exist_ok=True)
        state: dict[str, Any] = {"processes": [], "binaries": {k: str(v) for k, v in found.items()}}
        ports = {name: free_port() for name in ("etcd-client", "etcd-peer", "apiserver", "kwok")}
        state["ports"] = ports
        self._write_certificates_and_configs(ports["apiserver"])
        state["apiserver"] = f"https://127.0.0.1:{ports['apiserver']}"
        self._save(state)
        deadline = time.monotonic() + timeout
        try:
            for name in START_ORDER:
                started = time.monotonic()
                self._start(name, state)
                self._wait_ready(name, state, deadline)
                self._say(f"{name} ready ({time.monotonic() - started:.1f}s)")
        except BaseException:
            self.down()
            raise
        self._say(f"control plane up; kubeconfig: {self.kubeconfig}")

    def _start(self, name: str, state: dict[str, Any]) -> None:
        command = [state["binaries"][name], *self._arguments(name, state)]
        log = (self.directory / "logs" / f"{name}.log").open("ab")
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.directory,
            # Its own session: a Ctrl-C in the terminal that ran `cluster up` later must not
            # kill the control plane; `down` does that.
            start_new_session=True,
        )
        log.close()
        self._children[process.pid] = process
        state["processes"] = [p for p in state["processes"] if p["name"] != name]
        state["processes"].append({"name": name, "pid": process.pid, "binary": command[0]})
        self._save(state)

    def _arguments(self, name: str, state: dict[str, Any]) -> list[str]:
        """The command line of component ``name`` on the ports in ``state``."""
        ports: dict[str, int] = state["ports"]
        if name == "etcd":
            return self._etcd_arguments(ports)
        if name == "kube-apiserver":
            return self._apiserver_arguments(ports)
        kubeconfig = f"--kubeconfig={self.kubeconfig_for(name)}"
        if name == "kube-scheduler":
            return [kubeconfig, "--leader-elect=false", "--secure-port=0", *CLIENT_RATE]
        if name == "kube-controller-manager":
            return [
                kubeconfig,
                "--leader-elect=false",
                "--secure-port=0",
                f"--controllers={','.join(CONTROLLERS)}",
                "--concurrent-deployment-syncs=10",
                "--concurrent-replicaset-syncs=10",
                f"--node-monitor-grace-period={self.node_silence_seconds}s",
                *CLIENT_RATE,
            ]
        if name == "kwok":
            return [
                kubeconfig,
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{ports['kwok']}",
                "--node-ip=127.0.0.1",
                "--cidr=10.244.0.0/16",
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                f"--config={self.directory / 'kwok.yaml'}",
            ]
        raise ControlPlaneError(f"unknown component {name}")

    def _etcd_arguments(self, ports: dict[str, int]) -> list[str]:
        client = f"http://127.0.0.1:{ports['etcd-client']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        return [
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync=true",  # throwaway data: durability costs seconds per test
            "--log-level=warn",
        ]

    def _apiserver_arguments(self, ports: dict[str, int]) -> list[str]:
        pki_dir = self.directory / "pki"
        return [
            f"--etcd-servers=http://127.0.0.1:{ports['etcd-client']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--cert-dir={pki_dir}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            # Pods of simulated nodes need no token; the plugin would demand one.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            *self._audit_arguments(),
            "--profiling=false",
        ]

    def _audit_arguments(self) -> list[str]:
        # Blocking mode: a request is answered only once its line is written, so a test
        # that counts writes right after they return counts them all.
        return [
            f"--audit-policy-file={self.directory / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]

    def _write_certificates_and_configs(self, apiserver_port: int) -> None:
        ca = pki.CertificateAuthority(self.directory / "pki")
        ca.serving_pair(
            name="apiserver",
            hosts=["127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default"],
        )
        ca.service_account_keys()
        server = f"https://127.0.0.1:{apiserver_port}"
        for key, identity in IDENTITIES.items():
            pair = ca.client_pair(identity, file_stem=f"client-{key}")
            path = self.kubeconfig_for(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_kubeconfig(path, server=server, ca=ca.certificate_path, pair=pair, user=key)
        (self.directory / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        # kwok reads its stages from here (and so never from ~/.kwok of whoever runs this).
        (self.directory / "kwok.yaml").write_text(yaml.safe_dump_all(KWOK_STAGES, sort_keys=False))

    # -- readiness --------------------------------------------------------------------

    def _wait_ready(self, name: str, state: dict[str, Any], deadline: float) -> None:
        while True:
            self._raise_if_exited(name, state)
            if self._is_ready(name, state):
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} did not become ready in time; see {self._log_of(name)}"
                    f"\n{self._tail(name)}"
                )
            time.sleep(0.2)

    def _is_ready(self, name: str, state: dict[str, Any]) -> bool:
        if name == "etcd":
            return _http_ok(f"http://127.0.0.1:{state['ports']['etcd-client']}/health", None)
        if name == "kube-apiserver":
            return _http_ok(f"{state['apiserver']}/readyz", self._tls_context())
        if name == "kwok":
            return _http_ok(f"http://127.0.0.1:{state['ports']['kwok']}/healthz", None)
        # Scheduler and controller-manager serve nothing here; alive after a moment is enough,
        # and the tests that need them wait for their effects anyway.
        time.sleep(0.5)
        return True

    def _tls_context(self) -> ssl.SSLContext:
        pki_dir = self.directory / "pki"
        context = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        context.load_cert_chain(
            str(pki_dir / "client-admin.crt"), str(pki_dir / "client-admin.key")
        )
        return context

    def _raise_if_exited(self, name: str, state: dict[str, Any]) -> None:
        for record in state["processes"]:
            if record["name"] == name and not self._alive(record):
                raise ControlPlaneError(
                    f"{name} exited during start-up; see {self._log_of(name)}\n{self._tail(name)}"
                )

    def _log_of(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            text = self._log_of(name).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- status and down --------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        try:
            loaded: dict[str, Any] = json.loads(self.state_file.read_text())
            return loaded
        except (OSError, ValueError):
            return {"processes": []}

    def _save(self, state: dict[str, Any]) -> None:
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(state, indent=2))
        os.replace(temporary, self.state_file)

    def status(self) -> list[ProcessState]:
        state = self._load()
        return [
            ProcessState(name=p["name"], pid=p["pid"], running=self._alive(p))
            for p in state["processes"]
        ]

    def _alive(self, record: dict[str, Any]) -> bool:
        pid = int(record["pid"])
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        # A recycled pid runs some other program; a zombie has already exited.
        is_ours = bool(cmdline) and cmdline[0].decode(errors="replace") == record["binary"]
        return is_ours and stat.rsplit(")", 1)[1].split()[0] != "Z"

    def down(self, *, timeout: float = 15.0) -> None:
        state = self._load()
        for record in reversed(state["processes"]):
            self._stop(record, timeout)
        state["processes"] = []
        if self.state_file.exists():
            self._save(state)

    def stop_component(self, name: str, *, timeout: float = 15.0) -> None:
        """Stop one component (tests use it to restart the API server under a client)."""
        state = self._load()
        for record in state["processes"]:
            if record["name"] == name:
                self._stop(record, timeout)

    def start_component(self, name: str, *, timeout: float = 60.0) -> None:
        state = self._load()
        self._start(name, state)
        self._wait_ready(name, state, time.monotonic() + timeout)

    def _stop(self, record: dict[str, Any], timeout: float) -> None:
        if not self._alive(record):
            self._reap(int(record["pid"]))
            return
        pid = int(record["pid"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self._alive(record) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._alive(record):
            self._say(f"{record['name']} (pid {pid}) ignored SIGTERM; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self._alive(record):
                time.sleep(0.05)
        self._reap(pid)

    def _reap(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait()

    def _say(self, message: str) -> None:
        """Tell the reader; never fail for want of one: a stop that runs while the test
        runner tears its output down (an interrupt) must still end every process."""
        # A closed or gone stream: the stop goes on unheard.
        with contextlib.suppress(ValueError, OSError):
            print(f"[cluster] {message}", file=self.out, flush=True)


def _write_kubeconfig(path: Path, *, server: str, ca: Path, pair: pki.KeyPair, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}},
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pair.certificate),
                    "client-key": str(pair.key),
                },
            }
        ],
        "contexts": [{"name": f"{user}@local", "context": {"cluster": "local", "user": user}}],
        "current-context": f"{user}@local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _http_ok(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False
