"""fp16/bf16 through ModelOpt AutoCast, behind the calibration cache (cast), streamed in
bounded memory (streamed), with subgraph captures named apart (captures) and its dead-end
sweep in linear time (linear_cleanup). Enter by cast."""
