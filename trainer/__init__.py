"""rljob trainer: convert -> GRPO -> export with MaxText."""
