"""A skip's cause as the report stores it and the merge reads it back, where it runs in words, and
the device table's entry a report's device is (issue 45 item 4: the mutation run's core)."""

from __future__ import annotations

from dsakit.gates.device_model import DeviceModel, simulated_model
from dsakit.gates.skip_causes import UNCODED, Cause, runs_on_text, table_key


def test_a_cause_reads_back_what_the_report_stored() -> None:
    cause = Cause("fa3", "FA3 needs SM 9.0", "fa3 needs SM 9.x", ("sm90",), "real hardware only", ("sm~10",))
    assert Cause.from_dict(cause.as_dict()) == cause


def test_a_cause_missing_its_fields_falls_back_to_its_code_and_first_clause() -> None:
    assert Cause.from_dict({}) == Cause(UNCODED, "", "not explained")
    assert Cause.from_dict({"code": None, "message": None, "words": None}) == Cause(UNCODED, "", "not explained")
    coded = Cause.from_dict({"code": "gpus:2", "message": "needs 2 GPUs ; this node has 1", "runs_on": None})
    assert coded == Cause("gpus:2", "needs 2 GPUs ; this node has 1", "[gpus:2] needs 2 GPUs")
    read = Cause.from_dict({"code": "fa3", "runs_on": ["sm90", 100], "note": None, "also": ["sm~10"]})
    assert (read.runs_on, read.note, read.also, read.words) == (("sm90", "100"), "", ("sm~10",), "[fa3] ")


def test_where_a_cause_runs_in_words() -> None:
    assert runs_on_text(("sm90", "sm100"), "real hardware only") == "sm90, sm100 (real hardware only)"
    assert runs_on_text(("sm90", "sm100"), "") == "sm90, sm100"
    assert runs_on_text((), "where flashinfer is installed") == "where flashinfer is installed"
    assert runs_on_text((), "") == "unknown"
    assert Cause("fa3", "", "", ("sm90",), "rerun alone").runs_on_text() == "sm90 (rerun alone)"


def test_a_reports_device_is_its_table_entry() -> None:
    assert table_key(simulated_model("sm103").as_dict()) == "sm103"
    assert table_key({"key": "gfx950"}) == "gfx950"  # a simulated device names its entry
    assert table_key(DeviceModel("real", "cpu", "CPU").as_dict()) == "cpu"
    assert table_key(DeviceModel("real", "nvidia", "NVIDIA B300", (10, 3)).as_dict()) == "sm103"
    mi355 = DeviceModel("real", "amd", "AMD Instinct MI355X", (9, 5), "gfx950")
    assert table_key(mi355.as_dict()) == "gfx950"
    assert table_key(DeviceModel("real", "amd", "AMD Instinct MI250X", (9, 0), "gfx90a").as_dict()) == "gfx90a"
    assert table_key(DeviceModel("real", "amd", "an unlisted AMD GPU", (9, 0), "gfx1100").as_dict()) is None
    assert table_key({"key": "real"}) is None  # no vendor: no entry


def _cause(*codes: str, device: str = "sm90") -> Cause:
    from dsakit.gates.skip_causes import explain
    from dsakit.reasons import Reason

    return explain("", [Reason(code, f"the {code} sentence") for code in codes], None, device)


def test_a_dsakit_reason_says_where_its_case_runs_by_its_gates_kind() -> None:
    from dsakit.gates.table import gate_for

    device = _cause("sm~10")
    assert (device.words, device.runs_on, device.note) == ("sm~10 needs the SM 10.x family on NVIDIA", ("sm100", "sm103"), "")
    for code, note in (("module:flashinfer", "where {} is installed"), ("sglang:dsa-backend", "on {}"),
                       ("jit:tvm-ffi-nvcc", "where {} is available")):
        cause = _cause(code)
        assert (cause.runs_on, cause.note) == ((), note.format(gate_for(code).requirement)), code
    poisoned = _cause("cuda-context-poisoned", device="sm103")
    assert (poisoned.words, poisoned.runs_on, poisoned.note) == (
        "not run after another test poisoned the CUDA context", ("sm103",), "rerun alone")
    other = _cause("topk-k-unsupported")  # a reason code that is no gate
    assert (other.words, other.runs_on, other.note) == ("[topk-k-unsupported] the topk-k-unsupported sentence", (), "")


def test_a_skips_other_closed_gates_are_its_also_once_each() -> None:
    cause = _cause("fa3", "module:flashinfer", "fa3", "module:flashinfer", "sm~10")
    assert (cause.code, cause.also) == ("fa3", ("module:flashinfer", "sm~10"))
    assert _cause("fa3", "fa3").also == ()


def test_a_skip_without_a_message_or_a_reason_is_uncoded() -> None:
    from dsakit.gates.skip_causes import explain

    assert explain("  ", [], "0.5.21", "sm90") == Cause(UNCODED, "no reason given", "not explained", (), "unknown")


def test_the_devices_opening_a_code_in_table_order() -> None:
    from dsakit.gates.skip_causes import devices_opening

    assert devices_opening(("sm~10",)) == ("sm100", "sm103")
    assert devices_opening(("gfx in gfx950,gfx942", "fa3")) == ("sm90", "gfx942", "gfx950")


def test_sglangs_message_classified_keeps_where_its_row_says_it_runs() -> None:
    from dsakit.gates.sglang_skips import NOWHERE
    from dsakit.gates.skip_causes import explain

    cause = explain("DSA decode impl `fa3` does not support FP8 KV cache", [], "0.5.21", "sm90")
    assert (cause.code, cause.words, cause.runs_on, cause.note) == ("fp8-kv", "FP8 KV decode needs flashmla_kv", (), NOWHERE)


def test_a_group_without_skips_has_no_representative_message() -> None:
    from dsakit.gates.skip_causes import CauseGroup

    assert CauseGroup("fa3").reason == ""
