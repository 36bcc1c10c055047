"""Serving what was built: a Triton Inference Server model repository of the engines."""
