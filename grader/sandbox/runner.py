"""In-sandbox runner: imports the agent and speaks JSONL on stdin/stdout (stdlib only).

Protocol (DESIGN §4): after importing the entrypoint and calling the optional setup, the
runner writes ``{"ready": true}`` (or ``{"fatal": "..."}`` and exits 3). Then, for every line
``{"qid": ..., "question": ...}`` read from stdin, it writes one line ``{"qid": ..., "answer":
{...}}``, ``{"qid": ..., "error": "..."}`` when the agent raised, or ``{"qid": ..., "invalid":
"..."}`` when its return value is not JSON (NaN, a set, …).

The agent's own writes to stdout are redirected to stderr so that a stray ``print`` cannot
corrupt the protocol. This file is mounted read-only, but nothing here is trusted by the grader:
the agent runs in this process and may rewrite anything; the grader validates every line.
"""

import importlib
import json
import os
import sys
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


def main() -> None:
    # Keep the real stdout for the protocol; everything else printed goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(obj: dict[str, Any]) -> None:
        protocol.write(json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n")
        protocol.flush()

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
