"""The export stage: a torch factory or a user's ONNX file to a checked model.onnx and its
fp32 reference set (export)."""
