"""Environment tests need bubblewrap (the sandbox) and Chromium (the GUI). Locally a missing
one skips its tests with the reason; where OPENCLAW_REQUIRE_SYSTEM_DEPS=1 (CI installs
both) a missing one fails every environment test instead, so CI can never go green by
skipping them."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(autouse=True, scope="session")
def _system_deps_present_where_required() -> None:
    if os.environ.get("OPENCLAW_REQUIRE_SYSTEM_DEPS") != "1":
        return
    from openclaw_rl.envs.sandbox import sandbox_available

    ok, why = sandbox_available()
    missing = [] if ok else [f"sandbox: {why}"]
    if shutil.which("chromium") is None and not os.path.exists("/usr/bin/chromium"):
        missing.append("chromium: apt-get install chromium")
    if missing:
        pytest.fail("OPENCLAW_REQUIRE_SYSTEM_DEPS=1 but " + "; ".join(missing), pytrace=False)
