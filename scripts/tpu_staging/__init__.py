"""What scripts/tpu_stage.py runs: rljob staged for the TPU machine lent to this project, in carriable chunks.

Here (a machine with PyPI), in the checkout's .venv:
  trace.py, trace_hook.py  which distributions a TPU host imports to run rljob (torch left out), written to
                           host_requirements.txt by host_requirements.py
  build.py                 the cp312 wheels of that list for the chip's glibc, split and packed into chunks that each
                           travel with the working tree in one device call, with manifest.json and the calls to make

On the chip (its python3 is 3.11: standard library only, nothing newer than 3.11):
  chip.py                  unpack a carried chunk into the machine's /tmp, install them all into a Python 3.12
                           virtualenv, write the environment file, check what JAX sees
  layout.py                the manifest and the paths both sides agree on
"""
