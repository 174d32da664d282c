"""What a spec's strings and numbers may hold, and why: every value reaches MaxText as written.

The stages pass spec values to MaxText as `key=value` arguments, which MaxText's config loader
(`pyconfig.initialize_pydantic`) reads with `OmegaConf.from_cli`: each value is parsed as YAML, then
every `${...}` in it is resolved. A value is therefore never quoted or escaped by the trainer; it is
refused here unless MaxText will read back exactly the string we wrote:

- no `$`, `{`, `}`: `${oc.env:HF_TOKEN}` would read the trainer's environment, `${other_key}` another
  setting (tests/trainer/stages/test_maxtext_argv_injection.py runs MaxText's loader to show both);
- no whitespace or control characters: YAML ends a value at ` #` or `: `, folds newlines, and a NUL
  cuts a path short in the C libraries below Python;
- names start with a letter and are not YAML's or MaxText's special words, because `1.0`, `on` or
  `null` would arrive as a number, a boolean or None (MaxText also turns the text `none` into None).

Every rule is also a JSON-schema `pattern` (or `maxLength`), so the OpenAPI schema states it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, Field

# Words OmegaConf's YAML loader reads as booleans or null, and the one MaxText itself turns into None;
# compared case-insensitively (YAML takes `null`, `Null` and `NULL`: refusing every casing is simpler).
YAML_SPECIAL_WORDS = frozenset({"yes", "no", "on", "off", "true", "false", "null", "none"})

# The characters a location (path, gs:// URI, hub id) may use: enough for real paths, bucket objects
# (`date=2024-01-01`), hub ids and URL escapes; none that YAML or OmegaConf treats specially inside a
# value that starts with `/`, `gs://` or a letter.
LOCATION_PUNCTUATION = "._~/:@+=,%-"
LOCATION_CHARS = "A-Za-z0-9" + LOCATION_PUNCTUATION
LOCATION_PATTERN = rf"^[{LOCATION_CHARS}]+$"
# GCS object names are at most 1024 bytes; a local path beyond that is not one a job needs.
MAX_LOCATION_LENGTH = 1024

MAXTEXT_NAME_PATTERN = r"^[a-z][a-z0-9._-]{0,63}$"  # MaxText model names: llama3.1-8b, gemma3-4b
SUBSET_PATTERN = r"^[A-Za-z][A-Za-z0-9._-]{0,63}$"  # HF dataset configs: main, socratic, en-de
SPLIT_PATTERN = r"^[A-Za-z][A-Za-z0-9_.]{0,63}$"  # HF split names are \w+(\.\w+)*
PYTHON_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
HUB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"  # HF: 96 characters a part
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9._-]{0,63}$"
REVISION_PATTERN = r"^[A-Za-z0-9._/-]{1,128}$"
DISPLAY_TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]{1,63}$"  # free text shown to people: no control characters

# ---- numeric limits ------------------------------------------------------------------------------
# Each limit is far above what the largest slice in tpu.py (v6e-256: 256 chips, 8 TiB of HBM) can run,
# so no real job is refused, while every product the trainer and MaxText form from them (train steps,
# rollout tokens per step) stays below 2**31: JAX runs with 32-bit integers (x64 off), so MaxText's step
# counters and Tunix's token positions are int32. Non-finite floats are refused by the models' config.
INT32_MAX = 2**31 - 1
MAX_NUM_BATCHES = 10_000_000  # train steps per iteration: 115 days at one step a second
MAX_NUM_ITERATIONS = 100  # GRPO's mu (updates per batch); the GRPO papers use 1 to 4
MAX_NUM_TEST_BATCHES = 1_000_000
MAX_BATCH_SIZE = 65_536  # prompts per step
MAX_NUM_GENERATIONS = 1_024  # completions per prompt (the tutorial: 2, DeepSeekMath: 64)
MAX_SEQUENCE_LENGTH = 1_048_576  # tokens: 8x Llama 3.1's 131072-token context
MAX_TOP_K = 1_048_576  # above any vocabulary MaxText ships (Gemma 3: 262144)
MAX_TEMPERATURE = 100.0  # sampling is uniform noise long before this
MAX_BETA = 100.0  # KL coefficient; the tutorial uses 0.08
MAX_REWARD_WEIGHT = 1_000.0  # |weight|; MaxText's defaults are at most 1 and GRPO normalises rewards per group
MAX_EVAL_PASSES = 1_000
MAX_MODEL_DIM = 1_048_576  # any MaxText dimension; Llama 3.1 405B's largest (mlp) is 53248
MAX_LIST_ITEMS = 1_000  # data files, reward functions
MAX_LABELS = 64
MAX_RETENTION_DAYS = 3_650  # ten years: a longer retention is keeping forever (0)


INTERPOLATION_REFUSED = "'$', '{' and '}' are not allowed (MaxText's config loader would resolve ${...})"


def _text_rule(pattern: str, rule: str, *, special_words: bool = False) -> Callable[[str], str]:
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if any(ch in value for ch in "${}"):
            raise ValueError(f"{INTERPOLATION_REFUSED}; {rule}")
        # fullmatch: re's `$` also matches before a trailing newline, which must not pass.
        if not regex.fullmatch(value):
            raise ValueError(rule)
        if special_words and value.lower() in YAML_SPECIAL_WORDS:
            raise ValueError(f"{value!r} is a word MaxText's config loader reads as a boolean or null; {rule}")
        return value

    return check


def spec_text(pattern: str, max_length: int, rule: str, *, special_words: bool = False, **field: Any) -> Any:
    """A string field whose pattern is both enforced (with `rule` as the message) and in the schema.

    Returns an `Annotated` type built at run time (so `Any` to mypy); `field` goes to pydantic's `Field`.
    """
    return Annotated[
        str,
        Field(max_length=max_length, json_schema_extra={"pattern": pattern}, **field),
        AfterValidator(_text_rule(pattern, rule, special_words=special_words)),
    ]


def check_location_text(value: str) -> str:
    """Refuse any character MaxText's loader would not pass through untouched, naming it."""
    for ch in value:
        if re.fullmatch(f"[{LOCATION_CHARS}]", ch):
            continue
        if ch in "${}":
            raise ValueError(f"{ch!r} is not allowed: MaxText's config loader would resolve ${{...}} in it")
        allowed = " ".join(LOCATION_PUNCTUATION)
        raise ValueError(f"{ch!r} is not allowed in a location: use letters, digits and {allowed}")
    return value


Location = Annotated[
    str,
    Field(min_length=1, max_length=MAX_LOCATION_LENGTH, json_schema_extra={"pattern": LOCATION_PATTERN}),
    AfterValidator(check_location_text),
]

MaxTextName = spec_text(MAXTEXT_NAME_PATTERN, 64, "must be a MaxText model name such as llama3.1-8b", special_words=True)
SubsetName = spec_text(
    SUBSET_PATTERN,
    64,
    "must be a dataset subset name: a letter, then letters, digits, '.', '_' or '-'",
    special_words=True,
    description="Hugging Face dataset config (subset); MaxText reads it as YAML, so a name that looks like a "
    "number or a boolean is refused",
)
SplitName = spec_text(SPLIT_PATTERN, 64, "must be a split name: a letter, then letters, digits, '.' or '_'", special_words=True)
PythonName = spec_text(PYTHON_NAME_PATTERN, 128, "must be an ASCII Python identifier", special_words=True)
HubId = spec_text(HUB_ID_PATTERN, 193, "must be a Hugging Face id such as org/name")
Revision = spec_text(REVISION_PATTERN, 128, "must be a branch, tag or commit hash")
DisplayText = spec_text(DISPLAY_TEXT_PATTERN, 63, "must be 1 to 63 characters without control characters")
