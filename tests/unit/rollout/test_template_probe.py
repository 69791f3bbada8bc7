"""`rlvr probe template MODEL_DIR`: round-trip of a multi-turn conversation through the chat template."""

import subprocess
import sys

import pytest

from rlvr.commands.probe import run_template_probe
from rlvr.errors import ConfigError
from rlvr.models.tiny import build_tiny
from rlvr.rollout.template_probe import probe_template

QWEN_LIKE = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' + '\\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
DROPS_REASONING = ("{% for m in messages %}{% set c = m['content'] %}"
                   "{% if m['role'] == 'assistant' and not loop.last %}{% set c = c.split('</think>')[-1] %}{% endif %}"
                   "{{ '<|' + m['role'] + '|>' + c + '<|end|>' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
DROPS_TOOLS = ("{% for m in messages %}{% if m['role'] != 'tool' %}{{ '<|' + m['role'] + '|>' + m['content'] + "
               "'<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


def tok_with(template):
    _, tok = build_tiny(size="test")
    if template is not None:
        tok.chat_template = template
    return tok


def test_the_embedded_template_round_trips():
    rep = probe_template(tok_with(None))
    assert rep.ok and rep.frame == ("<|tool|>", "<|end|><|assistant|>") and not rep.issues


def test_a_newline_after_the_end_of_turn_token_belongs_to_the_observation():
    rep = probe_template(tok_with(QWEN_LIKE))
    assert rep.ok and rep.frame[0] == "\n<|tool|>" and any("newline" in n for n in rep.notes)


def test_a_template_that_strips_earlier_reasoning_is_reported_with_the_first_differing_token():
    rep = probe_template(tok_with(DROPS_REASONING))
    assert not rep.ok and rep.mismatch_at is not None
    assert any("strips reasoning" in i for i in rep.issues) and any("differs" in i for i in rep.issues)


def test_a_template_that_drops_tool_messages_cannot_frame_observations():
    rep = probe_template(tok_with(DROPS_TOOLS))
    assert not rep.ok and "followed by the 'tool' message" in rep.issues[0]


def test_cli_exit_status_and_errors(tmp_path):
    good = tmp_path / "good"
    build_tiny(good, size="test")
    assert run_template_probe(str(good)) == 0
    bad = tok_with(DROPS_REASONING)
    bad.save_pretrained(tmp_path / "bad")
    p = subprocess.run([sys.executable, "-m", "rlvr.cli", "probe", "template", str(tmp_path / "bad")],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 1 and "strips reasoning" in p.stdout
    with pytest.raises(ConfigError, match="needs a model folder"):
        run_template_probe(None)
    with pytest.raises(ConfigError, match="cannot load a tokenizer"):
        run_template_probe(str(tmp_path / "nothing"))
