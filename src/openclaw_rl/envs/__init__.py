"""Agent environments (docs/method.md §4): the protocol, terminal / toolcall / swe / gui, the pool."""
