"""Server time and cost per benchmark, and the summary's rows for every benchmark.

The Modal run is the whole plugin on the Modal backend with the deployed app's URL pointing at
the local OpenAI test server (as in tests/test_modal_app.py): only the lookup of the deployed
app and of its chat template are replaced, since they talk to Modal.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pytest_modal_eval.config.gpu_prices import DEFAULT_GPU_PRICES, parse_prices
from pytest_modal_eval.serving.costs import ServerTime
from pytest_modal_eval.serving.endpoint import Endpoint, EndpointInfo, ServerStartup
from pytest_modal_eval.serving.modal.backend import ModalServer
from tests.conftest import BenchmarkProject

PROXY_ENV = {
    "MODAL_PROXY_TOKEN_ID": "wk-test",
    "MODAL_PROXY_TOKEN_SECRET": "ws-test",
    "VLLM_API_KEY": "key-test",
}


def test_gpu_hours_and_cost_from_the_price_table() -> None:
    half_hour_on_two = ServerTime("modal", "H100:2", startup_s=100.0, server_s=1800.0)
    data = half_hour_on_two.to_json({})
    assert data["gpu_hours"] == 1.0
    assert data["est_cost_usd"] == pytest.approx(DEFAULT_GPU_PRICES["H100"], abs=1e-4)
    assert data["price_source"].startswith("Modal list price 20")
    assert half_hour_on_two.to_json({"H100": 2.0})["est_cost_usd"] == 2.0
    # Hours and cost follow from the seconds as recorded, so a reader can check the record.
    short = ServerTime("modal", "A100-80GB:2", 0.4, 0.46).to_json({"A100-80GB": 36.0})
    assert short["server_s"] == 0.5
    assert (short["gpu_hours"], short["est_cost_usd"]) == (round(0.5 * 2 / 3600, 4), 0.01)
    # A local server has no GPU bill: time only.
    assert ServerTime("local", "H100:2", 5.0, 50.0).to_json({}) == {
        "backend": "local",
        "server_startup_s": 5.0,
        "server_s": 50.0,
    }
    assert parse_prices(["a100 = 1.5", "# comment", ""]) == {"A100-40GB": 1.5}
    with pytest.raises(ValueError, match="TYPE = USD_PER_GPU_HOUR"):
        parse_prices(["H100: 3"])


def test_modal_run_reports_startup_server_time_gpu_hours_and_cost(
    project: BenchmarkProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    for var, value in PROXY_ENV.items():
        monkeypatch.setenv(var, value)
    project.add("alpha", n=4, extra_yaml="infra: {gpu: 'A100-80GB:2'}\n")
    project.pytester.makeini(
        "[pytest]\naddopts = -p no:randomly\nmodal_eval_gpu_prices =\n    A100-80GB = 36\n"
    )
    project.server.configure(model="org/x", require_key=PROXY_ENV["VLLM_API_KEY"])

    def found_after_a_lookup(self: ModalServer, name: str) -> str:
        time.sleep(0.3)  # a start-up long enough to show at the recorded 0.1 s precision
        return project.server.url

    monkeypatch.setattr(ModalServer, "_web_url", found_after_a_lookup)
    provenance = {"source": "model:tokenizer_config.json", "sha256": "cd" * 32}
    monkeypatch.setattr(ModalServer, "_read_template_dict", lambda self, name: provenance)

    result = project.pytester.runpytest("--model", "org/x", "--backend", "modal")

    result.assert_outcomes(passed=1)
    [metadata] = (project.pytester.path / "outputs").glob("evals/alpha--*/*/metadata.json")
    serving = json.loads(metadata.read_text())["serving"]
    assert serving["backend"] == "modal"
    assert serving["gpu"] == "A100-80GB:2"
    assert 0 < serving["server_startup_s"] <= serving["server_s"]
    # The record is self-consistent: hours and cost follow from the recorded seconds, up to
    # their own 4-decimal rounding.
    assert serving["gpu_hours"] == pytest.approx(serving["server_s"] * 2 / 3600, abs=5e-5)
    assert serving["usd_per_gpu_hour"] == 36
    assert serving["est_cost_usd"] == pytest.approx(serving["server_s"] * 2 / 3600 * 36, abs=5e-5)
    assert serving["price_source"] == "ini modal_eval_gpu_prices"
    # One start-up record: its phases in run_config.json (what `show` prints), its total here.
    config = json.loads((metadata.parent / "run_config.json").read_text())
    phases = config["server_startup"]
    assert "until_serving" in phases
    assert serving["server_startup_s"] >= max(phases.values()) - 0.1
    result.stdout.fnmatch_lines(
        [
            "alpha (org/x): server: start-up *s, *s in use; * GPU-hours (A100-80GB:2), est. $*",
            "serving: * GPU-hours in total, est. $* at GPU list prices*",
        ]
    )


def test_a_bad_price_line_is_a_usage_error(project: BenchmarkProject) -> None:
    project.add("alpha", n=2)
    project.pytester.makeini("[pytest]\nmodal_eval_gpu_prices =\n    H100 three dollars\n")
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*modal_eval_gpu_prices: cannot read 'H100 three dollars'*"])


def test_summary_has_error_rows_and_run_paths_relative_to_the_rootdir(
    project: BenchmarkProject,
) -> None:
    project.add("alpha", n=3)
    project.add("beta", n=3)
    # An error of the item's setup (its environment loads then): a row of its own.
    (project.evals / "data" / "beta.jsonl").write_text("not json\n")
    result = project.run()
    result.assert_outcomes(passed=1, errors=1)
    out = result.stdout.str()
    summary = out[out.index("evaluation summary") :]
    # Table rows: the benchmark, then the model (the lines after the table have "alpha (model)").
    [alpha_row] = [line for line in summary.splitlines() if line.startswith("alpha  ")]
    run_dir = alpha_row.split()[-1]
    assert run_dir.startswith("outputs/evals/alpha--test-model/"), alpha_row
    assert (Path(project.pytester.path) / run_dir / "metadata.json").exists()
    [beta_row] = [line for line in summary.splitlines() if line.startswith("beta  ")]
    assert beta_row.split()[:2] == ["beta", "test-model"] and "ERROR" in beta_row.split()
    result.stdout.fnmatch_lines(["beta (test-model): ERROR: *beta.jsonl:1: not valid JSON*"])

    # With two models, each errored item's row and line name its model.
    project.server.configure(models={"other-model": {}})
    both = project.run("--model", "other-model", "-k", "beta")
    both.assert_outcomes(errors=2)
    out = both.stdout.str()
    summary = out[out.index("evaluation summary") :]
    rows = [line.split() for line in summary.splitlines() if line.startswith("beta  ")]
    table = sorted(row[:2] for row in rows if row[5:6] == ["ERROR"])
    assert table == [["beta", "other-model"], ["beta", "test-model"]]
    both.stdout.fnmatch_lines(
        [
            "beta (other-model): ERROR: *not valid JSON*",
            "beta (test-model): ERROR: *not valid JSON*",
        ]
    )


def test_the_start_up_record_crosses_to_workers_and_counts_for_its_item() -> None:
    """EndpointInfo goes to xdist workers as JSON: its start-up record comes back whole, and
    only the item that started the server waited for it."""
    startup = ServerStartup(2.5, "evals/a.yaml::a", {"deploy": 1.2, "until_serving": 1.1})
    info = EndpointInfo(
        Endpoint("http://127.0.0.1:9/v1", "m"), {"backend": "modal"}, startup=startup
    )
    assert EndpointInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    assert (info.waited_by("evals/a.yaml::a"), info.waited_by("evals/b.yaml::b")) == (2.5, 0.0)
    unstarted = EndpointInfo(Endpoint("http://127.0.0.1:9/v1", "m"), {"backend": "endpoint"})
    assert EndpointInfo.from_json(json.loads(json.dumps(unstarted.to_json()))) == unstarted
    assert unstarted.waited_by("evals/a.yaml::a") == 0.0
