"""GPU memory: what a job needs on a GPU, and who checks it where.

- ``memory_plan``: the arithmetic both sides share (a model's shape from its config.json, the
  trainer's and vLLM's bytes, the share of a GPU vLLM gets). Pure: reads no files.
- ``job_fit``: the API's check at job creation, against the GPUs the running workers advertise
  (a job that fits none is refused with a 400).
- On the worker: ``workers.training.colocated_vllm_sizing`` sizes vLLM on the GPU a rank has, and
  ``workers.advertised_devices`` is what a worker advertises about its GPUs.
"""
