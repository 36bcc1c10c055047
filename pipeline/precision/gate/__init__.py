"""Judging a transformed graph against fp32: the figures (accuracy) per output task
(tasks), the runs (judging, with emulate where ONNX Runtime's CPU build has no kernel),
the held-out verdict (verdict), the hardest batches first (subset_first), the figures a
batch at a time (output_figures) and how a search judges its graphs (evaluator). Enter by
judging."""
