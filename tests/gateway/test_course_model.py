"""The course model server's documented behaviour, and the policy keys of the gateway."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from grader.core.casesets import load_case_set
from grader.exceptions import CaseSetError
from grader.gateway.course_model import (
    count_tokens,
    embed,
    extractive_answer,
    prompt_tokens,
)
from tests.conftest import write_case_set
from tests.gateway.conftest import CourseModel


def test_token_rule_counts_words_and_punctuation() -> None:
    """A token is a word run or one other non-space character; a prompt adds 4 per message + 2."""
    assert count_tokens("Chunks overlap, mostly.") == 5
    assert count_tokens("") == 0
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    assert prompt_tokens(messages) == (3 + 4) + (2 + 4) + 2


def test_extractive_answer_quotes_the_best_context_sentences_in_order() -> None:
    """The answer is at most three context sentences sharing the most question words, in the
    order given; the [doc-id] tag and the system prompt are never quoted."""
    messages = [
        {"role": "system", "content": "Chunks overlap is a system rule."},
        {
            "role": "user",
            "content": "[a] Agents stop after a budget. Chunks overlap so nothing is cut.\n"
            "[b] Overlap between chunks keeps context. Retrieval ranks chunks.\n"
            "[c] Cats sleep.\nQuestion: Why do chunks overlap?",
        },
    ]
    assert extractive_answer(messages) == (
        "Chunks overlap so nothing is cut. Overlap between chunks keeps context. "
        "Retrieval ranks chunks."
    )
    nothing = [{"role": "user", "content": "[c] Cats sleep.\nQuestion: Why do chunks overlap?"}]
    assert extractive_answer(nothing) == "I don't know."


def test_embeddings_are_deterministic_unit_vectors_of_word_bags() -> None:
    """The same text always embeds the same; word order does not matter; vectors are unit."""
    first, again, shuffled = (
        embed("chunks overlap"),
        embed("chunks overlap"),
        embed("overlap chunks"),
    )
    assert first == again == shuffled and len(first) == 256
    assert math.isclose(sum(v * v for v in first), 1.0, rel_tol=1e-4)
    assert embed("chunks overlap") != embed("agents stop")


def test_server_speaks_the_openai_subset(course_model: CourseModel) -> None:
    """Chat, embeddings and models answer in the OpenAI shapes; a bad key is 401, a bad path 404."""

    def post(path: str, body: object, key: str = course_model.key) -> tuple[int, dict]:
        request = urllib.request.Request(
            course_model.url + path,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    content = "[d] Chunks overlap so nothing is cut.\nQuestion: why do chunks overlap?"
    status, chat = post(
        "/chat/completions",
        {
            "model": "course-extractive",
            "max_tokens": 3,
            "messages": [{"role": "user", "content": content}],
        },
    )
    assert status == 200
    assert chat["choices"][0]["message"]["content"] == "Chunks overlap so"
    assert chat["choices"][0]["finish_reason"] == "length"
    assert chat["usage"] == {"prompt_tokens": 23, "completion_tokens": 3, "total_tokens": 26}
    status, vectors = post("/embeddings", {"model": "course-embed", "input": ["a b", "c"]})
    assert status == 200 and [len(d["embedding"]) for d in vectors["data"]] == [256, 256]
    assert post("/chat/completions", {"messages": []}, key="wrong")[0] == 401
    assert post("/nowhere", {})[0] == 404
    assert post("/chat/completions", {"messages": "x"})[0] == 400


def test_serve_on_a_busy_port_fails_with_one_line() -> None:
    """``grader model serve`` on a port in use ends with one line and a non-zero status."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "grader", "model", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"grader: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


@pytest.mark.parametrize(
    ("policy", "needle"),
    [
        ("[models.course-chat]\ninput_usd_per_mtok = 1\n", "models.course-chat.upstream"),
        ('[models.course-chat]\nupstream = "x"\ninput_usd_per_mtok = -1\n', "input_usd_per_mtok"),
        ('[models.course-chat]\nupstream = "x"\nprices_date = "soon"\n', "prices_date"),
        ("[model_limits]\ncalls_per_case = -1\n", "model_limits.calls_per_case"),
        ("[model_limits]\nbudget = 3\n", "unknown key 'model_limits.budget'"),
        ('model_cache = "yes"\n', "model_cache"),
    ],
)
def test_bad_model_policy_is_one_clear_error(tmp_path: Path, policy: str, needle: str) -> None:
    """A bad [models] or [model_limits] value is a CaseSetError naming the key."""
    root = write_case_set(
        tmp_path, [{"id": "r1", "kind": "refusal", "question": "Q?"}], policy=policy
    )
    with pytest.raises(CaseSetError) as error:
        load_case_set(root)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_model_tables_are_part_of_the_case_set_version(tmp_path: Path) -> None:
    """Changing a price changes the case-set version; a set without [models] has none."""
    cases = [{"id": "r1", "kind": "refusal", "question": "Q?"}]
    table = '[models.course-chat]\nupstream = "course-extractive"\ninput_usd_per_mtok = {}\n'
    one = load_case_set(write_case_set(tmp_path / "a", cases, policy=table.format(0.15)))
    two = load_case_set(write_case_set(tmp_path / "b", cases, policy=table.format(0.25)))
    none = load_case_set(write_case_set(tmp_path / "c", cases))
    assert one.version != two.version
    assert one.policy.models["course-chat"].upstream == "course-extractive"
    assert none.policy.models == {} and none.policy.model_limits.calls_per_case == 4
