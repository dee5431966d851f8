"""Tiny seeded models of transformers' decoder families, one config each (issue 16).

Shared by survey_families.py (where llmc stands on each family, exported as a new user would)
and generate_past.py (the committed <family>_tiny_past cache exports with their references).
Every family uses the same small sizes; initializer_range 0.1 (as generate.py's models) so that
attention scores are far from uniform and a wrong mask, position or bias shows in the logits.
"""

from __future__ import annotations

# Tiny sizes shared by every family: hidden 64 in 4 heads of 16 (2 KV heads where the family has
# grouped-query attention), 2 layers, MLP 128, vocab 512, 256 positions.
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, POSITIONS = 64, 2, 4, 2, 128, 512, 256


def configs(layers: int = LAYERS) -> dict[str, tuple[str, dict]]:
    """family -> (transformers config class, its arguments), with `layers` decoder layers."""
    llama_like = dict(
        hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=layers,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
        max_position_embeddings=POSITIONS, initializer_range=0.1, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return {
        "llama": ("LlamaConfig", llama_like),
        "mistral_window": ("MistralConfig", dict(llama_like, sliding_window=8)),
        "qwen2": ("Qwen2Config", dict(llama_like)),
        "qwen3": ("Qwen3Config", dict(llama_like, head_dim=HIDDEN // HEADS)),
        "phi3": ("Phi3Config", dict(llama_like)),
        "gemma": ("GemmaConfig", dict(llama_like, head_dim=HIDDEN // HEADS)),
        "gemma2": ("Gemma2Config", dict(llama_like, head_dim=HIDDEN // HEADS, sliding_window=8,
                                        query_pre_attn_scalar=HIDDEN // HEADS,
                                        attn_logit_softcapping=5.0,
                                        final_logit_softcapping=3.0)),
        "gpt2": ("GPT2Config", dict(n_embd=HIDDEN, n_layer=layers, n_head=HEADS, vocab_size=VOCAB,
                                    n_positions=POSITIONS, initializer_range=0.1,
                                    bos_token_id=1, eos_token_id=2)),
        "gptj": ("GPTJConfig", dict(n_embd=HIDDEN, n_layer=layers, n_head=HEADS, rotary_dim=8,
                                    vocab_size=VOCAB, n_positions=POSITIONS,
                                    initializer_range=0.1, bos_token_id=1, eos_token_id=2)),
        "gpt_neox": ("GPTNeoXConfig", dict(hidden_size=HIDDEN, num_hidden_layers=layers,
                                           num_attention_heads=HEADS, intermediate_size=FFN,
                                           rotary_pct=0.25, vocab_size=VOCAB,
                                           max_position_embeddings=POSITIONS,
                                           initializer_range=0.1, bos_token_id=1,
                                           eos_token_id=2)),
        "opt": ("OPTConfig", dict(hidden_size=HIDDEN, num_hidden_layers=layers, ffn_dim=FFN,
                                  num_attention_heads=HEADS, vocab_size=VOCAB,
                                  max_position_embeddings=POSITIONS, word_embed_proj_dim=HIDDEN,
                                  init_std=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)),
        "falcon": ("FalconConfig", dict(hidden_size=HIDDEN, num_hidden_layers=layers,
                                        num_attention_heads=HEADS, vocab_size=VOCAB,
                                        initializer_range=0.1, bos_token_id=1, eos_token_id=2)),
        "bloom": ("BloomConfig", dict(hidden_size=HIDDEN, n_layer=layers, n_head=HEADS,
                                      vocab_size=VOCAB, initializer_range=0.1, bos_token_id=1,
                                      eos_token_id=2, pad_token_id=0)),
        "gpt_bigcode": ("GPTBigCodeConfig", dict(n_embd=HIDDEN, n_layer=layers, n_head=HEADS,
                                                 vocab_size=VOCAB, n_positions=POSITIONS,
                                                 multi_query=True, initializer_range=0.1,
                                                 bos_token_id=1, eos_token_id=2)),
        "olmo": ("OlmoConfig", dict(llama_like)),
        "granite": ("GraniteConfig", dict(llama_like, embedding_multiplier=12.0,
                                          residual_multiplier=0.22, attention_multiplier=0.0625,
                                          logits_scaling=8.0)),
        "stablelm": ("StableLmConfig", dict(llama_like, partial_rotary_factor=0.25)),
        "mixtral": ("MixtralConfig", dict(llama_like, num_local_experts=4,
                                          num_experts_per_tok=2)),
    }


def build(family: str, attn_implementation: str = "eager", layers: int = LAYERS, **overrides):
    """The family's model with seeded random weights (the same weights on every call), its
    config changed by `overrides`."""
    import torch
    import transformers

    class_name, kwargs = configs(layers)[family]
    kwargs = dict(kwargs, **overrides)
    torch.manual_seed(7)
    config = getattr(transformers, class_name)(**kwargs, use_cache=False,
                                               attn_implementation=attn_implementation)
    return transformers.AutoModelForCausalLM.from_config(config)
