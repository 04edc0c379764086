"""Chat-template resolution and the bundled fallback templates."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pytest_modal_eval.exceptions import ServingError
from pytest_modal_eval.serving import chat_template as ct

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>add</think>\n\n4"},
    {"role": "user", "content": "3+3?"},
]
USER_ONLY = [{"role": "user", "content": "2+2?"}]


def render(name: str, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    # The environment transformers (hence vLLM) renders chat templates in.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    text = (ct.TEMPLATES_DIR / f"{name}.jinja").read_text()
    return env.from_string(text).render(
        messages=messages, add_generation_prompt=add_generation_prompt
    )


# -- the bundled templates -----------------------------------------------------------------


def test_base_renders_chatml_turns() -> None:
    assert render("base", CONVERSATION) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>add</think>\n\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render("base", USER_ONLY, add_generation_prompt=False) == (
        "<|im_start|>user\n2+2?<|im_end|>\n"
    )


def test_math_asks_for_boxed_only_without_a_system_prompt() -> None:
    assert render("math", USER_ONLY) == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within "
        "\\boxed{}.<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render("math", CONVERSATION) == render("base", CONVERSATION)


def test_code_asks_for_a_code_block_only_without_a_system_prompt() -> None:
    rendered = render("code", USER_ONLY)
    assert rendered.startswith("<|im_start|>system\nYou are an expert programmer.")
    assert "fenced code block" in rendered
    assert rendered.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert render("code", CONVERSATION) == render("base", CONVERSATION)


def test_think_opens_a_think_block_and_drops_past_reasoning() -> None:
    assert render("think", CONVERSATION) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\n3+3?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    assert not render("think", USER_ONLY, add_generation_prompt=False).endswith("<think>\n")


def test_none_content_renders_empty() -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None}]
    assert "<|im_start|>assistant\n<|im_end|>\n" in render("base", messages)  # type: ignore[arg-type]


# -- fallbacks -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ct.BUNDLED_TEMPLATES)
def test_bundled_fallbacks_load(name: str) -> None:
    fallback = ct.load_fallback(name)
    assert fallback is not None
    assert fallback.label == f"{name}.jinja"
    assert fallback.text == (ct.TEMPLATES_DIR / f"{name}.jinja").read_text()


def test_user_template_by_absolute_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.jinja"
    path.write_text("{{ messages[0]['content'] }}")
    fallback = ct.load_fallback(str(path))
    assert fallback == ct.FallbackTemplate(label=str(path), text="{{ messages[0]['content'] }}")
    assert ct.FallbackTemplate.from_json(fallback.to_json()) == fallback


@pytest.mark.parametrize("spec", ["mistral", "relative/t.jinja", "/abs/not-a-template.txt"])
def test_bad_fallback_names_are_user_errors(spec: str) -> None:
    with pytest.raises(ServingError, match="neither a bundled template"):
        ct.load_fallback(spec)


def test_missing_user_template_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(ServingError, match="cannot read chat_template"):
        ct.load_fallback(str(tmp_path / "absent.jinja"))


def test_no_fallback() -> None:
    assert ct.load_fallback(None) is None


# -- the model's own template --------------------------------------------------------------


def write_model(path: Path, *, jinja: str | None = None, config_template: object = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    config: dict[str, object] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if config_template is not None:
        config["chat_template"] = config_template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (path / "chat_template.jinja").write_text(jinja)
    return path


def test_jinja_file_wins_like_transformers(tmp_path: Path) -> None:
    model = write_model(tmp_path, jinja="FILE", config_template="CONFIG")
    assert ct.model_chat_template(model) == ("model:chat_template.jinja", "FILE")


def test_tokenizer_config_template(tmp_path: Path) -> None:
    model = write_model(tmp_path, config_template="CONFIG")
    assert ct.model_chat_template(model) == ("model:tokenizer_config.json", "CONFIG")


def test_named_templates_use_default(tmp_path: Path) -> None:
    named = [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEF"}]
    model = write_model(tmp_path, config_template=named)
    assert ct.model_chat_template(model) == ("model:tokenizer_config.json", "DEF")


def test_no_template_of_its_own(tmp_path: Path) -> None:
    assert ct.model_chat_template(write_model(tmp_path)) is None
    assert ct.model_chat_template(tmp_path / "empty-dir") is None


# -- the decision --------------------------------------------------------------------------


def test_own_template_wins_over_fallback(tmp_path: Path) -> None:
    model = write_model(tmp_path, config_template="CONFIG")
    choice = ct.resolve_chat_template(model, ct.load_fallback("math"))
    assert choice.text is None  # nothing to pass: vLLM uses the model's
    assert choice.provenance == {
        "source": "model:tokenizer_config.json",
        "sha256": ct.sha256_text("CONFIG"),
    }


def test_fallback_when_the_model_has_none(tmp_path: Path) -> None:
    fallback = ct.load_fallback("math")
    assert fallback is not None
    choice = ct.resolve_chat_template(write_model(tmp_path), fallback)
    assert choice.text == fallback.text
    assert choice.provenance == {
        "source": "fallback:math.jinja",
        "sha256": ct.sha256_text(fallback.text),
    }


def test_neither_is_recorded(tmp_path: Path) -> None:
    choice = ct.resolve_chat_template(write_model(tmp_path), None)
    assert choice == ct.TemplateChoice(None, {"source": "none", "sha256": ""})


def test_unreachable_model_files_are_unknown_not_guessed() -> None:
    choice = ct.resolve_chat_template(None, ct.load_fallback("base"))
    assert choice.text is None
    assert choice.provenance["source"].startswith("unknown")


def test_explicit_chat_template_in_extra_args_wins(tmp_path: Path) -> None:
    model = write_model(tmp_path)
    template = tmp_path / "mine.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    spellings = (
        ["--chat-template", str(template)],
        [f"--chat-template={template}"],
        ["--chat_template", str(template)],  # vLLM's parser takes underscores too
        [
            "--chat-template",
            "/elsewhere.jinja",
            "--max-num-seqs",
            "8",
            f"--chat-template={template}",
        ],
    )
    for extra in spellings:
        choice = ct.resolve_chat_template(model, ct.load_fallback("base"), extra_args=extra)
        assert choice == ct.TemplateChoice(
            None,
            {"source": "extra_args:--chat-template", "sha256": ct.sha256_text("{{ messages }}")},
        ), extra


def test_editing_an_explicit_template_file_changes_its_provenance(tmp_path: Path) -> None:
    """The file's text is hashed, not its path: a run with the edited template is a new run,
    not the continuation (or the finished reuse) of one made with the old text."""
    template = tmp_path / "mine.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    extra = ("--chat-template", str(template))
    before = ct.resolve_chat_template(None, None, extra_args=extra).provenance
    assert ct.decided_now(before, "org/uncached", None, extra_args=extra)
    template.write_text("{{ messages }}!", encoding="utf-8")
    assert ct.resolve_chat_template(None, None, extra_args=extra).provenance != before
    assert not ct.decided_now(before, "org/uncached", None, extra_args=extra)


def test_an_inline_or_remote_explicit_template_is_hashed_as_given() -> None:
    for value in ("{% for m in messages %}{{ m.content }}{% endfor %}", "/not/here.jinja"):
        choice = ct.resolve_chat_template(None, None, extra_args=("--chat-template", value))
        assert choice.provenance["sha256"] == ct.sha256_text(value)


def test_resolve_for_a_local_directory(tmp_path: Path) -> None:
    model = write_model(tmp_path, jinja="J")
    assert ct.resolve_for_model(str(model), None).provenance["source"] == (
        "model:chat_template.jinja"
    )


def test_hub_id_offline_and_uncached_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    # The hub library reads these at import; patch its constants so nothing goes to the network.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    choice = ct.resolve_for_model("org/not-cached", ct.load_fallback("base"))
    assert choice.text is None
    assert choice.provenance["source"].startswith("unknown")


def test_hub_id_from_a_cached_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    # A cache laid out the way huggingface_hub writes it: refs/main -> snapshots/<commit>/.
    repo = tmp_path / "models--org--cached"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    write_model(repo / "snapshots" / commit, config_template="CACHED")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    choice = ct.resolve_for_model("org/cached", ct.load_fallback("base"))
    assert choice.provenance == {
        "source": "model:tokenizer_config.json",
        "sha256": ct.sha256_text("CACHED"),
    }


# -- would a server started now apply a finished run's template? (no server, no network) ----


def test_decided_now_is_exact_for_a_local_model_directory(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", jinja="OWN")
    recorded = ct.resolve_for_model(str(model), ct.load_fallback("math")).provenance
    assert ct.decided_now(recorded, str(model), "math")
    (model / "chat_template.jinja").write_text("OWN, edited")
    assert not ct.decided_now(recorded, str(model), "math")


def test_decided_now_sees_a_model_directory_gain_a_template(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m")
    recorded = ct.resolve_for_model(str(model), ct.load_fallback("base")).provenance
    assert recorded["source"] == "fallback:base.jinja"
    assert ct.decided_now(recorded, str(model), "base")
    assert not ct.decided_now(recorded, str(model), "math")  # another fallback
    (model / "chat_template.jinja").write_text("NEW")
    assert not ct.decided_now(recorded, str(model), "base")


def test_decided_now_reads_a_user_fallback_file_again(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m")
    template = tmp_path / "mine.jinja"
    template.write_text("{{ messages }}")
    recorded = ct.resolve_for_model(str(model), ct.load_fallback(str(template))).provenance
    assert ct.decided_now(recorded, str(model), str(template))
    template.write_text("{{ messages }} fixed")
    assert not ct.decided_now(recorded, str(model), str(template))
    template.unlink()
    assert not ct.decided_now(recorded, str(model), str(template))  # the start will say why


def test_decided_now_with_an_explicit_template_in_extra_args(tmp_path: Path) -> None:
    explicit = ("--chat-template", "/t.jinja")
    recorded = ct.resolve_chat_template(None, None, extra_args=explicit).provenance
    assert ct.decided_now(recorded, "org/uncached", None, extra_args=explicit)
    assert not ct.decided_now(recorded, "org/uncached", None)


def test_decided_now_for_a_hub_model_not_in_the_local_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Modal the container decides from files this machine may not have: the model's own
    template is taken as unchanged, a fallback is checked, anything else is not reused."""
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    calls: list[dict[str, object]] = []
    download = huggingface_hub.snapshot_download

    def recorded_download(repo_id: str, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return download(repo_id, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", recorded_download)
    own = {"source": "model:tokenizer_config.json", "sha256": "ab" * 32}
    assert ct.decided_now(own, "org/x", "math")
    math = ct.resolve_chat_template(tmp_path, ct.load_fallback("math")).provenance
    assert ct.decided_now(math, "org/x", "math")
    assert not ct.decided_now(math, "org/x", "base")
    assert not ct.decided_now({**math, "sha256": "00" * 32}, "org/x", "math")
    unknown = ct.resolve_chat_template(None, None).provenance
    assert not ct.decided_now(unknown, "org/x", "math")
    assert not ct.decided_now("math", "org/x", "math")  # not a recorded decision
    assert calls and all(call.get("local_files_only") is True for call in calls)


def test_decided_now_is_exact_for_a_cached_hub_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    repo = tmp_path / "models--org--cached"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    write_model(repo / "snapshots" / commit, config_template="CACHED")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    cached = {"source": "model:tokenizer_config.json", "sha256": ct.sha256_text("CACHED")}
    assert ct.decided_now(cached, "org/cached", None)
    assert not ct.decided_now({**cached, "sha256": ct.sha256_text("OLD")}, "org/cached", None)


def test_decided_now_for_modal_ignores_what_this_machine_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Modal container fetches the model from the Hub: a directory or a cached snapshot
    here may differ from it, so only the loose rules apply."""
    from huggingface_hub import constants

    model = write_model(tmp_path / "org" / "x", jinja="A FINE-TUNE'S OWN")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    here = ct.resolve_for_model(str(model), None).provenance
    upstream = {"source": "model:tokenizer_config.json", "sha256": "cd" * 32}
    assert ct.decided_now(here, "org/x", None)
    assert not ct.decided_now(upstream, "org/x", None)
    # Modal: the directory is not what the container serves; the newest run's own template
    # (whatever its text) is taken, as for any Hub model not on this machine.
    assert ct.decided_now(upstream, "org/x", None, served_from_here=False)
    math = ct.resolve_chat_template(tmp_path / "empty-cache", ct.load_fallback("math"))
    assert math.provenance["source"] == "fallback:math.jinja"
    assert ct.decided_now(math.provenance, "org/x", "math", served_from_here=False)
    assert not ct.decided_now(math.provenance, "org/x", "base", served_from_here=False)


def test_log_line_round_trip() -> None:
    provenance = {"source": "fallback:math.jinja", "sha256": "ab" * 32}
    logs = "\n".join(
        [
            "INFO starting",
            ct.log_line({"source": "old", "sha256": ""}),
            "noise MODAL_EVAL_CHAT_TEMPLATE {not json",
            "2026-11-26T00:00:00Z " + ct.log_line(provenance),
            "INFO vLLM up",
        ]
    )
    assert ct.parse_log_line(logs) == provenance
    assert ct.parse_log_line("nothing here") is None


# -- with real vLLM: transformers renders our templates the same, vLLM reads them as strings --

_RENDER = """
import json, sys
from transformers.utils.chat_template_utils import render_jinja_template
from vllm.renderers.hf import _detect_content_format
out = {}
for path in sys.argv[2:]:
    text = open(path).read()
    rendered, _ = render_jinja_template(
        conversations=[json.loads(sys.argv[1])], chat_template=text, add_generation_prompt=True
    )
    out[path] = {"rendered": rendered[0], "format": _detect_content_format(text, default="openai")}
print("RENDERED " + json.dumps(out))
"""


@pytest.mark.vllm
def test_real_renderer_agrees() -> None:
    python = os.environ.get("MODAL_EVAL_VLLM_PYTHON")
    if not python:
        pytest.skip("MODAL_EVAL_VLLM_PYTHON is not set (an interpreter with vLLM's CPU build)")
    paths = [str(ct.TEMPLATES_DIR / f"{name}.jinja") for name in ct.BUNDLED_TEMPLATES]
    try:
        result = subprocess.run(
            [python, "-c", _RENDER, json.dumps(CONVERSATION), *paths],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except OSError as exc:
        pytest.skip(f"MODAL_EVAL_VLLM_PYTHON={python} cannot be run: {exc}")
    if result.returncode != 0 and "ModuleNotFoundError" in result.stderr:
        last = result.stderr.strip().splitlines()[-1]
        pytest.skip(f"MODAL_EVAL_VLLM_PYTHON={python} cannot import vllm: {last}")
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(li for li in result.stdout.splitlines() if li.startswith("RENDERED "))
    out = json.loads(line.removeprefix("RENDERED "))
    for name, path in zip(ct.BUNDLED_TEMPLATES, paths, strict=True):
        assert out[path]["rendered"] == render(name, CONVERSATION), name
        # "string": vLLM flattens OpenAI content parts to text before rendering, as we expect.
        assert out[path]["format"] == "string", name
