"""Calibration data and results: the batches that calibrate (data), ONNX Runtime's reader
over them (reader), streamed activation ranges (ranges), the cache of results (cache) and
what a family hands the door (result). Enter by data."""
