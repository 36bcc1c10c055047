"""A runtime failing on the user's model in the benchmark (ONNX Runtime's Fail on an
integer Mod by zero of random inputs) is one line naming the runtime and the way out, not
a traceback out of the stage. Real export, TensorRT-RTX build and ONNX Runtime."""

import onnx
import pytest
from onnx import TensorProto, helper

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from tests.conftest import compose


def test_a_runtime_failure_in_the_benchmark_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    (tmp_path / "model").mkdir()
    shape = ["batch", 8]
    graph = helper.make_graph(
        [helper.make_node("Mod", ["x", "d"], ["y"])],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64, shape) for n in ("x", "d")],
        [helper.make_tensor_value_info("y", TensorProto.INT64, shape)],
    )
    onnx.save(helper.make_model(graph), tmp_path / "model" / "mod.onnx")
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={tmp_path / 'model' / 'mod.onnx'}",
        f"model.source={tmp_path / 'model'}",
        "build.backend=tensorrt_rtx",
        "benchmark.warmup_s=0.02",
        "benchmark.min_duration_s=0.05",
        "benchmark.min_iterations=5",
        # the reference draws (another seed) hold no zero divisor at this size; the benchmark's do
        "model.sample_dims.batch=4",
    )
    with pytest.raises(PipelineError) as e:
        stages.run_all(cfg, Layout(tmp_path / "run"), lambda name, result: None)
    message = str(e.value)
    assert message.startswith("benchmark: ONNX Runtime") and "modulo by zero" in message
    assert "\n" not in message and "model.input_ranges" in message
