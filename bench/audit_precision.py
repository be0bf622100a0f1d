"""Precision and recall of `dsakit audit` on the corpus of upstream SGLang mock shapes (issue 26).

The corpus and its hand-judged verdicts live in tests/audit/test_audit_precision.py (the test asserts
100% / 100%); this prints the numbers and every wrong decision, for any dsakit on the path:

    python bench/audit_precision.py
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "audit" / "test_audit_precision.py"


def main() -> int:
    spec = importlib.util.spec_from_file_location("audit_precision_corpus", CORPUS)
    assert spec is not None and spec.loader is not None
    corpus = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = corpus  # dataclasses look their module up while the class is built
    spec.loader.exec_module(corpus)
    with tempfile.TemporaryDirectory(prefix="dsakit-audit-precision-") as root:
        precision, recall, wrong = corpus.measure(Path(root))
    print(f"dsakit audit: {len(corpus.CASES)} upstream shapes, precision {precision:.1%}, recall {recall:.1%}")
    for line in wrong:
        print(f"  {line}")
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
