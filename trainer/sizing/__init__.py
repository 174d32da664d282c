"""What a job needs from its hardware, worked out before any accelerator is taken: the model's shape
(model_shapes.py; read from the checkpoint's config.json by hf_model.py, which also renders the MaxText
settings every stage passes from it; job_shape.py picks the one a spec implies), each TPU chip's memory
(tpu_memory.py) and the per-chip fit estimate (fit.py; what each phase of a step holds: fit_phases.py).

Layering (tests/test_import_contract.py): sizing reads the wire contract (`JobSpec`, the TPU slice table the
spec is validated against, location strings); `trainer.contract` never imports sizing. The service imports
both, so, like the contract, this package imports only pydantic and the standard library.
"""
