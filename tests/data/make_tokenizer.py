"""Build the tiny Llama's tokenizer (tests/data/tiny-llama) from text shipped in this repository.

A byte-level BPE with the model's 1024-token vocabulary, trained on autotune's own prompts file, with a small
chat template so the chat path (``messages`` prompts) is exercised too. Deterministic: re-running it rewrites
the same files. Run from the repository root:

    .venv/bin/python tests/data/make_tokenizer.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "tests" / "data" / "tiny-llama"
CORPUS = ROOT / "autotune" / "data" / "prompts.jsonl"
SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: the model config's bos_token_id=1, eos_token_id=2
# A minimal chat format: one header line per turn, the assistant's header left open for generation.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus_lines() -> list[str]:
    lines = []
    for row in map(json.loads, CORPUS.read_text().splitlines()):
        if "prompt" in row:
            lines.append(row["prompt"])
        for message in row.get("messages", []):
            lines.append(message["content"])
    return lines


def main() -> None:
    config = json.loads((MODEL_DIR / "config.json").read_text())
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=config["vocab_size"], special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus_lines(), trainer=trainer)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    assert tokenizer.get_vocab_size() <= config["vocab_size"], tokenizer.get_vocab_size()
    tokenizer.save(str(MODEL_DIR / "tokenizer.json"))
    (MODEL_DIR / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": False, "add_eos_token": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    print(f"wrote {MODEL_DIR}/tokenizer.json ({tokenizer.get_vocab_size()} tokens) and tokenizer_config.json")


if __name__ == "__main__":
    main()
