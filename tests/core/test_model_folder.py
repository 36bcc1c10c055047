"""A decoder's folder as optimum and ONNX Runtime GenAI write one, read into model.* and
profile.decoder (pipeline/core/model_folder.py), and what is missing said in one line."""

from __future__ import annotations

import json

import pytest

from pipeline.core.errors import PipelineError
from tests.conftest import compose
from tests.wild import hf

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("folders")
    return {
        "optimum": hf.decoder_folder(tmp / "optimum"),
        "genai": hf.decoder_folder(tmp / "genai", genai=True),
    }


def test_an_optimum_folder_gives_the_graph_tokenizer_and_profiles(folders):
    folder = folders["optimum"]
    cfg = compose("model=hf_decoder", f"model.folder={folder}")
    assert cfg.model.onnx_path == str(folder / "model.onnx")
    assert cfg.model.tokenizer == str(folder / "tokenizer.json")
    assert cfg.model.source == str(folder)
    # config.json's max_position_embeddings, halved for the longest prompt
    d = cfg.profile.decoder
    assert (d.max_batch, d.max_input_len, d.max_seq_len) == (1, 128, 256)


def test_a_genai_folder_takes_its_search_length_and_what_is_given_wins(folders):
    folder = folders["genai"]
    assert (folder / "model.onnx.data").is_file()
    d = compose("model=hf_decoder", f"model.folder={folder}").profile.decoder
    assert (d.max_input_len, d.max_seq_len) == (32, 64)  # search.max_length, not 256
    given = "profile.decoder={max_batch: 2, max_input_len: 8, max_seq_len: 16}"
    d = compose("model=hf_decoder", f"model.folder={folder}", given).profile.decoder
    assert (d.max_batch, d.max_input_len, d.max_seq_len) == (2, 8, 16)


def test_what_a_folder_lacks_is_one_line(folders, tmp_path):
    with pytest.raises(PipelineError, match="needs exactly one of .*model.folder"):
        compose("model=hf_decoder")
    with pytest.raises(PipelineError, match="no such folder"):
        compose("model=hf_decoder", f"model.folder={tmp_path / 'nothing'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PipelineError, match="no .onnx file in the folder"):
        compose("model=hf_decoder", f"model.folder={tmp_path / 'empty'}")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model.onnx").write_bytes((folders["optimum"] / "model.onnx").read_bytes())
    with pytest.raises(PipelineError, match="says no sequence length .*give profile.decoder"):
        compose("model=hf_decoder", f"model.folder={bare}")
    (bare / "genai_config.json").write_text(
        json.dumps({"model": {"decoder": {"filename": "x.onnx"}}})
    )
    with pytest.raises(PipelineError, match="names the graph 'x.onnx', which is not a file"):
        compose("model=hf_decoder", f"model.folder={bare}")
