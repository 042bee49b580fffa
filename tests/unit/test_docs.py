"""The documents under docs/ stay true to the code that points at them.

* docs/config.md is what scripts/gen_config_doc.py renders from the driver's
  options table today;
* every `docs/<file>.md §N` cited in the source tree (and every `<file>.md §N`
  or bare `§N` inside docs/) names a file that exists and a heading numbered N
  in it;
* docs/protocol.md §4.4 lists every counter type and system counter the
  native module knows, with its id and label.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SOURCE_DIRS = ("crates", "python", "tests", "bench", "scripts")
SOURCE_SUFFIXES = {".rs", ".py", ".pyi", ".sh", ".toml", ".java", ".md", ".txt"}
SKIP_DIRS = {"target", ".venv", "__pycache__", ".git", ".peers", "node_modules"}

NUMBER = r"\d+(?:\.\d+)*"
# One section or a range: §4.2, §4.2–4.6, §4.2–§4.6, §1.3-1.4.
ITEM = rf"§\s*{NUMBER}(?:\s*[–—-]\s*§?\s*{NUMBER})?"
# A run of them: "§5.4 and §3.7", "§4.2, §4.4".
RUN = rf"{ITEM}(?:\s*(?:,|and|&|or)\s*{ITEM})*"
SOURCE_CITATION = re.compile(rf"docs/(?P<file>[A-Za-z0-9_-]+\.md)(?P<after>(?:'s)?\)?\s*(?P<run>{RUN})?)")
DOC_CITATION = re.compile(rf"(?:(?<![\w/.-])(?P<file>[A-Za-z0-9_-]+\.md)\)?\s*)?(?P<run>{RUN})")
HEADING = re.compile(rf"^#{{1,6}}\s+§?\s*(?P<number>{NUMBER})\.?(?:\s|$)")


@dataclass(frozen=True)
class Citation:
    where: str  # path:line of the citing text
    file: str  # the cited document, relative to docs/
    sections: tuple[str, ...]  # section numbers; empty for a plain reference to the file


def _gen_config_doc():
    return load_script(ROOT / "scripts" / "gen_config_doc.py")


def _sections(run: str | None) -> tuple[str, ...]:
    """The section numbers a run of citations names, ranges expanded where both ends share a parent."""
    if not run:
        return ()
    numbers: list[str] = []
    for item in re.finditer(rf"§\s*({NUMBER})(?:\s*[–—-]\s*§?\s*({NUMBER}))?", run):
        first, last = item.group(1), item.group(2)
        numbers.append(first)
        if last is None:
            continue
        a, b = first.split("."), last.split(".")
        if len(a) == len(b) and a[:-1] == b[:-1] and int(a[-1]) < int(b[-1]):
            prefix = ".".join(a[:-1])
            for n in range(int(a[-1]) + 1, int(b[-1]) + 1):
                numbers.append(f"{prefix}.{n}" if prefix else str(n))
        else:
            numbers.append(last)
    return tuple(numbers)


def _source_files():
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            if SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
                continue
            yield path
    yield ROOT / "README.md"


def _without_code_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, line) of a markdown file outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def source_citations() -> list[Citation]:
    """Every `docs/<file>.md [§N...]` in the source tree and the README."""
    found = []
    for path in _source_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(ROOT)
        for number, line in enumerate(text.splitlines(), 1):
            for m in SOURCE_CITATION.finditer(line):
                found.append(Citation(f"{rel}:{number}", m.group("file"), _sections(m.group("run"))))
    return found


def doc_citations() -> list[Citation]:
    """Every `<file>.md §N` and bare `§N` (meaning this document) inside docs/."""
    found = []
    for path in sorted(DOCS.glob("*.md")):
        rel = path.relative_to(ROOT)
        for number, line in _without_code_blocks(path.read_text(encoding="utf-8")):
            if HEADING.match(line):
                continue
            for m in DOC_CITATION.finditer(line):
                found.append(Citation(f"{rel}:{number}", m.group("file") or path.name, _sections(m.group("run"))))
            for m in re.finditer(r"\]\((?P<file>[A-Za-z0-9_-]+\.md)(?:#[^)]*)?\)", line):
                found.append(Citation(f"{rel}:{number}", m.group("file"), ()))
    return found


def headings(doc: Path) -> set[str]:
    return {
        m.group("number")
        for _, line in _without_code_blocks(doc.read_text(encoding="utf-8"))
        if (m := HEADING.match(line))
    }


def unresolved(citations: list[Citation]) -> list[str]:
    problems: list[str] = []
    cache: dict[str, set[str]] = {}
    for c in citations:
        doc = DOCS / c.file
        if not doc.is_file():
            problems.append(f"{c.where}: cites docs/{c.file}, which does not exist")
            continue
        numbers = cache.setdefault(c.file, headings(doc))
        for section in c.sections:
            if section not in numbers:
                problems.append(f"{c.where}: cites docs/{c.file} §{section}, which has no heading numbered {section}")
    return problems


# --- docs/config.md ---------------------------------------------------------------------------------------------


def test_config_doc_is_generated_from_the_current_options_table():
    expected = _gen_config_doc().render()
    doc = DOCS / "config.md"
    current = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if current != expected:
        diff = _gen_config_doc()._diff(current, expected)
        pytest.fail(f"docs/config.md is stale: run python scripts/gen_config_doc.py\n{diff}", pytrace=False)


def test_config_doc_check_mode_agrees():
    out = subprocess.run(
        [sys.executable, "scripts/gen_config_doc.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"docs/config.md is stale: run python scripts/gen_config_doc.py\n{out.stderr}"


def test_config_doc_does_not_depend_on_the_machine(monkeypatch):
    gen = _gen_config_doc()
    first = gen.render()
    monkeypatch.setenv("SULIS_DIR", "/somewhere/else")
    monkeypatch.setenv("SULIS_TERM_BUFFER_LENGTH", "1m")
    monkeypatch.setenv("USER", "someone-else")
    monkeypatch.setenv("TMPDIR", "/var/tmp/elsewhere")
    assert gen.render() == first, "the rendered page changed with the environment"
    assert "someone-else" not in first and "/somewhere/else" not in first


def test_config_doc_lists_every_driver_option():
    from sulis import _native

    text = (DOCS / "config.md").read_text(encoding="utf-8")
    missing = [name for name, *_ in _native.driver_config() if f"| `{name}` |" not in text]
    assert not missing, f"docs/config.md is stale: run python scripts/gen_config_doc.py (missing {missing})"


# --- citations --------------------------------------------------------------------------------------------------


def test_section_parser():
    assert _sections("§1.3–1.4") == ("1.3", "1.4")
    assert _sections("§4.2–§4.6") == ("4.2", "4.3", "4.4", "4.5", "4.6")
    assert _sections("§5.4 and §3.7") == ("5.4", "3.7")
    assert _sections("§1") == ("1",)
    m = SOURCE_CITATION.search("//! All fields little-endian. See docs/protocol.md §1.3–1.4.")
    assert m and m.group("file") == "protocol.md" and _sections(m.group("run")) == ("1.3", "1.4")
    m = SOURCE_CITATION.search("//! docs/protocol.md §5.4 and §3.7. Everything here is pure logic")
    assert m and _sections(m.group("run")) == ("5.4", "3.7")
    m = SOURCE_CITATION.search("/// which is docs/protocol.md's `t = (T/λ)`")
    assert m and m.group("file") == "protocol.md" and _sections(m.group("run")) == ()


def test_every_cited_docs_section_exists():
    citations = source_citations()
    cited_with_section = [c for c in citations if c.sections]
    assert len(cited_with_section) >= 20, "the citation scan found suspiciously few citations"
    problems = unresolved(citations)
    assert not problems, "source comments cite documents or sections that do not exist:\n" + "\n".join(problems)


# A file name with a section but no docs/ ("[x.md §N](x.md)" is a link inside a generated page).
BARE_SOURCE_CITATION = re.compile(rf"(?<![\w/.\[-])(?P<file>[A-Za-z0-9_-]+\.md)\)?\s*{ITEM}")


def test_source_citations_of_sections_name_the_docs_directory():
    # A bare file name before a section number escapes the check above (which
    # reads docs/<file>.md only), and may name no file at all (PROTOCOL.md).
    problems = []
    for path in _source_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for m in BARE_SOURCE_CITATION.finditer(line):
                cite = f"docs/{m.group('file').lower()}"
                problems.append(f"{path.relative_to(ROOT)}:{number}: {m.group(0)!r} (cite {cite})")
    assert not problems, "section citations without docs/:\n" + "\n".join(problems)


def test_cross_references_inside_docs_resolve():
    citations = doc_citations()
    assert citations, "no cross-references found in docs/"
    problems = unresolved(citations)
    assert not problems, "docs/ refers to documents or sections that do not exist:\n" + "\n".join(problems)


def test_readme_links_the_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for doc in sorted(DOCS.glob("*.md")):
        assert f"docs/{doc.name}" in readme, f"README.md does not link docs/{doc.name}"


# --- the counters contract in protocol.md -----------------------------------------------------------------------


def _protocol_section(number: str) -> str:
    text = (DOCS / "protocol.md").read_text(encoding="utf-8")
    start = re.search(rf"^#+\s+{re.escape(number)}\s.*$", text, re.M)
    assert start, f"docs/protocol.md has no section {number}"
    end = re.search(r"^#+\s+\d", text[start.end() :], re.M)
    return text[start.end() : start.end() + end.start()] if end else text[start.end() :]


def test_protocol_doc_lists_every_counter_type_and_system_counter():
    from sulis import _native

    section = _protocol_section("4.4")
    missing = []
    for type_id, name in _native.counter_types():
        if not re.search(rf"^\|\s*{type_id}\s*\|\s*{re.escape(name)}\s*\|", section, re.M):
            missing.append(f"counter type {type_id} {name!r}")
    for counter_id, label in _native.system_counters():
        if not re.search(rf"^\|\s*{counter_id}\s*\|\s*{re.escape(label)}\s*\|", section, re.M):
            missing.append(f"system counter {counter_id} {label!r}")
    assert not missing, "docs/protocol.md §4.4 does not list: " + ", ".join(missing)


# --- what the README tells ---------------------------------------------------------------------------------------


def test_readme_shows_the_invoker_mode_and_the_random_input_runner():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'threading_mode="invoker"' in readme and "driver.do_work()" in readme
    runner = ROOT / "crates" / "sulis-protocol" / "src" / "random_input.rs"
    assert str(runner.relative_to(ROOT)) in readme
    source = runner.read_text(encoding="utf-8")
    for variable in ("SULIS_FUZZ_ITERATIONS", "SULIS_FUZZ_SEED"):
        assert variable in readme and f'"{variable}"' in source, variable
    # The long-run command's test filter selects the runner's tests.
    m = re.search(r"^SULIS_FUZZ_ITERATIONS=\d+ SULIS_FUZZ_SEED=\d+ cargo test -p sulis-protocol --release (\S+)",
                  readme, re.M)
    assert m, "no long-run command in the README"
    tests = re.findall(r"#\[test\]\s*fn (\w+)", source)
    assert tests and all(m.group(1) in name for name in tests), (m.group(1), tests)
