"""The ground layer every other layer stands on: the typed config (config, config_pin,
config_rules, choices), the stage records' files (export_file, calibration_file,
report_file, summary_file, metrics_files), paths (layout), atomic writes (fileio), errors
and the console. Light: the always-run fingerprint stage imports from here, so nothing
here imports ONNX, TensorRT or torch at module level."""
