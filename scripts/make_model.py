"""Make a small Llama model with random weights and a tiny tokenizer, for machines that cannot download one.

    python3 scripts/make_model.py /tmp/launchlab-model            # for transformers serve
    python3 scripts/make_model.py --small /tmp/launchlab-vllm-model   # for vLLM

The default: about 0.85 B parameters (hidden 2048, 16 layers, 16 heads, 4 KV heads, vocab 32000), 1.7 GB in
bf16: big enough for the KV-cache sizing of `transformers serve` to matter, small enough to write in a minute.
`--small`: hidden 1024, 8 layers, 16 heads, 4 KV heads, 0.3 GiB in bf16, the model vLLM's numbers in
the examples were measured with (its break-even `--gpu-memory-utilization` on an H200 is about 0.0055,
so the failing side of a vLLM experiment is reachable). The weights are random: the model serves, it does not
say anything sensible.
"""

import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SIZES = {
    "default": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16),
    "small": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8),
}


def main(folder: str, size: str) -> None:
    corpus = ["a small corpus so that the tokenizer has something to learn from " * 10,
              "launchlab makes controlled experiments on inference server launches " * 10]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    config = LlamaConfig(vocab_size=32000, num_attention_heads=16, num_key_value_heads=4,
                         max_position_embeddings=4096, **SIZES[size])
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    print(f"{folder}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters ({size})")


if __name__ == "__main__":
    args = sys.argv[1:]
    small = "--small" in args
    main(next(a for a in args if a != "--small"), "small" if small else "default")
