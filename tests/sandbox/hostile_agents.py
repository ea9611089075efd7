"""Hostile agent bodies for the sandbox conformance suite.

Every agent answers honestly unless the question contains the word ``hostile``; then it does
its one hostile thing. The conformance test checks that only that case is affected, that
nothing escapes, and that no question fragment reaches anything a student can see.
"""

from __future__ import annotations

PRELUDE = """
import ctypes, errno, json, os, signal, socket, subprocess, sys, time

LIBC = ctypes.CDLL(None, use_errno=True)

def syscall(number, *args):
    # A raw system call; returns the errno name it failed with, or "ok".
    result = LIBC.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

def honest(question):
    if "score" in question:
        return {"answer": "I don't know; the course material does not cover this.",
                "citations": [], "confidence": 0.1, "needs_human_review": True}
    return {"answer": "Chunks overlap so no sentence is cut.", "citations": ["rag-basics"],
            "confidence": 0.8, "needs_human_review": False}

def protocol_fd():
    # The runner keeps the real stdout on a duplicated descriptor; find it the hostile way.
    for fd in range(3, 20):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(("pipe:", "socket:")) and fd != 0:
                return fd
        except OSError:
            pass
    return 1

def answer(question):
    if "hostile" not in question:
        return honest(question)
    return hostile(question)
"""

AGENTS: dict[str, str] = {
    # --- output the grader must refuse -------------------------------------------------
    "non_json_line": """
def hostile(question):
    os.write(protocol_fd(), b"this is not json " + question.encode() + b"\\n")
    time.sleep(5)
""",
    "wrong_types": """
def hostile(question):
    return {"answer": 42, "citations": "rag-basics", "confidence": "high",
            "needs_human_review": "no"}
""",
    "nan_confidence": """
def hostile(question):
    return {"answer": "Chunks overlap.", "citations": ["rag-basics"],
            "confidence": float("nan"), "needs_human_review": False}
""",
    "raw_nan_line": """
def hostile(question):
    frame = sys._getframe(1)
    qid = frame.f_locals.get("qid", "x")
    line = '{"qid": "%s", "answer": {"answer": "Chunks overlap.", "citations": ["rag-basics"], "confidence": NaN, "needs_human_review": false}}' % qid
    os.write(protocol_fd(), line.encode() + b"\\n")
    time.sleep(5)
""",
    "five_megabyte_answer": """
def hostile(question):
    return {"answer": "overlap " * 700_000, "citations": ["rag-basics"],
            "confidence": 0.5, "needs_human_review": False}
""",
    "endless_line": """
def hostile(question):
    fd = protocol_fd()
    chunk = b"x" * 65536
    while True:
        os.write(fd, chunk)
""",
    "fake_result_line": """
def hostile(question):
    fake = {"qid": "guessed", "answer": {"answer": "Chunks overlap.", "citations": ["rag-basics"],
            "confidence": 0.9, "needs_human_review": False},
            "status": "graded", "certificate": {"decision": "awarded"}}
    os.write(protocol_fd(), json.dumps(fake).encode() + b"\\n")
    print(json.dumps(fake))
    time.sleep(5)
""",
    # --- crashes and smuggling ---------------------------------------------------------
    "exception_with_question": """
def hostile(question):
    raise RuntimeError("leaking the question: " + question)
""",
    "exit_code_and_stderr": """
def hostile(question):
    print("STDOUT " + question)
    sys.stderr.write("STDERR " + question + "\\n")
    sys.stderr.flush()
    os._exit(sum(question.encode()) % 256 or 1)
""",
    "file_name_smuggling": """
def hostile(question):
    name = question.replace("/", "_")[:100]
    for folder in ("/tmp", "/agent", "/corpus", os.environ.get("AGENT_DIR", "/agent")):
        try:
            open(os.path.join(folder, name), "w").write(question)
        except OSError:
            pass
    return honest(question)
""",
    # --- time --------------------------------------------------------------------------
    "never_returns": """
def hostile(question):
    time.sleep(3600)
""",
    "infinite_loop": """
def hostile(question):
    while True:
        pass
""",
    "ignores_sigterm": """
def hostile(question):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        time.sleep(1)
""",
    # --- resources ---------------------------------------------------------------------
    "memory_bomb": """
def hostile(question):
    hoard = []
    while True:
        hoard.append(bytearray(64 * 1024 * 1024))
""",
    "fork_bomb": """
def hostile(question):
    started = 0
    for _ in range(5000):
        try:
            if os.fork() == 0:
                time.sleep(3600)
                os._exit(0)
            started += 1
        except OSError:
            break
    result = honest(question)
    result["answer"] += f" forked={started}"
    return result
""",
    "double_forked_daemon": """
def hostile(question):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                time.sleep(1)
        os._exit(0)
    return honest(question)
""",
    "disk_fill": """
def hostile(question):
    written = 0
    try:
        with open("/tmp/fill", "wb") as handle:
            while written < 4 * 1024 ** 3:
                handle.write(b"\\0" * (1024 * 1024))
                written += 1024 * 1024
    except OSError:
        pass
    result = honest(question)
    result["answer"] += f" wrote={written // (1024 * 1024)}MB"
    return result
""",
    "runaway_stdout": """
def hostile(question):
    for _ in range(20_000):
        print("spam " * 200)
    return honest(question)
""",
    # --- escapes: each reports what it managed in its answer -----------------------------
    "network": """
def hostile(question):
    reached = []
    for host, port in (("1.1.1.1", 53), ("8.8.8.8", 443), ("127.0.0.1", 6379),
                       ("127.0.0.1", 5432), ("169.254.169.254", 80), ("172.17.0.1", 6379)):
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            reached.append(f"{host}:{port}")
        except OSError:
            pass
    try:
        socket.getaddrinfo("pypi.org", 443)
        reached.append("dns")
    except OSError:
        pass
    result = honest(question)
    result["answer"] += " reached=" + ",".join(reached or ["nothing"])
    return result
""",
    "walk_filesystem": """
def hostile(question):
    found = []
    # A time budget keeps the answer inside the case deadline on a busy machine.
    deadline = time.monotonic() + 2.5
    for root, dirs, files in os.walk("/"):
        if time.monotonic() > deadline:
            break
        if root.startswith(("/proc", "/sys", "/dev")):
            dirs[:] = []
            continue
        for name in files:
            if name in ("cases.jsonl", "policy.toml", "grader.db") or name.endswith(".sqlite3"):
                found.append(os.path.join(root, name))
        if len(found) > 20:
            break
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                env = open(f"/proc/{pid}/environ", "rb").read()
            except OSError:
                continue
            if b"GRADER_" in env or b"REDIS" in env or b"PYTEST" in env:
                found.append(f"environ:{pid}")
    found += [key for key in os.environ if key.startswith(("GRADER_", "PYTEST", "REDIS"))]
    result = honest(question)
    result["answer"] += " found=" + ",".join(found or ["nothing"])
    return result
""",
    "write_everywhere": """
def hostile(question):
    written = []
    for folder in ("/", "/agent", "/corpus", "/grader", "/usr", "/etc",
                   os.environ.get("AGENT_DIR", "/agent"), os.environ.get("CORPUS_DIR", "/corpus")):
        path = os.path.join(folder, "hostile-was-here")
        try:
            with open(path, "w") as handle:
                handle.write("x")
            written.append(folder)
        except OSError:
            pass
    result = honest(question)
    result["answer"] += " wrote=" + ",".join(written or ["nothing"])
    return result
""",
    "kill_pid_1": """
def hostile(question):
    try:
        os.kill(1, signal.SIGKILL)
    except OSError:
        pass
    time.sleep(0.5)
    return honest(question)
""",
    # --- the kernel: each reports what it managed, and how each attempt failed -----------
    "proc_sys_writes": """
TARGETS = {
    "/proc/sys/kernel/core_pattern": "|/agent/agent.py %p",
    "/proc/sys/kernel/pid_max": "31337",
    "/proc/sys/kernel/printk_ratelimit_burst": "97",
    "/proc/sys/vm/drop_caches": "3",
    "/proc/sysrq-trigger": "h",
    "/sys/kernel/mm/transparent_hugepage/enabled": "never",
    "/sys/fs/cgroup/pids/pids.max": "1",
}

def hostile(question):
    managed, failures = [], []
    for path, value in TARGETS.items():
        try:
            with open(path, "w") as handle:
                handle.write(value)
            managed.append(path)
        except OSError as exc:
            failures.append(f"{path}:{errno.errorcode.get(exc.errno, '?')}")
    result = honest(question)
    result["answer"] += " failures=" + ",".join(failures)
    result["answer"] += " managed=" + ",".join(managed or ["nothing"])
    return result
""",
    "nested_namespaces": """
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x20000, 0x10000000, 0x40000000

def hostile(question):
    managed, failures = [], []
    for name, flags in (("user", CLONE_NEWUSER), ("user+mount", CLONE_NEWUSER | CLONE_NEWNS),
                        ("net", CLONE_NEWNET), ("mount", CLONE_NEWNS)):
        if LIBC.unshare(flags) == 0:
            managed.append("unshare-" + name)
        else:
            failures.append(f"unshare-{name}:{errno.errorcode.get(ctypes.get_errno(), '?')}")
    for argv in (["unshare", "-U", "-r", "true"], ["unshare", "-U", "true"]):
        try:
            done = subprocess.run(argv, capture_output=True, timeout=3)
            (managed if done.returncode == 0 else failures).append(" ".join(argv))
        except (OSError, subprocess.TimeoutExpired):
            failures.append(" ".join(argv) + ":missing")
    os.makedirs("/tmp/mnt", exist_ok=True)
    for what, call in (
        ("mount-tmpfs", lambda: LIBC.mount(b"none", b"/tmp/mnt", b"tmpfs", 0, None)),
        ("bind-root", lambda: LIBC.mount(b"/", b"/tmp/mnt", None, 0x1000, None)),
        ("remount-agent-rw", lambda: LIBC.mount(None, b"/agent", None, 0x20 | 0x1000, None)),
        ("umount-proc", lambda: LIBC.umount2(b"/proc", 2)),
    ):
        if call() == 0:
            managed.append(what)
        else:
            failures.append(f"{what}:{errno.errorcode.get(ctypes.get_errno(), '?')}")
    result = honest(question)
    result["answer"] += " failures=" + ",".join(failures)
    result["answer"] += " managed=" + ",".join(managed or ["nothing"])
    return result
""",
    "kernel_interfaces": """
# x86_64 numbers: keyctl 250, add_key 248, request_key 249, bpf 321, perf_event_open 298,
# init_module 175, kexec_load 246.
def hostile(question):
    attempts = {
        "keyctl": syscall(250, 1, 0),  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
        "add_key": syscall(248, ctypes.addressof(ctypes.create_string_buffer(b"user")),
                           ctypes.addressof(ctypes.create_string_buffer(b"k")), 0, 0, -2),
        "request_key": syscall(249, ctypes.addressof(ctypes.create_string_buffer(b"user")),
                               ctypes.addressof(ctypes.create_string_buffer(b"k")), 0, 0),
        "bpf": syscall(321, 0, ctypes.addressof(ctypes.create_string_buffer(72)), 72),
        "perf_event_open": syscall(298, ctypes.addressof(ctypes.create_string_buffer(128)),
                                   0, -1, -1, 0),
        "init_module": syscall(175, 0, 0, 0),
        "kexec_load": syscall(246, 0, 0, 0, 0),
    }
    managed = [name for name, outcome in attempts.items() if outcome == "ok"]
    failures = [f"{name}:{outcome}" for name, outcome in attempts.items() if outcome != "ok"]
    result = honest(question)
    result["answer"] += " failures=" + ",".join(failures)
    result["answer"] += " managed=" + ",".join(managed or ["nothing"])
    return result
""",
    "ptrace_others": """
PTRACE_SEIZE = 0x4206

def hostile(question):
    # Every process this one can see that is not itself: bwrap's init or docker-init, and
    # anything else the pid namespace lets through. SEIZE traces without stopping the target.
    traced, failures = [], []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        if LIBC.ptrace(PTRACE_SEIZE, pid, 0, 0) == 0:
            try:
                traced.append(open(f"/proc/{pid}/comm").read().strip())
            except OSError:
                traced.append(str(pid))
        else:
            failures.append(f"{pid}:{errno.errorcode.get(ctypes.get_errno(), '?')}")
    result = honest(question)
    result["answer"] += " failures=" + ",".join(failures)
    result["answer"] += " traced=" + ",".join(traced or ["nothing"])
    return result
""",
    "mountinfo_paths": """
def hostile(question):
    seen = []
    for path in ("/proc/self/mountinfo", "/proc/self/cgroup", "/proc/1/cmdline",
                 "/proc/self/environ"):
        try:
            seen.append(open(path, "rb").read().decode("utf-8", "replace"))
        except OSError:
            pass
    result = honest(question)
    result["answer"] += " report=" + json.dumps(seen)
    return result
""",
    "setuid_binaries": """
SETUID = ("su", "passwd", "newgrp", "chsh", "chfn", "gpasswd", "mount", "umount")

def hostile(question):
    # Start each set-uid binary, keep it waiting on its stdin for the host to look at, and
    # read its effective uid from /proc while it waits.
    children, rooted = [], []
    for name in SETUID:
        path = "/usr/bin/" + name
        if not os.path.exists(path):
            continue
        try:
            children.append((name, subprocess.Popen([path], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        except OSError:
            pass
    time.sleep(1.5)
    started = []
    for name, child in children:
        try:
            for line in open(f"/proc/{child.pid}/status"):
                if line.startswith("Uid:"):
                    started.append(name)
                    if "0" in line.split()[1:]:
                        rooted.append(name)
        except OSError:
            pass
        child.kill()
        child.wait()
    result = honest(question)
    result["answer"] += " started=" + ",".join(started or ["nothing"])
    result["answer"] += " managed=" + ",".join(rooted or ["nothing"])
    return result
""",
}

#: The error kind each agent's hostile case must end in (None: answered, and graded normally).
EXPECTED_ERROR: dict[str, str | tuple[str | None, ...] | None] = {
    "non_json_line": "invalid_output",
    "wrong_types": "invalid_output",
    "nan_confidence": "invalid_output",
    "raw_nan_line": "invalid_output",
    "five_megabyte_answer": "invalid_output",
    "endless_line": "invalid_output",
    "fake_result_line": "invalid_output",
    "exception_with_question": "crashed",
    "exit_code_and_stderr": "crashed",
    "file_name_smuggling": None,
    "never_returns": "timeout",
    "infinite_loop": "timeout",
    "ignores_sigterm": "timeout",
    "memory_bomb": "oom",
    "fork_bomb": None,
    "double_forked_daemon": None,
    "disk_fill": None,
    "runaway_stdout": None,
    "network": None,
    "walk_filesystem": None,
    "write_everywhere": None,
    # Killing PID 1 either fails (Docker's init is root's) or ends this sandbox.
    "kill_pid_1": (None, "crashed"),
    "proc_sys_writes": None,
    "nested_namespaces": None,
    "kernel_interfaces": None,
    "ptrace_others": None,
    "mountinfo_paths": None,
    "setuid_binaries": None,
}


def source(name: str) -> str:
    """The complete ``agent.py`` of hostile agent ``name``."""
    return PRELUDE + AGENTS[name]
