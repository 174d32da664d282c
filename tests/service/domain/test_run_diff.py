"""service/domain/run_diff.py on its own: which keys it names, and how a job without a repro record reads."""

from __future__ import annotations

from service.domain.run_diff import differences, flatten


def test_nested_specs_flatten_to_dotted_keys_and_lists_of_objects_by_index() -> None:
    value = {"grpo": {"learning_rate": 1e-5, "rewards": {"functions": ["a", "b"]}}, "labels": {}, "data": [{"uri": "u", "sha256": "x"}]}
    assert flatten(value) == {
        "grpo.learning_rate": 1e-5,
        "grpo.rewards.functions": ["a", "b"],
        "labels": {},
        "data.0.uri": "u",
        "data.0.sha256": "x",
    }


def test_only_changed_keys_are_named_the_ignored_ones_never_and_a_missing_key_reads_as_null() -> None:
    a = {"name": "one", "grpo": {"learning_rate": 3e-6, "beta": 0.08}, "labels": {"x": "1"}}
    b = {"name": "two", "grpo": {"learning_rate": 1e-5, "beta": 0.08}, "labels": {}}
    found = [(d.key, d.a, d.b) for d in differences(a, b, ignore=frozenset({"name"}))]
    assert found == [("grpo.learning_rate", 3e-6, 1e-5), ("labels", None, {}), ("labels.x", "1", None)]
