"""Calibration results: ONNX Runtime's reader over the calibration batches (reader; the
batches themselves are pipeline/inputs/calibration_data.py), streamed activation ranges
(ranges), the cache of results (cache) and what a family hands the door (result). Enter by
cache."""
