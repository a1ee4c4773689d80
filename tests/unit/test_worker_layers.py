"""workers/ in layers that point one way (docs/architecture.md): each module imports only its
own layer and those below, and no import circle exists. Read from the source (imports inside
functions count; those under TYPE_CHECKING do not: they never run)."""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import imports_of, package_modules, top_package

# Bottom to top. A module not named here fails the test: place it when you add it.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "records, failures and plumbing",
        {
            "workers",
            "workers.failures",
            "workers.identity",
            "workers.process_environment",
            "workers.database",
            "workers.advertised_devices",
            "workers.compiled_caches",
            "workers.periodic",
            "workers.training.step_records",
            "workers.training.observer",
        },
    ),
    # Training, inside a rank: five layers, so that imports among them are checked too.
    (
        "training parts: devices, models, engines, agent parts, the rank group",
        {
            "workers.job_sandbox",
            "workers.training.agents",
            "workers.training.agents.annotations",
            "workers.training.agents.stand_ins",
            "workers.training.agents.trajectories",
            "workers.training.colocated_vllm_sizing",
            "workers.training.cuda",
            "workers.training.engines",
            "workers.training.generation",
            "workers.training.kept_engine",
            "workers.training.merge",
            "workers.training.model_options",
            "workers.training.ranks",
            "workers.training.reproducible_sampling",
            "workers.training.reward_stats",
            "workers.training.spec",
            "workers.training.starting_weights",
            "workers.training.stop_sequences",
            "workers.training.thread_priority",
            "workers.training.trackers",
            "workers.training.vllm_cpu",
        },
    ),
    (
        "scoring: the agent session, reward models, the reward dispatcher, GRPO's trainer",
        {
            "workers.training.agents.session",
            "workers.training.grpo_trainer",
            "workers.training.reward_dispatch",
            "workers.training.reward_models",
        },
    ),
    ("what the trainers share", {"workers.training.trainer_common"}),
    (
        "GRPO's step reporting, evaluation and async generation",
        {
            "workers.training.async_generation",
            "workers.training.evaluation",
            "workers.training.step_reporting",
        },
    ),
    ("the methods: GRPO and SFT", {"workers.training.grpo", "workers.training.sft"}),
    ("the rank process", {"workers.training.rank_process"}),
    ("the spare and its template", {"workers.training.spare", "workers.training.spare_template"}),
    (
        "the launcher",
        {
            "workers.training.forked_spares",
            "workers.training.rank_processes",
            "workers.training.launch",
        },
    ),
    (
        "placement, the lease and the webhook dispatcher",
        {"workers.placement", "workers.lease", "workers.webhooks"},
    ),
    (
        "job orchestration (and inference serving beside it)",
        {
            "workers.training_job",
            "workers.export",
            "workers.job_plan",
            "workers.database_observer",
            "workers.step_store",
            "workers.job_watch",
            "workers.training_signals",
            "workers.guards",
            "workers.circuit_breaker",
            "workers.metrics",
            "workers.inference",
            "workers.inference.pool",
            "workers.inference.server",
            "workers.inference.vllm_engine",
        },
    ),
    ("the worker process's life", {"workers.lifecycle"}),
    ("Celery tasks", {"workers.tasks"}),
]


def worker_imports(path: Path) -> set[str]:
    """The workers.* modules ``path`` imports when it runs."""
    return {name for name in imports_of(path) if top_package(name) == "workers"}


def import_graph() -> dict[str, set[str]]:
    paths = package_modules("workers")
    return {name: worker_imports(path) & set(paths) for name, path in paths.items()}


def test_every_module_has_a_layer() -> None:
    placed = set().union(*(modules for _, modules in LAYERS))
    assert set(import_graph()) - placed == set()
    assert placed - set(import_graph()) == set(), "a layer names a module that is gone"


def test_layers_point_one_way() -> None:
    level = {module: i for i, (_, modules) in enumerate(LAYERS) for module in modules}
    upward = [
        f"{module} ({LAYERS[level[module]][0]}) imports {imported} ({LAYERS[level[imported]][0]})"
        for module, imports in import_graph().items()
        for imported in imports
        if level[imported] > level[module]
    ]
    assert upward == []


def test_no_import_circle() -> None:
    graph = import_graph()
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if imported == module or (module.startswith(imported + ".")):
                continue  # a package's own __init__ is not a circle
            if state.get(imported) == 1:
                circles.append(" -> ".join([*path[path.index(imported) :], imported]))
            elif imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert circles == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The graph reader finds imports in functions and skips TYPE_CHECKING ones."""
    source = tmp_path / "example.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from workers.tasks import train_job\n"
        "def f():\n    from workers.training_job import run_training_job\n"
    )
    assert worker_imports(source) == {
        "workers.training_job",
        "workers.training_job.run_training_job",
    }
