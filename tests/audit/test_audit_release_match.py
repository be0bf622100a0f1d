"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/release_match.py` (does a suite's
`from sglang... import X` match the tree it is judged against), called directly on a suite file
against the installed SGLang source, and its module-level name collection on plain Python files."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from dsakit.audit.suite_files import SourceFile
from dsakit.audit.release_match import _module_names, mismatch_line, missing_imports
from dsakit.stack.sglang_release import SGLangRelease


def _suite_file(source: str, display: str = "tests/test_x.py") -> SourceFile:
    return SourceFile(Path(display), display, ast.parse(textwrap.dedent(source)), {}, {})


def test_module_names_are_what_module_level_code_binds(tmp_path: Path) -> None:
    module = tmp_path / "names.py"
    module.write_text(textwrap.dedent('''
        import os.path
        import numpy as np
        from typing import Any as AnyType, cast
        A = B = 1
        (C, [D, E]) = (1, [2, 3])
        F: int = 1
        G += 1
        def f(): inner = 1
        async def g(): pass
        class K:
            in_class = 1
        if A:
            H = 1
        elif B:
            I = 1
        else:
            J = 1
        try:
            L = 1
        except ImportError:
            M = 1
        except Exception as error:
            N = 1
        else:
            O = 1
        finally:
            P = 1
        with open("x") as handle:
            Q = 1
        for loop_target in ():
            R = 1
        while False:
            S = 1
    '''), encoding="utf-8")
    assert _module_names(module) == frozenset({
        "os", "np", "AnyType", "cast", "A", "B", "C", "D", "E", "F", "G", "f", "g", "K",
        "H", "I", "J", "L", "M", "N", "O", "P", "Q"})


def test_a_star_import_or_a_module_getattr_may_define_anything(tmp_path: Path) -> None:
    for n, body in enumerate(("from os import *\n", "if True:\n    def __getattr__(name): ...\n",
                              "try:\n    pass\nfinally:\n    from os.path import *\n")):
        module = tmp_path / f"open{n}.py"
        module.write_text(f"X = 1\n{body}", encoding="utf-8")
        assert _module_names(module) is None, body
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n", encoding="utf-8")
    assert _module_names(broken) is None
    assert _module_names(tmp_path / "absent.py") is None


def test_each_import_the_tree_lacks_is_named_once(installed_sglang: SGLangRelease) -> None:
    suite = _suite_file('''
        import sglang
        import sglang.srt.no_such_module
        from . import helpers
        from .sglang.srt import anything
        from sglangx.srt import anything_else
        from sglang import ServerArgs, srt, NoSuchTopName
        from sglang.srt import no_such_name_in_a_namespace_package
        from sglang.srt.no_such_package.deeper import thing
        from sglang.srt.layers import attention
        from sglang.srt.layers.attention import dsa_backend, NoSuchInANamespacePackage
        from sglang.srt.model_loader import get_model, loader, expert_pack, NoSuchInPackage
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend, NoSuchHelper
        from sglang.srt.layers.attention.dsa_backend import NoSuchHelper as Again
        from sglang.srt.layers.attention.no_such_module import thing
        from sglang.srt.layers.attention.dsa_backend import *

        def later():
            from sglang.srt.layers.attention.dsa_backend import NoSuchInAFunction
    ''')
    assert missing_imports(suite, installed_sglang) == [
        "sglang.NoSuchTopName",
        "sglang.srt.no_such_package.deeper (no such module)",
        "sglang.srt.model_loader.NoSuchInPackage",
        "sglang.srt.layers.attention.dsa_backend.NoSuchHelper",
        "sglang.srt.layers.attention.no_such_module (no such module)",
        "sglang.srt.layers.attention.dsa_backend.NoSuchInAFunction",
    ]


def test_the_mismatch_line_counts_names(installed_sglang: SGLangRelease) -> None:
    version = installed_sglang.version
    assert mismatch_line(_suite_file("from sglang import ServerArgs\n"), installed_sglang) is None
    assert mismatch_line(_suite_file("from sglang import NoSuchA\n", "t/a.py"), installed_sglang) == (
        f"t/a.py imports 1 name SGLang {version} lacks: sglang.NoSuchA; judged anyway "
        "(the suite may be for another release: --sglang-src DIR)")
    assert mismatch_line(_suite_file("from sglang import NoSuchA, NoSuchB\n", "t/b.py"), installed_sglang) == (
        f"t/b.py imports 2 names SGLang {version} lacks: sglang.NoSuchA, sglang.NoSuchB; judged anyway "
        "(the suite may be for another release: --sglang-src DIR)")
