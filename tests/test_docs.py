"""What the docs name exists: every test, every file, every link and anchor.

A doc that cites a test as the proof of a claim is only as good as that test's existence: a
renamed or deleted test must break the suite, not leave the claim standing on nothing. The
same for the modules the docs say implement something, and for their links.
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# A path of the repository (`tests/…`, `streamproc/…`, `bench/…`), optionally `::name`; or
# `::name` alone, which continues the file named last. `tests/…` is a placeholder.
PATH = re.compile(
    r"(?<![\w/.-])((?:tests|streamproc|bench)/[\w/.*…-]*[\w/*…])(?:::(\w+))?|(?<![\w.])::(\w+)"
)
# A bare test file name (`test_x.py`), as a table of one directory's tests names them.
BARE_TEST = re.compile(r"`(test_\w+\.py)`")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\[[^\]]+\]:\s*(\S+)", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _rel(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


@cache
def _tracked() -> frozenset[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return frozenset(out.split())


@cache
def _defined(path: Path) -> frozenset[str]:
    """Every function, class and module-level name a Python file defines."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def _exists(name: str) -> bool:
    """A file or directory of the repository (a glob matches at least one)."""
    if "*" in name:
        return any(ROOT.glob(name))
    target = ROOT / name
    if target.exists():
        return True
    # A directory the suite writes into must be one git ignores, as the docs say it is.
    ignored = subprocess.run(
        ["git", "check-ignore", name.rstrip("/") + "/"], cwd=ROOT, capture_output=True, check=False
    )
    return ignored.returncode == 0


def named_paths(text: str) -> list[tuple[str, str | None]]:
    """The repository paths a doc names, each with the name it cites in that file, if any."""
    out: list[tuple[str, str | None]] = []
    last = ""
    for m in PATH.finditer(text):
        path, name, continued = m.group(1), m.group(2), m.group(3)
        if path and "…" in path:
            last = path
        elif path:
            last = path
            out.append((path, name))
        elif "…" in last:
            continue
        elif last.endswith(".py"):
            out.append((last, continued))
        else:
            out.append(("", continued))
    return out


def test_every_test_and_file_a_doc_names_exists() -> None:
    problems: list[str] = []
    cited = 0
    for doc in DOCS:
        text = doc.read_text()
        for path, name in named_paths(text):
            if not path:
                problems.append(f"{_rel(doc)}: ::{name} follows no Python file")
                continue
            if not _exists(path):
                problems.append(f"{_rel(doc)}: {path} does not exist")
                continue
            if name is None:
                continue
            cited += 1
            if not path.endswith(".py") or name not in _defined(ROOT / path):
                problems.append(f"{_rel(doc)}: {path}::{name} does not exist")
        for bare in BARE_TEST.findall(text):
            if not any(p.name == bare for p in (ROOT / "tests").rglob(bare)):
                problems.append(f"{_rel(doc)}: {bare} is no test file")
    assert not problems, "\n".join(problems)
    assert cited >= 200  # the docs do cite tests: a broken pattern would find none


def test_a_renamed_test_is_caught() -> None:
    """The reference forms the docs use are all read (this is what the docs test relies on)."""
    text = (
        "`tests/test_docs.py::test_a_renamed_test_is_caught`, `::test_gone`; "
        "see tests/impact/ and `streamproc/runtime/fold.py::folds`; (`::test_orphan` after a dir)"
        " tests/impact/"
    )
    assert named_paths(text) == [
        ("tests/test_docs.py", "test_a_renamed_test_is_caught"),
        ("tests/test_docs.py", "test_gone"),
        ("tests/impact/", None),
        ("streamproc/runtime/fold.py", "folds"),
        ("streamproc/runtime/fold.py", "test_orphan"),
        ("tests/impact/", None),
    ]
    assert "test_gone" not in _defined(ROOT / "tests/test_docs.py")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|(?<!\w)_|_(?!\w)", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """The anchors a markdown file has: its headings' slugs (numbered when repeated)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in doc.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _links(doc: Path) -> list[str]:
    text, fenced, kept = doc.read_text(), False, []
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))  # a code span is no link
    return [a or b for a, b in LINK.findall("\n".join(kept))]


def test_every_relative_link_and_anchor_resolves() -> None:
    problems: list[str] = []
    checked = 0
    for doc in DOCS:
        for target in _links(doc):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            checked += 1
            if not dest.exists():
                problems.append(f"{_rel(doc)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{_rel(doc)}: {target}: no such anchor")
    assert not problems, "\n".join(problems)
    assert checked >= 100


def test_slugs_are_githubs() -> None:
    assert slug("ImpactIndex — `bench/impact.py`") == "impactindex--benchimpactpy"
    assert slug("§10 Configuration") == "10-configuration"
    assert slug("The specification's keys") == "the-specifications-keys"
    assert slug("`verdict.recorded`") == "verdictrecorded"
    assert slug("StreamprocPlannerRecoveryFailing") == "streamprocplannerrecoveryfailing"
    assert slug("The cold query: point reads of `impact_groups`") == (
        "the-cold-query-point-reads-of-impact_groups"
    )
