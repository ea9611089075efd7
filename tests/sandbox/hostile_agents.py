"""Hostile agent bodies for the sandbox conformance suite.

Every agent answers honestly unless the question contains the word ``hostile``; then it does
its one hostile thing. The conformance test checks that only that case is affected, that
nothing escapes, and that no question fragment reaches anything a student can see.
"""

from __future__ import annotations

PRELUDE = """
import json, os, signal, socket, sys, time

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
}


def source(name: str) -> str:
    """The complete ``agent.py`` of hostile agent ``name``."""
    return PRELUDE + AGENTS[name]
