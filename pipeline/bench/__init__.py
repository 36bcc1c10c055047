"""The benchmark stage's measuring: every backend behind one runner contract (runner;
ort_runner, torch_runner, trt_runner), the trtexec-style loop (measure_loop, cuda_timing), the
shapes and their memory (bench_shapes, bench_sizes), the conditions a run saw
(conditions) and a decoder's two phases (decoder_bench). Enter by benchmark."""
