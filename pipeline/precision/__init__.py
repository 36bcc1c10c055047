"""The calibrate stage's precision transforms, one door: transform. Behind it, a room per
family (autocast: fp16/bf16; qdq: int8/fp8; int4: weight-only; mixed: precision=auto), the
searches that keep nodes out (fallback), the judging against fp32 (gate), the calibration
results and cache (calibration) and what the families share (common); after the family,
finish, tables (embedding tables) and gemm_flops. Enter by transform."""
