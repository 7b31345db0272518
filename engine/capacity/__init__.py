"""Capacity planning: weights from safetensors headers, KV cache from config.json, per device.

plan(load_profile("910b-32b"), "/models/Qwen3-32B") -> Plan
"""

from engine.capacity.kv import Capacity, KVLayout, capacity, layout
from engine.capacity.model_config import ModelShape, read_config
from engine.capacity.planner import NO_FIT, OK, TIGHT, Plan, TPOption, plan
from engine.capacity.safetensors import Weights, weights

__all__ = [
    "Capacity",
    "KVLayout",
    "ModelShape",
    "NO_FIT",
    "OK",
    "Plan",
    "TIGHT",
    "TPOption",
    "Weights",
    "capacity",
    "layout",
    "plan",
    "read_config",
    "weights",
]
