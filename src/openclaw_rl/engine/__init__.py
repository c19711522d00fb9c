"""Inference engines: what serving, the judge and the trainer need from a model.

`Engine` is the contract a backend implements (the local transformers engine here; a
remote vLLM or SGLang engine speaks the same three verbs over HTTP):

- `stream(prompt_ids, params)`: sampled token ids with their behaviour log-probs;
- `score(prompt_ids, response_ids, temperature, top_p, top_k)`: log-probs of a given
  response under the distribution sampling would use (logits / T, then top-p);
- `load_weights(weights, policy_version)`: switch to new weights (full, or a LoRA
  adapter where `loads_lora_adapters`) at a boundary; train/weights.py publishes them.

Engines work on token ids only. Chat rendering, detokenisation and stop strings live in
`openclaw_rl.serve`, once, whatever the backend.
"""

from openclaw_rl.engine.base import Engine, Finished, Started
from openclaw_rl.engine.loading import DEFAULT_MODEL, resolve_model_dir

__all__ = ["DEFAULT_MODEL", "Engine", "Finished", "Started", "resolve_model_dir"]
