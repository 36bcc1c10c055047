"""An ONNX model whose weights pass protobuf's 2 GB and whose compute is tiny: a Gather over
a large embedding table and a small MatMul, the weights written straight into external-data
files block by block (never a whole tensor in memory, never one protobuf message of the
model). For tests of every stage past 2 GB on a 2-core machine.

    python -m models.large_table OUT_FOLDER [--mib 2200] [--files 1]

files=1: the table in one external file (onnx.save's all_tensors_to_one_file). files=N:
the table split by rows into N tensors, one file each (how torch.onnx.export writes a large
model), each gathered at ids mod its rows and summed. Either way the ids must lie in
[0, rows_per_file(...)) (the model's int_high)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN = 512
OUT_FEATURES = 64  # ModelOpt leaves MatMuls narrower than 16 unquantized
BLOCK_ROWS = 8192  # 16 MiB of fp32 rows written at a time


def rows_per_file(mib: int, files: int) -> int:
    total_rows = (mib << 20) // (HIDDEN * 4)
    return max(1, total_rows // files)


def _write_rows(f, rows: int, rng: np.random.Generator) -> None:
    for start in range(0, rows, BLOCK_ROWS):
        n = min(BLOCK_ROWS, rows - start)
        block = rng.standard_normal((n, HIDDEN), dtype=np.float32) * np.float32(0.05)
        f.write(block.tobytes())


def _external(tensor: Any, location: str, offset: int, length: int) -> None:
    # onnx's set_external_data wants the bytes in raw_data first: the entries by hand
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)


def write(folder: Path, mib: int = 2200, files: int = 1, seed: int = 0) -> Path:
    """Write folder/model.onnx and its external data; the model's path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    rows = rows_per_file(mib, files)
    rng = np.random.default_rng(seed)
    tables = []
    for i in range(files):
        name = f"table_{i}"
        location = "model.onnx.data" if files == 1 else f"{name}.bin"
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[rows, HIDDEN])
        t.data_location = TensorProto.EXTERNAL
        with open(folder / location, "wb") as f:
            _write_rows(f, rows, rng)
        _external(t, location, 0, rows * HIDDEN * 4)
        tables.append(t)
    w = rng.standard_normal((HIDDEN, OUT_FEATURES), dtype=np.float32) * np.float32(0.1)
    inits = [*tables, numpy_helper.from_array(w, "proj")]
    nodes = [
        helper.make_node("Gather", [t.name, "ids"], [f"emb_{i}"], name=f"gather_{i}", axis=0)
        for i, t in enumerate(tables)
    ]
    summed = "emb_0"
    if files > 1:
        nodes.append(helper.make_node("Sum", [f"emb_{i}" for i in range(files)], ["emb"], "sum"))
        summed = "emb"
    nodes.append(helper.make_node("MatMul", [summed, "proj"], ["scores"], name="proj_matmul"))
    graph = helper.make_graph(
        nodes,
        "large_table",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [
            helper.make_tensor_value_info(
                "scores", TensorProto.FLOAT, ["batch", "seq", OUT_FEATURES]
            )
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    # the graph alone (the tables are already external): a few KiB
    path.write_bytes(model.SerializeToString())
    onnx.checker.check_model(str(path))
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--mib", type=int, default=2200)
    ap.add_argument("--files", type=int, default=1)
    a = ap.parse_args()
    print(write(a.out, a.mib, a.files))
