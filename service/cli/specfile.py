"""The CLI reads spec files with the trainer's reader (trainer/contract/spec_file.py), so `rljob submit`
and `python -m trainer run` accept and refuse the same files with the same messages."""

from trainer.contract.spec_file import SpecFileError, load_spec_file, read_spec_data

__all__ = ["SpecFileError", "load_spec_file", "read_spec_data"]
