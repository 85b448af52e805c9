"""The documented patches of ManiSkill's PPO scripts (docs/backends/maniskill.md): read,
parsed and applied in Python, without ManiSkill (the tests that run the scripts import this)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = README.parent / "docs" / "backends" / "maniskill.md"
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def patch_block(path: Path, script: str = "ppo.py") -> str:
    """The ```diff block under ``<!-- patch: ManiSkill's examples/baselines/ppo/<script> -->``."""
    text = path.read_text()
    start = text.index(f"<!-- patch: ManiSkill's examples/baselines/ppo/{script} -->")
    return text[start:].split("```diff\n", 1)[1].split("```", 1)[0]


@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[str] = field(default_factory=list)  # each with its sign: " ", "-" or "+"

    @property
    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " -"]

    @property
    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " +"]

    @property
    def removed(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] == "-"]

    @property
    def added(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] == "+"]


def parse_unified_diff(block: str) -> tuple[str, str, list[Hunk]]:
    """(old file, new file, hunks) of a one-file unified diff; AssertionError where it is not one."""
    lines = block.splitlines()
    assert len(lines) > 2 and lines[0].startswith("--- ") and lines[1].startswith("+++ "), \
        f"a unified diff starts with ---/+++ file headers, not {lines[:2]}"
    hunks: list[Hunk] = []
    for number, line in enumerate(lines[2:], 3):
        match = HUNK.match(line)
        if match:
            old_start, old_len, new_start, new_len = match.groups()
            hunks.append(Hunk(int(old_start), int(old_len or 1), int(new_start), int(new_len or 1)))
            continue
        assert hunks, f"line {number}: a hunk starts with @@ -l,n +l,n @@, not {line!r}"
        assert line[:1] in (" ", "-", "+"), f"line {number}: a hunk's line starts with ' ', '-' or '+': {line!r}"
        hunks[-1].lines.append(line)
    assert hunks, "the diff has no hunks"
    for hunk in hunks:
        assert (len(hunk.old), len(hunk.new)) == (hunk.old_len, hunk.new_len), \
            f"hunk @@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@ has {len(hunk.old)} old and {len(hunk.new)} new lines"
    return lines[0][4:].split("\t")[0], lines[1][4:].split("\t")[0], hunks


def readme_patch(path: Path = DOCS, script: str = "ppo.py") -> list[tuple[str, str]]:
    """A documented patch of one of ManiSkill's PPO scripts: (old lines, new lines) per hunk, context included."""
    _, _, hunks = parse_unified_diff(patch_block(path, script))
    return [("\n".join(h.old) + "\n", "\n".join(h.new) + "\n") for h in hunks]


def patched_ppo(source: str, path: Path = DOCS, script: str = "ppo.py") -> str:
    """ManiSkill's PPO script with the documented patch applied (each hunk must match exactly once)."""
    for old, new in readme_patch(path, script):
        if source.count(old) != 1:
            raise AssertionError(f"the documented patch expects these lines once in {script}, found {source.count(old)}:\n{old}")
        source = source.replace(old, new)
    return source


def pre_image(block: str) -> str:
    """A file the diff applies to as it stands: its hunks' old lines at their line numbers, filler between."""
    _, _, hunks = parse_unified_diff(block)
    out: list[str] = []
    for hunk in hunks:
        assert hunk.old_start > len(out), "hunks in order, not overlapping"
        out += [f"# line {n}" for n in range(len(out) + 1, hunk.old_start)]
        out += hunk.old
    out += ["# the end"]
    return "\n".join(out) + "\n"
