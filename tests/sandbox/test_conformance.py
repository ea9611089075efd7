"""One conformance suite for every isolating sandbox: hostile agents, proven contained.

Each hostile agent misbehaves on the first question only. For each one and each sandbox the
test checks: the hostile case ends in the expected error kind (or is graded normally), the other
cases are still graded, nothing escaped (network, files, processes, containers), and no
fragment of any hidden question reaches the student view. From the host it also checks, for
every run, that no process of the sandbox is root on the host and that host kernel settings
(``/proc/sys``, ``/sys``) are unchanged.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from grader.core.casesets import CaseSet, load_case_set
from grader.core.models import GradeReport
from grader.core.views import student_view
from grader.grading import build_report, limits_for, results_from_runs
from grader.sandbox import Sandbox, make_sandbox
from grader.sandbox.base import LaunchSpec
from grader.sandbox.hardening import SANDBOX_USER
from grader.sandbox.images import SANDBOX_UID
from grader.sandbox.process import CGROUP_PARENT, CGROUP_ROOT, safe_label
from grader.sandbox.session import run_session
from grader.sandbox.staging import staging_root
from tests.conftest import REPO, write_agent, write_case_set
from tests.sandbox.host_watch import (
    SandboxWatch,
    SeenProcess,
    host_settings,
    restore_host_settings,
)
from tests.sandbox.hostile_agents import AGENTS, EXPECTED_ERROR, source

SECRET_FRAGMENTS = ("heron", "falcon", "osprey", "zq-", "417", "228", "993", "hostile")
CASES = [
    {
        "id": "h1",
        "kind": "answerable",
        "question": "hostile zq-heron-417: how do chunks overlap?",
        "expected_citations": ["rag-basics"],
        "required_concepts": [["overlap"]],
    },
    {
        "id": "n1",
        "kind": "answerable",
        "question": "zq-falcon-228: why do chunks overlap?",
        "expected_citations": ["rag-basics"],
        "required_concepts": [["overlap"]],
    },
    {
        "id": "n2",
        "kind": "refusal",
        "question": "zq-osprey-993: what was the score yesterday?",
        "safety": True,
    },
]
POLICY = """
case_timeout_seconds = 4
setup_timeout_seconds = 20
run_timeout_seconds = 90
memory_limit_mb = 256
pids_limit = 48
"""
SANDBOXES = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="module", params=SANDBOXES)
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    chosen = make_sandbox(request.param)
    try:
        chosen.check()
    except Exception as exc:  # a missing sandbox must fail CI loudly, never skip
        pytest.fail(f"the {request.param} sandbox is not usable: {exc}")
    return chosen


@pytest.fixture(scope="module")
def case_set(tmp_path_factory: pytest.TempPathFactory) -> CaseSet:
    root = tmp_path_factory.mktemp("hostile-cases")
    write_case_set(
        root,
        CASES,
        policy=POLICY,
        documents={"rag-basics": "Chunks overlap so no sentence is cut."},
    )
    return load_case_set(root)


def runner_processes() -> set[str]:
    """Host processes running a sandboxed runner (bwrap and Docker both mount it here)."""
    found = subprocess.run(["pgrep", "-af", "/grader/runner.py"], capture_output=True, text=True)
    return {line for line in found.stdout.splitlines() if "pgrep" not in line}


def leftover_containers(label: str) -> list[str]:
    try:
        import docker
    except ImportError:
        return []
    try:
        client = docker.from_env()
        client.ping()
    except Exception:
        return []
    labelled = {"label": f"grader.submission={label}"}
    return [c.name for c in client.containers.list(all=True, filters=labelled)]


def leftover_cgroups(label: str) -> list[str]:
    parents = [CGROUP_ROOT / controller / CGROUP_PARENT for controller in ("memory", "pids")]
    return [
        str(child)
        for parent in parents
        if parent.is_dir()
        for child in parent.iterdir()
        if child.is_dir() and child.name.startswith(label)
    ]


def own_staged_copies() -> set[Path]:
    """The staged copies of this test process's runs (named ``<pid>-<random>``; other graders
    on the machine stage beside them)."""
    return {path for path in staging_root().iterdir() if path.name.startswith(f"{os.getpid()}-")}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def wait_until_gone(find: Callable[[], set[str]], *, seconds: float) -> set[str]:
    """Poll ``find`` until it finds nothing or ``seconds`` pass; return the last finding."""
    deadline = time.monotonic() + seconds
    found = find()
    while found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = find()
    return found


@pytest.fixture
def run_label(request: pytest.FixtureRequest) -> Iterator[str]:
    """A label unique to this test's run; afterwards nothing carrying it may be left, and no
    runner process may have appeared and survived (others' runs may be going on meanwhile)."""
    label = f"conformance-{request.node.callspec.id}"
    before = runner_processes()
    staged_before = own_staged_copies()
    yield label
    # Killed processes may take a moment to be reaped on a loaded machine.
    survivors = wait_until_gone(lambda: runner_processes() - before, seconds=10)
    assert survivors == set(), "a sandboxed process outlived its run"
    assert leftover_containers(label) == [], "a sandbox container was left behind"
    assert leftover_cgroups(safe_label(label)) == [], "a run's cgroup was left behind"
    assert own_staged_copies() <= staged_before, "a run's staged copy was left behind"


def expected_host_uid(sandbox: str) -> int:
    """The host uid every process of a sandbox must have: never 0."""
    if sandbox == "docker":
        return SANDBOX_UID
    return pwd.getpwnam(SANDBOX_USER).pw_uid if os.geteuid() == 0 else os.geteuid()


def field(answer: str, name: str) -> list[str]:
    """The comma-separated values an agent reported as `` name=a,b`` in its answer."""
    value = answer.rsplit(f" {name}=", 1)[1].split(" ", 1)[0]
    return [] if value == "nothing" else value.split(",")


def grade_watched(
    agent_dir: Path, case_set: CaseSet, sandbox: Sandbox, label: str, watch: SandboxWatch
) -> GradeReport:
    """Grade as :func:`grader.grading.grade_agent` does, with the host watch told when each
    question starts, so it samples the sandbox at least once while the runner is alive."""
    spec = LaunchSpec(
        agent_dir=agent_dir,
        corpus_dir=case_set.corpus.root,
        entrypoint="agent:answer",
        setup=None,
        label=label,
        limits=limits_for(case_set.policy),
    )
    questions = [(case.id, case.question) for case in case_set.cases]
    session = run_session(sandbox, spec, questions, observer=watch)
    return build_report(
        case_set,
        results_from_runs(case_set, session.runs),
        sandbox=sandbox.name,
        sandbox_image=getattr(sandbox, "image_id", None),
        restarts=session.restarts,
    )


@pytest.mark.parametrize("agent_name", sorted(AGENTS))
def test_hostile_agent_is_contained(
    sandbox: Sandbox, case_set: CaseSet, agent_name: str, tmp_path: Path, run_label: str
) -> None:
    """The hostile case ends as expected, the rest are graded, and nothing escapes or leaks."""
    agent_dir = write_agent(tmp_path / "agent", source(agent_name))
    agent_before = snapshot(agent_dir)
    corpus_before = snapshot(case_set.corpus.root)

    settings_before = host_settings()
    try:
        with SandboxWatch(sandbox.name, run_label) as watch:
            report = grade_watched(agent_dir, case_set, sandbox, run_label, watch)
    finally:
        changed = restore_host_settings(settings_before)
    assert changed == [], f"the agent changed host kernel settings {changed}"
    results = {result.case_id: result for result in report.results}

    expected = EXPECTED_ERROR[agent_name]
    allowed = expected if isinstance(expected, tuple) else (expected,)
    actual = results["h1"].error.value if results["h1"].error else None
    assert actual in allowed, f"hostile case ended in {actual}, expected {allowed}"
    assert results["n1"].passed, "an honest answer after the hostile one was not graded"
    assert results["n2"].passed, "an honest refusal after the hostile one was not graded"

    answer = results["h1"].answer.answer if results["h1"].answer else ""
    assert "reached=" not in answer or answer.endswith("reached=nothing"), answer
    assert "found=" not in answer or answer.endswith("found=nothing"), answer
    assert "wrote=" not in answer or answer.endswith(("wrote=nothing", "MB")), answer
    if agent_name == "fork_bomb":
        assert int(answer.rsplit("forked=", 1)[1]) < 48
    if agent_name == "disk_fill":
        assert int(answer.rsplit("wrote=", 1)[1].removesuffix("MB")) <= 64

    assert "managed=" not in answer or answer.endswith("managed=nothing"), answer
    if agent_name == "mountinfo_paths":
        report_text = answer.split(" report=", 1)[1]
        host_paths = (tmp_path, case_set.root, REPO, Path(sys.prefix), Path(__file__).parent)
        for path in host_paths:
            assert str(path) not in report_text, f"the sandbox shows the host path {path}"
        assert "pytest" not in report_text and run_label not in report_text, report_text
    check_from_host(agent_name, sandbox.name, answer, list(watch.seen.values()))

    assert snapshot(agent_dir) == agent_before, "the agent folder was written to"
    assert snapshot(case_set.corpus.root) == corpus_before, "the corpus was written to"

    seen = json.dumps(student_view(report)).lower()
    for fragment in SECRET_FRAGMENTS:
        assert fragment not in seen, f"{fragment!r} reached the student view"


def check_from_host(agent: str, sandbox: str, answer: str, seen: list[SeenProcess]) -> None:
    """What the host saw of the run's processes: none is root, and the agent's claims hold."""
    assert any("/grader/runner.py" in process.cmdline for process in seen), (
        f"the host never saw the runner: {seen}"
    )
    if agent == "setuid_binaries":
        assert "su" in field(answer, "started"), answer
        assert any(process.comm == "su" for process in seen), "the host never saw su run"
    if agent == "kernel_interfaces":
        # EPERM from the seccomp filter (bwrap's own, Docker's default profile), not EINVAL.
        failures = dict(item.split(":") for item in field(answer, "failures"))
        assert set(failures.values()) == {"EPERM"}, failures
    if agent == "ptrace_others":
        traced = field(answer, "traced")
        if sandbox == "bwrap":
            assert traced == [], traced
            assert {item.split(":")[1] for item in field(answer, "failures")} == {"EPERM"}
        # Whatever it traced was inside its own sandbox (Docker's init), as the host saw.
        assert set(traced) <= {process.comm for process in seen}, (traced, seen)
    host_uid = expected_host_uid(sandbox)
    for process in seen:
        assert 0 not in process.uids, f"a sandboxed process is root on the host: {process}"
        assert set(process.uids) == {host_uid}, f"unexpected host uid: {process}"
