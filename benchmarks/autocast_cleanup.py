"""ModelOpt AutoCast (fp16) on the ONNX model zoo's CNNs as the `onnx` wheel ships them,
with ModelOpt's own dead-end sweep and removal of redundant casts and with the linear ones
this tool puts in their place (pipeline/precision/autocast/linear_cleanup.py, linear_casts.py),
in one run: seconds each, the ratio, and whether the two cast graphs are the same bytes.

    python benchmarks/autocast_cleanup.py [--models light_densenet121 light_inception_v2]
                                          [--decoder-layers 30]

--decoder-layers adds a Llama of SmolLM-135M's structure (tests/wild/hf.py: GQA 9/3 heads,
RoPE, its KV cache in and out, that many layers; random weights at a small width: the
passes' cost follows the node count, not the weights' size).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _graph(model: str, work: Path) -> tuple[str, str]:
    """The exported graph of a zoo model (what the calibrate stage casts), and a folder of
    one random batch for AutoCast to measure ranges on."""
    from pipeline.core.layout import Layout
    from pipeline.flow import stages
    from tests.export.test_model_zoo import config

    layout = Layout(work)
    stages.export(config(model, "fp16"), layout)
    graph = layout.export_dir / "model.onnx"
    proto = onnx.load(str(graph), load_external_data=False)
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.random([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
        for i in proto.graph.input
    }
    (work / "calibration").mkdir()
    np.savez(work / "calibration" / "batch.npz", **feeds)  # type: ignore[arg-type]
    return str(graph), str(work / "calibration")


def _decoder(layers: int, work: Path) -> tuple[str, str]:
    """A decoder of SmolLM's structure as transformers exports it, and one batch of its
    prefill-with-past inputs."""
    from tests.wild import hf

    graph = hf.llama(
        work / "model.onnx", layers=layers, heads=9, kv_heads=3, hidden=72, intermediate=192
    )
    feeds = hf.gpt2_feeds(layers, 3, 8, batch=1, seq=4, past=3)
    feeds["position_ids"] = np.arange(3, 7, dtype=np.int64)[None]
    (work / "calibration").mkdir()
    np.savez(work / "calibration" / "batch.npz", **feeds)  # type: ignore[arg-type]
    return str(graph), str(work / "calibration")


def _cast(graph: str, data: str) -> tuple[bytes, float]:
    from modelopt.onnx.autocast import convert_to_mixed_precision

    from pipeline.precision.common.modelopt_log import quiet_modelopt

    start = time.perf_counter()
    with quiet_modelopt():
        model = convert_to_mixed_precision(
            onnx_path=graph, low_precision_type="fp16", calibration_data=data, providers=["cpu"]
        )
    return model.SerializeToString(), time.perf_counter() - start


def main() -> None:
    from pipeline.precision.autocast.linear_cleanup import linear_cleanup

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["light_densenet121", "light_inception_v2"])
    ap.add_argument("--decoder-layers", type=int, default=0, help="add a decoder of N layers")
    args = ap.parse_args()
    print(f"{'model':22} {'ModelOpt s':>10} {'linear s':>9} {'ratio':>6}  same graph")
    names = [
        *args.models,
        *([f"llama_{args.decoder_layers}_layers"] if args.decoder_layers else []),
    ]
    for model in names:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            graph, data = (
                _decoder(args.decoder_layers, work)
                if model.startswith("llama_")
                else _graph(model, work)
            )
            theirs, slow = _cast(graph, data)
            with linear_cleanup():
                ours, fast = _cast(graph, data)
        print(f"{model:22} {slow:10.1f} {fast:9.1f} {fast / slow:6.2f}  {ours == theirs}")


if __name__ == "__main__":
    main()
