"""Tools and environments for TRL's tool-calling loop, with the user's code in the sandbox.

TRL 1.16 runs the loop itself (``GRPOTrainer(tools=..., environment_factory=...)``): it renders
each tool's schema into the prompt from the callable's name, signature and docstring, parses
the model's tool calls, calls the callables, and masks tool output out of the loss. The user's
code must never run in the trainer, so TRL is handed stand-ins: functions (and an environment
class) with the user's names, signatures and docstrings whose bodies forward the call to the
job's AgentSandbox, the way trl's ``experimental/openreward`` adapter binds tool methods to a
remote session.

Two things TRL does not do, done here:
- **Calls of different rollouts overlap.** TRL calls the tools of one rollout after another.
  When the first call of a round arrives, :class:`AgentSession` reads every call of that round
  from the batch's completions (the same list TRL walks), sends them to the sandbox in one
  batch (run concurrently there), and answers TRL's calls, in TRL's order, from the results.
- **Every call is recorded**: arguments, result, typed error, duration; a rollout's whole
  trajectory is built from TRL's messages and these records after the loop.

The package, by what each part is:
- ``annotations``: a tool's described signature (sandbox.child.agent_code_rules) as a Python one.
- ``stand_ins``: the functions and environment classes TRL holds in place of the user's code.
- ``session``: a job's tools on one rank (``AgentSession``): loading, rollouts, the batched
  tool rounds.
- ``trajectories``: a rollout turn by turn, what rewards read, and a step's tool metrics.
"""
