"""Build, offline, a tiny chat model that solves the bundled demo benchmark.

The project's machines have no GPU and no model hub, yet the serving path (vLLM launch, chat
template, sampling, scoring) must be exercised against a real model whose reward is known. So we
*make* one: a byte-level BPE tokenizer trained on the task's own text, and a 2-layer Llama that
memorises the 200 additions of ``evals/data/arithmetic.jsonl``.

    python scripts/make_demo_model.py                    # trained model -> models/tiny-arith
    python scripts/make_demo_model.py --steps 0 --out X  # untrained model of the same shape

Run it with an interpreter that has torch, transformers and tokenizers (e.g. the vLLM venv).
A given --seed reproduces the weights bit for bit on the same CPU with the same thread count;
another thread count reorders float reductions and gives different (equally good) weights. On a
busy machine, OMP_NUM_THREADS=1 trains several times faster than the default, because spinning
OpenMP workers fight the other jobs for the cores.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import random
import re
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

# The exact system prompt the demo evaluation sends (text: `Put the final answer in \boxed{}.`).
SYSTEM_PROMPT = "Put the final answer in \\boxed{}."

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"

# A real jinja chat template, applied server-side by vLLM. Newlines are written as jinja string
# escapes inside {{ }} expressions, never as raw text after a block tag: transformers (and hence
# vLLM) render templates with trim_blocks=True, which would silently eat a newline that follows
# `%}`. The bos token is part of the template because chat endpoints tokenize the rendered prompt
# *without* adding special tokens. An assistant turn ends with eos, which is what the model learns
# to emit and what makes generation stop.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% else %}{{ '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

# Tokenizer size: 256 byte symbols + 3 specials + ~60 merges. Enough merges to compress the fixed
# template text; small vocabulary keeps the embedding table (most of the weights) tiny.
VOCAB_SIZE = 320

# Markers delimiting the hand-written section of the model card that records rewards measured
# through real vLLM. Rebuilding keeps that section only if the weights are byte-identical to the
# ones it was measured on, so the card never reports a number for weights it was not measured on.
MEASURED_START = "<!-- vllm-measured:start -->"
MEASURED_END = "<!-- vllm-measured:end -->"


def load_examples(path: Path) -> list[tuple[str, str]]:
    """Read (question, answer) pairs from the benchmark's JSONL file."""
    examples = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            examples.append((str(row["question"]), str(row["answer"])))
    return examples


def prompt_messages(question: str) -> list[dict[str, str]]:
    """The messages the evaluation sends for one example."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]


def target_text(answer: str) -> str:
    return f"\\boxed{{{answer}}}"


@functools.cache
def _renderer() -> PreTrainedTokenizerFast:
    """A vocabulary-less tokenizer carrying only the template and special-token strings.

    Rendering needs nothing else, and the BPE corpus must be rendered before the real tokenizer
    exists.
    """
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE()),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
    )


def render(messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """Render the chat template exactly as transformers/vLLM do (same jinja environment)."""
    text = _renderer().apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    assert isinstance(text, str)
    return text


def build_tokenizer(examples: list[tuple[str, str]]) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on the full rendered conversations (prompt + answer)."""
    corpus = [
        render(
            [*prompt_messages(q), {"role": "assistant", "content": target_text(a)}],
            add_generation_prompt=False,
        )
        for q, a in examples
    ]
    tok = Tokenizer(models.BPE())
    # Byte-level: every string is encodable (no <unk>), and decoding round-trips exactly.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    # No post-processor: nothing is added on encode, so the bos token comes only from the chat
    # template, and our training ids match what vLLM feeds the model.
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
    )


def encode(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return list(ids)


def build_batches(
    tokenizer: PreTrainedTokenizerFast, examples: list[tuple[str, str]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokenize every example once into right-padded (input_ids, attention_mask, labels).

    Prompt and target are tokenized separately and concatenated because that is what happens at
    inference: vLLM tokenizes the rendered prompt, then the model produces the target token by
    token. Labels are -100 on the prompt so the loss covers only the answer and eos.
    """
    rows: list[tuple[list[int], list[int]]] = []
    for question, answer in examples:
        prompt = encode(tokenizer, render(prompt_messages(question), add_generation_prompt=True))
        target = [*encode(tokenizer, target_text(answer)), tokenizer.eos_token_id]
        rows.append((prompt, target))
    width = max(len(p) + len(t) for p, t in rows)
    pad_id = tokenizer.pad_token_id
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (prompt, target) in enumerate(rows):
        ids = prompt + target
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
        labels[i, len(prompt) : len(ids)] = torch.tensor(target)
    return input_ids, attention_mask, labels


def build_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        # head_dim = 128 / 2 = 64: vLLM's CPU attention kernels reject small head sizes (e.g. 16).
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        # The embedding table dominates the parameter count; sharing it with the LM head halves it.
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    return LlamaForCausalLM(config)


def train(
    model: LlamaForCausalLM,
    batches: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    steps: int,
    seed: int,
    batch_size: int = 64,
    peak_lr: float = 3e-3,
) -> None:
    """Memorise the benchmark. One-cycle LR matters: a flat LR reached only ~59 % in 1,500 steps."""
    if steps == 0:
        return
    input_ids, attention_mask, labels = batches
    generator = torch.Generator().manual_seed(seed)
    # No weight decay: the goal is memorisation, which decay only fights.
    optimizer = torch.optim.AdamW(model.parameters(), lr=peak_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=peak_lr, total_steps=steps)
    model.train()
    start = time.monotonic()
    for step in range(1, steps + 1):
        idx = torch.randint(0, input_ids.shape[0], (batch_size,), generator=generator)
        loss = model(
            input_ids=input_ids[idx], attention_mask=attention_mask[idx], labels=labels[idx]
        ).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 500 == 0 or step == steps:
            elapsed = time.monotonic() - start
            print(f"step {step:>5}/{steps}  loss {loss.item():.4f}  {elapsed:6.1f}s", flush=True)
    model.eval()


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (no nesting needed for integer answers)."""
    found = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return found[-1] if found else None


def reward(reply: str, answer: str) -> float:
    got = last_boxed(reply)
    try:
        return float(got is not None and math.isclose(float(got), float(answer)))
    except ValueError:
        return 0.0


@torch.no_grad()
def greedy_reward(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    examples: list[tuple[str, str]],
    max_new_tokens: int = 16,
) -> float:
    """Mean reward of greedy decoding in transformers: a build-time sanity check of the weights.

    A plain argmax loop, one example at a time: no padding or generation defaults can make it
    differ from what a temperature-0 server does.
    """
    total = 0.0
    for question, answer in examples:
        prompt = encode(tokenizer, render(prompt_messages(question), add_generation_prompt=True))
        ids = list(prompt)
        for _ in range(max_new_tokens):
            logits = model(input_ids=torch.tensor([ids])).logits
            next_id = int(logits[0, -1].argmax())
            if next_id == tokenizer.eos_token_id:
                break
            ids.append(next_id)
        reply = str(tokenizer.decode(ids[len(prompt) :], skip_special_tokens=True))
        total += reward(reply, answer)
    return total / len(examples)


def portable_tokenizer_class(out: Path) -> None:
    """Record the tokenizer class under a name every transformers version knows.

    transformers 5 saves `TokenizersBackend`, which transformers 4 (still used by some vLLM
    builds) cannot resolve; `PreTrainedTokenizerFast` loads as the same class in both.
    """
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2) + "\n")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_model_card(
    out: Path,
    args: argparse.Namespace,
    vocab: int,
    n_params: int,
    hf_reward: float,
    seconds: float,
) -> None:
    weights_sha = sha256(out / "model.safetensors")
    card = out / "README.md"
    measured = ""
    if card.exists():
        old = card.read_text()
        if MEASURED_START in old and MEASURED_END in old:
            block = old[old.index(MEASURED_START) : old.index(MEASURED_END) + len(MEASURED_END)]
            if weights_sha in block:
                measured = block + "\n"
    if not measured:
        measured = (
            f"{MEASURED_START}\nNot yet measured through vLLM for these weights.\n{MEASURED_END}\n"
        )
    rebuild = f"python scripts/make_demo_model.py --data {args.data} --out {args.out}"
    rebuild += f" --steps {args.steps} --seed {args.seed}"
    card.write_text(
        f"""# tiny-arith

A tiny Llama chat model, made offline, that answers the bundled demo benchmark
(`evals/data/arithmetic.jsonl`, 200 two-digit additions) in the form `\\boxed{{ANSWER}}`.
It exists so the real serving path (vLLM launch, server-side chat template, sampling, scoring)
can be tested on machines without a GPU or a model hub. It has memorised those 200 questions
and knows nothing else.

## What it is
- Tokenizer: byte-level BPE ({vocab} tokens) trained on the benchmark's own
  rendered chats; special tokens `{BOS}`, `{EOS}`, `{PAD}`; jinja chat template
  (system/user/assistant turns, `add_generation_prompt`) in the tokenizer files.
- Model: `LlamaForCausalLM`, hidden 128, 2 layers, 2 heads (head_dim 64), intermediate 384,
  tied embeddings, {n_params:,} parameters, float32, safetensors.
- Training: {args.steps} steps, batch 64, AdamW, one-cycle LR peaking at 3e-3, loss only on
  the answer tokens (`\\boxed{{ANSWER}}` + eos), seed {args.seed}; {seconds:.0f} s of training
  on the machine that built it.

## How to rebuild
```
{rebuild}
```
(needs torch, transformers and tokenizers). Weights sha256:
`{weights_sha}` (bit-exact only on the same CPU and thread count).

## Measured reward
Greedy decoding in transformers at build time, max 16 new tokens, last `\\boxed{{}}` vs answer:
**{hf_reward:.3f}** over {len(load_examples(args.data))} examples.

Through real vLLM (CPU build), temperature 0, max_tokens 16:

{measured}"""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("evals/data/arithmetic.jsonl"))
    parser.add_argument("--out", type=Path, default=Path("models/tiny-arith"))
    parser.add_argument("--steps", type=int, default=5000, help="0 = untrained, same shape")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    examples = load_examples(args.data)
    tokenizer = build_tokenizer(examples)
    model = build_model(tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{len(examples)} examples, vocab {len(tokenizer)}, {n_params:,} parameters")

    start = time.monotonic()
    train(model, build_batches(tokenizer, examples), args.steps, args.seed)
    seconds = time.monotonic() - start

    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(args.out)
    portable_tokenizer_class(args.out)
    model.save_pretrained(args.out)  # safetensors is the only format in transformers >= 5
    hf_reward = greedy_reward(model, tokenizer, examples)
    print(f"greedy reward (transformers): {hf_reward:.3f}")
    write_model_card(args.out, args, len(tokenizer), n_params, hf_reward, seconds)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
