"""What a framework entry point says on stderr: that fastenv serves its run, and at its end which fast
paths served and how many camera images it did not render.

A user who runs ``python -m fastenv.integrations.lerobot``, the openpi/OFT runner or RLinf's env
worker from fastenv sees the framework's own output; these lines, one at the start and one at the
end, say that fastenv's env did the work and what it saved.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_announced: set[str] = set()


def announce(entry: str, what: str) -> None:
    """Once per process and entry point: "fastenv: <entry>: <what>"."""
    if entry in _announced:
        return
    _announced.add(entry)
    print(f"fastenv: {entry}: {what}", file=sys.stderr, flush=True)


@dataclass
class Tally:
    """Camera images a run rendered, against those the stock env would have rendered, and the fast
    paths of its envs (each path: in how many envs it served, of how many)."""

    stock_images: int = 0
    rendered_images: int = 0
    paths: dict[str, list[int]] = field(default_factory=dict)

    def add_images(self, stock: int, rendered: int) -> None:
        self.stock_images += int(stock)
        self.rendered_images += int(rendered)

    def add_paths(self, fast_paths: Iterable[Mapping[str, bool]]) -> None:
        for paths in fast_paths:
            for name, on in paths.items():
                seen = self.paths.setdefault(str(name), [0, 0])
                seen[0] += bool(on)
                seen[1] += 1

    def line(self, entry: str) -> str:
        skipped = self.stock_images - self.rendered_images
        share = f" ({100.0 * skipped / self.stock_images:.0f}%)" if self.stock_images else ""
        serving = [name for name, (on, of) in self.paths.items() if on == of]
        aside = [f"{name} ({of - on} of {of} envs)" for name, (on, of) in self.paths.items() if on < of]
        paths = ("; fast paths serving: " + (", ".join(serving) or "none")) if self.paths else ""
        paths += ("; stepping aside: " + ", ".join(aside)) if aside else ""
        return (f"fastenv: {entry} done: {skipped} of the stock env's {self.stock_images} camera images not rendered{share}, "
                f"{self.rendered_images} rendered{paths}")

    def say(self, entry: str) -> None:
        print(self.line(entry), file=sys.stderr, flush=True)
