"""Grading server for the RAG-agents capstone."""

__version__ = "0.1.0"
