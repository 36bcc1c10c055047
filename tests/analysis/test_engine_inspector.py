"""EngineInspector JSON in both documented layouts, and loading a real engine on a GPU.

The TensorRT 10 fixture follows the inspector output shipped with TensorRT's own
engine explorer (trex examples: `Layers` with `Format/Datatype`, `Bindings` as names,
`Metadata` joined by \\x1e); the TensorRT 11 fixture follows the 10.x→11.x migration
guide (`I/O Tensors` objects) with layers as TensorRT-RTX 1.7 prints them in a
DETAILED build (`Datatype` and `Format` apart, `Metadata` joined by \\x1f)."""

import pytest

from pipeline.analysis import engine_inspector, engine_layers
from pipeline.core.errors import PipelineError
from pipeline.engine import backend
from pipeline.flow import stages

TRT10 = {
    "Layers": [
        {
            "Name": "Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1",
            "LayerType": "Reformat",
            "Inputs": [
                {
                    "Name": "input.1",
                    "Location": "Device",
                    "Dimensions": [32, 3, 224, 224],
                    "Format/Datatype": "Row major linear FP32",
                }
            ],
            "Outputs": [
                {
                    "Name": "Reformatted Input Tensor 0 to Conv_0 + Relu_1",
                    "Location": "Device",
                    "Dimensions": [32, 3, 224, 224],
                    "Format/Datatype": "Channel major FP16 format where channel % 4 == 0",
                }
            ],
            "ParameterType": "Reformat",
            "Origin": "REFORMAT",
            "TacticValue": "0x0000000000000000",
        },
        {
            "Name": "Conv_0 + Relu_1",
            "LayerType": "CaskConvolution",
            "Inputs": [
                {
                    "Name": "Reformatted Input Tensor 0 to Conv_0 + Relu_1",
                    "Location": "Device",
                    "Dimensions": [32, 3, 224, 224],
                    "Format/Datatype": "Channel major FP16 format where channel % 4 == 0",
                }
            ],
            "Outputs": [
                {
                    "Name": "onnx::MaxPool_125",
                    "Location": "Device",
                    "Dimensions": [32, 64, 112, 112],
                    "Format/Datatype": "Channel major FP16 format where channel % 8 == 0",
                }
            ],
            "ParameterType": "Convolution",
            "Kernel": [7, 7],
            "OutMaps": 64,
            "Weights": {"Type": "Half", "Count": 9408},
            "Bias": {"Type": "Half", "Count": 64},
            "Metadata": "[ONNX Layer: Conv_0]\x1e[ONNX Layer: Relu_1]",
            "TacticName": "sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize256x64x32",
            "TacticValue": "0xe2222883a6602489",
        },
        {
            "Name": "Reformatting CopyNode for Output Tensor 0 to reshape_after_Gemm_48",
            "LayerType": "Reformat",
            "Inputs": [
                {
                    "Name": "Reformatted Output Tensor 0 to reshape_after_Gemm_48",
                    "Location": "Device",
                    "Dimensions": [32, 1000],
                    "Format/Datatype": "Row major linear FP16 format",
                }
            ],
            "Outputs": [
                {
                    "Name": "191",
                    "Location": "Device",
                    "Dimensions": [32, 1000],
                    "Format/Datatype": "Row major linear FP32",
                }
            ],
            "ParameterType": "Reformat",
            "Origin": "REFORMAT",
            "TacticValue": "0x00000000000003e8",
        },
    ],
    "Bindings": ["input.1", "191"],
}

TRT11 = {
    "Layers": [
        {
            "Name": "__myl_Move_myl0_1",
            "LayerType": "kgen",
            "Inputs": [
                {
                    "Name": "images",
                    "Dimensions": [-1, 3, 32, 32],
                    "Strides": [3072, 1024, 32, 1],
                    "StrideOrder": [3, 2, 1, 0],
                    "Datatype": "Float",
                    "Format": "(Linear) Row major linear format",
                }
            ],
            "Constants": [],
            "Outputs": [
                {
                    "Name": "t0_myl0",
                    "Dimensions": [-1, 3, 32, 32],
                    "Strides": [3072, 1, 96, 3],
                    "StrideOrder": [3, 0, 2, 1],
                    "Datatype": "Half",
                    "Format": "(NHWC) Channel major format",
                }
            ],
            "TacticName": "__myl_Move_0x1f15001d5bcf911b570830a90a119c93",
            "StreamId": 0,
            "Metadata": "",
        },
        {
            "Name": "/features/features.0/features.0.0/Conv_myl0_2",
            "LayerType": "correlation",
            "Inputs": [
                {
                    "Name": "t0_myl0",
                    "Dimensions": [-1, 3, 32, 32],
                    "Strides": [3072, 1, 96, 3],
                    "StrideOrder": [3, 0, 2, 1],
                    "Datatype": "Half",
                    "Format": "(NHWC) Channel major format",
                }
            ],
            "Constants": [],
            "Outputs": [
                {
                    "Name": "logits",
                    "Dimensions": [-1, 16, 32, 32],
                    "Strides": [16384, 1, 512, 16],
                    "StrideOrder": [3, 0, 2, 1],
                    "Datatype": "Float",
                    "Format": "(NHWC) Channel major format",
                }
            ],
            "TacticName": "__myelin_CASK_STUB",
            "StreamId": 0,
            "Metadata": "[ONNX Layer: /features/features.0/features.0.0/Conv]\x1f"
            "[ONNX Layer: /features/features.0/features.0.2/Relu]",
        },
    ],
    "I/O Tensors": [
        {
            "Name": "input_0",
            "IOMode": "Input",
            "DataType": "Float",
            "Dimensions": [1, 3, 224, 224],
            "Location": "Device",
            "IsShapeInferenceIO": False,
            "ProfileInfo": [
                {
                    "MinShape": [1, 3, 224, 224],
                    "OptShape": [1, 3, 224, 224],
                    "MaxShape": [1, 3, 224, 224],
                    "Format": "Row major linear FP32 format (kLINEAR)",
                }
            ],
        },
        {
            "Name": "output_0",
            "IOMode": "Output",
            "DataType": "Float",
            "Dimensions": [1, 1000],
            "Location": "Device",
            "IsShapeInferenceIO": False,
        },
    ],
}


def test_tensorrt10_layout():
    parsed = engine_layers.from_inspector_json(TRT10)
    assert parsed["layout"] == "TensorRT 10 (Bindings)"
    reformat, conv, out = parsed["layers"]
    assert reformat["precision"] == "fp32" and reformat["outputs"][0]["dtype"] == "fp16"
    assert conv["type"] == "CaskConvolution" and conv["precision"] == "fp16"
    assert conv["onnx_nodes"] == ["Conv_0", "Relu_1"] and conv["tactic"].startswith(
        "sm80_xmma_fprop"
    )
    assert conv["outputs"][0] == {
        "name": "onnx::MaxPool_125",
        "dtype": "fp16",
        "shape": [32, 64, 112, 112],
        "format": "Channel major FP16 format where channel % 8 == 0",
    }
    assert (
        out["precision"] == "fp16" and out["tactic"] == "0x00000000000003e8"
    )  # no TacticName: the value
    assert parsed["io_tensors"] == [
        {"name": "input.1", "mode": None, "dtype": "unknown", "shape": []},
        {"name": "191", "mode": None, "dtype": "unknown", "shape": []},
    ]


def test_tensorrt11_layout():
    parsed = engine_layers.from_inspector_json(TRT11)
    assert parsed["layout"] == "TensorRT 11 (I/O Tensors)"
    move, conv = parsed["layers"]
    assert (
        move["precision"] == "fp32"
        and move["outputs"][0]["dtype"] == "fp16"
        and move["onnx_nodes"] == []
    )
    assert (
        conv["precision"] == "fp16"
        and conv["type"] == "correlation"
        and conv["tactic"] == "__myelin_CASK_STUB"
    )
    assert conv["onnx_nodes"] == [
        "/features/features.0/features.0.0/Conv",
        "/features/features.0/features.0.2/Relu",
    ]
    assert conv["inputs"][0]["format"] == "(NHWC) Channel major format"
    assert parsed["io_tensors"] == [
        {"name": "input_0", "mode": "Input", "dtype": "fp32", "shape": [1, 3, 224, 224]},
        {"name": "output_0", "mode": "Output", "dtype": "fp32", "shape": [1, 1000]},
    ]
    assert engine_layers.histogram(parsed["layers"]) == {"fp16": 1, "fp32": 1}


def test_layer_names_only_and_bad_input():
    parsed = engine_layers.from_inspector_json(
        {"Layers": ["conv1 + relu1", "fc"], "Bindings": ["x", "y"]}
    )
    assert [l["name"] for l in parsed["layers"]] == ["conv1 + relu1", "fc"]
    assert "ProfilingVerbosity.DETAILED" in parsed["layout"]
    with pytest.raises(PipelineError, match="no 'Layers' list"):
        engine_layers.from_inspector_json({"Bindings": []})


def test_dtype_words_of_every_layout():
    cases = {
        "Row major linear FP32": "fp32",
        "Channel major FP16 format where channel % 8 == 0": "fp16",
        "Half": "fp16",
        "Float": "fp32",
        "BFloat16": "bf16",
        "Four wide channel vectorized row major Int8 format": "int8",
        "FP8": "fp8",
        "Int64": "int64",
        "Row major linear BOOL": "bool",
        "half": "fp16",
        "bf16": "bf16",
    }
    assert {k: engine_layers.dtype(k) for k in cases} == cases


def test_why_the_inspector_cannot_run_here():
    assert "no GPU" in backend.why_engine_cannot_run({"gpu": None, "gpu_probe": "NVML unavailable"})
    hopper = {
        "gpu": {"name": "NVIDIA H100", "compute_capability": "9.0"},
        "trt_flavour": "tensorrt_rtx",
    }
    assert "compute capability 9.0" in backend.why_engine_cannot_run(hopper)
    assert backend.why_engine_cannot_run({**hopper, "trt_flavour": "tensorrt"}) is None
    ada = {"gpu": {"name": "RTX 4090", "compute_capability": "8.9"}, "trt_flavour": "tensorrt_rtx"}
    assert backend.why_engine_cannot_run(ada) is None


def test_inspect_says_why_where_no_gpu_can_load(built_cnn, gpu_available):
    _, layout = built_cnn
    fp = stages.read_fingerprint(layout)
    why = backend.why_engine_cannot_run(fp)
    if why is None:
        pytest.skip("this machine can load the engine; the gpu test covers it")
    result = engine_inspector.inspect(layout.engine_dir(fp["id"]) / "engine.plan", fp)
    assert result == {"available": False, "reason": why}


@pytest.mark.gpu
def test_engine_inspector_on_a_gpu(requires_trt, built_transformer_detailed):
    """Deserialize a real DETAILED engine and read every layer back from the inspector."""
    _, layout = built_transformer_detailed
    fp = stages.read_fingerprint(layout)
    why = backend.why_engine_cannot_run(fp)
    if why:
        pytest.skip(why)
    result = engine_inspector.inspect(layout.engine_dir(fp["id"]) / "engine.plan", fp)
    assert result["available"], result.get("reason")
    assert result["layers"] and all(l["type"] for l in result["layers"])
    assert {t["name"] for t in result["io_tensors"]} >= {"input_ids", "attention_mask", "logits"}
    assert any(l["onnx_nodes"] for l in result["layers"])
