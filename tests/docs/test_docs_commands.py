"""The shell commands of docs/ and the chart's NOTES run as written, so a stale one fails here.

Every ```bash block of docs/ is preceded by a marker saying what this test does with it:

    <!-- docs-test: run from=clone|parent [check=NAME] -->  run it with bash -euo pipefail
    <!-- docs-test: background name=N from=... ready=PORT --> start it, wait for PORT; a
                                                              later block of the same name
                                                              replaces it (Ctrl-C, restart)
    <!-- docs-test: file PATH from=... -->                   write the (yaml) block to PATH
    <!-- docs-test: skip REASON -->                          not run, and the page says why

A block without a marker is allowed only when it runs the test suite itself
(``.venv/bin/pytest FILE...``): then each test file it names must exist.

The pages run in a sandbox laid out as they say: ``parent/`` holding ``nodepool-operator/``
(a copy of the clone's deploy/ and charts/, its .venv linked) and the user's ``my-install/``,
on a control plane of their own (``ControlPlane`` in ``nodepool-operator/.cluster``, as
``cluster up --dir .cluster`` makes it), with the environment ``eval "$(cluster up)"``
gives: KUBECONFIG, and PATH with the project's kubectl and helm first. Their own control
plane, because the pages install and uninstall cluster-wide things (CRDs, ClusterRoles, a
Helm release named like deploy/'s objects) that the session's other tests share.

What the test changes: the ports of getting-started.md's local processes (8787, 8443, 8081)
become free ones, since parallel sessions share the loopback; and the token files the pages
tell the user to provide (``cloud-token``, ``my-install/cloud-token``) are written with a
random token, which the checks then follow into the cluster.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodepool_devtools.cluster import controlplane

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
NOTES = REPO / "charts" / "nodepool-operator" / "templates" / "NOTES.txt"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!-- docs-test: (run|background|file|skip)\b ?(.*?) -->")
LOCAL_PORTS = ("8787", "8443", "8081")
SECRET = "nodepool-operator-cloud-token"
NAMESPACE = "nodepool-system"
COMMAND_TIMEOUT = 300


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    text: str
    action: str | None
    options: dict[str, str]
    reason: str

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for fence in FENCE.finditer(text):
        preceding = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = MARKER.fullmatch(preceding)
        action, rest = (marker.group(1), marker.group(2)) if marker else (None, "")
        words = rest.split()
        options = dict(w.split("=", 1) for w in words if "=" in w and action != "skip")
        if action == "file":
            options["path"] = words[0]
        found.append(
            Block(
                page=page.name,
                line=text[: fence.start()].count("\n") + 1,
                language=fence.group(1),
                text=fence.group(2),
                action=action,
                options=options,
                reason=rest if action == "skip" else "",
            )
        )
    return found


def _pytest_paths(block: Block) -> list[str] | None:
    """The test paths of a block that only runs the suite, or None if it does more."""
    command = re.sub(r"\\\n", " ", block.text)
    paths: list[str] = []
    for line in command.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = [w for w in line.split() if not re.fullmatch(r"[A-Z_]+=\S*", w)]
        if not words or words[0] != ".venv/bin/pytest":
            return None
        paths += [w.split("::")[0] for w in words[1:] if w.startswith("tests")]
    return paths


def test_every_shell_block_of_the_docs_is_run_or_says_why_not() -> None:
    unmarked, missing = [], []
    for page in sorted(DOCS.glob("*.md")):
        for block in page_blocks(page):
            if block.action == "skip":
                assert block.reason, f"{block.where}: a skip says why"
            if block.language != "bash" or block.action is not None:
                continue
            paths = _pytest_paths(block)
            if paths is None:
                unmarked.append(block.where)
            missing += [f"{block.where}: {p}" for p in paths or [] if not (REPO / p).exists()]
    assert unmarked == [], f"bash blocks without a docs-test marker: {unmarked}"
    assert missing == [], f"test paths the docs name that do not exist: {missing}"


def test_one_prometheus_service_account_everywhere() -> None:
    # getting-started.md reads /metrics on the local control plane with a ServiceAccount
    # of its own (no Prometheus there); every page about a cluster names the same one.
    local = "getting-started.md"
    pages = [p for p in sorted(DOCS.glob("*.md")) if p.name != local]
    texts = [p.read_text() for p in pages] + [NOTES.read_text()]
    accounts = {a for text in texts for a in re.findall(r"--serviceaccount=(\S+)", text)}
    assert accounts == {"monitoring:prometheus-k8s"}
    started = re.findall(r"--serviceaccount=(\S+)", (DOCS / local).read_text())
    assert started == ["default:metrics-reader"]


# --- running the pages ---------------------------------------------------------------------


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclasses.dataclass
class Background:
    command: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            # Its own process group (start_new_session): the bash and what it exec'd.
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@dataclasses.dataclass
class Sandbox:
    parent: Path
    clone: Path
    env: dict[str, str]
    plane: controlplane.ControlPlane
    ports: dict[str, str] = dataclasses.field(default_factory=dict)
    background: dict[str, Background] = dataclasses.field(default_factory=dict)
    finished: dict[str, Background] = dataclasses.field(default_factory=dict)

    def directory(self, block: Block) -> Path:
        where = block.options.get("from")
        assert where in ("clone", "parent"), f"{block.where}: from=clone or from=parent"
        return self.clone if where == "clone" else self.parent

    def text(self, block: Block) -> str:
        text = block.text
        for documented, port in self.ports.items():
            text = re.sub(rf"\b{documented}\b", port, text)
        return text

    def shell(self, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    def kubectl_json(self, *args: str) -> dict[str, object]:
        done = self.shell(" ".join(["kubectl", *args, "-o", "json"]), self.clone)
        assert done.returncode == 0, done.stderr
        found: dict[str, object] = json.loads(done.stdout)
        return found

    def run(self, block: Block) -> subprocess.CompletedProcess[str] | None:
        if block.action == "file":
            target = self.directory(block) / block.options["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text)
        elif block.action == "run":
            done = self.shell(self.text(block), self.directory(block))
            assert done.returncode == 0, (
                f"{block.where} failed ({done.returncode}):\n{block.text}\n"
                f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
            )
            return done
        elif block.action == "background":
            self.start(block)
        else:
            assert block.action == "skip" or block.language != "bash", block.where
        return None

    def start(self, block: Block) -> None:
        name = block.options["name"]
        if name in self.background:
            previous = self.background.pop(name)
            previous.stop()
            self.finished[f"{name}@{previous.process.pid}"] = previous
        log = self.parent / f"{name}-{len(self.finished)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-c", "exec " + self.text(block).strip()],
                cwd=self.directory(block),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started = Background(block.text, process, log)
        self.background[name] = started
        port = int(self.ports.get(block.options["ready"], block.options["ready"]))
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert process.poll() is None, f"{block.where} exited:\n{started.output()}"
            assert time.monotonic() < deadline, f"{block.where}: nothing on {port}"
            time.sleep(0.2)

    def stop_all(self) -> None:
        for name, running in list(self.background.items()):
            running.stop()
            self.finished[f"{name}@{running.process.pid}"] = running
        self.background.clear()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    parent = tmp_path_factory.mktemp("docs")
    clone = parent / "nodepool-operator"
    for directory in ("deploy", "charts"):
        shutil.copytree(REPO / directory, clone / directory)
    (clone / ".venv").symlink_to(REPO / ".venv")
    plane = controlplane.ControlPlane(clone / ".cluster")
    plane.up()
    try:
        # The environment `eval "$(nodepool-operator cluster up)"` leaves in a shell.
        lines = "\n".join(plane.shell_setup())
        dumped = subprocess.run(
            ["bash", "-c", f"{lines}\nenv -0"],
            capture_output=True,
            check=True,
            env=dict(os.environ),
        ).stdout.decode()
        env = dict(item.split("=", 1) for item in dumped.split("\0") if "=" in item)
        env["PATH"] = _path_as_getting_started_sets_it(clone, env["PATH"])
        box = Sandbox(parent=parent, clone=clone, env=env, plane=plane)
        try:
            yield box
        finally:
            box.stop_all()
    finally:
        plane.down()


# getting-started.md's first block (not run: the test is inside the environment it makes)
# puts the clone's .venv/bin on PATH with this line; the sandbox does the same, and
# nothing more, so a page command that needs another PATH fails here.
VENV_ON_PATH = 'export PATH="$PWD/.venv/bin:$PATH"'


def _path_as_getting_started_sets_it(clone: Path, path: str) -> str:
    """``path`` without any virtualenv the test itself runs from (a fresh shell has none),
    with the clone's .venv/bin first, as ``VENV_ON_PATH`` run in the clone makes it."""
    inherited = [p for p in path.split(os.pathsep) if not p.endswith(os.path.join(".venv", "bin"))]
    return os.pathsep.join([str(clone / ".venv" / "bin"), *inherited])


def test_getting_started_puts_the_venv_on_path_as_the_sandbox_does() -> None:
    [setup] = [b for b in page_blocks(DOCS / "getting-started.md") if "cluster up" in b.text]
    lines = [line.split("#")[0].strip() for line in setup.text.splitlines()]
    assert VENV_ON_PATH in lines
    # Before `cluster up`, which the page then runs by its bare name.
    assert lines.index(VENV_ON_PATH) < next(
        i for i, line in enumerate(lines) if "nodepool-operator cluster up" in line
    )
    assert _path_as_getting_started_sets_it(Path("/c"), "/x/.venv/bin:/usr/bin") == (
        "/c/.venv/bin:/usr/bin"
    )


def test_the_token_file_the_pages_write_in_the_clone_is_git_ignored() -> None:
    # getting-started.md writes ./cloud-token at the clone's root (install.md reads it): a
    # secret that must never show in `git status` nor be committed.
    blocks = page_blocks(DOCS / "getting-started.md")
    assert any("> cloud-token" in b.text for b in blocks if b.options.get("from") == "clone")
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "cloud-token"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ignored.stdout.split() == ["cloud-token"], ignored


def _token(path: Path) -> str:
    token = secrets.token_urlsafe(24)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n")
    return token


def _run_page(
    sandbox: Sandbox,
    page: str,
    checks: dict[str, Callable[[subprocess.CompletedProcess[str]], None]],
) -> list[Block]:
    ran = []
    for block in page_blocks(DOCS / page):
        done = sandbox.run(block)
        if "check" in block.options:
            assert done is not None, block.where
            checks[block.options["check"]](done)
        if block.action in ("run", "background", "file"):
            ran.append(block)
    return ran


def _secret_token(sandbox: Sandbox) -> str:
    secret = sandbox.kubectl_json("-n", NAMESPACE, "get", "secret", SECRET)
    data = secret["data"]
    assert isinstance(data, dict)
    return base64.b64decode(data["token"]).decode().strip()


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_getting_started_runs_out_of_cluster_and_shows_a_refused_credential(
    sandbox: Sandbox,
) -> None:
    sandbox.ports = {documented: str(controlplane.free_port()) for documented in LOCAL_PORTS}
    unauthorized: list[str] = []

    def unauthorized_once(_: subprocess.CompletedProcess[str]) -> None:
        # The operator started without --cloud-token-file: one ERROR line naming the 401
        # and the flag, and the pool's row in `kubectl get np` shows the trouble.
        output = sandbox.background["operator"].output()
        unauthorized.extend(line for line in output.splitlines() if "level=ERROR" in line)
        table = sandbox.shell("kubectl get np general", sandbox.clone).stdout.split()
        assert table[table.index("general") + 5 :][:2] == ["True", "CloudListFailed"], table

    def explained(done: subprocess.CompletedProcess[str]) -> None:
        # The plugin, found on PATH as the page set it, answered for a pending pod.
        assert "general" in done.stdout, done.stdout

    def missing_pool(done: subprocess.CompletedProcess[str]) -> None:
        # What the page says the user sees for an Autoscaler whose pool does not exist.
        [row] = [line.split() for line in done.stdout.splitlines() if line.startswith("staging ")]
        # NAME POOL PENDING ... READY AGE REASON (LIMIT empty): the pod it answers for.
        assert row[:3] == ["staging", "genral", "1"], row
        assert (row[-3], row[-1]) == ("False", "NodePoolNotFound"), row
        said = "not planned: Autoscaler staging: NodePool 'genral' does not exist"
        assert said in done.stdout, done.stdout
        assert "no Autoscaler watches" not in done.stdout, done.stdout
        # The pod's own answer, as the page quotes it (events are written just after the
        # batch that decided them: the page's command may run a moment before).
        told = "pod didn't trigger scale-up: NodePool genral, which Autoscaler staging scales"
        events = done.stdout
        for _ in range(30):
            if told in events:
                break
            time.sleep(1)
            events = sandbox.shell(
                "kubectl get events -n staging --field-selector reason=NotTriggerScaleUp",
                sandbox.clone,
            ).stdout
        assert told in events, events

    def metrics(done: subprocess.CompletedProcess[str]) -> None:
        assert "controller_runtime_reconcile_total{" in done.stdout, done.stdout
        # What the page says the other answers are: no token 401, a token without the
        # right 403.
        url = f"https://127.0.0.1:{sandbox.ports['8443']}/metrics"
        anonymous = sandbox.shell(f"curl -sk -o /dev/null -w '%{{http_code}}' {url}", sandbox.clone)
        assert anonymous.stdout == "401", anonymous
        forbidden = sandbox.shell(
            "kubectl create serviceaccount no-metrics >/dev/null && curl -sk -o /dev/null "
            "-w '%{http_code}' -H \"Authorization: Bearer $(kubectl create token no-metrics)\" "
            + url,
            sandbox.clone,
        )
        assert forbidden.stdout == "403", forbidden

    try:
        ran = _run_page(
            sandbox,
            "getting-started.md",
            {
                "unauthorized-once": unauthorized_once,
                "explained": explained,
                "missing-pool": missing_pool,
                "metrics": metrics,
            },
        )
    finally:
        sandbox.stop_all()
    assert [b.action for b in ran].count("background") == 4  # simcloud, operator thrice
    assert len(unauthorized) == 1, unauthorized
    [line] = unauthorized
    assert "event=cloud-unauthorized" in line, line
    assert "401 Unauthorized" in line, line
    assert "--cloud-token-file" in line, line
    operators = [b for name, b in sandbox.finished.items() if name.startswith("operator@")]
    assert ["--cloud-token-file" in o.command for o in operators] == [True, False, True]
    for operator in operators[::2]:  # with the token: the check passed, never an ERROR
        assert "event=cloud-check-passed cloud=simcloud" in operator.output()
        assert "level=ERROR" not in operator.output(), operator.output()


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_kustomize_install_keeps_the_users_token_through_every_documented_apply(
    sandbox: Sandbox,
) -> None:
    sandbox.ports = {}
    _token(sandbox.clone / "cloud-token")  # the "try it" section's, replaced by the overlay's
    blocks = page_blocks(DOCS / "operations.md")
    uninstall_at = next(i for i, b in enumerate(blocks) if "kubectl delete -k my-install" in b.text)
    try:
        _install_reapply_and_rotate(sandbox, blocks[:uninstall_at])
    except BaseException:
        # Leave the next page a cluster without this install, as its uninstall would.
        sandbox.shell("kubectl delete -k my-install/ --ignore-not-found", sandbox.parent)
        raise
    for block in blocks[uninstall_at:]:
        sandbox.run(block)
    gone = sandbox.shell(f"kubectl get namespace {NAMESPACE}", sandbox.clone)
    assert gone.returncode != 0, gone
    assert "NotFound" in gone.stderr, gone


def _install_reapply_and_rotate(sandbox: Sandbox, blocks: list[Block]) -> None:
    token = _token(sandbox.parent / "my-install" / "cloud-token")
    checked = 0
    for block in blocks:
        done = sandbox.run(block)
        if block.options.get("check") == "token-secret":
            assert done is not None
            assert _secret_token(sandbox) == token, done.stdout
            checked += 1
    assert checked == 1
    # Every documented apply again, in any order, keeps the token: the overlay's, the base
    # alone (which ships no Secret), the simulated cloud.
    for command in (
        "kubectl apply -k my-install/",
        "kubectl apply -k nodepool-operator/deploy/",
        "kubectl apply -k nodepool-operator/deploy/simcloud",
        "kubectl apply -k my-install/",
    ):
        again = sandbox.shell(command, sandbox.parent)
        assert again.returncode == 0, again.stderr
        assert f"secret/{SECRET} configured" not in again.stdout, again.stdout
        assert _secret_token(sandbox) == token, command
    # A rotation is a change of the file and one more apply.
    rotated = _token(sandbox.parent / "my-install" / "cloud-token")
    again = sandbox.shell("kubectl apply -k my-install/", sandbox.parent)
    assert again.returncode == 0, again.stderr
    assert f"secret/{SECRET} configured" in again.stdout, again.stdout
    assert _secret_token(sandbox) == rotated


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_helm_install_page_and_the_charts_notes_run_as_written(sandbox: Sandbox) -> None:
    sandbox.ports = {}
    _token(sandbox.clone / "cloud-token")
    notes: list[str] = []

    def chart_notes(done: subprocess.CompletedProcess[str]) -> None:
        text = done.stdout.split("NOTES:", 1)[1]
        commands = re.sub(r"\\\n\s*", "", text)
        notes.extend(
            line.strip() for line in commands.splitlines() if line.startswith("  kubectl ")
        )
        # The NOTES' commands that need no running operator, from the clone's root as they
        # say; the binding is made again by the Monitoring section, so it goes after.
        for command in notes:
            if "rollout status" in command or "get lease" in command:
                continue
            ran = sandbox.shell(command, sandbox.clone)
            assert ran.returncode == 0, f"NOTES: {command}\n{ran.stderr}"
        deleted = sandbox.shell(
            "kubectl delete clusterrolebinding prometheus-nodepool-metrics", sandbox.clone
        )
        assert deleted.returncode == 0, deleted.stderr

    ran = _run_page(sandbox, "install.md", {"chart-notes": chart_notes})
    assert len(notes) == 4, notes
    assert any("helm install" in b.text for b in ran)
    binding = sandbox.kubectl_json("get", "clusterrolebinding", "prometheus-nodepool-metrics")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    ]
