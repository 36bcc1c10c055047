"""What TensorRT did, read after a build: its log (buildlog), how much it fused (fusion),
the precision each layer runs at (node_precision, engine_layers, engine_inspector, plan_dump),
the build gates (gates) and two builds compared (diff, `trt-pipeline diff`). Enter by
buildlog for a build's log, gates for the quality gates, diff for a comparison."""
