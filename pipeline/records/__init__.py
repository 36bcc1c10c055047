"""The stage records: one module per JSON file a stage writes and later stages, the report
and other tools read, each a TypedDict named `<Stage>Record` with its reader and writer
(core/json_record.py checks a file's fields on the way in). Enter by the stage's module:
fingerprint_file, export_file, calibration_file, build_file (manifest.json and the build
stage's return), inspect_file (report.json), benchmark_file, package_file, and summary_file
(metrics/summary.json across stages). Kept free of heavy imports: the fingerprint stage,
run on every `dvc repro`, reads its record from here."""
