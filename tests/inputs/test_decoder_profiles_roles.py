"""profile.decoder on graphs it cannot size: each case one line saying what to give."""

from __future__ import annotations

import pytest

from pipeline.core.config import DecoderProfile
from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.inputs import decoder_profiles

NUMBERS = DecoderProfile(max_batch=1, max_input_len=8, max_seq_len=32)
IDS = TensorSpec("input_ids", "int64", ("batch", "seq"))
KV = TensorSpec("past.0.key", "float32", ("batch", 4, "past", 16))


@pytest.mark.parametrize(
    "inputs, numbers, line",
    [
        ([IDS], NUMBERS, "profile.decoder is for a decoder with a KV cache"),
        ([IDS, KV], DecoderProfile(1, 32, 32), "needs max_batch >= 1 and 1 <= max_input_len <"),
        (
            [IDS, TensorSpec("past.0.value", "float32", ("batch", "heads", "past", 16))],
            NUMBERS,
            "input 'past.0.value' has symbolic heads or head size",
        ),
        (
            [IDS, KV, TensorSpec("pixel_values", "float32", ("batch", 3, "h", "w"))],
            NUMBERS,
            "input 'pixel_values' ['batch', 3, 'h', 'w'] is none of them",
        ),
    ],
)
def test_what_the_decoder_numbers_cannot_size_is_one_line(inputs, numbers, line):
    with pytest.raises(PipelineError) as e:
        decoder_profiles.profiles(numbers, inputs)
    assert line in str(e.value) and "\n" not in str(e.value)


def test_a_flag_input_keeps_its_fixed_shape():
    flag = TensorSpec("use_cache_branch", "bool", (1,))
    prefill, decode = decoder_profiles.profiles(NUMBERS, [IDS, KV, flag])
    assert prefill["inputs"]["use_cache_branch"] == {"min": [1], "opt": [1], "max": [1]}
    assert prefill["inputs"]["past.0.key"]["max"] == [1, 4, 24, 16]
    assert decode["inputs"]["input_ids"] == {"min": [1, 1], "opt": [1, 1], "max": [1, 1]}
