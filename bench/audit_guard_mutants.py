"""Hand-applied mutants of dsakit/audit/guard_eval.py (issue 28 item 11): apply one, run the focused tests, revert.

Run from anywhere: `python bench/audit_guard_mutants.py` (restores the file even when interrupted).
"""
import subprocess, sys, os
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
P = "dsakit/audit/guard_eval.py"
MUTANTS = [
    ("In -> not in", "ast.In: lambda a, b: a in b,", "ast.In: lambda a, b: a not in b,"),
    ("NotIn -> in", "ast.NotIn: lambda a, b: a not in b,", "ast.NotIn: lambda a, b: a in b,"),
    ("None rule: left is None -> is not None", "if (left.value is None or right.value is None)", "if (left.value is not None or right.value is None)"),
    ("None rule: right is None -> is not None", "if (left.value is None or right.value is None)", "if (left.value is None or right.value is not None)"),
    ("None rule: or -> and", "if (left.value is None or right.value is None)", "if (left.value is None and right.value is None)"),
    ("None rule: not isinstance -> isinstance", "and not isinstance(node.ops[0], (ast.Is, ast.IsNot)):", "and isinstance(node.ops[0], (ast.Is, ast.IsNot)):"),
    ("None rule: drop Is", "(ast.Is, ast.IsNot)):", "(ast.IsNot,)):"),
    ("None rule: drop IsNot", "(ast.Is, ast.IsNot)):", "(ast.Is,)):"),
    ("None rule: False -> True", "return _Known(False)  # no capability", "return _Known(True)  # no capability"),
    ("None rule removed", "return _Known(False)  # no capability", "pass  # no capability"),
    ("holds_by_default: drop NotIn", "return isinstance(op, (ast.NotEq, ast.NotIn))", "return isinstance(op, (ast.NotEq,))"),
    ("holds_by_default: drop NotEq", "return isinstance(op, (ast.NotEq, ast.NotIn))", "return isinstance(op, (ast.NotIn,))"),
    ("holds_by_default: NotIn -> In", "return isinstance(op, (ast.NotEq, ast.NotIn))", "return isinstance(op, (ast.NotEq, ast.In))"),
    ("holds_by_default: Is against None negated", "            return against_none\n", "            return not against_none\n"),
    ("holds_by_default: IsNot not-negated", "            return not against_none\n", "            return against_none\n"),
    ("holds_by_default: is None -> is not None", "right.value is None\n", "right.value is not None\n"),
    ("_needed: not holds -> holds", "if not holds_by_default(v)]", "if holds_by_default(v)]"),
    ("tuple: all -> any", "if all(isinstance(i, _Known) for i in items):", "if any(isinstance(i, _Known) for i in items):"),
    ("bool_op: != -> ==", "if bool(part.value) != conjunction:", "if bool(part.value) == conjunction:"),
    ("subscript: is None -> is not None", "None if base.value is None else", "None if base.value is not None else"),
]
original = open(P).read()
rows = []
try:
    for name, old, new in MUTANTS:
        assert original.count(old) >= 1, name
        open(P, "w").write(original.replace(old, new, 1))
        r = subprocess.run([sys.executable, "-m", "pytest", "tests/audit/test_audit_guard_eval.py", "tests/audit/test_audit.py::test_guard_verdicts_follow_the_probe_table",
                            "-q", "-x", "-p", "no:cacheprovider"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
        rows.append((name, "killed" if r.returncode != 0 else "SURVIVED", r.stdout.strip().splitlines()[-1]))
finally:
    open(P, "w").write(original)
for row in rows:
    print(" | ".join(row))
print(sum(r[1] == "killed" for r in rows), "of", len(rows), "killed")
