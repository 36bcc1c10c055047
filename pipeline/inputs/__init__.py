"""The data a model is fed: sample and reference inputs (sample_data, samples,
reference_file), the calibration set (calibration_data), folders of arrays (array_folder),
a factory's (factory), the optimization profiles (profiles, decoder_profiles), what reads
each input (input_roles), a decoder's prompts and runs (prompts, decoder_runs) and the
bytes they take (sizes). Enter by sample_data, or calibration_data for the calibrate
stage's batches."""
