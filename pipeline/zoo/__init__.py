"""The bundled toy models (the default `model=cnn`, the transformers, the tiny ONNX MLP),
shipped inside the package so an installed trt-pipeline runs in any repository.

Each factory module exposes INPUT_NAMES, OUTPUT_NAMES, DYNAMIC_AXES, build(seed) ->
torch.nn.Module and sample_inputs(dims, rng) -> {name: array}; calibration_batches is
optional. A model of your own follows the same interface (model.factory names it)."""
