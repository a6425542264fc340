"""Build a tiny Llama model that vLLM's CPU build can serve; nothing comes from a hub.

Random weights (transformers ``LlamaConfig``) and a byte-level BPE tokenizer trained here
on generated sentences. Run with the python that has vLLM (it brings transformers and
tokenizers):

    $HEADROOM_VLLM_PYTHON tests/helpers/vllm_model.py OUT_DIR

The tokenizer gives one token per word of ``WORDS`` (each is in the vocabulary), so a test
can build prompts of an exact token length: ``" ".join(words)``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

# Plain lowercase words; each becomes one token (BPE merges them whole: they are frequent).
WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
    "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "red",
    "green", "blue", "black", "white", "orange", "purple", "yellow", "brown", "silver",
    "gold", "copper", "iron", "stone", "river", "lake", "ocean", "mountain", "valley",
    "forest", "desert", "island", "bridge", "tower", "castle", "garden",
)

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def server_env(base: dict[str, str]) -> dict[str, str]:
    """Environment of a vLLM CPU server in the tests (see shared/notes/this-machine.md)."""
    return {
        **base,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
        "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_SERVER_DEV_MODE": "1",  # for POST /reset_prefix_cache
    }


def kv_events_config(kv_port: int, replay_port: int) -> str:
    """--kv-events-config binding both endpoints (tcp://*: binds; a host: connects out)."""
    return (f'{{"enable_kv_cache_events": true, "publisher": "zmq", '
            f'"endpoint": "tcp://*:{kv_port}", "replay_endpoint": "tcp://*:{replay_port}"}}')


def _corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(n)]


def build_tiny_model(out: Path) -> Path:
    """Write config, safetensors weights and tokenizer files into ``out``; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(4000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        num_attention_heads=4,  # head size 32: the CPU attention needs at least 32
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=256,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return out


if __name__ == "__main__":
    print(build_tiny_model(Path(sys.argv[1])))
