"""YAML files the CLI reads and writes: job specs and job configs.

Reward function sources may be inline (``source``) or in a file next to the YAML
(``source_file``), so a job spec can live in a repository beside its reward code. A reward
scored by a reward model names it instead: ``{model, weight, batch_size, max_length}``. A whole
reward file serves several functions: ``function`` names the def to run in it (the server keeps
what that def uses), or a job spec's ``reward_module: {source_file, functions}`` names them.

Agent jobs name their tools and environments the same way, by file: ``tools: [{file, name}]``
(the function ``name`` of that file) and ``environment: {file, class_name, weight}`` (or
``environments: {name: {file, class_name, weight}}``); ``source`` gives the code inline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rft.agents import Environment, HttpTool, Tool
from rft.errors import RFTError
from rft.models import REWARD_MODEL_SETTINGS, RUN_SETTINGS, JobConfig, RewardModel, RewardModule


def _reward_functions(raw: Any, base_dir: Path, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict) or not raw:
        raise RFTError(
            f"{where}: reward_functions must map names to {{source|source_file, weight}}"
        )
    functions: dict[str, dict[str, Any]] = {}
    for name, spec in raw.items():
        if isinstance(spec, str):
            spec = {"source": spec}
        if not isinstance(spec, dict):
            raise RFTError(f"{where}: reward function {name!r} must be a mapping")
        if "model" in spec:
            if "source" in spec or "source_file" in spec:
                raise RFTError(f"{where}: reward function {name!r}: give model or source, not both")
            functions[str(name)] = {
                "model": str(spec["model"]),
                "weight": float(spec.get("weight", 1.0)),
            }
            for key in REWARD_MODEL_SETTINGS:
                if spec.get(key) is not None:
                    functions[str(name)][key] = spec[key]
            continue
        if "source_file" in spec:
            source = (base_dir / str(spec["source_file"])).read_text()
        elif "source" in spec:
            source = str(spec["source"])
        else:
            raise RFTError(f"{where}: reward function {name!r} needs source, source_file or model")
        functions[str(name)] = {"source": source, "weight": float(spec.get("weight", 1.0))}
        for key in ("function", *RUN_SETTINGS):
            if spec.get(key) is not None:
                functions[str(name)][key] = spec[key]
    return functions


def _reward_module(raw: Any, base_dir: Path, where: str) -> RewardModule:
    if not isinstance(raw, dict) or not ("source_file" in raw or "source" in raw):
        raise RFTError(f"{where}: reward_module must be {{source_file|source, functions}}")
    functions = raw.get("functions")
    if not isinstance(functions, dict | list) or not functions:
        raise RFTError(f"{where}: reward_module.functions must name the reward functions")
    if "source_file" in raw:
        return RewardModule(base_dir / str(raw["source_file"]), functions)
    return RewardModule.from_source(str(raw["source"]), functions)


def _code_file(spec: dict[str, Any], base_dir: Path) -> Path | None:
    """The file a tool or environment names (``file``, or ``source_file`` as rewards say)."""
    named = spec.get("file", spec.get("source_file"))
    return None if named is None else base_dir / str(named)


def _tools(raw: Any, base_dir: Path, where: str) -> list[Tool | HttpTool]:
    if not isinstance(raw, list) or not all(isinstance(spec, dict) for spec in raw):
        raise RFTError(f"{where}: tools must be a list of {{file, name}}")
    tools: list[Tool | HttpTool] = []
    for spec in raw:
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise RFTError(f"{where}: each tool needs name (the function to call)")
        file = _code_file(spec, base_dir)
        if "url" in spec:  # an HTTP tool: {name, url, description, parameters, headers}
            try:
                tools.append(
                    HttpTool.model_validate({k: v for k, v in spec.items() if k != "type"})
                )
            except ValidationError as error:
                raise RFTError(f"{where}: HTTP tool {name!r}: {error}") from None
        elif file is not None:
            tools.append(Tool.from_file(file, name))
        elif "source" in spec:
            tools.append(Tool(name=name, source=str(spec["source"])))
        else:
            raise RFTError(f"{where}: tool {name!r} needs file or source")
    return tools


def _environment(raw: Any, base_dir: Path, where: str) -> Environment:
    if not isinstance(raw, dict) or not isinstance(raw.get("class_name"), str):
        raise RFTError(f"{where}: an environment must be {{file, class_name, weight}}")
    weight = float(raw.get("weight", 1.0))
    file = _code_file(raw, base_dir)
    if file is not None:
        return Environment.from_file(file, raw["class_name"], weight=weight)
    if "source" in raw:
        return Environment(source=str(raw["source"]), class_name=raw["class_name"], weight=weight)
    raise RFTError(f"{where}: environment {raw['class_name']!r} needs file or source")


def _environments(raw: Any, base_dir: Path, where: str) -> dict[str, Environment]:
    if not isinstance(raw, dict) or not raw:
        raise RFTError(f"{where}: environments must map names to {{file, class_name, weight}}")
    return {
        str(name): _environment(spec, base_dir, f"{where}: environment {name!r}")
        for name, spec in raw.items()
    }


def load_yaml(path: Path) -> dict[str, Any]:
    content = yaml.safe_load(path.read_text())
    if not isinstance(content, dict):
        raise RFTError(f"{path}: expected a YAML mapping at the top level")
    return content


def read_job_spec(path: Path) -> dict[str, Any]:
    """The keyword arguments of ``jobs.create`` (with ``dataset_path`` when a file is named)."""
    spec = load_yaml(path)
    known = {
        "name",
        "dataset_id",
        "dataset",
        "base_model",
        "reward_functions",
        "reward_module",
        "hyperparameters",
        "guards",
        "allow_network",
        "runtime_packages",
        "secrets_from_env",
        "num_devices",
        "num_nodes",
        "engine",
        "method",
        "tools",
        "environment",
        "environments",
        "init_from",
        "init_from_optimizer",
    }
    unknown = set(spec) - known
    if unknown:
        raise RFTError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    if bool(spec.get("dataset_id")) == bool(spec.get("dataset")):
        raise RFTError(f"{path}: give either dataset_id or dataset (a file to upload)")
    scored_by = ("reward_functions", "reward_module", "environment", "environments")
    if spec.get("method") != "sft" and not any(spec.get(key) for key in scored_by):
        raise RFTError(
            f"{path}: give reward_functions, reward_module or both (an agent job may instead "
            "be scored by its environment's get_reward)"
        )
    job: dict[str, Any] = {
        "reward_functions": (
            _reward_functions(spec["reward_functions"], path.parent, str(path))
            if spec.get("reward_functions")
            else {}
        ),
        "reward_module": (
            _reward_module(spec["reward_module"], path.parent, str(path))
            if spec.get("reward_module")
            else None
        ),
        "hyperparameters": spec.get("hyperparameters") or {},
        "name": spec.get("name"),
        "allow_network": bool(spec.get("allow_network", False)),
        "runtime_packages": [str(p) for p in spec.get("runtime_packages") or []],
        "secrets": _secrets_from_env(spec.get("secrets_from_env") or [], str(path)),
    }
    # The server's defaults (base model 'rft-tiny', or with init_from the parent's; 1 device,
    # 1 node, 'ddp'; method 'grpo'; fresh LoRA weights) unless the file names them.
    for key in (
        "base_model",
        "guards",
        "num_devices",
        "num_nodes",
        "engine",
        "method",
        "init_from",
        "init_from_optimizer",
    ):
        if spec.get(key) is not None:
            job[key] = spec[key]
    # Agent parts: only when named, so the request of a plain job is what it always was.
    if spec.get("tools"):
        job["tools"] = _tools(spec["tools"], path.parent, str(path))
    if spec.get("environment") and spec.get("environments"):
        raise RFTError(f"{path}: give environment (one) or environments (by name), not both")
    if spec.get("environment"):
        job["environment"] = _environment(spec["environment"], path.parent, str(path))
    if spec.get("environments"):
        job["environments"] = _environments(spec["environments"], path.parent, str(path))
    if spec.get("dataset_id"):
        job["dataset"] = str(spec["dataset_id"])
    else:
        job["dataset_path"] = path.parent / str(spec["dataset"])
    return job


def _secrets_from_env(names: object, where: str) -> dict[str, str]:
    """Secret values come from the environment of whoever runs the CLI, never from the file
    (job files get committed)."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise RFTError(f"{where}: secrets_from_env must be a list of environment variable names")
    missing = [name for name in names if name not in os.environ]
    if missing:
        raise RFTError(f"{where}: secrets_from_env names unset environment variables {missing}")
    return {name: os.environ[name] for name in names}


def read_config(path: Path) -> JobConfig:
    raw = load_yaml(path)
    # An agent job may be scored by its environments' get_reward alone.
    if raw.get("reward_functions") or not raw.get("environments"):
        raw["reward_functions"] = _reward_functions(
            raw.get("reward_functions"), path.parent, str(path)
        )
    if raw.get("tools") is not None:
        raw["tools"] = _config_tools(raw["tools"], path.parent, str(path))
    if raw.get("environments") is not None:
        raw["environments"] = _environments(raw["environments"], path.parent, str(path))
    return JobConfig.model_validate(raw)


def _config_tools(raw: Any, base_dir: Path, where: str) -> dict[str, Any]:
    """A config's tools: ``{name: {source | file}}`` as ``config get`` writes them, or the
    job file's list form."""
    if isinstance(raw, list):
        return {tool.name: tool for tool in _tools(raw, base_dir, where)}
    if not isinstance(raw, dict):
        raise RFTError(f"{where}: tools must map names to {{source | file}}")
    tools: dict[str, Any] = {}
    for name, spec in raw.items():
        if isinstance(spec, dict):
            tools[str(name)] = _tools([{"name": name, **spec}], base_dir, where)[0]
        else:
            tools[str(name)] = str(spec)  # inline source
    return tools


class _BlockStyleDumper(yaml.SafeDumper):
    """Writes multi-line strings (reward code) as ``|`` blocks, readable and editable."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockStyleDumper.add_representer(str, _represent_str)


def config_to_yaml(config: JobConfig) -> str:
    content: dict[str, Any] = {
        "job_id": config.job_id,
        "version": config.version,
        "reward_functions": {
            name: (
                function.to_request()
                if isinstance(function, RewardModel)
                else {
                    "weight": function.weight,
                    # Run settings travel too, so `config update` of this file keeps them.
                    **{
                        key: getattr(function, key)
                        for key in RUN_SETTINGS
                        if getattr(function, key) is not None
                    },
                    "source": function.source,
                }
            )
            for name, function in config.reward_functions.items()
        },
    }
    # Agent jobs: their tools and environments travel too, so `config update` keeps them.
    if config.tools:
        content["tools"] = {
            # An HTTP tool as declared (its source is generated from it on the server).
            name: tool.http.model_dump() if tool.http is not None else {"source": tool.source}
            for name, tool in config.tools.items()
        }
    if config.environments:
        content["environments"] = {
            name: {
                "class_name": environment.class_name,
                "weight": environment.weight,
                "source": environment.source,
            }
            for name, environment in config.environments.items()
        }
    if config.temperature is not None:
        content["temperature"] = config.temperature
    if config.top_p is not None:
        content["top_p"] = config.top_p
    return yaml.dump(content, Dumper=_BlockStyleDumper, sort_keys=False, allow_unicode=True)
