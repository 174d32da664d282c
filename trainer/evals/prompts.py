"""Prompts and acceptable answers exactly as train_rl builds them, so an eval prompt equals a training prompt.

MaxText's utils_rl.process_data (maxtext 0.2.5) formats the question with the data template's TEMPLATE and
SYSTEM_PROMPT (format_maxtext_messages, with rl.yml's tags), applies the tokenizer's chat template with the
generation prompt, and hands reward functions the JSON list [answer, answer], where a GSM8K-style answer is
first cut to the text after `####` (extract_hash_answer, for dataset_name openai/gsm8k). Written out here
rather than imported: utils_rl pulls in JAX, optax and Tunix (8 s per eval job) for a few lines of string
work; tests/trainer/evals/test_eval_job_suites.py checks these against utils_rl.process_data itself.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

# rl.yml's tags, which a template's SYSTEM_PROMPT may name; also what reward functions get as tmvp_config
# (`debug` is read by MaxText's own check_correctness). A reward that reads other config fields has none here.
RL_TAGS = {
    "reasoning_start_token": "<reasoning>",
    "reasoning_end_token": "</reasoning>",
    "solution_start_token": "<answer>",
    "solution_end_token": "</answer>",
}
HASH_SEPARATOR = "####"


def reward_config() -> SimpleNamespace:
    return SimpleNamespace(**RL_TAGS, debug=False)


def acceptable_answers(answer: str) -> list[str]:
    """[a, a] where a is the text after a GSM8K `####` line, or the whole answer when it has none."""
    if HASH_SEPARATOR in answer:
        answer = answer.split(HASH_SEPARATOR)[1].strip()  # extract_hash_answer: the part after the first ####
    return [answer, answer]


def format_question(question: str, template: dict[str, str]) -> str:
    """format_maxtext_messages' user message."""
    return template["TEMPLATE"].format(system_prompt=template["SYSTEM_PROMPT"].format(**RL_TAGS), question=question)


def build_prompt(question: str, template: dict[str, str], tokenizer: Any) -> str:
    messages = [{"role": "user", "content": format_question(question, template)}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if not isinstance(prompt, str):
        raise TypeError(f"apply_chat_template returned {type(prompt).__name__}, not text")
    return prompt


def answers_json(answers: list[str]) -> str:
    """The form reward functions receive (process_data string-encodes the list)."""
    return json.dumps(answers)
