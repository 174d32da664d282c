"""Eval jobs' engine: suites (built-in or the user's rows, rewards and template, hashed by what was loaded),
Hugging Face transformers generation on CPU, scoring per reward function, and the run that writes
eval/outcomes.jsonl and eval/report.json (the contract: trainer/contract/spec/eval_suite.py and eval_report.py).

Job code: it may not import trainer.offline (tests/test_import_contract.py); the offline builders import the
row generators they share with the built-in suites from here.
"""
