"""The programs that run inside the sandbox, and the child runtime they are built on.

This folder is bound read-only into every sandbox (``/opt/rft/child``, sandbox/isolation.py)
and imported there as a package of its own by start.py, so its modules use only the standard
library and import each other relatively, never the rest of the project:

- start.py: what the sandbox's interpreter runs; it imports a child program and serves.
- runtime.py: the child runtime (pipes, limits, the first frame, logs, user tracebacks).
- framing.py: the frames on the pipes, shared with the host (sandbox/worker_process.py).
- egress_forwarder.py: the way out to the egress proxy when a job has the network.
- reward_child.py, reward_scoring.py: the reward child program.
- agent_child.py, agent_steps.py, agent_code_rules.py: the agent child program (tools and
  environments); the host checks code with the same rules.
"""
