"""The kinds of the mutants that survive bench/mutation_run.py: wording, equivalent or real.

Owns: the list of equivalent mutants, each with its one-line reason, and the strings that are data
(a code, a key) rather than wording. Must not hide a survivor: anything not listed is "real", or
"wording" where only a message literal changed.
"""

from __future__ import annotations

from typing import Any

# (module, the line before, the line after, why no test can tell them apart); lines stripped
_SN = "mocks/strict_node.py"
_CC = "dsakit/sglang_facts/contract_check.py"
EQUIVALENT: list[tuple[str, str, str, str]] = [
    (_SN, "frame: Any = sys._getframe(1)  # FrameType | None once it walks past the outermost frame",
     "frame: Any = sys._getframe(2)  # FrameType | None once it walks past the outermost frame",
     "_reading_frame's caller is always a StrictNamespace method in mocks/, which the walk skips anyway"),
    (_SN, "return False", "return True",
     "_is_soft_read gets None only when every frame on the stack is in mocks/: some code outside read it"),
    ("contracts/schema.py", "role = _ROLES_BY_VALUE.get(name) if type(name) is str else None",
     "role = _ROLES_BY_VALUE.get(name) if type(name) is not str else None",
     "a fast path: without it Role.parse falls through to the Enum lookup, which gives the same Role"),
    ("contracts/schema.py", "role = _ROLES_BY_VALUE.get(name) if type(name) is str else None", "role = None",
     "a fast path: without it Role.parse falls through to the Enum lookup, which gives the same Role"),
    (_CC, 'for end in range(len(parts) - 1, 0, -1):',
     'for end in range(len(parts) + 1, 0, -1):',
     'the extra first steps look up the full path (already known absent) and a longer one: the same answer'),
    (_CC, 'return "(part of " + str(entry.path).split(".", 1)[0] + ")"',
     'return "(part of " + str(entry.path).split(".", 2)[0] + ")"',
     'the first part of a split is the same whatever the split count'),
    (_CC, 'top = entry.path.split(".", 1)[0]',
     'top = entry.path.split(".", 2)[0]',
     'the first part of a split is the same whatever the split count'),
    (_CC, 'set_by = str(self.assignments.get(path.split(".", 1)[0], "NEVER"))',
     'set_by = str(self.assignments.get(path.split(".", 2)[0], "NEVER"))',
     'the first part of a split is the same whatever the split count'),
    (_CC, 'text += " via " + _short(read.via[0].split(" ", 1)[0])',
     'text += " via " + _short(read.via[0].split(" ", 2)[0])',
     'the first part of a split is the same whatever the split count'),
    ('mocks/runner_scope.py', 'if name == entry.path or entry.same_for_roles or "." in name or name not in fields:',
     'if name == entry.path or entry.same_for_roles or "XX.XX" in name or name not in fields:',
     'ServerArgs field names hold no dot: `name not in fields` already leaves nested entries out'),
    ('mocks/runner_scope.py', 'str(getattr(value, "__name__", "") if isinstance(value, ModuleType)',
     'str(getattr(value, "__name__", "XXXX") if isinstance(value, ModuleType)',
     'every module has a __name__: the default is never used'),
    ('mocks/runner_scope.py', 'else getattr(value, "__module__", "") or "").split(".", 1)[0] == "sglang"',
     'else getattr(value, "__module__", "XXXX") or "").split(".", 1)[0] == "sglang"',
     "the default feeds .split('.')[0] == 'sglang', false for '' and 'XXXX' alike"),
    ('mocks/runner_scope.py', 'else getattr(value, "__module__", "") or "").split(".", 1)[0] == "sglang"',
     'else getattr(value, "__module__", "") or "XXXX").split(".", 1)[0] == "sglang"',
     "the fallback feeds .split('.')[0] == 'sglang', false for '' and 'XXXX' alike"),
    ('mocks/runner_scope.py', 'else getattr(value, "__module__", "") or "").split(".", 1)[0] == "sglang"',
     'else getattr(value, "__module__", "") or "").split(".", 2)[0] == "sglang"',
     'the first part of a split is the same whatever the split count'),
    ('mocks/runner_scope.py', 'path = os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]',
     'path = os.environ.get("PYTEST_CURRENT_TEST", "XXXX").split("::", 1)[0]',
     "without $PYTEST_CURRENT_TEST both '' and 'XXXX' fail the .py check"),
    ('mocks/runner_scope.py', 'path = os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]',
     'path = os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 2)[0]',
     'the first part of a split is the same whatever the split count'),
    ('mocks/runner_scope.py', 'cached = _BY_PATH.get(path)',
     'cached = None',
     'the module-by-path cache only saves time: without it the same module is found by the scan'),
    ('mocks/runner_scope.py', 'if cached is not None and sys.modules.get(cached.__name__) is cached:',
     'if cached is not None and sys.modules.get(cached.__name__) is not cached:',
     'the module-by-path cache only saves time: without it the same module is found by the scan'),
    ('mocks/runner_scope.py', 'suffix = os.sep + path.replace("/", os.sep)',
     'suffix = os.sep + path.replace("XX/XX", os.sep)',
     "on POSIX os.sep is '/': the replace is a no-op either way (dsakit supports Linux only)"),
    ('mocks/runner_scope.py', 'file = getattr(module, "__file__", None) or ""',
     'file = getattr(module, "__file__", None) or "XXXX"',
     "a module without __file__ matches no test path whether its stand-in is '' or 'XXXX'"),
    ('mocks/runner_scope.py', '_BY_PATH[path] = module',
     '_BY_PATH[path] = None',
     'the module-by-path cache only saves time: without it the same module is found by the scan'),
    ('dsakit/audit/suite_device.py', 'name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")',
     'name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "XXXX")',
     "the default names a callee that is no name or attribute: '' and 'XXXX' are both no registration"),
    ('dsakit/audit/suite_device.py', 'name = decorator.func.id if isinstance(decorator.func, ast.Name) else getattr(decorator.func, "attr", "")',
     'name = decorator.func.id if isinstance(decorator.func, ast.Name) else getattr(decorator.func, "attr", "XXXX")',
     "the default names a callee that is no name or attribute: '' and 'XXXX' are both no skip decorator"),
    ('dsakit/audit/suite_device.py', 'return value.split(":", 1)[0] if isinstance(value, str) else None',
     'return value.split(":", 2)[0] if isinstance(value, str) else None',
     "the first part of a split is the same whatever the split count"),
    ('dsakit/audit/suite_device.py', 'kinds: set[str] | None = None', 'kinds: set[str] & None = None',
     "the annotation of a local variable is never evaluated"),
    ('dsakit/audit/mock_finder.py', 'self.functions: dict[str, list[tuple[SourceFile, _FunctionNode, ast.ClassDef | None]]] = {}',
     'self.functions: dict[str, list[tuple[SourceFile, _FunctionNode, ast.ClassDef & None]]] = {}',
     "an annotation: the module has `from __future__ import annotations`, so it is never evaluated"),
    ('dsakit/audit/suite_files.py', "return f\"{file.display}:{getattr(node, 'lineno', 0)}\"",
     "return f\"{file.display}:{getattr(node, 'lineno', 1)}\"",
     "every node _site gets is a parsed statement or expression, which has a lineno: the default is never used"),
    ('dsakit/audit/mock_finder.py', 'module = file.modules.get(name, "").lstrip(".").split(".")[-1]',
     'module = file.modules.get(name, "XXXX").lstrip(".").split(".")[-1]',
     "find_class returned already when `name` is not in file.imports, and parse_file fills imports and modules "
     "with the same keys: the default is never used"),
    ('dsakit/audit/mock_finder.py', 'if isinstance(spec, (ast.Name, ast.Attribute)) and name is not None:',
     'if isinstance(spec, (ast.Name, ast.Attribute)) or name is not None:',
     "name = _last_name(spec) is not None exactly when spec is a Name or an Attribute: `and` and `or` agree"),
    ('dsakit/audit/mock_finder.py', 'if function is not None and value.is_mock:', 'if function is not None or value.is_mock:',
     "with no function _apply_additions adds nothing and opens nothing, so _with_additions returns the value"),
    ('dsakit/audit/mock_finder.py', 'spec: ast.expr | None = None', 'spec: ast.expr & None = None',
     "the annotation of a local variable is never evaluated"),
    ('dsakit/audit/mock_finder.py', 'names: set[str] | None = None', 'names: set[str] & None = None',
     "the annotation of a local variable is never evaluated"),
    ('dsakit/topk/checks.py', 'hist = torch.bincount(bins, minlength=1 << bits)',
     'hist = torch.bincount(bins, minlength=2 << bits)',
     "the extra top bins hold 0 (above[b] = 0 < rank there): the same threshold bin and the same bin above it"),
    ('dsakit/topk/checks.py', 'hist = torch.bincount(bins, minlength=1 << bits)',
     'hist = torch.bincount(bins, minlength=1 >> bits)',
     "bincount then stops at the highest bin present: above[b] is the same for every bin up to it"),
    ('dsakit/topk/checks.py', 'prep = _prepare(torch.zeros((len(torch.as_tensor(lengths).flatten()), 1), dtype=torch.int64), scores, lengths,',
     'prep = _prepare(torch.zeros((len(torch.as_tensor(lengths).flatten()), 2), dtype=torch.int64), scores, lengths,',
     "candidate_overflow never reads the placeholder indices: any column count passes _prepare the same"),
    ('dsakit/topk/checks.py', 'if short > 0:', 'if short >= 0:',
     "at short == 0 the branch appends tied[:0], an empty tensor: the same missing list"),
    ('dsakit/topk/checks.py', 'return 0', 'return 1',
     "_fillers_out_of_order's early return feeds `low > n_nan`, and fillers exist only in rows with n_nan >= 1"),
    ('dsakit/audit/usage.py', 'if isinstance(call, ast.Call) and _RAISES.match(_last(call.func) or ""):',
     'if isinstance(call, ast.Call) and _RAISES.match(_last(call.func) or "XXXX"):',
     "the default feeds a match of ^(assertRaises\\w*|raises)$: neither '' nor 'XXXX' matches"),
    ('dsakit/audit/usage.py', '(_last(b) or "").endswith(("Error", "Exception", "Unavailable")) for b in node.bases)):',
     '(_last(b) or "XXXX").endswith(("Error", "Exception", "Unavailable")) for b in node.bases)):',
     "the default stands for a base that is no name: neither '' nor 'XXXX' ends with Error / Exception / Unavailable"),
    ('dsakit/audit/usage.py', 'contexts: tuple[dict[int, str], dict[int, str], str] | None = None',
     'contexts: tuple[dict[int, str], dict[int, str], str] & None = None',
     "the annotation of a local variable is never evaluated"),
    ('dsakit/audit/report.py', "return f\"{text}, via {short_site(read.read.via[0].split(' ', 1)[0])}\"",
     "return f\"{text}, via {short_site(read.read.via[0].split(' ', 2)[0])}\"",
     "the first part of a split is the same whatever the split count"),
    ('dsakit/audit/findings.py', 'result.devices.setdefault(key, "")', 'result.devices.setdefault(key, "XXXX")',
     "nothing reads the values of MockFinding.devices: the text, the JSON and not_simulated use its keys"),
    ('dsakit/audit/registry.py', 'self.modules: dict[str, _Module | None] = {}',
     'self.modules: dict[str, _Module & None] = {}',
     "an annotation: the module has `from __future__ import annotations`, so it is never evaluated"),
    ('dsakit/gates/table.py', 'return str(Path(home) / "bin" / "nvcc")',
     'return str(Path(home) / "XXbinXX" / "nvcc")',
     "_nvcc()'s path is only tested against None by its callers (the jit gate): any non-None path is the same"),
    ('dsakit/gates/table.py', 'return str(Path(home) / "bin" / "nvcc")',
     'return str(Path(home) / "bin" / "XXnvccXX")',
     "_nvcc()'s path is only tested against None by its callers (the jit gate): any non-None path is the same"),
    ('dsakit/gates/table.py', 'return code.startswith(("sm", "gfx")) and not code.startswith("sglang")',
     'return code.startswith(("sm", "gfx")) and not code.startswith("XXsglangXX")',
     "no code starting with 'sm' or 'gfx' starts with 'sglang': the clause is always true"),
    ("dsakit/topk/launch_guard.py", "return site_outside(_MACHINERY, depth=2, function=True)",
     "return site_outside(_MACHINERY, function=True)",
     "the walk skips every /dsakit/ frame, so where below the wrapper it starts gives the same caller"),
    ("dsakit/topk/launch_guard.py", "return site_outside(_MACHINERY, depth=2, function=True)",
     "return site_outside(_MACHINERY, depth=1, function=True)",
     "the walk skips every /dsakit/ frame, so where below the wrapper it starts gives the same caller"),
    ("dsakit/topk/launch_guard.py", "signature: inspect.Signature | None = inspect.signature(original)",
     "signature: inspect.Signature & None = inspect.signature(original)",
     "a local variable's annotation is never evaluated"),
]

_RM = "dsakit/compare/report_merge.py"
EQUIVALENT += [
    (_RM, "newer = isinstance(version, int) and version > REPORT_FORMAT",
     "newer = isinstance(version, int) and version >= REPORT_FORMAT",
     "reached only when version != REPORT_FORMAT (the line above returns otherwise): > and >= agree there"),
    (_RM, "return self.reports[0].table_key", "return self.reports[(-1)].table_key",
     "a node's reports share host, device description and release (group_nodes' key): one device, one table key"),
    (_RM, "return self.reports[0].simulated", "return self.reports[(-1)].simulated",
     "a node's reports share their device description, which says [simulated KEY] or [real]: one simulated flag"),
    (_RM, "return self.reports[0].shard[1] if self.reports[0].shard else None",
     "return self.reports[0].shard[1] if self.reports[(-1)].shard else None",
     "_check_shards (run on every node before it is read) refuses a node whose reports are not all shards of one split"),
    (_RM, "return self.reports[0].shard[1] if self.reports[0].shard else None",
     "return self.reports[(-1)].shard[1] if self.reports[0].shard else None",
     "_check_shards (run on every node before it is read) refuses a node whose reports are not all shards of one split"),
    (_RM, "groups = sorted(r.shard[0] for r in self.reports if r.shard)",
     "groups = sorted(r.shard[0] for r in self.reports if True)",
     "reached only when splits is set, and _check_shards makes every report of such a node a shard"),
    (_RM, "have = {r.shard[0] for r in self.reports if r.shard}", "have = {r.shard[0] for r in self.reports if True}",
     "reached only when splits is set, and _check_shards makes every report of such a node a shard"),
    (_RM, 'twice = ", ".join(r.path for r in node.reports if r.shard and r.shard[0] == group)',
     'twice = ", ".join(r.path for r in node.reports if (r.shard[0] == group))',
     "reached only when a group is reported twice, after the check that refuses a node whose reports are not all shards"),
    (_RM, 'return Cause(UNCODED, "no reason given", "not explained", (), "unknown")',
     'return Cause(UNCODED, "no reason given", "XXnot explainedXX", (), "unknown")',
     "an uncoded group's clause lists its messages, never its words (CauseGroup.clause): the words are not shown"),
    (_RM, 'also = tuple(dict.fromkeys((*first.also, *(str(r.get("code", UNCODED)) for r in reasons[1:]))))',
     'also = tuple(dict.fromkeys((*first.also, *(str(r.get("code", UNCODED)) for r in reasons[0:]))))',
     "the first reason's own code is dropped from `also` on the next line: the same tuple"),
    (_RM, "failures = view.failures[0].rows", "failures = view.failures[(-1)].rows",
     "comment() makes exactly one failure section: its first is its last"),
    ("dsakit/compare/pr_check.py", "assert check.base is not None and check.pr is not None",
     "assert check.base is not None or check.pr is not None",
     "a type-narrowing assert: run_all sets both runs before verdicts(); a missing run raises on the next lines anyway"),
    ("dsakit/compare/pr_check.py", "assert check.base is not None and check.pr is not None", "assert (check.pr is not None)",
     "a type-narrowing assert: run_all sets both runs before verdicts(); a missing run raises on the next lines anyway"),
    ("dsakit/compare/pr_check.py", "assert check.base is not None and check.pr is not None", "assert (check.base is not None)",
     "a type-narrowing assert: run_all sets both runs before verdicts(); a missing run raises on the next lines anyway"),
    ("dsakit/compare/pr_check.py",
     'base_fails, pr_fails = bool(b and b["outcome"] in FAILING), bool(p and p["outcome"] in FAILING)',
     'base_fails, pr_fails = bool(b), bool(p and p["outcome"] in FAILING)',
     "base_fails is read only beside _flaky(check, 'base', ...), true only for a test the base's rerun ran, and "
     "_run_tree reruns only the base's failures"),
    ("dsakit/compare/pr_check.py",
     'if (pr_fails and _flaky(check, "pr", change.nodeid)) or (base_fails and _flaky(check, "base", change.nodeid)):',
     'if (pr_fails and _flaky(check, "pr", change.nodeid)) or (_flaky(check, "base", change.nodeid)):',
     "_flaky(check, 'base', ...) is true only for a test the base's rerun ran, and _run_tree reruns only failures"),
    *(("dsakit/compare/pr_check.py", 'detail = change.detail or (signature(p) if pr_fails and p else "")', after,
       "classify gives every change whose PR run fails a detail (its signature), and a record that does not fail "
       "has no message or frame (dsakit.outcomes), so its signature is ''")
      for after in ('detail = change.detail or (signature(p) if pr_fails or p else "")',
                    'detail = change.detail or (signature(p) if p else "")', "detail = change.detail",
                    'detail = change.detail or (signature(p) if pr_fails else "")')),
    ("dsakit/compare/pr_check.py", 'if found and found.group(2) == path.rsplit(".", 1)[-1]:',
     'if found and found.group(2) == path.rsplit(".", 2)[-1]:',
     "the last part of an rsplit is the same whatever the split count"),
    ("dsakit/compare/pr_check.py", "ran = [c.label for c in self.checks if c.pr is not None and any(",
     "ran = [c.label for c in self.checks if (any(",
     "run_all sets every check's PR run before a PrCheck is made: the None test only narrows the type"),
    *(("dsakit/compare/pr_check.py", "assert check.base is not None and check.pr is not None", after,
       "a type-narrowing assert: run_all sets both runs before the report; a missing run raises on the next lines anyway")
      for after in ("assert check.base is not None or check.pr is not None", "assert (check.pr is not None)",
                    "assert (check.base is not None)")),
    *(("dsakit/compare/pr_check.py", "for v in sorted(verdicts, key=lambda v: (order.get(v.device, 0), v.detail, v.test)):",
       f"for v in sorted(verdicts, key=lambda v: (order.get(v.device, {default}), v.detail, v.test)):",
       "every verdict's device is one of the checks' (verdicts() names its check's device): the default is never used")
      for default in ("1", "(-1)")),
    ("dsakit/compare/pr_check.py", "if check.pr is not None and (groups := group_causes(_causes(check)))]",
     "if (groups := group_causes(_causes(check)))]",
     "run_all sets every check's PR run before a PrCheck is made: the None test only narrows the type"),
    ("dsakit/compare/pr_vs_base.py", "ended = False", "ended = None", "read only as `if not ended`: None and False alike"),
    *(("dsakit/compare/pr_vs_base.py", "elif b_fail and p_fail:", after,
       "the two branches above take every change where exactly one run fails: here both fail or neither")
      for after in ("elif b_fail or p_fail:", "elif b_fail:", "elif p_fail:")),
    ("dsakit/gates/inventory.py", "if reason.code in wanted:", "if True:",
     "skipped_behind returns only the codes asked for (its last line): the other codes' lists are never read"),
    ("dsakit/gates/inventory.py", "self.declared: dict[str, list[str]] | None = {}",
     "self.declared: dict[str, list[str]] & None = {}",
     "an annotation: the module has `from __future__ import annotations`, so it is never evaluated"),
    ("dsakit/gates/inventory.py", "self.report_error: str | None = None", 'self.report_error: str | None = ""',
     "every reader tests it for truth (`if self.report_error`, `or self.report_error`): None and '' alike"),
    ("dsakit/gates/inventory.py",
     "self._recorder: OutcomeRecorder | None = None  # made when the first outcome is recorded",
     "self._recorder: OutcomeRecorder & None = None  # made when the first outcome is recorded",
     "an annotation: the module has `from __future__ import annotations`, so it is never evaluated"),
    ("dsakit/gates/inventory.py", "self.report_error: str | None = None", "self.report_error: str & None = None",
     "an annotation: the module has `from __future__ import annotations`, so it is never evaluated"),
]

_RT, _AR, _KC = "dsakit/simulation/runtime.py", "dsakit/simulation/arch_rules.py", "dsakit/topk/kernel_contracts.py"
_SC = "dsakit/gates/skip_causes.py"
_FIRST_ARG = "a one-argument kind (every rule of it in the table reads one argument): args[-1] is args[0]"
EQUIVALENT += [
    (_RT, "same_vendor = real.is_gpu and real.vendor == device.vendor", "same_vendor = (real.vendor == device.vendor)",
     "a machine without a GPU has vendor 'cpu', which matches only a cpu device: placed on 'device' either way"),
    (_RT, 'query.__name__ = getattr(real, "__name__", "query")', 'query.__name__ = getattr(real, "__name__", "XXqueryXX")',
     "torch.cuda's queries are functions: they have a __name__, the default is never used"),
    *((_RT, before, before.replace("args[0]", "args[(-1)]"),
       "a property getter or get_device() is called with the tensor alone: args[-1] is args[0]")
      for before in ("return _marked(args[0])", "return cuda0 if _marked(args[0]) else func(*args, **kwargs)",
                     "return 0 if _marked(args[0]) else func(*args, **kwargs)")),
    (_RT, 'if owner is data and getattr(func, "__name__", "") == "__set__":  # param.data = t (Module.cuda)',
     'if owner is data and getattr(func, "__name__", "XXXX") == "__set__":  # param.data = t (Module.cuda)',
     "the data descriptor's getter and setter have a __name__: the default is never used"),
    (_RT, "return args[0]", "return args[(-1)]", "pin_memory() is called on the tensor alone: args[-1] is args[0]"),
    (_RT, "wants_cpu = wants_cpu or any(not _is_cuda(a) for a in targets) or (",
     'wants_cpu = (any(not _is_cuda(a) for a in targets) or ("device" in kwargs and not wants_cuda)',
     "in the moves branch func is Tensor.to, never Tensor.cpu: the wants_cpu dropped is False there"),
    (_RT, 'kwargs["pin_memory"] = False', 'kwargs["pin_memory"] = None', "torch reads pin_memory=None as False"),
    (_RT, "targets = [a for a in args[1:] if isinstance(a, (str, torch.device))]",
     "targets = [a for a in args[0:] if isinstance(a, (str, torch.device))]",
     "args[0] is the tensor moved, never a str or a torch.device: the filter drops it"),
    (_RT, 'if first is not None and result is first and getattr(func, "__name__", "").endswith("_"):',
     'if first is not None and result is first and getattr(func, "__name__", "XXXX").endswith("_"):',
     "every function a torch function mode is handed has a __name__: the default is never used"),
    (_RT, 'if first is not None and result is first and getattr(func, "__name__", "").endswith("_"):',
     'if ((result is first) and getattr(func, "__name__", "").endswith("_")):',
     "first is None only for a call without positional arguments: `result is first` then means a None result, "
     "returned early or late alike"),
    (_RT, "if result is first and _marked(result):", "if _marked(result):",
     "a .cpu() / .to(cpu) result that is not the tensor itself is a fresh tensor, never marked"),
    (_RT, "if wants_cuda and func is not to_cuda and result is first and not _marked(result):",
     "if (wants_cuda and (result is first) and (not _marked(result))):",
     "for .cuda() the result is the marked tensor itself or a fresh clone: `result is first and not marked` never holds"),
    (_RT, "if hasattr(cuda, name):", "if True:",
     "every name the CPU-placed runtime answers exists in torch.cuda of SGLang's pinned torch: none is added"),
    *((_AR, "value = _arg(a, rule.args[0])", "value = _arg(a, rule.args[(-1)])", _FIRST_ARG),),
    *((_AR, 'return None if int(value.shape[0]) == batch + 1 else f"{int(value.shape[0])} entries for batch_size {batch}"',
       after, "reached only for a 1-D tensor (the guard above): shape[-1] is shape[0]")
      for after in ('return None if int(value.shape[(-1)]) == batch + 1 else f"{int(value.shape[0])} entries for batch_size {batch}"',
                    'return None if int(value.shape[0]) == batch + 1 else f"{int(value.shape[(-1)])} entries for batch_size {batch}"')),
    *((_AR, "sms = DEVICES[arch].multiprocessors or 0", after,
       "every arch a counter rule is declared for (SM 10.x) has its SM count in the device table: the fallback is never used")
      for after in ("sms = DEVICES[arch].multiprocessors or 1", "sms = DEVICES[arch].multiprocessors",
                    "sms = DEVICES[arch].multiprocessors or (-1)")),
    (_AR, "need = trtllm_counter_bytes(int(query.shape[0]), int(query.shape[-2]), sms)",
     "need = trtllm_counter_bytes(int(query.shape[0]), int(query.shape[+2]), sms)",
     "reached only for a 4-D query (the guard above): shape[2] is shape[-2]"),
    *(("dsakit/simulation/reference_kernels.py", "if q1 <= q0:", after,
       "a request with no query tokens computes an empty slice: skipping it only saves the work")
      for after in ("if q1 < q0:", "if False:")),
    (_KC, "value = _arg(a, check.args[0])", "value = _arg(a, check.args[(-1)])", _FIRST_ARG),
    *((_KC, before, before.replace("Violation(check.args[0]", "Violation(check.args[(-1)]", 1), _FIRST_ARG) for before in (
        "return [Violation(check.args[0], f\"dtype must be {' or '.join(check.param)}\", value=_dtype_name(value))]",
        'return [Violation(check.args[0], f"must be {check.param}-D", value=f"shape {tuple(value.shape)}")]',
        'return [Violation(check.args[0], "its last dimension must be contiguous (stride 1): the kernel reads rows as arrays",',
        'return [Violation(check.args[0], f"k must be in 1..{MAX_K}", value=f"k = {k}")]',
        'return [Violation(check.args[0], "must be > 0", value=value)]')),
    (_KC, "k = value.shape[-1] if _is_tensor(value) and value.dim() == 2 else value",
     "k = value.shape[+1] if _is_tensor(value) and value.dim() == 2 else value", "a 2-D tensor's shape[1] is its shape[-1]"),
    (_KC, "if count is not None:", "if True:", "flat[:None] is the whole tensor"),
    (_KC, "begin = _ints(starts, count) if _is_tensor(starts) else [0] * len(values)",
     "begin = _ints(starts) if _is_tensor(starts) else [0] * len(values)",
     "zip stops at the shorter list, and the lengths are already cut to count"),
    (_KC, "dim = check.param or 0", "dim = check.param", "at_most_rows() always sets param (the dimension, 0 by default)"),
    (_SC, 'key = str(device.get("key", ""))', 'key = str(device.get("key", "XXXX"))',
     "neither '' nor 'XXXX' is a device-table key: the lookup falls through alike"),
    (_SC, 'return self.messages.most_common(1)[0][0] if self.messages else ""',
     'return self.messages.most_common(2)[0][0] if self.messages else ""',
     "the first of the two most common is the most common"),
    ("dsakit/gates/sglang_skips.py", 'numbers = release_numbers(release or "")', 'numbers = release_numbers(release or "XXXX")',
     "neither '' nor 'XXXX' holds release numbers"),
    ("dsakit/gates/sglang_skips.py", "if not numbers:", "if False:",
     "no numbers sort before every table's first release: no table holds them, the same empty answer"),
]

# (module, line number, the line before, the line after, why): where the same change on another line
# of the module is not equivalent; the line number is the module's as measured (re-check it after edits)
EQUIVALENT_AT: list[tuple[str, int, str, str, str]] = [
    ("dsakit/audit/suite_device.py", 134, "continue", "break",
     "the `except SyntaxError` of decided(): it parses ast.unparse of a parsed expression (probe calls swapped "
     "for names), which always parses, so the branch is never taken"),
]

# (module, the line before): string literals on these lines are data, not wording
DATA_STRINGS: list[tuple[str, str]] = [
]


def _changed(diff: str) -> tuple[str, str]:
    minus = [l[1:].strip() for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    plus = [l[1:].strip() for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
    return (minus[0] if minus else ""), (plus[0] if plus else "")


def label(mutant: Any) -> tuple[str, str]:
    before, after = _changed(mutant.diff)
    for module, old, new, reason in EQUIVALENT:
        if module == mutant.module and old == before and new == after:
            return "equivalent", reason
    for module, line, old, new, reason in EQUIVALENT_AT:
        if module == mutant.module and line == mutant.line and old == before and new == after:
            return "equivalent", reason
    if mutant.verdict == "no test":
        return "real", "no focused test calls this code"
    if mutant.kind in ("string", "wording") and (mutant.module, before) not in DATA_STRINGS:
        return "wording", ""
    return "real", ""
