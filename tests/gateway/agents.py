"""Agent bodies that call the model gateway (stdlib ``urllib`` only, so they run everywhere).

Every agent answers honestly through ``course-chat`` unless the question contains ``417`` (the
first case); then it does its one hostile thing and reports what it saw as ``report=<json>``
at the end of its answer (instructors see answers; students never do).
"""

from __future__ import annotations

PRELUDE = """
import json, os, socket, threading, time, urllib.error, urllib.request

PASSAGE = "[rag-basics] Chunks overlap so no sentence is cut."

def call(path, body=None, *, method="POST", key=None, raw=None, timeout=8):
    url = os.environ["OPENAI_BASE_URL"] + path
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Authorization": "Bearer " + (key if key is not None else os.environ["OPENAI_API_KEY"]),
               "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except OSError as exc:
        return 0, {"error": str(exc)}

def chat(question, model="course-chat", **extra):
    body = {"model": model, "messages": [
        {"role": "system", "content": "Answer only from the passages."},
        {"role": "user", "content": PASSAGE + "\\nQuestion: " + question}], **extra}
    return call("/chat/completions", body)

def honest(question):
    if "score" in question:
        return {"answer": "I don't know; the course material does not cover this.",
                "citations": [], "confidence": 0.1, "needs_human_review": True}
    status, out = chat(question)
    text = out["choices"][0]["message"]["content"] if status == 200 else ""
    if "overlap" not in text:
        text = "Chunks overlap so no sentence is cut."
    return {"answer": text, "citations": ["rag-basics"], "confidence": 0.8,
            "needs_human_review": False}

def reported(question, report):
    result = honest(question.replace("417", ""))
    result["answer"] += " report=" + json.dumps(report, sort_keys=True)
    return result

def answer(question):
    if "417" not in question:
        return honest(question)
    return hostile(question)
"""

AGENTS: dict[str, str] = {
    # Many calls at once from many threads: only calls_per_case reach the upstream.
    "flood": """
def hostile(question):
    statuses = []
    lock = threading.Lock()
    def some():
        for _ in range(5):
            status, _ = chat("why do chunks overlap?")
            with lock:
                statuses.append(status)
    threads = [threading.Thread(target=some) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    served = statuses.count(200)
    refused = sum(1 for s in statuses if s != 200)
    return reported(question, {"served": served, "refused": refused, "other": sorted(set(statuses) - {200, 429, 0})})
""",
    # Hundreds of raw connections at once (no threads of its own): after it lets go, the
    # gateway still answers.
    "connection_flood": """
def hostile(question):
    port = int(os.environ["OPENAI_BASE_URL"].rsplit(":", 1)[1].split("/")[0])
    held = []
    for _ in range(200):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=1)
            sock.sendall(b"GET /v1/models HTTP/1.1\\r\\n")
            held.append(sock)
        except OSError:
            break
    for sock in held:
        sock.close()
    time.sleep(0.5)
    return reported(question, {"after": chat(question)[0], "opened": len(held) > 20})
""",
    # Bodies the gateway must refuse, each with its own status.
    "malformed": """
def hostile(question):
    report = {}
    report["oversized"] = call("/chat/completions", raw=b"{" + b" " * 300000 + b"}")[0]
    report["not_json"] = call("/chat/completions", raw=b"{not json")[0]
    report["array"] = call("/chat/completions", raw=b"[1, 2]")[0]
    report["no_messages"] = call("/chat/completions", {"model": "course-chat"})[0]
    report["stream"] = chat(question, stream=True)[0]
    report["hot"] = chat(question, temperature=1.5)[0]
    report["long"] = chat(question, max_tokens=5000)[0]
    report["bad_key"] = call("/chat/completions", {"model": "course-chat"}, key="sk-guess")[0]
    report["no_key"] = call("/models", method="GET", key="")[0]
    return reported(question, report)
""",
    # Models the course does not offer, including the upstream's own model name.
    "other_models": """
def hostile(question):
    report = {name: chat(question, model=name)[0]
              for name in ("gpt-4o", "course-extractive", "", "course-chat ")}
    status, listing = call("/models", method="GET")
    report["listed"] = sorted(m["id"] for m in listing.get("data", []))
    return reported(question, report)
""",
    # Paths outside the OpenAI subset, and the upstream by address.
    "other_paths": """
def hostile(question):
    report = {}
    for path in ("/completions", "/files", "/../../etc/passwd", "/chat/completions/../models", "/admin"):
        report[path] = call(path, {"model": "course-chat"})[0]
    report["GET chat"] = call("/chat/completions", method="GET")[0]
    reached = []
    for port in (8400, 80, 443, 6379, 5432):
        for host in ("127.0.0.1", "10.0.0.1", "172.17.0.1"):
            try:
                socket.create_connection((host, port), timeout=0.3).close()
                reached.append(f"{host}:{port}")
            except OSError:
                pass
    own = int(os.environ["OPENAI_BASE_URL"].rsplit(":", 1)[1].split("/")[0])
    report["reached"] = [r for r in reached if r != f"127.0.0.1:{own}"]
    return reported(question, report)
""",
    # A request that never completes, held past the case deadline.
    "hold_past_deadline": """
def hostile(question):
    port = int(os.environ["OPENAI_BASE_URL"].rsplit(":", 1)[1].split("/")[0])
    held = []
    for _ in range(30):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nContent-Length: 1000\\r\\n\\r\\n{")
        held.append(sock)
    time.sleep(60)
""",
    # Looks for the upstream key everywhere it can read.
    "key_search": """
# Built at run time, so that the agent's own source file does not match.
NEEDLES = ("sk-" + "upstream", "never-in-" + "a-sandbox")

def scan(data, where, found):
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    if any(needle in text for needle in NEEDLES):
        found.append(where)

def hostile(question):
    found = []
    scan(json.dumps(dict(os.environ)), "environ", found)
    for pid in os.listdir("/proc"):
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as handle:
                    scan(handle.read(), f"/proc/{pid}/{name}", found)
            except OSError:
                pass
    for top in ("/agent", "/corpus", "/grader", "/tmp", "/etc", "/run", "/var", "/home", "/root"):
        for folder, _dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    with open(path, "rb") as handle:
                        scan(handle.read(1 << 20), path, found)
                except OSError:
                    pass
    for path in ("/proc/self/mountinfo", "/proc/net/unix"):
        try:
            scan(open(path, "rb").read(), path, found)
        except OSError:
            pass
    # Everything the gateway answers, error bodies included.
    for response in (chat(question), chat(question, model="nope"), call("/models", method="GET"),
                     call("/nowhere", {})):
        scan(json.dumps(response), "gateway answer", found)
    return reported(question, {"found": found})
""",
}

#: What each hostile agent must report (keys of its ``report``), or the error kind of its case.
EXPECTED: dict[str, dict[str, object] | str] = {
    "flood": {"served": 4, "other": []},
    "connection_flood": {"after": 200, "opened": True},
    "malformed": {
        "oversized": 429,
        "not_json": 400,
        "array": 400,
        "no_messages": 400,
        "stream": 400,
        "hot": 429,
        "long": 429,
        "bad_key": 401,
        "no_key": 401,
    },
    "other_models": {
        "gpt-4o": 400,
        "course-extractive": 400,
        "": 400,
        "course-chat ": 400,
        "listed": ["course-chat", "course-embed"],
    },
    "other_paths": {
        "/completions": 404,
        "/files": 404,
        "/../../etc/passwd": 404,
        "/chat/completions/../models": 404,
        "/admin": 404,
        "GET chat": 404,
        "reached": [],
    },
    "hold_past_deadline": "timeout",
    "key_search": {"found": []},
}


def source(name: str) -> str:
    return PRELUDE + AGENTS[name]
