"""The ground layer every other layer stands on: the typed config (config, config_pin,
config_rules, choices), the one mechanism of the stage records (json_record; the records
themselves are pipeline/records/), the metrics files' names, paths (layout), atomic writes
(fileio), errors and the console. Light: the always-run fingerprint stage imports from here,
so nothing here imports ONNX, TensorRT or torch at module level."""
