"""The hand-written stub (_native.pyi) must describe the real module: every
public name of one exists in the other, and each class's public members match."""

from __future__ import annotations

import ast
import enum
import inspect
from pathlib import Path

import sulis._native as native

STUB = Path(native.__file__).with_name("_native.pyi")
if not STUB.exists():  # editable installs keep the stub beside the sources
    STUB = Path(__file__).resolve().parents[2] / "python" / "sulis" / "_native.pyi"

# Stub-only helpers that have no runtime counterpart.
STUB_ONLY = {"_PublicationBase"}


def _stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text())


def _stub_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names - STUB_ONLY


def _stub_members(tree: ast.Module) -> dict[str, set[str]]:
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def members(cls: ast.ClassDef) -> set[str]:
        out = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
        out |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        out |= {t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                out |= members(classes[base.id])
        return {m for m in out if not m.startswith("_")}

    return {name: members(c) for name, c in classes.items() if name not in STUB_ONLY}


def test_stub_and_module_export_the_same_names():
    runtime = {n for n in dir(native) if not n.startswith("_")} | {"__version__"}
    stub = _stub_names(_stub_tree())
    assert stub - runtime == set(), "in the stub but not the module"
    assert runtime - stub == set(), "in the module but not the stub"


def test_stub_classes_list_the_runtime_members():
    for name, stub_members in _stub_members(_stub_tree()).items():
        cls = getattr(native, name)
        if issubclass(cls, BaseException):
            continue
        if issubclass(cls, enum.Enum):
            runtime = set(cls.__members__)  # the members; int's own methods are not restated
        elif issubclass(cls, (int, tuple)):  # an int or a tuple with more (OfferBatchResult, PublishedBatch)
            base = int if issubclass(cls, int) else tuple
            runtime = {m for m, _ in inspect.getmembers(cls) if not m.startswith("_")} - set(dir(base))
        else:
            runtime = {m for m, _ in inspect.getmembers(cls) if not m.startswith("_")}
        assert stub_members == runtime, f"{name}: stub {sorted(stub_members ^ runtime)} differ"
