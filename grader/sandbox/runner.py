"""In-sandbox runner: imports the agent and speaks JSONL on stdin/stdout (stdlib only).

Protocol (DESIGN §4): after importing the entrypoint and calling the optional setup, the
runner writes ``{"ready": true}`` (or ``{"fatal": "..."}`` and exits 3). Then, for every line
``{"qid": ..., "question": ...}`` read from stdin, it writes one line ``{"qid": ..., "answer":
{...}}``, ``{"qid": ..., "error": "..."}`` when the agent raised, or ``{"qid": ..., "invalid":
"..."}`` when its return value is not JSON (NaN, a set, …).

When the grader runs a model gateway for this run (DESIGN §4a), ``GRADER_GATEWAY_SOCKET`` names
its Unix socket: the runner listens on ``127.0.0.1:<port>`` (in the sandbox's own network
namespace), forwards every connection to that socket, and sets
``OPENAI_BASE_URL=http://127.0.0.1:<port>/v1`` before it imports the agent.

The agent's own writes to stdout are redirected to stderr so that a stray ``print`` cannot
corrupt the protocol. This file is mounted read-only, but nothing here is trusted by the grader:
the agent runs in this process and may rewrite anything; the grader validates every line.
"""

import contextlib
import importlib
import json
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any


def _load(spec: str) -> Callable[..., Any]:
    module_name, _, func_name = spec.partition(":")
    module = importlib.import_module(module_name)
    func: Callable[..., Any] = getattr(module, func_name)
    if not callable(func):
        raise TypeError(f"{spec} is not callable")
    return func


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _forward(client: socket.socket, path: str) -> None:
    gateway = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        gateway.connect(path)
    except OSError:
        client.close()
        gateway.close()
        return
    back = threading.Thread(target=_pump, args=(gateway, client), daemon=True)
    try:
        back.start()
    except RuntimeError:  # out of threads (the pids limit): drop this connection only
        client.close()
        gateway.close()
        return
    _pump(client, gateway)
    back.join()
    client.close()
    gateway.close()


def _serve_gateway(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            threading.Thread(target=_forward, args=(client, path), daemon=True).start()
        except RuntimeError:  # out of threads: refuse this connection, keep listening
            client.close()


def _start_model_proxy() -> None:
    """Listen on 127.0.0.1 and forward to the gateway's socket, if this run has one."""
    path = os.environ.pop("GRADER_GATEWAY_SOCKET", "")
    if not path:
        return
    try:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
    except OSError as exc:
        print(f"grader runner: no model gateway ({_describe(exc)})", file=sys.stderr)
        return
    port = listener.getsockname()[1]
    os.environ["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
    threading.Thread(target=_serve_gateway, args=(listener, path), daemon=True).start()


def main() -> None:
    # Keep the real stdout for the protocol; everything else printed goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(obj: dict[str, Any]) -> None:
        protocol.write(json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n")
        protocol.flush()

    _start_model_proxy()
    agent_dir = os.environ.get("AGENT_DIR", "/agent")
    sys.path.insert(0, agent_dir)
    os.chdir(agent_dir)
    try:
        answer = _load(os.environ["AGENT_ENTRYPOINT"])
        setup_spec = os.environ.get("AGENT_SETUP") or ""
        if setup_spec:
            _load(setup_spec)()
    except BaseException as exc:
        emit({"fatal": _describe(exc)})
        sys.exit(3)
    emit({"ready": True})

    for line in sys.stdin:
        try:
            request = json.loads(line)
            qid = request["qid"]
            question = request["question"]
        except (ValueError, KeyError, TypeError):
            continue
        try:
            result = answer(question)
        except Exception as exc:  # an agent exception is an outcome, not the runner's end
            emit({"qid": qid, "error": _describe(exc)})
            continue
        try:
            line_out = json.dumps(
                {"qid": qid, "answer": result}, ensure_ascii=False, allow_nan=False
            )
        except (TypeError, ValueError, RecursionError) as exc:  # NaN, a set, …: not JSON
            emit({"qid": qid, "invalid": _describe(exc)})
            continue
        protocol.write(line_out + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
