"""Tiny random-weight models generated on the spot, so real backends can be tested offline."""

from router.demo_models.demo_set import generate_demo_models, write_demo_router_yaml
from router.demo_models.gguf_llama import (
    CHAT_A_NAME,
    CHAT_B_NAME,
    EMBED_NAME,
    generate_text_models,
    write_bert_gguf,
    write_llama_gguf,
)
from router.demo_models.kcpps_writer import write_kcpps, write_text_kcpps

# whisper_ggml.py and sdxs.py import numpy-heavy helpers; import them from their modules:
#   write_whisper_ggml, write_test_wav, SCRIPTED_TEXT / write_sdxs_gguf

__all__ = [
    # text and embedding models (gguf_llama.py, kcpps_writer.py)
    "CHAT_A_NAME",
    "CHAT_B_NAME",
    "EMBED_NAME",
    "generate_text_models",
    "write_bert_gguf",
    "write_kcpps",
    "write_llama_gguf",
    "write_text_kcpps",
    "generate_demo_models",
    "write_demo_router_yaml",
]
