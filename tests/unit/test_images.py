"""The workload images: each Dockerfile pins its base, adds a pinned transformers and ships the same workload
(the package rollcall_workload, with its entry point train.py beside it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollcall.backends.kubernetes.efa import NET_CLUES
from rollcall.jobspec import IMAGE_SCRIPT

ROOT = Path(__file__).resolve().parents[2]
IMAGE_DIR = ROOT / "images" / "bert-training"
DOCKERFILES = sorted(p for p in IMAGE_DIR.glob("Dockerfile.*") if p.suffix != ".dockerignore")


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, comments dropped and continued lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pairs = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def test_both_accelerators_have_an_image():
    assert {p.name for p in DOCKERFILES} >= {"Dockerfile.nvidia", "Dockerfile.neuron"}
    assert (IMAGE_DIR / "train.py").is_file() and (IMAGE_DIR / "README.md").is_file()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_image_is_pinned(dockerfile):
    bases = [args.split()[0] for word, args in _instructions(dockerfile) if word == "FROM"]
    assert len(bases) == 1, bases
    image = bases[0]
    assert "$" not in image, "the base must be spelled out, not taken from a build argument"
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag and tag, f"{image} has no tag"
    assert tag != "latest" and "@" not in name, f"{image} is not pinned to a fixed tag"
    assert re.search(r"\d", tag), f"{image}'s tag names no version"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_ships_the_workload_package_beside_its_entry_point(dockerfile):
    instructions = _instructions(dockerfile)
    copies = [args.split() for word, args in instructions if word == "COPY"]
    # the package and the entry point that imports it, side by side in /workspace (the script's folder is
    # first on sys.path); the build context is the repository root
    assert ["images/bert-training/train.py", IMAGE_SCRIPT] in copies
    assert ["src/rollcall_workload", f"{Path(IMAGE_SCRIPT).parent}/rollcall_workload"] in copies
    assert ("WORKDIR", "/workspace") in instructions
    assert IMAGE_SCRIPT == "/workspace/train.py"
    for source, _ in copies:
        assert (ROOT / source).exists(), f"{dockerfile.name} copies {source}, which is not in the repository"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_build_context_holds_what_the_image_copies_and_nothing_else(dockerfile):
    """Each Dockerfile's own .dockerignore (BuildKit's <Dockerfile>.dockerignore) lets in exactly its COPY sources."""
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    lines = [ln for ln in ignore.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    copies = {args.split()[0] for word, args in _instructions(dockerfile) if word == "COPY"}
    assert allowed == copies


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_transformers_is_pinned_and_nothing_is_downloaded_at_run_time(dockerfile):
    instructions = _instructions(dockerfile)
    runs = " ".join(args for word, args in instructions if word == "RUN")
    # Pins may also come from a requirements file the image copies in and installs.
    copied = [args.split()[0] for word, args in instructions if word == "COPY"]
    runs += " ".join((ROOT / c).read_text() for c in copied if c.endswith(".txt"))
    assert re.search(r"transformers==\d+\.\d+\.\d+", runs), runs
    assert "HF_HUB_OFFLINE=1" in " ".join(args for word, args in instructions if word == "ENV")
    assert not any(word == "ENTRYPOINT" and args not in ("[]",) for word, args in instructions)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_no_fabric_settings_are_baked_in(dockerfile):
    env = " ".join(args for word, args in _instructions(dockerfile) if word == "ENV")
    assert not re.search(r"\b(NCCL_|FI_|NEURON_RT_|CUDA_VISIBLE_DEVICES)", env), env


def test_cpu_image_pins_match_the_suite_lock():
    """The CPU image installs exactly the torch and transformers the suite's lock has."""
    lock = (IMAGE_DIR.parents[1] / "requirements.lock").read_text()
    image = (IMAGE_DIR / "requirements.cpu.txt").read_text()
    for package in ("torch", "transformers", "numpy"):
        pin = re.search(rf"^{package}==\S+", lock, re.M)
        assert pin and re.search(rf"^{re.escape(pin.group(0))}$", image, re.M), package


def _runs(dockerfile: Path) -> str:
    return " ".join(args for word, args in _instructions(dockerfile) if word == "RUN")


def test_the_nvidia_image_installs_efa_as_aws_documents_for_containers():
    dockerfile = IMAGE_DIR / "Dockerfile.nvidia"
    runs = _runs(dockerfile)
    assert "./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify" in runs
    args = dict(a.partition("=")[::2] for word, a in _instructions(dockerfile) if word == "ARG")
    version = args["EFA_INSTALLER_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), "the EFA installer is pinned to a release"
    assert "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" in runs
    # the plugin under the name NCCL loads, first on the library path; the build fails without one
    assert 'ln -s "$plugin" /opt/nccl-net/libnccl-net.so' in runs and "exit 1" in runs
    env = " ".join(a for word, a in _instructions(dockerfile) if word == "ENV")
    assert re.search(r"LD_LIBRARY_PATH=/opt/nccl-net:/opt/amazon/efa/lib\b", env), env


def test_the_image_readme_documents_the_efa_pin_and_the_fix_rollcall_names():
    dockerfile = IMAGE_DIR / "Dockerfile.nvidia"
    pin = re.search(r"^ARG (EFA_INSTALLER_VERSION=\S+)$", dockerfile.read_text(), re.M)
    assert pin and f"`ARG {pin.group(1)}`" in (IMAGE_DIR / "README.md").read_text()
    # the fix the EFA check prints is the command this image runs
    libfabric = next(c for c in NET_CLUES if c.missing.startswith("libfabric"))
    command = re.search(r"efa_installer\.sh[^,)]*", libfabric.fix)
    assert command and command.group(0) in _runs(dockerfile)
