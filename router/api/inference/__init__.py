"""The client surfaces: OpenAI, Anthropic, Ollama, Kobold, llama-server, vLLM, A1111, sd-server,
ComfyUI, speech and realtime. Each reads its request, hands it to the inference pipeline
(router/inference: parse -> place -> lease -> forward -> record, or `forward_to` one known
runtime) and renders what comes back; the plain forwarding route (`proxy`) is the pipeline's
`forward` itself.

`HANDLERS` merges the modules' tables (handler name -> coroutine; the names are the `handler`
field of router/classify/table.py's route table). The other API packages import this face only.
"""

from router.api.inference import (
    anthropic,
    comfy,
    images,
    models,
    ollama,
    ollama_gen,
    realtime,
    responses,
    vllm,
    voice,
)
from router.api.inference.comfy import comfy_context
from router.api.inference.images import images_context
from router.api.inference.ollama import ollama_context
from router.api.inference.responses import responses_context
from router.edge import Handler
from router.inference import forward

HANDLERS: dict[str, Handler] = {
    **anthropic.HANDLERS,
    **models.HANDLERS,
    **ollama.HANDLERS,
    **ollama_gen.HANDLERS,
    "proxy": forward,
    **responses.HANDLERS,
    **realtime.HANDLERS,
    **vllm.HANDLERS,
    **images.HANDLERS,
    **voice.HANDLERS,
    **comfy.HANDLERS,
}

__all__ = [
    "HANDLERS",
    "comfy_context",
    "images_context",
    "ollama_context",
    "responses_context",
]
