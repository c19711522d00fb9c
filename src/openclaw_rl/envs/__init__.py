"""Agent environments (SPEC section 4): the protocol, terminal / toolcall / swe / gui, the pool."""
