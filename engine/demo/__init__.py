"""The demo: a tiny random-weight Qwen3-architecture model built on the spot, no hub needed."""
