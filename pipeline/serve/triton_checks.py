"""Two checks of a written config.pbtxt, since a config Triton refuses costs a server start
to find out: Triton's own schema (the ModelConfig message that ships, generated, in the
`tritonclient` wheel: parsed with protobuf's text format, no server and no grpcio), and our
rules against the engines (every input and output with its type and dims, max_batch_size
within what the profiles allow, a plan for every compute capability, no `model.plan` to
fall back to)."""

from __future__ import annotations

import importlib.util
import types
import zipfile
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError, first_line
from pipeline.serve.triton_config import Engine, TritonConfig, config, max_batch_size

SCHEMA = "tritonclient/grpc/model_config_pb2.py"


def schema_check(text: str, want: TritonConfig, module: Any) -> str:
    """Parses `text` with Triton's ModelConfig (`module`, from load_schema) and compares it
    with the config it was written from; what was checked, in words. Raises ValueError on
    a config the schema refuses or reads otherwise."""
    if module is None:
        return (
            "Triton's schema not checked: no tritonclient (pip download tritonclient "
            "--no-deps, then --triton-schema WHEEL)"
        )
    from google.protobuf import json_format, text_format

    try:
        parsed = text_format.Parse(text, module.ModelConfig())
    except text_format.ParseError as e:
        raise ValueError(f"Triton's ModelConfig refuses it: {e}") from None
    got = json_format.MessageToDict(parsed, preserving_proto_field_name=True)
    for key, value in want.items():
        if _normal(got.get(key)) != _normal(value):
            raise ValueError(f"Triton reads {key} as {got.get(key)!r}, not {value!r}")
    return "parsed with Triton's ModelConfig (tritonclient)"


def _normal(value: Any) -> Any:
    """protobuf's JSON writes int64 as strings and leaves out zeros and empty messages."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if v not in (0, "0", {}, [], None)}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None if value in (0, {}, []) else value


def load_schema(schema: Path | None) -> Any:
    """Triton's ModelConfig message class, or None where there is none: from `schema` (a
    tritonclient wheel), else from an installed tritonclient's file. Nothing is run: the
    generated module's serialized descriptor is read out of its source (ast) and built with
    protobuf's own descriptor pool, so a file given by name is data, never code (and
    importing tritonclient would import grpc)."""
    if schema is None:
        spec = importlib.util.find_spec("tritonclient")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))).parent / SCHEMA
        return _model_config(path.read_text(), str(path))
    return _model_config(_wheel_source(schema), str(schema))


def _wheel_source(wheel: Path) -> str:
    """tritonclient's generated model_config_pb2.py, read out of its wheel; one line for
    anything else."""
    why = f"--triton-schema {wheel}: not a tritonclient wheel (pip download tritonclient --no-deps)"
    if wheel.suffix != ".whl" or not wheel.name.lower().startswith("tritonclient-"):
        raise PipelineError(why)
    try:
        with zipfile.ZipFile(wheel) as z:
            return z.read(SCHEMA).decode()
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise PipelineError(f"{why} ({first_line(e)})") from None


def _model_config(source: str, where: str) -> Any:
    """inference.ModelConfig from a generated _pb2 module's source, without running it."""
    import ast

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    blobs = [
        node.args[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "AddSerializedFile"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, bytes)
    ]
    if not blobs:
        raise PipelineError(f"no Triton schema in {where}: no serialized ModelConfig in it")
    pool = descriptor_pool.DescriptorPool()
    try:
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(blobs[0]))
        message = pool.FindMessageTypeByName("inference.ModelConfig")
    except Exception as e:  # protobuf's decode and lookup errors are of several types
        raise PipelineError(f"no Triton schema in {where}: {first_line(e)}") from None
    return types.SimpleNamespace(ModelConfig=message_factory.GetMessageClass(message))


def rule_problems(
    cfg: TritonConfig, engines: list[Engine], version_dir: Path, name: str
) -> list[str]:
    """What Triton would refuse or silently do otherwise, judged against the engines."""
    out = []
    for engine in engines:
        want = config(name, engine, cfg["cc_model_filenames"])
        for section in ("input", "output"):
            if cfg[section] != want[section]:
                out.append(f"{section}s differ from engine {engine.fingerprint_id}'s")
        if cfg["max_batch_size"] > max_batch_size(engine):
            out.append(
                f"max_batch_size {cfg['max_batch_size']} is more than engine "
                f"{engine.fingerprint_id}'s profiles allow ({max_batch_size(engine)})"
            )
        if len(cfg["instance_group"][0]["profile"]) != len(engine.profiles):
            out.append(f"not every profile of engine {engine.fingerprint_id} is listed")
    out += _warmup_problems(cfg, engines, version_dir.parent / "warmup")
    for cc, plan in cfg["cc_model_filenames"].items():
        if not (version_dir / plan).is_file():
            out.append(f"cc_model_filenames {cc}: {plan} is not in {version_dir.name}/")
    if (version_dir / "model.plan").exists():
        out.append("model.plan would take any GPU cc_model_filenames does not name")
    return out


def _warmup_problems(cfg: TritonConfig, engines: list[Engine], folder: Path) -> list[str]:
    """Each warm-up input within a profile of every engine, and its file of the right size."""
    import numpy as np

    from pipeline.serve.triton_config import NUMPY_TYPES

    out = []
    for w in cfg.get("model_warmup", []):
        for name, t in w["inputs"].items():
            shape = [w["batch_size"], *t["dims"]] if cfg["max_batch_size"] else t["dims"]
            size = int(np.prod(shape)) * np.dtype(NUMPY_TYPES[t["data_type"]]).itemsize
            path = folder / t["input_data_file"]
            if not path.is_file() or path.stat().st_size != size:
                out.append(
                    f"model_warmup {name}: warmup/{t['input_data_file']} is not {size} bytes"
                )
            for e in engines:
                if not any(_within(shape, p["inputs"][name]) for p in e.profiles):
                    out.append(
                        f"model_warmup {name} {shape} is outside engine {e.fingerprint_id}'s profiles"
                    )
    return out


def _within(shape: list[int], profile: dict[str, list[int]]) -> bool:
    lo, hi = profile["min"], profile["max"]
    return len(shape) == len(lo) and all(a <= d <= b for d, a, b in zip(shape, lo, hi))
