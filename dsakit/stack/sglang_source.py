"""THE SGLang source index: each file of a tree read and parsed once per process.

Owns: reading, decoding (UTF-8 or the PEP 263 cookie) and parsing SGLang's `.py` files, cached by
(path, mtime, size), and the one wording of why a file does not parse. Every scanner (source scan,
contract check, audit, probe scan, flags, release features) asks here. Must not import SGLang,
torch or any dsakit module but `dsakit.errors`; knows no file layout (that is `sglang_release`).
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections import OrderedDict
from pathlib import Path

from dsakit.errors import UnparsableSource

# Parsed trees kept at once. One tree costs ~0.7 MiB per 20 KiB of source (405 attention files:
# 8.5 MiB of source, 290 MiB of trees), so the index keeps the trees one scan walks (the probe scan
# parses ~180, the runner-read scan ~60), not every tree a process ever asked for; texts are cheap
# (the probe scan reads ~640 files as text to tell callables from constants).
MAX_TREES = 384
MAX_FILES = 4096
ADVICE = "fix the file or pass --sglang-src a clean SGLang tree"


class Source:
    """One file as read now. `text` is "" when it cannot be read; `tree` (parsed on first use, so a
    text probe costs no parse) is None when it does not parse, and `problem` then says why and what
    would be right, with a `{where}` placeholder for the name the caller shows."""

    def __init__(self, path: Path, text: str, problem: str = "") -> None:
        self.path = path
        self.text = text
        self._problem = problem
        self._tree: ast.Module | None = None
        self._parsed = bool(problem)

    @property
    def tree(self) -> ast.Module | None:
        if not self._parsed:
            self._parsed = True
            _counts["parsed"] += 1
            _keep_tree(self)
            try:
                self._tree = ast.parse(self.text, filename=str(self.path))
            except (SyntaxError, ValueError) as error:
                conflict = " (an unresolved merge conflict?)" if "\n<<<<<<< " in "\n" + self.text else ""
                line = getattr(error, "lineno", None) or 1
                message = getattr(error, "msg", str(error))
                self._problem = f"{{where}}:{line}: does not parse: {message}{conflict}"
        return self._tree

    def forget_tree(self) -> None:
        """Drop the tree (the index keeps MAX_TREES); the next `tree` parses again."""
        if self._tree is not None:
            self._tree, self._parsed = None, False

    @property
    def problem(self) -> str:
        return f"{self._problem}; {ADVICE}" if self.tree is None else ""

    def require(self, where: str | None = None) -> ast.Module:
        """The tree, or UnparsableSource (a UsageError) naming `where:line` and what would be right."""
        tree = self.tree
        if tree is None:
            raise UnparsableSource(self._problem.format(where=where or str(self.path)), ADVICE)
        return tree


_CACHE: OrderedDict[Path, tuple[tuple[int, int], Source]] = OrderedDict()
_TREES: OrderedDict[int, Source] = OrderedDict()  # sources holding a tree, oldest first
_counts = {"parsed": 0, "read": 0, "hits": 0}


def _keep_tree(parsed: Source) -> None:
    _TREES[id(parsed)] = parsed
    while len(_TREES) > MAX_TREES:
        _TREES.popitem(last=False)[1].forget_tree()


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def _read(path: Path) -> Source:
    try:
        raw = path.read_bytes()
    except OSError as error:
        return Source(path, "", f"cannot read {{where}}: {error.strerror or error}")
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(raw).readline)[0]  # UTF-8 unless a coding cookie
    except SyntaxError as error:
        return Source(path, raw.decode("utf-8", "replace"),
                      f"{{where}}:1: {error.msg}")
    try:
        return Source(path, raw.decode(encoding))
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        return Source(path, raw.decode(encoding, "replace"), (
            f"{{where}}:{line}: not {encoding} (byte {raw[error.start]:#04x} at offset {error.start}); Python "
            "source is UTF-8 unless a coding cookie says otherwise"))


def source(path: Path) -> Source:
    """`path` read and parsed, from the cache while its mtime and size are unchanged."""
    key = path.absolute()
    stamp = _stamp(key)
    cached = _CACHE.get(key)
    if cached is not None and stamp is not None and cached[0] == stamp:
        _CACHE.move_to_end(key)
        if id(cached[1]) in _TREES:
            _TREES.move_to_end(id(cached[1]))
        _counts["hits"] += 1
        return cached[1]
    found = _read(key)
    _counts["read"] += 1
    if stamp is not None:
        _CACHE[key] = (stamp, found)
        while len(_CACHE) > MAX_FILES:
            _CACHE.popitem(last=False)
    return found


def tree(path: Path) -> ast.Module | None:
    """The AST of `path`; None when it is missing, unreadable or does not parse."""
    return source(path).tree


def text(path: Path) -> str:
    """The decoded text of `path` ("" when it cannot be read)."""
    return source(path).text


def stats() -> dict[str, int]:
    """Files read, files parsed and cache hits so far in this process (what tests and bench read)."""
    return dict(_counts)


def clear() -> None:
    """Forget every cached file (a test that rewrites a tree within one mtime tick)."""
    _CACHE.clear()
    _TREES.clear()
