"""int8/fp8 explicit Q/DQ: ModelOpt's quantization (quantize) or streamed scales
(streamed), SmoothQuant before it (smoothing), what ModelOpt decided (plan) and every graph
the path writes (graphs). Enter by quantize."""
