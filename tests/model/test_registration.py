import subprocess
import sys


def test_import_attnpool_alone_registers_the_auto_classes(tmp_path):
    # A fresh interpreter: only `import attnpool`, then the Auto classes must know the model type.
    code = (
        "import attnpool, transformers\n"
        "from transformers import BertConfig\n"
        "cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,"
        " intermediate_size=9)\n"
        f"attnpool.AttnPoolForSequenceClassification.from_encoder(cfg).save_pretrained({str(tmp_path)!r})\n"
        f"m = transformers.AutoModelForSequenceClassification.from_pretrained({str(tmp_path)!r})\n"
        "print(type(m).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("AttnPoolForSequenceClassification")
