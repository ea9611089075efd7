"""Simulated worker hosts on one machine: one Linux network namespace per host (DESIGN §10).

Each :class:`SimulatedHost` is a network namespace joined to the machine by a veth pair (a
private /24 per host; the machine's end is ``.1``, the host's ``.2``) and runs a real
``grader worker`` inside it (``nsenter --net``, which leaves the cgroup mounts in place). The namespace has no other interface and no
default route, so the worker reaches nothing but the machine's end of its veth.

Redis and PostgreSQL here listen on 127.0.0.1 only, which a namespace cannot reach. A
:class:`Forwarder` (asyncio, in its own thread of the test or benchmark process) listens on each
host's veth address, on the Redis and PostgreSQL ports, and relays to the loopback services.
This was chosen over a second ``redis-server``/``postgres`` bound to the veth addresses because
every host must share one Redis and one database, as real hosts would. The forwarder sets TCP
keepalive and ``TCP_USER_TIMEOUT`` on each host-side connection, as a production PostgreSQL
should (``tcp_keepalives_idle``): a host that vanishes without closing its connections has them
closed within seconds, so a transaction it left open does not hold its row locks forever.

Each host has a private working directory (the worker's current folder, its spool
``GRADER_STORAGE_DIR`` and its own copy of the case set) and no shared folder: archives come from
the database store (``GRADER_STORAGE_URL`` = the database URL, over the veth). The sandbox is
bubblewrap, which unshares a further (empty) network namespace inside the host's.

Everything is named ``gsim<pid hex>-<letter>…`` after the creating process. :class:`Simulation` is
a context manager that removes what it made (workers, namespaces, veths, the forwarder) however
the block ends, and at start removes what an earlier process that died (SIGKILL) left behind.
Needs root (``ip netns``), iproute2 and util-linux (``nsenter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

GRADER_BIN = str(Path(sys.executable).with_name("grader"))
IP = shutil.which("ip") or "/usr/sbin/ip"
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
PREFIX = "gsim"
_NAME = re.compile(rf"{PREFIX}([0-9a-f]+)-")


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([IP, *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def namespaces() -> list[str]:
    """Names of every network namespace on the machine."""
    return [line.split()[0] for line in run_ip("netns", "list").stdout.splitlines() if line]


def links() -> list[str]:
    """Names of every network interface of the machine's own namespace."""
    out = run_ip("-o", "link", "show").stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def ours(names: list[str], pid: int | None = None) -> list[str]:
    """The simulation's names among ``names`` (of process ``pid``, or of any)."""
    found = []
    for name in names:
        match = _NAME.match(name)
        if match and (pid is None or int(match.group(1), 16) == pid):
            found.append(name)
    return found


def sweep_dead_runs() -> int:
    """Remove namespaces and veths left by simulation processes that no longer run."""
    removed = 0
    for kind, names in (("netns", namespaces()), ("link", links())):
        for name in ours(names):
            match = _NAME.match(name)
            assert match is not None
            if Path(f"/proc/{int(match.group(1), 16)}").exists():
                continue
            if kind == "netns":
                _kill_namespace_processes(name)
                run_ip("netns", "del", name, check=False)
            else:
                run_ip("link", "del", name, check=False)
            removed += 1
    return removed


def free_subnet() -> int:
    """A second octet X such that no interface has an address in 10.X.0.0/16 (the hosts of a
    simulation get 10.X.1.0/24, 10.X.2.0/24, …); starts from this process's id."""
    used = run_ip("-o", "-4", "addr", "show").stdout
    for step in range(100):
        octet = 100 + (os.getpid() + step) % 100
        if f" 10.{octet}." not in used:
            return octet
    raise RuntimeError("no free 10.X.0.0/16 network for the simulated hosts")


def _kill_namespace_processes(namespace: str) -> None:
    pids = run_ip("netns", "pids", namespace, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


class Forwarder:
    """TCP relays from (address, port) to loopback targets, in an asyncio loop on a thread."""

    #: Seconds of silence before probing a host-side connection, between probes, and probes.
    KEEPALIVE = (2, 1, 3)
    #: Milliseconds unacknowledged data may wait before the kernel drops the connection.
    USER_TIMEOUT_MS = 5000

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread.start()

    def listen(self, address: str, port: int, target: tuple[str, int]) -> None:
        """Relay connections to ``address:port`` to ``target``."""
        future = asyncio.run_coroutine_threadsafe(self._listen(address, port, target), self._loop)
        future.result(timeout=10)

    async def _listen(self, address: str, port: int, target: tuple[str, int]) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            _harden(writer.get_extra_info("socket"))
            try:
                up_reader, up_writer = await asyncio.open_connection(*target)
            except OSError:
                writer.close()
                return
            await asyncio.gather(
                _pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True
            )

        server = await asyncio.start_server(handle, address, port, reuse_address=True)
        self._servers.append(server)

    def close(self) -> None:
        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()


def _harden(sock: socket.socket | None) -> None:
    if sock is None:
        return
    idle, interval, count = Forwarder.KEEPALIVE
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, Forwarder.USER_TIMEOUT_MS)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


@dataclass
class SimulatedHost:
    """One simulated machine: a namespace, its veth pair, a private folder and its worker."""

    name: str
    namespace: str
    outer: str  # the machine's end of the veth
    inner: str  # the host's end, inside the namespace
    gateway: str  # the machine's address on the veth (where the forwarder listens)
    address: str  # the host's own address
    folder: Path
    worker: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""

    def in_namespace(self) -> list[str]:
        """The command prefix that runs a program in the host's network namespace only.

        Not ``ip netns exec``: it also gives the program a fresh ``/sys`` without the cgroup
        mounts, and the sandbox would lose its per-run cgroups (a real host has them).
        """
        return [NSENTER, f"--net=/run/netns/{self.namespace}", "--"]

    def cut(self) -> None:
        """Unplug the host: its veth goes down (packets stop; no connection is closed)."""
        run_ip("link", "set", self.outer, "down")

    def kill_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(timeout=10)


@dataclass
class Simulation:
    """Hosts in network namespaces sharing one Redis and one PostgreSQL through a forwarder.

    ``redis_port`` and ``postgres_port`` are the loopback services' ports; workers see them at
    their gateway's :data:`REDIS_PORT` and :data:`POSTGRES_PORT`.
    """

    workdir: Path
    redis_port: int
    postgres_port: int = 5432
    hosts: list[SimulatedHost] = field(default_factory=list)
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid():x}-")
    _forwarder: Forwarder | None = None
    _subnet: int = field(default_factory=free_subnet)

    REDIS_PORT = 6379
    POSTGRES_PORT = 5432

    def __enter__(self) -> Simulation:
        if os.geteuid() != 0:
            raise RuntimeError("the multi-host simulation needs root (ip netns)")
        sweep_dead_runs()
        self._forwarder = Forwarder()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self) -> SimulatedHost:
        """Create the next host: namespace, veth pair, addresses, forwards, private folder."""
        index = len(self.hosts)
        letter = chr(ord("a") + index)
        namespace = f"{self.tag}{letter}"
        net = ipaddress.ip_network(f"10.{self._subnet}.{index + 1}.0/24")
        gateway, address = str(net[1]), str(net[2])
        host = SimulatedHost(
            name=f"host-{letter}",
            namespace=namespace,
            outer=f"{self.tag}{letter}o",
            inner=f"{self.tag}{letter}i",
            gateway=gateway,
            address=address,
            folder=self.workdir / f"host-{letter}",
        )
        self.hosts.append(host)  # from here on, close() removes whatever exists of it
        run_ip("netns", "add", namespace)
        run_ip("link", "add", host.outer, "type", "veth", "peer", "name", host.inner)
        run_ip("link", "set", host.inner, "netns", namespace)
        run_ip("addr", "add", f"{gateway}/24", "dev", host.outer)
        run_ip("link", "set", host.outer, "up")
        run_ip("-n", namespace, "addr", "add", f"{address}/24", "dev", host.inner)
        run_ip("-n", namespace, "link", "set", host.inner, "up")
        run_ip("-n", namespace, "link", "set", "lo", "up")
        assert self._forwarder is not None
        self._forwarder.listen(gateway, self.REDIS_PORT, ("127.0.0.1", self.redis_port))
        self._forwarder.listen(gateway, self.POSTGRES_PORT, ("127.0.0.1", self.postgres_port))
        host.folder.mkdir(parents=True)
        return host

    def start_worker(self, host: SimulatedHost, env: Mapping[str, str]) -> None:
        """Run ``grader worker --name <host>`` in the host's namespace and private folder."""
        host.log = host.folder / "worker.log"
        with host.log.open("wb") as handle:
            host.worker = subprocess.Popen(
                [*host.in_namespace(), GRADER_BIN, "worker", "--name", host.name],
                env=dict(env),
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=host.folder,
                start_new_session=True,
            )

    def close(self) -> None:
        """Stop every worker, remove every namespace and veth, stop the forwarder."""
        for host in self.hosts:
            if host.worker is not None and host.worker.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(host.worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for host in self.hosts:
            if host.worker is None:
                continue
            try:
                host.worker.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                host.kill_worker()
        for host in self.hosts:
            if host.namespace in namespaces():
                _kill_namespace_processes(host.namespace)
                run_ip("netns", "del", host.namespace, check=False)
            if host.outer in links():  # normally gone with the namespace's end
                run_ip("link", "del", host.outer, check=False)
        if self._forwarder is not None:
            self._forwarder.close()
            self._forwarder = None

    def leftovers(self) -> list[str]:
        """Namespaces, veths and live workers of this simulation that still exist."""
        pid = os.getpid()
        found = ours(namespaces(), pid) + ours(links(), pid)
        found += [f"worker {h.name}" for h in self.hosts if h.worker and h.worker.poll() is None]
        return found


def host_env(
    base: Mapping[str, str], host: SimulatedHost, *, database_url: str, redis_db: int = 0
) -> dict[str, str]:
    """``base`` (a worker's GRADER_ environment) rewritten for ``host``: the database, the
    archive store and Redis over the host's gateway, its private spool and case set copy."""
    env = dict(base)
    over_veth = re.sub(
        r"@[^/:]+(:\d+)?/", f"@{host.gateway}:{Simulation.POSTGRES_PORT}/", database_url, count=1
    )
    env["GRADER_DATABASE_URL"] = over_veth
    env["GRADER_STORAGE_URL"] = over_veth
    env["GRADER_REDIS_URL"] = f"redis://{host.gateway}:{Simulation.REDIS_PORT}/{redis_db}"
    env["GRADER_STORAGE_DIR"] = str(host.folder / "spool")
    cases = host.folder / "cases"
    shutil.copytree(base["GRADER_CASES_DIR"], cases, dirs_exist_ok=True)
    env["GRADER_CASES_DIR"] = str(cases)
    env["GRADER_SECRET_KEY_FILE"] = str(host.folder / "secret_key")
    env["GRADER_PRACTICE_DIR"] = str(host.folder / "practice")
    return env


@contextlib.contextmanager
def simulation(workdir: Path, *, redis_port: int, hosts: int) -> Iterator[Simulation]:
    """A :class:`Simulation` with ``hosts`` hosts (workers not started yet)."""
    with Simulation(workdir, redis_port=redis_port) as sim:
        for _ in range(hosts):
            sim.add_host()
        yield sim
