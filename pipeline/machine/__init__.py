"""This machine, as an engine is valid for it: the fingerprint (fingerprint) and the build
settings it reads (build_settings), and the GPU's memory, conditions and CUDA runtime
calls for timing (gpu_memory, gpu_conditions, cudart), the shared CUDA runtime it names
(shared_runtime). Enter by fingerprint."""
