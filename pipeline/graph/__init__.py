"""ONNX graphs as files: reading and checking them (onnx_model), a user's file brought in
(onnx_import; ONNX Runtime's contrib ops written in standard ONNX: ort_contrib, ort_attention),
weights in external data (external_data), inputs frozen at export
(constant_inputs), and the one way this tool runs ONNX Runtime (onnx_runtime). Enter by
onnx_model."""
