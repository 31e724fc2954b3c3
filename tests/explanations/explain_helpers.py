"""Tokenizers and tiny models shared by the explain tests, all built in code."""

from __future__ import annotations

import torch
from transformers import BertConfig

from attnpool import AttnPoolForSequenceClassification
from model_helpers import COMMON, tiny_config

PIECES = ["un", "##believ", "##able", "the", "cat", "##s", "sat", "dog", "red", "on", "mat", ",", "!", "a", "big"]


def wordpiece_tokenizer(pair_template: str = "[CLS] $A [SEP] $B:1 [SEP]:1"):
    """A BERT-style WordPiece fast tokenizer whose vocab splits "unbelievable" into un ##believ ##able."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{p: i + 4 for i, p in enumerate(PIECES)}}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair=pair_template, special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]")


def metaspace_tokenizer(split: bool, extra: tuple[str, ...] = ()):
    """A SentencePiece-style Unigram tokenizer: Llama/Mistral's (``split=False``: every piece has word id 0) or
    DeBERTa-v3's (``split=True``); both put the space before a word into its first piece (``\u2581un``).
    ``extra``: more pieces for its vocabulary (Japanese ones, say)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    pieces = ["<unk>", "<s>", "</s>", "\u2581the", "\u2581un", "believ", "able", "\u2581cat", "s", "\u2581sat",
              "\u2581", "1", "2", *extra]
    backend = Tokenizer(models.Unigram([(p, -1.0 - len(p) / 10) for p in pieces], unk_id=0))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=split)
    backend.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1),
                                                                                                ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def bytelevel_tokenizer():
    """A RoBERTa-style byte-level BPE fast tokenizer: a newline is the piece ``Ċ``, a second space ``Ġ``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["the cat sat on the mat", "unbelievable cats"] * 50, trainer)
    backend.post_processor = processors.RobertaProcessing(("</s>", backend.token_to_id("</s>")),
                                                          ("<s>", backend.token_to_id("<s>")), trim_offsets=True,
                                                          add_prefix_space=False)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", sep_token="</s>", cls_token="<s>")


def tiny_model(pooling: str = "attention", num_labels: int = 1, seed: int = 0, **options):
    """A tiny random BERT + pooler + head; classification when ``num_labels > 1`` (labels ``c0``, ``c1``...)."""
    torch.manual_seed(seed)
    names = [f"c{i}" for i in range(num_labels)]
    extra = {}
    if num_labels > 1:
        extra = {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}
    options = {"attn_size": 8, **options} if "attention" in pooling and pooling != "weighted_layer" else options
    model = AttnPoolForSequenceClassification.from_encoder(tiny_config("bert"), pooling=pooling,
                                                           pooling_options=options, num_labels=num_labels, **extra)
    return model.eval()


def key_token_model(key_id: int, num_labels: int = 1):
    """A real attention-pooling model whose pooler puts (almost) all weight on token ``key_id``, and whose output
    depends on that token alone: 1.0 when it is present, 0.0 once it is removed.

    No transformer layers (each hidden state is the embedding of its own token); position and type embeddings are
    zero; the key's embedding ``u`` is orthogonal to every other token's, the scorer gives it +20 and the others
    -20, and the head reads ``u . pooled / H``.
    """
    hidden = COMMON["hidden_size"]
    config = BertConfig(**{**COMMON, "num_hidden_layers": 0}, max_position_embeddings=64)
    torch.manual_seed(0)
    model = AttnPoolForSequenceClassification.from_encoder(config, pooling="attention",
                                                           pooling_options={"attn_size": 4}, num_labels=num_labels)
    embeddings = model.attnpool.encoder.embeddings
    pooler, head = model.attnpool.pooler, model.head.out
    u = torch.tensor([1.0, -1.0] * (hidden // 2))  # zero mean and unit variance: LayerNorm leaves it as it is
    with torch.no_grad():
        embeddings.position_embeddings.weight.zero_()
        embeddings.token_type_embeddings.weight.zero_()
        embeddings.LayerNorm.weight.fill_(1.0)
        embeddings.LayerNorm.bias.zero_()
        table = embeddings.word_embeddings.weight
        table -= torch.outer(table @ u / hidden, u)  # every token orthogonal to u...
        table[key_id] = u  # ...but the key
        pooler.proj.weight.zero_()
        pooler.proj.bias.zero_()
        pooler.proj.weight[0] = 20.0 * u / hidden
        pooler.proj.bias[0] = -10.0  # key: tanh(10) = 1, others: tanh(-10) = -1
        pooler.score.weight.zero_()
        pooler.score.weight[0, 0] = 20.0
        head.weight.zero_()
        head.bias.zero_()
        head.weight[0] = u / hidden
    return model.eval()
