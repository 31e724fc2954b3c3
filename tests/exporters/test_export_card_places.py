"""What an export's folder says about itself: where its tokenizer is when none was saved beside the graph, a model
folder's own card kept, a run's fold folder taken for its model, and docs/serving.md's snippet run on an export."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnpool.exporters import export_onnx, resolve_model_dir
from attnpool.model import AttnPoolForSequenceClassification
from attnpool.model.card import CARD_FILE
from attnpool.model.card_sections import PLACEHOLDER, TOKENIZER_PLACEHOLDER
from model_helpers import tiny_config, tiny_tokenizer

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


@pytest.fixture(scope="module")
def fold(tmp_path_factory):
    """A run's fold folder: fold_0/model saved with its tokenizer, as training saves it."""
    folder = tmp_path_factory.mktemp("run") / "fold_0"
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2)
    model.save_pretrained(folder / "model", tokenizer=tiny_tokenizer())
    return folder


def _card_code(folder: Path) -> tuple[str, str]:
    text = (folder / CARD_FILE).read_text(encoding="utf-8")
    [code] = re.findall(r"### ONNX Runtime \(this folder\).*?```python\n(.*?)```", text, re.S)
    return text, code


def test_a_graph_exported_without_its_tokenizer_has_a_card_that_loads_it_from_the_model_folder(fold):
    """predict / serve --backend onnx export fold_K/onnx/model.onnx with save_tokenizer=False: the card said the
    folder held the tokenizer, and its snippet loaded it from there (an OSError)."""
    result = export_onnx(fold / "model", fold / "onnx" / "model.onnx", save_tokenizer=False, verify=False)
    assert not result.tokenizer_saved and not (fold / "onnx" / "tokenizer.json").exists()
    text, code = _card_code(fold / "onnx")
    assert "holds the graph and its tokenizer" not in text and "**Tokenizer:** saved in this folder" not in text
    assert "`../model`" in text
    assert f'AutoTokenizer.from_pretrained("{PLACEHOLDER}/../model")' in code
    namespace: dict = {}
    exec(code.replace(PLACEHOLDER, str(fold / "onnx")), namespace)
    assert namespace["logits"].shape == (1, 2)


def test_a_graph_of_a_model_without_any_tokenizer_says_so_and_the_snippet_asks_for_one(tmp_path):
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), num_labels=2)
    model.save_pretrained(tmp_path / "model")  # no tokenizer, and a random encoder: none known
    export_onnx(tmp_path / "model", tmp_path / "serve" / "model.onnx", verify=False)
    text, code = _card_code(tmp_path / "serve")
    assert "holds the graph and its tokenizer" not in text
    assert f'AutoTokenizer.from_pretrained("{TOKENIZER_PLACEHOLDER}")' in code
    tiny_tokenizer().save_pretrained(tmp_path / "tok")
    namespace: dict = {}
    exec(code.replace(TOKENIZER_PLACEHOLDER, str(tmp_path / "tok")).replace(PLACEHOLDER, str(tmp_path / "serve")),
         namespace)
    assert namespace["logits"].shape == (1, 2)


def test_exporting_into_a_saved_model_folder_keeps_its_model_card(fold, tmp_path):
    """The model's card (Auto classes, pipeline, attnpool commands) was replaced by an ONNX-only card."""
    folder = tmp_path / "model"
    AttnPoolForSequenceClassification.from_pretrained(fold / "model").save_pretrained(folder,
                                                                                     tokenizer=tiny_tokenizer())
    before = (folder / CARD_FILE).read_text(encoding="utf-8")
    assert "### Transformers (Auto classes)" in before
    export_onnx(folder, folder / "model.onnx", verify=False)
    assert (folder / "model.onnx").is_file()
    assert (folder / CARD_FILE).read_text(encoding="utf-8") == before


def test_a_runs_fold_folder_is_exported_as_its_model(fold):
    """export --model run/fold_0 said it was neither a model folder nor a run, not where the model is."""
    assert resolve_model_dir(fold) == fold / "model"
    with pytest.raises(ValueError, match=r"fold=1 is for a train run, but .* is one fold's folder .*drop the fold"):
        resolve_model_dir(fold, 1)


def test_the_serving_snippet_of_the_docs_runs_on_an_export_whose_tokenizer_gives_no_token_type_ids(fold, tmp_path):
    """docs/serving.md fed enc[name] for every graph input: KeyError 'token_type_ids' with this tokenizer."""
    serve = tmp_path / "serve"
    result = export_onnx(fold / "model", serve / "model.onnx", with_weights=True, verify=False)
    assert "token_type_ids" in result.input_names
    text = DOCS.read_text(encoding="utf-8")
    [code] = re.findall(r"## Serving it\n\n```python\n(.*?)```", text, re.S)
    assert 'folder = "serve"' in code
    namespace: dict = {}
    exec(code.replace('folder = "serve"', f"folder = {str(serve)!r}"), namespace)
    assert namespace["logits"].shape == (2, 2) and namespace["weights"].shape[0] == 2
