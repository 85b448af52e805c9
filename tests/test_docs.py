"""The documentation runs as written: every python block of README.md and docs/ is a program.

Each ```python block is written to a file and run with this interpreter in a fresh directory
(``MUJOCO_GL=egl``, 300 s); it must exit 0. An HTML comment on the line before a block changes
that:

- ``<!-- snippet: skip <reason> -->``: not run (the reason is required and reported);
- ``<!-- snippet: raises <ExceptionName> -->``: must exit non-zero with that name in stderr.

A block that mentions LIBERO or ManiSkill carries the ``libero`` or ``maniskill`` marker, so a
missing simulator skips it locally and fails it in CI (``conftest.py``). Under CI such a block of
``docs/`` runs on a share of the commits (8 of them a commit, drawn by the commit), unless the
commit changed its page; README's always run, and ``FASTENV_CI_FULL=1`` runs them all. A block that imports an
optional library that is not installed (Ray, Stable-Baselines3, torch...) is skipped, as the
library's own tests are.

Also here: ``mkdocs build --strict`` (warnings are errors) and every relative link of README.md
and docs/ pointing at a file that exists.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TIMEOUT_S = 300

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(?P<kind>\S+)\s*(?P<arg>.*?)\s*-->\s*$")

# Optional libraries a snippet may need, by import name -> the extra that installs them.
OPTIONAL = {
    "ray": "ray",
    "stable_baselines3": "sb3",
    "torch": "torch",
    "tyro": "cleanrl",
    "tensorboard": "cleanrl",
    "numba": "numba",
    "torchrl": "torchrl",
    "tianshou": "tianshou",
    "skrl": "skrl",
    "sbx": "sbx",
    "jax": "sbx",
    "tree": "rllib",  # dm-tree: RLlib's import needs it, Ray's does not
    "rl_games": "rl-games",
    "pufferlib": "pufferlib",
}


# Snippets of a framework whose pins conflict with fastenv's run in that framework's stack.
STACK_SNIPPETS = {"fastenv.integrations.rlinf": ".stacks/rlinf", "fastenv.integrations.lerobot": ".stacks/lerobot-0.6"}


@dataclass(frozen=True)
class Snippet:
    path: Path
    index: int  # 1-based, among the file's python blocks
    line: int  # line of the opening fence
    code: str
    directive: str | None  # "skip", "raises" or None
    argument: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.index}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def fenced_blocks(text: str):
    """(language, body dedented, line of the fence, the text before the fence) for each fenced block."""
    for match in FENCE.finditer(text):
        language = match.group("info").strip().split()[0].lower() if match.group("info").strip() else ""
        body = textwrap.dedent(match.group("body"))
        line = text.count("\n", 0, match.start()) + 1
        yield language, body, line, text[: match.start()]


def snippets() -> list[Snippet]:
    found = []
    for path in doc_files():
        if not path.exists():
            continue
        index = 0
        for language, body, line, before in fenced_blocks(path.read_text()):
            if language not in ("python", "py"):
                continue
            index += 1
            previous = [row for row in before.splitlines() if row.strip()]
            match = DIRECTIVE.match(previous[-1]) if previous else None
            directive, argument = (match.group("kind"), match.group("arg")) if match else (None, "")
            found.append(Snippet(path, index, line, body, directive, argument))
    return found


def changed_pages() -> set[str] | None:
    """The pages the checked-out commit changed (``git diff`` against its parent); None where git
    cannot say (no parent, no git)."""
    try:
        out = subprocess.run(["git", "diff", "--name-only", "HEAD~1", "HEAD", "--", "README.md", "docs"], cwd=ROOT,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return set(out.stdout.split()) if out.returncode == 0 else None


CHANGED = changed_pages() if os.environ.get("CI") else None
# Under CI, a simulator snippet of docs/ runs on a share of the commits (``ci_sample``, drawn by the
# commit; FASTENV_CI_FULL=1 runs them all), unless its page changed in the commit: each one builds
# envs in worker processes (tens of seconds on 2 cores). The README's run on every commit.
DOCS_SAMPLE = pytest.mark.ci_sample("a simulator snippet of a docs page the commit did not change", keep=8)


def marks_for(snippet: Snippet) -> list:
    marks = []
    on_simulator = False
    if re.search(r"libero", snippet.code, re.IGNORECASE):
        marks.append(pytest.mark.libero)
        on_simulator = True
    if re.search(r"maniskill|mani_skill", snippet.code, re.IGNORECASE):
        marks.append(pytest.mark.maniskill)
        on_simulator = True
    page = snippet.path.relative_to(ROOT).as_posix()
    if on_simulator and page != "README.md" and snippet.directive != "skip" and page not in (CHANGED or ()):
        marks.append(DOCS_SAMPLE)
    if re.search(r"\bray\b", snippet.code):
        marks.append(pytest.mark.xdist_group("ray"))  # in the test process of tests/test_ray.py: one local cluster at a time
    return marks


SNIPPETS = snippets()


def missing_optional(code: str) -> list[str]:
    """The optional libraries this code needs that are not installed."""
    needed = set()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []  # the run reports it
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            needed.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            needed.add(node.module.split(".")[0])
    if re.search(r"""backend\s*=\s*["']ray["']""", code):
        needed.add("ray")
    if "fastenv.integrations.sb3" in code:
        needed.add("stable_baselines3")
    if "ray.rllib" in code:
        needed.add("tree")
    return sorted(name for name in needed & set(OPTIONAL) if importlib.util.find_spec(name) is None)


@pytest.mark.parametrize(
    "snippet", [pytest.param(s, id=s.id, marks=marks_for(s)) for s in SNIPPETS]
)
def test_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    where = f"{snippet.id} (line {snippet.line})"
    if snippet.directive not in (None, "skip", "raises"):
        pytest.fail(f"{where}: unknown directive 'snippet: {snippet.directive}' (skip <reason> or raises <Exception>)")
    if snippet.directive == "skip":
        assert snippet.argument, f"{where}: 'snippet: skip' needs a reason"
        pytest.skip(f"{where} not run: {snippet.argument}")
    if snippet.directive == "raises":
        assert re.fullmatch(r"[A-Za-z_][\w.]*", snippet.argument), f"{where}: 'snippet: raises' needs an exception name"
    missing = missing_optional(snippet.code)
    if missing:
        extras = sorted({OPTIONAL[name] for name in missing})
        pytest.skip(f"{where} needs {', '.join(missing)} (pip install -e \".[{','.join(extras)}]\")")

    python = sys.executable
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONUNBUFFERED": "1"}
    stack = next((venv for module, venv in STACK_SNIPPETS.items() if module in snippet.code), None)
    if stack is not None:  # a framework's own pins: its snippet runs in its stack's virtual environment
        from conftest import wait_for_stack

        built = wait_for_stack(str(ROOT / stack))  # CI builds RLinf's stack in the background from the session's start
        if built is None:
            pytest.skip(f"{where} runs in {stack}, not built here (docs/frameworks/)")
        python = built
        env.update(LIBERO_CONFIG_PATH=str(ROOT / stack / "libero-config"), HF_HUB_OFFLINE="1")
    script = tmp_path / "docs_snippet.py"
    script.write_text(snippet.code)
    try:
        result = subprocess.run(
            [python, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{where} ran past {TIMEOUT_S} s\n--- stdout ---\n{exc.stdout}\n--- stderr ---\n{exc.stderr}")
    code, stderr = result.returncode, result.stderr
    output = f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{stderr[-8000:]}"
    if snippet.directive == "raises":
        if code == 0 or snippet.argument not in stderr:
            pytest.fail(f"{where} should raise {snippet.argument} (exit code {code})\n{output}", pytrace=False)
    elif code != 0:
        pytest.fail(f"{where} exited {code}\n{output}", pytrace=False)


def test_snippets_found() -> None:
    pages = {s.path.relative_to(ROOT).as_posix() for s in SNIPPETS}
    assert any(page.startswith("docs/") for page in pages), "no python block found in docs/"
    skipped = [f"{s.id}: {s.argument}" for s in SNIPPETS if s.directive == "skip"]
    print("skipped snippets:", *skipped or ["none"], sep="\n  ")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site ``mkdocs build --strict`` writes (built once for this module's tests)."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or (
            "." in module and importlib.util.find_spec(module) is None
        ):
            reason = f'{module} is not installed (pip install -e ".[docs]")'
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
    site_dir = tmp_path_factory.mktemp("mkdocs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    if result.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}", pytrace=False)
    return site_dir


def test_mkdocs_build_strict(site: Path) -> None:
    assert (site / "index.html").exists()


PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.DOTALL)


def _text(fragment: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_api_examples_render_as_code(site: Path) -> None:
    """Each docstring's ``>>>`` example is a code block of the API reference, not nested block quotes.

    Markdown reads ``>>> x`` as three nested block quotes around ``x``; the examples must be a
    Google-style ``Examples:`` section (Griffe reads a singular ``Example:`` as an admonition),
    which mkdocstrings renders as Python console code.
    """
    import importlib
    import inspect

    from gymnasium.error import DependencyNotInstalled

    nested = {}
    for page in sorted(site.rglob("*.html")):
        count = len(re.findall(r"<blockquote>\s*<blockquote>", page.read_text()))
        if count:
            nested[page.relative_to(site).as_posix()] = count
    assert not nested, f"pages with nested block quotes (a '>>>' example rendered as quotes): {nested}"

    checked = 0
    for path in sorted(DOCS.rglob("*.md")):
        names = re.findall(r"^::: (\S+)", path.read_text(), re.MULTILINE)
        if not names:
            continue
        page = site / path.relative_to(DOCS).with_suffix("")
        html_page = page / "index.html" if page.name != "index" else page.with_suffix(".html")
        text = html_page.read_text()
        code = "\n".join(_text(block) for block in PRE.findall(text))
        outside = _text(PRE.sub("", text))
        for name in names:
            module, _, attr = name.rpartition(".")
            try:
                obj = getattr(importlib.import_module(module), attr, None) or importlib.import_module(name)
            except (ImportError, DependencyNotInstalled):  # an optional library it needs is missing
                continue  # (its page is still checked for nested block quotes above)
            for line in (inspect.getdoc(obj) or "").splitlines():
                if line.strip().startswith(">>> "):
                    statement = line.strip()[4:]
                    assert f">>> {statement}" in code, f"{name}'s example is not a code block of {html_page.name}: {statement}"
                    assert statement not in outside, f"{name}'s example also appears as text: {statement}"
                    checked += 1
    assert checked >= 10, f"only {checked} examples found in the API reference"


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(?P<target>\S+?)>?(?:\s+.*)?$", re.MULTILINE)


def relative_links(text: str) -> list[str]:
    """Targets of the relative links of a Markdown text (code blocks and code spans left out)."""
    text = FENCE.sub("", text)
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.DOTALL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    targets = [m.group("target") for m in LINK.finditer(text)] + [m.group("target") for m in REFERENCE.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in doc_files() if p.exists()])
def test_relative_links_exist(page: str) -> None:
    path = ROOT / page
    broken = []
    for target in relative_links(path.read_text()):
        file = target.split("#", 1)[0].split("?", 1)[0]
        if file and not (path.parent / file).exists():
            broken.append(target)
    assert not broken, f"{page} links to files that do not exist: {broken}"
