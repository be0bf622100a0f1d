"""The suite's files as the audit reads them (AST only: nothing of the scanned tree is imported).

Owns a file decoded as Python decodes it (UTF-8, or its PEP 263 coding cookie) with its imports
(`SourceFile`, `parse_file`; `UnparsableFile` says why one cannot be read), the place an expression
is evaluated (`Scope`), and the AST walks over a file the finder and the usage scan share.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class SourceFile:
    path: Path
    display: str
    tree: ast.Module
    imports: dict[str, str]  # local name -> original name (`from m import A as B`: B -> A; module in `modules`)
    modules: dict[str, str]  # local name -> module it was imported from


@dataclass(frozen=True)
class Scope:
    """Where an expression is evaluated: a file, and the function (and class) around it."""

    file: SourceFile
    function: _FunctionNode | None = None
    cls: ast.ClassDef | None = None


def node_site(file: SourceFile, node: ast.AST) -> str:
    return f"{file.display}:{getattr(node, 'lineno', 0)}"


def last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def attribute_chain(node: ast.expr) -> list[str] | None:
    """`a.b.c` -> ["a", "b", "c"]; None for anything but names and attributes."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    names.append(node.id)
    return names[::-1]


def own_nodes(function: _FunctionNode) -> Iterator[ast.AST]:
    """The nodes of a function body, not descending into nested functions or classes."""
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop(0)
        yield node
        pending.extend(
            child for child in ast.iter_child_nodes(node)
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        )


class UnparsableFile(Exception):
    """A scanned file the audit cannot read as Python; the message says why and what would be right."""


def parse_file(path: Path, display: str) -> SourceFile:
    """One scanned file, decoded as Python decodes it (UTF-8, or the PEP 263 coding cookie).

    Raises UnparsableFile for an unreadable, binary, undecodable or syntactically broken file.
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UnparsableFile(f"cannot be read ({error.strerror or error})") from None
    if b"\0" in data:
        raise UnparsableFile("is binary (it holds NUL bytes), not Python source") from None
    try:
        tree = ast.parse(data, filename=str(path))
    except SyntaxError as error:
        message = str(error.msg)
        if "unknown encoding" in message:
            raise UnparsableFile(f"declares an encoding Python does not know ({message}); use a codec "
                                 "name such as utf-8 or latin-1 in its coding cookie") from None
        encoding = _undecodable_as(data)
        if encoding in ("utf-8", "utf-8-sig"):
            raise UnparsableFile(f"is not UTF-8 and declares no other encoding ({message}); save it as "
                                 "UTF-8 or add a coding cookie such as '# -*- coding: latin-1 -*-'") from None
        if encoding is not None:
            raise UnparsableFile(f"is not {encoding}, the encoding its coding cookie declares ({message}); "
                                 "save it in that encoding or declare the one it is in") from None
        raise UnparsableFile(f"has a syntax error at line {error.lineno}: {message}") from None
    except (ValueError, LookupError) as error:  # an unknown codec in the cookie, NUL bytes (3.11)
        raise UnparsableFile(f"cannot be decoded as Python source ({error})") from None
    imports: dict[str, str] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                imports[alias.asname or alias.name] = alias.name
                modules[alias.asname or alias.name] = "." * node.level + (node.module or "")
    return SourceFile(path, display, tree, imports, modules)


def _undecodable_as(data: bytes) -> str | None:
    """The encoding Python reads `data` in (its coding cookie, else UTF-8) when the bytes are not
    valid in it; None when they decode (a syntax error is then the source's own, e.g. a bad escape)."""
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:  # its first two lines are not UTF-8 and name no encoding (an unknown one is caught before)
        return "utf-8"
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return encoding
    return None


def file_functions(file: SourceFile) -> Iterator[tuple[_FunctionNode, ast.ClassDef | None]]:
    for node in file.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, None
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield item, node
