"""int4 weight-only (int4_awq, int4_rtn): ModelOpt's quantization or the streamed one
(quantize; awq, rtn), every graph the path writes (graphs) and int8 weights as the step
between int4 and fp16 (int8_weights). Enter by quantize."""
