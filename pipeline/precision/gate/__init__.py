"""Judging a transformed graph against fp32: the figures (accuracy) per output task
(tasks), the runs (judging, with emulate where ONNX Runtime's CPU build has no kernel),
the held-out verdict (verdict) and the hardest batches first (subset_first). Enter by
judging."""
