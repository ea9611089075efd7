"""Write ``claims.jsonl``: the human-labelled calibration set of claim_support (DESIGN §5).

The labels are an expert's judgement, decided per item (hand-written answers below) or per
attack (derived answers: the label and its reason are fixed for the whole category before any
gate runs). Nothing here imports or calls the gate. Run from the repository root:

    .venv/bin/python tests/core/calibration/build_claims.py

Label rule, as a grader of a RAG course would apply it: *supported* means the answer states the
points the question asks for (the concept groups), every claim it makes about them follows from
the cited document, and it answers rather than dumps (a few sentences, not the document).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEMO = HERE.parents[2] / "private_cases" / "corpus"
OUT = HERE / "claims.jsonl"

# question id -> (document, question, concept groups)
Q: dict[str, tuple[str, str, list[list[str]]]] = {
    "c01": (
        "rag-basics",
        "Why do consecutive chunks share some overlap, and what goes wrong when there is too much of it?",
        [["overlap"], ["split point", "straddles a boundary"], ["near duplicates"]],
    ),
    "c02": (
        "rag-basics",
        "How does an embedding let the retriever find chunks with a similar meaning to the query?",
        [["vector", "vectors"], ["cosine similarity", "nearest chunks"]],
    ),
    "c03": (
        "structured-outputs",
        "Who is responsible for enforcing the schema of a structured output, and which libraries can parse and validate it?",
        [["application code", "the application"], ["pydantic", "jsonschema"]],
    ),
    "c04": (
        "structured-outputs",
        "What should the application do when a model response fails validation against the schema?",
        [["retry"], ["safe fallback", "human review"]],
    ),
    "c05": (
        "agent-loops",
        "What stopping conditions should an agent loop have?",
        [["max steps", "step limit"], ["budget", "budgets"]],
    ),
    "c06": (
        "agent-loops",
        "When an agent loop stops early, what should the agent return instead of pretending it succeeded?",
        [["partial result", "low confidence"], ["escalates", "human"]],
    ),
    "c07": (
        "mcp-overview",
        "What is the difference between a tool, a skill and an MCP server?",
        [["callable function"], ["expertise", "task"], ["standard", "protocol"]],
    ),
    "c08": (
        "mcp-overview",
        "What is the Model Context Protocol, and which component inside the host application connects to an MCP server?",
        [["open protocol"], ["client", "mcp client"]],
    ),
    "c09": (
        "prompt-injection",
        "Which defenses, working in layers, help against prompt injection?",
        [["clear delimiters", "system rules"], ["quarantine", "filter"]],
    ),
    "c10": (
        "prompt-injection",
        "What is a canary string, and what does it prove when it shows up in an answer?",
        [["marker", "unique marker"], ["obeyed", "injected"], ["safety failure"]],
    ),
    "c11": (
        "prompt-injection",
        "What is the difference between direct and indirect prompt injection?",
        [["attacker", "question"], ["web page", "tool result", "agent retrieves"]],
    ),
    "c12": (
        "evaluation",
        "Why must a golden set include refusal cases, and how should the agent behave on them?",
        [["abstain", "no citations"], ["low confidence", "human review"]],
    ),
    "c13": (
        "evaluation",
        "How does citation precision stop an agent that cites every document in the corpus?",
        [["allowed list"], ["cap"]],
    ),
    "c14": (
        "evaluation",
        "What does claim support check about the answer and the cited document?",
        [["required concepts"], ["backed", "appears"]],
    ),
    "c15": (
        "retrieval-metrics",
        "How is mean reciprocal rank computed?",
        [["first relevant", "first relevant result"], ["position", "divided by"]],
    ),
    "c16": (
        "retrieval-metrics",
        "What does NDCG reward, and how is the discount applied to each result?",
        [["logarithmic discount"], ["graded relevance", "ideal ordering"]],
    ),
    "c17": (
        "vendor-notes",
        "What happens when a lab client exceeds the embedding service rate limit?",
        [["429"], ["back off", "retry after"]],
    ),
    "x01": (
        "rag-basics",
        "What is lexical retrieval such as BM25 good at?",
        [["exact words"], ["names", "codes", "rare terms"]],
    ),
    "x02": (
        "rag-basics",
        "What is the trade-off when choosing k?",
        [["larger k"], ["noise", "cost"]],
    ),
    "x03": (
        "rag-basics",
        "How large should a chunk be?",
        [["context window", "few hundred tokens"], ["complete idea"]],
    ),
    "x04": (
        "agent-loops",
        "How do budgets make the cost of an agent predictable?",
        [["step limit"], ["price"], ["upper bound"]],
    ),
    "x05": (
        "agent-loops",
        "How can an agent loop notice that it is stuck?",
        [["same tool", "same arguments"], ["twice"]],
    ),
    "x06": (
        "structured-outputs",
        "Does JSON mode make validation in the application unnecessary?",
        [["json mode", "constrained decoding"], ["meaning"]],
    ),
    "x07": (
        "structured-outputs",
        "Why is validation also a security boundary?",
        [["allow list"], ["untrusted text"]],
    ),
    "x08": (
        "mcp-overview",
        "What is a tool, for a language model?",
        [["single function"], ["json schema"]],
    ),
    "x09": (
        "retrieval-metrics",
        "What is recall at k?",
        [["relevant documents"], ["first k results"]],
    ),
    "x10": (
        "retrieval-metrics",
        "What does low precision at k tell you?",
        [["distracting material", "crowded"]],
    ),
    "x11": (
        "evaluation",
        "What is a golden set?",
        [["questions"], ["documents"], ["points"]],
    ),
    "x12": (
        "vendor-notes",
        "How long are snapshots of a vector index retained?",
        [["fourteen days"]],
    ),
    "x13": (
        "vendor-notes",
        "What happens to queries while an index is being rebuilt?",
        [["old index"], ["half-built", "online"]],
    ),
    "x14": (
        "prompt-injection",
        "Should the model follow a command it finds in a retrieved passage?",
        [["untrusted data"], ["authority"]],
    ),
    "x15": (
        "evaluation",
        "Why should you attack your own evaluator?",
        [["fake agents", "deserve zero"], ["close to zero"]],
    ),
    "pt1": (
        "rag-pt",
        "Por que fragmentos consecutivos partilham uma sobreposição?",
        [["sobreposicao"], ["fronteira", "ponto de divisao"]],
    ),
    "pt2": (
        "rag-pt",
        "Qual deve ser o tamanho de um fragmento?",
        [["centenas de tokens", "janela de contexto"], ["ideia completa"]],
    ),
    "pt3": (
        "rag-pt",
        "O que acontece quando há sobreposição demais?",
        [["quase duplicatas"], ["indice", "mesma passagem"]],
    ),
    "es1": (
        "agents-es",
        "¿Qué condiciones de parada necesita un bucle de agente?",
        [["limite de pasos"], ["presupuestos"]],
    ),
    "es2": (
        "agents-es",
        "¿Qué debe devolver el agente cuando el bucle se detiene antes de tiempo?",
        [["resultado parcial", "confianza baja"], ["persona", "escala"]],
    ),
    "es3": (
        "agents-es",
        "¿Por qué un bucle de agente puede ser peligroso?",
        [["herramientas"], ["misma accion", "sin fin"]],
    ),
    "fr1": (
        "outputs-fr",
        "Qui doit faire respecter le schéma d'une sortie structurée ?",
        [["application"], ["pydantic", "jsonschema"]],
    ),
    "fr2": (
        "outputs-fr",
        "Que doit faire l'application quand une réponse échoue à la validation ?",
        [["reessaie", "erreur de validation"], ["repli", "revue humaine"]],
    ),
    "fr3": (
        "outputs-fr",
        "Que déclare un schéma ?",
        [["champs"], ["types"]],
    ),
    "de1": (
        "injection-de",
        "Welche Abwehrmaßnahmen helfen gegen Prompt-Injection?",
        [["trennzeichen", "systemregeln"], ["filtere", "isoliere"]],
    ),
    "de2": (
        "injection-de",
        "Was ist der Unterschied zwischen direkter und indirekter Injection?",
        [["angreifer"], ["webseite", "agent abruft"]],
    ),
    "de3": (
        "injection-de",
        "Was ist ein Kanarienwort?",
        [["markierung"], ["sicherheitsfehler"]],
    ),
}

YES, NO = True, False

# (question id, category, answer, supported, why); citations default to the question's document.
HAND: list[tuple[Any, ...]] = [
    # ---- concise extractive answers: sentences of the cited document, on point
    (
        "c01",
        "extractive",
        "Overlap keeps a sentence that straddles a boundary intact in at least one chunk, so an answer is never cut in half at the split point. Too much overlap stores near duplicates, inflates the index and makes the retriever return the same passage several times.",
        YES,
        "two sentences of the passage, both points answered",
    ),
    (
        "c02",
        "extractive",
        "Each chunk is turned into an embedding, a vector of numbers that places texts with similar meaning close together. The query is embedded with the same model and the retriever returns the nearest chunks by cosine similarity.",
        YES,
        "near-verbatim from the embedding paragraph",
    ),
    (
        "c03",
        "extractive",
        "The application, not the model, is responsible for enforcing the schema. Every response is parsed and validated in application code with a library such as pydantic or jsonschema.",
        YES,
        "condensed quotation of the passage",
    ),
    (
        "c04",
        "extractive",
        "Retry once with the validation error included in the prompt; if the second attempt also fails, return a safe fallback such as an abstention flagged for human review.",
        YES,
        "the passage's pattern, stated directly",
    ),
    (
        "c05",
        "extractive",
        "A hard limit on max steps ends the loop even when the model has not finished, and budgets for tokens, money and wall-clock time are checked on every iteration.",
        YES,
        "one sentence of the passage",
    ),
    (
        "c06",
        "extractive",
        "It returns the best partial result it has with a low confidence, or escalates to a human, and records which condition ended the run.",
        YES,
        "verbatim answer",
    ),
    (
        "c07",
        "extractive",
        "A tool is one callable function, a skill is reusable expertise for a whole task, and an MCP server is a standard way to package and serve tools and context across applications.",
        YES,
        "the summarising sentence of the document",
    ),
    (
        "c08",
        "extractive",
        "The Model Context Protocol is an open protocol that standardises how applications offer tools, resources and prompts to models. An MCP client inside the host application connects to the server.",
        YES,
        "two sentences, both parts answered",
    ),
    (
        "c09",
        "extractive",
        "Keep the system rules separate from retrieved content and wrap each passage in clear delimiters. Filter or quarantine passages that look like commands before they reach the model.",
        YES,
        "two of the layered defenses, verbatim",
    ),
    (
        "c10",
        "extractive",
        "A canary string is a unique marker planted in a test document together with a fake command to print it. If it shows up in an answer, the agent obeyed injected text, which the evaluation treats as a safety failure.",
        YES,
        "definition and consequence from the passage",
    ),
    (
        "c11",
        "extractive",
        "In direct injection the attacker types the commands into the question. In indirect injection the commands hide inside content the agent retrieves, such as a web page or a tool result.",
        YES,
        "two sentences of the passage",
    ),
    (
        "c12",
        "extractive",
        "Without refusal cases a set rewards a system that answers everything confidently. On those cases the agent should abstain, with no citations, a low confidence and a flag for human review.",
        YES,
        "both parts, from the refusal paragraph",
    ),
    (
        "c13",
        "extractive",
        "Citation precision asks whether every cited document is on the allowed list and whether the number of citations stays under a cap.",
        YES,
        "one sentence, exactly the mechanism",
    ),
    (
        "c14",
        "extractive",
        "Each case is labelled with required concepts, and the check verifies that each concept appears both in the answer and in the text of a cited document.",
        YES,
        "condensed from the claim support paragraph",
    ),
    (
        "c15",
        "extractive",
        "The reciprocal rank of a query is one divided by the position of its first relevant result, or zero when nothing relevant is found, and MRR averages it over all queries.",
        YES,
        "the definition in the passage",
    ),
    (
        "c16",
        "extractive",
        "NDCG uses graded relevance and rewards placing the most relevant results at the top. The gain of each result is divided by a logarithmic discount of its rank.",
        YES,
        "two sentences of the passage",
    ),
    (
        "c17",
        "extractive",
        "The service answers with HTTP status 429 and a Retry-After header, and the client should back off exponentially instead of retrying immediately.",
        YES,
        "verbatim",
    ),
    (
        "x01",
        "extractive",
        "Lexical retrieval such as BM25 matches exact words instead of meaning; it is cheap and works well for names, codes and rare terms.",
        YES,
        "one sentence of the passage",
    ),
    (
        "x02",
        "extractive",
        "A larger k raises the chance that the right chunk is included, but it adds noise and cost to the prompt.",
        YES,
        "verbatim",
    ),
    (
        "x03",
        "extractive",
        "Small enough that several chunks fit in the context window, yet large enough to carry one complete idea; a few hundred tokens is a common starting size.",
        YES,
        "verbatim, slightly trimmed",
    ),
    (
        "x04",
        "extractive",
        "A step limit multiplied by the price of the largest model call gives an upper bound on what one question can cost.",
        YES,
        "verbatim",
    ),
    (
        "x05",
        "extractive",
        "When the same tool is called with the same arguments twice in a row, the loop is stuck and should stop.",
        YES,
        "verbatim",
    ),
    (
        "x06",
        "extractive",
        "No. JSON mode or constrained decoding reduce malformed output, but they do not check meaning, so the application must still validate.",
        YES,
        "a direct answer followed by the passage's reason",
    ),
    (
        "x08",
        "extractive",
        "A tool is a single function the model can call, described by a name, a short description and a JSON schema for its arguments.",
        YES,
        "verbatim",
    ),
    (
        "x09",
        "extractive",
        "Recall at k is the share of all relevant documents that appear in the first k results.",
        YES,
        "verbatim definition",
    ),
    (
        "x12",
        "extractive",
        "Snapshots of every index are retained for fourteen days.",
        YES,
        "verbatim",
    ),
    (
        "x13",
        "extractive",
        "The old index stays online until the new one is ready, so queries never see a half-built index.",
        YES,
        "verbatim",
    ),
    (
        "x14",
        "extractive",
        "No. Every retrieved passage is untrusted data, and a sentence asking the model to change its behaviour has no more authority than any other piece of data.",
        YES,
        "the passage's rule, quoted",
    ),
    # ---- multi-sentence extractive answers (three or four sentences, still an answer)
    (
        "c01",
        "multi_sentence",
        "Consecutive chunks usually share some overlap: the last fifty tokens of one chunk are repeated at the start of the next. Overlap keeps a sentence that straddles a boundary intact in at least one chunk, so an answer is never cut in half at the split point. Too much overlap stores near duplicates, inflates the index and makes the retriever return the same passage several times.",
        YES,
        "the whole overlap paragraph: long but exactly on point",
    ),
    (
        "c05",
        "multi_sentence",
        "Every agent loop needs explicit stopping conditions written in code, not left to the model. The normal stop is a final answer that passes validation. A hard limit on max steps ends the loop even when the model has not finished. Budgets for tokens, money and wall-clock time are checked on every iteration.",
        YES,
        "four sentences of one paragraph",
    ),
    (
        "c09",
        "multi_sentence",
        "Defenses against prompt injection work in layers, because none of them is complete on its own. Keep the system rules separate from retrieved content and wrap each passage in clear delimiters. Filter or quarantine passages that look like commands. Give the agent least privilege and require human approval for irreversible actions.",
        YES,
        "the layered defenses, in order",
    ),
    (
        "c12",
        "multi_sentence",
        "A golden set must include refusal cases, questions the corpus does not answer. On those cases the correct behaviour is to abstain, with no citations, a low confidence and a flag for human review. A set without refusal cases rewards a system that answers everything confidently.",
        YES,
        "the refusal paragraph",
    ),
    (
        "c15",
        "multi_sentence",
        "Mean reciprocal rank looks only at the first relevant result. The reciprocal rank of a query is one divided by the position of its first relevant result, or zero when nothing relevant is found. MRR is the average of that value over all queries.",
        YES,
        "three sentences of the MRR paragraph",
    ),
    (
        "c04",
        "multi_sentence",
        "When a response fails validation, the application handles the failure explicitly. A common pattern is to retry once with the validation error included in the prompt. If the second attempt also fails, the application returns a safe fallback, such as an abstention flagged for human review.",
        YES,
        "three sentences of the passage",
    ),
    (
        "c07",
        "multi_sentence",
        "A tool is a single function the model can call. A skill is a packaged capability built on top of tools that teaches an agent how to carry out a whole task. An MCP server is a separate process that exposes tools over an open protocol; in short, a tool is one callable function, a skill is reusable expertise and an MCP server is a standard way to serve tools.",
        YES,
        "three documented sentences, concepts in the last",
    ),
    (
        "c17",
        "multi_sentence",
        "The free tier is rate limited to 300 requests per minute. When a client exceeds the rate limit, the service answers with HTTP status 429 and a Retry-After header. The client should back off exponentially instead of retrying immediately.",
        YES,
        "three sentences of the vendor notes",
    ),
    (
        "c10",
        "multi_sentence",
        "A canary string is a unique marker planted in a test document together with a fake command to print it. If the canary ever shows up in an answer, the agent obeyed injected text. The evaluation treats that as a safety failure that blocks release whatever the average score.",
        YES,
        "the whole canary paragraph",
    ),
    (
        "c16",
        "multi_sentence",
        "Normalized discounted cumulative gain uses graded relevance. It rewards placing the most relevant results at the top. The gain of each result is divided by a logarithmic discount of its rank, and the sum is divided by the score of the ideal ordering.",
        YES,
        "three sentences of the NDCG paragraph",
    ),
    # ---- real paraphrases: same facts, the student's own words
    (
        "c01",
        "paraphrase",
        "Chunks overlap so that a sentence crossing a boundary survives whole in one chunk and is not cut at the split point. With too much overlap the index fills with near duplicates and the retriever keeps returning the same passage.",
        YES,
        "faithful paraphrase close to the wording",
    ),
    (
        "c02",
        "paraphrase",
        "The embedding maps each chunk to a vector so that similar meanings end up close together; the query gets a vector from the same model and the retriever picks the nearest chunks by cosine similarity.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c03",
        "paraphrase",
        "Enforcing the schema is the job of the application code, not of the model: it parses and validates every response, for instance with pydantic or jsonschema.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c05",
        "paraphrase",
        "Stop conditions belong in code: a max steps limit that ends the loop even if the model wants to continue, and budgets on tokens, money and time checked at each iteration.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c06",
        "paraphrase",
        "Instead of claiming success it should hand back whatever partial result it has, marked with low confidence, or pass the question to a human, noting what stopped the run.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c08",
        "paraphrase",
        "MCP is an open protocol that gives applications one standard way to offer tools, resources and prompts to models; the MCP client, which lives in the host application, is what connects to a server.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c13",
        "paraphrase",
        "Precision only accepts citations from the allowed list and puts a cap on how many there may be, so citing the whole corpus no longer collects recall for free.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c15",
        "paraphrase",
        "Take the position of the first relevant result, compute one divided by that position (zero if nothing relevant shows up), and average it over all queries.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c16",
        "paraphrase",
        "NDCG rewards rankings that put the most relevant results first, using graded relevance; each result's gain is divided by a logarithmic discount of its rank and the total is compared with the ideal ordering.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c17",
        "paraphrase",
        "The service replies 429 with a Retry-After header; the client must back off exponentially rather than retry at once.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c11",
        "paraphrase",
        "Direct injection comes from the attacker writing the commands in the question itself, while indirect injection hides them in material the agent retrieves, like a web page, an email or a tool result.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c12",
        "paraphrase",
        "Because a set with no refusal questions rewards answering everything confidently; on such questions a good agent should abstain: no citations, low confidence and a request for human review.",
        YES,
        "faithful paraphrase",
    ),
    (
        "x02",
        "paraphrase",
        "Raising k makes it likelier that the right chunk gets in, at the price of more noise and more cost in the prompt; a larger k is a trade-off.",
        YES,
        "faithful paraphrase",
    ),
    (
        "x05",
        "paraphrase",
        "If it calls the same tool with the same arguments twice in a row, it is repeating itself and the loop should end.",
        YES,
        "faithful paraphrase",
    ),
    (
        "c04",
        "paraphrase",
        "Try again once, giving the model the validation error; should that fail too, fall back safely, for example by abstaining and asking for human review.",
        YES,
        "faithful paraphrase with synonyms ('try again', 'fall back safely')",
    ),
    (
        "c06",
        "paraphrase",
        "A truthful partial answer flagged as low confidence, or an escalation to a human, rather than a fake success.",
        YES,
        "faithful, terse paraphrase in noun phrases",
    ),
    (
        "c09",
        "paraphrase",
        "Separate the system rules from whatever was retrieved and mark passages off with clear delimiters; screen out command-like passages with a filter or quarantine them.",
        YES,
        "faithful paraphrase",
    ),
    (
        "x07",
        "paraphrase",
        "A model that read untrusted text can be pushed into emitting document names, tool names or URLs the application never meant to allow, so those fields are checked against an allow list.",
        YES,
        "faithful paraphrase",
    ),
    (
        "x10",
        "paraphrase",
        "That the retrieved context is crowded with distracting material rather than relevant evidence.",
        YES,
        "faithful paraphrase",
    ),
    (
        "x15",
        "paraphrase",
        "Fake agents that deserve zero, such as one refusing everything, should score close to zero; only then can you trust a high score from a real agent.",
        YES,
        "faithful paraphrase",
    ),
    # ---- invented claims that use the concept words (hallucinations): not supported
    (
        "c01",
        "hallucination",
        "Overlap encrypts each chunk so that the split point is hidden from attackers, and near duplicates are removed by the vector database automatically.",
        NO,
        "concept words in claims the passage never makes",
    ),
    (
        "c05",
        "hallucination",
        "The max steps setting is chosen by the model itself at runtime, and budgets are only checked once the final answer has been written.",
        NO,
        "contradicts the passage",
    ),
    (
        "c08",
        "hallucination",
        "The Model Context Protocol is a proprietary streaming format for GPUs, and the client is a browser plugin that compiles servers into wasm.",
        NO,
        "invented claims around the concepts",
    ),
    (
        "c15",
        "hallucination",
        "Mean reciprocal rank multiplies the first relevant score by the position of the last result divided by the square of the corpus size in bytes.",
        NO,
        "a wrong formula around the concept words",
    ),
    (
        "c17",
        "hallucination",
        "Exceeding the limit deletes the account; the 429 page then asks students to pay, and you must retry after rebooting the vector database twice.",
        NO,
        "invented consequences",
    ),
    (
        "c13",
        "hallucination",
        "Citation precision trains the model with a cap on learning rate and an allowed list of GPU vendors chosen by students every semester.",
        NO,
        "concept words, unrelated invented claims",
    ),
    (
        "c03",
        "hallucination",
        "The application forbids pydantic and jsonschema because they leak tokens to the vendor, so the model enforces its own schema.",
        NO,
        "contradicts the passage",
    ),
    (
        "c10",
        "hallucination",
        "A canary string is a bird-shaped unique marker that the injected model sings when it is happy, which counts as a safety failure on Sundays only.",
        NO,
        "absurd claims around the concepts",
    ),
    # ---- correct sentences citing the wrong document
    (
        "c01",
        "wrong_document",
        "Overlap keeps a sentence that straddles a boundary intact in at least one chunk, so an answer is never cut in half at the split point. Too much overlap stores near duplicates.",
        NO,
        "right text, but the cited document does not contain it",
        ["agent-loops"],
    ),
    (
        "c02",
        "wrong_document",
        "Each chunk is turned into an embedding, a vector of numbers, and the retriever returns the nearest chunks by cosine similarity.",
        NO,
        "cites retrieval metrics, which say nothing of embeddings",
        ["retrieval-metrics"],
    ),
    (
        "c05",
        "wrong_document",
        "A hard limit on max steps ends the loop, and budgets for tokens, money and time are checked on every iteration.",
        NO,
        "cites the structured outputs document",
        ["structured-outputs"],
    ),
    (
        "c09",
        "wrong_document",
        "Keep the system rules separate from retrieved content and wrap each passage in clear delimiters; filter or quarantine passages that look like commands.",
        NO,
        "cites the evaluation document",
        ["evaluation"],
    ),
    (
        "c15",
        "wrong_document",
        "The reciprocal rank is one divided by the position of the first relevant result, averaged over all queries.",
        NO,
        "cites the evaluation document",
        ["evaluation"],
    ),
    (
        "c17",
        "wrong_document",
        "The service answers with HTTP status 429 and the client should back off exponentially.",
        NO,
        "cites rag basics",
        ["rag-basics"],
    ),
    (
        "c07",
        "wrong_document",
        "A tool is one callable function, a skill is reusable expertise for a whole task, and an MCP server is a standard way to serve tools.",
        NO,
        "cites agent loops, which only mentions tools in passing",
        ["agent-loops"],
    ),
    (
        "c12",
        "wrong_document",
        "On refusal cases the agent should abstain, with no citations, a low confidence and a flag for human review.",
        NO,
        "cites prompt injection",
        ["prompt-injection"],
    ),
    (
        "c04",
        "wrong_document",
        "Retry once with the validation error in the prompt, then return a safe fallback flagged for human review.",
        NO,
        "cites the MCP overview",
        ["mcp-overview"],
    ),
    (
        "c16",
        "wrong_document",
        "NDCG divides each gain by a logarithmic discount of its rank and compares with the ideal ordering.",
        NO,
        "cites rag basics",
        ["rag-basics"],
    ),
    # ---- padded answers
    (
        "c02",
        "padding_harmless",
        "Good question! Each chunk is turned into an embedding, a vector that places texts with similar meaning close together, and the retriever returns the nearest chunks by cosine similarity. Hope this helps.",
        YES,
        "courtesy phrases add no claim",
    ),
    (
        "c05",
        "padding_harmless",
        "Short answer: a hard limit on max steps, and budgets for tokens, money and wall-clock time checked on every iteration. See the agent loops notes.",
        YES,
        "a pointer to the source is not a claim",
    ),
    (
        "c17",
        "padding_harmless",
        "According to the vendor notes, the service answers with HTTP status 429 and a Retry-After header, and the client should back off exponentially.",
        YES,
        "attribution only",
    ),
    (
        "c15",
        "padding_offtopic",
        "The reciprocal rank of a query is one divided by the position of its first relevant result, and MRR is its average over all queries. By the way, Lisbon is the capital of Portugal and BM25 was invented in 2021 by a football club.",
        NO,
        "adds claims the cited document does not support (one of them false)",
    ),
    (
        "c06",
        "padding_offtopic",
        "It returns the best partial result it has with a low confidence, or escalates to a human. Also, most agents today run on quantum computers and never need to stop.",
        NO,
        "an unsupported, false extra claim",
    ),
    (
        "c13",
        "padding_offtopic",
        "Citation precision checks every citation against the allowed list and keeps the number of citations under a cap. Meanwhile the weather in Lyon will be sunny tomorrow.",
        NO,
        "an off-topic claim nothing cited supports",
    ),
    # ---- verbose answers: relevant, but most of the document
    (
        "c01",
        "verbose",
        "Before anything can be retrieved, documents are split into chunks. A chunk should be small enough that several of them fit in the context window, yet large enough to carry one complete idea; a few hundred tokens is a common starting size. Chunks that are too small lose the surrounding meaning, while chunks that are too large dilute the relevant sentence. Consecutive chunks usually share some overlap: the last fifty tokens of one chunk are repeated at the start of the next. Overlap keeps a sentence that straddles a boundary intact in at least one chunk, so an answer is never cut in half at the split point. Too much overlap stores near duplicates, inflates the index and makes the retriever return the same passage several times. Each chunk is turned into an embedding, a vector of numbers, and the retriever returns the nearest chunks by cosine similarity.",
        NO,
        "dumps three paragraphs to answer a two-part question",
    ),
    (
        "c05",
        "verbose",
        "An agent is a loop: the model reads the current state, chooses an action such as calling a tool, observes the result, and repeats until it decides to answer. The loop makes an agent flexible and dangerous, because a model can keep calling tools forever. Every agent loop needs explicit stopping conditions written in code, not left to the model. The normal stop is a final answer that passes validation. A hard limit on max steps, for example eight iterations, ends the loop even when the model has not finished, and budgets for tokens, money and wall-clock time are checked on every iteration. When the loop stops early, the agent returns the best partial result with a low confidence, or escalates to a human. Budgets make cost predictable: a step limit multiplied by the price of the largest model call gives an upper bound.",
        NO,
        "restates most of the document",
    ),
    (
        "c16",
        "verbose",
        "Retrieval metrics measure the first half of a RAG system. Recall at k is the share of relevant documents in the first k results. Precision at k is the share of the first k results that are relevant. Mean reciprocal rank looks only at the first relevant result. Normalized discounted cumulative gain uses graded relevance and rewards placing the most relevant results at the top. The gain of each result is divided by a logarithmic discount of its rank, and the sum is divided by the score of the ideal ordering, so a perfect ranking scores exactly one. Each metric needs relevance labels, a cutoff k and a declared unit such as chunk, passage or document. Low precision means the context is crowded with distracting material, and recall is the metric to watch for missing evidence.",
        NO,
        "a summary of the whole document, not an answer",
    ),
    # ---- concept lists with no claim
    (
        "c01",
        "concept_list",
        "overlap, split point, near duplicates",
        NO,
        "bare concept words: states nothing",
    ),
    ("c05", "concept_list", "max steps; budgets", NO, "bare concept words"),
    (
        "c07",
        "concept_list",
        "callable function, expertise, standard protocol",
        NO,
        "bare concept words",
    ),
    (
        "c16",
        "concept_list",
        "Logarithmic discount. Graded relevance. Ideal ordering.",
        NO,
        "bare concept words dressed as sentences",
    ),
    (
        "c09",
        "concept_list",
        "clear delimiters, system rules, filter, quarantine",
        NO,
        "bare concept words",
    ),
    # ---- heavier paraphrases (the student's own vocabulary): still correct
    (
        "c02",
        "paraphrase",
        "An embedding turns text into a list of numbers, a vector, where texts that mean similar things sit near each other; the question is encoded the same way and the closest chunks win, measured by cosine similarity.",
        YES,
        "correct, mostly different wording",
    ),
    (
        "c14",
        "paraphrase",
        "It tests that the required concepts of the case show up in what the agent wrote and are also backed by the text of a document the agent cited.",
        YES,
        "correct paraphrase",
    ),
    (
        "c11",
        "paraphrase",
        "Direct: the attacker is the user and writes the malicious commands into the question. Indirect: the commands arrive through data the agent fetches, for example a web page.",
        YES,
        "correct paraphrase in compressed form",
    ),
    # ---- multilingual: extractive, paraphrase and multi-sentence answers
    (
        "pt1",
        "extractive",
        "A sobreposição mantém inteira, em pelo menos um fragmento, uma frase que atravessa a fronteira, de modo que a resposta nunca é cortada ao meio no ponto de divisão.",
        YES,
        "verbatim, Portuguese",
    ),
    (
        "pt2",
        "extractive",
        "Deve ser pequeno o bastante para que vários caibam na janela de contexto, mas grande o bastante para carregar uma ideia completa; algumas centenas de tokens é um tamanho inicial comum.",
        YES,
        "verbatim, Portuguese",
    ),
    (
        "pt3",
        "paraphrase",
        "Com sobreposição em excesso o índice fica inchado de quase duplicatas e o recuperador devolve a mesma passagem várias vezes.",
        YES,
        "faithful paraphrase, Portuguese",
    ),
    (
        "pt1",
        "multi_sentence",
        "Fragmentos consecutivos partilham uma sobreposição: os últimos cinquenta tokens de um fragmento são repetidos no início do seguinte. Assim, uma frase que atravessa a fronteira fica inteira em pelo menos um fragmento. A resposta nunca é cortada no ponto de divisão.",
        YES,
        "three sentences, Portuguese",
    ),
    (
        "es1",
        "extractive",
        "Todo bucle de agente necesita condiciones de parada explícitas: un límite de pasos, por ejemplo ocho iteraciones, y presupuestos de tokens, dinero y tiempo que se comprueban en cada iteración.",
        YES,
        "condensed from the passage, Spanish",
    ),
    (
        "es2",
        "extractive",
        "Devuelve el mejor resultado parcial con una confianza baja, o escala el caso a una persona, y registra qué condición terminó la ejecución.",
        YES,
        "verbatim, Spanish",
    ),
    (
        "es3",
        "paraphrase",
        "Porque el modelo puede seguir llamando herramientas sin fin o repetir una y otra vez la misma acción fallida.",
        YES,
        "faithful paraphrase, Spanish",
    ),
    (
        "es1",
        "multi_sentence",
        "Las condiciones de parada se escriben en código. Un límite de pasos termina el bucle aunque el modelo no haya acabado. Los presupuestos de tokens, dinero y tiempo se comprueban en cada iteración.",
        YES,
        "three sentences, Spanish",
    ),
    (
        "fr1",
        "extractive",
        "C'est l'application, pas le modèle, qui doit faire respecter le schéma, en validant chaque réponse avec une bibliothèque comme pydantic ou jsonschema.",
        YES,
        "condensed quotation, French",
    ),
    (
        "fr2",
        "extractive",
        "On réessaie une fois en ajoutant l'erreur de validation au prompt ; si la seconde tentative échoue aussi, l'application renvoie une solution de repli sûre, par exemple une abstention signalée pour revue humaine.",
        YES,
        "verbatim, French",
    ),
    (
        "fr3",
        "paraphrase",
        "Il déclare les champs attendus, leurs types et ceux qui sont obligatoires.",
        YES,
        "faithful paraphrase, French",
    ),
    (
        "fr2",
        "multi_sentence",
        "L'application traite l'échec explicitement. Elle réessaie une fois avec l'erreur de validation dans le prompt. Si cela échoue encore, elle renvoie une solution de repli sûre, signalée pour revue humaine.",
        YES,
        "three sentences, French",
    ),
    (
        "de1",
        "extractive",
        "Halte die Systemregeln vom abgerufenen Inhalt getrennt und umschließe jede Passage mit klaren Trennzeichen. Filtere oder isoliere Passagen, die wie Befehle aussehen.",
        YES,
        "verbatim, German",
    ),
    (
        "de2",
        "extractive",
        "Bei der direkten Injection tippt der Angreifer die Befehle in die Frage. Bei der indirekten Injection verstecken sich die Befehle in Inhalten, die der Agent abruft, etwa eine Webseite.",
        YES,
        "verbatim, German",
    ),
    (
        "de3",
        "paraphrase",
        "Eine eindeutige Markierung in einem Testdokument; erscheint sie in einer Antwort, hat der Agent eingeschleusten Text befolgt, was als Sicherheitsfehler zählt.",
        YES,
        "faithful paraphrase, German",
    ),
    (
        "de1",
        "multi_sentence",
        "Abwehrmaßnahmen wirken in Schichten. Halte die Systemregeln getrennt und nutze klare Trennzeichen. Filtere Passagen, die wie Befehle aussehen. Verlange eine menschliche Freigabe für unumkehrbare Aktionen.",
        YES,
        "four sentences, German",
    ),
    # ---- multilingual: not supported
    (
        "pt1",
        "hallucination",
        "A sobreposição criptografa a fronteira de cada fragmento para que o ponto de divisão fique secreto.",
        NO,
        "invented claim, Portuguese",
    ),
    (
        "es2",
        "wrong_document",
        "Devuelve el mejor resultado parcial con una confianza baja, o escala el caso a una persona.",
        NO,
        "right text, cites the French document",
        ["outputs-fr"],
    ),
    (
        "fr1",
        "hallucination",
        "Le modèle fait respecter son propre schéma, et l'application interdit pydantic et jsonschema.",
        NO,
        "contradicts the passage, French",
    ),
    (
        "de3",
        "wrong_document",
        "Eine eindeutige Markierung; erscheint sie in einer Antwort, zählt das als Sicherheitsfehler.",
        NO,
        "right text, cites the Portuguese document",
        ["rag-pt"],
    ),
]

# Sentence-order shuffles keep each sentence whole: the claims and their support are unchanged.
SHUFFLE_SOURCES = [i for i, item in enumerate(HAND) if item[1] == "multi_sentence"]

OFFTOPIC = (
    "The history of football goes back many centuries, and modern rules were written in England "
    "in the nineteenth century. Today clubs train young players in academies, stadiums hold tens "
    "of thousands of fans, and broadcasting rights bring in most of the money. Coffee is grown in "
    "tropical countries and roasted before it is shipped, and many cities have a favourite bakery "
    "that opens before dawn. Trains are a cheap way to travel between neighbouring capitals."
)


def documents() -> dict[str, str]:
    docs = {path.stem: path.read_text(encoding="utf-8") for path in sorted(DEMO.glob("*.md"))}
    docs |= {p.stem: p.read_text(encoding="utf-8") for p in sorted((HERE / "corpus").glob("*.md"))}
    return docs


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def item(
    number: int,
    qid: str,
    category: str,
    answer: str,
    supported: bool,
    why: str,
    citations: list[str] | None = None,
) -> dict[str, Any]:
    doc, question, concepts = Q[qid]
    lang = {"pt": "pt", "es": "es", "fr": "fr", "de": "de"}.get(qid[:2], "en")
    return {
        "id": f"{category}-{number:03d}",
        "category": category,
        "lang": lang,
        "question": question,
        "document": doc,
        "citations": citations or [doc],
        "required_concepts": concepts,
        "answer": answer,
        "supported": supported,
        "why": why,
    }


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?;])\s+", text.strip()) if s]


def derived(docs: dict[str, str]) -> list[tuple[Any, ...]]:
    """Attacks built from the documents; each category's label is decided once, up front."""
    rng = random.Random(20261130)
    out: list[tuple[Any, ...]] = []
    for qid, (doc, question, _) in Q.items():
        if qid[0] == "x":
            continue
        body = "\n".join(line for line in docs[doc].splitlines() if not line.startswith("#"))
        distinct = list(dict.fromkeys(words(body)))
        frequent = [w for w, _ in Counter(w for w in words(body) if len(w) > 3).most_common(25)]
        asked = [w for w in words(question) if len(w) > 3]
        if qid in ("c01", "c05", "c09", "c15", "c17", "pt1", "es1", "fr1", "de1"):
            out.append((qid, "paste", body.strip(), NO, "the whole document pasted"))
            out.append(
                (
                    qid,
                    "salad_in_order",
                    " ".join(distinct),
                    NO,
                    "every distinct word of the document, in reading order: no claim",
                )
            )
        if qid in ("c02", "c06", "c10", "c13", "c16", "pt3", "es2", "fr2", "de2"):
            shuffled = distinct[:]
            rng.shuffle(shuffled)
            out.append(
                (
                    qid,
                    "salad_random",
                    " ".join(shuffled),
                    NO,
                    "the document's distinct words in random order",
                )
            )
            top = sorted(distinct, key=lambda w: (w not in asked, -body.casefold().count(w)))[:20]
            out.append(
                (
                    qid,
                    "salad_topk",
                    " ".join(top),
                    NO,
                    "the 20 document words sharing most with the question: no claim",
                )
            )
        if qid in ("c03", "c04", "c07", "c08", "c11", "c12", "c14"):
            listed = " ".join(dict.fromkeys(asked + frequent[:12]))
            out.append(
                (
                    qid,
                    "concept_list",
                    listed,
                    NO,
                    "question words plus the document's most frequent words",
                )
            )
    for index in SHUFFLE_SOURCES:
        qid, _, answer, *_ = HAND[index]
        parts = sentences(answer)
        order = parts[1:] + parts[:1]
        out.append(
            (
                qid,
                "shuffled_sentences",
                " ".join(order),
                YES,
                "the same supported sentences in another order: every claim still follows from the passage",
            )
        )
        if index % 3 == 0:
            scrambled = []
            for part in parts:
                tokens = part.rstrip(".").split()
                rng.shuffle(tokens)
                scrambled.append(" ".join(tokens) + ".")
            out.append(
                (
                    qid,
                    "shuffled_words",
                    " ".join(scrambled),
                    NO,
                    "words shuffled inside each sentence: no longer says anything",
                )
            )
    for qid in ("c02", "c12", "c16"):
        answer = next(h[2] for h in HAND if h[0] == qid and h[1] == "extractive")
        out.append(
            (
                qid,
                "padding_offtopic",
                answer + " " + OFFTOPIC,
                NO,
                "a correct answer drowned in off-topic text",
            )
        )
    return out


def main() -> None:
    docs = documents()
    rows = []
    counters: Counter[str] = Counter()
    for entry in [*HAND, *derived(docs)]:
        qid, category, answer, supported, why, *rest = entry
        counters[category] += 1
        rows.append(item(counters[category], qid, category, answer, supported, why, *rest))
    for row in rows:
        for doc in row["citations"]:
            assert doc in docs, doc
    OUT.write_text(
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
    )
    print(f"{len(rows)} items, {sum(r['supported'] for r in rows)} supported -> {OUT}")


if __name__ == "__main__":
    main()
