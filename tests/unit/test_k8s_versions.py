"""The Kubernetes versions the suite is tested against are declared once, in hack/cluster.sh: the consumer modules
that build them and the README say the same versions, and the oldest is moved on before EKS stops supporting it."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = (ROOT / "hack" / "cluster.sh").read_text()
README = (ROOT / "README.md").read_text()


def declared(name: str) -> str:
    found = re.findall(rf"^{name}=(\S+)$", CLUSTER_SH, re.M)
    assert len(found) == 1, (
        f"hack/cluster.sh declares {name} {len(found)} times; it needs one line {name}=..."
    )
    return found[0]


NEWEST, OLDEST = declared("K8S_NEWEST"), declared("K8S_OLDEST")
EKS_END = date.fromisoformat(declared("K8S_OLDEST_EKS_END"))


def minor(version: str) -> str:
    """``v1.32.13`` -> ``1.32``."""
    match = re.fullmatch(r"v(1\.\d+)\.\d+", version)
    assert match, f"{version} is no v1.MINOR.PATCH"
    return match.group(1)


def module_of(version: str) -> Path:
    """The consumer module hack/cluster.sh builds ``version`` from."""
    return ROOT / "hack" / ("k8s-bin" if version == NEWEST else f"k8s-bin-{minor(version)}")


def test_the_oldest_is_an_older_minor_than_the_newest() -> None:
    assert [int(p) for p in minor(OLDEST).split(".")] < [int(p) for p in minor(NEWEST).split(".")]


@pytest.mark.parametrize("version", [NEWEST, OLDEST])
def test_each_version_s_module_builds_that_release_with_its_staging_modules(version: str) -> None:
    """k8s.io/kubernetes at the version, every staging module it replaces at v0.MINOR.PATCH; a module the proxy
    does not serve at that patch may take an earlier one of the same minor, with a comment above saying so."""
    gomod = module_of(version) / "go.mod"
    assert gomod.is_file(), (
        f"hack/cluster.sh builds {version} from {gomod.relative_to(ROOT)}, which is missing"
    )
    assert (gomod.parent / "go.sum").is_file()
    text = gomod.read_text()
    assert re.search(rf"^require k8s\.io/kubernetes {re.escape(version)}$", text, re.M), (
        f"{gomod.relative_to(ROOT)} does not require k8s.io/kubernetes {version}"
    )
    staging = "v0" + version.removeprefix("v1")
    lines = text.splitlines()
    replaces = [
        (i, m) for i, line in enumerate(lines) if (m := re.match(r"\s+(k8s\.io/\S+) => (\S+) (\S+)$", line))
    ]
    assert len(replaces) >= 20, "the staging modules are not replaced by their published versions"
    for i, m in replaces:
        module, target, pinned = m.groups()
        assert target == module, lines[i]
        if pinned != staging:
            assert pinned.rsplit(".", 1)[0] == staging.rsplit(".", 1)[0], f"{module} {pinned}: not {staging}"
            assert lines[i - 1].strip().startswith("//"), (
                f"{module} {pinned}, not {staging}: say why above it"
            )


def test_the_readme_says_the_versions_ci_tests_and_until_when_eks_supports_the_oldest() -> None:
    for version in (NEWEST, OLDEST):
        assert version in README, f"README.md does not name {version} (hack/cluster.sh)"
    end = f"{EKS_END.day} {EKS_END:%B %Y}"
    assert end in README, f"README.md does not say that EKS supports {minor(OLDEST)} until {end}"
    assert f"Kubernetes {minor(OLDEST)}" in README, f"README.md does not state the minimum, {minor(OLDEST)}"


def test_the_oldest_version_is_still_supported_by_eks() -> None:
    """Fails from the day EKS's extended support of the oldest minor ends: move K8S_OLDEST on to the next minor."""
    today = datetime.now(UTC).date()
    assert today <= EKS_END, (
        f"EKS's extended support for Kubernetes {minor(OLDEST)} ended on {EKS_END}: set K8S_OLDEST in "
        f"hack/cluster.sh to the oldest minor EKS supports now, with its consumer module and the README"
    )
