"""openclaw-rl: an agent that improves simply by being used.

The policy is served behind an OpenAI-compatible API; every main turn is paired with
the next state that follows it; a judge turns each pair into training signal; a trainer
updates the policy in the background and hands new weights back to serving.
"""

__version__ = "0.1.0"
