"""Evaluator self-attack (DESIGN §9): canary agents that deserve zero, run against a case set."""
