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
