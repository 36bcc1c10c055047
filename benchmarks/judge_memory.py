"""The accuracy gate's memory: the peak RSS accuracy.compare adds over its inputs, on the
outputs of a decoder of SmolLM-135M's shape (49,152-token logits and a 30-layer cache,
prefill and decode steps), in one run. The outputs are synthetic (random values of the
decoder's shapes; the candidate the reference plus noise): the judge's arrays depend on
the shapes, not on the values.

    python benchmarks/judge_memory.py [--prompts 8] [--steps 4]

Exit status 1 if the peak over the inputs' bytes is above --max-ratio (2.5)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VOCAB, LAYERS, KV_HEADS, HEAD = 49152, 30, 3, 64


def decoder_outputs(prompts: int, steps: int, prompt_len: int = 16) -> list[dict]:
    """Each prompt's prefill batch, then `steps` decode batches, as the reference holds them."""
    import numpy as np

    rng = np.random.default_rng(0)
    out = []
    for _ in range(prompts):
        for past, new in [(0, prompt_len), *((prompt_len + i, 1) for i in range(steps))]:
            batch = {"logits": rng.standard_normal((1, new, VOCAB), dtype=np.float32)}
            for layer in range(LAYERS):
                for kind in ("key", "value"):
                    shape = (1, KV_HEADS, past + new, HEAD)
                    batch[f"present.{layer}.{kind}"] = rng.standard_normal(shape, dtype=np.float32)
            out.append(batch)
    return out


def main() -> int:
    import numpy as np
    import psutil

    from pipeline.precision.gate import accuracy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-ratio", type=float, default=2.5)
    args = ap.parse_args()
    reference = decoder_outputs(args.prompts, args.steps)
    rng = np.random.default_rng(1)
    candidate = [
        {k: v + rng.normal(0, 0.01, v.shape).astype(np.float32) for k, v in b.items()}
        for b in reference
    ]
    inputs = sum(v.nbytes for b in reference + candidate for v in b.values())
    proc, peak, done = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.002)

    base = proc.memory_info().rss
    threading.Thread(target=sample, daemon=True).start()
    started = time.perf_counter()
    accuracy.compare(reference, candidate, "auto")
    seconds = time.perf_counter() - started
    done.set()
    added = max(peak[0] - base, 0)
    row = {
        "batches": len(reference),
        "inputs_mib": round(inputs / 2**20),
        "compare_s": round(seconds, 2),
        "peak_added_mib": round(added / 2**20),
        "peak_x_inputs": round(added / inputs, 2),
    }
    print(json.dumps(row))
    return 0 if added <= args.max_ratio * inputs else 1


if __name__ == "__main__":
    sys.exit(main())
