"""Prompts shared by the engine tests: different lengths and words, so one batch mixes request shapes."""

PROMPTS = [
    "Beautiful is better than ugly",
    "the lazy dog",
    "Errors should never pass silently unless explicitly silenced",
    "now is better than never",
    "If the implementation is hard to explain, it's a bad idea.",
    "code",
]
