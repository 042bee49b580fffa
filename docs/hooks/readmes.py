"""MkDocs hook: the two README files that live outside docs/ become site pages.

README.md is the home page (index.md) and bench/README.md the benchmarks page
(benchmarks.md). Both stay where they are, the single source: this hook reads
them at build time and rewrites their links, and the links inside docs/ that
point at them, so every link that works on a file browser works on the site.
A link that still points outside the site is left as it is, and
`mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]

#: Repository path of a file outside docs/ -> its page on the site.
OUTSIDE = {"README.md": "index.md", "bench/README.md": "benchmarks.md"}
#: Site page -> the repository path it is made from (the inverse, with docs/ pages added on the fly).
SOURCES = {page: path for path, page in OUTSIDE.items()}

LINK = re.compile(r"(\]\()(?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?(\))")


def _site_target(repo_path: str, target: str) -> str | None:
    """The site path of `target` as linked from the repository file `repo_path`, or None to leave it."""
    if re.match(r"^[a-z]+:", target):  # https:, mailto:
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path), target))
    if resolved in OUTSIDE:
        return OUTSIDE[resolved]
    if resolved.startswith("docs/"):
        return resolved[len("docs/"):]
    return None


def _relink(markdown: str, repo_path: str, page_path: str) -> str:
    def sub(m: re.Match) -> str:
        site = _site_target(repo_path, m.group("target"))
        if site is None:
            return m.group(0)
        relative = posixpath.relpath(site, posixpath.dirname(page_path) or ".")
        return f"{m.group(1)}{relative}{m.group('anchor') or ''}{m.group(4)}"

    return LINK.sub(sub, markdown)


def on_files(files, config):
    for repo_path, page in OUTSIDE.items():
        text = (ROOT / repo_path).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=_relink(text, repo_path, page)))
    return files


def on_page_markdown(markdown, page, config, files):
    src = page.file.src_uri
    if src in SOURCES:  # already rewritten in on_files
        return markdown
    return _relink(markdown, f"docs/{src}", src)
