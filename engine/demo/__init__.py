"""The demo: a tiny random-weight Qwen3-architecture model built on the spot, no hub needed.

- tiny_model: the builder (runs in the engine interpreter: it needs torch and transformers)
- ensure: the model in the user cache, built once (`ensure_model`)
- chat: the demo's chat and text completions against the OpenAI API
"""
